/* ops.c — the kernels of the Transformer, forward and backward (see ops.h),
 * and with ops_infer.c the only file that calls BLIS's products (dispatch.c
 * sets BLIS up).
 *
 * The matrix products go to BLIS (bli_sgemm with strides: a transpose is a
 * swap of strides, never a copy). Everything else is a loop over rows (or
 * (sentence, head) pairs) under `#pragma omp parallel for`, written so that
 * gcc vectorises the inner loop over the feature dimension.
 *
 * The inference variants of these kernels (decoding) are in ops_infer.c.
 *
 * The attention core's six products run as batched oneDNN matmuls over
 * groups of sentences where tfm is built with oneDNN (attention_forward_dnnl:
 * fp32, or bf16 operands with precision = bf16, AttnShape.bf16), else per
 * head in the loops below (head_product, on rounded copies for bf16).
 *
 * Over 700 lines: every kernel of the paper's layers with its backward right
 * below it (products, linear, LayerNorm, softmax, dropout, embeddings,
 * attention in fp32 and bf16, the output layer and its loss); split further,
 * a layer's forward and backward would land in different files, and the
 * bf16 attention away from the softmax, mask and dropout it shares. */
#include "ops.h"

#include <blis.h>
#include <math.h>
#include <omp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dispatch.h"
#include "gemm_amx.h"
#include "gemm_bf16.h"
#include "gemm_dnnl.h"
#include "kernel.h"
#include "parallel.h"
#include "prof.h"
#include "util.h"
#include "vec16.h"

/* Below PAR_MIN a loop runs on one thread, below GEMM_PAR_MIN (m * n * k)
 * a product, below ROWS_GEMM_PAR_MIN an inference product (parallel.h). */

/* ---- matrix products ------------------------------------------------- */
static void gemm_ex(int ta, int tb, int m, int n, int k, float alpha,
                    const float *a, int lda, const float *b, int ldb,
                    float beta, float *c, int ldc, rntm_t *rntm) {
    if (gemm_trivial(ta, tb, m, n, k, lda, ldb, beta, c, ldc)) return;
    bli_sgemm_ex(ta ? BLIS_TRANSPOSE : BLIS_NO_TRANSPOSE, tb ? BLIS_TRANSPOSE : BLIS_NO_TRANSPOSE,
                 m, n, k, &alpha, (float *)a, lda, 1, (float *)b, ldb, 1, &beta, c, ldc, 1, NULL, rntm);
}

/* A product big enough for several threads is cut into independent pieces,
 * each a single-threaded BLIS call, along its largest dimension:
 *   m (rows of C) or n (columns of C): pieces taken dynamically by the
 *     threads, each C entry computed by one call, in the same order whatever
 *     the schedule (bit-identical results);
 *   k (the sum, when it is longer than both m and n): one slice per thread
 *     into its own buffer, then C += the buffers in a fixed order.
 * Two independent products (a linear layer's dW = dY^T X and dX = dY W,
 * equal work) go side by side through gemm_many instead: on two threads,
 * one each, uncut, so no slice of k and no re-packing.
 * Why not BLIS's own threads: its barriers spin without yielding, so on a
 * machine where another process holds a core every barrier can cost a time
 * slice; measured on the shared 2-core dev machine under load (fc1 forward,
 * [4096 x 512] x [512 x 2048]): 16 GFLOP/s with BLIS threads against 30
 * with dynamic pieces. A piece re-packs the operand it shares with the
 * other pieces (e.g. W for a row piece), ~1-3% extra at these sizes.
 * oneDNN's routes (fp32 where dispatch.h's fp32_route, bf16 where its
 * bf16_route says) run in gemm_dnnl.c, cut the same way, one oneDNN call a
 * piece; what they decline comes back here. */
static float *g_kbuf;
static size_t g_kbuf_size;

/* A piece of g on one thread: its m x n block at c (row stride ldc), from
 * a and b, summing k values. BLIS, or the bf16 kernel for a bf16 product
 * (emulated bf16 products reach here as fp32 ones, see gemm_many). */
static void piece1(const Gemm *g, int m, int n, int k, const float *a, const float *b, float beta, float *c, int ldc) {
    if (g->bf16) bf16_gemm(BF16_NATIVE, g->ta, g->tb, m, n, k, g->alpha, a, g->lda, b, g->ldb, beta, c, ldc);
    else gemm1(g->ta, g->tb, m, n, k, g->alpha, a, g->lda, b, g->ldb, beta, c, ldc);
}

/* C = beta C + alpha op(A) op(B) by slices of k, one per thread (k longer than m and n). */
static void gemm_ksplit(const Gemm *g, int nt) {
    int m = g->m, n = g->n, k = g->k;
    size_t mn = (size_t)m * n;
    if ((size_t)(nt - 1) * mn > g_kbuf_size) {
        free(g_kbuf);
        g_kbuf_size = (size_t)(nt - 1) * mn;
        g_kbuf = xaligned(g_kbuf_size * sizeof(float));
    }
    #pragma omp parallel for schedule(static) num_threads(nt)
    for (int t = 0; t < nt; t++) {   /* A is [m, k] (ta 0) or [k, m]; B is [k, n] (tb 0) or [n, k] */
        int p0 = (int)((long)k * t / nt), p1 = (int)((long)k * (t + 1) / nt);
        const float *at = g->ta ? g->a + (size_t)p0 * g->lda : g->a + p0;
        const float *bt = g->tb ? g->b + p0 : g->b + (size_t)p0 * g->ldb;
        double t0 = prof_on ? prof_clock() : 0.0;
        if (t == 0) piece1(g, m, n, p1 - p0, at, bt, g->beta, g->c, g->ldc);
        else piece1(g, m, n, p1 - p0, at, bt, 0.0f, g_kbuf + (t - 1) * mn, n);
        if (prof_on) prof_busy(prof_clock() - t0);
    }
    double t1 = prof_on ? prof_clock() : 0.0;
    #pragma omp parallel for schedule(static) num_threads(nt)
    for (int i = 0; i < m; i++)
        for (int t = 1; t < nt; t++) {
            const float *r = g_kbuf + (t - 1) * mn + (size_t)i * n;
            float *ci = g->c + (size_t)i * g->ldc;
            #pragma omp simd
            for (int j = 0; j < n; j++) ci[j] += r[j];
        }
    if (prof_on) prof_busy(nt * (prof_clock() - t1));   /* the sum of the slices: all threads */
}

void gemm(int ta, int tb, int m, int n, int k, float alpha, const float *a, int lda,
          const float *b, int ldb, float beta, float *c, int ldc) {
    Gemm g = {ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, 0, NULL, 0};
    gemm_many(&g, 1);
}

/* Rows i0..i0+cnt of C (by_rows) or its columns i0.., on one thread. */
static void gemm_piece(const Gemm *g, int by_rows, int i0, int cnt) {
    float beta = g->bias ? 1.0f : g->beta;
    if (by_rows) {   /* rows of C and of op(A) */
        if (g->bias) gemm_fill_bias(g->c + (size_t)i0 * g->ldc, g->ldc, g->bias, cnt, g->n);
        piece1(g, cnt, g->n, g->k, g->ta ? g->a + i0 : g->a + (size_t)i0 * g->lda, g->b, beta,
               g->c + (size_t)i0 * g->ldc, g->ldc);
        if (g->round_c) bf16_round_matrix(g->c + (size_t)i0 * g->ldc, g->ldc, g->c + (size_t)i0 * g->ldc, g->ldc, cnt, g->n);
    } else {         /* columns of C and of op(B) */
        if (g->bias) gemm_fill_bias(g->c + i0, g->ldc, g->bias + i0, g->m, cnt);
        piece1(g, g->m, cnt, g->k, g->a, g->tb ? g->b + (size_t)i0 * g->ldb : g->b + i0, beta, g->c + i0, g->ldc);
        if (g->round_c) bf16_round_matrix(g->c + i0, g->ldc, g->c + i0, g->ldc, g->m, cnt);   /* Gemm.round_c */
    }
}

/* Independent products (no C overlaps another's A, B or C), run as one
 * dynamic schedule of pieces: each product is cut along the longer of m
 * and n into pieces in proportion to its share of the work, three pieces
 * per thread in all for one product (so that a slow piece can be made up
 * by the others), one per thread when there are as many products as
 * threads (two side by side on two threads: nothing re-packed, nothing
 * waited for but the slower of the two). */
/* The bytes a row-major [rows, cols] operand with row stride ld spans. */
typedef struct { uintptr_t lo, hi; } Span;
static Span span(const float *p, int rows, int cols, int ld) {
    const float *end = rows > 0 && cols > 0 ? p + (size_t)(rows - 1) * ld + cols : p;
    Span s = {(uintptr_t)p, (uintptr_t)end};
    return s;
}
static int overlap(Span a, Span b) { return a.lo < b.hi && b.lo < a.hi; }

static int one_writes_what_another_uses(const Gemm *g, int count) {
    for (int i = 0; i < count; i++)
        for (int j = 0; j < count; j++) {
            if (i == j) continue;
            const Gemm *x = &g[i], *y = &g[j];
            Span c = span(x->c, x->m, x->n, x->ldc);
            if (overlap(c, span(y->c, y->m, y->n, y->ldc)) ||
                overlap(c, y->ta ? span(y->a, y->k, y->m, y->lda) : span(y->a, y->m, y->k, y->lda)) ||
                overlap(c, y->tb ? span(y->b, y->n, y->k, y->ldb) : span(y->b, y->k, y->n, y->ldb)))
                return 1;
        }
    return 0;
}

/* bf16 products without AVX512_BF16: the operands flagged for rounding
 * are rounded into copies (an operand two products share is rounded once),
 * and the products run in fp32 on the copies. A product of two bf16 values
 * is exact in fp32, so this gives the kernel's numbers up to the order of
 * the sums. The copies are grow-only buffers (from serial code; inside a
 * parallel region, allocated for the call). */
enum { MAXG = 4 };
static float *g_round[2 * MAXG];
static size_t g_round_size[2 * MAXG];

static void gemm_many_run(const Gemm *g, int count);

static KernelRange g_masters[KERNEL_RANGES];   /* gemm_bf16_masters */
void gemm_bf16_masters(const float *p, size_t n) { kernel_range_set(g_masters, p, n, NULL); }

