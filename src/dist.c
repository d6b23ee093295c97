/* dist.c — MPI collectives for data-parallel training (see dist.h). */
#include "dist.h"
#include "parallel.h"
#include "util.h"

#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int g_rank = 0, g_size = 1;
static double g_comm_seconds, g_wait_seconds, g_gather_seconds;
static double g_gather_bytes;   /* sent by this rank's all-gathers */

int dist_rank(void) { return g_rank; }
int dist_size(void) { return g_size; }
double dist_comm_seconds(void) { return g_comm_seconds; }
double dist_wait_seconds(void) { return g_wait_seconds; }
double dist_gather_seconds(void) { return g_gather_seconds; }
double dist_gather_bytes(void) { return g_gather_bytes; }

/* B = ceil(n / DIST_ALIGN) blocks of DIST_ALIGN floats, rank r from block
 * floor(B r / N): the block counts differ by at most one. */
size_t dist_slice_lo(size_t n, int rank) {
    size_t blocks = (n + DIST_ALIGN - 1) / DIST_ALIGN, lo = blocks * (size_t)rank / (size_t)g_size * DIST_ALIGN;
    return lo < n ? lo : n;
}

/* 64-bit hash of n floats, 8 bytes at a time, in fixed 1M-float blocks
 * hashed in parallel and combined in block order (the same value for any
 * thread count). */
static uint64_t hash_floats(const float *x, size_t n, uint64_t h) {
    enum { BLOCK = 1 << 20 };
    size_t nblocks = (n + BLOCK - 1) / BLOCK;
    uint64_t *bh = xmalloc((nblocks ? nblocks : 1) * sizeof *bh);
    #pragma omp parallel for schedule(static)
    for (size_t b = 0; b < nblocks; b++) {
        size_t lo = b * BLOCK, hi = lo + BLOCK < n ? lo + BLOCK : n;
        uint64_t v = 0x9E3779B97F4A7C15ULL ^ b;
        size_t i = lo;
        for (; i + 2 <= hi; i += 2) {
            uint64_t w;
            memcpy(&w, x + i, 8);
            v = (v ^ w) * 0x100000001B3ULL;
            v ^= v >> 29;
        }
        if (i < hi) { uint32_t w; memcpy(&w, x + i, 4); v = (v ^ w) * 0x100000001B3ULL; }
        bh[b] = v;
    }
    for (size_t b = 0; b < nblocks; b++) h = (h ^ bh[b]) * 0x100000001B3ULL ^ (h >> 31);
    free(bh);
    return h ^ n;
}

#ifdef TFM_MPI
#include <mpi.h>

/* Started by a launcher (mpirun, srun, hydra)? Then MPI_Init joins its job;
 * otherwise we stay a lone process (an MPI singleton would cost ~0.5 s and a
 * forked orted for nothing). */
static int launched(void) {
    return getenv("OMPI_COMM_WORLD_SIZE") || getenv("PMIX_RANK") || getenv("PMI_RANK");
}

static int g_mpi;   /* MPI_Init was called */
/* dist_reduce_scatter's receive buffer, kept from one update to the next
 * (allocating and touching 16 MB per update cost ~10 ms here) */
static float *g_in;
static size_t g_in_cap;

int dist_init(void) {
    if (g_mpi || !launched()) return 0;
    if (MPI_Init(NULL, NULL) != MPI_SUCCESS) return errorf("MPI_Init failed (started by mpirun?)");
    g_mpi = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &g_size);
    return 0;
}

void dist_finalize(void) {
    if (g_mpi) MPI_Finalize();
    g_mpi = 0;
    free(g_in);
    g_in = NULL;
    g_in_cap = 0;
}

const char *dist_library(void) {
    static char buf[64];
    if (!buf[0]) {
        snprintf(buf, sizeof buf, "Open MPI %d.%d.%d", OMPI_MAJOR_VERSION, OMPI_MINOR_VERSION, OMPI_RELEASE_VERSION);
    }
    return buf;
}

void dist_abort(int code) {
    if (g_mpi && g_size > 1) MPI_Abort(MPI_COMM_WORLD, code);
    exit(code);
}

/* The ring collectives move their slices in messages of at most CHUNK
 * bytes (MPI counts are int); the reduce-scatter receives into a buffer of
 * RS_CHUNK floats (16 MB), the most it sends at once. Fewer, larger
 * messages are faster where the ranks share cores (each message waits for
 * both ranks to run): with 1M-float messages (and that buffer allocated per
 * call) a 2-rank reduce-scatter + all-gather of 7.6M floats took 2.2x the
 * time of one MPI_Allreduce here, with these sizes 0.78x (dev/bench_dist.c). */
