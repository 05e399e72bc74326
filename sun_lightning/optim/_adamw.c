/* Elementwise passes over lists of float32 parameter tensors, CPU: the learner's step of SPEC §5a
 * ("AdamW lr 1e-3, grad-norm clip 1.0"; gradient-norm clipping and the AdamW step of
 * torch.optim.AdamW, decoupled weight decay, no amsgrad, per element in the operation order of
 * torch's single-tensor AdamW) and the target network's Polyak step (on its own, or fused into the step).
 * Built without fused multiply-adds (sun_lightning/native.py), like PyTorch's CPU ops.
 */
#include <stdint.h>
#include <math.h>

/* Σ_k Σ_i grad[k][i]², in double: the squared global L2 norm.  Each tensor is summed in 8
 * interleaved partial sums (a latency-bound single chain was ~4x slower), added in a fixed order. */
double sq_norm(int64_t K, const int64_t *numel, float *const *grad) {
    double total = 0.0;
    for (int64_t k = 0; k < K; ++k) {
        const float *restrict g = grad[k];
        double s[8] = {0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0};
        int64_t i = 0;
        for (; i + 8 <= numel[k]; i += 8)
            for (int j = 0; j < 8; ++j) s[j] += (double)g[i + j] * (double)g[i + j];
        for (; i < numel[k]; ++i) s[0] += (double)g[i] * (double)g[i];
        total += ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]));
    }
    return total;
}

/* One AdamW step of K tensors with their gradients scaled by coef (the clip; 1: none).  step[k] is
 * the tensor's step counter (torch.optim.AdamW's state["step"], a float32 scalar), incremented here;
 * the bias corrections are computed from it in double and rounded once, as torch's Python scalars
 * are: step_size = lr / (1 - b1^step), bc2_sqrt = sqrt(1 - b2^step).  decay = 1 - lr · weight_decay.
 * follow (may be NULL): tensors that then take a Polyak step towards the new parameters,
 * follow[k] += tau · (param[k] - follow[k]) (lerp_tensors' formula), while those are in cache. */
void adamw_step(int64_t K, const int64_t *numel, float *const *param, float *const *grad, float *const *exp_avg,
                float *const *exp_avg_sq, float *const *step, double lr, double beta1, double beta2, float coef,
                float decay, float eps, float *const *follow, float tau) {
    const float w1 = (float)(1.0 - beta1), b2 = (float)beta2, w2 = (float)(1.0 - beta2);
    for (int64_t k = 0; k < K; ++k) {
        const float count = *step[k] + 1.f;
        *step[k] = count;
        const float neg_step = (float)-(lr / (1.0 - pow(beta1, (double)count)));
        const float b2s = (float)sqrt(1.0 - pow(beta2, (double)count));
        float *restrict p = param[k], *restrict m = exp_avg[k], *restrict v = exp_avg_sq[k];
        const float *restrict gr = grad[k];
        for (int64_t i = 0; i < numel[k]; ++i) {
            const float g = gr[i] * coef;
            const float mi = m[i] + w1 * (g - m[i]);             /* exp_avg.lerp_(g, 1 - b1) */
            const float vi = v[i] * b2 + (w2 * g) * g;           /* exp_avg_sq.mul_(b2).addcmul_(g, g, 1 - b2) */
            m[i] = mi;
            v[i] = vi;
            p[i] = p[i] * decay + (neg_step * mi) / (sqrtf(vi) / b2s + eps);  /* mul_(decay).addcdiv_ */
        }
        if (follow) {
            float *restrict t = follow[k];
            for (int64_t i = 0; i < numel[k]; ++i) t[i] = t[i] + tau * (p[i] - t[i]);
        }
    }
}

/* target[k] ← target[k] + w · (source[k] - target[k]) for K tensors: torch.lerp_'s formula for w < 0.5
 * (the Polyak step of the target network, τ ≪ 0.5; the caller checks). */
void lerp_tensors(int64_t K, const int64_t *numel, float *const *target, float *const *source, float w) {
    for (int64_t k = 0; k < K; ++k) {
        float *restrict t = target[k];
        const float *restrict s = source[k];
        for (int64_t i = 0; i < numel[k]; ++i) t[i] = t[i] + w * (s[i] - t[i]);
    }
}