static void gemm_many_emulated(const Gemm *g, int count) {
    Gemm e[MAXG];
    int local = omp_in_parallel(), used = 0;
    float *buf[2 * MAXG];
    struct { const float *src; int rows, cols, ld; float *dst; } done[2 * MAXG];
    for (int j = 0; j < count; j++) {
        e[j] = g[j];
        e[j].bf16 = 0;
        if (!g[j].bf16) continue;
        for (int op = 0; op < 2; op++) {
            int t = op ? g[j].tb : g[j].ta, ld = op ? g[j].ldb : g[j].lda;
            int rows = op ? (t ? g[j].n : g[j].k) : (t ? g[j].k : g[j].m);   /* as stored */
            int cols = op ? (t ? g[j].k : g[j].n) : (t ? g[j].m : g[j].k);
            const float *src = op ? g[j].b : g[j].a;
            size_t off;
            if (!(g[j].bf16 & (op ? GEMM_BF16_B : GEMM_BF16_A)) && !kernel_range_of(g_masters, src, rows, cols, ld, &off))
                continue;
            float *dst = NULL;
            for (int u = 0; u < used; u++)
                if (done[u].src == src && done[u].rows == rows && done[u].cols == cols && done[u].ld == ld) dst = done[u].dst;
            if (!dst) {
                size_t need = (size_t)rows * cols;
                if (local) {
                    dst = buf[used] = xmalloc((need ? need : 1) * sizeof(float));
                } else {
                    if (need > g_round_size[used]) {
                        free(g_round[used]);
                        g_round[used] = xaligned(need * sizeof(float));
                        g_round_size[used] = need;
                    }
                    dst = buf[used] = g_round[used];
                }
                double t0 = prof_on && !local ? prof_clock() : 0.0;
                bf16_round_matrix(dst, cols, src, ld, rows, cols);
                if (prof_on && !local) {   /* busy converting, on the threads bf16_round_matrix took */
                    double dt = (prof_clock() - t0) * (par_go(need, STREAM_PAR_MIN) ? threads_count() : 1);
                    prof_busy(dt);
                    prof_convert(dt);
                }
                done[used].src = src; done[used].rows = rows; done[used].cols = cols; done[used].ld = ld;
                done[used++].dst = dst;
            }
            if (op) { e[j].b = dst; e[j].ldb = cols; }
            else { e[j].a = dst; e[j].lda = cols; }
        }
    }
    gemm_many_run(e, count);
    if (local)
        for (int u = 0; u < used; u++) free(buf[u]);
}

/* With prof_on, the products' wall time and the threads' busy time (prof.h:
 * threads waiting = threads x wall - busy). */
void gemm_many(const Gemm *g, int count) {
    if (!prof_on || omp_in_parallel()) {
        gemm_many_run(g, count);
        return;
    }
    double t0 = prof_clock();
    gemm_many_run(g, count);
    prof.prod_wall += prof_clock() - t0;
    prof.prod_threads = threads_count();
}

/* Gemm.round_c where the products did not run in gemm_piece (slices of
 * k): a pass over C. */
static void round_after(const Gemm *g, int count) {
    for (int j = 0; j < count; j++)
        if (g[j].round_c) bf16_round_matrix(g[j].c, g[j].ldc, g[j].c, g[j].ldc, g[j].m, g[j].n);
}

/* The kernel of the BF16_AMX route: the tiles, or their model (tests). */
static AmxKernel g_amx_kernel = AMX_TILES;
void gemm_amx_kernel(AmxKernel k) { g_amx_kernel = k; }

/* On the BF16_AMX route: each bf16 product on tfm's tile kernel (threaded
 * inside it, one after the other; its tiles start from the bias), C
 * rounded after where asked; the fp32 ones of the call as gemm_many runs
 * them. */
static void gemm_many_amx(const Gemm *g, int count) {
    for (int j = 0; j < count; j++) {
        const Gemm *x = &g[j];
        if (!x->bf16) {
            gemm_many_run(x, 1);
            continue;
        }
        int timed = prof_on && !omp_in_parallel();
        double t0 = timed ? prof_clock() : 0.0;
        amx_bf16_gemm_bias(g_amx_kernel, x->ta, x->tb, x->m, x->n, x->k, x->alpha, x->a, x->lda, x->b, x->ldb, x->bias,
                           x->beta, x->c, x->ldc);
        if (x->round_c) bf16_round_matrix(x->c, x->ldc, x->c, x->ldc, x->m, x->n);
        if (timed) prof_busy(threads_count() * (prof_clock() - t0));   /* all threads, inside the kernel */
    }
}

static void gemm_many_run(const Gemm *g, int count) {
    enum { MAXP = 512 };
    int nt = threads_count();
    ASSERT(count <= MAXG);
    ASSERT(!one_writes_what_another_uses(g, count));   /* they run side by side */
    for (int j = 0; j < count; j++) ASSERT(!g[j].bias || g[j].beta == 0.0f);
    int any16 = 0, all16 = 1;
    for (int j = 0; j < count; j++) { any16 |= g[j].bf16 != 0; all16 &= g[j].bf16 != 0; }
    Bf16Route route = any16 ? bf16_route() : BF16_KERNEL;
    if (any16 && route == BF16_AMX) {
        gemm_many_amx(g, count);
        return;
    }
    /* oneDNN: bf16 products on its route, fp32 ones on theirs (from serial code only) */
    if (!omp_in_parallel() && (all16 ? route == BF16_ONEDNN : !any16 && fp32_route() == FP32_ONEDNN)) {
        if (!gemm_dnnl_many(g, count)) return;   /* (it counts its threads' busy time: prof.h) */
    }
    if (any16 && (route == BF16_EMULATED || !bf16_native())) {
        if (route == BF16_ONEDNN) {   /* oneDNN refused: a weight operand is then the model's fp32 master (model.c
                                       * keeps only oneDNN's 16-bit twin), so round both operands of each bf16
                                       * product (the twin's values again; AVX512_BF16 packing rounds both too) */
            Gemm e[MAXG];
            for (int j = 0; j < count; j++) { e[j] = g[j]; if (e[j].bf16) e[j].bf16 |= GEMM_BF16_A | GEMM_BF16_B; }
            gemm_many_emulated(e, count);
            return;
        }
        gemm_many_emulated(g, count);
        return;
    }
    double work[MAXG], total = 0;
    for (int j = 0; j < count; j++) total += work[j] = (double)g[j].m * g[j].n * g[j].k;
    if (nt < 2 || total < GEMM_PAR_MIN || omp_in_parallel()) {
        double t0 = prof_on ? prof_clock() : 0.0;
        for (int j = 0; j < count; j++) gemm_piece(&g[j], 1, 0, g[j].m);
        if (prof_on && !omp_in_parallel()) prof_busy(prof_clock() - t0);
        return;
    }
    if (count == 1 && g->k > g->m && g->k > g->n) {
        Gemm h = *g;
        if (h.bias) {   /* the bias first, then the slices add to it */
            gemm_fill_bias(h.c, h.ldc, h.bias, h.m, h.n);
            h.bias = NULL;
            h.beta = 1.0f;
        }
        gemm_ksplit(&h, nt);
        round_after(g, 1);
        return;
    }
    int want = count >= nt ? count : (count == 1 ? 3 * nt : 2 * nt);
    int first[MAXG + 1], piece[MAXG], by_rows[MAXG], len[MAXG];
    first[0] = 0;
    for (int j = 0; j < count; j++) {
        by_rows[j] = g[j].m >= g[j].n;
        len[j] = by_rows[j] ? g[j].m : g[j].n;
        int p = (int)(want * work[j] / total + 0.5);
        if (len[j] / (p > 0 ? p : 1) < 128) p = len[j] / 128;   /* pieces of at least 128 rows ... */
        if (count == 1 && p < nt) p = nt;                         /* ... unless that idles a thread */
        if (p < 1) p = 1;
        if (p > MAXP / MAXG) p = MAXP / MAXG;
        piece[j] = (len[j] + p - 1) / p;
        first[j + 1] = first[j] + (len[j] + piece[j] - 1) / piece[j];
    }
    #pragma omp parallel for schedule(dynamic, 1) num_threads(nt)
    for (int q = 0; q < first[count]; q++) {
        int j = 0;
        while (q >= first[j + 1]) j++;
        int i0 = (q - first[j]) * piece[j], cnt = len[j] - i0 < piece[j] ? len[j] - i0 : piece[j];
        double t0 = prof_on ? prof_clock() : 0.0;
        gemm_piece(&g[j], by_rows[j], i0, cnt);
        if (prof_on) prof_busy(prof_clock() - t0);
    }
}

void gemm1(int ta, int tb, int m, int n, int k, float alpha, const float *a, int lda,
           const float *b, int ldb, float beta, float *c, int ldc) {
    rntm_t r = BLIS_RNTM_INITIALIZER;
    bli_rntm_set_num_threads(1, &r);
    gemm_ex(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, &r);
}

/* ---- linear ------------------------------------------------------------ */
void linear_forward(float *y, const float *x, const float *w, const float *b, int n, int in, int out, int bf16) {
    /* y [n, out] = b + x [n, in] W^T, W stored [out, in]; the bias is written
     * by each piece of the product */
    int mode = bf16 & ~LINEAR_ROUND_OUT;
    Gemm g = {0, 1, n, out, in, 1.0f, x, in, w, in, 0.0f, y, out,
              mode == LINEAR_BF16_X_HELD ? GEMM_BF16_HELD : mode ? GEMM_BF16_A : 0, b, (bf16 & LINEAR_ROUND_OUT) != 0};
    gemm_many(&g, 1);
}

/* Column sums over the rows of a matrix (bias and LayerNorm gradients):
 * each thread of a parallel region takes its own contiguous range of the
 * `cols` columns, in whole blocks of 32 (no races; each column summed in
 * row order, so the same bits on any number of threads), and walks it in
 * spans of COL_SPAN columns row by row: one pass over the rows, each row's
 * span read in one contiguous piece. (Blocks of 32 columns walked down all
 * the rows touched two cache lines per row, a new page per row at 2,048
 * columns: 3-4% of a base step.) */
enum { COL_SPAN = 1024 };   /* a span's sums: 4 KB */
static void thread_columns(int cols, int t, int nt, int *c0, int *c1) {
    int nblk = (cols + 31) / 32;
    *c0 = (int)((long)nblk * t / nt) * 32;
    *c1 = (int)((long)nblk * (t + 1) / nt) * 32;
    if (*c1 > cols) *c1 = cols;
}

/* db [out] += sum over the n rows of dy [n, out]. */
static void column_sums_part(float *db, const float *dy, int n, int out, int t, int nt) {
    int c0, c1;
    thread_columns(out, t, nt, &c0, &c1);
    float acc[COL_SPAN];
    for (int s0 = c0; s0 < c1; s0 += COL_SPAN) {
        int w = c1 - s0 < COL_SPAN ? c1 - s0 : COL_SPAN;
        for (int j = 0; j < w; j++) acc[j] = 0.0f;
        for (int i = 0; i < n; i++) {
            const float *r = dy + (size_t)i * out + s0;
            #pragma omp simd
            for (int j = 0; j < w; j++) acc[j] += r[j];
        }
        for (int j = 0; j < w; j++) db[s0 + j] += acc[j];
    }
}
static void column_sums_add(float *db, const float *dy, int n, int out) {
    PAR_PARTS(par_go((size_t)n * out, PAR_MIN), column_sums_part(db, dy, n, out, par_t, par_nt););
}