enum { CHUNK = 1 << 30, RS_CHUNK = 1 << 22, TAG_REDUCE_SCATTER = 25, TAG_ALL_GATHER, TAG_GATHER };

/* Slice r of x: [lo(r), lo(r + 1)); its floats from `off`, at most `chunk`. */
static int piece(size_t n, int r, size_t off, size_t chunk) {
    size_t len = dist_slice_lo(n, r + 1) - dist_slice_lo(n, r);
    return off >= len ? 0 : (int)(len - off < chunk ? len - off : chunk);
}

/* Ring reduce-scatter, N - 1 steps; at step k rank r sends slice r-1-k
 * (its own, at k = 0; else the partial sum it received and added to at
 * step k-1) to rank r+1, and receives slice r-2-k from rank r-1, which it
 * adds to its own values of that slice (indices mod N). At the last step,
 * k = N-2, the slice received is r itself, now summed over every rank:
 * slice b's sum starts at rank b+1 and goes round the ring to rank b,
 *   ((x_b+1 + x_b+2) + x_b+3) + ... + x_b      (float additions),
 * an order that depends on N alone. Each message is one RS_CHUNK of a
 * slice (the slices are cut into RS_CHUNK pieces, the whole ring run per
 * piece). */
void dist_reduce_scatter(float *x, size_t n) {
    if (g_size == 1) return;
    /* the barrier separates waiting for the slowest rank from the transfer */
    double t0 = now_seconds();
    MPI_Barrier(MPI_COMM_WORLD);
    double t1 = now_seconds();
    g_wait_seconds += t1 - t0;
    int N = g_size, next = (g_rank + 1) % N, prev = (g_rank + N - 1) % N;
    size_t longest = 0;
    for (int r = 0; r < N; r++) {
        size_t len = dist_slice_lo(n, r + 1) - dist_slice_lo(n, r);
        if (len > longest) longest = len;
    }
    size_t need = longest < RS_CHUNK ? longest : RS_CHUNK;
    if (need > g_in_cap) { free(g_in); g_in = xaligned(need * sizeof(float)); g_in_cap = need; }
    float *in = g_in;
    for (size_t off = 0; off < longest; off += RS_CHUNK)
        for (int k = 0; k < N - 1; k++) {
            int s = ((g_rank - 1 - k) % N + N) % N, b = ((g_rank - 2 - k) % N + N) % N;
            int ns = piece(n, s, off, RS_CHUNK), nb = piece(n, b, off, RS_CHUNK);
            MPI_Sendrecv(x + dist_slice_lo(n, s) + off, ns, MPI_FLOAT, next, TAG_REDUCE_SCATTER,
                         in, nb, MPI_FLOAT, prev, TAG_REDUCE_SCATTER, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            float *y = x + dist_slice_lo(n, b) + off;
            #pragma omp parallel for simd schedule(static) if ((size_t)nb >= PAR_MIN)
            for (int i = 0; i < nb; i++) y[i] += in[i];
        }
    g_comm_seconds += now_seconds() - t1;
}

/* The bytes [s, e) of a stream: blocks first, first - 1, ..., first -
 * count + 1 (mod N) of buf laid end to end; the pieces of buf that hold
 * them go to ptr[], n[] (at most 2 when every block is at least e - s
 * long). Returns how many. */
static int stream_pieces(char *buf, const size_t *off, const size_t *len, int first, int count, size_t s, size_t e,
                         char **ptr, int *n) {
    int k = 0, N = g_size;
    size_t at = 0;   /* stream position of the block's first byte */
    for (int j = 0; j < count && at < e; j++) {
        int b = ((first - j) % N + N) % N;
        size_t lo = s > at ? s : at, hi = e < at + len[b] ? e : at + len[b];
        if (lo < hi) { ptr[k] = buf + off[b] + (lo - at); n[k] = (int)(hi - lo); k++; }
        at += len[b];
    }
    return k;
}

/* Ring all-gather as a stream: rank r sends rank r+1 its own block, then
 * every block it receives from rank r-1 but r+1's own, the blocks end to
 * end, in steps of c bytes (the shortest block, at most CHUNK): at step k
 * it sends bytes [kc, (k+1)c) of that stream and receives the same of its
 * incoming one. Forwarded byte p was incoming byte p - len[r], received by
 * step k-1 since c <= len[r]. Every link carries its stream at once, so an
 * all-gather takes the time of the longest stream, about the sum of the
 * blocks, where sending whole blocks step by step takes N - 1 times the
 * longest: blocks of unequal length (model_wire_pack's slices, the fp32
 * embedding in some and bf16 matrices in others) gain the bytes they save. */
void dist_all_gather_blocks(void *buf, const size_t *off, const size_t *len) {
    if (g_size == 1) return;
    double t0 = now_seconds();
    int N = g_size, next = (g_rank + 1) % N, prev = (g_rank + N - 1) % N;
    size_t c = CHUNK, total = 0, longest = 0;
    for (int r = 0; r < N; r++) { total += len[r]; if (len[r] < c) c = len[r]; }
    if (c == 0) {   /* an empty block (fewer DIST_ALIGN blocks than ranks: a toy size): MPI's own */
        if (total > INT_MAX) die("dist_all_gather_blocks: %zu bytes with an empty block, MPI counts in int", total);
        int *cnt = xmalloc(2 * (size_t)N * sizeof *cnt), *dsp = cnt + N;
        for (int r = 0; r < N; r++) { cnt[r] = (int)len[r]; dsp[r] = (int)off[r]; }
        MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_BYTE, buf, cnt, dsp, MPI_BYTE, MPI_COMM_WORLD);
        free(cnt);
        g_gather_bytes += (double)len[g_rank];
        g_gather_seconds += now_seconds() - t0;
        return;
    }
    for (int r = 0; r < N; r++)
        if (total - len[r] > longest) longest = total - len[r];   /* the stream into rank r */
    size_t out_len = total - len[next], in_len = total - len[g_rank];
    for (size_t at = 0; at < longest; at += c) {
        char *sp[2], *rp[2];
        int sn[2], rn[2];
        int ns = at < out_len ? stream_pieces(buf, off, len, g_rank, N - 1, at, at + c < out_len ? at + c : out_len, sp, sn) : 0;
        int nr = at < in_len ? stream_pieces(buf, off, len, prev, N - 1, at, at + c < in_len ? at + c : in_len, rp, rn) : 0;
        MPI_Request req[4];
        int q = 0;
        for (int i = 0; i < nr; i++) MPI_Irecv(rp[i], rn[i], MPI_BYTE, prev, TAG_ALL_GATHER, MPI_COMM_WORLD, &req[q++]);
        for (int i = 0; i < ns; i++) {
            MPI_Isend(sp[i], sn[i], MPI_BYTE, next, TAG_ALL_GATHER, MPI_COMM_WORLD, &req[q++]);
            g_gather_bytes += sn[i];
        }
        MPI_Waitall(q, req, MPI_STATUSES_IGNORE);
    }
    g_gather_seconds += now_seconds() - t0;
}

