/* Row kernels of the goal-conditioned Q network (SPEC §5a), CPU, float32.
 *
 * The network's rows gather features of distinct states and goals from
 * tables, fuse them, reduce the maxout's pieces and normalize.  Those passes
 * over [rows, 4 · width] are memory-bound; PyTorch runs each as one or more
 * separate kernels (index_select, add, mul, amax, layer_norm, leaky_relu and
 * their backwards).  Here each is a single pass per row that stays in L1.
 * The matrix products stay with PyTorch (see rows.py).
 *
 * Layouts (all C-contiguous):
 *   pre [R, P*W]   piece-major: piece p of unit u at p*W + u
 *   xhat [R, W]    normalized pre-affine LayerNorm input, rstd [R]
 * Built with -fno-trapping-math (sun_lightning/native.py) so that the selects below compile
 * to blends instead of branches on random signs; the summation order is fixed by hand.
 * Index arrays are int64; NULL means the identity (row r reads table row r).
 *
 * Threads: built with -fopenmp where PyTorch's own parallel backend is OpenMP (rows.py), so the
 * loops below run on PyTorch's already-running OpenMP threads (the process has one libgomp) and
 * omp_get_max_threads() is torch.get_num_threads().  Rows are independent; the sums over rows
 * (LayerNorm weight gradients) are taken per fixed chunk of CHUNK rows and the chunks added in
 * order, so every result is the same whatever the thread count.  Without -fopenmp the pragmas
 * are ignored and the same code runs serially.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>

#define CHUNK 128          /* rows per partial sum of a weight gradient */
#define PARALLEL_ROWS 256  /* fewer rows than this run on the calling thread only */

#define ROW(ix, r) ((ix) ? (ix)[r] : (int64_t)(r))

/* Sum of x[0..n) in a fixed order: 8 interleaved partial sums (vectorizable without
 * -fassociative-math), then the remainder, then the partials pairwise. */