void linear_backward(float *dx, float *dw, float *db, const float *dy, const float *x, const float *w,
                     int n, int in, int out, int accumulate_dx, int bf16) {
    /* bf16: dy holds bf16 values, as its producer wrote them: read as it is */
    if (db) column_sums_add(db, dy, n, out);
    /* dW [out, in] += dy^T [out, n] x [n, in] and dx [n, in] (+)= dy [n, out] W [out, in]:
     * the same work, independent, so side by side */
    int mode = bf16 & ~LINEAR_ROUND_OUT, bx = mode == LINEAR_BF16_X_HELD ? GEMM_BF16_HELD : GEMM_BF16_B;   /* x: rounded by its producer, or here */
    Gemm g[2] = {{1, 0, out, in, n, 1.0f, dy, out, x, in, 1.0f, dw, in, mode ? bx : 0, NULL, 0},
                 {0, 0, n, in, out, 1.0f, dy, out, w, in, accumulate_dx ? 1.0f : 0.0f, dx, in, mode ? GEMM_BF16_HELD : 0, NULL,
                  (bf16 & LINEAR_ROUND_OUT) != 0}};
    if (dw || dx) gemm_many(dw ? g : g + 1, (dw != NULL) + (dx != NULL));   /* those that are wanted */
}

/* ---- LayerNorm ----------------------------------------------------------- */
/* y = (x - mu) r gamma + beta over one row: the last step of layernorm_row and
 * all of layernorm_apply, one expression so that the two agree bit for bit;
 * round: y written rounded to bf16 (the bf16 products' input, held as such),
 * and its 16 bits into hi where hi is not NULL. */
static inline void layernorm_scale_row(float *yi, uint16_t *hi, const float *xi, float mu, float r,
                                       const float *gamma, const float *beta, int D, int round) {
    #pragma omp simd
    for (int j = 0; j < D; j++) yi[j] = (xi[j] - mu) * r * gamma[j] + beta[j];
    if (round) bf16_round_run(yi, hi, yi, (size_t)D);   /* the row while it is in L1 */
}

/* LayerNorm of one row (layernorm_forward and the fused residual_dropout_layernorm). */
static inline void layernorm_row(float *yi, uint16_t *hi, float *mean, float *rstd, const float *xi,
                                 const float *gamma, const float *beta, int D, int round) {
    float s = 0.0f;
    #pragma omp simd reduction(+:s)
    for (int j = 0; j < D; j++) s += xi[j];
    float mu = s / D, v = 0.0f;
    #pragma omp simd reduction(+:v)
    for (int j = 0; j < D; j++) { float c = xi[j] - mu; v += c * c; }
    float r = 1.0f / sqrtf(v / D + LAYERNORM_EPS);
    layernorm_scale_row(yi, hi, xi, mu, r, gamma, beta, D, round);
    if (mean) *mean = mu;
    if (rstd) *rstd = r;
}

void layernorm_forward(float *y, float *mean, float *rstd, const float *x,
                       const float *gamma, const float *beta, int n, int D, int round, uint16_t *y16) {
    ASSERT(!y16 || round);
    PAR_FOR(par_go((size_t)n * D, PAR_MIN), (int i = 0; i < n; i++),
            layernorm_row(y + (size_t)i * D, y16 ? y16 + (size_t)i * D : NULL, mean ? mean + i : NULL,
                          rstd ? rstd + i : NULL, x + (size_t)i * D, gamma, beta, D, round););
}

void layernorm_apply(float *y, const float *x, const float *mean, const float *rstd,
                     const float *gamma, const float *beta, int n, int D, int round, uint16_t *y16) {
    ASSERT(!y16 || round);
    PAR_FOR(par_go((size_t)n * D, PAR_MIN), (int i = 0; i < n; i++),
            layernorm_scale_row(y + (size_t)i * D, y16 ? y16 + (size_t)i * D : NULL, x + (size_t)i * D, mean[i], rstd[i],
                                gamma, beta, D, round););
}

/* With xhat = (x - mean) * rstd and g = dy * gamma:
 *   dx = rstd * (g - mean_j(g) - xhat * mean_j(g * xhat))
 *   dgamma += sum_rows dy * xhat,  dbeta += sum_rows dy */
static inline uint32_t drop_hash(uint64_t seed, size_t i);
static inline uint32_t drop_threshold(float p);

/* The fused LayerNorm ops walk their rows in blocks of ~1,024 floats (4 KB
 * an array, so that the block's rows are still in L1 for the next step),
 * with the elementwise part (residual, dropout) over a whole block as one
 * loop: a row's loop alone (D = 128 in the recipe) is too short to vectorise
 * well, and made the fused ops slower than the unfused calls they replace. */
static inline int block_rows(int D) { return D < 1024 ? 1024 / D : 1; }

/* Thread t's share of nt (all of it for 0 of 1): its columns of dgamma
 * and dbeta (thread_columns), then, once all are summed (dx may overwrite
 * dy: a barrier), its rows of dx. */
static void layernorm_backward_part(float *dx, float *dgamma, float *dbeta, const float *dy,
                                    const float *x, const float *mean, const float *rstd,
                                    const float *gamma, int n, int D, int accumulate,
                                    float *dout, float p, uint64_t seed, int round, uint16_t *d16,
                                    const LayerNormRemake *also, int t, int nt) {
    int c0, c1;
    thread_columns(D, t, nt, &c0, &c1);
    float ag[COL_SPAN], ab[COL_SPAN];
    for (int s0 = c0; s0 < c1; s0 += COL_SPAN) {
        int w = c1 - s0 < COL_SPAN ? c1 - s0 : COL_SPAN;
        for (int j = 0; j < w; j++) ag[j] = ab[j] = 0.0f;
        for (int i = 0; i < n; i++) {
            const float *dyi = dy + (size_t)i * D + s0, *xi = x + (size_t)i * D + s0;
            float mu = mean[i], r = rstd[i];
            #pragma omp simd
            for (int j = 0; j < w; j++) {
                ag[j] += dyi[j] * (xi[j] - mu) * r;
                ab[j] += dyi[j];
            }
        }
        for (int j = 0; j < w; j++) { dgamma[s0 + j] += ag[j]; dbeta[s0 + j] += ab[j]; }
    }
    if (nt > 1) {
        #pragma omp barrier
    }
    int rows = block_rows(D), b0, b1;   /* the rows in blocks (block_rows): dropout over a block in one loop */
    par_share((n + rows - 1) / rows, t, nt, &b0, &b1);
    for (int blk = b0; blk < b1; blk++) {
        int i0 = blk * rows, i1 = i0 + rows < n ? i0 + rows : n;
        for (int i = i0; i < i1; i++) {
            const float *dyi = dy + (size_t)i * D, *xi = x + (size_t)i * D;
            float *dxi = dx + (size_t)i * D;
            float mu = mean[i], r = rstd[i], sg = 0.0f, sgx = 0.0f;
            #pragma omp simd reduction(+:sg, sgx)
            for (int j = 0; j < D; j++) {
                float g = dyi[j] * gamma[j];
                sg += g;
                sgx += g * (xi[j] - mu) * r;
            }
            sg /= D;
            sgx /= D;
            if (accumulate) {
                #pragma omp simd
                for (int j = 0; j < D; j++) dxi[j] += r * (dyi[j] * gamma[j] - sg - (xi[j] - mu) * r * sgx);
            } else {
                #pragma omp simd
                for (int j = 0; j < D; j++) dxi[j] = r * (dyi[j] * gamma[j] - sg - (xi[j] - mu) * r * sgx);
            }
        }
        size_t e0 = (size_t)i0 * D, e1 = (size_t)i1 * D;
        if (dout) {   /* as dropout() on the whole matrix (element index i * D + j), with its y16 */
            if (p <= 0.0f) {
                memcpy(dout + e0, dx + e0, (e1 - e0) * sizeof *dout);
            } else {
                uint32_t th = drop_threshold(p);
                float sc = 1.0f / (1.0f - p);
                #pragma omp simd
                for (size_t e = e0; e < e1; e++) dout[e] = drop_hash(seed, e) >= th ? dx[e] * sc : 0.0f;
            }
            if (round || d16) bf16_round_run(dout + e0, d16 ? d16 + e0 : NULL, dout + e0, e1 - e0);
        }
        if (also)
            for (int i = i0; i < i1; i++)
                layernorm_scale_row(also->y + (size_t)i * D, also->y16 ? also->y16 + (size_t)i * D : NULL,
                                    also->x + (size_t)i * D, also->mean[i], also->rstd[i], also->gamma, also->beta, D,
                                    also->round);
    }
}

/* layernorm_backward, and with dout != NULL also dout = dropout(dx, p, seed)
 * row by row as dx is made, and with also->y another LayerNorm's output
 * remade (the fused layernorm_backward_dropout). */
static void layernorm_backward_ex(float *dx, float *dgamma, float *dbeta, const float *dy,
                                  const float *x, const float *mean, const float *rstd,
                                  const float *gamma, int n, int D, int accumulate,
                                  float *dout, float p, uint64_t seed, int round, uint16_t *d16,
                                  const LayerNormRemake *also) {
    if (also && !also->y) also = NULL;
    ASSERT(!d16 || (dout && round));
    ASSERT(!also || !also->y16 || also->round);
    PAR_PARTS(par_go((size_t)n * D, PAR_MIN), layernorm_backward_part(dx, dgamma, dbeta, dy, x, mean, rstd, gamma, n, D,
                                                                      accumulate, dout, p, seed, round, d16, also, par_t,
                                                                      par_nt););
}

void layernorm_backward(float *dx, float *dgamma, float *dbeta, const float *dy,
                        const float *x, const float *mean, const float *rstd,
                        const float *gamma, int n, int D, int accumulate) {
    layernorm_backward_ex(dx, dgamma, dbeta, dy, x, mean, rstd, gamma, n, D, accumulate, NULL, 0.0f, 0, 0, NULL, NULL);
}

void layernorm_backward_dropout(float *dx, float *dgamma, float *dbeta, const float *dy,
                                const float *x, const float *mean, const float *rstd,
                                const float *gamma, int n, int D, float *dout, float p, uint64_t seed,
                                int round_bf16, uint16_t *dout16, const LayerNormRemake *also) {
    layernorm_backward_ex(dx, dgamma, dbeta, dy, x, mean, rstd, gamma, n, D, 0, dout, p, seed, round_bf16, dout16, also);
}

/* ---- softmax ------------------------------------------------------------ */
/* The softmax of x [len] in place. */
static inline void softmax_whole(float *x, int len) {
    float mx = -INFINITY, s = 0.0f;
    #pragma omp simd reduction(max:mx)
    for (int j = 0; j < len; j++) mx = x[j] > mx ? x[j] : mx;
    #pragma omp simd reduction(+:s)
    for (int j = 0; j < len; j++) { x[j] = fast_expf(x[j] - mx); s += x[j]; }
    float inv = 1.0f / s;
    #pragma omp simd
    for (int j = 0; j < len; j++) x[j] *= inv;
}

/* The softmax of a row's first n entries, in place, and 0 in the rest of its
 * len (the keys a query may not see). */
static inline void softmax_row(float *x, int n, int len) {
    if (n > 0) softmax_whole(x, n);
    memset(x + n, 0, (size_t)(len - n) * sizeof *x);
}

void softmax_forward(float *x, int n, int len) {
    PAR_FOR(par_go((size_t)n * len, PAR_MIN), (int i = 0; i < n; i++), softmax_row(x + (size_t)i * len, len, len););
}

