/* bench_amx.c — could a bf16 AMX kernel of tfm's own beat oneDNN 2.6.3's at
 * a training step's forward shapes? (issue #25: oneDNN's AMX kernels reach
 * 0.12-0.46 of the tile peak there, doc/precision.md.) A measurement, not
 * a route of tfm's: nothing in src/ calls this kernel.
 *   build/dev/bench_amx [THREADS [REPS]]   (defaults 2, 5; best kept)
 *
 * The kernel: y [M, N] = x [M, K] W^T, x bf16 row-major, W [N, K] packed
 * once (as a weight would be once per update) into panels of 32 columns
 * in the tiles' pair layout: panel j, pair row r, column c, e in {0, 1}
 * holds W[32 j + c][2 r + e]. Tiles: 0..3 the 2 x 2 C tiles of a 32 x 32
 * block of y (16 x 16 fp32 each), 4, 5 two 16-row tiles of x (16 rows x 32
 * bf16), 6, 7 the panel's two halves (16 pair rows x 16 columns x 2 bf16,
 * rows 128 bytes apart). TDPBF16PS C += A B: for each of C's 16 x 16 lanes,
 * the sum over 16 pair rows of a[2r] b[r].lo + a[2r+1] b[r].hi, in fp32.
 * Loops: rows in chunks of MC shared by the threads; in a chunk, four
 * variants (AMX_CHUNK): x's tiles read where they are (rows 2K bytes
 * apart) or packed per chunk tile after tile (v1, v3); the panels outside
 * the 32-row blocks (the panel stays in L1) or inside them (v2, v3: x's
 * block stays in L1). M, N and K multiples of 32 here.
 *
 * Checked twice, each variant: the loops on a scalar model of the tiles
 * against a double-precision reference on a small shape (every host; a
 * layout wrong by one element fails it), and the tiles against the same
 * reference (AMX hosts). Then, per shape, the tiles against oneDNN's bf16
 * matmul as tfm's step runs it (gemm_many on the oneDNN route: tfm's
 * pieces, both operands from 16-bit twins, nothing converted), taking
 * turns, best of REPS; and the packing of W. Measured on the AMX machine
 * (doc/precision.md): the best variant 1.1-1.5x oneDNN's at the FFN and
 * attention shapes on 2 threads, 6x at the logits' shape; 1.5-2.6x on 16.
 *
 * Then the general product (Prod, gen_product: any transposes, C += for
 * beta 1, sizes off 32 by zero padding and edge blocks), what a route
 * would run for all twelve products of a step (the backward's too), in two
 * loop orders against oneDNN; checked on the model for every transpose and
 * beta on sizes off 32, and for the twelve at a small size with
 * BENCH_AMX_MODEL=1 on a host without AMX (a check of the harness, not a
 * timing). Not yet run on AMX. */
#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu.h"
#include "dispatch.h"
#include "gemm_bf16.h"
#include "gemm_dnnl.h"
#include "ops.h"
#include "util.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define HAVE_AMX_CODE 1
#else
#define HAVE_AMX_CODE 0
#endif

enum { MC = 128, NP = 32 };   /* rows per chunk; columns per panel */

/* W [N, K] into panels (see above): N x K bf16 */
static void pack_w(uint16_t *wp, const uint16_t *w, int n, int k) {
    #pragma omp parallel for schedule(static)
    for (int j = 0; j < n / NP; j++)
        for (int r = 0; r < k / 2; r++)
            for (int c = 0; c < NP; c++)
                for (int e = 0; e < 2; e++)
                    wp[(size_t)j * NP * k + (size_t)r * 2 * NP + 2 * c + e] = w[(size_t)(j * NP + c) * k + 2 * r + e];
}

typedef struct { uint8_t b[16][64]; } Tile;   /* the scalar model's tile register */

static void tm_load(Tile *t, const void *base, size_t stride) {
    for (int r = 0; r < 16; r++) memcpy(t->b[r], (const uint8_t *)base + r * stride, 64);
}
static void tm_store(const Tile *t, void *base, size_t stride) {
    for (int r = 0; r < 16; r++) memcpy((uint8_t *)base + r * stride, t->b[r], 64);
}
static float tm_bf16(const Tile *t, int row, int i) {
    uint16_t h;
    memcpy(&h, &t->b[row][2 * i], 2);
    return bf16_to_float(h);
}
static void tm_dpbf16ps(Tile *c, const Tile *a, const Tile *b) {   /* TDPBF16PS, lane by lane */
    for (int m = 0; m < 16; m++)
        for (int n = 0; n < 16; n++) {
            float acc;
            memcpy(&acc, &c->b[m][4 * n], 4);
            for (int r = 0; r < 16; r++) {
                acc += tm_bf16(a, m, 2 * r) * tm_bf16(b, r, 2 * n);
                acc += tm_bf16(a, m, 2 * r + 1) * tm_bf16(b, r, 2 * n + 1);
            }
            memcpy(&c->b[m][4 * n], &acc, 4);
        }
}

