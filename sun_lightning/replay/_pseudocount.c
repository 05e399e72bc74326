/* Native index of the radius pseudocount (SPEC §4, paper appendix "Pseudocount radius and
 * standardization").  The exact semantics and the data structure are described in the module
 * docstring of pseudocount.py; this file only holds the mechanism.
 *
 * Build with -ffp-contract=off: the distance d^2 = sum_m ((x_m - y_m) / st_m)^2 must round like
 * numpy (no fused multiply-add), so that ties at exactly rho agree with the reference.
 *
 * Layout: a hash grid (open addressing, key = cell coordinates of up to 4 grid features + goal
 * action) of cells; each cell owns one malloc'ed block of M + 2 arrays of cap elements
 * [feature 0 | ... | feature M-1 (double) | count | slot (int32)], so its entries are contiguous,
 * distances vectorize across entries and its counts are one dense int32 run.  A storage slot
 * maps to (cell, position) for O(1) eviction (swap-remove) and O(1) count reads.
 */
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define MAXD 4
#define CMAX_I ((int64_t)1 << 40)
#define CMAX_D 1099511627776.0
#define BOX_DIM 64   /* cells per grid feature above which a query bounds every cell instead */
#define BOX_ALL 8192 /* cells per query box above which a query bounds every cell instead */
#define CHUNK 64     /* records whose approximate distances are computed in one pass */
#define MALLOC_OVERHEAD 16

enum { ERR_FINITE = -1, ERR_NOMEM = -2, ERR_SLOT = -3 };

typedef struct {
    int64_t c[MAXD]; /* cell coordinates (0 for unused grid features) */
    char *blk;       /* NULL when cap == 0 */
    int32_t n, cap;  /* entries, capacity of blk */
    int32_t act;     /* goal action */
    int32_t pad;
} Cell;

/* One cell of a query box on its way through the lookup pipeline of apply_point. */
typedef struct {
    int64_t k[MAXD];
    uint64_t hs;
    double F;
    const Cell *c;
} Probe;

typedef struct {
    int M, D;
    int64_t cap;
    size_t R; /* bytes per entry in a block: 8 M + 8 */
    double rho2, rho_eff, thr_out, thr_in, pre_lo, pre_hi;
    int interior_ok;
    const double *st; /* owned by Python, updated in place */
    double *mom;      /* owned by Python: shift c[M], S1[M], S2[M] */
    double *xbuf;     /* scratch: 4 M doubles (step x, step evicted x, 1 / st, rebuild) */
    int dims[MAXD];
    double o[MAXD], L[MAXD];
    int32_t level; /* cell sides were doubled (> 0) or halved (< 0) this many times */
    Cell *cells;
    int64_t ncells, ccap, nonempty;
    uint64_t *tab;
    int64_t tsize;
    int32_t *scell, *spos;
    int64_t live, rebuilds, blk_bytes;
    int64_t gc_cells, box_all; /* tuning knobs (tests force the rare paths) */
    Probe *probe;              /* scratch of apply_point */
    int64_t nprobe;
} PC;

/* ------------------------------------------------------------------ small helpers */
/* Feature m of entry i is cell_x(h, c)[m * c->cap + i]. */
static inline double *cell_x(const PC *h, const Cell *c) { (void)h; return (double *)c->blk; }
static inline int32_t *cell_cnt(const PC *h, const Cell *c) {
    return (int32_t *)(c->blk + (size_t)c->cap * 8 * (size_t)h->M);
}
static inline int32_t *cell_slot(const PC *h, const Cell *c) { return cell_cnt(h, c) + c->cap; }

static inline void get_entry(const PC *h, const Cell *c, int32_t i, double *x) {
    const double *X = cell_x(h, c) + i;
    for (int m = 0; m < h->M; m++) x[m] = X[(size_t)m * c->cap];
}

static inline void put_entry(const PC *h, const Cell *c, int32_t i, const double *x) {
    double *X = cell_x(h, c) + i;
    for (int m = 0; m < h->M; m++) X[(size_t)m * c->cap] = x[m];
}

static inline uint64_t mix64(uint64_t z) {
    z ^= z >> 30;
    z *= 0xbf58476d1ce4e5b9ULL;
    z ^= z >> 27;
    z *= 0x94d049bb133111ebULL;
    z ^= z >> 31;
    return z;
}

static inline uint64_t hash_cell(const int64_t *c, int32_t a) {
    uint64_t h = mix64((uint64_t)(uint32_t)a + 0x9e3779b97f4a7c15ULL);
    for (int k = 0; k < MAXD; k++) h = mix64(h ^ (uint64_t)c[k]);
    return h;
}

