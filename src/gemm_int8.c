/* gemm_int8.c — int8 quantization and the VPDPBUSD product kernel (see
 * gemm_int8.h for the numbers it computes).
 *
 * Loops of int8_linear (y = x W^T, W packed by int8_quantize_weights):
 *   quantize the n rows of x to u8 (zero point 128, kp bytes a row, padded
 *   with 128 = zero), then
 *   for each panel of 64 output columns (kp x 64 bytes of W, L2-resident)
 *     for each block of MR = 6 rows of x
 *       micro-kernel: a 6 x 64 tile of int32 sums over all of k, started at
 *       c_j; then y = ((float) s * dx_i) * dw_j (+ b_j), stored for the
 *       valid rows and columns.
 * One VPDPBUSD takes the 4 bytes u_i,4p..4p+3 broadcast to the 16 lanes and
 * one zmm of the panel (16 columns x the same 4 inputs) and adds
 *     lane j += u_i,4p w_j,4p + ... + u_i,4p+3 w_j,4p+3
 * (products in 16 bits, sums in 32, wrapping: never here, see the header).
 * Per group of 4 inputs: 4 loads of W, 6 broadcasts, 24 VPDPBUSD.
 * The panels are shared among the threads (the rows of x are quantized once,
 * before); there is no k blocking: a panel of the largest layer here (d_ff =
 * 4096 inputs) is 256 KiB, within L2.
 *
 * INT8_ONEDNN hands the same u and panels to oneDNN (gemm_dnnl_u8s8_*,
 * its scratchpads in the caller's Int8Scratch beside u) in
 * blocks of rows and pieces of columns (see "oneDNN's blocks" below) and
 * runs the epilogue of the AMX tiles on its raw sums.
 *
 * The model kernel is the same tile in plain C with unsigned 32-bit sums
 * (wrapping as the instruction does; signed overflow would be undefined in
 * C), and the same float epilogue, written as the same three IEEE
 * operations: so both give the same bits. */
#include "gemm_int8.h"

#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "dispatch.h"
#include "gemm_dnnl.h"
#include "parallel.h"
#include "util.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define HAVE_X86 1
#else
#define HAVE_X86 0
#endif

enum { MR = INT8_MR, NR = INT8_NR, MAX_IN = 131072 };   /* 127 * 127 * 131072 < 2^31 */

/* ---- quantization ----------------------------------------------------------- */
float int8_quantize_row(int8_t *q, const float *x, int in) {
    /* max |x_k| on the bits: for non-negative floats the order of the bit
     * patterns is the order of the values, and an integer max vectorises
     * (a float one does not without -ffast-math). A NaN wins (garbage out). */
    uint32_t mbits = 0;
    for (int k = 0; k < in; k++) {
        uint32_t u;
        memcpy(&u, &x[k], 4);
        u &= 0x7fffffffu;
        mbits = u > mbits ? u : mbits;
    }
    float amax;
    memcpy(&amax, &mbits, 4);
    float s = amax > 0.0f ? 127.0f / amax : 0.0f;
    for (int k = 0; k < in; k++) {
        /* to nearest, ties to even, by the 1.5 * 2^23 trick (|v| <= 127 here) */
        float v = x[k] * s;
        v = (v + 12582912.0f) - 12582912.0f;
        v = v < 127.0f ? v : 127.0f;      /* a NaN becomes 127: garbage, but defined */
        v = v > -127.0f ? v : -127.0f;
        q[k] = (int8_t)v;
    }
    return amax / 127.0f;
}

/* The zeroed panels of an out x in matrix: K padded to 64 bytes, the rows to
 * whole panels of NR columns (the padding stays 0, scale 0, so it adds nothing). */
static void int8_matrix_alloc(Int8Matrix *q, int out, int in) {
    q->out = out;
    q->in = in;
    q->kp = (in + 63) & ~63;
    q->np = (out + NR - 1) / NR;
    size_t cols = (size_t)q->np * NR;
    q->data = xaligned(cols * q->kp);
    q->scale = xaligned(cols * sizeof(float));
    q->comp = xaligned(cols * sizeof(int32_t));
    memset(q->data, 0, cols * q->kp);
    memset(q->scale, 0, cols * sizeof(float));
    memset(q->comp, 0, cols * sizeof(int32_t));
}

