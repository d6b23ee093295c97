/* test_dist.c — the all-gathers of src/dist.c (the weights of a sharded
 * optimizer step): every rank ends with every rank's block, byte for byte,
 * for blocks of equal and unequal length, odd lengths, a block far longer
 * than the others (the fp32 embedding beside bf16 matrices), and empty
 * blocks (fewer DIST_ALIGN blocks than ranks); and dist_all_gather over
 * float slices of sizes around DIST_ALIGN * N. Alone (run.sh) it checks the
 * one-process stand-ins; tests/mpi.sh runs it under mpirun on 2, 3 and 4
 * ranks. */
#include "test.h"

#include "dist.h"
#include "util.h"

#include <stdint.h>

static unsigned char byte_of(int rank, size_t i) { return (unsigned char)(rank * 131 + i * 7 + (i >> 8)); }

/* One all-gather of blocks of len[r] bytes laid end to end; every byte of
 * every block checked on this rank. */
static void gather_and_check(const size_t *len, const char *what) {
    int N = dist_size(), me = dist_rank();
    size_t *off = xmalloc((size_t)N * sizeof *off), total = 0;
    for (int r = 0; r < N; r++) { off[r] = total; total += len[r]; }
    unsigned char *buf = xcalloc(total + 1, 1);
    for (size_t i = 0; i < len[me]; i++) buf[off[me] + i] = byte_of(me, i);
    dist_all_gather_blocks(buf, off, len);
    size_t bad = 0;
    for (int r = 0; r < N; r++)
        for (size_t i = 0; i < len[r]; i++) bad += buf[off[r] + i] != byte_of(r, i);
    CHECK_MSG(bad == 0, "%s: %zu wrong bytes on rank %d of %d", what, bad, me, N);
    free(buf);
    free(off);
}

static void test_blocks(void) {
    int N = dist_size();
    size_t *len = xmalloc((size_t)N * sizeof *len);
    for (int r = 0; r < N; r++) len[r] = 4096;
    gather_and_check(len, "equal blocks");
    for (int r = 0; r < N; r++) len[r] = 1000 + 37 * (size_t)r + (r % 2);
    gather_and_check(len, "unequal, odd lengths");
    for (int r = 0; r < N; r++) len[r] = r == 0 ? 300000 : 7 + (size_t)r;
    gather_and_check(len, "one block 40,000x the others");
    for (int r = 0; r < N; r++) len[r] = r == N - 1 ? 5 : 200000;
    gather_and_check(len, "the last block short");
    for (int r = 0; r < N; r++) len[r] = r % 2 ? 0 : 513;
    gather_and_check(len, "empty blocks");
    for (int r = 0; r < N; r++) len[r] = 1;
    gather_and_check(len, "one byte each");
    free(len);
}

/* dist_all_gather: every slice of a float buffer, at sizes where some
 * slices are empty, short or whole blocks of DIST_ALIGN. */
static void test_float_slices(void) {
    int N = dist_size(), me = dist_rank();
    size_t sizes[] = {1, DIST_ALIGN - 1, (size_t)DIST_ALIGN * N - 3, (size_t)DIST_ALIGN * N + 5, 100003};
    for (size_t k = 0; k < sizeof sizes / sizeof *sizes; k++) {
        size_t n = sizes[k], lo = dist_slice_lo(n, me), hi = dist_slice_lo(n, me + 1);
        CHECK(dist_slice_lo(n, 0) == 0 && dist_slice_lo(n, N) == n);
        float *x = xcalloc(n, sizeof *x);
        for (size_t i = lo; i < hi; i++) x[i] = (float)i + 0.5f;
        dist_all_gather(x, n);
        size_t bad = 0;
        for (size_t i = 0; i < n; i++) bad += x[i] != (float)i + 0.5f;
        CHECK_MSG(bad == 0, "dist_all_gather of %zu floats: %zu wrong on rank %d of %d", n, bad, me, N);
        free(x);
    }
}

int main(void) {
    if (dist_init()) { fprintf(stderr, "test_dist: %s\n", error_message()); return 1; }
    if (dist_size() == 1) fprintf(stderr, "test_dist: one process (tests/mpi.sh runs it on 2, 3 and 4 ranks)\n");
    RUN(test_blocks);
    RUN(test_float_slices);
    dist_finalize();
    return test_summary();
}