/* The blocks are the slices of x, in bytes. */
void dist_all_gather(float *x, size_t n) {
    if (g_size == 1) return;
    size_t *off = xmalloc(2 * (size_t)g_size * sizeof *off), *len = off + g_size;
    for (int r = 0; r < g_size; r++) {
        off[r] = dist_slice_lo(n, r) * sizeof(float);
        len[r] = dist_slice_lo(n, r + 1) * sizeof(float) - off[r];
    }
    dist_all_gather_blocks(x, off, len);
    free(off);
}

void dist_gather_range(const float *mine, size_t n, size_t lo, size_t len, float *out) {
    for (int r = 0; r < g_size; r++) {   /* slice r meets [lo, lo + len) in [a, b) */
        size_t rlo = dist_slice_lo(n, r), rhi = dist_slice_lo(n, r + 1);
        size_t a = rlo > lo ? rlo : lo, b = rhi < lo + len ? rhi : lo + len;
        if (a >= b || (g_rank != 0 && g_rank != r)) continue;
        if (r == 0 && g_rank == 0) { memcpy(out + (a - lo), mine + (a - rlo), (b - a) * sizeof(float)); continue; }
        for (size_t off = a; off < b; off += CHUNK / sizeof(float)) {
            int k = (int)(b - off < CHUNK / sizeof(float) ? b - off : CHUNK / sizeof(float));
            if (g_rank == 0) MPI_Recv(out + (off - lo), k, MPI_FLOAT, r, TAG_GATHER, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            else MPI_Send(mine + (off - rlo), k, MPI_FLOAT, 0, TAG_GATHER, MPI_COMM_WORLD);
        }
    }
}

/* Every rank's n values to every rank, then added up in rank order: the
 * same bits everywhere (an MPI_Allreduce may add in another order on each). */
void dist_sum_doubles(double *x, int n) {
    if (g_size == 1) return;
    double *all = xmalloc((size_t)g_size * (size_t)n * sizeof *all);
    MPI_Allgather(x, n, MPI_DOUBLE, all, n, MPI_DOUBLE, MPI_COMM_WORLD);
    for (int i = 0; i < n; i++) {
        double s = all[i];
        for (int r = 1; r < g_size; r++) s += all[(size_t)r * (size_t)n + (size_t)i];
        x[i] = s;
    }
    free(all);
}

void dist_all_gather_bytes(const void *mine, size_t bytes, void *all) {
    if (g_size == 1) { memcpy(all, mine, bytes); return; }
    if (bytes > INT_MAX) die("dist_all_gather_bytes: %zu bytes per rank, MPI_Allgather counts in int", bytes);
    MPI_Allgather(mine, (int)bytes, MPI_BYTE, all, (int)bytes, MPI_BYTE, MPI_COMM_WORLD);
}

int dist_any(int flag) {
    int any = flag != 0;
    if (g_size > 1) MPI_Allreduce(MPI_IN_PLACE, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    return any;
}

void dist_broadcast(void *x, size_t bytes, int root) {
    if (g_size == 1) return;
    for (size_t off = 0; off < bytes; off += (size_t)1 << 30) {
        size_t k = bytes - off < ((size_t)1 << 30) ? bytes - off : (size_t)1 << 30;
        MPI_Bcast((char *)x + off, (int)k, MPI_BYTE, root, MPI_COMM_WORLD);
    }
}

void dist_barrier(void) {
    if (g_size > 1) MPI_Barrier(MPI_COMM_WORLD);
}

int dist_check_replicas(float *const *bufs, const size_t *n, int nb, long step) {
    if (g_size == 1) return 0;
    /* Test hook: TFM_TEST_DRIFT=R nudges one weight on rank R after the
     * first update, the way a silent hardware fault would. */
    const char *drift = getenv("TFM_TEST_DRIFT");
    if (drift && atoi(drift) == g_rank && step > 0 && nb > 0 && n[0] > 0) bufs[0][0] += 1e-3f;
    uint64_t h = 0xCBF29CE484222325ULL;
    for (int i = 0; i < nb; i++) h = hash_floats(bufs[i], n[i], h);
    unsigned long long mine = h, *all = xmalloc((size_t)g_size * sizeof *all);
    MPI_Allgather(&mine, 1, MPI_UNSIGNED_LONG_LONG, all, 1, MPI_UNSIGNED_LONG_LONG, MPI_COMM_WORLD);
    char ranks[256] = "";
    int bad = 0;
    for (int r = 1; r < g_size; r++) {
        if (all[r] == all[0]) continue;
        size_t len = strlen(ranks);
        if (len < sizeof ranks - 16) snprintf(ranks + len, sizeof ranks - len, "%s%d", bad ? ", " : "", r);
        bad++;
    }
    free(all);
    if (bad)
        return errorf("replica drift at step %ld: the weights/Adam moments of rank%s %s differ from rank 0's "
                      "(they must be bit-identical; a hardware fault or a non-deterministic reduction)",
                      step, bad > 1 ? "s" : "", ranks);
    return 0;
}

#else   /* MPI=0: one process */

int dist_init(void) { return 0; }
void dist_finalize(void) {}
const char *dist_library(void) { return "no MPI (built with MPI=0)"; }
void dist_abort(int code) { exit(code); }
void dist_reduce_scatter(float *x, size_t n) { (void)x; (void)n; }
void dist_all_gather(float *x, size_t n) { (void)x; (void)n; }
void dist_all_gather_blocks(void *buf, const size_t *off, const size_t *len) { (void)buf; (void)off; (void)len; }
void dist_gather_range(const float *mine, size_t n, size_t lo, size_t len, float *out) {
    (void)n;
    memcpy(out, mine + lo, len * sizeof(float));
}
void dist_sum_doubles(double *x, int n) { (void)x; (void)n; }
void dist_all_gather_bytes(const void *mine, size_t bytes, void *all) { memcpy(all, mine, bytes); }
int dist_any(int flag) { return flag != 0; }
void dist_broadcast(void *x, size_t bytes, int root) { (void)x; (void)bytes; (void)root; }
void dist_barrier(void) {}
int dist_check_replicas(float *const *bufs, const size_t *n, int nb, long step) {
    (void)bufs; (void)n; (void)nb; (void)step; (void)hash_floats;
    return 0;
}

#endif