/* Cell coordinate of v: monotone non-decreasing in v (IEEE rounding is monotone), which is what
 * makes the query box exact.  Far values are clamped into the two edge cells. */
static inline int64_t fcell(double v, double o, double L) {
    double q = floor((v - o) / L);
    if (!(q > -CMAX_D)) return -CMAX_I;
    if (q > CMAX_D) return CMAX_I;
    return (int64_t)q;
}

static inline int all_finite(const double *x, int M) {
    for (int m = 0; m < M; m++)
        if (!isfinite(x[m])) return 0;
    return 1;
}

/* ------------------------------------------------------------------ cell blocks */
/* Byte offset of array j (features 0..M-1, then counts, then slots) in a block of cap. */
static inline size_t arr_off(const PC *h, int j, int32_t cap) {
    return j <= h->M ? (size_t)j * cap * 8 : (size_t)h->M * cap * 8 + (size_t)cap * 4;
}

/* Move the n live elements of every array from the layout of from_cap to that of to_cap.
 * Moving up, the farthest array goes first; moving down, the nearest: no array overwrites
 * one that has not moved yet. */
static void move_arrays(PC *h, Cell *c, int32_t from_cap, int32_t to_cap) {
    const int J = h->M + 2;
    for (int t = 1; t < J; t++) {
        int j = to_cap > from_cap ? J - t : t;
        size_t w = j < h->M ? 8 : 4;
        memmove(c->blk + arr_off(h, j, to_cap), c->blk + arr_off(h, j, from_cap), (size_t)c->n * w);
    }
}

/* Resize a cell's block to ncap >= n entries, keeping the arrays' contents. */
static int block_resize(PC *h, Cell *c, int32_t ncap) {
    int32_t ocap = c->cap;
    if (ncap < ocap) move_arrays(h, c, ocap, ncap); /* before the block shrinks */
    char *b = realloc(c->blk, (size_t)ncap * h->R);
    if (!b) {
        if (ncap < ocap) move_arrays(h, c, ncap, ocap);
        return ERR_NOMEM;
    }
    c->blk = b;
    if (ncap > ocap) move_arrays(h, c, ocap, ncap); /* after the block grew */
    h->blk_bytes += ((int64_t)ncap - ocap) * (int64_t)h->R + (ocap ? 0 : MALLOC_OVERHEAD);
    c->cap = ncap;
    return 0;
}

static void block_release(PC *h, Cell *c) {
    free(c->blk);
    h->blk_bytes -= (int64_t)c->cap * (int64_t)h->R + MALLOC_OVERHEAD;
    c->blk = NULL;
    c->cap = 0;
}

/* ------------------------------------------------------------------ hash table of cells */
static int table_init(PC *h, int64_t want) {
    int64_t t = 1024;
    while (t < 2 * want) t *= 2;
    uint64_t *tab = calloc((size_t)t, sizeof(uint64_t));
    if (!tab) return ERR_NOMEM;
    free(h->tab);
    h->tab = tab;
    h->tsize = t;
    return 0;
}

static void table_put(uint64_t *tab, int64_t tsize, uint64_t hs, int64_t id) {
    uint64_t mask = (uint64_t)tsize - 1, i = hs & mask;
    while (tab[i]) i = (i + 1) & mask;
    tab[i] = (hs & 0xffffffff00000000ULL) | (uint64_t)(uint32_t)(id + 1);
}

static int table_grow(PC *h) {
    int64_t t = h->tsize * 2;
    uint64_t *tab = calloc((size_t)t, sizeof(uint64_t));
    if (!tab) return ERR_NOMEM;
    for (int64_t id = 0; id < h->ncells; id++)
        table_put(tab, t, hash_cell(h->cells[id].c, h->cells[id].act), id);
    free(h->tab);
    h->tab = tab;
    h->tsize = t;
    return 0;
}

static inline int same_cell(const Cell *c, const int64_t *k, int32_t a) {
    return c->act == a && c->c[0] == k[0] && c->c[1] == k[1] && c->c[2] == k[2] && c->c[3] == k[3];
}

