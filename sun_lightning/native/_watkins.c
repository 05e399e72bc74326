/* Watkins Q(λ) targets of the DQN variant (SPEC §5a), CPU, float32: the no-grad target side of
 * DQNSVF.td_targets in one pass over the batch.  The same maths as the tensor functions of
 * losses/td_lambda.py (double_q_bootstrap, greedy_within, watkins_lambda_returns), in the same
 * operation order, so both give the same floats; those functions remain the reference (and the
 * path on GPU).  Built without fused multiply-adds (sun_lightning/native.py), like PyTorch's CPU ops.
 *
 * Rows of q_on / q_tg [R, A] (values at each row's goal action): row i*T + k is step k of
 * sequence i; the next state of step k is row i*T + k + 1, except where the step is "extra"
 * (an episode end, or k = T - 1): those next states are rows N*T, N*T + 1, ... in flat order.
 */
#include <stdint.h>

/* Returns 0; or, writing nothing, -1 when R is not N*T plus the number of extra steps and -2 when
 * an action is outside [0, A). */
int watkins_targets(int64_t N, int64_t T, int64_t A, int64_t R, const float *q_on, const float *q_tg,
                    const int64_t *action, const float *reward, const uint8_t *terminated,
                    const uint8_t *episode_end, float gamma, float lam, float clip, float tol,
                    float *restrict target, uint8_t *restrict cont) {
    int64_t extras = 0;
    for (int64_t f = 0; f < N * T; ++f) {
        if (action[f] < 0 || action[f] >= A) return -2;
        extras += episode_end[f] || f % T == T - 1;
    }
    if (N * T + extras != R) return -1;
    int64_t extra_row = N * T;
    for (int64_t i = 0; i < N; ++i) {
        float a[T], b[T];  /* G_k = a_k + b_k G_{k+1} */
        for (int64_t k = 0; k < T; ++k) {
            const int64_t f = i * T + k;
            const int extra = episode_end[f] || k == T - 1;
            const int64_t row = extra ? extra_row++ : f + 1;
            const float *on = q_on + row * A, *tg = q_tg + row * A;
            int64_t best = 0;  /* argmax: the first maximal action, as torch.argmax */
            for (int64_t j = 1; j < A; ++j) best = on[j] > on[best] ? j : best;
            const float max = on[best];
            const float boot = tg[best] > clip ? clip : tg[best];
            /* the trace continues into k + 1 if a_{k+1} is greedy within tol (Watkins, relaxed) */
            const int c = !extra && on[action[f + 1]] >= max - tol;
            cont[f] = (uint8_t)c;
            const float g_nd = gamma * ((reward[f] > 0.f || terminated[f]) ? 0.f : 1.f);
            const float lam_c = lam * (float)c;
            a[k] = reward[f] + g_nd * (1.f - lam_c) * boot;
            b[k] = g_nd * lam_c;
        }
        float g = a[T - 1];
        target[i * T + T - 1] = g;
        for (int64_t k = T - 2; k >= 0; --k) {
            g = a[k] + b[k] * g;
            target[i * T + k] = g;
        }
    }
    return 0;
}

/* The rows at which DQNSVF.td_targets evaluates Q, in the layout above: the N*T steps (state,
 * goal, goal action), then, for each extra step in flat order, its next state with the step's goal
 * and goal action.  out holds three arrays of `stride` >= 2*N*T entries (states, goals, goal
 * actions).  Returns the number of rows. */
int64_t watkins_rows(int64_t N, int64_t T, const int64_t *state, const int64_t *next_state, const int64_t *goal,
                     const int64_t *goal_action, const uint8_t *episode_end, int64_t stride,
                     int64_t *restrict out) {
    int64_t *os = out, *og = out + stride, *oa = out + 2 * stride;
    int64_t row = N * T;
    for (int64_t f = 0; f < N * T; ++f) {
        os[f] = state[f]; og[f] = goal[f]; oa[f] = goal_action[f];
        if (episode_end[f] || f % T == T - 1) {
            os[row] = next_state[f]; og[row] = goal[f]; oa[row] = goal_action[f];
            ++row;
        }
    }
    return row;
}