/* One 32 x 32 block of y at rows i, columns j: the tile instructions given
 * as macros (the tiles, or the model), x's tiles at APTR(row, p) with row
 * stride ASTR bytes. */
#define AMX_BLOCK(ZERO, LOAD, DP, STORE, APTR, ASTR, i, j)                                               \
    do {                                                                                                 \
        const uint16_t *panel = wp + (size_t)(j) * k;                                                    \
        ZERO(0); ZERO(1); ZERO(2); ZERO(3);                                                              \
        for (int p = 0; p < k; p += 32) {                                                                \
            LOAD(4, APTR(i, p), ASTR);                                                                   \
            LOAD(5, APTR((i) + 16, p), ASTR);                                                            \
            LOAD(6, panel + (size_t)p * NP, 4 * NP);                                                     \
            LOAD(7, panel + (size_t)p * NP + 32, 4 * NP);                                                \
            DP(0, 4, 6); DP(1, 4, 7); DP(2, 5, 6); DP(3, 5, 7);                                          \
        }                                                                                                \
        float *yb = y + (size_t)(i) * n + (j);                                                           \
        STORE(0, yb, 4 * (size_t)n); STORE(1, yb + 16, 4 * (size_t)n);                                   \
        STORE(2, yb + (size_t)16 * n, 4 * (size_t)n); STORE(3, yb + (size_t)16 * n + 16, 4 * (size_t)n); \
    } while (0)

/* x's tiles where they are (rows 2k bytes apart), or packed per chunk by
 * pack_a: tile (16 rows, 32 columns) after tile, 1 KB each, rows 64 bytes apart */
#define A_ROWS(i, p) (x + (size_t)(i) * k + (p))
#define A_PACKED(i, p) (ap + (((size_t)((i) - i0) >> 4) * (size_t)(k >> 5) + (size_t)((p) >> 5)) * 512)

static void pack_a(uint16_t *ap, const uint16_t *x, int i0, int i1, int k) {
    for (int b = 0; b < (i1 - i0) / 16; b++)
        for (int t = 0; t < k / 32; t++)
            for (int r = 0; r < 16; r++)
                memcpy(ap + ((size_t)b * (k / 32) + t) * 512 + r * 32, x + (size_t)(i0 + 16 * b + r) * k + 32 * t, 64);
}

/* Rows [i0, i1) of y, every panel, in one of four ways (variant bits):
 * 1 x packed (pack_a), 2 the rows' blocks outside (x's block stays in L1
 * while the panels stream) instead of the panels outside (the panel stays
 * in L1 while x's blocks stream from L2). */
#define AMX_CHUNK(ZERO, LOAD, DP, STORE)                                                                 \
    if (variant & 1) pack_a(ap, x, i0, i1, k);                                                           \
    switch (variant) {                                                                                   \
    case 0:                                                                                              \
        for (int j = 0; j < n; j += NP) {                                                                \
            for (int i = i0; i < i1; i += 32) AMX_BLOCK(ZERO, LOAD, DP, STORE, A_ROWS, 2 * (size_t)k, i, j); \
        }                                                                                                \
        break;                                                                                           \
    case 1:                                                                                              \
        for (int j = 0; j < n; j += NP) {                                                                \
            for (int i = i0; i < i1; i += 32) AMX_BLOCK(ZERO, LOAD, DP, STORE, A_PACKED, 64, i, j);      \
        }                                                                                                \
        break;                                                                                           \
    case 2:                                                                                              \
        for (int i = i0; i < i1; i += 32) {                                                              \
            for (int j = 0; j < n; j += NP) AMX_BLOCK(ZERO, LOAD, DP, STORE, A_ROWS, 2 * (size_t)k, i, j); \
        }                                                                                                \
        break;                                                                                           \
    default:                                                                                             \
        for (int i = i0; i < i1; i += 32) {                                                              \
            for (int j = 0; j < n; j += NP) AMX_BLOCK(ZERO, LOAD, DP, STORE, A_PACKED, 64, i, j);        \
        }                                                                                                \
        break;                                                                                           \
    }

