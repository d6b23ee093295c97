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
 * The model kernel is the same tile in plain C with unsigned 32-bit sums
 * (wrapping as the instruction does; signed overflow would be undefined in
 * C), and the same float epilogue, written as the same three IEEE
 * operations: so both give the same bits. */
#include "gemm_int8.h"

#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define HAVE_X86 1
#else
#define HAVE_X86 0
#endif

enum { MR = INT8_MR, NR = INT8_NR, MAX_IN = 131072 };   /* 127 * 127 * 131072 < 2^31 */

/* A product this big (multiply-adds) shares the threads, from serial code
 * (as ops.c's ROWS_GEMM_PAR_MIN). */
#define INT8_PAR_MIN ((double)(1 << 20))

/* ---- CPU check ----------------------------------------------------------- */
int int8_vnni(void) {   /* libgcc reads the CPU's features once, at start-up */
#if HAVE_X86
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vnni");
#else
    return 0;
#endif
}

static int g_kernel = -1;   /* decided once, by the first call (from serial code) */

Int8Kernel int8_kernel(void) {
    if (g_kernel < 0) {
        const char *e = getenv("TFM_INT8_KERNEL");
        int model = e && !strcmp(e, "model");
        g_kernel = model || !int8_vnni() ? INT8_MODEL : INT8_VNNI;
    }
    return (Int8Kernel)g_kernel;
}

void int8_set_kernel(Int8Kernel k) {
    ASSERT(k == INT8_MODEL || int8_vnni());
    g_kernel = k;
}

const char *int8_mode(void) {
    if (int8_kernel() == INT8_VNNI) return "AVX512_VNNI kernel";
    return int8_vnni() ? "scalar model (TFM_INT8_KERNEL=model)" : "scalar model: AVX512_VNNI not found, same numbers, slower";
}

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

int int8_quantize_weights(Int8Matrix *q, const float *w, int out, int in, int ldw) {
    memset(q, 0, sizeof *q);
    if (in < 1 || out < 1 || in > MAX_IN)
        return errorf("int8: a %d x %d weight matrix: inputs must be 1 .. %d for exact int32 sums", out, in, MAX_IN);
    q->out = out;
    q->in = in;
    q->kp = (in + 3) & ~3;
    q->np = (out + NR - 1) / NR;
    size_t cols = (size_t)q->np * NR;
    q->data = xaligned(cols * q->kp);
    q->scale = xaligned(cols * sizeof(float));
    q->comp = xaligned(cols * sizeof(int32_t));
    memset(q->data, 0, cols * q->kp);
    memset(q->scale, 0, cols * sizeof(float));
    memset(q->comp, 0, cols * sizeof(int32_t));
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

/* ---- the product ------------------------------------------------------------- */
void int8_linear(Int8Kernel kern, float *y, int ldy, const float *x, int ldx, int n, const Int8Matrix *w,
                 const float *b, Int8Scratch *s) {
    if (n <= 0) return;
    Micro micro = micro_for(kern);
    int in = w->in, kp = w->kp, np = w->np, out = w->out;
    size_t need = (size_t)n * kp + (size_t)n * sizeof(float) + 64;
    if (need > s->cap) {
        free(s->buf);
        s->cap = need + need / 4;
        s->buf = xaligned(s->cap);
    }
    uint8_t *u = s->buf;
    float *dx = (float *)(s->buf + (((size_t)n * kp + 63) & ~(size_t)63));
    int team = !omp_in_parallel() && (double)n * in * out >= INT8_PAR_MIN ? threads_count() : 1;
    #pragma omp parallel num_threads(team) if (team > 1)
    {
        int8_t *q = xmalloc((size_t)kp);
        #pragma omp for schedule(static)
        for (int i = 0; i < n; i++) {   /* u = q + 128, the padding 128 (= 0) */
            dx[i] = int8_quantize_row(q, x + (size_t)i * ldx, in);
            uint8_t *ui = u + (size_t)i * kp;
            for (int k = 0; k < in; k++) ui[k] = (uint8_t)(q[k] + 128);
            for (int k = in; k < kp; k++) ui[k] = 128;
        }
        free(q);
        #pragma omp for schedule(static)
        for (int jp = 0; jp < np; jp++) {
            const int8_t *wp = w->data + (size_t)jp * kp * NR;
            int j0 = jp * NR, nr = out - j0 < NR ? out - j0 : NR;
            for (int i = 0; i < n; i += MR) {
                int mr = n - i < MR ? n - i : MR;
                micro(mr, nr, kp, u + (size_t)i * kp, (size_t)kp, wp, w->comp + j0, w->scale + j0, dx + i,
                      b ? b + j0 : NULL, y + (size_t)i * ldy + j0, (size_t)ldy);
            }
        }
    }
}
