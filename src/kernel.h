/* kernel.h — helpers shared by the matrix-product kernels: ops.c (BLIS) and
 * gemm_bf16.c (the AVX512_BF16 kernel) both include this, and neither
 * includes the other's internals for it, so the kernels form no include
 * cycle (doc/architecture.md; tests/layers.sh checks it).
 *
 * Shapes are ops.h's gemm(): C [m, n] = beta C + alpha op(A) op(B), row-major
 * with leading dimensions lda, ldb, ldc; A stored [m, k] (ta = 0) or [k, m]
 * (ta = 1), B stored [k, n] (tb = 0) or [n, k] (tb = 1). */
#ifndef TFM_KERNEL_H
#define TFM_KERNEL_H

/* For product kernels: dies on a leading dimension too small for the shape
 * (neither BLIS nor our kernel checks strides: a wrong one would read or
 * write out of bounds); returns 1 when nothing is left to do (an empty C,
 * or k = 0: C = beta C done here), else 0. */
int gemm_trivial(int ta, int tb, int m, int n, int k, int lda, int ldb, float beta, float *c, int ldc);

#endif