void log_softmax(float *x, int n, int len) {
    #pragma omp parallel for schedule(static) if ((size_t)n * len >= PAR_MIN)
    for (int i = 0; i < n; i++) {
        float *xi = x + (size_t)i * len, mx = -INFINITY, s = 0.0f;
        #pragma omp simd reduction(max:mx)
        for (int j = 0; j < len; j++) mx = xi[j] > mx ? xi[j] : mx;
        #pragma omp simd reduction(+:s)
        for (int j = 0; j < len; j++) s += fast_expf(xi[j] - mx);
        float lse = mx + logf(s);
        #pragma omp simd
        for (int j = 0; j < len; j++) xi[j] -= lse;
    }
}

void softmax_backward(float *dx, const float *dy, const float *y, int n, int len) {
    #pragma omp parallel for schedule(static) if ((size_t)n * len >= PAR_MIN)
    for (int i = 0; i < n; i++) {
        const float *dyi = dy + (size_t)i * len, *yi = y + (size_t)i * len;
        float *dxi = dx + (size_t)i * len, c = 0.0f;
        #pragma omp simd reduction(+:c)
        for (int j = 0; j < len; j++) c += dyi[j] * yi[j];
        #pragma omp simd
        for (int j = 0; j < len; j++) dxi[j] = yi[j] * (dyi[j] - c);
    }
}

/* ---- dropout ------------------------------------------------------------- */
/* A counter-based hash (32-bit multiply-xorshift rounds, which vectorise)
 * of (seed, i): the dropout mask is a pure function of the element index. */
static inline uint32_t mix32(uint32_t x) {
    x ^= x >> 16; x *= 0x7feb352du;
    x ^= x >> 15; x *= 0x846ca68bu;
    x ^= x >> 16;
    return x;
}
static inline uint32_t drop_hash(uint64_t seed, size_t i) {
    uint32_t x = mix32((uint32_t)i * 0x9E3779B9u ^ (uint32_t)seed);
    return mix32(x ^ (uint32_t)(seed >> 32) ^ (uint32_t)((uint64_t)i >> 32));
}
static inline uint32_t drop_threshold(float p) { return (uint32_t)((double)p * 4294967296.0); }

/* The element-wise ops that write bf16-rounded values (dropout,
 * relu_dropout_*) go in runs of BF16_RUN elements: a run computed in fp32,
 * then rounded by bf16_round_run while it is in L1 (VCVTNEPS2BF16 where the
 * CPU has it). PAR_RUNS: BODY for each run [e0, e1) of n elements, threaded
 * as PAR_FOR (each element's value is the same whoever computes it). */
#define PAR_RUNS(GO, n, e0, e1, ...)                                                                      \
    PAR_FOR(GO, (size_t run_ = 0; run_ < ((n) + BF16_RUN - 1) / BF16_RUN; run_++), {                     \
        size_t e0 = run_ * BF16_RUN, e1 = e0 + BF16_RUN < (n) ? e0 + BF16_RUN : (n);                        \
        __VA_ARGS__                                                                                       \
    })

/* y[e] = dropout(x)[e] for e in [e0, e1) (p <= 0: x itself) */
static inline void dropout_run(float *y, const float *x, size_t e0, size_t e1, float p, uint32_t th, float sc,
                               uint64_t seed) {
    if (p <= 0.0f) {
        if (y != x) memcpy(y + e0, x + e0, (e1 - e0) * sizeof *y);
        return;
    }
    #pragma omp simd
    for (size_t e = e0; e < e1; e++) y[e] = drop_hash(seed, e) >= th ? x[e] * sc : 0.0f;
}

void dropout(float *y, const float *x, size_t n, float p, uint64_t seed, int round_bf16, uint16_t *y16) {
    ASSERT(!y16 || round_bf16);
    uint32_t th = p > 0.0f ? drop_threshold(p) : 0;
    float sc = p > 0.0f ? 1.0f / (1.0f - p) : 1.0f;
    if (!round_bf16) {
        if (p <= 0.0f) { if (y != x) memcpy(y, x, n * sizeof *y); }
        else PAR_FOR_SIMD(par_go(n, PAR_MIN), (size_t i = 0; i < n; i++), y[i] = drop_hash(seed, i) >= th ? x[i] * sc : 0.0f;);
        return;
    }
    PAR_RUNS(par_go(n, PAR_MIN), n, e0, e1, {   /* then rounded, with the 16 bits beside where y16 */
        dropout_run(y, x, e0, e1, p, th, sc, seed);
        bf16_round_run(y + e0, y16 ? y16 + e0 : NULL, y + e0, e1 - e0);
    });
}

void residual_dropout(float *out, const float *x, const float *sub, size_t n, float p, uint64_t seed) {
    if (p <= 0.0f) {
        PAR_FOR_SIMD(par_go(n, PAR_MIN), (size_t i = 0; i < n; i++), out[i] = x[i] + sub[i];);
        return;
    }
    uint32_t th = drop_threshold(p);
    float sc = 1.0f / (1.0f - p);
    PAR_FOR_SIMD(par_go(n, PAR_MIN), (size_t i = 0; i < n; i++),
                 out[i] = x[i] + (drop_hash(seed, i) >= th ? sub[i] * sc : 0.0f););
}

/* Rows in blocks (block_rows): the residual over a block as one loop, then
 * the block's LayerNorm rows while they are in L1. */
static void residual_dropout_layernorm_part(float *res, float *ln, float *mean, float *rstd, const float *x,
                                            const float *sub, const float *gamma, const float *beta, int n, int D,
                                            float p, uint64_t seed, int round, uint16_t *ln16, int t, int nt) {
    uint32_t th = drop_threshold(p > 0.0f ? p : 0.0f);
    float sc = p > 0.0f ? 1.0f / (1.0f - p) : 1.0f;
    int rows = block_rows(D), b0, b1;
    par_share((n + rows - 1) / rows, t, nt, &b0, &b1);
    for (int blk = b0; blk < b1; blk++) {
        int i0 = blk * rows, i1 = i0 + rows < n ? i0 + rows : n;
        size_t e0 = (size_t)i0 * D, e1 = (size_t)i1 * D;   /* residual_dropout's elements */
        if (p <= 0.0f) {
            #pragma omp simd
            for (size_t e = e0; e < e1; e++) res[e] = x[e] + sub[e];
        } else {
            #pragma omp simd
            for (size_t e = e0; e < e1; e++) res[e] = x[e] + (drop_hash(seed, e) >= th ? sub[e] * sc : 0.0f);
        }
        for (int i = i0; i < i1; i++)   /* then layernorm_forward's rows */
            layernorm_row(ln + (size_t)i * D, ln16 ? ln16 + (size_t)i * D : NULL, mean + i, rstd + i, res + (size_t)i * D,
                          gamma, beta, D, round);
    }
}
void residual_dropout_layernorm(float *res, float *ln, float *mean, float *rstd, const float *x, const float *sub,
                                const float *gamma, const float *beta, int n, int D, float p, uint64_t seed, int round,
                                uint16_t *ln16) {
    ASSERT(!ln16 || round);
    PAR_PARTS(par_go((size_t)n * D, PAR_MIN), residual_dropout_layernorm_part(res, ln, mean, rstd, x, sub, gamma, beta, n, D,
                                                                              p, seed, round, ln16, par_t, par_nt););
}

/* x[e] = dropout(ReLU(x))[e] for e in [e0, e1) (th 0: every unit kept) */
static inline void relu_dropout_run(float *x, size_t e0, size_t e1, uint32_t th, float sc, uint64_t seed) {
    if (th == 0) {   /* ReLU alone: the vectorised loop below would hash every element and throw it away */
        #pragma omp simd
        for (size_t e = e0; e < e1; e++) x[e] = x[e] > 0.0f ? x[e] * sc : 0.0f;
        return;
    }
    #pragma omp simd
    for (size_t e = e0; e < e1; e++) x[e] = x[e] > 0.0f && drop_hash(seed, e) >= th ? x[e] * sc : 0.0f;
}

void relu_dropout_forward(float *x, size_t n, float p, uint64_t seed, int round_bf16, uint16_t *x16) {
    if (p <= 0.0f && !round_bf16) {   /* ReLU alone (translation): no hash computed and thrown away */
        PAR_FOR_SIMD(par_go(n, PAR_MIN), (size_t i = 0; i < n; i++), x[i] = x[i] > 0.0f ? x[i] : 0.0f;);
        return;
    }
    uint32_t th = p > 0.0f ? drop_threshold(p) : 0;   /* 0: every unit kept (no hash) */
    float sc = p > 0.0f ? 1.0f / (1.0f - p) : 1.0f;
    ASSERT(!x16 || round_bf16);
    if (!round_bf16) {
        PAR_FOR_SIMD(par_go(n, PAR_MIN), (size_t i = 0; i < n; i++),
                     x[i] = x[i] > 0.0f && drop_hash(seed, i) >= th ? x[i] * sc : 0.0f;);
        return;
    }
    PAR_RUNS(par_go(n, PAR_MIN), n, e0, e1, {   /* then rounded, with the 16 bits beside where x16 */
        relu_dropout_run(x, e0, e1, th, sc, seed);
        bf16_round_run(x + e0, x16 ? x16 + e0 : NULL, x + e0, e1 - e0);
    });
}

static inline void relu_backward_run(float *dx, const float *dh, const float *h, size_t e0, size_t e1, float sc) {
    #pragma omp simd
    for (size_t e = e0; e < e1; e++) dx[e] = h[e] > 0.0f ? dh[e] * sc : 0.0f;
}

void relu_dropout_backward(float *dx, const float *dh, const float *h, size_t n, float p, int round_bf16,
                           uint16_t *dx16) {
    float sc = p > 0.0f ? 1.0f / (1.0f - p) : 1.0f;
    ASSERT(!dx16 || round_bf16);
    if (!round_bf16) {
        PAR_FOR_SIMD(par_go(n, PAR_MIN), (size_t i = 0; i < n; i++), dx[i] = h[i] > 0.0f ? dh[i] * sc : 0.0f;);
        return;
    }
    PAR_RUNS(par_go(n, PAR_MIN), n, e0, e1, {   /* then rounded, with the 16 bits beside where dx16 */
        relu_backward_run(dx, dh, h, e0, e1, sc);
        bf16_round_run(dx + e0, dx16 ? dx16 + e0 : NULL, dx + e0, e1 - e0);
    });
}

/* ---- embeddings ------------------------------------------------------------ */
void positional_encoding(float *pe, int max_pos, int D) {
    for (int pos = 0; pos < max_pos; pos++)
        for (int j = 0; j < D; j++) {
            double angle = pos / pow(10000.0, (double)(j - j % 2) / D);
            pe[(size_t)pos * D + j] = (float)(j % 2 ? cos(angle) : sin(angle));
        }
}

static inline void embedding_row(float *xr, const float *e, const float *p, float sc, int D) {
    #pragma omp simd
    for (int j = 0; j < D; j++) xr[j] = e[j] * sc + p[j];
}
void embedding_forward(float *x, const int *tok, int n, int T, int pos0,
                       const float *E, const float *pe, int D) {
    float sc = sqrtf((float)D);
    PAR_FOR(par_go((size_t)n * D, PAR_MIN), (int r = 0; r < n; r++),
            embedding_row(x + (size_t)r * D, E + (size_t)tok[r] * D, pe + (size_t)(pos0 + r % T) * D, sc, D););
}

