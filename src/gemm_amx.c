/* gemm_amx.c — bf16 products on the AMX tiles (see gemm_amx.h). */
#include "gemm_amx.h"

#include <omp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cpu.h"
#include "dispatch.h"
#include "gemm_bf16.h"
#include "util.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define HAVE_AMX_CODE 1
#else
#define HAVE_AMX_CODE 0
#endif

enum { MC = 128, NP = 32, MAXT = 256 };   /* rows of A per chunk; columns per panel of B; threads at most */

static int up32(int v) { return (v + 31) & ~31; }

/* ---- packing ------------------------------------------------------------------
 * op(B) [k, n] into up32(n) / 32 panels, each up32(k) / 2 pair rows of 32
 * columns x 2: panel j, pair row r, column c, e holds op(B)[2r + e][32j + c]
 * (0 past k or n). One panel: */
static void pack_panel(uint16_t *bp, int j, int tb, const float *b, int ldb, int k, int n) {
    int kp = up32(k);
    uint16_t *d = bp + (size_t)j * NP * kp;
    for (int r = 0; r < kp / 2; r++)
        for (int c = 0; c < NP; c++)
            for (int e = 0; e < 2; e++) {
                int kk = 2 * r + e, nn = j * NP + c;
                float v = kk < k && nn < n ? (tb ? b[(size_t)nn * ldb + kk] : b[(size_t)kk * ldb + nn]) : 0.0f;
                d[(size_t)r * 2 * NP + 2 * c + e] = bf16_from_float(v);
            }
}

/* Rows [i0, i1) of op(A) [m, k], tile after tile: tile (b, t) holds rows
 * i0 + 16b .. + 15 and columns 32t .. + 31 (0 past i1 or k), 16 rows of 32
 * bf16 (1 KB, rows 64 bytes apart); up32(i1 - i0) rows in all. */
