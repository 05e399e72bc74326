/* The DQN variant's loss (SPEC §5a) and its gradient as one call, CPU, float32.
 *
 * One update's loss is: the rows at which Q is needed (watkins_rows), the online network with
 * dropout and the target network without (q_net_forward of _rows.c, at each row's goal action),
 * Watkins TD(λ) targets (watkins_targets of _watkins.c), Q(s_t, a_t, g_t), the mean Huber loss,
 * and its gradient through the online network (q_net_backward), computed at once in the same call
 * while the saved activations are still in cache.  Called one by one from Python these were
 * ~60 dispatched ops and autograd nodes per update, which on the 2-core CPU machine cost as much
 * as the network's own non-matrix work; here they are one call.  The
 * maths is DQNSVF.td_targets + F.huber_loss (the reference, which tests compare with this).
 *
 * Built in one library with _rows.c and _watkins.c (sun_lightning/native/__init__.py builds it, q_loss.py calls it).
 */
#include <stdint.h>
#include <string.h>

/* _rows.c */
int64_t q_workspace(const int64_t *dims, int which);
int q_net_forward(const int64_t *dims, const float *x_s, const float *x_g, const void *const *params,
                  const int64_t *oi, const int64_t *gi, const int64_t *ga, const float *eps, float slope,
                  const uint64_t *seeds, int threshold, float keep_scale, int save, float *ws, float *sel);
int q_net_backward(const int64_t *dims, const float *x_s, const float *x_g, const void *const *params,
                   const int64_t *oi, const int64_t *gi, const int64_t *ga, float slope, const uint64_t *seeds,
                   int threshold, float keep_scale, float *ws, const float *grad, float *tmp, float *g_params,
                   float *g_x_s, float *g_x_g);
/* _watkins.c */
int watkins_targets(int64_t N, int64_t T, int64_t A, int64_t R, const float *q_on, const float *q_tg,
                    const int64_t *action, const float *reward, const uint8_t *terminated,
                    const uint8_t *episode_end, float gamma, float lam, float clip, float tol,
                    float *restrict target, uint8_t *restrict cont);
int64_t watkins_rows(int64_t N, int64_t T, const int64_t *state, const int64_t *next_state, const int64_t *goal,
                     const int64_t *goal_action, const uint8_t *episode_end, int64_t stride,
                     int64_t *restrict out);

/* shape: N, T (the batch's rows [N, T]), then the network's dims in _rows.c's order with R left
 * out: US, UG, DS, DG, W, P, A2, A.  The row count R is at most 2·N·T (one extra row per step at
 * most); every buffer below is sized for that bound and only its first R rows are touched. */
static void dims_of(const int64_t *shape, int64_t R, int64_t dims[9]) {
    dims[0] = shape[2]; dims[1] = shape[3]; dims[2] = shape[4]; dims[3] = shape[5];
    dims[4] = R; dims[5] = shape[6]; dims[6] = shape[7]; dims[7] = shape[8]; dims[8] = shape[9];
}

/* The scratch of one call, carved from one float buffer in this order: the online network's saved
 * workspace, the target network's workspace (reused by the backward's temporaries once the targets
 * are known), both networks' values at the goal actions, the targets and trace flags, the loss's
 * gradient at the goal actions, and the rows (int64). */
typedef struct { float *saved, *temps, *q_on, *q_tg, *target, *grad_q; uint8_t *cont; int64_t *rows; } Scratch;

static int64_t carve(const int64_t *shape, float *base, Scratch *s) {
    const int64_t NT = shape[0] * shape[1], RM = 2 * NT, A = shape[9];
    int64_t dims[9];
    dims_of(shape, RM, dims);  /* sized for the bound: the layout does not depend on R */
    const int64_t forward = q_workspace(dims, 0), backward = q_workspace(dims, 1);
    float *p = base;
#define TAKE(field, n) do { if (s) s->field = p; p += (n); } while (0)
    TAKE(saved, forward);
    TAKE(temps, forward > backward ? forward : backward);
    TAKE(q_on, RM * A); TAKE(q_tg, RM * A); TAKE(target, NT); TAKE(grad_q, RM * A);
    if (s) s->cont = (uint8_t *)p;
    p += (NT + 3) / 4;
    p += ((uintptr_t)p % 8) / sizeof(float);  /* int64 alignment for the rows */
    if (s) s->rows = (int64_t *)p;
    p += 2 * 3 * RM;
#undef TAKE
    return p - base;
}

/* Floats of the scratch buffer of q_loss (any batch of this shape). */
int64_t q_loss_workspace(const int64_t *shape) {
    return carve(shape, NULL, NULL) + 1;  /* + the rows' alignment */
}