/* Rows with the same token add into the same row of dE: each thread owns a
 * range of columns [j0, j1) instead, and walks all rows in order
 * (deterministic). */
static void embedding_backward_part(float *dE, const float *dx, const int *tok, int n, int D, int j0, int j1) {
    float sc = sqrtf((float)D);
    for (int r = 0; r < n; r++) {
        float *e = dE + (size_t)tok[r] * D;
        const float *d = dx + (size_t)r * D;
        #pragma omp simd
        for (int j = j0; j < j1; j++) e[j] += sc * d[j];
    }
}
void embedding_backward(float *dE, const float *dx, const int *tok, int n, int D) {
    PAR_PARTS(par_go((size_t)n * D, PAR_MIN), {
        int j0, j1;
        par_share(D, par_t, par_nt, &j0, &j1);
        embedding_backward_part(dE, dx, tok, n, D, j0, j1);
    });
}

/* ---- attention ------------------------------------------------------------ */
/* A per-thread workspace for the [Tq, Tk] blocks of the backward pass; grown
 * (from serial code) only when a bigger shape comes, so training steps of
 * the same shape allocate nothing. */
static float *g_ws;
static size_t g_ws_size;
/* the attention's operand copies on oneDNN (below: 16-bit, or rounded floats) */
enum { AB_Q, AB_K, AB_V, AB_DO, AB_P, AB_N };
static void *g_abuf[AB_N];
static size_t g_abuf_size[AB_N];
static AttnCode g_attn_code = ATTN_AUTO;   /* attention_code (tests) */
static float *workspace(size_t n) {
    if (n > g_ws_size) { free(g_ws); g_ws = xaligned(n * sizeof(float)); g_ws_size = n; }
    return g_ws;
}

void ops_release(void) {
    free(g_kbuf); g_kbuf = NULL; g_kbuf_size = 0;
    for (int i = 0; i < 2 * MAXG; i++) { free(g_round[i]); g_round[i] = NULL; g_round_size[i] = 0; }
    free(g_ws); g_ws = NULL; g_ws_size = 0;
    for (int i = 0; i < AB_N; i++) { free(g_abuf[i]); g_abuf[i] = NULL; g_abuf_size[i] = 0; }
    gemm_dnnl_release();
    amx_release();
}

/* Keys query row i of sentence b may see: j < visible(s, b, i). */
static inline int visible(const AttnShape *s, int b, int i) {
    int n = s->k_len ? s->k_len[b] : s->Tk;
    if (n > s->Tk) n = s->Tk;
    if (s->causal && s->q_pos0 + i + 1 < n) n = s->q_pos0 + i + 1;
    return n < 0 ? 0 : n;
}

static int attention_forward_dnnl(SeqView out, SeqView q, SeqView k, SeqView v, float *probs, const AttnShape *s);
/* One row of the softmax backward, in place: d [len] holds dP (dP' with
 * dropout's mask applied, put_dropped) and becomes dS_j = P_j (dP_j - c) *
 * scale, c = sum_j dP_j P_j, over the n keys the query sees (0 beyond). */
static inline void softmax_backward_row(float *d, const float *p, int n, int len, float scale) {
    float c = 0.0f;
    #pragma omp simd reduction(+:c)
    for (int j = 0; j < n; j++) c += d[j] * p[j];
    #pragma omp simd
    for (int j = 0; j < len; j++) d[j] = j < n ? p[j] * (d[j] - c) * scale : 0.0f;
}

static int attention_backward_dnnl(SeqView dq, SeqView dk, SeqView dv, SeqView dout, SeqView q, SeqView k, SeqView v,
                                   const float *probs, const AttnShape *s);

/* What each route of the attention core derives from its shape first. */
typedef struct {
    float scale;          /* 1 / sqrt(Dk), on the scores */
    int drop;             /* attention dropout on P (s->dropout > 0) */
    uint32_t th;          /* an element of P is kept where drop_hash(seed, its index) >= th */
    float dsc;            /* 1 / (1 - dropout): a kept element's scale */
    long blk;             /* Tq * Tk: one head's block of scores */
    int per, ng, last;    /* oneDNN (dnnl_plan): ng groups of per sentences, the last one of last */
} AttnPlan;

static AttnPlan attn_plan(const AttnShape *s) {
    AttnPlan pl = {.scale = 1.0f / sqrtf((float)s->Dk), .drop = s->dropout > 0.0f, .blk = (long)s->Tq * s->Tk};
    pl.th = pl.drop ? drop_threshold(s->dropout) : 0;
    pl.dsc = pl.drop ? 1.0f / (1.0f - s->dropout) : 1.0f;
    pl.per = pl.ng = pl.last = s->B;
    return pl;
}

void attention_code(AttnCode c) { g_attn_code = c; }

int attention_core16(void) {
    return gemm_dnnl_runs() && (bf16_route() == BF16_ONEDNN || bf16_route() == BF16_AMX);
}

int attention_on_dnnl(const AttnShape *s) {
    if (!gemm_dnnl_built() || g_attn_code == ATTN_LOOPS || omp_in_parallel()) return 0;
    int floats = !s->bf16 || !attention_core16();   /* the products' operands: floats, or 16-bit */
    return g_attn_code == ATTN_DNNL || !floats || s->Dk > ATTN_LOOPS_MAX_DK;
}

/* The kind of an operand of the core's products. */
typedef struct { int f32, round; } AttnKind;   /* f32: float operands (round: to bf16 values); else 16-bit */

/* v [len] into p from element e0 on, in p's kind (nothing where p is v
 * already); the kind's test outside the loops, which then vectorise. */
static void put_run(void *p, size_t e0, const float *v, size_t len, AttnKind kd) {
    if (!kd.f32) bf16_round_run(NULL, (uint16_t *)p + e0, v, len);
    else if (kd.round) bf16_round_run((float *)p + e0, NULL, v, len);
    else if ((float *)p + e0 != v) {
        memcpy((float *)p + e0, v, len * sizeof *v);
    }
}

/* p[e0 + j] = dropout(src)[j] for j < len in p's kind, src[j] being element
 * x0 + j of the dropout stream (the batch's probabilities P, or their
 * gradient dP', in place): fp32 straight there, the others through a row of
 * floats. Both routes of the core mask P and dP' with it. */
static void put_dropped(void *p, size_t e0, const float *src, size_t x0, size_t len, const AttnPlan *pl,
                        uint64_t seed, AttnKind kd) {
    enum { ROW = 256 };
    float row[ROW];
    for (size_t c0 = 0; c0 < len; c0 += ROW) {
        size_t c = len - c0 < ROW ? len - c0 : ROW, x = x0 + c0;
        float *v = kd.f32 && !kd.round ? (float *)p + e0 + c0 : row;
        const float *sc = src + c0, dsc = pl->dsc;
        uint32_t th = pl->th;
        #pragma omp simd
        for (int j = 0; j < (int)c; j++) {
            float kept = sc[j] * dsc;   /* loaded whether kept or not: the loop vectorises */
            v[j] = drop_hash(seed, x + (size_t)j) >= th ? kept : 0.0f;
        }
        if (v == row) put_run(p, e0 + c0, row, c, kd);
    }
}


/* ---- the attention core, head by head ------------------------------------------
 * A head's six products are small (the Multi30k recipe's 20 x 20 x 32, the
 * base model's 32 x 32 x 64): a library call per product costs more than
 * its arithmetic. So they run here as loops over the head's operands, copied
 * into the thread's workspace dense, their columns padded with zeros to a
 * multiple of 16, and rounded to bf16 with s->bf16 (the products' sums in
 * fp32, as gemm_bf16.h's): head_product holds four rows of the result by up
 * to 64 columns in vector registers (vec16.h), so each element of B it loads
 * serves four rows and each element of A up to 64 columns. */

static inline int pad16(int n) { return (n + 15) & ~15; }

/* Rows MR (1 or 4) of C = alpha op(A) B, columns [0, n) of 16 * NV (NV 1..4),
 * each written rounded to bf16 values where round:
 * op(A)(i, t) = a[i * ai + t * at] (ai = lda, at = 1; transposed: ai = 1,
 * at = lda), B's rows ldb apart, each with 16 * NV floats to read. Each C
 * element sums over t in order. */
static inline __attribute__((always_inline)) void head_rows(int MR, int NV, int k, const float *a, long ai, long at,
                                                            const float *b, long ldb, float alpha, float *c, int ldc,
                                                            int n, int round) {
    vf16 acc[4][4];
    for (int r = 0; r < MR; r++)
        for (int v = 0; v < NV; v++) acc[r][v] = (vf16){0};
    for (int t = 0; t < k; t++) {
        vf16 bv[4];
        for (int v = 0; v < NV; v++) bv[v] = load16(b + t * ldb + 16 * v);
        for (int r = 0; r < MR; r++) {
            float x = a[r * ai + t * at];
            for (int v = 0; v < NV; v++) acc[r][v] += x * bv[v];
        }
    }
    for (int r = 0; r < MR; r++)
        for (int v = 0; v < NV; v++) {
            vf16 y = acc[r][v] * alpha;
            if (round) y = bf16_round16(y);   /* in the registers: no pass over C of its own */
            int w = n - 16 * v;   /* columns of this vector inside C */
            if (w >= 16) {
                store16(c + (size_t)r * ldc + 16 * v, y);
            } else {
                float part[16];
                store16(part, y);
                memcpy(c + (size_t)r * ldc + 16 * v, part, (size_t)w * sizeof(float));
            }
        }
}

/* C [m, n] (row stride ldc) = alpha op(A) B for op(A) [m, k] as in
 * head_rows and B [k, n] with rows ldb apart and pad16(n) floats readable in
 * each (head_operand's copies: zeros beyond n); C rounded to bf16 values
 * where round (the core's outputs with AttnShape.bf16). */
static void head_product(int m, int n, int k, const float *a, long ai, long at, const float *b, long ldb, float alpha,
                         float *c, int ldc, int round) {
#define HEAD_ROWS(MR)                                                                                   \
    switch (nv) {                                                                                       \
    case 1: head_rows(MR, 1, k, a + i * ai, ai, at, b + j0, ldb, alpha, c + (size_t)i * ldc + j0, ldc, nc, round); break; \
    case 2: head_rows(MR, 2, k, a + i * ai, ai, at, b + j0, ldb, alpha, c + (size_t)i * ldc + j0, ldc, nc, round); break; \
    case 3: head_rows(MR, 3, k, a + i * ai, ai, at, b + j0, ldb, alpha, c + (size_t)i * ldc + j0, ldc, nc, round); break; \
    default: head_rows(MR, 4, k, a + i * ai, ai, at, b + j0, ldb, alpha, c + (size_t)i * ldc + j0, ldc, nc, round); break; \
    }
    for (int j0 = 0; j0 < n; j0 += 64) {
        int nc = n - j0 < 64 ? n - j0 : 64, nv = (nc + 15) / 16, i = 0;
        for (; i + 4 <= m; i += 4) HEAD_ROWS(4)
        for (; i < m; i++) HEAD_ROWS(1)
    }
#undef HEAD_ROWS
}

