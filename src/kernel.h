/* kernel.h — what the matrix-product kernels share: ops.c (BLIS),
 * gemm_bf16.c (the AVX512_BF16 kernel) and gemm_dnnl.c (oneDNN) include
 * this instead of one another, so the kernels form no include cycle
 * (doc/architecture.md; tests/layers.sh checks it).
 *
 * Shapes are ops.h's gemm(): C [m, n] = beta C + alpha op(A) op(B), row-major
 * with leading dimensions lda, ldb, ldc; A stored [m, k] (ta = 0) or [k, m]
 * (ta = 1), B stored [k, n] (tb = 0) or [n, k] (tb = 1). */
#ifndef TFM_KERNEL_H
#define TFM_KERNEL_H

#include <stddef.h>

/* One product of ops.h's gemm_many, as every product kernel takes it
 * (gemm_many, gemm_dnnl_many). bf16 != 0 makes it a bf16 product
 * (gemm_bf16.h); its bits say which operands to round: GEMM_BF16_A,
 * GEMM_BF16_B; an operand without its bit must already hold bf16 values
 * (GEMM_BF16_HELD alone: both do, written so where they were made). */
enum { GEMM_BF16_A = 1, GEMM_BF16_B = 2, GEMM_BF16_HELD = 4 };
typedef struct {
    int ta, tb, m, n, k;
    float alpha;
    const float *a;
    int lda;
    const float *b;
    int ldb;
    float beta;
    float *c;
    int ldc;
    int bf16;        /* 0: fp32; else GEMM_BF16_A | GEMM_BF16_B as needed, or GEMM_BF16_HELD */
    const float *bias;   /* [n] or NULL: C = bias (every row) + alpha op(A) op(B), with beta 0;
                          * each piece writes its own block of it (no pass or parallel region
                          * of its own) */
    int round_c;         /* 1: C written rounded to bf16 values (bf16_round) once summed, by
                          * each piece on its own block while it is in cache (the attention
                          * core's q, k, v and dO off the oneDNN route: ops.h LINEAR_ROUND_OUT) */
} Gemm;
/* Buffers the product kernels know something about, registered by the
 * model: oneDNN's 16-bit twins of the weights (gemm_dnnl_shadow), the fp32
 * masters that emulated products round (gemm_bf16_masters). A few at once:
 * a range per model, and the output layer's dlogits. */
enum { KERNEL_RANGES = 8 };
typedef struct { const float *p; size_t n; const void *data; } KernelRange;
/* p's entry set to [p, p + n) with data, or let go of where n is 0. */
void kernel_range_set(KernelRange *r, const float *p, size_t n, const void *data);
/* The entry holding [rows, cols] at x (row stride ld) whole, or NULL; *off:
 * x's offset in it. */
const KernelRange *kernel_range_of(const KernelRange *r, const float *x, int rows, int cols, int ld, size_t *off);

/* Rows [rows, cols] of c (row stride ldc) = bias [cols]. */
void gemm_fill_bias(float *c, int ldc, const float *bias, int rows, int cols);

/* For product kernels: dies on a leading dimension too small for the shape
 * (neither BLIS nor our kernel checks strides: a wrong one would read or
 * write out of bounds); returns 1 when nothing is left to do (an empty C,
 * or k = 0: C = beta C done here), else 0. */
int gemm_trivial(int ta, int tb, int m, int n, int k, int lda, int ldb, float beta, float *c, int ldc);

#endif