/* Id of the cell (k, a); -1 if absent and !create; ERR_NOMEM on allocation failure. */
static int64_t cell_get(PC *h, const int64_t *k, int32_t a, int create) {
    uint64_t hs = hash_cell(k, a), mask = (uint64_t)h->tsize - 1, i = hs & mask;
    uint32_t tag = (uint32_t)(hs >> 32);
    for (;;) {
        uint64_t e = h->tab[i];
        if (!e) break;
        if ((uint32_t)(e >> 32) == tag) {
            int64_t id = (int64_t)(uint32_t)e - 1;
            if (same_cell(&h->cells[id], k, a)) return id;
        }
        i = (i + 1) & mask;
    }
    if (!create) return -1;
    if (h->ncells == h->ccap) {
        int64_t nc = h->ccap + h->ccap / 2 + 64;
        Cell *cs = realloc(h->cells, (size_t)nc * sizeof(Cell));
        if (!cs) return ERR_NOMEM;
        h->cells = cs;
        h->ccap = nc;
    }
    int64_t id = h->ncells++;
    Cell *c = &h->cells[id];
    memcpy(c->c, k, sizeof(c->c));
    c->blk = NULL;
    c->n = c->cap = 0;
    c->act = a;
    c->pad = 0;
    h->tab[i] = (hs & 0xffffffff00000000ULL) | (uint64_t)(uint32_t)(id + 1);
    if (2 * h->ncells > h->tsize && table_grow(h)) return ERR_NOMEM;
    return id;
}

static inline void cell_coords(const PC *h, const double *x, int64_t *k) {
    for (int j = 0; j < MAXD; j++)
        k[j] = j < h->D ? fcell(x[h->dims[j]], h->o[j], h->L[j]) : 0;
}

/* ------------------------------------------------------------------ entries */
static int add_entry(PC *h, int64_t cid, const double *x, int32_t cnt, int32_t slot) {
    Cell *c = &h->cells[cid];
    if (c->n == c->cap) { /* capacities 1, 2, ..., 8, then +25% */
        int64_t ncap = c->cap < 8 ? c->cap + 1 : c->cap + c->cap / 4;
        if (block_resize(h, c, (int32_t)(ncap < INT32_MAX ? ncap : INT32_MAX))) return ERR_NOMEM;
    }
    if (c->n == 0) h->nonempty++;
    int32_t p = c->n++;
    put_entry(h, c, p, x);
    cell_cnt(h, c)[p] = cnt;
    cell_slot(h, c)[p] = slot;
    h->scell[slot] = (int32_t)cid;
    h->spos[slot] = p;
    h->live++;
    return 0;
}

/* Swap-remove the entry of slot (occupied); its coordinates and action go to xe / ae. */
static void remove_slot(PC *h, int64_t slot, double *xe, int64_t *ae) {
    Cell *c = &h->cells[h->scell[slot]];
    int32_t p = h->spos[slot], last = c->n - 1;
    double *X = cell_x(h, c);
    int32_t *cnt = cell_cnt(h, c), *sl = cell_slot(h, c);
    get_entry(h, c, p, xe);
    *ae = c->act;
    if (p != last) {
        for (int m = 0; m < h->M; m++) X[(size_t)m * c->cap + p] = X[(size_t)m * c->cap + last];
        cnt[p] = cnt[last];
        sl[p] = sl[last];
        h->spos[sl[p]] = p;
    }
    c->n--;
    h->scell[slot] = -1;
    h->live--;
    if (c->n == 0) {
        block_release(h, c);
        h->nonempty--;
    } else if (c->cap > 8 && c->n < c->cap / 2) { /* shrinking cells give memory back */
        block_resize(h, c, c->n + c->n / 4 + 1); /* a failed shrink keeps the larger block */
    }
}

/* ------------------------------------------------------------------ exact neighbour scans */
/* Add sign to the count of every entry of cell c within rho of x; return how many.
 *
 * The decision is the documented formula (true divisions, feature order).  It is computed only
 * where a cheap approximation (multiplication by 1 / st, relative error < 1e-13 of the exact
 * value) lies within a relative 1e-12 of rho^2; elsewhere the approximation decides, which then
 * provably agrees with the formula.  inv is NULL when 1 / st is not finite (no prefilter). */