static void pack_rows(uint16_t *ap, int ta, const float *a, int lda, int i0, int i1, int k) {
    int kp = up32(k), rows = up32(i1 - i0);
    for (int bl = 0; bl < rows / 16; bl++)
        for (int t = 0; t < kp / 32; t++)
            for (int r = 0; r < 16; r++) {
                uint16_t *d = ap + ((size_t)bl * (kp / 32) + t) * 512 + r * 32;
                int i = i0 + 16 * bl + r;
                for (int q = 0; q < 32; q++) {
                    int kk = 32 * t + q;
                    float v = i < i1 && kk < k ? (ta ? a[(size_t)kk * lda + i] : a[(size_t)i * lda + kk]) : 0.0f;
                    d[q] = bf16_from_float(v);
                }
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
 * A task: rows [i0, i1) of C (packed into ap) against panels [j0, j1).
 * For each 32-row block, for each panel (the block's A tiles stay in L1 as
 * the panels pass): the four C tiles from 0, k in steps of 32, then the
 * block through t into C. The instructions are macros: the tiles, or the
 * model. */
#define AMX_TASK(ZERO, LOAD, DP, STORE)                                                                   \
    int kp = up32(k), rows = up32(i1 - i0);                                                               \
    float t[32 * 32] __attribute__((aligned(64)));                                                        \
    for (int i = 0; i < rows; i += 32)                                                                    \
        for (int j = j0; j < j1; j++) {                                                                   \
            const uint16_t *panel = bp + (size_t)j * NP * kp;                                             \
            const uint16_t *a0 = ap + (size_t)(i / 16) * (kp / 32) * 512, *a1 = a0 + (size_t)(kp / 32) * 512; \
            ZERO(0); ZERO(1); ZERO(2); ZERO(3);                                                           \
            for (int q = 0; q < kp; q += 32) {                                                            \
                LOAD(4, a0 + (size_t)(q / 32) * 512, 64);                                                 \
                LOAD(5, a1 + (size_t)(q / 32) * 512, 64);                                                 \
                LOAD(6, panel + (size_t)q * NP, 4 * NP);                                                  \
                LOAD(7, panel + (size_t)q * NP + 32, 4 * NP);                                             \
                DP(0, 4, 6); DP(1, 4, 7); DP(2, 5, 6); DP(3, 5, 7);                                       \
            }                                                                                             \
            STORE(0, t, 128); STORE(1, t + 16, 128); STORE(2, t + 16 * 32, 128); STORE(3, t + 16 * 32 + 16, 128); \
            int mr = i1 - i0 - i < 32 ? i1 - i0 - i : 32, nr = n - j * NP < 32 ? n - j * NP : 32;         \
            block_update(c + (size_t)(i0 + i) * ldc + (size_t)j * NP, ldc, t, mr, nr, alpha, beta);      \
        }

static void task_model(const uint16_t *ap, const uint16_t *bp, int i0, int i1, int j0, int j1, int n, int k,
                       float alpha, float beta, float *c, int ldc) {
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
                                                                    float beta, float *c, int ldc) {
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
static uint16_t *g_bp, *g_ap[MAXT];
static size_t g_bp_size, g_ap_size[MAXT];

static uint16_t *grow(uint16_t **buf, size_t *have, size_t need) {
    if (need > *have) {
        free(*buf);
        *buf = xaligned(need * sizeof **buf);
        *have = need;
    }
    return *buf;
}

void amx_release(void) {
    free(g_bp);
    g_bp = NULL;
    g_bp_size = 0;
    for (int t = 0; t < MAXT; t++) {
        free(g_ap[t]);
        g_ap[t] = NULL;
        g_ap_size[t] = 0;
    }
}

void amx_bf16_gemm(AmxKernel kern, int ta, int tb, int m, int n, int k, float alpha, const float *a, int lda,
                   const float *b, int ldb, float beta, float *c, int ldc) {
    if (m <= 0 || n <= 0) return;
    ASSERT(kern == AMX_MODEL || (HAVE_AMX_CODE && cpu_has(CPU_AMX_BF16)));
    if (k <= 0) {   /* C = beta C */
        for (int i = 0; i < m; i++)
            for (int j = 0; j < n; j++) c[(size_t)i * ldc + j] = beta == 0.0f ? 0.0f : beta * c[(size_t)i * ldc + j];
        return;
    }
    int inside = omp_in_parallel(), nt = inside ? 1 : threads_count();
    if (nt > MAXT) nt = MAXT;
    int kp = up32(k), np = up32(n) / NP, nrc = (m + MC - 1) / MC;
    size_t bsize = (size_t)np * NP * kp, asize = (size_t)up32(MC) * kp;
    uint16_t *bp = inside ? xaligned(bsize * sizeof *bp) : grow(&g_bp, &g_bp_size, bsize);
    /* tasks: row chunks x groups of panels, at least two a thread where the panels allow (with few row
     * chunks, each chunk's rows are packed once per group: a pass over A against a product over B) */
    int ncg = nt > 1 ? (2 * nt + nrc - 1) / nrc : 1;
    if (ncg > np) ncg = np;
    int per = (np + ncg - 1) / ncg, ntask = nrc * ncg;
    if (nt > 1) {
        #pragma omp parallel num_threads(nt)
        {
            #pragma omp for schedule(static)
            for (int j = 0; j < np; j++) pack_panel(bp, j, tb, b, ldb, k, n);
            uint16_t *ap = grow(&g_ap[omp_get_thread_num()], &g_ap_size[omp_get_thread_num()], asize);
            #pragma omp for schedule(dynamic, 1)
            for (int q = 0; q < ntask; q++) {
                int i0 = (q / ncg) * MC, i1 = i0 + MC < m ? i0 + MC : m;
                int j0 = (q % ncg) * per, j1 = j0 + per < np ? j0 + per : np;
                if (j0 >= j1) continue;
                pack_rows(ap, ta, a, lda, i0, i1, k);
#if HAVE_AMX_CODE
                if (kern == AMX_TILES) { task_tiles(ap, bp, i0, i1, j0, j1, n, k, alpha, beta, c, ldc); continue; }
#endif
                task_model(ap, bp, i0, i1, j0, j1, n, k, alpha, beta, c, ldc);
            }
        }
        return;
    }
    for (int j = 0; j < np; j++) pack_panel(bp, j, tb, b, ldb, k, n);
    uint16_t *ap = inside ? xaligned(asize * sizeof *ap) : grow(&g_ap[0], &g_ap_size[0], asize);
    for (int i0 = 0; i0 < m; i0 += MC) {
        int i1 = i0 + MC < m ? i0 + MC : m;
        pack_rows(ap, ta, a, lda, i0, i1, k);
#if HAVE_AMX_CODE
        if (kern == AMX_TILES) { task_tiles(ap, bp, i0, i1, 0, np, n, k, alpha, beta, c, ldc); continue; }
#endif
        task_model(ap, bp, i0, i1, 0, np, n, k, alpha, beta, c, ldc);
    }
    if (inside) { free(bp); free(ap); }
}
