/* parallel.h — when a loop or a product is worth a thread team: every
 * threshold below which tfm's kernels run on one thread, with what set it.
 *
 * Why serial at all: a parallel region costs a few microseconds on an idle
 * machine, and a whole scheduler time slice (milliseconds) when another
 * process holds the other core, as on a shared machine; small models and
 * incremental decoding are made of small loops. Results never depend on
 * these numbers: every row (every C entry of a product) is computed by the
 * same instructions in the same order on any thread, so moving a threshold
 * changes speed only (test_ops, test_decode and the parity tests check
 * outputs across thread counts).
 *
 * Work is counted in floats touched (loops) or multiply-adds m * n * k
 * (products). Figures: the 2-core AMD EPYC Zen 4 dev machine (family 0x19
 * model 0x11), BLIS's 'zen3' kernels, fp32, 2 threads, best of 50-2000 runs
 * of a throwaway program (2026-11-25, load average 9 from other work): an
 * empty parallel region 0.55 us at best; a product of 8M multiply-adds in
 * one piece 183 us best, but 16 ms through gemm's two threads once the other
 * core was taken; the bf16 rounding of 256k floats (in cache) 33 us on one
 * thread, 17 us on two. */
#ifndef TFM_PARALLEL_H
#define TFM_PARALLEL_H

#include <omp.h>
#include <stddef.h>

int threads_count(void);   /* dispatch.h */

/* Row loops of the kernels (LayerNorm, softmax, dropout, embeddings,
 * attention, the loss, Adam, the search's per-row work): 64k floats, a few
 * to some tens of microseconds on one core. Raised from 32k (with
 * GEMM_PAR_MIN from 2M) in commit 52e4803, which added the CPU-time MFU of
 * scripts/bench-train.sh to judge it; the commit records no figures. */
#define PAR_MIN ((size_t)1 << 16)

/* Loops that do little more than stream memory (rounding a matrix or the
 * weights to bf16: a few instructions per float): 256k floats, 4x PAR_MIN
 * because each float costs less than in the row loops above. Set with the
 * bf16 products (commit 0f37da1) by that reasoning; measured above: 33 us
 * on one thread, so a second one saves ~16 us against the time slice it
 * can cost on a busy machine. */
#define STREAM_PAR_MIN ((size_t)1 << 18)

/* Training products (gemm, gemm_many, gemm_dnnl_many: cut into pieces):
 * 8M multiply-adds = 16 MFLOP, 150-180 us on one core (183 us measured
 * above, 92 GFLOP/s). Raised from 2M in commit 52e4803 (see PAR_MIN). */
#define GEMM_PAR_MIN ((double)(1 << 23))

/* Inference products (linear_rows, packed layers: BLIS's threads or a team
 * around its micro-kernel): 1M multiply-adds, 27 us on one core (measured
 * above, [64 x 128] x [128 x 128]). Set for decoding in commit 5878b45 so
 * that the small products of one decoding step open no team; not re-chosen
 * since, nor raised with the two above. */
#define ROWS_GEMM_PAR_MIN ((double)(1 << 20))

/* ---- loops that run serial without a region ----------------------------
 * A parallel region of one thread is not free either: libgomp makes and
 * frees a team for it, and the barrier that closes it wakes its waiters
 * with a futex system call whether there are any or not. That is the case
 * of every `#pragma omp parallel` whose `if` is false, that runs with one
 * thread ([run] threads = 1: each member of the Multi30k recipe), or that is
 * nested in another team (translation's batches, one per thread: every
 * region of the decoder inside them). Measured on the 2-core AMD Zen 5 VM
 * (2026-11-27, a throwaway program, both cores busy with a training run):
 * 1.3-2.4 us a region at top level, 3.6-6 us nested; `tfm translate` of
 * test2016 with the recipe's model opened 52,582 of them, 1.55 s of kernel
 * time beside 2.87 s of user time. So the loops that run per decoding step
 * or per sublayer ask par_go, and run as plain loops, with no region, where
 * it says no: that translation now opens 2, and runs 1.13-1.31x as fast on
 * the quiet machine (doc/translate.md). */

/* Whether a loop over `work` (in the units of `min`, above) runs on the
 * team: worth it, more than one thread, and called from serial code (inside
 * a team, nested regions get one thread: dispatch.c turns nesting off). */
static inline int par_go(size_t work, size_t min) {
    return work >= min && threads_count() > 1 && !omp_in_parallel();
}

/* [lo, hi) of n items: thread t's contiguous share of nt (all of them for
 * 0 of 1), for a region's body written as a function of (t, nt) that also
 * runs alone, with no region, where par_go says no. */
static inline void par_share(int n, int t, int nt, int *lo, int *hi) {
    *lo = (int)((long)n * t / nt);
    *hi = (int)((long)n * (t + 1) / nt);
}

/* `for HEAD BODY` (HEAD with its parentheses, BODY a statement or a block,
 * no preprocessor lines in it) under `#pragma PRAGMA` (a string: an `omp
 * parallel for` with its clauses) where GO, else the same loop on this
 * thread without a region. Every iteration computes the same values either
 * way (rows are independent). PAR_FOR and PAR_FOR_DYNAMIC name the two
 * schedules the kernels use; PAR_FOR_SIMD keeps `omp simd` in the serial
 * loop too (element-wise loops). */
#define PAR_FOR_AS(GO, PRAGMA, HEAD, ...) \
    do { if (GO) { _Pragma(PRAGMA) for HEAD __VA_ARGS__ } else { for HEAD __VA_ARGS__ } } while (0)
#define PAR_FOR(GO, HEAD, ...) PAR_FOR_AS(GO, "omp parallel for schedule(static)", HEAD, __VA_ARGS__)
#define PAR_FOR_DYNAMIC(GO, HEAD, ...) PAR_FOR_AS(GO, "omp parallel for schedule(dynamic, 1)", HEAD, __VA_ARGS__)
#define PAR_FOR_SIMD(GO, HEAD, ...) \
    do { if (GO) { _Pragma("omp parallel for simd schedule(static)") for HEAD __VA_ARGS__ } \
         else { _Pragma("omp simd") for HEAD __VA_ARGS__ } } while (0)

/* A region whose body is written as a function of the thread's number and
 * the team's size: BODY (no preprocessor lines in it) sees them as par_t and
 * par_nt, under `#pragma omp parallel` where GO, else once as par_t = 0 of
 * par_nt = 1, with no region (a thread's share of rows: par_share). */
#define PAR_PARTS(GO, ...)                                                                           \
    do {                                                                                             \
        if (GO) {                                                                                    \
            _Pragma("omp parallel") { int par_t = omp_get_thread_num(), par_nt = omp_get_num_threads(); \
                                      __VA_ARGS__ }                                                  \
        } else {                                                                                     \
            int par_t = 0, par_nt = 1;                                                               \
            __VA_ARGS__                                                                              \
        }                                                                                            \
    } while (0)

#endif