#define DEFINE_SCAN(NAME, MM)                                                                   \
    static int64_t NAME(const PC *h, const Cell *c, const double *x, const double *inv,        \
                        int sign) {                                                            \
        const int M = (MM) ? (MM) : h->M;                                                      \
        const double *st = h->st, rho2 = h->rho2, lo = h->pre_lo, hi = h->pre_hi;              \
        const double *restrict X = cell_x(h, c);                                               \
        const size_t cap = (size_t)c->cap;                                                     \
        const int32_t n = c->n;                                                                \
        int32_t *restrict cnt = cell_cnt(h, c);                                                \
        int64_t tot = 0;                                                                       \
        double acc[CHUNK];                                                                     \
        for (int32_t i0 = 0; i0 < n; i0 += CHUNK) {                                            \
            const int32_t k = n - i0 < CHUNK ? n - i0 : CHUNK;                                 \
            int unsure = !inv;                                                                 \
            if (inv) {                                                                         \
                {                                                                              \
                    const double *X0 = X + i0, x0 = x[0], i0v = inv[0];                        \
                    for (int32_t i = 0; i < k; i++) {                                          \
                        double t = (x0 - X0[i]) * i0v;                                         \
                        acc[i] = t * t;                                                        \
                    }                                                                          \
                }                                                                              \
                for (int m = 1; m < M; m++) {                                                  \
                    const double *Xm = X + m * cap + i0, xm = x[m], im = inv[m];               \
                    for (int32_t i = 0; i < k; i++) {                                          \
                        double t = (xm - Xm[i]) * im;                                          \
                        acc[i] += t * t;                                                       \
                    }                                                                          \
                }                                                                              \
                int32_t *restrict ci = cnt + i0;                                               \
                for (int32_t i = 0; i < k; i++) {                                              \
                    int hit = acc[i] < lo;                                                     \
                    ci[i] += hit ? sign : 0;                                                   \
                    tot += hit;                                                                \
                    unsure |= (acc[i] >= lo) & (acc[i] <= hi);                                 \
                }                                                                              \
            }                                                                                  \
            if (!unsure) continue;                                                             \
            for (int32_t i = 0; i < k; i++) {                                                  \
                if (inv && !(acc[i] >= lo && acc[i] <= hi)) continue;                          \
                double a = 0.0;                                                                \
                for (int m = 0; m < M; m++) {                                                  \
                    double t = (x[m] - X[m * cap + i0 + i]) / st[m];                           \
                    a += t * t;                                                                \
                }                                                                              \
                if (a <= rho2) {                                                               \
                    cnt[i0 + i] += sign;                                                       \
                    tot++;                                                                     \
                }                                                                              \
            }                                                                                  \
        }                                                                                      \
        return tot;                                                                            \
    }
DEFINE_SCAN(scan1, 1)
DEFINE_SCAN(scan2, 2)
DEFINE_SCAN(scan3, 3)
DEFINE_SCAN(scan4, 4)
DEFINE_SCAN(scan5, 5)
DEFINE_SCAN(scan6, 6)
DEFINE_SCAN(scan7, 7)
DEFINE_SCAN(scan8, 8)
DEFINE_SCAN(scanM, 0)

static inline int64_t scan_cell(const PC *h, const Cell *c, const double *x, const double *inv,
                                int sign) {
    switch (h->M) {
    case 1: return scan1(h, c, x, inv, sign);
    case 2: return scan2(h, c, x, inv, sign);
    case 3: return scan3(h, c, x, inv, sign);
    case 4: return scan4(h, c, x, inv, sign);
    case 5: return scan5(h, c, x, inv, sign);
    case 6: return scan6(h, c, x, inv, sign);
    case 7: return scan7(h, c, x, inv, sign);
    case 8: return scan8(h, c, x, inv, sign);
    default: return scanM(h, c, x, inv, sign);
    }
}

/* Cell c of grid feature j seen from coordinate x: squared lower / upper bounds of
 * (|x - y| / st) over every y the cell can hold.  The cell's extent is widened by delta, far
 * beyond the rounding of the cell function and of these bounds (relative 1e-12 against ~1e-16);
 * clamped edge cells are unbounded on their outer side. */
static inline void cell_bounds(const PC *h, int j, int64_t c, double x, double s, double *g2,
                               double *f2) {
    double o = h->o[j], L = h->L[j];
    double delta = 1e-12 * (fabs(o) + (fabs((double)c) + 2.0) * L) + 1e-300;
    double lo = c <= -CMAX_I ? -INFINITY : o + (double)c * L - delta;
    double hi = c >= CMAX_I ? INFINITY : o + (double)(c + 1) * L + delta;
    if (isnan(lo)) lo = -INFINITY;
    if (isnan(hi)) hi = INFINITY;
    double gap = lo - x > x - hi ? lo - x : x - hi;
    if (!(gap > 0.0)) gap = 0.0;
    double far = x - lo > hi - x ? x - lo : hi - x;
    gap /= s;
    far /= s;
    *g2 = gap * gap;
    *f2 = far * far;
}

/* Neighbours in one cell: interior cells (every point provably within rho) are counted and
 * bumped without distance checks, others are checked entry by entry. */
static inline int64_t visit_cell(const PC *h, const Cell *c, double F, const double *x,
                                 const double *inv, int sign) {
    if (h->interior_ok && F <= h->thr_in) {
        int32_t *restrict cnt = cell_cnt(h, c);
        const int32_t n = c->n;
        for (int32_t i = 0; i < n; i++) cnt[i] += sign;
        return n;
    }
    return scan_cell(h, c, x, inv, sign);
}