int int8_quantize_weights(Int8Matrix *q, const float *w, int out, int in, int ldw) {
    memset(q, 0, sizeof *q);
    if (in < 1 || out < 1 || in > MAX_IN)
        return errorf("int8: a %d x %d weight matrix: inputs must be 1 .. %d for exact int32 sums", out, in, MAX_IN);
    int8_matrix_alloc(q, out, in);
    #pragma omp parallel if ((size_t)out * in >= PAR_MIN && !omp_in_parallel())
    {
        int8_t *row = xmalloc((size_t)in);
        #pragma omp for schedule(static)
        for (int j = 0; j < out; j++) {
            q->scale[j] = int8_quantize_row(row, w + (size_t)j * ldw, in);
            int32_t sum = 0;
            int8_t *panel = q->data + (size_t)(j / NR) * q->kp * NR;
            for (int k = 0; k < in; k++) {
                panel[((size_t)(k / 4) * NR + j % NR) * 4 + k % 4] = row[k];
                sum += row[k];
            }
            q->comp[j] = -128 * sum;
        }
        free(row);
    }
    return 0;
}

void int8_matrix_free(Int8Matrix *q) {
    free(q->data); free(q->scale); free(q->comp);
    memset(q, 0, sizeof *q);
}

size_t int8_matrix_bytes(const Int8Matrix *q) {
    size_t cols = (size_t)q->np * NR;
    return q->data ? cols * q->kp + cols * (sizeof(float) + sizeof(int32_t)) : 0;
}

int int8_matrix_gather(Int8Matrix *dst, const Int8Matrix *src, const int *rows, int n) {
    memset(dst, 0, sizeof *dst);
    if (n < 1) return errorf("int8: gathering %d rows of a weight matrix (at least 1)", n);
    for (int j = 0; j < n; j++)
        if (rows[j] < 0 || rows[j] >= src->out)
            return errorf("int8: row %d of a %d-row weight matrix", rows[j], src->out);
    int8_matrix_alloc(dst, n, src->in);
    size_t groups = (size_t)src->kp / 4;
    for (int j = 0; j < n; j++) {   /* row r's 4-byte groups, from its panel column to row j's */
        int r = rows[j];
        const int8_t *from = src->data + (size_t)(r / NR) * src->kp * NR + (size_t)(r % NR) * 4;
        int8_t *to = dst->data + (size_t)(j / NR) * dst->kp * NR + (size_t)(j % NR) * 4;
        for (size_t g = 0; g < groups; g++) memcpy(to + g * NR * 4, from + g * NR * 4, 4);
        dst->scale[j] = src->scale[r];
        dst->comp[j] = src->comp[r];
    }
    return 0;
}

float int8_weight(const Int8Matrix *q, int j, int k) {
    const int8_t *panel = q->data + (size_t)(j / NR) * q->kp * NR;
    return (float)panel[((size_t)(k / 4) * NR + j % NR) * 4 + k % 4] * q->scale[j];
}

void int8_row(float *dst, const Int8Matrix *q, int j) {
    const int8_t *panel = q->data + (size_t)(j / NR) * q->kp * NR + (size_t)(j % NR) * 4;
    float d = q->scale[j];
    for (int k = 0; k < q->in; k++) dst[k] = (float)panel[(size_t)(k / 4) * NR * 4 + k % 4] * d;
}

void int8_scratch_free(Int8Scratch *s) {
    free(s->buf);
    s->buf = NULL;
    s->cap = 0;
}

/* ---- micro-kernels ----------------------------------------------------------
 * A tile of mr <= MR rows x nr <= NR columns of y: x = the mr rows of u8 (row
 * stride ldx = kp), wp = the panel, c/dw/b = its 64 columns' c_j, dw_j, b_j
 * (b NULL: none), dx = the rows' scales. */

