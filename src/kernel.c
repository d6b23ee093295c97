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

void kernel_range_set(KernelRange *r, const float *p, size_t n, const void *data) {
    int free_slot = -1;
    for (int i = 0; i < KERNEL_RANGES; i++) {
        if (r[i].p == p) {
            r[i].n = n;
            r[i].data = data;
            if (!n) r[i].p = NULL;
            return;
        }
        if (!r[i].p && free_slot < 0) free_slot = i;
    }
    if (!n) return;
    ASSERT(free_slot >= 0);   /* a few models at once at most */
    r[free_slot] = (KernelRange){p, n, data};
}

const KernelRange *kernel_range_of(const KernelRange *r, const float *x, int rows, int cols, int ld, size_t *off) {
    if (rows < 1 || cols < 1) return NULL;
    for (int i = 0; i < KERNEL_RANGES; i++) {
        if (!r[i].p || x < r[i].p) continue;
        size_t o = (size_t)(x - r[i].p), span = (size_t)(rows - 1) * ld + cols;
        if (o + span <= r[i].n) {
            *off = o;
            return &r[i];
        }
    }
    return NULL;
}