/* Fallback for query boxes too large to enumerate: bound every stored cell. */
static int64_t apply_all_cells(PC *h, const double *x, int32_t a, const double *inv, int sign) {
    int64_t tot = 0;
    for (int64_t id = 0; id < h->ncells; id++) {
        const Cell *c = &h->cells[id];
        if (c->n == 0 || c->act != a) continue;
        double G = 0.0, F = 0.0;
        for (int j = 0; j < h->D; j++) {
            double g2, f2;
            int d = h->dims[j];
            cell_bounds(h, j, c->c[j], x[d], h->st[d], &g2, &f2);
            G += g2;
            F += f2;
        }
        if (G > h->thr_out) continue;
        tot += visit_cell(h, c, F, x, inv, sign);
    }
    return tot;
}

/* Add sign to the count of every stored entry within rho of (x, a); return their number. */
static int64_t apply_point(PC *h, const double *x, int32_t a, int sign) {
    if (h->live == 0) return 0;
    double *inv = h->xbuf + 2 * h->M;
    for (int m = 0; m < h->M; m++) {
        inv[m] = 1.0 / h->st[m];
        if (!isnormal(h->st[m]) || !isnormal(inv[m])) inv = NULL;
        if (!inv) break;
    }
    int64_t lo[MAXD], nk[MAXD], box = 1;
    double g2[MAXD][BOX_DIM], f2[MAXD][BOX_DIM];
    for (int j = 0; j < MAXD; j++) {
        if (j >= h->D) {
            lo[j] = 0;
            nk[j] = 1;
            g2[j][0] = f2[j][0] = 0.0;
            continue;
        }
        int d = h->dims[j];
        double s = h->st[d];
        /* every neighbour y has |x - y| <= rho_eff st (1 + 1e-15); the margins also cover the
         * rounding of x -/+ r */
        double r = h->rho_eff * s * (1.0 + 1e-9) + 4.0 * DBL_EPSILON * fabs(x[d]);
        int64_t c0 = fcell(x[d] - r, h->o[j], h->L[j]);
        int64_t c1 = fcell(x[d] + r, h->o[j], h->L[j]);
        if (c1 - c0 >= BOX_DIM) return apply_all_cells(h, x, a, inv, sign);
        lo[j] = c0;
        nk[j] = c1 - c0 + 1;
        box *= nk[j];
        for (int64_t i = 0; i < nk[j]; i++)
            cell_bounds(h, j, c0 + i, x[d], s, &g2[j][i], &f2[j][i]);
    }
    if (box > h->box_all || box > 4 * h->nonempty + 64) return apply_all_cells(h, x, a, inv, sign);
    if (box > h->nprobe) {
        Probe *p = realloc(h->probe, (size_t)box * sizeof(Probe));
        if (!p) return apply_all_cells(h, x, a, inv, sign);
        h->probe = p;
        h->nprobe = box;
    }
    /* The lookups are pipelined (hash all cells, then probe the table, then read the cells,
     * then scan them) with prefetches in between, so that their cache misses overlap. */
    Probe *P = h->probe;
    const double thr = h->thr_out;
    const uint64_t mask = (uint64_t)h->tsize - 1;
    int64_t np = 0, k[MAXD];
    for (int64_t i0 = 0; i0 < nk[0]; i0++) {
        double G0 = g2[0][i0], F0 = f2[0][i0];
        if (G0 > thr) continue;
        k[0] = lo[0] + i0;
        for (int64_t i1 = 0; i1 < nk[1]; i1++) {
            double G1 = G0 + g2[1][i1], F1 = F0 + f2[1][i1];
            if (G1 > thr) continue;
            k[1] = lo[1] + i1;
            for (int64_t i2 = 0; i2 < nk[2]; i2++) {
                double G2 = G1 + g2[2][i2], F2 = F1 + f2[2][i2];
                if (G2 > thr) continue;
                k[2] = lo[2] + i2;
                for (int64_t i3 = 0; i3 < nk[3]; i3++) {
                    if (G2 + g2[3][i3] > thr) continue;
                    k[3] = lo[3] + i3;
                    Probe *q = &P[np++];
                    memcpy(q->k, k, sizeof(k));
                    q->F = F2 + f2[3][i3];
                    q->hs = hash_cell(k, a);
                    __builtin_prefetch(&h->tab[q->hs & mask]);
                }
            }
        }
    }
    for (int64_t i = 0; i < np; i++) { /* first entry with the tag (usually the cell) */
        Probe *q = &P[i];
        uint64_t j = q->hs & mask;
        uint32_t tag = (uint32_t)(q->hs >> 32);
        q->c = NULL;
        for (uint64_t e; (e = h->tab[j]) != 0; j = (j + 1) & mask) {
            if ((uint32_t)(e >> 32) == tag) {
                q->c = &h->cells[(uint32_t)e - 1];
                __builtin_prefetch(q->c);
                break;
            }
        }
    }
    int64_t nc = 0;
    for (int64_t i = 0; i < np; i++) { /* verify the key (tag collisions: full lookup) */
        Probe *q = &P[i];
        const Cell *c = q->c;
        if (!c) continue;
        if (!same_cell(c, q->k, a)) {
            int64_t id = cell_get(h, q->k, a, 0);
            if (id < 0) continue;
            c = &h->cells[id];
        }
        if (!c->n) continue;
        if (!(h->interior_ok && q->F <= h->thr_in)) {
            for (int m = 0; m < h->M && m < 4; m++)
                __builtin_prefetch(cell_x(h, c) + (size_t)m * c->cap);
        }
        __builtin_prefetch(cell_cnt(h, c));
        P[nc].c = c;
        P[nc].F = q->F;
        nc++;
    }
    int64_t tot = 0;
    for (int64_t i = 0; i < nc; i++) tot += visit_cell(h, P[i].c, P[i].F, x, inv, sign);
    return tot;
}