static void micro_model(int mr, int nr, int kp, const uint8_t *x, size_t ldx, const int8_t *wp, const int32_t *c,
                        const float *dw, const float *dx, const float *b, float *y, size_t ldy) {
    uint32_t acc[MR][NR];
    for (int i = 0; i < mr; i++)
        for (int j = 0; j < NR; j++) acc[i][j] = (uint32_t)c[j];
    for (int p = 0; p < kp; p += 4) {
        const int8_t *w = wp + (size_t)p * NR;   /* 64 columns x 4 bytes */
        for (int i = 0; i < mr; i++) {
            const uint8_t *u = x + i * ldx + p;
            for (int j = 0; j < NR; j++) {   /* lane j of VPDPBUSD */
                int32_t t = (int32_t)u[0] * w[4 * j] + (int32_t)u[1] * w[4 * j + 1] +
                            (int32_t)u[2] * w[4 * j + 2] + (int32_t)u[3] * w[4 * j + 3];
                acc[i][j] += (uint32_t)t;
            }
        }
    }
    for (int i = 0; i < mr; i++)
        for (int j = 0; j < nr; j++) {
            float v = (float)(int32_t)acc[i][j];
            v = v * dx[i];
            v = v * dw[j];
            if (b) v = v + b[j];
            y[i * ldy + j] = v;
        }
}

#if HAVE_X86
#define VNNI_TARGET __attribute__((target("avx512f,avx512bw,avx512vnni")))

/* The 6 x 64 tile in 24 named registers (gcc keeps an array of vectors on
 * the stack). Rows past mr repeat row 0: computed, never stored. */
#define VNNI_ROW(i)                                                      \
    do {                                                                 \
        int32_t u4_;                                                     \
        memcpy(&u4_, x##i + p, 4);                                       \
        __m512i a_ = _mm512_set1_epi32(u4_);                             \
        c##i##0 = _mm512_dpbusd_epi32(c##i##0, a_, w0);                  \
        c##i##1 = _mm512_dpbusd_epi32(c##i##1, a_, w1);                  \
        c##i##2 = _mm512_dpbusd_epi32(c##i##2, a_, w2);                  \
        c##i##3 = _mm512_dpbusd_epi32(c##i##3, a_, w3);                  \
    } while (0)

VNNI_TARGET static void micro_vnni(int mr, int nr, int kp, const uint8_t *x, size_t ldx, const int8_t *wp,
                                   const int32_t *c, const float *dw, const float *dx, const float *b, float *y,
                                   size_t ldy) {
    const uint8_t *x0 = x, *x1 = mr > 1 ? x + ldx : x, *x2 = mr > 2 ? x + 2 * ldx : x;
    const uint8_t *x3 = mr > 3 ? x + 3 * ldx : x, *x4 = mr > 4 ? x + 4 * ldx : x, *x5 = mr > 5 ? x + 5 * ldx : x;
    __m512i k0 = _mm512_loadu_si512((const void *)c), k1 = _mm512_loadu_si512((const void *)(c + 16));
    __m512i k2 = _mm512_loadu_si512((const void *)(c + 32)), k3 = _mm512_loadu_si512((const void *)(c + 48));
    __m512i c00 = k0, c01 = k1, c02 = k2, c03 = k3, c10 = k0, c11 = k1, c12 = k2, c13 = k3;
    __m512i c20 = k0, c21 = k1, c22 = k2, c23 = k3, c30 = k0, c31 = k1, c32 = k2, c33 = k3;
    __m512i c40 = k0, c41 = k1, c42 = k2, c43 = k3, c50 = k0, c51 = k1, c52 = k2, c53 = k3;
    for (int p = 0; p < kp; p += 4) {
        const int8_t *w = wp + (size_t)p * NR;
        __m512i w0 = _mm512_load_si512((const void *)w), w1 = _mm512_load_si512((const void *)(w + 64));
        __m512i w2 = _mm512_load_si512((const void *)(w + 128)), w3 = _mm512_load_si512((const void *)(w + 192));
        VNNI_ROW(0); VNNI_ROW(1); VNNI_ROW(2); VNNI_ROW(3); VNNI_ROW(4); VNNI_ROW(5);
    }
    __m512i acc[MR][4] = {{c00, c01, c02, c03}, {c10, c11, c12, c13}, {c20, c21, c22, c23},
                          {c30, c31, c32, c33}, {c40, c41, c42, c43}, {c50, c51, c52, c53}};
    for (int v = 0; v < 4; v++) {
        int left = nr - 16 * v;
        if (left <= 0) break;
        __mmask16 m = left >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << left) - 1);
        __m512 dwv = _mm512_loadu_ps(dw + 16 * v);
        __m512 bv = b ? _mm512_maskz_loadu_ps(m, b + 16 * v) : _mm512_setzero_ps();
        for (int i = 0; i < mr; i++) {
            __m512 f = _mm512_cvtepi32_ps(acc[i][v]);   /* to nearest, as (float) in C */
            f = _mm512_mul_ps(f, _mm512_set1_ps(dx[i]));
            f = _mm512_mul_ps(f, dwv);
            if (b) f = _mm512_add_ps(f, bv);
            _mm512_mask_storeu_ps(y + i * ldy + 16 * v, m, f);
        }
    }
}
#endif

