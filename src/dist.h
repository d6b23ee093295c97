/* dist.h — data-parallel training over MPI ranks (OpenMPI): the few
 * collectives `tfm train` needs, and single-process stand-ins.
 *
 * `mpirun -np N tfm train CONFIG.ini` starts N copies; each holds the whole
 * model. Per update, rank r runs forward/backward on batches r, r+N, ... of
 * the shared epoch plan, the N gradient buffers (one flat array each) are
 * summed in one all-reduce, and every rank applies the same Adam step, so
 * the replicas stay identical (checked: dist_check_replicas).
 *
 * MPI is initialised only by `tfm train`, and only when a launcher started
 * the process (mpirun/srun set OMPI_COMM_WORLD_SIZE, PMIX_RANK or PMI_RANK);
 * a plain `tfm train` is one process and never touches MPI. Built with
 * `make MPI=0` every function is the single-process version.
 *
 * Determinism: the all-reduce is pinned to OpenMPI's ring algorithm (set
 * before MPI_Init unless the user set coll_tuned_* already), so for a fixed
 * rank count the summed bits are the same on every rank and every run, over
 * shared memory or TCP alike.
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

/* In place: x = the sum of x over the ranks (the same bits on every rank).
 * dist_sum_floats first waits for every rank (a barrier), then sums: the
 * seconds of each are added up in dist_wait_seconds / dist_comm_seconds. */
void dist_sum_floats(float *x, size_t n);
void dist_sum_doubles(double *x, int n);
double dist_comm_seconds(void);
double dist_wait_seconds(void);
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