static inline float sum8(const float *restrict x, int64_t n) {
    float acc[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
    int64_t u = 0;
    for (; u + 8 <= n; u += 8)
        for (int k = 0; k < 8; ++k) acc[k] += x[u + k];
    for (; u < n; ++u) acc[0] += x[u];
    return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
}

/* d = (h - mean) · rstd over one row (t is scratch); returns rstd. */
static inline float layer_norm_row(const float *restrict h, int64_t W, float eps, float *restrict d,
                                   float *restrict t) {
    const float mean = sum8(h, W) / (float)W;
    for (int64_t u = 0; u < W; ++u) { d[u] = h[u] - mean; t[u] = d[u] * d[u]; }
    const float rs = 1.f / sqrtf(sum8(t, W) / (float)W + eps);
    for (int64_t u = 0; u < W; ++u) d[u] *= rs;
    return rs;
}

/* LayerNorm's input gradient from dxh = dL/dxhat of one row (t is scratch, out may be t). */
static inline void layer_norm_row_backward(const float *restrict dxh, const float *restrict xh,
                                           float rs, int64_t W, float *t, float *out) {
    const float s1 = sum8(dxh, W) / (float)W;
    for (int64_t u = 0; u < W; ++u) t[u] = dxh[u] * xh[u];
    const float s2 = sum8(t, W) / (float)W;
    for (int64_t u = 0; u < W; ++u) out[u] = rs * (dxh[u] - s1 - xh[u] * s2);
}

/* prod[r] = f_s[oi[r]] * f_g[gi[r]].
 * Returns 0, or -1 (writing nothing) if an index is outside [0, NS) or [0, NG). */
int rows_product(int64_t R, int64_t W, const int64_t *oi, const int64_t *gi, int64_t NS, int64_t NG,
                 const float *f_s, const float *f_g, float *prod) {
    for (int64_t r = 0; r < R; ++r) {
        const int64_t s = ROW(oi, r), g = ROW(gi, r);
        if (s < 0 || s >= NS || g < 0 || g >= NG) return -1;
    }
    #pragma omp parallel for schedule(static) if (R >= PARALLEL_ROWS)
    for (int64_t r = 0; r < R; ++r) {
        const float *restrict fs = f_s + ROW(oi, r) * W, *restrict fg = f_g + ROW(gi, r) * W;
        float *restrict p = prod + r * W;
        for (int64_t u = 0; u < W; ++u) p[u] = fs[u] * fg[u];
    }
    return 0;
}

/* h[u] = max_p row[p*W + u]. */
static inline void piece_max(const float *restrict row, int64_t W, int64_t P, float *restrict h) {
    for (int64_t u = 0; u < W; ++u) h[u] = row[u];
    for (int64_t p = 1; p < P; ++p) {
        const float *restrict piece = row + p * W;
        for (int64_t u = 0; u < W; ++u) h[u] = piece[u] > h[u] ? piece[u] : h[u];
    }
}

/* act[r] = leaky(LayerNorm(max_p x[r, p, :]) · ln_w), x[r] = pre_s[oi[r]] + pre_g[gi[r]] + pre[r]:
 * the maxout's pre-activations, the tables' terms gathered here and the product's term computed
 * by the GEMM into pre (rows_product's indices, already checked).  Without tables (pre_s NULL)
 * x = pre; with P == 1 the max is the identity.  keep writes x back into pre (the backward finds
 * the winning pieces in it); xhat and rstd (saved for the backward) may be NULL. */
void rows_norm_act(int64_t R, int64_t W, int64_t P, const int64_t *oi, const int64_t *gi,
                   const float *pre_s, const float *pre_g, int keep, float *pre, const float *ln_w,
                   float eps, float slope, float *restrict act, float *restrict xhat,
                   float *restrict rstd) {
    #pragma omp parallel for schedule(static) if (R >= PARALLEL_ROWS)
    for (int64_t r = 0; r < R; ++r) {
        float x[P * W], h[W], d[W], t[W];
        float *row = pre + r * P * W;
        if (pre_s) {
            const float *restrict a = pre_s + ROW(oi, r) * P * W, *restrict b = pre_g + ROW(gi, r) * P * W;
            float *out = keep ? row : x;
            for (int64_t j = 0; j < P * W; ++j) out[j] = (a[j] + b[j]) + row[j];
            row = out;
        }
        piece_max(row, W, P, h);
        const float rs = layer_norm_row(h, W, eps, d, t);
        if (rstd) rstd[r] = rs;
        if (xhat) memcpy(xhat + r * W, d, (size_t)W * sizeof(float));
        float *restrict o = act + r * W;
        for (int64_t u = 0; u < W; ++u) {
            const float y = d[u] * ln_w[u];
            o[u] = y > 0.f ? y : slope * y;
        }
    }
}

/* Chunk c of R rows is [c * CHUNK, min((c + 1) * CHUNK, R)). */
static inline int64_t chunks(int64_t R) { return (R + CHUNK - 1) / CHUNK; }
static inline int64_t chunk_end(int64_t c, int64_t R) { return (c + 1) * CHUNK < R ? (c + 1) * CHUNK : R; }

/* grad_w[u] += the per-chunk partial sums part[c, u], in chunk order; frees part. */
static void add_partials(float *part, int64_t C, int64_t W, float *restrict grad_w) {
    for (int64_t c = 0; c < C; ++c)
        for (int64_t u = 0; u < W; ++u) grad_w[u] += part[c * W + u];
    free(part);
}

/* Backward of rows_norm_act: grad_in [R, P*W] (P == 1: [R, W]) and grad_w[u] += Σ_r dy·xhat
 * (per chunk of rows, chunks added in order).  The maxout's gradient goes to the piece(s)
 * equal to the max (recomputed from pre); ties between float pieces have probability zero.
 * Returns 0, or -1 (out of memory for the partial sums). */
int rows_norm_act_backward(int64_t R, int64_t W, int64_t P, const float *grad_act,
                           const float *xhat, const float *rstd, const float *pre,
                           const float *ln_w, float slope, float *restrict grad_in,
                           float *restrict grad_w) {
    const int64_t C = chunks(R);
    float *part = calloc((size_t)(C * W), sizeof(float));
    if (!part) return -1;
    #pragma omp parallel for schedule(static) if (R >= PARALLEL_ROWS)
    for (int64_t c = 0; c < C; ++c) {
        float dxh[W], t[W], h[W];
        float *restrict gw = part + c * W;
        for (int64_t r = c * CHUNK; r < chunk_end(c, R); ++r) {
            const float *restrict g = grad_act + r * W, *restrict xh = xhat + r * W;
            for (int64_t u = 0; u < W; ++u) {
                const float y = xh[u] * ln_w[u];
                const float dy = y > 0.f ? g[u] : slope * g[u];
                gw[u] += dy * xh[u];
                dxh[u] = dy * ln_w[u];
            }
            float *restrict out = grad_in + r * P * W;
            if (P == 1) {
                layer_norm_row_backward(dxh, xh, rstd[r], W, t, out);
            } else {
                layer_norm_row_backward(dxh, xh, rstd[r], W, t, t);
                const float *restrict row = pre + r * P * W;
                piece_max(row, W, P, h);
                for (int64_t p = 0; p < P; ++p) {
                    const float *restrict piece = row + p * W;
                    float *restrict o = out + p * W;
                    for (int64_t u = 0; u < W; ++u) o[u] = (float)(piece[u] >= h[u]) * t[u];  /* piece == max */
                }
            }
        }
    }
    add_partials(part, C, W, grad_w);
    return 0;
}

/* Backward of the row gathers (rows_product's products, rows_norm_act's table terms),
 * accumulated into zeroed tables:
 * g_pre_s[oi[r]] += grad_pre[r], g_pre_g[gi[r]] += grad_pre[r],
 * g_f_s[oi[r]] += grad_prod[r] · f_g[gi[r]], g_f_g[gi[r]] += grad_prod[r] · f_s[oi[r]].
 * The two sides (state tables, goal tables) run on two threads, each visiting the rows in order. */
void rows_gather_backward(int64_t R, int64_t W, int64_t PW, const int64_t *oi, const int64_t *gi,
                          const float *grad_pre, const float *grad_prod, const float *f_s,
                          const float *f_g, float *g_pre_s, float *g_pre_g, float *g_f_s,
                          float *g_f_g) {
    #pragma omp parallel for schedule(static) if (R >= PARALLEL_ROWS)
    for (int side = 0; side < 2; ++side) {
        /* side 0: the state tables (own index oi, other factor f_g); side 1: the goal tables */
        const int64_t *own = side == 0 ? oi : gi, *other = side == 0 ? gi : oi;
        const float *f_other = side == 0 ? f_g : f_s;
        float *g_pre = side == 0 ? g_pre_s : g_pre_g, *g_f = side == 0 ? g_f_s : g_f_g;
        for (int64_t r = 0; r < R; ++r) {
            const int64_t i = ROW(own, r), j = ROW(other, r);
            const float *restrict d = grad_pre + r * PW;
            float *restrict gp = g_pre + i * PW;
            for (int64_t k = 0; k < PW; ++k) gp[k] += d[k];
            const float *restrict dp = grad_prod + r * W, *restrict y = f_other + j * W;
            float *restrict gf = g_f + i * W;
            for (int64_t u = 0; u < W; ++u) gf[u] += dp[u] * y[u];
        }
    }
}

/* ---- the state and goal branches: f = SiLU(dropout(LayerNorm(h) · ln_w)) ---------------------
 * Dropout keeps an element when 16 bits of a counter-based hash of (seed, element index) are
 * >= threshold (p quantized to 1/65536) and scales it by 1 / (1 - p).  Being a function of the
 * index, the mask is recomputed in the backward instead of stored, and does not depend on the
 * order in which rows are visited.  threshold <= 0 means no dropout. */
static inline uint32_t mix32(uint32_t x) {
    x ^= x >> 16; x *= 0x7feb352dU;
    x ^= x >> 15; x *= 0x846ca68bU;
    x ^= x >> 16;
    return x;
}

/* exp(x) for the sigmoid, branch-free so that it vectorizes: 2^n · p(r) with r in
 * [-ln2/2, ln2/2] and a degree-6 polynomial (relative error ~2e-7); x is clamped to
 * [-87, 88], where the sigmoid is 0 or 1 to float precision anyway. */
static inline float exp_approx(float x) {
    x = x < -87.f ? -87.f : x;
    x = x > 88.f ? 88.f : x;
    const int32_t k = (int32_t)(x * 1.44269504f + 128.5f) - 128;  /* nearest: the sum is > 0 */
    const float n = (float)k;
    const float r = (x - n * 0.693145752f) - n * 1.42860677e-6f;
    float p = 1.f / 720.f;
    p = p * r + 1.f / 120.f;
    p = p * r + 1.f / 24.f;
    p = p * r + 1.f / 6.f;
    p = p * r + 0.5f;
    p = p * r + 1.f;
    p = p * r + 1.f;
    const union { int32_t i; float f; } scale = {.i = (k + 127) << 23};
    return p * scale.f;
}

static inline void dropout_row(int64_t r, int64_t W, uint32_t k0, uint32_t k1, int threshold,
                               float keep_scale, float *restrict m) {
    if (threshold <= 0) {
        for (int64_t u = 0; u < W; ++u) m[u] = 1.f;
        return;
    }
    for (int64_t u = 0; u < W; ++u) {
        const uint32_t h = mix32(mix32((uint32_t)(r * W + u) ^ k0) ^ k1);
        m[u] = (int)(h >> 16) >= threshold ? keep_scale : 0.f;
    }
}

void branch_forward(int64_t R, int64_t W, const float *h_in, const float *ln_w, float eps,
                    uint64_t seed, int threshold, float keep_scale, float *restrict out,
                    float *restrict xhat, float *restrict rstd) {
    const uint32_t k0 = (uint32_t)seed, k1 = (uint32_t)(seed >> 32);
    #pragma omp parallel for schedule(static) if (R >= PARALLEL_ROWS)
    for (int64_t r = 0; r < R; ++r) {
        float d[W], t[W], m[W];
        const float rs = layer_norm_row(h_in + r * W, W, eps, d, t);
        if (rstd) rstd[r] = rs;
        if (xhat) memcpy(xhat + r * W, d, (size_t)W * sizeof(float));
        dropout_row(r, W, k0, k1, threshold, keep_scale, m);
        float *restrict o = out + r * W;
        for (int64_t u = 0; u < W; ++u) {
            const float y = d[u] * ln_w[u] * m[u];
            o[u] = y / (1.f + exp_approx(-y));
        }
    }
}

/* Backward of branch_forward: grad_h [R, W] and grad_w[u] += Σ_r (dL/d(LN out)) · xhat (per
 * chunk of rows, chunks added in order).  Returns 0, or -1 (out of memory). */
int branch_backward(int64_t R, int64_t W, const float *grad_out, const float *xhat,
                    const float *rstd, const float *ln_w, uint64_t seed, int threshold,
                    float keep_scale, float *restrict grad_h, float *restrict grad_w) {
    const uint32_t k0 = (uint32_t)seed, k1 = (uint32_t)(seed >> 32);
    const int64_t C = chunks(R);
    float *part = calloc((size_t)(C * W), sizeof(float));
    if (!part) return -1;
    #pragma omp parallel for schedule(static) if (R >= PARALLEL_ROWS)
    for (int64_t c = 0; c < C; ++c) {
        float m[W], dxh[W], t[W];
        float *restrict gw = part + c * W;
        for (int64_t r = c * CHUNK; r < chunk_end(c, R); ++r) {
            const float *restrict g = grad_out + r * W, *restrict xh = xhat + r * W;
            dropout_row(r, W, k0, k1, threshold, keep_scale, m);
            for (int64_t u = 0; u < W; ++u) {
                const float y = xh[u] * ln_w[u] * m[u];
                const float s = 1.f / (1.f + exp_approx(-y));
                const float dn = g[u] * (s * (1.f + y * (1.f - s))) * m[u];  /* d loss / d (LN out) */
                gw[u] += dn * xh[u];
                dxh[u] = dn * ln_w[u];
            }
            layer_norm_row_backward(dxh, xh, rstd[r], W, t, grad_h + r * W);
        }
    }
    add_partials(part, C, W, grad_w);
    return 0;
}

/* The dropout mask branch_forward applies (for tests and inspection). */
void branch_dropout_mask(int64_t R, int64_t W, uint64_t seed, int threshold, float keep_scale,
                         float *restrict out) {
    const uint32_t k0 = (uint32_t)seed, k1 = (uint32_t)(seed >> 32);
    for (int64_t r = 0; r < R; ++r) dropout_row(r, W, k0, k1, threshold, keep_scale, out + r * W);
}