/* ------------------------------------------------------------------ rebuild */
static void set_thresholds(PC *h) {
    h->thr_out = h->rho2 * (1.0 + 1e-9) + 1e-300;
    h->thr_in = h->rho2 * (1.0 - 1e-9);
    h->interior_ok = h->D == h->M && h->rho2 >= 1e-280;
    h->pre_lo = h->rho2 * (1.0 - 1e-12) - 1e-290;
    h->pre_hi = h->rho2 * (1.0 + 1e-12) + 1e-290;
}

/* Re-bucket every entry for a new geometry (also drops empty cells).  All new blocks are
 * allocated before anything moves, so a failure leaves the old index intact. */
static int rebuild(PC *h, int D, const int32_t *dims, const double *o, const double *L) {
    PC old = *h;
    int32_t *tmp = malloc((size_t)(h->live ? h->live : 1) * sizeof(int32_t));
    if (!tmp) return ERR_NOMEM;
    h->cells = NULL;
    h->ncells = h->ccap = h->nonempty = 0;
    h->tab = NULL;
    h->D = D;
    for (int j = 0; j < MAXD; j++) {
        h->dims[j] = j < D ? dims[j] : 0;
        h->o[j] = j < D ? o[j] : 0.0;
        h->L[j] = j < D ? L[j] : 1.0;
    }
    set_thresholds(h);
    int64_t t = 0, k[MAXD];
    if (table_init(h, old.nonempty + 16)) goto fail;
    for (int64_t id = 0; id < old.ncells; id++) {
        const Cell *c = &old.cells[id];
        for (int32_t p = 0; p < c->n; p++) {
            get_entry(&old, c, p, h->xbuf + 3 * h->M);
            cell_coords(h, h->xbuf + 3 * h->M, k);
            int64_t nid = cell_get(h, k, c->act, 1);
            if (nid < 0) goto fail;
            h->cells[nid].n++;
            tmp[t++] = (int32_t)nid;
        }
    }
    h->blk_bytes = 0;
    for (int64_t id = 0; id < h->ncells; id++) {
        Cell *c = &h->cells[id];
        c->blk = malloc((size_t)c->n * h->R);
        if (!c->blk) goto fail;
        c->cap = c->n;
        c->n = 0;
        h->blk_bytes += (int64_t)c->cap * (int64_t)h->R + MALLOC_OVERHEAD;
    }
    h->nonempty = h->ncells;
    t = 0;
    for (int64_t id = 0; id < old.ncells; id++) {
        Cell *oc = &old.cells[id];
        const int32_t *ocnt = cell_cnt(&old, oc), *osl = cell_slot(&old, oc);
        for (int32_t p = 0; p < oc->n; p++) {
            int32_t nid = tmp[t++];
            Cell *c = &h->cells[nid];
            int32_t q = c->n++;
            get_entry(&old, oc, p, h->xbuf + 3 * h->M);
            put_entry(h, c, q, h->xbuf + 3 * h->M);
            cell_cnt(h, c)[q] = ocnt[p];
            cell_slot(h, c)[q] = osl[p];
            h->scell[osl[p]] = nid;
            h->spos[osl[p]] = q;
        }
        free(oc->blk);
    }
    free(tmp);
    free(old.cells);
    free(old.tab);
    h->rebuilds++;
    return 0;
fail:
    for (int64_t id = 0; id < h->ncells; id++) free(h->cells[id].blk);
    free(tmp);
    free(h->cells);
    free(h->tab);
    *h = old;
    return ERR_NOMEM;
}

/* Cells emptied by evictions are reclaimed by a same-geometry rebuild once they outnumber the
 * non-empty ones, so a drifting FIFO buffer keeps bounded memory. */
static int maybe_compact(PC *h) {
    if (h->ncells - h->nonempty > h->nonempty + h->gc_cells)
        return rebuild(h, h->D, h->dims, h->o, h->L);
    return 0;
}

