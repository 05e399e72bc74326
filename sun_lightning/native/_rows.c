/* The goal-conditioned Q network (SPEC §5a) after its encoders, CPU, float32: forward and backward.
 *
 * The network's rows gather features of distinct states and goals from tables, fuse them,
 * reduce the maxout's pieces and normalize.  Those passes over [rows, 4 · width] are memory-bound
 * and, done one after the other over all rows, each streamed the whole [rows, 4 · width] array
 * through memory.  Here the rows go in blocks of BLOCK: each block runs the whole row network
 * (product, maxout map, maxout, LayerNorms, head) in a buffer of its thread that stays in L2, its
 * matrix products as sequential sgemm_ calls, the blocks spread over the threads; the backward
 * likewise, with each block's weight-gradient terms kept apart and added in block order.
 *
 * Layouts (all C-contiguous):
 *   pre [rows, P*W]   piece-major: piece p of unit u at p*W + u
 *   xh [rows, W]      normalized pre-affine LayerNorm input, rs [rows] its 1 / std
 *   win [rows, W]     bit p set where piece p attains the maxout's max (P <= 8)
 * Built with -fno-trapping-math (sun_lightning/native.py) so that the selects below compile
 * to blends instead of branches on random signs; the summation order is fixed by hand.
 * Index arrays are int64; NULL means the identity (row r reads table row r).
 *
 * Threads: built with -fopenmp where PyTorch's own parallel backend is OpenMP (sun_lightning/native/__init__.py), so the
 * loops below run on PyTorch's already-running OpenMP threads (the process has one libgomp) and
 * omp_get_max_threads() is torch.get_num_threads().  Blocks and their sums are fixed by the row
 * count, not the thread count, so every result is the same whatever the thread count.  Without
 * -fopenmp the pragmas are ignored and the same code runs serially.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>

#ifdef _OPENMP
#include <omp.h>
#endif

#define CHUNK 128          /* rows per partial sum of a branch's LayerNorm weight gradient */
#define PARALLEL_ROWS 256  /* fewer rows than this run on the calling thread only */
#define BLOCK 128          /* rows per block of the row network */
#define MAX_PIECES 8       /* maxout pieces the win bitmask holds */

#define ROW(ix, r) ((ix) ? (ix)[r] : (int64_t)(r))

/* Sum of x[0..n) in a fixed order: 8 interleaved partial sums (vectorizable without
 * -fassociative-math), then the remainder, then the partials pairwise. */