/* A head's operand x [rows, cols] (row stride ld) as head_product's B:
 * copied into dst as [rows, pad16(cols)] (zeros in the padding, rounded to
 * bf16 where round), or x itself where its rows can be read as they are
 * (cols a multiple of 16, nothing to round). *ldb: the row stride of what
 * it returns. */
static const float *head_operand(float *dst, const float *x, int rows, int cols, long ld, int round, long *ldb) {
    if (!round && cols % 16 == 0) { *ldb = ld; return x; }
    int np = pad16(cols);
    for (int j = 0; j < rows; j++) {
        const float *r = x + j * ld;
        float *d = dst + (size_t)j * np;
        if (round) bf16_round_run(d, NULL, r, (size_t)cols);
        else memcpy(d, r, (size_t)cols * sizeof(float));
        for (int t = cols; t < np; t++) d[t] = 0.0f;
    }
    *ldb = np;
    return dst;
}

/* x [rows, cols] (row stride ld) transposed into dst [cols, pad16(rows)],
 * zeros in the padding, rounded to bf16 where round: blocks of 16 x 16
 * (transpose16), the rows past rows zeros, a last block of under 16
 * columns read through a vector on the stack. */
static void head_transpose(float *dst, const float *x, int rows, int cols, long ld, int round) {
    int np = pad16(rows);
    for (int j0 = 0; j0 < np; j0 += 16)
        for (int t0 = 0; t0 < cols; t0 += 16) {
            int nc = cols - t0 < 16 ? cols - t0 : 16;
            vf16 r[16];
            for (int i = 0; i < 16; i++) {
                const float *src = x + (j0 + i) * ld + t0;
                if (j0 + i >= rows) {
                    r[i] = (vf16){0};
                } else if (nc == 16) {
                    r[i] = load16(src);
                } else {
                    float part[16] = {0};
                    memcpy(part, src, (size_t)nc * sizeof(float));
                    r[i] = load16(part);
                }
            }
            transpose16(r);
            for (int c = 0; c < nc; c++) store16(dst + (size_t)(t0 + c) * np + j0, round ? bf16_round16(r[c]) : r[c]);
        }
}

/* Rows padded to np = pad16(Tk) floats, so that every loop below runs over
 * whole vectors of 16 (a row of 20 scores left gcc's simd loops mostly in
 * their scalar tails). Lanes j >= n of a row are masked: -inf for the max,
 * 0 for the sum and in the result. */

/* The softmax of x's first n entries, 0 in the rest of its np. The sum in 16
 * running sums, then a fixed tree: the same order every time. */
static inline void softmax_row16(float *x, int n, int np) {
    if (n <= 0) { memset(x, 0, (size_t)np * sizeof *x); return; }
    float m16[16], s16[16];
    for (int l = 0; l < 16; l++) m16[l] = -INFINITY, s16[l] = 0.0f;
    for (int c = 0; c < np; c += 16)
        #pragma omp simd
        for (int l = 0; l < 16; l++) {
            float v = c + l < n ? x[c + l] : -INFINITY;
            m16[l] = v > m16[l] ? v : m16[l];
        }
    float mx = m16[0];
    for (int l = 1; l < 16; l++) mx = m16[l] > mx ? m16[l] : mx;   /* exact in any order */
    for (int c = 0; c < np; c += 16)
        #pragma omp simd
        for (int l = 0; l < 16; l++) {
            float e = c + l < n ? fast_expf(x[c + l] - mx) : 0.0f;
            x[c + l] = e;
            s16[l] += e;
        }
    float inv = 1.0f / hsum16(s16);
    for (int c = 0; c < np; c += 16)
        #pragma omp simd
        for (int l = 0; l < 16; l++) x[c + l] *= inv;
}

/* softmax_backward_row on padded rows: d [np] holds dP and becomes dS over
 * the n keys the query sees (0 beyond), rounded to bf16 values where round;
 * p [np] is P (0 beyond n). */
static inline void softmax_backward_row16(float *d, const float *p, int n, int np, float scale, int round) {
    float c16[16] = {0};
    for (int c = 0; c < np; c += 16)
        #pragma omp simd
        for (int l = 0; l < 16; l++) c16[l] += d[c + l] * p[c + l];   /* p is 0 beyond n */
    float cs = hsum16(c16);
    for (int c = 0; c < np; c += 16) {
        vf16 y;
        #pragma omp simd
        for (int l = 0; l < 16; l++) y[l] = c + l < n ? p[c + l] * (d[c + l] - cs) * scale : 0.0f;
        store16(d + c, round ? bf16_round16(y) : y);
    }
}

/* Entries j < len of the padded row x: dropped where drop (as element x0 + j
 * of the dropout stream; the kept ones scaled), then rounded to bf16 where
 * round; the padding stays as it is. keep (with drop; NULL: none): each
 * entry's factor, the scale where kept and 0 where dropped or past len, for
 * row_keep16 to apply the same mask without hashing again. */
static inline void row_dropout16(float *x, int len, int np, size_t x0, const AttnPlan *pl, uint64_t seed, int drop,
                                 int round, float *keep) {
    uint32_t th = pl->th;
    float dsc = pl->dsc;
    if (drop && keep)   /* (the flags tested outside the loops, which then vectorise) */
        for (int c = 0; c < np; c += 16)
            #pragma omp simd
            for (int l = 0; l < 16; l++) {
                float k = c + l < len && drop_hash(seed, x0 + (size_t)(c + l)) >= th ? dsc : 0.0f;
                keep[c + l] = k;
                x[c + l] = k != 0.0f ? x[c + l] * dsc : 0.0f;
            }
    else if (drop)
        for (int c = 0; c < np; c += 16)
            #pragma omp simd
            for (int l = 0; l < 16; l++)
                x[c + l] = c + l < len && drop_hash(seed, x0 + (size_t)(c + l)) >= th ? x[c + l] * dsc : 0.0f;
    if (round)
        for (int c = 0; c < np; c += 16) store16(x + c, bf16_round16(load16(x + c)));
}
/* row_dropout16's mask again from its factors keep [np]: x * scale where
 * kept, 0 elsewhere (the same values as hashing again). */
static inline void row_keep16(float *x, const float *keep, int np) {
    #pragma omp simd
    for (int j = 0; j < np; j++) x[j] = keep[j] != 0.0f ? x[j] * keep[j] : 0.0f;
}

/* The threads' workspaces of the head loops: per floats each, for as many
 * threads as a team of the loop can have, from serial code (a call from
 * inside a parallel region gets its own for the call). */
static float *head_workspace(size_t per, float **own) {
    *own = NULL;
    if (!omp_in_parallel()) return workspace((size_t)omp_get_max_threads() * per);
    return *own = xaligned(per * sizeof(float));
}

void attention_forward(SeqView out, SeqView q, SeqView k, SeqView v, float *probs, const AttnShape *s) {
    if (!attention_forward_dnnl(out, q, k, v, probs, s)) return;
    int B = s->B, H = s->H, Tq = s->Tq, Tk = s->Tk, Dk = s->Dk, b16 = s->bf16;
    int Tkp = pad16(Tk), Dkp = pad16(Dk), rq = b16 && !s->held;   /* round q, k, v */
    AttnPlan pl = attn_plan(s);
    /* per thread: S, then P' [Tq, Tkp]; bf16: Q rounded [Tq, Dkp]; K^T [Dk, Tkp]; V [Tk, Dkp] */
    size_t per = (size_t)Tq * Tkp + (size_t)Tq * Dkp + (size_t)Dk * Tkp + (size_t)Tk * Dkp;
    float *own, *ws = head_workspace(per, &own);
    PAR_FOR(par_go((size_t)B * H * Tq * Tk * Dk, PAR_MIN), (int bh = 0; bh < B * H; bh++), {
        int b = bh / H, h = bh % H;
        float *S = ws + (size_t)(own ? 0 : omp_get_thread_num()) * per, *qr = S + (size_t)Tq * Tkp;
        float *kt = qr + (size_t)Tq * Dkp, *vp = kt + (size_t)Dk * Tkp;
        long ldq = q.rs, ldv;   /* Q is A: read as it is, unless rounded */
        const float *qb = q.data + b * q.bs + h * Dk;
        if (rq) { head_operand(qr, qb, Tq, Dk, q.rs, 1, &ldq); qb = qr; }
        head_transpose(kt, k.data + b * k.bs + h * Dk, Tk, Dk, k.rs, rq);
        const float *vb = head_operand(vp, v.data + b * v.bs + h * Dk, Tk, Dk, v.rs, rq, &ldv);
        /* scores S = Q K^T / sqrt(Dk)  [Tq, Tkp]; P = softmax(S) into probs;
         * P' = dropout(P) (rounded with bf16) in S's place */
        head_product(Tq, Tkp, Dk, qb, ldq, 1, kt, Tkp, pl.scale, S, Tkp, 0);
        for (int i = 0; i < Tq; i++) {
            float *Si = S + (size_t)i * Tkp;
            softmax_row16(Si, visible(s, b, i), Tkp);
            memcpy(probs + ((size_t)bh * Tq + i) * Tk, Si, (size_t)Tk * sizeof(float));
            if (pl.drop || b16) row_dropout16(Si, Tk, Tkp, ((size_t)bh * Tq + i) * Tk, &pl, s->seed, pl.drop, b16, NULL);
        }
        /* out = P' V (rounded with bf16) */
        head_product(Tq, Dk, Tk, S, Tkp, 1, vb, ldv, 1.0f, out.data + b * out.bs + h * Dk, (int)out.rs, b16);
    });
    free(own);
}

/* With P' = dropout(P), O = P' V:
 *   dV = P'^T dO;  dP' = dO V^T;  dP = dropout(dP');
 *   dS = P * (dP - rowsum(dP * P)) / sqrt(Dk)  (softmax backward, scale)
 *   dQ = dS K;  dK = dS^T Q
 * bf16: each product's operands rounded (P', dO, V, dS, K, Q), dS after the
 * softmax backward in fp32. */