/* ---- AMX ------------------------------------------------------------------------
 * Tiles: 0..3 the 2 x 2 C tiles of a 32 x 32 block of y (16 x 16 int32
 * each), 4, 5 the A tiles (16 rows of u x 64 inputs), 6, 7 the B tiles (16
 * groups of 4 inputs x 16 columns x 4 bytes, rows 256 bytes apart in the
 * panel). TDPBUSD C += A B does, for each of C's 16 x 16 lanes, what
 * VPDPBUSD does for one lane, over 16 groups of 4 inputs. The tiles start at
 * 0; c_j is added in the epilogue (same integer, mod 2^32). u has its rows
 * padded to a multiple of 32 (zero point 128, never stored). */
typedef struct {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} TileConfig;

typedef struct { uint8_t b[16][64]; } Tile;   /* the scalar model's tile register */

static void tm_load(Tile *t, const void *base, size_t stride) {
    for (int r = 0; r < 16; r++) memcpy(t->b[r], (const uint8_t *)base + r * stride, 64);
}
static void tm_store(const Tile *t, void *base, size_t stride) {
    for (int r = 0; r < 16; r++) memcpy((uint8_t *)base + r * stride, t->b[r], 64);
}
static void tm_dpbusd(Tile *c, const Tile *a, const Tile *b) {   /* TDPBUSD, lane by lane */
    for (int m = 0; m < 16; m++)
        for (int n = 0; n < 16; n++) {
            uint32_t acc;
            memcpy(&acc, &c->b[m][4 * n], 4);
            for (int k = 0; k < 16; k++)
                for (int e = 0; e < 4; e++) acc += (uint32_t)((int32_t)a->b[m][4 * k + e] * (int8_t)b->b[k][4 * n + e]);
            memcpy(&c->b[m][4 * n], &acc, 4);
        }
}

/* y [mr, nr] from a block of raw int32 sums acc [mr, nr] (row stride lda,
 * without c_j: the AMX tiles and oneDNN start at 0): s = acc + c_j (mod
 * 2^32, as the instructions wrap), then the epilogue of the micro-kernels,
 * the same three IEEE operations. */
static void epilogue(const int32_t *acc, size_t lda, int mr, int nr, const int32_t *c, const float *dw, const float *dx,
                     const float *b, float *y, size_t ldy) {
    for (int i = 0; i < mr; i++)
        for (int j = 0; j < nr; j++) {
            float v = (float)(int32_t)((uint32_t)acc[i * lda + j] + (uint32_t)c[j]);
            v = v * dx[i];
            v = v * dw[j];
            if (b) v = v + b[j];
            y[i * ldy + j] = v;
        }
}

/* One panel: blocks of 32 rows x 32 columns. The same loops twice: with the
 * tile instructions (AMX_LOAD ... as macros) and with the model. */
