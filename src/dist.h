/* dist.h — data-parallel training over MPI ranks (OpenMPI): the few
 * collectives `tfm train` needs, and single-process stand-ins.
 *
 * `mpirun -np N tfm train CONFIG.ini` starts N copies; each holds the whole
 * model. Per update, rank r runs forward/backward on batches r, r+N, ... of
 * the shared epoch plan; then the optimizer step is sharded (ZeRO stage 1):
 *
 *   gradient  [ slice 0 | slice 1 | ... | slice N-1 ]   one flat buffer
 *   1. reduce-scatter: rank r gets the sum over the ranks of its slice r
 *   2. the global norm (clipping): each rank's sum of squares of its slice,
 *      summed over the ranks in rank order (dist_sum_doubles)
 *   3. Adam on slice r only, with rank r's moments, which are slice r's alone
 *   4. all-gather: every rank gets every slice of the updated weights
 *      (with bf16 products, optionally packed: train.c gather_weights)
 *
 * The same bytes on the wire as one ring all-reduce of the gradient (each
 * rank sends and receives 2(N-1)/N of it), but each rank runs Adam on 1/N of
 * the parameters and holds 1/N of the Adam moments. The weights after step
 * 4 are copies, so the replicas stay identical (checked: dist_check_replicas).
 *
 * MPI is initialised only by `tfm train`, and only when a launcher started
 * the process (mpirun/srun set OMPI_COMM_WORLD_SIZE, PMIX_RANK or PMI_RANK);
 * a plain `tfm train` is one process and never touches MPI. Built with
 * `make MPI=0` every function is the single-process version.
 *
 * Determinism: the sums are in an order fixed by the rank count alone, on
 * every MPI and transport: the reduce-scatter is a ring written here with
 * point-to-point messages (element i of slice b is summed ranks b+1, b+2,
 * ..., b, mod N), and dist_sum_doubles adds the ranks' values in rank order.
 * So for a fixed N the summed bits are the same in every run, over shared
 * memory or TCP alike.
 */
#ifndef TFM_DIST_H
#define TFM_DIST_H

#include <stddef.h>

/* Join the job if a launcher started this process; otherwise (or with
 * MPI=0) a job of one. Returns 0, or -1 + errorf. */
int dist_init(void);
void dist_finalize(void);
int dist_rank(void);
int dist_size(void);
/* "OpenMPI 4.1.4" or "no MPI (built with MPI=0)", for --help. */
const char *dist_library(void);
/* End every rank of the job now with exit code `code` (a lone process: exit). */
void dist_abort(int code) __attribute__((noreturn));

/* The slices of a flat buffer of n floats, one per rank: rank r owns
 * [dist_slice_lo(n, r), dist_slice_lo(n, r + 1)); dist_slice_lo(n, 0) = 0,
 * dist_slice_lo(n, dist_size()) = n. Every boundary but n is a multiple of
 * DIST_ALIGN floats (64 bytes: a cache line, a zmm register), and the slices
 * differ in length by less than 2 DIST_ALIGN. */
enum { DIST_ALIGN = 16 };
size_t dist_slice_lo(size_t n, int rank);

/* In place, over x[0, n): on return this rank's slice of x holds the sum of
 * that slice over the ranks (the same bits in every run, dist.h's order);
 * the rest of x holds partial sums: garbage. First waits for every rank (a
 * barrier): the seconds of each part go to dist_wait_seconds and
 * dist_comm_seconds. */
void dist_reduce_scatter(float *x, size_t n);
/* In place: every rank's slice of x[0, n) to every rank (copies: exact).
 * Its seconds: dist_gather_seconds; the bytes this rank sent:
 * dist_gather_bytes. */
void dist_all_gather(float *x, size_t n);
/* The same for blocks of bytes of any length (a slice packed for the wire:
 * model_wire_pack): block r is buf[off[r], off[r] + len[r]), rank r's own
 * on entry; on return every rank holds every block. Every rank passes the
 * same off and len. */
void dist_all_gather_blocks(void *buf, const size_t *off, const size_t *len);
/* To rank 0, floats [lo, lo + len) of a buffer of n floats sliced over the
 * ranks, each rank holding only its slice as mine[0, length of its slice):
 * out[0, len) = that range (written on rank 0 only; the others pass NULL).
 * Every rank calls it with the same (n, lo, len), the ranks whose slice
 * meets the range send their part, so rank 0 can gather a sharded buffer a
 * piece at a time (a checkpoint's Adam moments, straight into the file). */
void dist_gather_range(const float *mine, size_t n, size_t lo, size_t len, float *out);
/* all[r * bytes, (r + 1) * bytes) = rank r's mine[0, bytes), on every rank
 * (a rank's part of something checked together: its slice's checksums at
 * resume). */
void dist_all_gather_bytes(const void *mine, size_t bytes, void *all);
/* In place: x[i] = the sum of x[i] over the ranks, added in rank order (the
 * same bits on every rank, on any MPI). */
void dist_sum_doubles(double *x, int n);
double dist_comm_seconds(void);
double dist_wait_seconds(void);
double dist_gather_seconds(void);
double dist_gather_bytes(void);
/* 1 on every rank if flag is non-zero on any rank. */
int dist_any(int flag);
/* x on every rank = x on rank `root`. */
void dist_broadcast(void *x, size_t bytes, int root);
void dist_barrier(void);

/* All ranks hash their copies of bufs[0..nb) (n[i] floats each) and compare:
 * 0 if all agree, else -1 + errorf naming the ranks that differ from rank 0
 * (on every rank). `step` is for the message. */
int dist_check_replicas(float *const *bufs, const size_t *n, int nb, long step);

#endif