void attention_backward(SeqView dq, SeqView dk, SeqView dv, SeqView dout,
                        SeqView q, SeqView k, SeqView v, const float *probs, const AttnShape *s) {
    long Dd = (long)s->H * s->Dk;   /* twins: dense outputs */
    ASSERT(!s->d16[0] || (dq.rs == Dd && dq.bs == s->Tq * Dd));
    ASSERT(!s->d16[1] || (dk.rs == Dd && dk.bs == s->Tk * Dd));
    ASSERT(!s->d16[2] || (dv.rs == Dd && dv.bs == s->Tk * Dd));
    if (!attention_backward_dnnl(dq, dk, dv, dout, q, k, v, probs, s)) return;
    int B = s->B, H = s->H, Tq = s->Tq, Tk = s->Tk, Dk = s->Dk, b16 = s->bf16;
    int Tkp = pad16(Tk), Dkp = pad16(Dk), rq = b16 && !s->held;   /* round q, k, v, dO */
    AttnPlan pl = attn_plan(s);
    /* per thread: P, P', dP, the dropout's factors [Tq, Tkp]; dO, Q [Tq, Dkp]; K [Tk, Dkp]; V^T [Dk, Tkp] */
    size_t blk = (size_t)Tq * Tkp, per = 4 * blk + 2 * (size_t)Tq * Dkp + (size_t)Tk * Dkp + (size_t)Dk * Tkp;
    float *own, *ws = head_workspace(per, &own);
    PAR_FOR(par_go((size_t)B * H * Tq * Tk * Dk, PAR_MIN), (int bh = 0; bh < B * H; bh++), {
        int b = bh / H, h = bh % H;
        float *P = ws + (size_t)(own ? 0 : omp_get_thread_num()) * per, *Pd = P + blk, *dP = Pd + blk, *keep = dP + blk;
        float *dop = keep + blk, *qp = dop + (size_t)Tq * Dkp, *kp = qp + (size_t)Tq * Dkp, *vt = kp + (size_t)Tk * Dkp;
        long ldo, ldk, ldq;
        for (int i = 0; i < Tq; i++) {   /* P [Tq, Tkp] */
            memcpy(P + (size_t)i * Tkp, probs + ((size_t)bh * Tq + i) * Tk, (size_t)Tk * sizeof(float));
            memset(P + (size_t)i * Tkp + Tk, 0, (size_t)(Tkp - Tk) * sizeof(float));
        }
        const float *Pu = P;   /* the P' that multiplied V: P itself without dropout in fp32 */
        if (pl.drop || b16) {
            memcpy(Pd, P, blk * sizeof(float));
            for (int i = 0; i < Tq; i++)
                row_dropout16(Pd + (size_t)i * Tkp, Tk, Tkp, ((size_t)bh * Tq + i) * Tk, &pl, s->seed, pl.drop, b16,
                              keep + (size_t)i * Tkp);
            Pu = Pd;
        }
        const float *dob = head_operand(dop, dout.data + b * dout.bs + h * Dk, Tq, Dk, dout.rs, rq, &ldo);
        head_transpose(vt, v.data + b * v.bs + h * Dk, Tk, Dk, v.rs, rq);
        /* dV [Tk, Dk] = P'^T dO;  dP' [Tq, Tkp] = dO V^T */
        head_product(Tk, Dk, Tq, Pu, 1, Tkp, dob, ldo, 1.0f, dv.data + b * dv.bs + h * Dk, (int)dv.rs, b16);
        head_product(Tq, Tkp, Dk, dob, ldo, 1, vt, Tkp, 1.0f, dP, Tkp, 0);
        for (int i = 0; i < Tq; i++) {   /* dP = dropout's mask on dP' (the factors P' was made with); dS (rounded with bf16) */
            float *d = dP + (size_t)i * Tkp;
            if (pl.drop) row_keep16(d, keep + (size_t)i * Tkp, Tkp);
            softmax_backward_row16(d, P + (size_t)i * Tkp, visible(s, b, i), Tkp, pl.scale, b16);
        }
        /* dQ [Tq, Dk] = dS K;  dK [Tk, Dk] = dS^T Q */
        const float *kb = head_operand(kp, k.data + b * k.bs + h * Dk, Tk, Dk, k.rs, rq, &ldk);
        const float *qb = head_operand(qp, q.data + b * q.bs + h * Dk, Tq, Dk, q.rs, rq, &ldq);
        /* (dq, dk and dv rounded with bf16: AttnShape.bf16) */
        head_product(Tq, Dk, Tk, dP, Tkp, 1, kb, ldk, 1.0f, dq.data + b * dq.bs + h * Dk, (int)dq.rs, b16);
        head_product(Tk, Dk, Tq, dP, 1, Tkp, qb, ldq, 1.0f, dk.data + b * dk.bs + h * Dk, (int)dk.rs, b16);
    });
    free(own);
    SeqView outs[3] = {dq, dk, dv};   /* the 16-bit twins (AttnShape.d16), of the values written rounded */
    for (int o = 0; o < 3; o++)
        if (s->d16[o]) bf16_round_twin(outs[o].data, s->d16[o], outs[o].data, (size_t)B * (o ? Tk : Tq) * s->H * Dk);
}

/* ---- the attention core on oneDNN ---------------------------------------------
 * In a build with oneDNN the six products run as oneDNN batched matmuls (a
 * group of sentences x all heads per call; gemm_dnnl.h's GemmBatch): at a
 * head's 32 x 32 x 64 a loop of BLIS's sgemm per head was overhead-bound
 * (0.06 of the FMA peak in a base step, doc/precision.md); the per-head
 * loops above run 0.84x oneDNN's fp32 there, but faster at the recipe's
 * 20 x 20 x 32, where they take float operands (ops.h ATTN_LOOPS_MAX_DK,
 * attention_on_dnnl). The sentences are
 * cut into groups that our threads take dynamically; a group is one
 * parallel-loop iteration: its operands made, each product as one matmul
 * over the group's sentences x heads (on this thread), the softmax (and its
 * backward) row by row in between, as in the loops above: the same numbers
 * up to the order of the sums. The operands, by AttnKind:
 *   bf16 on the oneDNN route: 16-bit copies of q, k, v (dO) and of P' (dS);
 *   bf16 on the other routes: float copies rounded to bf16 (the same values;
 *     oneDNN's fp32 FMAs: where the route is not oneDNN, its bf16 unit is no
 *     faster, dispatch.c);
 *   fp32: q, k, v, dO read where they are; P' is P itself without dropout,
 *     dS is written over dP'.
 * The copies are grow-only buffers (from serial code). Returns -1, nothing
 * written, where the call is the loops' (attention_on_dnnl) or oneDNN
 * declines the shapes. */

static void *abuf(int i, size_t bytes) {
    if (bytes > g_abuf_size[i]) { free(g_abuf[i]); g_abuf[i] = xaligned(bytes); g_abuf_size[i] = bytes; }
    return g_abuf[i];
}

/* An operand of the products for the whole batch: where sentence 0 starts,
 * the sentence stride and the row stride, in elements. */
typedef struct { void *p; long bs; int ld; } Opnd;

/* x as an operand: x itself (fp32), or a dense [B, T, D] copy in buffer i
 * (16-bit, or floats rounded to bf16), made group by group (opnd_fill). */
static Opnd opnd(SeqView x, int i, int B, int T, int D, AttnKind kd) {
    if (kd.f32 && !kd.round) return (Opnd){x.data, x.bs, (int)x.rs};
    return (Opnd){abuf(i, (size_t)B * T * D * (kd.f32 ? 4 : 2)), (long)T * D, D};
}

/* The rows of sentences [b0, b0 + nb) of x into o (nothing where o is x). */
static void opnd_fill(Opnd o, SeqView x, int b0, int nb, int T, int D, AttnKind kd) {
    if (kd.f32 && !kd.round) return;
    for (int b = b0; b < b0 + nb; b++)
        for (int t = 0; t < T; t++) {
            const float *r = x.data + b * x.bs + t * x.rs;
            size_t off = ((size_t)b * T + t) * D;
            if (kd.f32) bf16_round_run((float *)o.p + off, NULL, r, (size_t)D);
            else bf16_round_run(NULL, (uint16_t *)o.p + off, r, (size_t)D);
        }
}

/* Element e of an operand buffer. */
static inline const void *elem(const void *p, size_t e, AttnKind kd) { return (const char *)p + e * (kd.f32 ? 4 : 2); }
/* The sentences per group: three groups per thread (a slow one made up by
 * the others), all in one when the work is small (parallel.h). */
static int group_size(const AttnShape *s) {
    int nt = threads_count(), B = s->B;
    if (nt < 2 || (size_t)B * s->H * s->Tq * s->Tk * s->Dk < PAR_MIN) return B;
    int g = (B + 3 * nt - 1) / (3 * nt);
    return g > 0 ? g : 1;
}

/* The oneDNN routes' prologue: -1 where the call is not theirs
 * (attention_on_dnnl, an empty shape); else the kind of
 * operands and the plan with the sentences in groups (group_size). */
static int dnnl_plan(const AttnShape *s, AttnPlan *pl, AttnKind *kd) {
    if (!attention_on_dnnl(s) || s->B < 1 || s->Tq < 1 || s->Tk < 1 || s->Dk < 1) return -1;
    int b16 = s->bf16 && attention_core16();
    kd->f32 = !b16;
    kd->round = s->bf16 && !b16;
    *pl = attn_plan(s);
    pl->per = group_size(s);
    pl->ng = (s->B + pl->per - 1) / pl->per;
    pl->last = s->B - (pl->ng - 1) * pl->per;
    return 0;
}

/* The batch of one product over a group of cnt sentences: op(A) [m, k] op(B) [k, n] -> C, each
 * operand's sentence stride, head stride (Dk for q, k, v, dO and the outputs, the block [Tq, Tk]
 * for probabilities and their gradient), row stride. */
static GemmBatch batch_of(int ta, int tb, int m, int n, int k, float alpha, int cnt, int H,
                          long as, long ah, int lda, long bs, long bh, int ldb, long cs, long ch, int ldc, AttnKind kd) {
    GemmBatch g = {ta, tb, m, n, k, alpha, cnt, H, {as, ah}, {bs, bh}, {cs, ch}, lda, ldb, ldc, kd.f32};
    return g;
}