static void chunk_model(float *y, const uint16_t *x, uint16_t *ap, const uint16_t *wp, int i0, int i1, int n, int k,
                        int variant) {
    Tile T[8];
#define M_ZERO(t) memset(&T[t], 0, sizeof(Tile))
#define M_LOAD(t, p, s) tm_load(&T[t], (p), (s))
#define M_DP(c, a, b) tm_dpbf16ps(&T[c], &T[a], &T[b])
#define M_STORE(t, p, s) tm_store(&T[t], (p), (s))
    AMX_CHUNK(M_ZERO, M_LOAD, M_DP, M_STORE)
}

#if HAVE_AMX_CODE
typedef struct {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} TileConfig;

__attribute__((target("amx-tile,amx-bf16"))) static void chunk_amx(float *y, const uint16_t *x, uint16_t *ap,
                                                                   const uint16_t *wp, int i0, int i1, int n, int k,
                                                                   int variant) {
    TileConfig cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.palette = 1;
    for (int t = 0; t < 8; t++) { cfg.rows[t] = 16; cfg.colsb[t] = 64; }
    __asm__ volatile("" ::: "memory");   /* cfg written before the tile instructions read it */
    _tile_loadconfig(&cfg);
#define X_ZERO(t) _tile_zero(t)
#define X_LOAD(t, p, s) _tile_loadd(t, (p), (s))
#define X_DP(c, a, b) _tile_dpbf16ps(c, a, b)
#define X_STORE(t, p, s) _tile_stored(t, (p), (s))
    AMX_CHUNK(X_ZERO, X_LOAD, X_DP, X_STORE)
    _tile_release();
}
#endif

/* y = x W^T on nt threads, the chunks shared; model: the scalar tiles */
static uint16_t *g_ap[64];   /* each thread's packed chunk of x */

static void product(float *y, const uint16_t *x, const uint16_t *wp, int m, int n, int k, int nt, int model, int variant) {
    static size_t have;   /* grow-only, so that the timed calls allocate nothing */
    if ((size_t)MC * k > have) {
        for (int t = 0; t < 64; t++) {
            free(g_ap[t]);
            g_ap[t] = xaligned((size_t)MC * k * 2);
        }
        have = (size_t)MC * k;
    }
    #pragma omp parallel for schedule(dynamic, 1) num_threads(nt)
    for (int i0 = 0; i0 < m; i0 += MC) {
        int i1 = i0 + MC < m ? i0 + MC : m, tid = omp_get_thread_num();
#if HAVE_AMX_CODE
        if (!model) { chunk_amx(y, x, g_ap[tid], wp, i0, i1, n, k, variant); continue; }
#endif
        chunk_model(y, x, g_ap[tid], wp, i0, i1, n, k, variant);
    }
}

/* ---- the general product ------------------------------------------------------
 * C [m, n] = beta C + op(A) op(B) (beta 0 or 1), A stored [m, k] (ta 0) or
 * [k, m], B stored [k, n] (tb 0) or [n, k], any sizes: B packed whole into
 * panels (pack_b), A's rows packed per chunk (pack_rows), both padded with
 * zeros to multiples of 32 in k and in their rows or columns (the padding
 * adds 0 x 0); C's blocks at an edge go through a 32 x 32 block of their
 * own. What every training product needs (dx = dy W: B = W as stored;
 * dW += dy^T x: A transposed, B an activation packed per call). */
typedef struct { int ta, tb, m, n, k, lda, ldb, ldc; float beta; const uint16_t *a, *b; float *c; } Prod;

static int up32(int v) { return (v + 31) & ~31; }

static void pack_b(uint16_t *bp, const Prod *p) {   /* up32(n) / 32 panels of up32(k) / 2 pair rows */
    int kp = up32(p->k), np = up32(p->n);
    #pragma omp parallel for schedule(static)
    for (int j = 0; j < np / NP; j++)
        for (int r = 0; r < kp / 2; r++)
            for (int c = 0; c < NP; c++)
                for (int e = 0; e < 2; e++) {
                    int kk = 2 * r + e, nn = j * NP + c;
                    uint16_t v = 0;
                    if (kk < p->k && nn < p->n) v = p->tb ? p->b[(size_t)nn * p->ldb + kk] : p->b[(size_t)kk * p->ldb + nn];
                    bp[(size_t)j * NP * kp + (size_t)r * 2 * NP + 2 * c + e] = v;
                }
}