/* The loss of one batch, and with need_grad its gradient, in one call.
 *   x_s, x_g / xt_s, xt_g: the online / target network's encoded state and goal tables.
 *   params, target_params: the two networks' weights (QParams' order).
 *   batch [N, T]: state_index, next_state_index, goal_index, goal_action, action (int64), reward,
 *     terminated and episode_end (bytes).
 *   eps, slope, seeds, threshold, keep_scale: as q_net_forward (the online network's dropout; the
 *     target network runs without).
 *   hyper: γ, λ, bootstrap clip, greedy tolerance, Huber δ.
 *   scratch: q_loss_workspace(shape) floats (64-byte aligned).
 *   loss: the loss; stats: the loss, mean Q(s_t, a_t, g_t), mean target, fraction of continued traces.
 *   need_grad: also write d loss / d (online weights) into the flat g_params (QParams' order), and
 *     into g_x_s / g_x_g the encoded tables' where not NULL.
 * Returns 0, or q_net_forward's / watkins_targets' error (-1 row index, -2 goal action, -3 no
 * sgemm_; -4 an action outside [0, A)), or -5 (the backward's partial sums could not be allocated). */
int q_loss(const int64_t *shape, const float *x_s, const float *x_g, const float *xt_s, const float *xt_g,
           const void *const *params, const void *const *target_params, const int64_t *state_index,
           const int64_t *next_state_index, const int64_t *goal_index, const int64_t *goal_action,
           const int64_t *action, const float *reward, const uint8_t *terminated, const uint8_t *episode_end,
           const float *eps, float slope, const uint64_t *seeds, int threshold, float keep_scale,
           const float *hyper, float *scratch, float *loss_out, float *stats, int need_grad, float *g_params,
           float *g_x_s, float *g_x_g) {
    const int64_t N = shape[0], T = shape[1], NT = N * T, RM = 2 * NT, A = shape[9];
    Scratch s;
    carve(shape, scratch, &s);
    const int64_t R = watkins_rows(N, T, state_index, next_state_index, goal_index, goal_action, episode_end,
                                   RM, s.rows);
    const int64_t *oi = s.rows, *gi = s.rows + RM, *ga = s.rows + 2 * RM;
    int64_t dims[9];
    dims_of(shape, R, dims);
    const uint64_t no_seeds[2] = {0, 0};
    int status = q_net_forward(dims, xt_s, xt_g, target_params, oi, gi, ga, eps, slope, no_seeds, 0, 1.f, 0,
                               s.temps, s.q_tg);
    if (status) return status;
    status = q_net_forward(dims, x_s, x_g, params, oi, gi, ga, eps, slope, seeds, threshold, keep_scale,
                           need_grad, s.saved, s.q_on);
    if (status) return status;
    status = watkins_targets(N, T, A, R, s.q_on, s.q_tg, action, reward, terminated, episode_end, hyper[0],
                             hyper[1], hyper[2], hyper[3], s.target, s.cont);
    if (status) return status == -2 ? -4 : status;
    /* F.huber_loss(q_taken, target, delta), mean over the N·T steps, and its gradient (torch's formula:
     * norm · x inside ±δ, ±norm · δ outside, norm = 1 / NT) */
    const float delta = hyper[4], norm = (float)(1.0 / (double)NT);
    if (need_grad) memset(s.grad_q, 0, sizeof(float) * (size_t)(R * A));
    double loss = 0.0, taken = 0.0, tgt = 0.0, kept = 0.0;
    for (int64_t f = 0; f < NT; ++f) {
        const float q = s.q_on[f * A + action[f]], x = q - s.target[f];
        const float ax = x < 0.f ? -x : x;
        loss += ax < delta ? 0.5f * x * x : delta * (ax - 0.5f * delta);
        if (need_grad) s.grad_q[f * A + action[f]] = x <= -delta ? -norm * delta : x >= delta ? norm * delta : norm * x;
        taken += q;
        tgt += s.target[f];
        kept += s.cont[f];
    }
    *loss_out = stats[0] = (float)(loss / (double)NT);
    stats[1] = (float)(taken / (double)NT);
    stats[2] = (float)(tgt / (double)NT);
    stats[3] = (float)(kept / (double)NT);
    if (!need_grad) return 0;
    status = q_net_backward(dims, x_s, x_g, params, oi, gi, ga, slope, seeds, threshold, keep_scale, s.saved,
                            s.grad_q, s.temps, g_params, g_x_s, g_x_g);
    return status == -1 ? -5 : status;
}