static int attention_forward_dnnl(SeqView out, SeqView q, SeqView k, SeqView v, float *probs, const AttnShape *s) {
    AttnPlan pl;
    AttnKind kd;
    if (dnnl_plan(s, &pl, &kd)) return -1;
    int B = s->B, H = s->H, Tq = s->Tq, Tk = s->Tk, Dk = s->Dk, D = H * Dk;
    long blk = pl.blk;
    AttnKind kq = kd;   /* q, k, v's: as they are where their producers rounded them (AttnShape.held) */
    if (kd.f32 && s->held) kq.round = 0;
    Opnd oq = opnd(q, AB_Q, B, Tq, D, kq), ok = opnd(k, AB_K, B, Tk, D, kq), ov = opnd(v, AB_V, B, Tk, D, kq);
    /* P' = dropout(P) in its kind; P itself when it is that already */
    int own_p = !kd.f32 || kd.round || pl.drop;
    void *pp = own_p ? abuf(AB_P, (size_t)B * H * blk * (kd.f32 ? 4 : 2)) : probs;
    GemmBatch g[4];
    for (int e = 0; e < 2; e++) {   /* a whole group, the last one */
        int cnt = e ? pl.last : pl.per;
        g[2 * e] = batch_of(0, 1, Tq, Tk, Dk, pl.scale, cnt, H, oq.bs, Dk, oq.ld, ok.bs, Dk, ok.ld, H * blk, blk, Tk, kd);
        g[2 * e + 1] = batch_of(0, 0, Tq, Dk, Tk, 1.0f, cnt, H, H * blk, blk, Tk, ov.bs, Dk, ov.ld, out.bs, Dk, (int)out.rs, kd);
    }
    const void *prim[4];
    if (gemm_dnnl_batch_prepare(g, 4, prim)) return -1;
    PAR_FOR_DYNAMIC(pl.ng > 1, (int gi = 0; gi < pl.ng; gi++), {   /* one group: no region (parallel.h) */
        int b0 = gi * pl.per, cnt = gi == pl.ng - 1 ? pl.last : pl.per, e = gi == pl.ng - 1;
        opnd_fill(oq, q, b0, cnt, Tq, D, kq);
        opnd_fill(ok, k, b0, cnt, Tk, D, kq);
        opnd_fill(ov, v, b0, cnt, Tk, D, kq);
        /* S = Q K^T / sqrt(Dk) for every head of the group */
        gemm_dnnl_batch_run(prim[2 * e], elem(oq.p, b0 * oq.bs, kd), elem(ok.p, b0 * ok.bs, kd), probs + b0 * H * blk);
        for (int b = b0; b < b0 + cnt; b++)
            for (int h = 0; h < H; h++) {
                size_t base = ((size_t)b * H + h) * blk;
                float *P = probs + base;
                for (int i = 0; i < Tq; i++) softmax_row(P + (size_t)i * Tk, visible(s, b, i), Tk);
                if (!own_p) continue;
                if (pl.drop) put_dropped(pp, base, P, base, (size_t)blk, &pl, s->seed, kd);   /* P' = dropout(P) */
                else put_run(pp, base, P, (size_t)blk, kd);
            }
        /* out = P' V (rounded with bf16, the group's rows while in cache) */
        gemm_dnnl_batch_run(prim[2 * e + 1], elem(pp, (size_t)b0 * H * blk, kd), elem(ov.p, b0 * ov.bs, kd),
                            out.data + b0 * out.bs);
        if (s->bf16)
            for (int b = b0; b < b0 + cnt; b++)
                bf16_round_matrix(out.data + b * out.bs, (int)out.rs, out.data + b * out.bs, (int)out.rs, Tq, D);
    });
    gemm_dnnl_batch_free(prim, 4);
    return 0;
}

static int attention_backward_dnnl(SeqView dq, SeqView dk, SeqView dv, SeqView dout, SeqView q, SeqView k, SeqView v,
                                   const float *probs, const AttnShape *s) {
    AttnPlan pl;
    AttnKind kd;
    if (dnnl_plan(s, &pl, &kd)) return -1;
    int B = s->B, H = s->H, Tq = s->Tq, Tk = s->Tk, Dk = s->Dk, D = H * Dk;
    long blk = pl.blk;
    AttnKind kq = kd;   /* q, k, v, dO's: as they are where their producers rounded them (AttnShape.held) */
    if (kd.f32 && s->held) kq.round = 0;
    Opnd oq = opnd(q, AB_Q, B, Tq, D, kq), ok = opnd(k, AB_K, B, Tk, D, kq), ov = opnd(v, AB_V, B, Tk, D, kq);
    Opnd od = opnd(dout, AB_DO, B, Tq, D, kq);
    float *dP = workspace((size_t)B * H * blk);   /* dP' then dS, fp32 */
    /* P' in its kind (P itself in fp32 without dropout); dS in its kind: over P' (16-bit, rounded),
     * over dP' (fp32) */
    int own_p = !kd.f32 || kd.round || pl.drop;
    void *pp = own_p ? abuf(AB_P, (size_t)B * H * blk * (kd.f32 ? 4 : 2)) : (void *)probs;
    void *ps = !kd.f32 || kd.round ? pp : (void *)dP;
    GemmBatch g[8];
    for (int e = 0; e < 2; e++) {
        int c = e ? pl.last : pl.per;
        g[4 * e + 0] = batch_of(1, 0, Tk, Dk, Tq, 1.0f, c, H, H * blk, blk, Tk, od.bs, Dk, od.ld, dv.bs, Dk, (int)dv.rs, kd);   /* dV = P'^T dO */
        g[4 * e + 1] = batch_of(0, 1, Tq, Tk, Dk, 1.0f, c, H, od.bs, Dk, od.ld, ov.bs, Dk, ov.ld, H * blk, blk, Tk, kd);        /* dP' = dO V^T */
        g[4 * e + 2] = batch_of(0, 0, Tq, Dk, Tk, 1.0f, c, H, H * blk, blk, Tk, ok.bs, Dk, ok.ld, dq.bs, Dk, (int)dq.rs, kd);   /* dQ = dS K */
        g[4 * e + 3] = batch_of(1, 0, Tk, Dk, Tq, 1.0f, c, H, H * blk, blk, Tk, oq.bs, Dk, oq.ld, dk.bs, Dk, (int)dk.rs, kd);   /* dK = dS^T Q */
    }
    const void *prim[8];
    if (gemm_dnnl_batch_prepare(g, 8, prim)) return -1;
    PAR_FOR_DYNAMIC(pl.ng > 1, (int gi = 0; gi < pl.ng; gi++), {   /* one group: no region (parallel.h) */
        int b0 = gi * pl.per, cnt = gi == pl.ng - 1 ? pl.last : pl.per;
        const void *const *pr = prim + 4 * (gi == pl.ng - 1);
        opnd_fill(od, dout, b0, cnt, Tq, D, kq);
        opnd_fill(oq, q, b0, cnt, Tq, D, kq);
        opnd_fill(ok, k, b0, cnt, Tk, D, kq);
        opnd_fill(ov, v, b0, cnt, Tk, D, kq);
        size_t g0 = (size_t)b0 * H * blk;
        if (own_p && pl.drop) put_dropped(pp, g0, probs + g0, g0, (size_t)cnt * H * blk, &pl, s->seed, kd);   /* P' = dropout(P) */
        else if (own_p) put_run(pp, g0, probs + g0, (size_t)cnt * H * blk, kd);
        const void *dog = elem(od.p, b0 * od.bs, kd), *qg = elem(oq.p, b0 * oq.bs, kd);
        const void *kg = elem(ok.p, b0 * ok.bs, kd), *vg = elem(ov.p, b0 * ov.bs, kd);
        gemm_dnnl_batch_run(pr[0], elem(pp, g0, kd), dog, dv.data + b0 * dv.bs);
        gemm_dnnl_batch_run(pr[1], dog, vg, dP + g0);
        /* dP = dropout's mask on dP', over the group's blocks at once (the element numbers of P') */
        if (pl.drop) put_dropped(dP, g0, dP + g0, g0, (size_t)cnt * H * blk, &pl, s->seed, (AttnKind){1, 0});
        for (int b = b0; b < b0 + cnt; b++)
            for (int h = 0; h < H; h++) {
                size_t base = ((size_t)b * H + h) * blk;
                for (int i = 0; i < Tq; i++) {
                    size_t r = base + (size_t)i * Tk;
                    softmax_backward_row(dP + r, probs + r, visible(s, b, i), Tk, pl.scale);
                    put_run(ps, r, dP + r, (size_t)Tk, kd);   /* dS in its kind (in place in fp32) */
                }
            }
        gemm_dnnl_batch_run(pr[2], elem(ps, g0, kd), kg, dq.data + b0 * dq.bs);
        gemm_dnnl_batch_run(pr[3], elem(ps, g0, kd), qg, dk.data + b0 * dk.bs);
        if (s->bf16) {   /* dq, dk, dv rounded (AttnShape.bf16; and their twins, d16), the group's rows while in cache */
            SeqView outs[3] = {dq, dk, dv};
            for (int o = 0; o < 3; o++)
                for (int b = b0; b < b0 + cnt; b++) {
                    float *x = outs[o].data + b * outs[o].bs;
                    int rows = o ? Tk : Tq;
                    if (s->d16[o]) bf16_round_twin(x, s->d16[o] + b * outs[o].bs, x, (size_t)rows * D);
                    else bf16_round_matrix(x, (int)outs[o].rs, x, (int)outs[o].rs, rows, D);
                }
        }
    });
    gemm_dnnl_batch_free(prim, 8);
    return 0;
}

/* ---- output layer ------------------------------------------------------------ */
void cross_entropy_forward_backward(float *logits, const int *target, int n, int V,
                                    float eps, float grad_scale,
                                    double *loss, double *nll, float *logp, int round_bf16, uint16_t *grad16) {
    double lsum = 0.0, nsum = 0.0;
    ASSERT(!grad16 || (round_bf16 && grad_scale != 0.0f));
    float off = eps / (float)(V - 1), on = 1.0f - eps;
    #pragma omp parallel for schedule(static) if ((size_t)n * V >= PAR_MIN) reduction(+:lsum, nsum)
    for (int i = 0; i < n; i++) {
        float *z = logits + (size_t)i * V;
        int y = target[i];
        uint16_t *h = grad16 ? grad16 + (size_t)i * V : NULL;   /* this row's 16 bits */
        if (y < 0) {
            if (grad_scale != 0.0f) memset(z, 0, (size_t)V * sizeof *z);
            if (h) memset(h, 0, (size_t)V * sizeof *h);
            if (logp) logp[i] = 0.0f;
            continue;
        }
        float mx = -INFINITY;
        #pragma omp simd reduction(max:mx)
        for (int j = 0; j < V; j++) mx = z[j] > mx ? z[j] : mx;
        float zy = z[y], se = 0.0f, sz = 0.0f;
        if (grad_scale != 0.0f) {   /* keep e^(z - max) for the gradient */
            #pragma omp simd reduction(+:se, sz)
            for (int j = 0; j < V; j++) { sz += z[j]; z[j] = fast_expf(z[j] - mx); se += z[j]; }
        } else {
            #pragma omp simd reduction(+:se, sz)
            for (int j = 0; j < V; j++) { sz += z[j]; se += fast_expf(z[j] - mx); }
        }
        float lse = mx + logf(se);
        /* -sum_j q_j log p_j = lse - on * z_y - off * (sum_j z_j - z_y) */
        lsum += (double)lse - (double)on * zy - (double)off * ((double)sz - zy);
        nsum += (double)lse - zy;
        if (logp) logp[i] = zy - lse;
        if (grad_scale != 0.0f) {
            float a = grad_scale / se, b = grad_scale * off;
            if (h) {   /* the rounded values and their 16 bits beside them, as they are written: here
                        * the integer code outran the runs on VCVTNEPS2BF16 (7.5 against 9.5 ms at
                        * 2,000 x 8,000, Intel model 0xcf: the 32 MB of 16 bits go to memory) */
                float ey = z[y];
                #pragma omp simd
                for (int j = 0; j < V; j++) z[j] = bf16_round_put(z[j] * a - b, h + j);
                z[y] = bf16_round_put((ey * a - b) - grad_scale * (on - off), h + y);
            } else {   /* in runs of BF16_RUN, each rounded while in L1 where round_bf16 */
                for (int j0 = 0; j0 < V; j0 += BF16_RUN) {
                    int j1 = V - j0 < BF16_RUN ? V : j0 + BF16_RUN;
                    #pragma omp simd
                    for (int j = j0; j < j1; j++) z[j] = z[j] * a - b;
                    if (y >= j0 && y < j1) z[y] -= grad_scale * (on - off);
                    if (round_bf16) bf16_round_run(z + j0, NULL, z + j0, (size_t)(j1 - j0));
                }
            }
        }
    }
    *loss += lsum;
    *nll += nsum;
}