#define AMX_PANEL(ZERO, LOAD, DP, STORE)                                                                      \
    for (int jh = 0; jh < nr; jh += 32)                                                                       \
        for (int i = 0; i < n; i += 32) {                                                                     \
            ZERO(0); ZERO(1); ZERO(2); ZERO(3);                                                               \
            for (int p = 0; p < kp; p += 64) {                                                                \
                LOAD(4, u + (size_t)i * kp + p, kp);                                                          \
                LOAD(5, u + (size_t)(i + 16) * kp + p, kp);                                                   \
                LOAD(6, wp + (size_t)p * NR + jh * 4, NR * 4);                                                \
                LOAD(7, wp + (size_t)p * NR + (jh + 16) * 4, NR * 4);                                         \
                DP(0, 4, 6); DP(1, 4, 7); DP(2, 5, 6); DP(3, 5, 7);                                           \
            }                                                                                                 \
            STORE(0, acc, 128); STORE(1, acc + 16, 128); STORE(2, acc + 16 * 32, 128);                        \
            STORE(3, acc + 16 * 32 + 16, 128);                                                                \
            epilogue(acc, 32, n - i < 32 ? n - i : 32, nr - jh < 32 ? nr - jh : 32, c + jh, dw + jh, dx + i,  \
                         b ? b + jh : NULL, y + (size_t)i * ldy + jh, ldy);                                   \
        }

static void amx_panel_model(int n, int nr, int kp, const uint8_t *u, const int8_t *wp, const int32_t *c,
                            const float *dw, const float *dx, const float *b, float *y, size_t ldy) {
    Tile T[8];
    int32_t acc[32 * 32];
#define M_ZERO(t) memset(&T[t], 0, sizeof(Tile))
#define M_LOAD(t, p, s) tm_load(&T[t], (p), (size_t)(s))
#define M_DP(c, a, b) tm_dpbusd(&T[c], &T[a], &T[b])
#define M_STORE(t, p, s) tm_store(&T[t], (p), (size_t)(s))
    AMX_PANEL(M_ZERO, M_LOAD, M_DP, M_STORE)
}

#if HAVE_X86
__attribute__((target("amx-tile,amx-int8"))) static void amx_panel(int n, int nr, int kp, const uint8_t *u,
                                                                 const int8_t *wp, const int32_t *c, const float *dw,
                                                                 const float *dx, const float *b, float *y,
                                                                 size_t ldy) {
    int32_t acc[32 * 32];
    TileConfig cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.palette = 1;
    for (int t = 0; t < 8; t++) { cfg.rows[t] = 16; cfg.colsb[t] = 64; }
    __asm__ volatile("" ::: "memory");   /* cfg and u written before the tile instructions read them */
    _tile_loadconfig(&cfg);
#define X_ZERO(t) _tile_zero(t)
#define X_LOAD(t, p, s) _tile_loadd(t, (p), (s))
#define X_DP(c, a, b) _tile_dpbusd(c, a, b)
#define X_STORE(t, p, s) _tile_stored(t, (p), (s))
    AMX_PANEL(X_ZERO, X_LOAD, X_DP, X_STORE)
    _tile_release();
}
#endif

typedef void (*Micro)(int, int, int, const uint8_t *, size_t, const int8_t *, const int32_t *, const float *,
                      const float *, const float *, float *, size_t);

static Micro micro_for(Int8Kernel kern) {
#if HAVE_X86
    if (kern == INT8_VNNI) {
        if (int8_vnni()) return micro_vnni;
        ASSERT(!"INT8_VNNI needs AVX512_VNNI: callers check int8_vnni()");
    }
#else
    ASSERT(kern == INT8_MODEL);
#endif
    return micro_model;
}

/* ---- oneDNN's blocks (INT8_ONEDNN) -------------------------------------------
 * Rows in blocks of at most OB_ROWS, each block's count rounded up to a
 * bucket so that a few primitives serve every row count a translation
 * makes (the encoder's token counts, the live hypotheses of each step):
 * exact up to 8, multiples of 8 up to 64, of 32 above (at most 7, resp.
 * 31, rows computed for nothing: their u rows are 128, zero, and their
 * sums are never read). Columns in pieces of whole panels, so that a
 * piece's int32 block (mb x nc x 4 bytes) stays within ACC_BYTES, in L2,
 * for the epilogue that follows it; and, when the threads share the
 * product, at least two pieces per thread. */