static void pack_rows(uint16_t *ap, const Prod *p, int i0, int i1) {   /* rows [i0, i1) of op(A), tile after tile */
    int kp = up32(p->k), rows = up32(i1 - i0);
    for (int b = 0; b < rows / 16; b++)
        for (int t = 0; t < kp / 32; t++)
            for (int r = 0; r < 16; r++) {
                uint16_t *d = ap + ((size_t)b * (kp / 32) + t) * 512 + r * 32;
                int i = i0 + 16 * b + r;
                for (int q = 0; q < 32; q++) {
                    int kk = 32 * t + q;
                    d[q] = i < i1 && kk < p->k ? (p->ta ? p->a[(size_t)kk * p->lda + i] : p->a[(size_t)i * p->lda + kk]) : 0;
                }
            }
}

/* The block of C at rows i0 + i, columns j (i, j multiples of 32) */
#define GEN_BLOCK(ZERO, LOAD, DP, STORE, i, j)                                                               \
    do {                                                                                                     \
        const uint16_t *panel = bp + (size_t)(j) * kp;                                                       \
        int full = i0 + (i) + 32 <= i1 && (j) + 32 <= p->n;                                                  \
        float *cb = full ? p->c + (size_t)(i0 + (i)) * p->ldc + (j) : edge;                                  \
        size_t cs = full ? 4 * (size_t)p->ldc : 128, cf = cs / 4;                                            \
        if (!full)                                                                                           \
            for (int r = 0; r < 32; r++)                                                                     \
                for (int q = 0; q < 32; q++) {                                                               \
                    int ii = i0 + (i) + r, jj = (j) + q;                                                     \
                    edge[32 * r + q] = p->beta != 0.0f && ii < i1 && jj < p->n ? p->c[(size_t)ii * p->ldc + jj] : 0.0f; \
                }                                                                                            \
        if (p->beta != 0.0f || !full) {                                                                      \
            LOAD(0, cb, cs); LOAD(1, cb + 16, cs); LOAD(2, cb + 16 * cf, cs); LOAD(3, cb + 16 * cf + 16, cs); \
        } else {                                                                                             \
            ZERO(0); ZERO(1); ZERO(2); ZERO(3);                                                              \
        }                                                                                                    \
        for (int q = 0; q < kp; q += 32) {                                                                   \
            LOAD(4, ap + ((size_t)((i) >> 4) * (kp >> 5) + (q >> 5)) * 512, 64);                             \
            LOAD(5, ap + ((size_t)(((i) >> 4) + 1) * (kp >> 5) + (q >> 5)) * 512, 64);                       \
            LOAD(6, panel + (size_t)q * NP, 4 * NP);                                                         \
            LOAD(7, panel + (size_t)q * NP + 32, 4 * NP);                                                    \
            DP(0, 4, 6); DP(1, 4, 7); DP(2, 5, 6); DP(3, 5, 7);                                              \
        }                                                                                                    \
        STORE(0, cb, cs); STORE(1, cb + 16, cs); STORE(2, cb + 16 * cf, cs); STORE(3, cb + 16 * cf + 16, cs); \
        if (!full)                                                                                           \
            for (int r = 0; r < 32 && i0 + (i) + r < i1; r++)                                                \
                for (int q = 0; q < 32 && (j) + q < p->n; q++)                                               \
                    p->c[(size_t)(i0 + (i) + r) * p->ldc + (j) + q] = edge[32 * r + q];                      \
    } while (0)

/* rows [i0, i1) of C; order 0: the panels outside the row blocks, 1: inside */
#define GEN_CHUNK(ZERO, LOAD, DP, STORE)                                                                     \
    int kp = up32(p->k), rows = up32(i1 - i0);                                                               \
    float edge[32 * 32] __attribute__((aligned(64)));                                                        \
    pack_rows(ap, p, i0, i1);                                                                                \
    if (order == 0) {                                                                                        \
        for (int j = 0; j < p->n; j += NP) {                                                                 \
            for (int i = 0; i < rows; i += 32) GEN_BLOCK(ZERO, LOAD, DP, STORE, i, j);                       \
        }                                                                                                    \
    } else {                                                                                                 \
        for (int i = 0; i < rows; i += 32) {                                                                 \
            for (int j = 0; j < p->n; j += NP) GEN_BLOCK(ZERO, LOAD, DP, STORE, i, j);                       \
        }                                                                                                    \
    }

