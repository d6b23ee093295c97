/* kernel.c — helpers shared by the matrix-product kernels (see kernel.h). */
#include "kernel.h"

#include <stddef.h>
#include <string.h>

#include "util.h"

int gemm_trivial(int ta, int tb, int m, int n, int k, int lda, int ldb, float beta, float *c, int ldc) {
    if (m <= 0 || n <= 0) return 1;
    /* BLIS does not check strides: a wrong one reads or writes out of bounds. */
    ASSERT(lda >= (ta ? m : k) && ldb >= (tb ? k : n) && ldc >= n && k >= 0);
    if (k == 0) {   /* C = beta C */
        for (int i = 0; i < m; i++)
            for (int j = 0; j < n; j++) c[(size_t)i * ldc + j] = beta == 0.0f ? 0.0f : beta * c[(size_t)i * ldc + j];
        return 1;
    }
    return 0;
}

void gemm_fill_bias(float *c, int ldc, const float *bias, int rows, int cols) {
    for (int i = 0; i < rows; i++) memcpy(c + (size_t)i * ldc, bias, (size_t)cols * sizeof *c);
}