static inline __attribute__((always_inline)) float sum8(const float *restrict x, int64_t n) {
    float acc[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
    int64_t u = 0;
    for (; u + 8 <= n; u += 8)
        for (int k = 0; k < 8; ++k) acc[k] += x[u + k];
    for (; u < n; ++u) acc[0] += x[u];
    return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
}

/* d = (h - mean) · rstd over one row (t is scratch); returns rstd. */
static inline __attribute__((always_inline)) float layer_norm_row(const float *restrict h, int64_t W, float eps, float *restrict d,
                                   float *restrict t) {
    const float mean = sum8(h, W) / (float)W;
    for (int64_t u = 0; u < W; ++u) { d[u] = h[u] - mean; t[u] = d[u] * d[u]; }
    const float rs = 1.f / sqrtf(sum8(t, W) / (float)W + eps);
    for (int64_t u = 0; u < W; ++u) d[u] *= rs;
    return rs;
}

/* LayerNorm's input gradient from dxh = dL/dxhat of one row (t is scratch, out may be t). */
static inline __attribute__((always_inline)) void layer_norm_row_backward(const float *restrict dxh, const float *restrict xh,
                                           float rs, int64_t W, float *t, float *out) {
    const float s1 = sum8(dxh, W) / (float)W;
    for (int64_t u = 0; u < W; ++u) t[u] = dxh[u] * xh[u];
    const float s2 = sum8(t, W) / (float)W;
    for (int64_t u = 0; u < W; ++u) out[u] = rs * (dxh[u] - s1 - xh[u] * s2);
}

/* Whether every row index is inside [0, NS) (states) and [0, NG) (goals). */
static int rows_in_range(int64_t R, const int64_t *oi, const int64_t *gi, int64_t NS, int64_t NG) {
    for (int64_t r = 0; r < R; ++r) {
        const int64_t s = ROW(oi, r), g = ROW(gi, r);
        if (s < 0 || s >= NS || g < 0 || g >= NG) return 0;
    }
    return 1;
}

/* prod[i] = f_s[oi[r0 + i]] * f_g[gi[r0 + i]] for the n rows of a block (indices checked). */
static inline __attribute__((always_inline)) void block_product(int64_t r0, int64_t n, int64_t W, const int64_t *oi, const int64_t *gi,
                          const float *f_s, const float *f_g, float *restrict prod) {
    for (int64_t i = 0; i < n; ++i) {
        const float *restrict fs = f_s + ROW(oi, r0 + i) * W, *restrict fg = f_g + ROW(gi, r0 + i) * W;
        float *restrict p = prod + i * W;
        for (int64_t u = 0; u < W; ++u) p[u] = fs[u] * fg[u];
    }
}

static inline float leaky(float y, float slope) { return y > 0.f ? y : slope * y; }

/* act = leaky(LayerNorm(h) · ln_w) of one row; xh (may be NULL) and the returned rstd for the backward. */
static inline __attribute__((always_inline)) float norm_act_row(const float *restrict h, int64_t W, const float *restrict ln_w, float eps,
                                 float slope, float *restrict act, float *restrict xh) {
    float d[W], t[W];
    const float rs = layer_norm_row(h, W, eps, d, t);
    if (xh) memcpy(xh, d, (size_t)W * sizeof(float));
    for (int64_t u = 0; u < W; ++u) act[u] = leaky(d[u] * ln_w[u], slope);
    return rs;
}

/* The maxout of one row: x = (a + b) + pre (the tables' terms, a = b = NULL: none), h[u] = max_p
 * x[p*W + u], win[u] (may be NULL) the bits of the pieces equal to it. */
static inline __attribute__((always_inline)) void maxout_row(const float *restrict pre, const float *restrict a, const float *restrict b,
                              int64_t W, int64_t P, float *restrict h, uint8_t *restrict win) {
    float x[P * W];
    if (a) {
        for (int64_t j = 0; j < P * W; ++j) x[j] = (a[j] + b[j]) + pre[j];
        pre = x;
    }
    for (int64_t u = 0; u < W; ++u) h[u] = pre[u];
    for (int64_t p = 1; p < P; ++p)
        for (int64_t u = 0; u < W; ++u) h[u] = pre[p * W + u] > h[u] ? pre[p * W + u] : h[u];
    if (!win) return;
    for (int64_t u = 0; u < W; ++u) win[u] = 0;
    for (int64_t p = 0; p < P; ++p)
        for (int64_t u = 0; u < W; ++u) win[u] |= (uint8_t)((pre[p * W + u] >= h[u]) << p);
}

/* Backward of norm_act_row from g = dL/dact: the input's gradient into out, gw[u] += dy · xh. */
static inline __attribute__((always_inline)) void norm_act_row_backward(const float *restrict g, const float *restrict xh, float rs, int64_t W,
                                         const float *restrict ln_w, float slope, float *restrict gw,
                                         float *restrict out) {
    float dxh[W], t[W];
    for (int64_t u = 0; u < W; ++u) {
        const float y = xh[u] * ln_w[u];
        const float dy = y > 0.f ? g[u] : slope * g[u];
        gw[u] += dy * xh[u];
        dxh[u] = dy * ln_w[u];
    }
    layer_norm_row_backward(dxh, xh, rs, W, t, out);
}

/* act[i] = leaky(xh[i] · ln_w) for n rows: norm_act_row's output again, from what it saved. */
static inline __attribute__((always_inline)) void recompute_act(int64_t n, int64_t W, const float *restrict xh, const float *restrict ln_w, float slope,
                          float *restrict act) {
    for (int64_t i = 0; i < n; ++i)
        for (int64_t u = 0; u < W; ++u) act[i * W + u] = leaky(xh[i * W + u] * ln_w[u], slope);
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

/* Backward of the row gathers (block_product's products, maxout_row's table terms),
 * accumulated into zeroed tables:
 * g_pre_s[oi[r]] += grad_pre[r], g_pre_g[gi[r]] += grad_pre[r],
 * g_f_s[oi[r]] += grad_prod[r] · f_g[gi[r]], g_f_g[gi[r]] += grad_prod[r] · f_s[oi[r]].
 * The two sides (state tables, goal tables) run on two threads, each visiting the rows in order. */
static void rows_gather_backward(int64_t R, int64_t W, int64_t PW, const int64_t *oi, const int64_t *gi,
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

/* exp(x) for x in [-40, 0] (the sigmoid's), branch-free so that it vectorizes: 2^n · p(r) with r in
 * [-ln2/2, ln2/2] and a degree-6 polynomial (relative error ~2e-7). */
static inline float exp_approx(float x) {
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

/* sigmoid(y) = 1 / (1 + e^-y) from e = e^-|y| in (0, 1]: nothing overflows, and with |y| clamped to 40
 * (past which the sigmoid is 0 or 1 to well within float precision, e^-40 = 4e-18) nothing the
 * vectorized selects compute on any lane is subnormal.  (An earlier form, y / (1 + e^-y) with e^-y
 * clamped to e^88, had the compiler divide every lane by e^88 for the clamped case: subnormal
 * quotients, whose microcode assists made the branch kernels ~10x slower.) */
static inline float sigmoid(float y) {
    float a = y < 0.f ? -y : y;
    a = a > 40.f ? 40.f : a;
    const float e = exp_approx(-a), r = 1.f / (1.f + e);
    return y < 0.f ? e * r : r;
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

static void branch_forward(int64_t R, int64_t W, const float *h_in, const float *ln_w, float eps,
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
            o[u] = y * sigmoid(y);
        }
    }
}

/* Backward of branch_forward: grad_h [R, W] and grad_w[u] += Σ_r (dL/d(LN out)) · xhat (per
 * chunk of rows, chunks added in order).  Returns 0, or -1 (out of memory). */
static int branch_backward(int64_t R, int64_t W, const float *grad_out, const float *xhat,
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
                const float s = sigmoid(y);
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

/* ---- the whole network in one call: forward and backward over the kernels above -------------
 * The matrix products go to the BLAS sgemm_ that PyTorch itself calls for torch.mm on CPU (MKL in
 * the official wheels), found in the already loaded libtorch_cpu by q_loss.py and handed over with
 * rows_set_gemm (with MKL's MKL_Set_Num_Threads_Local, so that a block's products run on its own
 * thread).  One call per forward or backward replaces ~30 Python-dispatched ops and kernel calls
 * each. */

typedef void (*sgemm_fn)(const char *, const char *, const int *, const int *, const int *,
                         const float *, const float *, const int *, const float *, const int *,
                         const float *, float *, const int *);
typedef int (*local_threads_fn)(int);
static sgemm_fn gemm_ptr = NULL;
static local_threads_fn local_threads = NULL;
void rows_set_gemm(void *fn, void *set_local_threads) {
    gemm_ptr = (sgemm_fn)fn;
    local_threads = (local_threads_fn)set_local_threads;
}

/* Row-major C[M, N] = alpha · op(A) op(B) + beta · C (op: 'N' or 'T'), as the column-major
 * product C^T = op(B)^T op(A)^T: the same flags with the operands swapped. */
static void gemm(char ta, char tb, int64_t M, int64_t N, int64_t K, float alpha, const float *A,
                 int64_t lda, const float *B, int64_t ldb, float beta, float *C, int64_t ldc) {
    if (M == 0 || N == 0) return;
    if (K == 0) {  /* no product: C = beta · C */
        for (int64_t i = 0; i < M; ++i)
            for (int64_t j = 0; j < N; ++j) C[i * ldc + j] = beta == 0.f ? 0.f : beta * C[i * ldc + j];
        return;
    }
    const int m = (int)M, n = (int)N, k = (int)K, a = (int)lda, b = (int)ldb, c = (int)ldc;
    gemm_ptr(&tb, &ta, &n, &m, &k, &alpha, B, &b, A, &a, &beta, C, &c);
}
#define block_gemm gemm

/* A thread's buffer for the blocks it runs, kept for the thread's life (torch's threads persist,
 * so their pages are touched once); NULL if it cannot grow. */
static __thread float *thread_buf = NULL;
static __thread size_t thread_cap = 0;

static float *block_buffer(size_t floats) {
    if (floats > thread_cap) {
        float *p = realloc(thread_buf, floats * sizeof(float));
        if (!p) return NULL;
        thread_buf = p;
        thread_cap = floats;
    }
    return thread_buf;
}

/* Run body(b) for the nb blocks, spread over the threads, each block's products on its own thread.
 * One block, or one thread, runs here with no parallel region at all: sgemm_ called inside an
 * inactive region starts a nested team of its own, ~0.1 ms per call. */
#ifdef _OPENMP
#define FOR_BLOCKS(nb, body)                                                              \
    do {                                                                                  \
        if ((nb) > 1 && omp_get_max_threads() > 1) {                                      \
            _Pragma("omp parallel")                                                       \
            {                                                                             \
                if (local_threads) local_threads(1);                                      \
                _Pragma("omp for schedule(static)")                                       \
                for (int64_t b = 0; b < (nb); ++b) { body; }                              \
                if (local_threads) local_threads(0);                                      \
            }                                                                             \
        } else {                                                                          \
            for (int64_t b = 0; b < (nb); ++b) { body; }                                  \
        }                                                                                 \
    } while (0)
#else
#define FOR_BLOCKS(nb, body)                                                              \
    do {                                                                                  \
        for (int64_t b = 0; b < (nb); ++b) { body; }                                      \
    } while (0)
#endif

static inline int64_t blocks(int64_t R) { return (R + BLOCK - 1) / BLOCK; }

/* Sizes of one evaluation (q_loss.py passes them as int64_t dims[9] in this order). */
typedef struct { int64_t US, UG, DS, DG, R, W, P, A2, A; } Dims;

/* The forward's buffers, carved in this order from one float workspace: the tables' (branches,
 * their maxout terms), what the backward reads of the rows, and the output. */
typedef struct {
    float *h, *f_s, *xh_s, *rs_s, *f_g, *xh_g, *rs_g, *pre_s, *pre_g, *xh1, *rs1, *xh2, *rs2, *out;
    uint8_t *win;
} Saved;

static int64_t carve_saved(const Dims *d, float *ws, Saved *s) {
    const int64_t W = d->W, PW = d->P * d->W;
    float *p = ws;
#define TAKE(field, n) do { if (s) s->field = p; p += (n); } while (0)
    TAKE(h, (d->US > d->UG ? d->US : d->UG) * W);  /* the branches' linear maps (scratch) */
    TAKE(f_s, d->US * W); TAKE(xh_s, d->US * W); TAKE(rs_s, d->US);
    TAKE(f_g, d->UG * W); TAKE(xh_g, d->UG * W); TAKE(rs_g, d->UG);
    TAKE(pre_s, d->US * PW); TAKE(pre_g, d->UG * PW);
    TAKE(xh1, d->R * W); TAKE(rs1, d->R); TAKE(xh2, d->R * W); TAKE(rs2, d->R);
    if (s) s->win = (uint8_t *)p;
    p += (d->R * W + 3) / 4;
    TAKE(out, d->R * d->A2);  /* last: q_loss.py reads it there */
    return p - ws;
}

/* The weight-gradient terms of one block of rows, added in block order after the blocks ran. */
typedef struct { float *w3, *b3, *w2, *ln2, *ln1, *w_mp; } Part;

static int64_t part_size(const Dims *d) {
    const int64_t W = d->W;
    return d->A2 * W + d->A2 + W * W + W + W + d->P * W * W;
}

static void carve_part(const Dims *d, float *p, Part *t) {
    const int64_t W = d->W;
    t->w3 = p; p += d->A2 * W;
    t->b3 = p; p += d->A2;
    t->w2 = p; p += W * W;
    t->ln2 = p; p += W;
    t->ln1 = p; p += W;
    t->w_mp = p;
}

/* The backward's temporaries: the rows' gradients at the maxout and the product (for the gathers'
 * backward), the tables' gradients, and the blocks' weight-gradient terms. */
typedef struct { float *g_pre, *g_prod, *g_pre_s, *g_pre_g, *g_f_s, *g_f_g, *g_h_s, *g_h_g, *parts; } Temps;

static int64_t carve_temps(const Dims *d, float *ws, Temps *s) {
    const int64_t W = d->W, PW = d->P * d->W;
    float *p = ws;
    TAKE(g_pre, d->R * PW); TAKE(g_prod, d->R * W); TAKE(g_pre_s, d->US * PW); TAKE(g_pre_g, d->UG * PW);
    TAKE(g_f_s, d->US * W); TAKE(g_f_g, d->UG * W); TAKE(g_h_s, d->US * W); TAKE(g_h_g, d->UG * W);
    TAKE(parts, blocks(d->R) * part_size(d));
#undef TAKE
    return p - ws;
}

/* Floats of the forward's workspace (which = 0) or the backward's (which = 1). */
int64_t q_workspace(const int64_t *dims, int which) {
    const Dims *d = (const Dims *)dims;
    return which ? carve_temps(d, NULL, NULL) : carve_saved(d, NULL, NULL);
}

/* The network's weights, in QParams' order. */
typedef struct { const float *w_s, *ln_s, *w_g, *ln_g, *w_m, *ln1, *w2, *ln2, *w3, *b3; } Params;

/* Floats of each weight gradient in QParams' order: offsets into one flat gradient. */
static void grad_offsets(const Dims *d, int64_t off[11]) {
    const int64_t W = d->W, PW = d->P * d->W;
    const int64_t n[10] = {W * d->DS, W, W * d->DG, W, PW * 3 * W, W, W * W, W, d->A2 * W, d->A2};
    off[0] = 0;
    for (int i = 0; i < 10; ++i) off[i + 1] = off[i] + n[i];
}

/* The row network of block b: product, maxout map, maxout with the tables' terms, LayerNorm +
 * LeakyReLU, linear, LayerNorm + LeakyReLU, head; with save, what the backward reads. */
static inline __attribute__((always_inline)) int block_forward_wp(
        const Dims *d, const Params *w, const Saved *s, const int64_t *oi, const int64_t *gi, const int64_t *ga,
        const float *eps, float slope, int save, int64_t b, float *sel, const int64_t W, const int64_t P) {
    const int64_t PW = P * W, A2 = d->A2, A = d->A, r0 = b * BLOCK;
    const int64_t n = d->R - r0 < BLOCK ? d->R - r0 : BLOCK;
    float *buf = block_buffer((size_t)(BLOCK * (4 * W + PW + A2)));
    if (!buf) return -1;
    float *prod = buf, *pre = prod + BLOCK * W, *act1 = pre + BLOCK * PW, *z2 = act1 + BLOCK * W,
          *act2 = z2 + BLOCK * W, *out = ga ? act2 + BLOCK * W : s->out + r0 * A2;
    block_product(r0, n, W, oi, gi, s->f_s, s->f_g, prod);
    block_gemm('N', 'T', n, PW, W, 1.f, prod, W, w->w_m + 2 * W, 3 * W, 0.f, pre, PW);
    for (int64_t i = 0; i < n; ++i) {
        const int64_t r = r0 + i;
        float h[W];
        maxout_row(pre + i * PW, s->pre_s + ROW(oi, r) * PW, s->pre_g + ROW(gi, r) * PW, W, P, h,
                   save ? s->win + r * W : NULL);
        const float rs = norm_act_row(h, W, w->ln1, eps[2], slope, act1 + i * W, save ? s->xh1 + r * W : NULL);
        if (save) s->rs1[r] = rs;
    }
    block_gemm('N', 'T', n, W, W, 1.f, act1, W, w->w2, W, 0.f, z2, W);
    for (int64_t i = 0; i < n; ++i) {
        const float rs = norm_act_row(z2 + i * W, W, w->ln2, eps[3], slope, act2 + i * W,
                                      save ? s->xh2 + (r0 + i) * W : NULL);
        if (save) s->rs2[r0 + i] = rs;
    }
    for (int64_t i = 0; i < n; ++i) memcpy(out + i * A2, w->b3, sizeof(float) * (size_t)A2);
    block_gemm('N', 'T', n, A2, W, 1.f, act2, W, w->w3, W, 1.f, out, A2);
    if (ga)
        for (int64_t i = 0; i < n; ++i)
            for (int64_t a = 0; a < A; ++a) sel[(r0 + i) * A + a] = out[i * A2 + a * A + ga[r0 + i]];
    return 0;
}

/* block_forward_wp with the paper's width and pieces as constants (the compiler then unrolls the
 * row loops and drops their remainders: ~2x faster), or as read. */
static int block_forward(const Dims *d, const Params *w, const Saved *s, const int64_t *oi, const int64_t *gi,
                         const int64_t *ga, const float *eps, float slope, int save, int64_t b, float *sel) {
    if (d->W == 64 && d->P == 4) return block_forward_wp(d, w, s, oi, gi, ga, eps, slope, save, b, sel, 64, 4);
    return block_forward_wp(d, w, s, oi, gi, ga, eps, slope, save, b, sel, d->W, d->P);
}

/* Q of the rows (oi[r], gi[r]) of the encoded tables x_s [US, DS], x_g [UG, DG]: all of Q after
 * its encoders (the Q network of SPEC §5a).  Writes out [R, A2] into the workspace, or
 * only sel [R, A] = the column ga[r] of each row's A × A block when ga is given.  eps: the four
 * LayerNorms' eps; seeds / threshold / keep_scale: the branches' dropout; save: keep what the
 * backward needs.  Returns 0, -1 for a row index outside the tables (or no memory for a block
 * buffer), -2 for a goal action outside [0, A), -3 without sgemm_, -6 for more than MAX_PIECES pieces. */
int q_net_forward(const int64_t *dims, const float *x_s, const float *x_g, const void *const *params,
                  const int64_t *oi, const int64_t *gi, const int64_t *ga, const float *eps, float slope,
                  const uint64_t *seeds, int threshold, float keep_scale, int save, float *ws, float *sel) {
    const Dims *d = (const Dims *)dims;
    const Params *w = (const Params *)params;
    if (!gemm_ptr) return -3;
    if (d->P > MAX_PIECES) return -6;
    const int64_t W = d->W, P = d->P, PW = P * W, R = d->R;
    Saved s;
    carve_saved(d, ws, &s);
    for (int64_t r = 0; ga && r < R; ++r)
        if (ga[r] < 0 || ga[r] >= d->A) return -2;
    if (!rows_in_range(R, oi, gi, d->US, d->UG)) return -1;
    /* A small evaluation (acting, goal selection: a few to a few hundred rows) runs on this thread alone,
     * MKL's products included. Waking the other threads for such products cost more than they saved
     * (between two env steps they have gone to sleep), and the values no longer depend on the thread
     * count (MKL rounds one- and two-thread products differently). */
    const int alone = local_threads && R < PARALLEL_ROWS && d->US < PARALLEL_ROWS && d->UG < PARALLEL_ROWS;
    if (alone) local_threads(1);
    /* branches: f = SiLU(dropout(LN(x Wᵀ))) */
    float *h = s.h;
    gemm('N', 'T', d->US, W, d->DS, 1.f, x_s, d->DS, w->w_s, d->DS, 0.f, h, W);
    branch_forward(d->US, W, h, w->ln_s, eps[0], seeds[0], threshold, keep_scale, s.f_s, save ? s.xh_s : NULL,
                   save ? s.rs_s : NULL);
    gemm('N', 'T', d->UG, W, d->DG, 1.f, x_g, d->DG, w->w_g, d->DG, 0.f, h, W);
    branch_forward(d->UG, W, h, w->ln_g, eps[1], seeds[1], threshold, keep_scale, s.f_g, save ? s.xh_g : NULL,
                   save ? s.rs_g : NULL);
    /* The maxout's map of concat(f_s, f_g, f_s ⊙ f_g) is the sum of three maps: the first two on the
     * tables, only the product's per row. */
    gemm('N', 'T', d->US, PW, W, 1.f, s.f_s, W, w->w_m, 3 * W, 0.f, s.pre_s, PW);
    gemm('N', 'T', d->UG, PW, W, 1.f, s.f_g, W, w->w_m + W, 3 * W, 0.f, s.pre_g, PW);
    const int64_t nb = blocks(R);
    int status = 0;
    FOR_BLOCKS(nb, if (block_forward(d, w, &s, oi, gi, ga, eps, slope, save, b, sel)) status = -1);
    if (alone) local_threads(0);
    return status;
}

/* Backward of block b from grad [R, A] (with ga) or [R, A2]: its weight-gradient terms into part,
 * the rows' gradients at the maxout and at the product into the temporaries. */
static inline __attribute__((always_inline)) int block_backward_wp(
        const Dims *d, const Params *w, const Saved *s, const Temps *t, const int64_t *oi, const int64_t *gi,
        const int64_t *ga, float slope, const float *grad, int64_t b, const int64_t W, const int64_t P) {
    const int64_t PW = P * W, A2 = d->A2, A = d->A, r0 = b * BLOCK;
    const int64_t n = d->R - r0 < BLOCK ? d->R - r0 : BLOCK;
    float *buf = block_buffer((size_t)(BLOCK * (A2 + 6 * W)));
    if (!buf) return -1;
    float *g_out = buf, *act2 = g_out + BLOCK * A2, *g_act2 = act2 + BLOCK * W, *g_z2 = g_act2 + BLOCK * W,
          *act1 = g_z2 + BLOCK * W, *g_act1 = act1 + BLOCK * W, *prod = g_act1 + BLOCK * W;
    Part part;
    carve_part(d, t->parts + b * part_size(d), &part);
    const float *go = grad + r0 * A2;
    if (ga) {  /* only each row's goal-action column carries a gradient */
        memset(g_out, 0, sizeof(float) * (size_t)(n * A2));
        for (int64_t i = 0; i < n; ++i)
            for (int64_t a = 0; a < A; ++a) g_out[i * A2 + a * A + ga[r0 + i]] = grad[(r0 + i) * A + a];
        go = g_out;
    }
    /* head: out = act2 w3ᵀ + b3 */
    recompute_act(n, W, s->xh2 + r0 * W, w->ln2, slope, act2);
    block_gemm('T', 'N', A2, W, n, 1.f, go, A2, act2, W, 0.f, part.w3, W);
    for (int64_t j = 0; j < A2; ++j) part.b3[j] = 0.f;
    for (int64_t i = 0; i < n; ++i)
        for (int64_t j = 0; j < A2; ++j) part.b3[j] += go[i * A2 + j];
    block_gemm('N', 'N', n, W, A2, 1.f, go, A2, w->w3, W, 0.f, g_act2, W);
    for (int64_t u = 0; u < W; ++u) part.ln2[u] = part.ln1[u] = 0.f;
    for (int64_t i = 0; i < n; ++i)
        norm_act_row_backward(g_act2 + i * W, s->xh2 + (r0 + i) * W, s->rs2[r0 + i], W, w->ln2, slope, part.ln2,
                              g_z2 + i * W);
    recompute_act(n, W, s->xh1 + r0 * W, w->ln1, slope, act1);
    block_gemm('T', 'N', W, W, n, 1.f, g_z2, W, act1, W, 0.f, part.w2, W);
    block_gemm('N', 'N', n, W, W, 1.f, g_z2, W, w->w2, W, 0.f, g_act1, W);
    /* LayerNorm, then the maxout: the gradient goes to the piece(s) that attained the max */
    float *g_pre = t->g_pre + r0 * PW;
    for (int64_t i = 0; i < n; ++i) {
        const int64_t r = r0 + i;
        float gh[W];
        norm_act_row_backward(g_act1 + i * W, s->xh1 + r * W, s->rs1[r], W, w->ln1, slope, part.ln1, gh);
        const uint8_t *win = s->win + r * W;
        float *o = g_pre + i * PW;
        for (int64_t p = 0; p < P; ++p)
            for (int64_t u = 0; u < W; ++u) o[p * W + u] = (float)((win[u] >> p) & 1) * gh[u];
    }
    /* maxout map: the product's per row (the tables' through the gathers, after the blocks) */
    block_product(r0, n, W, oi, gi, s->f_s, s->f_g, prod);
    block_gemm('T', 'N', PW, W, n, 1.f, g_pre, PW, prod, W, 0.f, part.w_mp, W);
    block_gemm('N', 'N', n, W, PW, 1.f, g_pre, PW, w->w_m + 2 * W, 3 * W, 0.f, t->g_prod + r0 * W, W);
    return 0;
}

static int block_backward(const Dims *d, const Params *w, const Saved *s, const Temps *t, const int64_t *oi,
                          const int64_t *gi, const int64_t *ga, float slope, const float *grad, int64_t b) {
    if (d->W == 64 && d->P == 4) return block_backward_wp(d, w, s, t, oi, gi, ga, slope, grad, b, 64, 4);
    return block_backward_wp(d, w, s, t, oi, gi, ga, slope, grad, b, d->W, d->P);
}

/* Backward of q_net_forward (save = 1, same arguments) from grad [R, A] (with ga) or [R, A2]:
 * the weight gradients into the flat g_params (QParams' order and shapes), the tables' into
 * g_x_s / g_x_g where not NULL.  tmp: q_workspace(dims, 1) floats.  Returns 0, -1 (out of
 * memory for partial sums or block buffers) or -3 (no sgemm_). */
int q_net_backward(const int64_t *dims, const float *x_s, const float *x_g, const void *const *params,
                   const int64_t *oi, const int64_t *gi, const int64_t *ga, float slope, const uint64_t *seeds,
                   int threshold, float keep_scale, float *ws, const float *grad, float *tmp, float *g_params,
                   float *g_x_s, float *g_x_g) {
    const Dims *d = (const Dims *)dims;
    const Params *w = (const Params *)params;
    if (!gemm_ptr) return -3;
    const int64_t W = d->W, P = d->P, PW = P * W, R = d->R, A2 = d->A2;
    Saved s;
    Temps t;
    carve_saved(d, ws, &s);
    carve_temps(d, tmp, &t);
    int64_t off[11];
    grad_offsets(d, off);
    float *g_w_s = g_params + off[0], *g_ln_s = g_params + off[1], *g_w_g = g_params + off[2],
          *g_ln_g = g_params + off[3], *g_w_m = g_params + off[4], *g_ln1 = g_params + off[5],
          *g_w2 = g_params + off[6], *g_ln2 = g_params + off[7], *g_w3 = g_params + off[8],
          *g_b3 = g_params + off[9];
    memset(g_params, 0, sizeof(float) * (size_t)off[10]);
    const int64_t nb = blocks(R);
    int status = 0;
    FOR_BLOCKS(nb, if (block_backward(d, w, &s, &t, oi, gi, ga, slope, grad, b)) status = -1);
    if (status) return status;
    /* the blocks' weight-gradient terms, in block order (each element's sum in a fixed order) */
    const int64_t ps = part_size(d);
    #pragma omp parallel for schedule(static) if (nb * ps >= 65536)
    for (int64_t e = 0; e < ps; ++e) {
        float acc = 0.f;
        for (int64_t b = 0; b < nb; ++b) acc += t.parts[b * ps + e];
        /* Part's layout: w3, b3, w2, ln2, ln1, w_mp */
        const int64_t ib3 = A2 * W, iw2 = ib3 + A2, iln2 = iw2 + W * W, iln1 = iln2 + W, imp = iln1 + W;
        if (e < ib3) g_w3[e] = acc;
        else if (e < iw2) g_b3[e - ib3] = acc;
        else if (e < iln2) g_w2[e - iw2] = acc;
        else if (e < iln1) g_ln2[e - iln2] = acc;
        else if (e < imp) g_ln1[e - iln1] = acc;
        else g_w_m[((e - imp) / W) * 3 * W + 2 * W + (e - imp) % W] = acc;
    }
    /* the tables: through the row gathers, then their maxout maps and the branches */
    memset(t.g_pre_s, 0, sizeof(float) * (size_t)(d->US * PW));
    memset(t.g_pre_g, 0, sizeof(float) * (size_t)(d->UG * PW));
    memset(t.g_f_s, 0, sizeof(float) * (size_t)(d->US * W));
    memset(t.g_f_g, 0, sizeof(float) * (size_t)(d->UG * W));
    rows_gather_backward(R, W, PW, oi, gi, t.g_pre, t.g_prod, s.f_s, s.f_g, t.g_pre_s, t.g_pre_g, t.g_f_s, t.g_f_g);
    gemm('T', 'N', PW, W, d->US, 1.f, t.g_pre_s, PW, s.f_s, W, 0.f, g_w_m, 3 * W);
    gemm('T', 'N', PW, W, d->UG, 1.f, t.g_pre_g, PW, s.f_g, W, 0.f, g_w_m + W, 3 * W);
    gemm('N', 'N', d->US, W, PW, 1.f, t.g_pre_s, PW, w->w_m, 3 * W, 1.f, t.g_f_s, W);
    gemm('N', 'N', d->UG, W, PW, 1.f, t.g_pre_g, PW, w->w_m + W, 3 * W, 1.f, t.g_f_g, W);
    if (branch_backward(d->US, W, t.g_f_s, s.xh_s, s.rs_s, w->ln_s, seeds[0], threshold, keep_scale, t.g_h_s,
                        g_ln_s)) return -1;
    if (branch_backward(d->UG, W, t.g_f_g, s.xh_g, s.rs_g, w->ln_g, seeds[1], threshold, keep_scale, t.g_h_g,
                        g_ln_g)) return -1;
    gemm('T', 'N', W, d->DS, d->US, 1.f, t.g_h_s, W, x_s, d->DS, 0.f, g_w_s, d->DS);
    gemm('T', 'N', W, d->DG, d->UG, 1.f, t.g_h_g, W, x_g, d->DG, 0.f, g_w_g, d->DG);
    if (g_x_s) gemm('N', 'N', d->US, d->DS, W, 1.f, t.g_h_s, W, w->w_s, d->DS, 0.f, g_x_s, d->DS);
    if (g_x_g) gemm('N', 'N', d->UG, d->DG, W, 1.f, t.g_h_g, W, w->w_g, d->DG, 0.f, g_x_g, d->DG);
    return 0;
}