/* Sparse data (mostly one entry per cell) wastes memory on cells and time on empty lookups:
 * double the cell sides (any cell size is exact; only speed and memory depend on it). */
static int maybe_coarsen(PC *h) {
    if (h->D == 0 || h->level >= 6 || h->nonempty <= h->live / 2 + h->gc_cells) return 0;
    double L[MAXD];
    for (int j = 0; j < MAXD; j++) L[j] = 2.0 * h->L[j];
    int err = rebuild(h, h->D, h->dims, h->o, L);
    if (!err) h->level++;
    return err;
}

/* Count and bump the neighbours of x, then store it at slot with count 1 + neighbours. */
static int insert_one(PC *h, int64_t slot, const double *x, int32_t a) {
    int64_t tot = apply_point(h, x, a, 1);
    int64_t k[MAXD];
    cell_coords(h, x, k);
    int64_t cid = cell_get(h, k, a, 1);
    if (cid < 0) return ERR_NOMEM;
    int err = add_entry(h, cid, x, (int32_t)(tot + 1), (int32_t)slot);
    return err ? err : maybe_coarsen(h);
}

/* ------------------------------------------------------------------ exported API */
void pc_free(PC *h) {
    if (!h) return;
    for (int64_t id = 0; id < h->ncells; id++) free(h->cells[id].blk);
    free(h->cells);
    free(h->tab);
    free(h->scell);
    free(h->spos);
    free(h->xbuf);
    free(h->probe);
    free(h);
}

PC *pc_new(int M, int64_t cap, double rho, double rho2, const double *st, double *mom) {
    PC *h = calloc(1, sizeof(PC));
    if (!h) return NULL;
    h->M = M;
    h->cap = cap;
    h->R = 8 * (size_t)M + 8;
    h->rho2 = rho2;
    h->rho_eff = rho > 1e-150 ? rho : 1e-150; /* below, rho^2 underflows: bound by the underflow */
    h->st = st;
    h->mom = mom;
    h->gc_cells = 4096;
    h->box_all = BOX_ALL;
    for (int j = 0; j < MAXD; j++) h->L[j] = 1.0;
    set_thresholds(h);
    h->xbuf = malloc(4 * (size_t)M * sizeof(double));
    h->scell = malloc((size_t)cap * sizeof(int32_t));
    h->spos = malloc((size_t)cap * sizeof(int32_t));
    if (!h->xbuf || !h->scell || !h->spos || table_init(h, 16)) {
        pc_free(h);
        return NULL;
    }
    for (int64_t i = 0; i < cap; i++) h->scell[i] = -1;
    return h;
}

/* Non-empty cells above which emptied cells are compacted, and the largest query box
 * enumerated (tests lower them to force the rare paths). */
void pc_tune(PC *h, int64_t gc_cells, int64_t box_all) {
    h->gc_cells = gc_cells;
    h->box_all = box_all;
}

/* New geometry (level: how many doublings / halvings L already includes). */
int pc_set_grid(PC *h, int D, const int32_t *dims, const double *o, const double *L, int level) {
    int err = rebuild(h, D, dims, o, L);
    if (!err) h->level = level;
    return err;
}

/* Current geometry: writes dims, origin and cell sides of the D grid features; returns D. */
int pc_geometry(const PC *h, int32_t *dims, double *o, double *L) {
    for (int j = 0; j < h->D; j++) {
        dims[j] = h->dims[j];
        o[j] = h->o[j];
        L[j] = h->L[j];
    }
    return h->D;
}

/* Evict the occupied slots among slots[0:n] (all distinct); their coordinates and actions are
 * written, compacted, to xe [ne, M] and ae [ne].  Returns ne. */
int64_t pc_evict(PC *h, int64_t n, const int64_t *slots, double *xe, int64_t *ae) {
    int64_t ne = 0;
    for (int64_t i = 0; i < n; i++) {
        int64_t s = slots[i];
        if (s < 0 || s >= h->cap || h->scell[s] < 0) continue;
        remove_slot(h, s, xe + ne * h->M, ae + ne);
        ne++;
    }
    if (ne && maybe_compact(h)) return ERR_NOMEM;
    return ne;
}

/* Add sign to the counts of the stored neighbours of each point x[i] (actions a, may be NULL). */
int pc_apply(PC *h, int64_t n, const double *x, const int64_t *a, int sign) {
    for (int64_t i = 0; i < n; i++) apply_point(h, x + i * h->M, a ? (int32_t)a[i] : 0, sign);
    return 0;
}