static void gen_chunk_model(const Prod *p, const uint16_t *bp, uint16_t *ap, int i0, int i1, int order) {
    Tile T[8];
    GEN_CHUNK(M_ZERO, M_LOAD, M_DP, M_STORE)
}

#if HAVE_AMX_CODE
__attribute__((target("amx-tile,amx-bf16"))) static void gen_chunk_amx(const Prod *p, const uint16_t *bp, uint16_t *ap,
                                                                       int i0, int i1, int order) {
    TileConfig cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.palette = 1;
    for (int t = 0; t < 8; t++) { cfg.rows[t] = 16; cfg.colsb[t] = 64; }
    __asm__ volatile("" ::: "memory");
    _tile_loadconfig(&cfg);
    GEN_CHUNK(X_ZERO, X_LOAD, X_DP, X_STORE)
    _tile_release();
}
#endif

static uint16_t *g_gp[64];   /* each thread's packed rows of op(A), grow-only */

static void gen_product(const Prod *p, const uint16_t *bp, int nt, int model, int order) {
    static size_t have;
    size_t need = (size_t)MC * up32(p->k);
    if (need > have) {
        for (int t = 0; t < 64; t++) {
            free(g_gp[t]);
            g_gp[t] = xaligned(need * 2);
        }
        have = need;
    }
    #pragma omp parallel for schedule(dynamic, 1) num_threads(nt)
    for (int i0 = 0; i0 < p->m; i0 += MC) {
        int i1 = i0 + MC < p->m ? i0 + MC : p->m, tid = omp_get_thread_num();
#if HAVE_AMX_CODE
        if (!model) { gen_chunk_amx(p, bp, g_gp[tid], i0, i1, order); continue; }
#endif
        gen_chunk_model(p, bp, g_gp[tid], i0, i1, order);
    }
}

/* The largest |C - ref| / (sum_k |a b| + |beta C0|), ref in double. */
static double gen_check(const Prod *p, const float *c0) {
    double worst = 0;
    for (int i = 0; i < p->m; i++)
        for (int j = 0; j < p->n; j++) {
            double s = p->beta != 0.0f ? c0[(size_t)i * p->ldc + j] : 0.0, a = fabs(s);
            for (int q = 0; q < p->k; q++) {
                double x = bf16_to_float(p->ta ? p->a[(size_t)q * p->lda + i] : p->a[(size_t)i * p->lda + q]);
                double y = bf16_to_float(p->tb ? p->b[(size_t)j * p->ldb + q] : p->b[(size_t)q * p->ldb + j]);
                s += x * y;
                a += fabs(x * y);
            }
            double e = fabs(p->c[(size_t)i * p->ldc + j] - s) / (a > 0 ? a : 1);
            if (e > worst || e != e) worst = e;
        }
    return worst;
}

static float frand(uint64_t *s) {
    *s = *s * 6364136223846793005ULL + 1442695040888963407ULL;
    return (float)((*s >> 40) & 0xffffff) / 16777216.0f - 0.5f;
}

/* The largest |y - ref| / sum_k |x w| over y (ref in double from the bf16 values). */
static double check(const float *y, const uint16_t *x, const uint16_t *w, int m, int n, int k) {
    double worst = 0;
    for (int i = 0; i < m; i++)
        for (int j = 0; j < n; j++) {
            double s = 0, a = 0;
            for (int p = 0; p < k; p++) {
                double t = (double)bf16_to_float(x[(size_t)i * k + p]) * bf16_to_float(w[(size_t)j * k + p]);
                s += t;
                a += fabs(t);
            }
            double e = fabs(y[(size_t)i * n + j] - s) / (a > 0 ? a : 1);
            if (e > worst) worst = e;
        }
    return worst;
}

typedef struct { const char *name; int m, n, k; } Shape;

