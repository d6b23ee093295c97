/* gemm_amx.c — bf16 products on the AMX tiles (see gemm_amx.h). */
#include "gemm_amx.h"

#include <omp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cpu.h"
#include "dispatch.h"
#include "gemm_bf16.h"
#include "kernel.h"
#include "util.h"
#include "vec16.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define HAVE_AMX_CODE 1
#else
#define HAVE_AMX_CODE 0
#endif

enum { MC = 128, KC = 256, NP = 32, MAXT = 256 };   /* rows of A per chunk; k per pass; columns per panel; threads at most */

#define C_PASSES ((size_t)1 << 20)   /* bytes of a task's C up to which k goes in passes (the loops) */
#define SHARED_A ((size_t)64 << 20)  /* bytes of op(A) packed up to which the tasks share it (the product) */

static int up32(int v) { return (v + 31) & ~31; }

/* ---- packing ------------------------------------------------------------------
 * op(B) [k, n] into up32(n) / 32 panels, each up32(k) / 2 pair rows of 32
 * columns x 2: panel j, pair row r, column c, e holds op(B)[2r + e][32j + c]
 * (0 past k or n). op(A) [m, k], rows [i0, i1) at a time, tile after tile:
 * tile (b, t) holds rows i0 + 16b .. + 15 and columns 32t .. + 31 (0 past i1
 * or k), 16 rows of 32 bf16 (1 KB, rows 64 bytes apart).
 * Both in blocks of 16 x 32 elements: a whole block (nothing past the edges)
 * in vectors of 16 (vec16.h: bf16_round16 rounds as bf16_from_float does, on
 * VCVTNEPS2BF16 where there is one; transpose16 where the rows of the tiles
 * are columns of the operand as stored), a block at an edge element by
 * element. One element by element at 2-4 ns took longer than the tiles'
 * products (the output layer's E: 40-42 ms a call against ~35 for the product
 * at 1,000 GFLOP/s a thread; measured on Intel model 0xcf). amx_pack_scalar
 * packs every block element by element (tests: both ways, the same bits). */
static int g_pack_scalar;
void amx_pack_scalar(int on) { g_pack_scalar = on; }
static int g_kc = KC;   /* k per pass (the loops, below) */
void amx_k_pass(int kc) { g_kc = kc > 0 ? up32(kc) : KC; }

