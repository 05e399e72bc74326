/* Gradient-norm clipping and the AdamW step of torch.optim.AdamW (decoupled weight decay, no
 * amsgrad) in two passes over a list of float32 tensors, CPU: the learner's step of SPEC §5a
 * ("AdamW lr 1e-3, grad-norm clip 1.0"), per element in the operation order of torch's
 * single-tensor AdamW.
 * Built without fused multiply-adds (sun_lightning/native.py), like PyTorch's CPU ops.
 */
#include <stdint.h>
#include <math.h>

/* Σ_k Σ_i grad[k][i]², each tensor summed in double in index order: the squared global L2 norm. */
double sq_norm(int64_t K, const int64_t *numel, float *const *grad) {
    double total = 0.0;
    for (int64_t k = 0; k < K; ++k) {
        const float *restrict g = grad[k];
        double s = 0.0;
        for (int64_t i = 0; i < numel[k]; ++i) s += (double)g[i] * (double)g[i];
        total += s;
    }
    return total;
}

/* One AdamW step of K tensors with their gradients scaled by coef (the clip; 1: none).  Per
 * tensor, step_size[k] = lr / (1 - b1^step_k) and bc2_sqrt[k] = sqrt(1 - b2^step_k); decay =
 * 1 - lr * weight_decay, w1 = 1 - b1, w2 = 1 - b2 (all rounded once from double, as torch's
 * Python scalars are). */
void adamw_step(int64_t K, const int64_t *numel, float *const *param, float *const *grad, float *const *exp_avg,
                float *const *exp_avg_sq, const float *step_size, const float *bc2_sqrt, float coef, float decay,
                float w1, float beta2, float w2, float eps) {
    for (int64_t k = 0; k < K; ++k) {
        float *restrict p = param[k], *restrict m = exp_avg[k], *restrict v = exp_avg_sq[k];
        const float *restrict gr = grad[k];
        const float neg_step = -step_size[k], b2s = bc2_sqrt[k];
        for (int64_t i = 0; i < numel[k]; ++i) {
            const float g = gr[i] * coef;
            const float mi = m[i] + w1 * (g - m[i]);             /* exp_avg.lerp_(g, 1 - b1) */
            const float vi = v[i] * beta2 + (w2 * g) * g;        /* exp_avg_sq.mul_(b2).addcmul_(g, g, 1 - b2) */
            m[i] = mi;
            v[i] = vi;
            p[i] = p[i] * decay + (neg_step * mi) / (sqrtf(vi) / b2s + eps);  /* mul_(decay).addcdiv_ */
        }
    }
}