enum { OB_ROWS = 512, ACC_BYTES = 256 * 1024 };

static int bucket_rows(int m) { return m <= 8 ? m : m <= 64 ? (m + 7) & ~7 : (m + 31) & ~31; }

static int piece_panels(int mb, int np, int team) {
    int p = ACC_BYTES / (4 * mb * NR);
    if (team > 1 && p > (np + 2 * team - 1) / (2 * team)) p = (np + 2 * team - 1) / (2 * team);
    return p < 1 ? 1 : p > np ? np : p;
}

/* How a product of n rows is cut: row blocks, the last one's bucket, the
 * panels per piece of a full block and of the last, the pieces, and the
 * int32s of the largest piece's block. */
typedef struct { int nblk, mb_last, pf, pl, qf, pieces; size_t acc_ints; } Cut;

static Cut cut(int n, int np, int team) {
    Cut c;
    c.nblk = (n + OB_ROWS - 1) / OB_ROWS;
    c.mb_last = bucket_rows(n - (c.nblk - 1) * OB_ROWS);
    c.pf = piece_panels(OB_ROWS, np, team);
    c.pl = piece_panels(c.mb_last, np, team);
    c.qf = (np + c.pf - 1) / c.pf;
    c.pieces = (c.nblk - 1) * c.qf + (np + c.pl - 1) / c.pl;
    size_t full = c.nblk > 1 ? (size_t)OB_ROWS * c.pf * NR : 0, last = (size_t)c.mb_last * c.pl * NR;
    c.acc_ints = full > last ? full : last;
    return c;
}

static int g_refused;   /* oneDNN refused a product: said once */

/* oneDNN's primitives for a cut product: prim[b][p] for the full row
 * blocks (b 0) and the last (b 1), the full pieces of columns (p 0) and the
 * last piece (p 1); NULL where oneDNN refused the shape (or no piece has
 * it); and the largest scratchpad among them. Got before the pieces run
 * (gemm_dnnl.h), put after. */
typedef struct { const void *prim[2][2]; size_t scratch; } Prims;

static void prims_get(Prims *ps, const Cut *c, int np, int out, int kp) {
    memset(ps, 0, sizeof *ps);
    for (int b = 0; b < 2; b++) {
        if (b == 0 && c->nblk < 2) continue;
        int mb = b ? c->mb_last : OB_ROWS, pp = b ? c->pl : c->pf, q = (np + pp - 1) / pp;
        for (int p = 0; p < 2; p++) {
            if (p == 0 && q < 2) continue;
            int nc = p ? out - (q - 1) * pp * NR : pp * NR;
            size_t sb = 0;
            ps->prim[b][p] = gemm_dnnl_u8s8_get(mb, kp, nc, &sb);
            if (sb > ps->scratch) ps->scratch = sb;
        }
    }
}

static void prims_put(Prims *ps) {
    for (int b = 0; b < 2; b++)
        for (int p = 0; p < 2; p++) gemm_dnnl_u8s8_put(ps->prim[b][p]);
}

/* Piece q of the product: oneDNN's raw sums into acc, then the epilogue;
 * our own kernel if oneDNN refused its shape (the same bits). */
