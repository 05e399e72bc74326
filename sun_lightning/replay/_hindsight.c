/* Segmented-future hindsight batches of SegmentedHindsightSampler (hindsight.py) in one pass.
 *
 * The random draws (run positions, cut uniforms, negative positions) come from torch's generator
 * in Python; this file only turns them into a batch, with the exact arithmetic of the tensor path
 * (hindsight.py's _tensor_batch, losses/relabel.py's segment_goal_index, goals/reach.py's exact
 * rule on the tiles the storage keeps per entry), so both give identical batches. That path costs ~100 small torch ops per draw, which
 * dominate the sampling time at these sizes (a few hundred rows of a few dozen floats).
 *
 * Layout (per batch i of k; s runs of t steps, r relabellings, c = r copies, or 2r with negatives):
 *   states      [k, 2·s·t, D]  the runs' observations, then their stored next observations
 *   goals       [k, s·t + s·r, G] the runs' goal projections, then the negatives' (if any)
 *   row keys    [k, s·c, t]    row (run, copy), copy = relabelling·2 + (0 positive | 1 negative)
 */

#include <stdint.h>
#include <string.h>

/* Goal projection of one observation: the dims listed in goal_dims, or all of them if NULL. */
static void project(const float *obs, int64_t obs_dim, const int64_t *goal_dims, int64_t goal_dim, float *out) {
    if (!goal_dims) {
        memcpy(out, obs, (size_t)obs_dim * sizeof(float));
        return;
    }
    for (int64_t g = 0; g < goal_dim; g++) out[g] = obs[goal_dims[g]];
}

/* Segmented-future cuts of one window (segment_goal_index in losses/relabel.py): a segment starting
 * at st ends at e, the first episode end >= st (t-1 if none); its cut is st + (int64)(u[st]·(e-st+1))
 * in float32, clamped to e; steps st..cut get goal cut; the next segment starts at cut+1. */
static void segment_cuts(const uint8_t *end, const float *u, int64_t t, int64_t *cut) {
    int64_t st = 0;
    while (st < t) {
        int64_t e = st;
        while (e < t - 1 && !end[e]) e++;
        float len = (float)(e - st + 1);
        int64_t k = st + (int64_t)(u[st] * len);
        if (k > e) k = e;
        for (int64_t j = st; j <= k; j++) cut[j] = k;
        st = k + 1;
    }
}

/* tiles: each storage entry's tile (exact reach rule), or NULL: then reward is not written (the
 * caller applies its reach rule to the tables).
 * Returns 0, or -1 when a position is outside [0, capacity), -2 for sizes this file does not
 * handle (t above 4096, a goal dimension above the observation's). */
int segmented_batch(
    int64_t k, int64_t s, int64_t t, int64_t r, int64_t negatives,
    int64_t obs_dim, int64_t goal_dim, int64_t capacity, const int64_t *goal_dims,
    const float *obs, const float *next_obs, const int64_t *action, const uint8_t *terminated,
    const uint8_t *episode_end, const int64_t *tiles,
    const int64_t *seq_pos, const float *u, const int64_t *neg_pos,
    float *states, float *goals, int64_t *state_index, int64_t *next_state_index, int64_t *goal_index,
    int64_t *act, int64_t *goal_action, float *reward, uint8_t *term_out, uint8_t *end_out) {
    if (t > 4096 || goal_dim > obs_dim || (!goal_dims && goal_dim != obs_dim)) return -2;
    for (int64_t n = 0; n < k * s * t; n++)
        if (seq_pos[n] < 0 || seq_pos[n] >= capacity) return -1;
    if (negatives)
        for (int64_t n = 0; n < k * s * r; n++)
            if (neg_pos[n] < 0 || neg_pos[n] >= capacity) return -1;

    const int64_t c = negatives ? 2 * r : r, st_rows = s * t, goal_rows = s * t + (negatives ? s * r : 0);
    int64_t cut[4096];
    for (int64_t i = 0; i < k; i++) {
        const int64_t *pos = seq_pos + i * st_rows;
        float *st = states + i * 2 * st_rows * obs_dim;
        float *gl = goals + i * goal_rows * goal_dim;
        /* tables: states, next states, the runs' goals, then the negatives' goals */
        for (int64_t n = 0; n < st_rows; n++) {
            memcpy(st + n * obs_dim, obs + pos[n] * obs_dim, (size_t)obs_dim * sizeof(float));
            memcpy(st + (st_rows + n) * obs_dim, next_obs + pos[n] * obs_dim, (size_t)obs_dim * sizeof(float));
            project(obs + pos[n] * obs_dim, obs_dim, goal_dims, goal_dim, gl + n * goal_dim);
        }
        if (negatives)
            for (int64_t n = 0; n < s * r; n++)
                project(obs + neg_pos[i * s * r + n] * obs_dim, obs_dim, goal_dims, goal_dim,
                        gl + (st_rows + n) * goal_dim);

        for (int64_t run = 0; run < s; run++) {
            const int64_t *rp = pos + run * t;
            uint8_t ends[4096];
            for (int64_t j = 0; j < t; j++) ends[j] = episode_end[rp[j]] != 0;
            for (int64_t cc = 0; cc < c; cc++) {
                const int64_t row = ((i * s + run) * c + cc) * t;
                const int64_t rel = negatives ? cc / 2 : cc;
                const int negative = negatives && (cc & 1);
                if (!negative) segment_cuts(ends, u + ((i * s + run) * r + rel) * t, t, cut);
                const int64_t neg_row = st_rows + run * r + rel;
                const int64_t neg_entry = negative ? neg_pos[(i * s + run) * r + rel] : 0;
                for (int64_t j = 0; j < t; j++) {
                    const int64_t here = run * t + j;
                    const int64_t gi = negative ? neg_row : run * t + cut[j];
                    const int64_t goal_entry = negative ? neg_entry : rp[cut[j]];
                    const int64_t ga = action[goal_entry];
                    const int64_t a = action[rp[j]];
                    state_index[row + j] = here;
                    next_state_index[row + j] = here + st_rows;
                    goal_index[row + j] = gi;
                    act[row + j] = a;
                    goal_action[row + j] = ga;
                    term_out[row + j] = terminated[rp[j]] != 0;
                    end_out[row + j] = ends[j];
                    if (tiles) reward[row + j] = (tiles[rp[j]] == tiles[goal_entry] && a == ga) ? 1.0f : 0.0f;
                }
            }
        }
    }
    return 0;
}
