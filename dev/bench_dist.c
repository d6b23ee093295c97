/* bench_dist.c — the gradient's communication in one update of N ranks:
 * MPI_Allreduce of the whole buffer (Open MPI's ring, pinned as tfm pinned
 * it before the optimizer step was sharded) against dist.c's ring
 * reduce-scatter followed by its ring all-gather (the sharded step's two
 * halves, the same bytes on the wire), on the same buffer, alternating.
 * A benchmark, not a test (scripts/bench-mpi.sh comm runs it):
 *
 *   mpirun -np 2 build/dev/bench_dist [FLOATS] [REPEATS]   default 62033920 (the base model) 5
 *
 * One thread per rank, as `mpirun -np 2 tfm train --threads 1` on 2 cores.
 * Prints, on rank 0, each repeat's seconds and the median of each. */
#include <stdio.h>
#include <stdlib.h>

#include "dispatch.h"
#include "dist.h"
#include "util.h"

#ifdef TFM_MPI
#include <mpi.h>

static void fill(float *x, size_t n) {   /* the sums would grow without bound over the repeats */
    for (size_t i = 0; i < n; i++) x[i] = (float)((i * 2654435761u) % 1000) * 1e-3f;
}

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv) {
    size_t n = argc > 1 ? strtoull(argv[1], NULL, 10) : 62033920;
    int reps = argc > 2 ? atoi(argv[2]) : 5;
    if (n == 0 || reps < 1 || reps > 100) { fprintf(stderr, "usage: bench_dist [FLOATS > 0] [REPEATS 1..100]\n"); return 2; }
    setenv("OMPI_MCA_coll_tuned_use_dynamic_rules", "1", 0);
    setenv("OMPI_MCA_coll_tuned_allreduce_algorithm", "4", 0);
    if (threads_init(1)) { fprintf(stderr, "bench_dist: %s\n", error_message()); return 1; }   /* as tfm train --threads 1 */
    if (dist_init()) { fprintf(stderr, "bench_dist: %s\n", error_message()); return 1; }
    if (dist_size() < 2) { fprintf(stderr, "bench_dist: run it under mpirun -np N, N >= 2\n"); return 2; }
    float *x = xaligned(n * sizeof(float));
    double *ar = xmalloc((size_t)reps * sizeof *ar), *rs = xmalloc((size_t)reps * sizeof *rs);
    for (int r = 0; r < reps; r++) {
        fill(x, n);
        dist_barrier();
        double t0 = now_seconds();
        for (size_t off = 0; off < n; off += (size_t)1 << 30) {
            size_t k = n - off < ((size_t)1 << 30) ? n - off : (size_t)1 << 30;
            MPI_Allreduce(MPI_IN_PLACE, x + off, (int)k, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        }
        dist_barrier();
        ar[r] = now_seconds() - t0;
        fill(x, n);
        dist_barrier();
        t0 = now_seconds();
        dist_reduce_scatter(x, n);
        dist_all_gather(x, n);
        dist_barrier();
        rs[r] = now_seconds() - t0;
        if (dist_rank() == 0) printf("repeat %d: all-reduce %.3f s, reduce-scatter + all-gather %.3f s\n", r + 1, ar[r], rs[r]);
    }
    if (dist_rank() == 0) {
        qsort(ar, (size_t)reps, sizeof *ar, cmp);
        qsort(rs, (size_t)reps, sizeof *rs, cmp);
        printf("%d ranks, %zu floats (%.0f MB): median all-reduce %.3f s, reduce-scatter + all-gather %.3f s (%.2fx)\n",
               dist_size(), n, n * 4 / 1e6, ar[reps / 2], rs[reps / 2], rs[reps / 2] / ar[reps / 2]);
    }
    free(ar); free(rs); free(x);
    dist_finalize();
    return 0;
}

#else
int main(void) {
    printf("SKIP bench_dist: built with MPI=0\n");
    return 0;
}
#endif