static void onednn_piece(const Cut *c, const Prims *ps, void *scratch, int q, int n, const uint8_t *u, const float *dx,
                         const Int8Matrix *w, const float *b, float *y, int ldy, int32_t *acc) {
    int kp = w->kp, r, piece, pp;
    if (q < (c->nblk - 1) * c->qf) { r = q / c->qf; piece = q % c->qf; pp = c->pf; }
    else { r = c->nblk - 1; piece = q - (c->nblk - 1) * c->qf; pp = c->pl; }
    int i0 = r * OB_ROWS, mr = n - i0 < OB_ROWS ? n - i0 : OB_ROWS, mb = r == c->nblk - 1 ? c->mb_last : OB_ROWS;
    int jp0 = piece * pp, j0 = jp0 * NR, nc = w->out - j0 < pp * NR ? w->out - j0 : pp * NR;
    int last_piece = (jp0 + pp) * NR >= w->out;
    const void *prim = ps->prim[r == c->nblk - 1][last_piece];
    const uint8_t *ui = u + (size_t)i0 * kp;
    if (prim) {
        gemm_dnnl_u8s8_run(prim, acc, ui, w->data + (size_t)jp0 * kp * NR, scratch);
        epilogue(acc, (size_t)nc, mr, nc, w->comp + j0, w->scale + j0, dx + i0, b ? b + j0 : NULL,
                 y + (size_t)i0 * ldy + j0, (size_t)ldy);
        return;
    }
    int first;
    #pragma omp atomic capture
    { first = g_refused; g_refused = 1; }
    Int8Kernel own = int8_vnni() ? INT8_VNNI : INT8_MODEL;
    if (!first)
        log_warn("int8: oneDNN refused a %d x %d x %d product in tfm's packed layout (%s): tfm's %s kernel runs such "
                 "products, with the same numbers", mb, nc, kp, gemm_dnnl_int8_impl(), own == INT8_VNNI ? "VNNI" : "scalar");
    Micro micro = micro_for(own);
    for (int jp = jp0; jp * NR < j0 + nc; jp++) {
        int c0 = jp * NR, cn = w->out - c0 < NR ? w->out - c0 : NR;
        for (int i = 0; i < mr; i += MR)
            micro(mr - i < MR ? mr - i : MR, cn, kp, ui + (size_t)i * kp, (size_t)kp, w->data + (size_t)jp * kp * NR,
                  w->comp + c0, w->scale + c0, dx + i0 + i, b ? b + c0 : NULL, y + (size_t)(i0 + i) * ldy + c0,
                  (size_t)ldy);
    }
}

/* ---- the product ------------------------------------------------------------- */
/* One product's operands and buffers, for int8_linear_part. */
typedef struct {
    Int8Kernel kern;
    Micro micro;
    float *y;
    int ldy;
    const float *x;
    int ldx, n, rows;           /* rows of u: n, padded (int8_linear) */
    const Int8Matrix *w;
    const float *b;
    const Cut *c;
    const Prims *ps;
    uint8_t *u;                 /* [rows, kp] the quantized rows + 128 */
    float *dx;                  /* [n] their scales */
    int32_t *accs;              /* oneDNN: each thread's int32 block */
    size_t acc_ints;
    uint8_t *scratch;           /* oneDNN: each thread's scratchpad */
    size_t scratch_bytes;
} Int8Job;

/* Thread t's share of nt (all of it for 0 of 1): its rows of x quantized,
 * then, once every row is (a barrier), its pieces of the product. */