/* Insert x[i] at slots[i] one after another (each counts and bumps the previous ones). */
int pc_insert(PC *h, int64_t n, const int64_t *slots, const double *x, const int64_t *a) {
    for (int64_t i = 0; i < n; i++) {
        if (slots[i] < 0 || slots[i] >= h->cap || h->scell[slots[i]] >= 0) return ERR_SLOT;
        if (!all_finite(x + i * h->M, h->M)) return ERR_FINITE;
    }
    for (int64_t i = 0; i < n; i++) {
        int err = insert_one(h, slots[i], x + i * h->M, a ? (int32_t)a[i] : 0);
        if (err) return err;
    }
    return 0;
}

/* One sample (no re-standardization due): evict slot, decrement the evicted entry's
 * neighbours, update the running moments like the Python reference, insert x.  x is float64
 * (xtype 0) or float32 (xtype 1).  Returns 1 if an entry was evicted, else 0; < 0 on error. */
int pc_step(PC *h, int64_t slot, const void *xp, int xtype, int64_t act) {
    const int M = h->M;
    double *x = h->xbuf, *xe = h->xbuf + M;
    if (slot < 0 || slot >= h->cap) return ERR_SLOT;
    for (int m = 0; m < M; m++)
        x[m] = xtype ? (double)((const float *)xp)[m] : ((const double *)xp)[m];
    if (!all_finite(x, M)) return ERR_FINITE;
    double *c = h->mom, *S1 = h->mom + M, *S2 = h->mom + 2 * M;
    int evicted = h->scell[slot] >= 0;
    int64_t ae = 0;
    if (evicted) {
        remove_slot(h, slot, xe, &ae);
        for (int m = 0; m < M; m++) {
            double d = xe[m] - c[m];
            S1[m] -= d;
            S2[m] -= d * d;
        }
    }
    for (int m = 0; m < M; m++) {
        double d = x[m] - c[m];
        S1[m] += d;
        S2[m] += d * d;
    }
    if (evicted) apply_point(h, xe, (int32_t)ae, -1);
    int err = insert_one(h, slot, x, (int32_t)act);
    if (err) return err;
    if (evicted && maybe_compact(h)) return ERR_NOMEM;
    return evicted;
}

/* Stored counts at slots (0 where empty); ERR_SLOT if a slot is out of range. */
int pc_counts(const PC *h, int64_t n, const int64_t *slots, int64_t *out) {
    for (int64_t i = 0; i < n; i++) {
        int64_t s = slots[i];
        if (s < 0 || s >= h->cap) return ERR_SLOT;
        int32_t cid = h->scell[s];
        out[i] = cid < 0 ? 0 : cell_cnt(h, &h->cells[cid])[h->spos[s]];
    }
    return 0;
}

/* Every stored entry, in slot order: slots, coordinates [live, M], actions, counts. */
int64_t pc_export(const PC *h, int64_t *slots, double *x, int64_t *a, int64_t *cnt) {
    int64_t t = 0;
    for (int64_t s = 0; s < h->cap; s++) {
        int32_t cid = h->scell[s];
        if (cid < 0) continue;
        const Cell *c = &h->cells[cid];
        int32_t p = h->spos[s];
        slots[t] = s;
        get_entry(h, c, p, x + t * h->M);
        a[t] = c->act;
        cnt[t] = cell_cnt(h, c)[p];
        t++;
    }
    return t;
}

/* Store entries with given counts (no counting): restores an exported state. */
int pc_load(PC *h, int64_t n, const int64_t *slots, const double *x, const int64_t *a,
            const int64_t *cnt) {
    int64_t k[MAXD];
    for (int64_t i = 0; i < n; i++) {
        if (slots[i] < 0 || slots[i] >= h->cap || h->scell[slots[i]] >= 0) return ERR_SLOT;
        cell_coords(h, x + i * h->M, k);
        int64_t cid = cell_get(h, k, a ? (int32_t)a[i] : 0, 1);
        if (cid < 0) return ERR_NOMEM;
        int err = add_entry(h, cid, x + i * h->M, (int32_t)cnt[i], (int32_t)slots[i]);
        if (err) return err;
    }
    return 0;
}

/* live, cells, non-empty cells, bytes held, rebuilds, level. */
void pc_stats(const PC *h, int64_t *out) {
    out[0] = h->live;
    out[1] = h->ncells;
    out[2] = h->nonempty;
    out[3] = (int64_t)(sizeof(PC) + (size_t)h->ccap * sizeof(Cell) +
                       (size_t)h->tsize * sizeof(uint64_t) + (size_t)h->cap * 2 * sizeof(int32_t) +
                       4 * (size_t)h->M * sizeof(double) + (size_t)h->nprobe * sizeof(Probe)) +
             h->blk_bytes;
    out[4] = h->rebuilds;
    out[5] = h->level;
}