static float op_at(int t, const float *x, int ld, int row, int col) {   /* op(X)[row][col] */
    return t ? x[(size_t)col * ld + row] : x[(size_t)row * ld + col];
}
/* bits of v rounded: the bf16 in the top 16 bits of each lane */
static inline vu16 bits16(vf16 v) {
    vu16 u;
    v = bf16_round16(v);
    memcpy(&u, &v, sizeof u);
    return u;
}
/* 16 pairs of bf16, (lo[c], hi[c]) in lane c: low half lo's, high half hi's */
static inline vu16 pairs16(vf16 lo, vf16 hi) { return (bits16(lo) >> 16) | (bits16(hi) & 0xffff0000u); }
/* 32 consecutive values (lo: the first 16) as 16 pairs, in order */
static inline vu16 run32(vf16 lo, vf16 hi) {
    vu16 a = bits16(lo), b = bits16(hi);
    vu16 even = __builtin_shufflevector(a, b, 0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    vu16 odd = __builtin_shufflevector(a, b, 1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
    return (even >> 16) | (odd & 0xffff0000u);
}
static inline void transpose16u(vu16 r[16]) {   /* transpose16 on the bits */
    vf16 f[16];
    memcpy(f, r, sizeof f);
    transpose16(f);
    memcpy(r, f, sizeof f);
}

/* Panel j of op(B): pair rows 16 rb .. + 15 (k from 32 rb) x columns 16 cb .. + 15 at a time */
static void pack_panel(uint16_t *bp, int j, int tb, const float *b, int ldb, int k, int n) {
    int kp = up32(k);
    uint32_t *w = (uint32_t *)(bp + (size_t)j * NP * kp);   /* pair row r, column c: w[32 r + c] */
    for (int rb = 0; rb < kp / 32; rb++)
        for (int cb = 0; cb < 2; cb++) {
            int k0 = 32 * rb, n0 = j * NP + 16 * cb;
            uint32_t *d = w + (size_t)16 * rb * NP + 16 * cb;
            if (g_pack_scalar || k0 + 32 > k || n0 + 16 > n) {
                for (int r = 0; r < 16; r++)
                    for (int c = 0; c < 16; c++) {
                        int kk = k0 + 2 * r, nn = n0 + c;
                        float lo = kk < k && nn < n ? op_at(tb, b, ldb, kk, nn) : 0.0f;
                        float hi = kk + 1 < k && nn < n ? op_at(tb, b, ldb, kk + 1, nn) : 0.0f;
                        d[(size_t)r * NP + c] = bf16_from_float(lo) | (uint32_t)bf16_from_float(hi) << 16;
                    }
                continue;
            }
            vu16 v[16];
            if (!tb) {   /* B stored [k, n]: rows kk and kk + 1 side by side */
                for (int r = 0; r < 16; r++) {
                    const float *x = b + (size_t)(k0 + 2 * r) * ldb + n0;
                    v[r] = pairs16(load16(x), load16(x + ldb));
                }
            } else {     /* B stored [n, k]: each column's 32 values along a row, then transposed */
                for (int c = 0; c < 16; c++) {
                    const float *x = b + (size_t)(n0 + c) * ldb + k0;
                    v[c] = run32(load16(x), load16(x + 16));
                }
                transpose16u(v);
            }
            for (int r = 0; r < 16; r++) memcpy(d + (size_t)r * NP, &v[r], sizeof v[r]);
        }
}

/* Rows [i0, i1) of op(A) [m, k], up32(i1 - i0) rows in all */
static void pack_rows(uint16_t *ap, int ta, const float *a, int lda, int i0, int i1, int k) {
    int kp = up32(k), nb = up32(i1 - i0) / 16, nk = kp / 32;
    /* tile after tile along A's rows as stored: along k for each 16 rows (A [m, k]), or along the rows of
     * the chunk for each 32 of k (A stored [k, m]: each of its rows is read once, not once per 16 of its
     * values: the base step's dW products 1.12-1.24x faster, Intel model 0xa7, dev/bench_amx) */
    for (int u = 0; u < nb * nk; u++) {
        int bl = ta ? u % nb : u / nk, t = ta ? u / nb : u % nk;
        uint16_t *tile = ap + ((size_t)bl * (kp / 32) + t) * 512;
        int r0 = i0 + 16 * bl, k0 = 32 * t;
        if (g_pack_scalar || r0 + 16 > i1 || k0 + 32 > k) {
            for (int r = 0; r < 16; r++)
                for (int q = 0; q < 32; q++) {
                    int i = r0 + r, kk = k0 + q;
                    tile[r * 32 + q] = bf16_from_float(i < i1 && kk < k ? op_at(ta, a, lda, i, kk) : 0.0f);
                }
            continue;
        }
        vu16 v[16];
        if (!ta) {   /* A stored [m, k]: a tile's row is 32 values of a row */
            for (int r = 0; r < 16; r++) {
                const float *x = a + (size_t)(r0 + r) * lda + k0;
                v[r] = run32(load16(x), load16(x + 16));
            }
        } else {     /* A stored [k, m]: 32 rows of 16, transposed in two halves */
            vf16 lo[16], hi[16];
            for (int q = 0; q < 16; q++) {
                lo[q] = load16(a + (size_t)(k0 + q) * lda + r0);
                hi[q] = load16(a + (size_t)(k0 + 16 + q) * lda + r0);
            }
            transpose16(lo);
            transpose16(hi);
            for (int r = 0; r < 16; r++) v[r] = run32(lo[r], hi[r]);
        }
        for (int r = 0; r < 16; r++) memcpy(tile + r * 32, &v[r], sizeof v[r]);
    }
}

/* C's block [mr, nr] = beta C + alpha t (t: 32 x 32); C is not read when beta is 0 */
static void block_update(float *c, int ldc, const float *t, int mr, int nr, float alpha, float beta) {
    for (int i = 0; i < mr; i++) {
        float *ci = c + (size_t)i * ldc;
        const float *ti = t + 32 * i;
        if (beta == 0.0f) for (int j = 0; j < nr; j++) ci[j] = alpha * ti[j];
        else for (int j = 0; j < nr; j++) ci[j] = beta * ci[j] + alpha * ti[j];
    }
}

/* ---- the scalar model of the tiles ------------------------------------------------ */
typedef struct { uint8_t b[16][64]; } Tile;

static void tm_load(Tile *t, const void *base, size_t stride) {
    for (int r = 0; r < 16; r++) memcpy(t->b[r], (const uint8_t *)base + r * stride, 64);
}
static void tm_store(const Tile *t, void *base, size_t stride) {
    for (int r = 0; r < 16; r++) memcpy((uint8_t *)base + r * stride, t->b[r], 64);
}
static void tm_floats(float f[16][32], const Tile *t) {   /* a tile's 16 x 32 bf16 as floats */
    for (int r = 0; r < 16; r++)
        for (int i = 0; i < 32; i++) {
            uint16_t h;
            memcpy(&h, &t->b[r][2 * i], 2);
            f[r][i] = bf16_to_float(h);
        }
}
static void tm_dpbf16ps(Tile *c, const Tile *a, const Tile *b) {   /* TDPBF16PS, lane by lane */
    float fa[16][32], fb[16][32];
    tm_floats(fa, a);
    tm_floats(fb, b);
    for (int m = 0; m < 16; m++)
        for (int n = 0; n < 16; n++) {
            float acc;
            memcpy(&acc, &c->b[m][4 * n], 4);
            for (int r = 0; r < 16; r++) {
                acc += fa[m][2 * r] * fb[r][2 * n];
                acc += fa[m][2 * r + 1] * fb[r][2 * n + 1];
            }
            memcpy(&c->b[m][4 * n], &acc, 4);
        }
}

/* ---- the loops ------------------------------------------------------------------------
 * A task: rows [i0, i1) of C (packed into ap) against panels [j0, j1), in
 * passes over k of KC (256) at a time where the task's rows of C fit in
 * half an L2 (C_PASSES; every CPU with AMX has 2 MB a core), else in one
 * pass (the output layer's 906 x 37,000 logits in passes: 1.38x slower):
 * in each pass, for each 32-row block
 * (its two rows of A tiles, 16 KB, stay in L1 as the panels pass), for each
 * panel (16 KB of it, from L2): the four C tiles, k in steps of 32, then C.
 * A whole block (32 x 32 inside C) with alpha 1 and beta 0 or 1 goes
 * straight between C and the tiles: its tiles start from 0 (beta 0, the
 * first pass) or from C's block itself (beta 1, or a later pass: C += the
 * sums as they come; C holds fp32 between passes, so the passes change no
 * bit), and are stored into C; any other block does all of k in the first
 * pass, from 0, and goes through t into C (beta, alpha, the edges:
 * block_update). In a step each A tile load meets two products, the load
 * of the next between them (loads first, then the products, ran the
 * twelve products of a base step 1.12x slower; the whole of k in one pass
 * 1.16x slower: 32 KB of A and 32 KB of a panel at k 512 do not both stay
 * in L1's 48 KB; rows or panels outside made no difference over the
 * twelve; Intel model 0xa7 with AMX, 2 threads, dev/bench_amx). The
 * instructions are macros: the tiles, or the model. */
#define AMX_TASK(ZERO, LOAD, DP, STORE)                                                                   \
    int kp = up32(k), rows = up32(i1 - i0);                                                               \
    int kc = g_kc < kp && (size_t)(i1 - i0) * n * sizeof(float) <= C_PASSES ? g_kc : kp;                   \
    float t[32 * 32] __attribute__((aligned(64)));                                                        \
    for (int kb = 0; kb < kp; kb += kc)                                                                   \
        for (int i = 0; i < rows; i += 32)                                                                \
            for (int j = j0; j < j1; j++) {                                                               \
                const uint16_t *panel = bp + (size_t)j * NP * kp;                                         \
                const uint16_t *a0 = ap + (size_t)(i / 16) * (kp / 32) * 512, *a1 = a0 + (size_t)(kp / 32) * 512; \
                int mr = i1 - i0 - i < 32 ? i1 - i0 - i : 32, nr = n - j * NP < 32 ? n - j * NP : 32;     \
                float *cb = c + (size_t)(i0 + i) * ldc + (size_t)j * NP;                                  \
                size_t cs = (size_t)ldc * sizeof(float);                                                  \
                int direct = mr == 32 && nr == 32 && alpha == 1.0f && (beta == 0.0f || beta == 1.0f);     \
                if (!direct && kb) continue;                                                              \
                int q1 = direct && kb + kc < kp ? kb + kc : kp;                                           \
                if (direct && (beta == 1.0f || kb)) {                                                     \
                    LOAD(0, cb, cs); LOAD(1, cb + 16, cs); LOAD(2, cb + 16 * (size_t)ldc, cs);            \
                    LOAD(3, cb + 16 * (size_t)ldc + 16, cs);                                              \
                } else if (direct && bias) {   /* every row of the tiles the bias: a stride of 0 */       \
                    LOAD(0, bias + (size_t)j * NP, 0); LOAD(1, bias + (size_t)j * NP + 16, 0);            \
                    LOAD(2, bias + (size_t)j * NP, 0); LOAD(3, bias + (size_t)j * NP + 16, 0);            \
                } else {                                                                                  \
                    ZERO(0); ZERO(1); ZERO(2); ZERO(3);                                                   \
                }                                                                                         \
                for (int q = kb; q < q1; q += 32) {                                                       \
                    LOAD(4, a0 + (size_t)(q / 32) * 512, 64);                                             \
                    LOAD(6, panel + (size_t)q * NP, 4 * NP);                                              \
                    DP(0, 4, 6);                                                                          \
                    LOAD(7, panel + (size_t)q * NP + 32, 4 * NP);                                         \
                    DP(1, 4, 7);                                                                          \
                    LOAD(5, a1 + (size_t)(q / 32) * 512, 64);                                             \
                    DP(2, 5, 6); DP(3, 5, 7);                                                             \
                }                                                                                         \
                if (direct) {                                                                             \
                    STORE(0, cb, cs); STORE(1, cb + 16, cs); STORE(2, cb + 16 * (size_t)ldc, cs);         \
                    STORE(3, cb + 16 * (size_t)ldc + 16, cs);                                             \
                    continue;                                                                             \
                }                                                                                         \
                STORE(0, t, 128); STORE(1, t + 16, 128); STORE(2, t + 16 * 32, 128);                      \
                STORE(3, t + 16 * 32 + 16, 128);                                                          \
                for (int r = 0; bias && r < mr; r++)                                                      \
                    memcpy(cb + (size_t)r * ldc, bias + (size_t)j * NP, (size_t)nr * sizeof(float));      \
                block_update(cb, ldc, t, mr, nr, alpha, bias ? 1.0f : beta);                              \
            }

static void task_model(const uint16_t *ap, const uint16_t *bp, int i0, int i1, int j0, int j1, int n, int k,
                       float alpha, const float *bias, float beta, float *c, int ldc) {
    Tile T[8];
#define M_ZERO(x) memset(&T[x], 0, sizeof(Tile))
#define M_LOAD(x, p, s) tm_load(&T[x], (p), (s))
#define M_DP(x, y, z) tm_dpbf16ps(&T[x], &T[y], &T[z])
#define M_STORE(x, p, s) tm_store(&T[x], (p), (s))
    AMX_TASK(M_ZERO, M_LOAD, M_DP, M_STORE)
}

#if HAVE_AMX_CODE
typedef struct {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} TileConfig;

__attribute__((target("amx-tile,amx-bf16"))) static void task_tiles(const uint16_t *ap, const uint16_t *bp, int i0,
                                                                    int i1, int j0, int j1, int n, int k, float alpha,
                                                                    const float *bias, float beta, float *c, int ldc) {
    TileConfig cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.palette = 1;
    for (int x = 0; x < 8; x++) { cfg.rows[x] = 16; cfg.colsb[x] = 64; }
    __asm__ volatile("" ::: "memory");   /* cfg written before the tile instructions read it */
    _tile_loadconfig(&cfg);
#define X_ZERO(x) _tile_zero(x)
#define X_LOAD(x, p, s) _tile_loadd(x, (p), (s))
#define X_DP(x, y, z) _tile_dpbf16ps(x, y, z)
#define X_STORE(x, p, s) _tile_stored(x, (p), (s))
    AMX_TASK(X_ZERO, X_LOAD, X_DP, X_STORE)
    _tile_release();
}
#endif

/* ---- the product --------------------------------------------------------------- */
/* packed op(B) (grown from serial code); each thread's packed rows (grown by that thread) */
static uint16_t *g_bp, *g_ap[MAXT], *g_as;   /* (g_as: op(A) packed whole, shared by the tasks) */
static size_t g_bp_size, g_ap_size[MAXT], g_as_size;

/* Panels kept (gemm_amx.h, amx_weights): an op(B) inside the weights, read
 * from serial code, keeps its panels for the products after it that read
 * the same matrix the same way, until the weights are written again; up to
 * KEEP_BYTES in all (beyond, packed per call). The base model's every
 * linear layer and E, each both ways (forward, and dx = dy W): 252 MB.
 * A write of the same weights marks the panels stale, to be packed again
 * into the same buffers (freeing and allocating 252 MB every update would
 * fault in every page again); other weights let the buffers go. */
enum { MAXKEEP = 1024 };
#define KEEP_BYTES ((size_t)1 << 30)
static const float *g_w;
static size_t g_wn;
static int g_keep_on = 1, g_nkeep;
static size_t g_keep_bytes;
static struct { const float *b; int tb, k, n, ldb, stale; uint16_t *bp; } g_keep[MAXKEEP];

static void keep_clear(void) {
    for (int i = 0; i < g_nkeep; i++) free(g_keep[i].bp);
    g_nkeep = 0;
    g_keep_bytes = 0;
}
void amx_weights(const float *w, size_t n) {
    if (n && w == g_w && n == g_wn) {
        for (int i = 0; i < g_nkeep; i++) g_keep[i].stale = 1;
        return;
    }
    keep_clear();
    g_w = n ? w : NULL;
    g_wn = n;
}
void amx_keep(int on) { keep_clear(); g_keep_on = on; }

/* The kept panels of op(B) (*fresh = 1: stale, or new, to be packed now),
 * or NULL: B not inside the weights, or no room. */
static uint16_t *kept(const float *b, int tb, int k, int n, int ldb, size_t bsize, int *fresh) {
    *fresh = 0;
    size_t rows = tb ? n : k, cols = tb ? k : n;
    if (!g_keep_on || !g_w || b < g_w || b + (rows - 1) * ldb + cols > g_w + g_wn) return NULL;
    for (int i = 0; i < g_nkeep; i++)
        if (g_keep[i].b == b && g_keep[i].tb == tb && g_keep[i].k == k && g_keep[i].n == n && g_keep[i].ldb == ldb) {
            *fresh = g_keep[i].stale;
            g_keep[i].stale = 0;
            return g_keep[i].bp;
        }
    if (g_nkeep == MAXKEEP || g_keep_bytes + bsize * sizeof(uint16_t) > KEEP_BYTES) return NULL;
    g_keep[g_nkeep].b = b; g_keep[g_nkeep].tb = tb; g_keep[g_nkeep].k = k; g_keep[g_nkeep].n = n;
    g_keep[g_nkeep].ldb = ldb;
    g_keep[g_nkeep].stale = 0;
    g_keep_bytes += bsize * sizeof(uint16_t);
    *fresh = 1;
    return g_keep[g_nkeep++].bp = xaligned(bsize * sizeof(uint16_t));
}

static uint16_t *grow(uint16_t **buf, size_t *have, size_t need) {
    if (need > *have) {
        free(*buf);
        *buf = xaligned(need * sizeof **buf);
        *have = need;
    }
    return *buf;
}

void amx_release(void) {
    keep_clear();
    free(g_bp);
    free(g_as);
    g_bp = g_as = NULL;
    g_bp_size = g_as_size = 0;
    for (int t = 0; t < MAXT; t++) {
        free(g_ap[t]);
        g_ap[t] = NULL;
        g_ap_size[t] = 0;
    }
}

void amx_bf16_gemm(AmxKernel kern, int ta, int tb, int m, int n, int k, float alpha, const float *a, int lda,
                   const float *b, int ldb, float beta, float *c, int ldc) {
    amx_bf16_gemm_bias(kern, ta, tb, m, n, k, alpha, a, lda, b, ldb, NULL, beta, c, ldc);
}

void amx_bf16_gemm_bias(AmxKernel kern, int ta, int tb, int m, int n, int k, float alpha, const float *a, int lda,
                        const float *b, int ldb, const float *bias, float beta, float *c, int ldc) {
    if (m <= 0 || n <= 0) return;
    ASSERT(kern == AMX_MODEL || (HAVE_AMX_CODE && cpu_has(CPU_AMX_BF16)));
    ASSERT(!bias || beta == 0.0f);
    if (bias && k <= 0) {   /* C = bias */
        gemm_fill_bias(c, ldc, bias, m, n);
        return;
    }
    if (k <= 0) {   /* C = beta C */
        for (int i = 0; i < m; i++)
            for (int j = 0; j < n; j++) c[(size_t)i * ldc + j] = beta == 0.0f ? 0.0f : beta * c[(size_t)i * ldc + j];
        return;
    }
    int inside = omp_in_parallel(), nt = inside ? 1 : threads_count();
    if (nt > MAXT) nt = MAXT;
    int kp = up32(k), np = up32(n) / NP, nrc = (m + MC - 1) / MC;
    size_t bsize = (size_t)np * NP * kp, asize = (size_t)up32(MC) * kp;
    int fresh = 1;   /* op(B) still to pack */
    uint16_t *bp = inside ? NULL : kept(b, tb, k, n, ldb, bsize, &fresh);
    if (!bp) {
        fresh = 1;
        bp = inside ? xaligned(bsize * sizeof *bp) : grow(&g_bp, &g_bp_size, bsize);
    }
    /* tasks: row chunks x groups of panels, at least two a thread where the panels allow (with few row
     * chunks, each chunk's rows are packed once per group: a pass over A against a product over B) */
    int ncg = nt > 1 ? (2 * nt + nrc - 1) / nrc : 1;
    if (ncg > np) ncg = np;
    int per = (np + ncg - 1) / ncg, ntask = nrc * ncg;
    /* with several groups a row chunk, each task would pack its chunk's rows again: op(A) is packed once
     * instead, on all threads, 32 rows at a time, into one buffer (up to SHARED_A bytes; each chunk where
     * its task's own would be) */
    int shared = ncg > 1 && (size_t)nrc * asize * sizeof(uint16_t) <= SHARED_A;
    uint16_t *as = shared ? grow(&g_as, &g_as_size, (size_t)nrc * asize) : NULL;
    if (nt > 1) {
        #pragma omp parallel num_threads(nt)
        {
            if (fresh) {
                #pragma omp for schedule(static) nowait
                for (int j = 0; j < np; j++) pack_panel(bp, j, tb, b, ldb, k, n);
            }
            if (shared) {
                #pragma omp for schedule(dynamic, 1) nowait
                for (int p = 0; p < (m + 31) / 32; p++) {
                    int cb = 32 * p / MC, i0 = 32 * p, c1 = cb * MC + MC < m ? cb * MC + MC : m;
                    pack_rows(as + (size_t)cb * asize + (size_t)(i0 - cb * MC) / 16 * (kp / 32) * 512, ta, a, lda,
                              i0, i0 + 32 < c1 ? i0 + 32 : c1, k);
                }
            }
            #pragma omp barrier
            uint16_t *ap = shared ? NULL : grow(&g_ap[omp_get_thread_num()], &g_ap_size[omp_get_thread_num()], asize);
            #pragma omp for schedule(dynamic, 1)
            for (int q = 0; q < ntask; q++) {
                int i0 = (q / ncg) * MC, i1 = i0 + MC < m ? i0 + MC : m;
                int j0 = (q % ncg) * per, j1 = j0 + per < np ? j0 + per : np;
                if (j0 >= j1) continue;
                if (shared) ap = as + (size_t)(q / ncg) * asize;
                else pack_rows(ap, ta, a, lda, i0, i1, k);
#if HAVE_AMX_CODE
                if (kern == AMX_TILES) { task_tiles(ap, bp, i0, i1, j0, j1, n, k, alpha, bias, beta, c, ldc); continue; }
#endif
                task_model(ap, bp, i0, i1, j0, j1, n, k, alpha, bias, beta, c, ldc);
            }
        }
        return;
    }
    for (int j = 0; j < np && fresh; j++) pack_panel(bp, j, tb, b, ldb, k, n);
    uint16_t *ap = inside ? xaligned(asize * sizeof *ap) : grow(&g_ap[0], &g_ap_size[0], asize);
    for (int i0 = 0; i0 < m; i0 += MC) {
        int i1 = i0 + MC < m ? i0 + MC : m;
        pack_rows(ap, ta, a, lda, i0, i1, k);
#if HAVE_AMX_CODE
        if (kern == AMX_TILES) { task_tiles(ap, bp, i0, i1, 0, np, n, k, alpha, bias, beta, c, ldc); continue; }
#endif
        task_model(ap, bp, i0, i1, 0, np, n, k, alpha, bias, beta, c, ldc);
    }
    if (inside) { free(bp); free(ap); }
}