int main(int argc, char **argv) {
    int nt = argc > 1 ? atoi(argv[1]) : 2, reps = argc > 2 ? atoi(argv[2]) : 5;
    if (threads_init(nt)) die_error();
    nt = threads_count();
    int amx = HAVE_AMX_CODE && cpu_has(CPU_AMX_TILE) && cpu_has(CPU_AMX_BF16) && cpu_amx_request() == 0;
    printf("bench_amx: %d threads; AMX-BF16 %s\n", nt, amx ? "yes" : "no (the tiles' model only)");
    /* the loops on the model, and the tiles against the model: a small shape */
    {
        int m = 64, n = 64, k = 96;
        uint64_t s = 7;
        uint16_t *x = xaligned((size_t)m * k * 2), *w = xaligned((size_t)n * k * 2), *wp = xaligned((size_t)n * k * 2);
        for (int i = 0; i < m * k; i++) x[i] = bf16_from_float(frand(&s));
        for (int i = 0; i < n * k; i++) w[i] = bf16_from_float(frand(&s));
        pack_w(wp, w, n, k);
        float *y0 = xaligned((size_t)m * n * 4), *y1 = xaligned((size_t)m * n * 4);
        for (int v = 0; v < 4; v++) {
            for (int i = 0; i < m * n; i++) y0[i] = y1[i] = NAN;
            product(y0, x, wp, m, n, k, nt, 1, v);
            double e = check(y0, x, w, m, n, k);
            printf("variant %d, model against double: worst %.2e of sum |x w| (bound %d x 2^-24 = %.1e): %s\n", v, e,
                   2 * k, 2 * k * 0x1p-24, e <= 2 * k * 0x1p-24 ? "ok" : "WRONG");
            if (amx) {
                product(y1, x, wp, m, n, k, nt, 0, v);
                double e1 = check(y1, x, w, m, n, k);
                printf("variant %d, tiles against double: worst %.2e: %s\n", v, e1, e1 <= 2 * k * 0x1p-24 ? "ok" : "WRONG");
            }
        }
        free(x); free(w); free(wp); free(y0); free(y1);
    }
    /* the general product on the model (and the tiles): every transpose, beta 0 and 1, sizes off 32 */
    {
        static const int G[][3] = {{37, 45, 70}, {64, 32, 32}, {1, 33, 17}, {130, 20, 100}};
        int bad = 0;
        double worst[2] = {0, 0};
        for (int g = 0; g < 4; g++)
            for (int t = 0; t < 8; t++) {
                int m = G[g][0], n = G[g][1], k = G[g][2], ta = t & 1, tb = (t >> 1) & 1;
                uint64_t s = 100 + 8 * g + t;
                uint16_t *a = xaligned((size_t)m * k * 2), *b = xaligned((size_t)k * n * 2);
                uint16_t *bp = xaligned((size_t)up32(n) * up32(k) * 2);
                float *c0 = xaligned((size_t)m * n * 4), *c = xaligned((size_t)m * n * 4);
                for (int i = 0; i < m * k; i++) a[i] = bf16_from_float(frand(&s));
                for (int i = 0; i < k * n; i++) b[i] = bf16_from_float(frand(&s));
                for (int i = 0; i < m * n; i++) c0[i] = frand(&s);
                Prod pr = {ta, tb, m, n, k, ta ? m : k, tb ? k : n, n, (float)(t >> 2), a, b, c};
                pack_b(bp, &pr);
                for (int mode = 0; mode < 2 + 2 * amx; mode++) {   /* model, order 0 and 1; then the tiles */
                    memcpy(c, c0, (size_t)m * n * 4);
                    gen_product(&pr, bp, nt, mode < 2, mode & 1);
                    double e = gen_check(&pr, c0);
                    if (e > worst[mode >= 2]) worst[mode >= 2] = e;
                    bad |= !(e <= (up32(k) + 1) * 0x1p-24);
                }
                free(a); free(b); free(bp); free(c0); free(c);
            }
        printf("general product (every transpose, beta 0 and 1, sizes off 32): model worst %.2e", worst[0]);
        if (amx) printf(", tiles worst %.2e", worst[1]);
        printf(" of sum |a b| + |beta c|: %s\n", bad ? "WRONG" : "ok");
    }
    /* The twelve products of a training step, each against oneDNN as the
     * step runs it; BENCH_AMX_MODEL=1 on a host without AMX runs the same
     * harness on the model at a small size (to check it, not to time it). */
    int model = !amx;
    if (model && !getenv("BENCH_AMX_MODEL")) return 0;
    {
        int D = model ? 64 : 512, F = model ? 128 : 2048, N = model ? 256 : 4096, V = model ? 1000 : 37000;
        int C = model ? 60 : 906;
        struct { const char *name; int ta, tb, m, n, k; float beta; int weight; } P[] = {
            {"attn proj fwd  y=xW^T", 0, 1, N, D, D, 1, 1},   {"attn proj dx=dyW", 0, 0, N, D, D, 0, 1},
            {"attn proj dW+=dy^Tx", 1, 0, D, D, N, 1, 0},     {"fc1 fwd", 0, 1, N, F, D, 1, 1},
            {"fc1 dx=dyW", 0, 0, N, D, F, 1, 1},              {"fc1 dW+=dy^Tx", 1, 0, F, D, N, 1, 0},
            {"fc2 fwd", 0, 1, N, D, F, 1, 1},                 {"fc2 dx=dyW", 0, 0, N, F, D, 0, 1},
            {"fc2 dW+=dy^Tx", 1, 0, D, F, N, 1, 0},           {"logits=yE^T", 0, 1, C, V, D, 0, 1},
            {"dy=dlogitsE", 0, 0, C, D, V, 0, 1},             {"dE+=dlogits^Ty", 1, 0, V, D, C, 1, 0},
        };
        Bf16Route keep = bf16_route();
        if (gemm_dnnl_built()) bf16_route_set(BF16_ONEDNN);
        printf("%s%-24s %6s %6s %6s %9s %9s %9s %10s %11s\n", model ? "(the model, small sizes: not a timing)\n" : "",
               "product", "m", "n", "k", "oneDNN", "order 0", "order 1", "pack B ms", "worst diff");
        double tot[2] = {0, 0};
        int bad = 0;
        for (size_t q = 0; q < sizeof P / sizeof *P; q++) {
            int m = P[q].m, n = P[q].n, k = P[q].k, ta = P[q].ta, tb = P[q].tb;
            size_t na = (size_t)m * k, nb = (size_t)k * n, nc = (size_t)m * n;
            uint64_t s = 1000 + q;
            float *af = xaligned(na * 4), *bf = xaligned(nb * 4), *c0 = xaligned(nc * 4), *y0 = xaligned(nc * 4);
            float *y1 = xaligned(nc * 4);
            uint16_t *a = xaligned(na * 2), *b = xaligned(nb * 2), *bp = xaligned((size_t)up32(n) * up32(k) * 2);
            for (size_t i = 0; i < na; i++) { af[i] = bf16_round(frand(&s)); a[i] = bf16_from_float(af[i]); }
            for (size_t i = 0; i < nb; i++) { bf[i] = bf16_round(frand(&s)); b[i] = bf16_from_float(bf[i]); }
            for (size_t i = 0; i < nc; i++) c0[i] = frand(&s);
            int lda = ta ? m : k, ldb = tb ? k : n;
            Prod pr = {ta, tb, m, n, k, lda, ldb, n, P[q].beta, a, b, y1};
            double best[3] = {1e30, 1e30, 1e30}, pack = 1e30, worst = 0;
            for (int r = 0; r <= reps; r++) {   /* round 0 warms up */
                if (gemm_dnnl_built()) {
                    memcpy(y0, c0, nc * 4);
                    gemm_dnnl_shadow(af, a, na);
                    gemm_dnnl_shadow(bf, b, nb);
                    Gemm g = {ta, tb, m, n, k, 1.0f, af, lda, bf, ldb, P[q].beta, y0, n, GEMM_BF16_HELD, NULL, 0};
                    double t0 = now_seconds();
                    gemm_many(&g, 1);
                    if (r && now_seconds() - t0 < best[0]) best[0] = now_seconds() - t0;
                    gemm_dnnl_shadow(af, NULL, 0);
                    gemm_dnnl_shadow(bf, NULL, 0);
                }
                double t0 = now_seconds();
                pack_b(bp, &pr);   /* a weight's: once per update; an activation's: part of the product */
                double tp = now_seconds() - t0;
                if (r && tp < pack) pack = tp;
                for (int o = 0; o < 2; o++) {
                    memcpy(y1, c0, nc * 4);
                    t0 = now_seconds();
                    gen_product(&pr, bp, nt, model, o);
                    double t = now_seconds() - t0 + (P[q].weight ? 0.0 : tp);
                    if (r && t < best[1 + o]) best[1 + o] = t;
                    if (r == reps) {
                        if (model) {
                            double e = gen_check(&pr, c0);
                            bad |= !(e <= (up32(k) + 1) * 0x1p-24);
                        }
                        for (size_t i = 0; gemm_dnnl_built() && i < nc; i++) {
                            double d = fabs(y0[i] - y1[i]) / (fabs(y0[i]) + 1e-3);
                            if (d > worst || d != d) worst = d;
                        }
                    }
                }
            }
            double gf = 2.0 * m * n * k / 1e9, ours = best[1] < best[2] ? best[1] : best[2];
            printf("%-24s %6d %6d %6d %9.1f %9.1f %9.1f %10.2f %11.2e\n", P[q].name, m, n, k,
                   gemm_dnnl_built() ? gf / best[0] : 0.0, gf / best[1], gf / best[2], 1e3 * pack, worst);
            fflush(stdout);
            tot[0] += best[0];
            tot[1] += ours;
            free(af); free(bf); free(c0); free(y0); free(y1); free(a); free(b); free(bp);
        }
        bf16_route_set(keep);
        printf("the twelve, one of each: oneDNN %.3f s, tiles (the better order of each) %.3f s: %.2fx "
               "(an activation's B packed inside the product's time, a weight's apart)%s\n", tot[0], tot[1],
               tot[0] / tot[1], model ? (bad ? "; model against double: WRONG" : "; model against double: ok") : "");
    }
    if (model) return 0;
    Shape sh[] = {
        {"attn proj fwd  y=xW^T", 4096, 512, 512},
        {"fc1 fwd", 4096, 2048, 512},
        {"fc2 fwd", 4096, 512, 2048},
        {"logits=yE^T (V 36992)", 928, 36992, 512},
    };
    Bf16Route keep = bf16_route();
    if (gemm_dnnl_built()) bf16_route_set(BF16_ONEDNN);
    printf("%-24s %6s %6s %6s %9s %9s %9s %9s %9s %10s %11s\n", "product", "m", "n", "k", "oneDNN", "tiles v0", "v1",
           "v2", "v3", "pack W ms", "worst diff");
    for (size_t q = 0; q < sizeof sh / sizeof *sh; q++) {
        int m = sh[q].m, n = sh[q].n, k = sh[q].k;
        uint64_t s = 11 + q;
        float *xf = xaligned((size_t)m * k * 4), *wf = xaligned((size_t)n * k * 4);
        uint16_t *x = xaligned((size_t)m * k * 2), *w = xaligned((size_t)n * k * 2), *wp = xaligned((size_t)n * k * 2);
        for (size_t i = 0; i < (size_t)m * k; i++) { xf[i] = bf16_round(frand(&s)); x[i] = bf16_from_float(xf[i]); }
        for (size_t i = 0; i < (size_t)n * k; i++) { wf[i] = bf16_round(frand(&s)); w[i] = bf16_from_float(wf[i]); }
        float *y0 = xaligned((size_t)m * n * 4), *y1 = xaligned((size_t)m * n * 4);
        double best[5] = {1e30, 1e30, 1e30, 1e30, 1e30}, pack = 1e30, worst = 0;
        for (int r = 0; r <= reps; r++) {   /* round 0 warms up */
            double t0 = now_seconds();
            pack_w(wp, w, n, k);
            if (r && now_seconds() - t0 < pack) pack = now_seconds() - t0;
            if (gemm_dnnl_built()) {
                gemm_dnnl_shadow(xf, x, (size_t)m * k);
                gemm_dnnl_shadow(wf, w, (size_t)n * k);
                Gemm g = {0, 1, m, n, k, 1.0f, xf, k, wf, k, 0.0f, y0, n, GEMM_BF16_HELD, NULL, 0};
                t0 = now_seconds();
                gemm_many(&g, 1);
                if (r && now_seconds() - t0 < best[0]) best[0] = now_seconds() - t0;
                gemm_dnnl_shadow(xf, NULL, 0);
                gemm_dnnl_shadow(wf, NULL, 0);
            }
            for (int v = 0; v < 4; v++) {
                t0 = now_seconds();
                product(y1, x, wp, m, n, k, nt, 0, v);
                if (r && now_seconds() - t0 < best[1 + v]) best[1 + v] = now_seconds() - t0;
                /* each against oneDNN: the same products, other orders of the sums */
                for (size_t i = 0; gemm_dnnl_built() && r == reps && i < (size_t)m * n; i++) {
                    double d = fabs(y0[i] - y1[i]) / (fabs(y0[i]) + 1e-3);
                    if (d > worst || d != d) worst = d;
                }
            }
        }
        double gf = 2.0 * m * n * k / 1e9;
        printf("%-24s %6d %6d %6d %9.1f %9.1f %9.1f %9.1f %9.1f %10.2f %11.2e\n", sh[q].name, m, n, k,
               gemm_dnnl_built() ? gf / best[0] : 0.0, gf / best[1], gf / best[2], gf / best[3], gf / best[4], 1e3 * pack,
               worst);
        fflush(stdout);
        free(xf); free(wf); free(x); free(w); free(wp); free(y0); free(y1);
    }
    bf16_route_set(keep);
    printf("(GFLOP/s, best of %d; oneDNN: gemm_many on its route, as a step runs it)\n", reps);
    return 0;
}