static void int8_linear_part(const Int8Job *j, int t, int nt) {
    const Int8Matrix *w = j->w;
    int in = w->in, kp = w->kp, np = w->np, out = w->out, n = j->n;
    int8_t *q = xmalloc((size_t)kp);
    int lo, hi;
    par_share(j->rows, t, nt, &lo, &hi);
    for (int i = lo; i < hi; i++) {   /* u = q + 128, the padding 128 (= 0) */
        uint8_t *ui = j->u + (size_t)i * kp;
        if (i >= n) { memset(ui, 128, (size_t)kp); continue; }
        j->dx[i] = int8_quantize_row(q, j->x + (size_t)i * j->ldx, in);
        for (int k = 0; k < in; k++) ui[k] = (uint8_t)(q[k] + 128);
        for (int k = in; k < kp; k++) ui[k] = 128;
    }
    free(q);
    if (nt > 1) {
        #pragma omp barrier
    }
    if (j->kern == INT8_ONEDNN) {
        int32_t *acc = j->accs + (size_t)t * j->acc_ints;
        void *scratch = j->scratch + (size_t)t * j->scratch_bytes;
        if (nt > 1) {
            #pragma omp for schedule(dynamic, 1)
            for (int p = 0; p < j->c->pieces; p++)
                onednn_piece(j->c, j->ps, scratch, p, n, j->u, j->dx, w, j->b, j->y, j->ldy, acc);
        } else {
            for (int p = 0; p < j->c->pieces; p++)
                onednn_piece(j->c, j->ps, scratch, p, n, j->u, j->dx, w, j->b, j->y, j->ldy, acc);
        }
        return;
    }
    par_share(np, t, nt, &lo, &hi);
    for (int jp = lo; jp < hi; jp++) {
        const int8_t *wp = w->data + (size_t)jp * kp * NR;
        int j0 = jp * NR, nr = out - j0 < NR ? out - j0 : NR;
        const float *bj = j->b ? j->b + j0 : NULL;
        float *y = j->y + j0;
        if (j->kern == INT8_AMX_MODEL) {
            amx_panel_model(n, nr, kp, j->u, wp, w->comp + j0, w->scale + j0, j->dx, bj, y, (size_t)j->ldy);
            continue;
        }
#if HAVE_X86
        if (j->kern == INT8_AMX) {
            amx_panel(n, nr, kp, j->u, wp, w->comp + j0, w->scale + j0, j->dx, bj, y, (size_t)j->ldy);
            continue;
        }
#endif
        for (int i = 0; i < n; i += MR) {
            int mr = n - i < MR ? n - i : MR;
            j->micro(mr, nr, kp, j->u + (size_t)i * kp, (size_t)kp, wp, w->comp + j0, w->scale + j0, j->dx + i, bj,
                     y + (size_t)i * j->ldy, (size_t)j->ldy);
        }
    }
}

void int8_linear(Int8Kernel kern, float *y, int ldy, const float *x, int ldx, int n, const Int8Matrix *w,
                 const float *b, Int8Scratch *s) {
    if (n <= 0) return;
    if (kern == INT8_BY_ROWS) kern = int8_by_rows(n, int8_vnni(), int8_amx(), int8_onednn());
    int amx = kern == INT8_AMX || kern == INT8_AMX_MODEL, dnn = kern == INT8_ONEDNN;
    ASSERT(kern != INT8_AMX || int8_amx());
    ASSERT(kern != INT8_ONEDNN || int8_onednn());
    Micro micro = amx || dnn ? NULL : micro_for(kern);
    int in = w->in, kp = w->kp, np = w->np, out = w->out;
    int team = !omp_in_parallel() && (double)n * in * out >= ROWS_GEMM_PAR_MIN ? threads_count() : 1;
    /* rows of u: n, padded to 32 for the AMX tiles, to the last block's
     * bucket for oneDNN (and each thread's int32 block) */
    Cut c = cut(n, np, team);
    int rows = amx ? (n + 31) & ~31 : dnn ? (c.nblk - 1) * OB_ROWS + c.mb_last : n;
    size_t u_bytes = ((size_t)rows * kp + 63) & ~(size_t)63, dx_bytes = ((size_t)n * sizeof(float) + 63) & ~(size_t)63;
    Prims ps = {0};
    if (dnn) prims_get(&ps, &c, np, out, kp);
    size_t scratch_bytes = (ps.scratch + 63) & ~(size_t)63;   /* each thread's oneDNN scratchpad */
    size_t acc_ints = dnn ? c.acc_ints : 0, acc_bytes = team * acc_ints * sizeof(int32_t);
    size_t need = u_bytes + dx_bytes + acc_bytes + (size_t)team * scratch_bytes + 64;
    if (need > s->cap) {
        free(s->buf);
        s->cap = need + need / 4;
        s->buf = xaligned(s->cap);
    }
    Int8Job j = {kern, micro, y, ldy, x, ldx, n, rows, w, b, &c, &ps, s->buf, (float *)(s->buf + u_bytes),
                 (int32_t *)(s->buf + u_bytes + dx_bytes), acc_ints, s->buf + u_bytes + dx_bytes + acc_bytes, scratch_bytes};
    if (team > 1) {
        #pragma omp parallel num_threads(team)
        int8_linear_part(&j, omp_get_thread_num(), omp_get_num_threads());
    } else {
        int8_linear_part(&j, 0, 1);   /* no region (parallel.h) */
    }
    prims_put(&ps);
}
