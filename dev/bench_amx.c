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
 * Then the twelve products of a step (the backward's too) on src/gemm_amx.c,
 * the kernel grown from this one (any transposes, beta, alpha, sizes off
 * 32; tests/test_bf16.c checks it), against oneDNN; BENCH_AMX_MODEL=1 runs
 * that table on the kernel's model at a small size where there is no AMX
 * (a check of the harness, not a timing). Not yet run on AMX. */
#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu.h"
#include "dispatch.h"
#include "gemm_amx.h"
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
        printf("%s%-24s %6s %6s %6s %9s %9s %11s\n", model ? "(the model, small sizes: not a timing)\n" : "",
               "product", "m", "n", "k", "oneDNN", "tfm AMX", "worst diff");
        double tot[2] = {0, 0};
        int bad = 0;
        for (size_t q = 0; q < sizeof P / sizeof *P; q++) {
            int m = P[q].m, n = P[q].n, k = P[q].k, ta = P[q].ta, tb = P[q].tb;
            size_t na = (size_t)m * k, nb = (size_t)k * n, nc = (size_t)m * n;
            uint64_t s = 1000 + q;
            float *af = xaligned(na * 4), *bf = xaligned(nb * 4), *c0 = xaligned(nc * 4), *y0 = xaligned(nc * 4);
            float *y1 = xaligned(nc * 4);
            uint16_t *a = xaligned(na * 2), *b = xaligned(nb * 2);
            for (size_t i = 0; i < na; i++) { af[i] = bf16_round(frand(&s)); a[i] = bf16_from_float(af[i]); }
            for (size_t i = 0; i < nb; i++) { bf[i] = bf16_round(frand(&s)); b[i] = bf16_from_float(bf[i]); }
            for (size_t i = 0; i < nc; i++) c0[i] = frand(&s);
            int lda = ta ? m : k, ldb = tb ? k : n;
            double best[2] = {1e30, 1e30}, worst = 0;
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
                memcpy(y1, c0, nc * 4);
                double t0 = now_seconds();
                amx_bf16_gemm(model ? AMX_MODEL : AMX_TILES, ta, tb, m, n, k, 1.0f, af, lda, bf, ldb, P[q].beta, y1, n);
                if (r && now_seconds() - t0 < best[1]) best[1] = now_seconds() - t0;
                for (size_t i = 0; r == reps && gemm_dnnl_built() && i < nc; i++) {
                    double d = fabs(y0[i] - y1[i]) / (fabs(y0[i]) + 1e-3);
                    if (d > worst || d != d) worst = d;
                }
            }
            double gf = 2.0 * m * n * k / 1e9;
            printf("%-24s %6d %6d %6d %9.1f %9.1f %11.2e\n", P[q].name, m, n, k, gemm_dnnl_built() ? gf / best[0] : 0.0,
                   gf / best[1], worst);
            fflush(stdout);
            tot[0] += best[0];
            tot[1] += best[1];
            bad |= !(worst < 1e-3);
            free(af); free(bf); free(c0); free(y0); free(y1); free(a); free(b);
        }
        bf16_route_set(keep);
        if (gemm_dnnl_built())
            printf("the twelve, one of each: oneDNN %.3f s, tfm's AMX kernel %.3f s: %.2fx (oneDNN reads both operands' "
                   "16-bit twins; tfm's kernel converts and packs both inside the call); against oneDNN: %s\n", tot[0],
                   tot[1], tot[0] / tot[1], bad ? "WRONG" : "ok");
        else
            printf("the twelve, one of each: tfm's AMX kernel %.3f s (built without oneDNN: nothing to compare)\n", tot[1]);
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
