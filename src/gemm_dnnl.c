/* gemm_dnnl.c — bf16 and fp32 products through oneDNN's matmul (see gemm_dnnl.h).
 *
 * A product C [m, n] = beta C + op(A) op(B) (beta 0 or 1) becomes a oneDNN
 * matmul of a bf16 (fp32 products: f32) "src" [m, k] and "weights" [k, n]
 * into an f32 "dst" [m, n], each described by its strides, so tfm's
 * transposes stay strides:
 *   A stored [m, k] (ta 0): strides (lda, 1); stored [k, m] (ta 1): (1, lda)
 *   B stored [k, n] (tb 0): strides (ldb, 1); stored [n, k] (tb 1): (1, ldb)
 * beta = 1 is oneDNN's "sum" post-op (C += the product), Gemm.bias its
 * bias argument (C = the product + the bias, C never read). The primitives
 * of a call are made for it and destroyed after it: oneDNN's own primitive
 * cache answers a shape it has seen in ~1.5 us (a new shape is compiled,
 * 0.1-0.7 ms, as it was by the table of 64 we kept before: a training step's
 * batches have new token counts, hence new shapes, every step). The int8
 * products (the end of this file) keep a bounded table of their own.
 *
 * Conversion (bf16 products): the operands with their GEMM_BF16_* bit are
 * rounded to 16 bits into grow-only buffers (vectorised, threaded); an
 * operand two products of one call share is converted once. The others are
 * taken from a registered twin (gemm_dnnl_shadow), or converted likewise. */
#include "gemm_dnnl.h"

#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dispatch.h"
#include "gemm_bf16.h"
#include "parallel.h"
#include "prof.h"
#include "util.h"

static KernelRange g_shadow[KERNEL_RANGES];   /* data: the 16-bit twin */

void gemm_dnnl_shadow(const float *f, const uint16_t *h, size_t n) { kernel_range_set(g_shadow, f, h ? n : 0, h); }

/* The twin of p's buffer holding [rows, cols] with row stride ld, or NULL. */
static const uint16_t *shadow_of(const float *p, int rows, int cols, int ld) {
    size_t off;
    const KernelRange *r = kernel_range_of(g_shadow, p, rows, cols, ld, &off);
    return r ? (const uint16_t *)r->data + off : NULL;
}

#ifdef TFM_DNNL
#include <oneapi/dnnl/dnnl.h>

/* A matmul primitive and what running it needs: the descriptors of its src
 * a [.., m, k], weights b [.., k, n] and dst c [.., m, n], and of its
 * scratchpad, which the caller provides (dnnl_scratchpad_mode_user): with
 * the library's default, one scratchpad shared by every execution of a
 * primitive, our pieces running one primitive on several threads at once
 * raced (found as wrong sums, now and then). */
typedef struct {
    dnnl_primitive_t prim;
    dnnl_memory_desc_t a, b, c, scratch;
    dnnl_memory_desc_t bias;   /* [1, n] f32, added to each row of C; has_bias 0: none */
    int has_bias;
    size_t scratch_bytes;
} Prim;

static dnnl_engine_t g_engine;
static int g_init;   /* 0 not tried, 1 ready, -1 failed */
enum { MAXT = 64 };
static int g_pieces = 1;
static void *g_scratch[MAXT];          /* one scratchpad per thread of ours, grow-only (gemm_dnnl_release) */
static size_t g_scratch_size[MAXT];

static long g_made;          /* primitives asked of oneDNN, and the seconds that took */
static double g_made_seconds;

void gemm_dnnl_made(long *count, double *seconds) { *count = g_made; *seconds = g_made_seconds; }

/* oneDNN keeps the primitives it made in a cache of 1,024 by default. An
 * epoch of the Multi30k recipe (configs/multi30k.ini) brings ~12,000 shapes,
 * the same ones every epoch (each batch's token counts make every product's
 * rows or k, and every attention batch's lengths), so that cache thrashed:
 * a fifth of a bf16 training session went to compiling primitives again
 * (doc/precision.md). GEMM_DNNL_CACHE holds an epoch's; the variables
 * oneDNN reads itself still decide where they are set. */
static int cache_from_environment(void) {
    return getenv("ONEDNN_PRIMITIVE_CACHE_CAPACITY") || getenv("DNNL_PRIMITIVE_CACHE_CAPACITY");
}

static int init(void) {
    int r;
    #pragma omp critical(tfm_dnnl_init)
    {
        if (!g_init) {
            g_init = dnnl_engine_create(&g_engine, dnnl_cpu, 0) == dnnl_success ? 1 : -1;
            if (g_init == 1 && !cache_from_environment() &&
                dnnl_set_primitive_cache_capacity(GEMM_DNNL_CACHE) != dnnl_success)
                g_init = -1;
        }
        r = g_init;
    }
    return r;
}

int gemm_dnnl_cache(int *from_env) {
    int cap = 0;
    *from_env = cache_from_environment();
    if (init() != 1 || dnnl_get_primitive_cache_capacity(&cap) != dnnl_success) return -1;
    return cap;
}

/* Makes p->prim for the descriptors p->a, p->b, p->c: C = alpha A B, or
 * C += A B (sum). Every primitive is made here and destroyed after its
 * call (the int8 ones: when their table lets them go): oneDNN keeps the
 * primitives it made in its own cache (DNNL_PRIMITIVE_CACHE_CAPACITY, 1024
 * by default, least recently used out), which answers a shape made before
 * in ~1.5 us (measured, AMD Zen 4), where a new one is compiled (0.1-0.7
 * ms). impl (if not NULL) gets the implementation's name. 0, or -1 (oneDNN
 * refuses the shape; p->prim NULL). */
static int prim_make(Prim *p, int sum, float alpha, char *impl, size_t impl_size) {
    dnnl_matmul_desc_t md;
    dnnl_primitive_attr_t attr = NULL;
    dnnl_post_ops_t po = NULL;
    dnnl_primitive_desc_t pd = NULL;
    p->prim = NULL;
    int ok = dnnl_matmul_desc_init(&md, &p->a, &p->b, p->has_bias ? &p->bias : NULL, &p->c) == dnnl_success &&
             dnnl_primitive_attr_create(&attr) == dnnl_success &&
             dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user) == dnnl_success &&
             (alpha == 1.0f || dnnl_primitive_attr_set_output_scales(attr, 1, 0, &alpha) == dnnl_success);
    if (ok && sum)
        ok = dnnl_post_ops_create(&po) == dnnl_success && dnnl_post_ops_append_sum(po, 1.0f) == dnnl_success &&
             dnnl_primitive_attr_set_post_ops(attr, po) == dnnl_success;
    double t0 = now_seconds();
    ok = ok && dnnl_primitive_desc_create(&pd, &md, attr, g_engine, NULL) == dnnl_success &&
         dnnl_primitive_create(&p->prim, pd) == dnnl_success;
    double dt = now_seconds() - t0;
    #pragma omp atomic
    g_made++;
    #pragma omp atomic
    g_made_seconds += dt;
    memset(&p->scratch, 0, sizeof p->scratch);
    if (ok) {
        const dnnl_memory_desc_t *smd = dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
        if (smd) p->scratch = *smd;
        const char *name = NULL;
        if (impl && dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &name) == dnnl_success && name)
            snprintf(impl, impl_size, "%s", name);
    }
    p->scratch_bytes = ok ? dnnl_memory_desc_get_size(&p->scratch) : 0;
    if (po) dnnl_post_ops_destroy(po);
    if (attr) dnnl_primitive_attr_destroy(attr);
    if (pd) dnnl_primitive_desc_destroy(pd);
    if (!ok && p->prim) dnnl_primitive_destroy(p->prim);
    if (!ok) p->prim = NULL;
    return ok ? 0 : -1;
}

static void prim_free(Prim *p) {
    if (p->prim) dnnl_primitive_destroy(p->prim);
    p->prim = NULL;
}

/* Runs p on the calling thread (and oneDNN's threads, as many as omp_get_max_threads()
 * says) with its operands at a, b, c, its bias (has_bias) at bias, p->scratch_bytes of
 * scratchpad at s; a stream of its own (one costs ~0.05 us: none kept). 0, or -1. */
static int prim_run(const Prim *p, const void *a, const void *b, const float *bias, void *c, void *s) {
    dnnl_stream_t st = NULL;
    dnnl_memory_t ma = NULL, mb = NULL, mc = NULL, ms = NULL, mbias = NULL;
    int ok = dnnl_stream_create(&st, g_engine, dnnl_stream_default_flags) == dnnl_success &&
             dnnl_memory_create(&ma, &p->a, g_engine, (void *)a) == dnnl_success &&
             dnnl_memory_create(&mb, &p->b, g_engine, (void *)b) == dnnl_success &&
             dnnl_memory_create(&mc, &p->c, g_engine, c) == dnnl_success &&
             dnnl_memory_create(&ms, &p->scratch, g_engine, s) == dnnl_success &&
             (!p->has_bias || dnnl_memory_create(&mbias, &p->bias, g_engine, (void *)bias) == dnnl_success);
    dnnl_exec_arg_t args[5] = {{DNNL_ARG_SRC, ma}, {DNNL_ARG_WEIGHTS, mb}, {DNNL_ARG_DST, mc}, {DNNL_ARG_SCRATCHPAD, ms},
                               {DNNL_ARG_BIAS, mbias}};
    ok = ok && dnnl_primitive_execute(p->prim, st, 4 + p->has_bias, args) == dnnl_success && dnnl_stream_wait(st) == dnnl_success;
    if (ma) dnnl_memory_destroy(ma);
    if (mb) dnnl_memory_destroy(mb);
    if (mc) dnnl_memory_destroy(mc);
    if (ms) dnnl_memory_destroy(ms);
    if (mbias) dnnl_memory_destroy(mbias);
    if (st) dnnl_stream_destroy(st);
    return ok ? 0 : -1;
}

/* Each of our nt threads' scratchpad at least bytes (serial code). */
static void scratch_reserve(int nt, size_t bytes) {
    for (int t = 0; t < nt; t++)
        if (bytes > g_scratch_size[t]) {
            free(g_scratch[t]);
            g_scratch[t] = xaligned(bytes);
            g_scratch_size[t] = bytes;
        }
}

/* A 2-d product's primitive: op(A) [m, k] op(B) [k, n] (bf16, or f32) ->
 * C [m, n] (f32), the transposes as strides, ld* the row strides as stored;
 * sum: C += the product; bias: + a row of n floats in the kernel (C filled
 * first and summed into cost a copy and a read of C: 2% of a recipe step). */
static int prim_2d(Prim *p, int f32, int ta, int tb, int m, int n, int k, int lda, int ldb, int ldc, int sum,
                   int bias) {
    dnnl_dims_t adim = {m, k}, bdim = {k, n}, cdim = {m, n}, biasdim = {1, n};
    dnnl_dims_t ast = {ta ? 1 : lda, ta ? lda : 1};
    dnnl_dims_t bst = {tb ? 1 : ldb, tb ? ldb : 1};
    dnnl_dims_t cst = {ldc, 1}, biasst = {n, 1};
    p->prim = NULL;
    p->has_bias = bias;
    dnnl_data_type_t t = f32 ? dnnl_f32 : dnnl_bf16;
    if (dnnl_memory_desc_init_by_strides(&p->a, 2, adim, t, ast) != dnnl_success ||
        dnnl_memory_desc_init_by_strides(&p->b, 2, bdim, t, bst) != dnnl_success ||
        dnnl_memory_desc_init_by_strides(&p->c, 2, cdim, dnnl_f32, cst) != dnnl_success ||
        (bias && dnnl_memory_desc_init_by_strides(&p->bias, 2, biasdim, dnnl_f32, biasst) != dnnl_success))
        return -1;
    return prim_make(p, sum, 1.0f, NULL, 0);
}

/* Grow-only 16-bit buffers for converted operands (serial code only; gemm_dnnl_release). */
enum { MAXOP = 8 };
static uint16_t *g_buf[MAXOP];
static size_t g_buf_size[MAXOP];

/* rows of a float matrix (row stride ld) to bf16, packed [rows, cols].
 * Serial: it runs inside the parallel region below, where an `omp parallel`
 * of its own, even one that its `if` turns off, makes libgomp set up and
 * tear down a team of one (a malloc, a free and a futex syscall each time;
 * the Multi30k model's step made ~2,600 such calls). */
static void convert_rows(uint16_t *dst, const float *src, int rows, int cols, int ld) {
    for (int i = 0; i < rows; i++) {
        const float *s = src + (size_t)i * ld;
        uint16_t *d = dst + (size_t)i * cols;
        #pragma omp simd
        for (int j = 0; j < cols; j++) d[j] = bf16_from_float(s[j]);
    }
}

/* The same on tfm's threads, from serial code (a small one on this thread).
 * Returns the thread-seconds it took with prof_on (prof.h), else 0. */
static double convert(uint16_t *dst, const float *src, int rows, int cols, int ld) {
    double t0 = prof_on ? prof_clock() : 0.0;
    int nt = (size_t)rows * cols < ((size_t)1 << 16) ? 1 : threads_count();
    if (nt < 2) {
        convert_rows(dst, src, rows, cols, ld);
    } else {
        #pragma omp parallel for schedule(static)
        for (int i = 0; i < rows; i++) convert_rows(dst + (size_t)i * cols, src + (size_t)i * ld, 1, cols, ld);
    }
    return prof_on ? nt * (prof_clock() - t0) : 0.0;
}

/* Whether x's operands, with the row strides lda and ldb they are read
 * with, are plain: rows (or, transposed, columns) with no gaps. */
static int plain_whole(const Gemm *x, int lda, int ldb) {
    return lda == (x->ta ? x->m : x->k) && ldb == (x->tb ? x->k : x->n) && x->ldc == x->n;
}

/* What gemm_dnnl_many's pieces share: the products, the operands oneDNN
 * reads (bf16 products: 16-bit; fp32 ones: the floats themselves) with
 * their row strides ld and element bytes es, and how each product is cut
 * (first piece, piece length along rows or columns, the primitives of a
 * whole and of the last piece, whether each piece converts its own rows
 * of A). */
typedef struct {
    const Gemm *g;
    const void *op[MAXOP];
    int ld[MAXOP];
    int es[MAXOP / 2];
    int first[MAXOP / 2 + 1], piece[MAXOP / 2], by_rows[MAXOP / 2], len[MAXOP / 2], deferred[MAXOP / 2];
    const Prim *full[MAXOP / 2], *last[MAXOP / 2];
} Pieces;

/* Piece q on thread tid (its scratchpad): -1 where oneDNN failed. */
static int run_piece(const Pieces *P, int q, int tid) {
    int j = 0;
    while (q >= P->first[j + 1]) j++;
    const Gemm *x = &P->g[j];
    int i0 = (q - P->first[j]) * P->piece[j], cnt = P->len[j] - i0 < P->piece[j] ? P->len[j] - i0 : P->piece[j];
    const Prim *e = q == P->first[j + 1] - 1 ? P->last[j] : P->full[j];
    const char *a = P->op[2 * j], *b = P->op[2 * j + 1];
    size_t es = (size_t)P->es[j];
    float *c = x->c;
    if (P->by_rows[j]) { a += es * (x->ta ? (size_t)i0 : (size_t)i0 * P->ld[2 * j]); c += (size_t)i0 * x->ldc; }
    else { b += es * (x->tb ? (size_t)i0 * P->ld[2 * j + 1] : (size_t)i0); c += i0; }
    if (P->deferred[j]) {  /* this piece's rows of A (stored [m, k], by rows) */
        double t0 = prof_on ? prof_clock() : 0.0;
        convert_rows((uint16_t *)a, x->a + (size_t)i0 * x->lda, cnt, x->k, x->lda);
        if (prof_on) prof_convert(prof_clock() - t0);
    }
    if (prim_run(e, a, b, x->bias && !P->by_rows[j] ? x->bias + i0 : x->bias, c, g_scratch[tid]) != 0) return -1;
    if (x->round_c)       /* Gemm.round_c: the block rounded while in cache (serial: inside the region) */
        bf16_round_matrix(c, x->ldc, c, x->ldc, P->by_rows[j] ? cnt : x->m, P->by_rows[j] ? x->n : cnt);
    return 0;
}

int gemm_dnnl_many(const Gemm *g, int count) {
    if (omp_in_parallel() || count > MAXOP / 2 || init() != 1) return -1;
    for (int j = 0; j < count; j++)
        if (g[j].alpha != 1.0f || (g[j].beta != 0.0f && g[j].beta != 1.0f)) return -1;
    int nt = threads_count();
    if (nt > MAXT) nt = MAXT;
    /* the operands in 16 bits, then the primitives of every piece, so that
     * a refusal leaves C unwritten */
    Pieces P = {.g = g};
    struct { const float *src; int rows, cols, ld; const uint16_t *dst; } done[MAXOP];
    int used = 0;
    double work[MAXOP / 2], total = 0;
    struct { uint16_t *dst; const float *src; int rows, cols, ld; } pend[MAXOP];   /* conversions to make */
    int npend = 0;
    for (int j = 0; j < count; j++) {
        const Gemm *x = &g[j];
        work[j] = 0;
        P.deferred[j] = 0;
        if (x->m <= 0 || x->n <= 0) continue;   /* an empty C: nothing to do */
        if (x->k == 0) return -1;               /* C = beta C: the caller's kernel does it */
        ASSERT(x->lda >= (x->ta ? x->m : x->k) && x->ldb >= (x->tb ? x->k : x->n) && x->ldc >= x->n && x->k > 0);
        total += work[j] = (double)x->m * x->n * x->k;
        P.es[j] = x->bf16 ? 2 : 4;
        if (!x->bf16) {   /* fp32: oneDNN reads the floats where they are */
            P.op[2 * j] = x->a; P.ld[2 * j] = x->lda;
            P.op[2 * j + 1] = x->b; P.ld[2 * j + 1] = x->ldb;
            continue;
        }
        for (int o = 0; o < 2; o++) {
            int t = o ? x->tb : x->ta, ld = o ? x->ldb : x->lda;
            int rows = o ? (t ? x->n : x->k) : (t ? x->k : x->m);   /* as stored */
            int cols = o ? (t ? x->k : x->n) : (t ? x->m : x->k);
            const float *src = o ? x->b : x->a;
            const uint16_t *h = NULL;
            if (!(x->bf16 & (o ? GEMM_BF16_B : GEMM_BF16_A)) && (h = shadow_of(src, rows, cols, ld))) {
                P.op[2 * j + o] = h;
                P.ld[2 * j + o] = ld;
                continue;
            }
            for (int u = 0; u < used && !h; u++)
                if (done[u].src == src && done[u].rows == rows && done[u].cols == cols && done[u].ld == ld) h = done[u].dst;
            /* A stored [m, k], cut by rows, read by no other product of the
             * call: each piece converts its own rows (no pass of its own, and
             * the rows are in cache for the product) */
            int own = !h && o == 0 && !x->ta && x->m >= x->n;
            for (int i = 0; i < count && own; i++)
                own = (i == j || g[i].a != src) && g[i].b != src;
            if (own) {
                size_t need = (size_t)rows * cols;
                if (need > g_buf_size[used]) {
                    free(g_buf[used]);
                    g_buf[used] = xaligned(need * sizeof(uint16_t));
                    g_buf_size[used] = need;
                }
                done[used].src = NULL;   /* not shared */
                h = done[used].dst = g_buf[used];
                used++;
                P.deferred[j] = 1;
            }
            if (!h) {
                size_t need = (size_t)rows * cols;
                if (need > g_buf_size[used]) {
                    free(g_buf[used]);
                    g_buf[used] = xaligned(need * sizeof(uint16_t));
                    g_buf_size[used] = need;
                }
                pend[npend].dst = g_buf[used]; pend[npend].src = src;   /* converted below */
                pend[npend].rows = rows; pend[npend].cols = cols; pend[npend++].ld = ld;
                done[used].src = src; done[used].rows = rows; done[used].cols = cols; done[used].ld = ld;
                h = done[used].dst = g_buf[used];
                used++;
            }
            P.op[2 * j + o] = h;
            P.ld[2 * j + o] = cols;
        }
    }
    /* Pieces as ops.c's gemm_many cuts them (see there): along the longer
     * of m and n, in proportion to each product's work, three per thread
     * for one product, at least 128 rows or columns each; one piece per
     * product on one thread or for small work. */
    int want = count >= nt ? count : (count == 1 ? 3 * nt : 2 * nt);
    int whole[MAXOP / 2];
    Prim prims[MAXOP];   /* per product, the shape of a whole piece and of the last one */
    int nprims = 0, refused = 0;
    P.first[0] = 0;
    for (int j = 0; j < count && !refused; j++) {
        const Gemm *x = &g[j];
        P.by_rows[j] = x->m >= x->n;
        P.len[j] = work[j] > 0 ? (P.by_rows[j] ? x->m : x->n) : 0;
        int p = (int)(want * work[j] / (total > 0 ? total : 1) + 0.5);
        if (nt < 2 || total < GEMM_PAR_MIN || !g_pieces) p = 1;
        if (P.len[j] / (p > 0 ? p : 1) < 128) p = P.len[j] / 128;
        if (count == 1 && p < nt && nt > 1 && total >= GEMM_PAR_MIN && g_pieces) p = nt;
        if (p < 1) p = 1;
        if (p > 64) p = 64;
        /* oneDNN 2.6's brgemm kernels (AMX tiles, AVX512_BF16) take plain
         * operands only, rows or columns with no gaps between them; anything
         * else runs on its older gemm:jit (DNNL_VERBOSE=1 shows which). A piece
         * cut across a transposed A (by rows) or across C (by columns: C's
         * rows are longer than the piece's) has gaps, so such a product runs
         * whole, on oneDNN's threads, where it is plain as a whole. On AMX at
         * the Multi30k model's shapes the logits product ran 4x as fast so
         * (doc/precision.md; elsewhere gemm:jit was at times the faster).
         * Not fp32's: its gemm:jit pieces ran the logits product (2,000 x
         * 8,000 x 128, pieces of 1,333 columns) 1.04x BLIS, brgemm whole on
         * one thread 0.82x (AMD Zen 5). */
        whole[j] = x->bf16 && p > 1 && !(P.by_rows[j] && !x->ta) && plain_whole(x, P.ld[2 * j], P.ld[2 * j + 1]);
        if (whole[j]) p = 1;
        P.piece[j] = P.len[j] ? (P.len[j] + p - 1) / p : 1;
        int q = P.len[j] ? (P.len[j] + P.piece[j] - 1) / P.piece[j] : 0;
        P.first[j + 1] = P.first[j] + (whole[j] ? 0 : q);
        P.full[j] = P.last[j] = NULL;
        if (!q) continue;
        for (int e = 0; e < 2 && !refused; e++) {
            int cnt = e ? P.len[j] - (q - 1) * P.piece[j] : P.piece[j];
            if (e && cnt == P.piece[j]) { P.last[j] = P.full[j]; break; }   /* the same shape */
            Prim *pr = &prims[nprims];
            refused = prim_2d(pr, !x->bf16, x->ta, x->tb, P.by_rows[j] ? cnt : x->m, P.by_rows[j] ? x->n : cnt, x->k,
                              P.ld[2 * j], P.ld[2 * j + 1], x->ldc, x->beta != 0.0f, x->bias != NULL) != 0;
            if (refused) break;
            nprims++;
            if (e) P.last[j] = pr; else P.full[j] = pr;
        }
    }
    if (refused) {
        for (int i = 0; i < nprims; i++) prim_free(&prims[i]);
        return -1;
    }
    int fail = 0, np = P.first[count];
    size_t scratch = 0;   /* the largest scratchpad of this call's primitives, for each thread */
    for (int i = 0; i < nprims; i++)
        if (prims[i].scratch_bytes > scratch) scratch = prims[i].scratch_bytes;
    scratch_reserve(nt, scratch);
    /* the shared conversions and the pieces in one parallel region (one
     * barrier between them instead of a region each); one piece or one
     * thread: the conversions (threaded where there are threads), then the
     * pieces on this thread, with no region (parallel.h) */
    enum { CB = 64 };   /* rows per block of conversion */
    int cfirst[MAXOP + 1];
    cfirst[0] = 0;
    for (int u = 0; u < npend; u++) cfirst[u + 1] = cfirst[u] + (pend[u].rows + CB - 1) / CB;
    /* prof.h's threads waiting: each thread adds the time it converted and
     * ran pieces (prof_busy), and the conversions apart (prof_convert);
     * oneDNN's own threads (the whole ones) count all busy */
    if (np <= 1 || nt < 2) {
        double conv = 0.0;
        for (int u = 0; u < npend; u++) conv += convert(pend[u].dst, pend[u].src, pend[u].rows, pend[u].cols, pend[u].ld);
        double t0 = prof_on ? prof_clock() : 0.0;
        for (int q = 0; q < np; q++) fail |= run_piece(&P, q, 0);
        if (prof_on) {
            if (npend) prof_convert(conv);
            prof_busy(conv + prof_clock() - t0);
        }
    } else {
        #pragma omp parallel num_threads(nt) reduction(|:fail)
        {
            double t0 = prof_on ? prof_clock() : 0.0;
            #pragma omp for schedule(static) nowait
            for (int b = 0; b < cfirst[npend]; b++) {
                int u = 0;
                while (b >= cfirst[u + 1]) u++;
                int r0 = (b - cfirst[u]) * CB, nr = pend[u].rows - r0 < CB ? pend[u].rows - r0 : CB;
                convert_rows(pend[u].dst + (size_t)r0 * pend[u].cols, pend[u].src + (size_t)r0 * pend[u].ld, nr,
                             pend[u].cols, pend[u].ld);
            }
            if (prof_on) {
                double dt = prof_clock() - t0;
                prof_busy(dt);
                if (npend) prof_convert(dt);
            }
            #pragma omp barrier
            int tid = omp_get_thread_num() < MAXT ? omp_get_thread_num() : 0;
            #pragma omp for schedule(dynamic, 1)
            for (int q = 0; q < np; q++) {
                double t1 = prof_on ? prof_clock() : 0.0;
                fail |= run_piece(&P, q, tid);
                if (prof_on) prof_busy(prof_clock() - t1);
            }
        }
    }
    for (int j = 0; j < count && !fail; j++) {   /* the whole ones, on oneDNN's threads */
        if (!whole[j]) continue;
        const Gemm *x = &g[j];
        ASSERT(!P.deferred[j]);   /* own rows are cut by rows from a plain A */
        double t0 = prof_on ? prof_clock() : 0.0;
        fail |= prim_run(P.full[j], P.op[2 * j], P.op[2 * j + 1], x->bias, x->c, g_scratch[0]) != 0;
        if (!fail && x->round_c) bf16_round_matrix(x->c, x->ldc, x->c, x->ldc, x->m, x->n);
        if (prof_on) prof_busy(threads_count() * (prof_clock() - t0));
    }
    for (int i = 0; i < nprims; i++) prim_free(&prims[i]);
    if (fail) die("oneDNN: a %s product failed to run (%d products, first %d x %d x %d)", g[0].bf16 ? "bf16" : "fp32", count,
                  g[0].m, g[0].n, g[0].k);
    return 0;
}

void gemm_dnnl_pieces(int on) { g_pieces = on; }

/* ---- int8: u8 x s8 -> s32 on tfm's packed panels (gemm_dnnl.h) ------------
 * A table of primitives for every thread, keyed by (m, n, k), at most
 * I8_KEEP of them, the least recently used one out when a new shape needs
 * its slot; a primitive in use (got and not yet put) stays. Ours on top of
 * oneDNN's own cache because an int8 product of decoding is small: a
 * lookup here costs ~0.1 us, oneDNN's cache ~1.5 us (the matmul's
 * descriptor made again, then the cache's key), as long as an 8 x 256 x
 * 1024 product itself (doc/precision.md). gemm_int8.c rounds the row counts
 * up to a few buckets, so a translation makes tens to a few hundred
 * shapes; a shortlist (decode.c) one more per sentence. oneDNN is made to
 * see one thread (omp_set_num_threads(1) around making and running them, an
 * ICV of the calling task alone): the primitives split no work, whichever
 * context made or runs them. */
typedef struct {
    int m, n, k;     /* the key; m = 0: an empty slot */
    Prim p;          /* p.prim NULL: oneDNN refused the shape (remembered) */
    long used;       /* g_i8_clock when last got */
    int busy;        /* gets not yet put */
    int transient;   /* made outside the table (every slot busy): freed at its last put */
} I8Entry;

enum { I8_KEEP = GEMM_DNNL_I8_KEEP };
static I8Entry g_i8[I8_KEEP];
static long g_i8_clock;
static char g_i8_impl[96];

/* The entry of (m, n, k), made if it is not kept; under the lock. */
static I8Entry *i8_entry(int m, int n, int k) {
    I8Entry *e = NULL, *old = NULL;
    for (int i = 0; i < I8_KEEP && !e; i++) {
        I8Entry *x = &g_i8[i];
        if (x->m == m && x->n == n && x->k == k) e = x;
        else if (!x->busy && (!old || x->used < old->used)) old = x;   /* an empty slot has used 0 */
    }
    if (e) return e;
    if (old) prim_free(&old->p);
    e = old ? old : xcalloc(1, sizeof *e);
    e->transient = !old;
    e->m = m; e->n = n; e->k = k;
    e->busy = 0;
    dnnl_dims_t ad = {m, k}, bd = {k, n}, cd = {m, n};
    if (dnnl_memory_desc_init_by_tag(&e->p.a, 2, ad, dnnl_u8, dnnl_ab) != dnnl_success ||
        dnnl_memory_desc_init_by_tag(&e->p.b, 2, bd, dnnl_s8, dnnl_BA16a64b4a) != dnnl_success ||
        dnnl_memory_desc_init_by_tag(&e->p.c, 2, cd, dnnl_s32, dnnl_ab) != dnnl_success)
        e->p.prim = NULL;
    else
        prim_make(&e->p, 0, 1.0f, g_i8_impl[0] ? NULL : g_i8_impl, sizeof g_i8_impl);
    return e;
}

const void *gemm_dnnl_u8s8_get(int m, int k, int n, size_t *scratch_bytes) {
    ASSERT(m > 0 && n > 0 && k > 0 && k % 64 == 0);
    int threads = omp_get_max_threads();
    I8Entry *e = NULL;
    if (init() != 1) return NULL;
    omp_set_num_threads(1);
    #pragma omp critical(tfm_dnnl_int8)
    {
        e = i8_entry(m, n, k);
        e->used = ++g_i8_clock;
        if (e->p.prim) e->busy++;
        else if (e->transient) { free(e); e = NULL; }
        else e = NULL;
    }
    omp_set_num_threads(threads);
    *scratch_bytes = e ? e->p.scratch_bytes : 0;
    return e;
}

void gemm_dnnl_u8s8_run(const void *prim, int32_t *c, const uint8_t *a, const int8_t *b, void *scratch) {
    const I8Entry *e = prim;
    int threads = omp_get_max_threads();
    omp_set_num_threads(1);
    if (prim_run(&e->p, a, b, NULL, c, scratch)) die("oneDNN: an int8 product failed to run (%d x %d x %d)", e->m, e->n, e->k);
    omp_set_num_threads(threads);
}

void gemm_dnnl_u8s8_put(const void *prim) {
    if (!prim) return;
    I8Entry *e = (I8Entry *)prim;
    #pragma omp critical(tfm_dnnl_int8)
    {
        ASSERT(e->busy > 0);
        if (--e->busy == 0 && e->transient) { prim_free(&e->p); free(e); }
    }
}

int gemm_dnnl_u8s8_kept(void) {
    int n = 0;
    #pragma omp critical(tfm_dnnl_int8)
    for (int i = 0; i < I8_KEEP; i++) n += g_i8[i].m != 0;
    return n;
}

const char *gemm_dnnl_int8_impl(void) {
    if (!g_i8_impl[0]) {   /* a probe of a decoder's shape */
        size_t scratch;
        const void *p = gemm_dnnl_u8s8_get(64, 256, 256, &scratch);
        if (!p) return "oneDNN refused tfm's int8 layout here";
        gemm_dnnl_u8s8_put(p);
    }
    return g_i8_impl;
}

void gemm_dnnl_release(void) {
    for (int i = 0; i < MAXOP; i++) { free(g_buf[i]); g_buf[i] = NULL; g_buf_size[i] = 0; }
    for (int t = 0; t < MAXT; t++) { free(g_scratch[t]); g_scratch[t] = NULL; g_scratch_size[t] = 0; }
    #pragma omp critical(tfm_dnnl_int8)
    for (int i = 0; i < I8_KEEP; i++)
        if (!g_i8[i].busy) {
            prim_free(&g_i8[i].p);
            memset(&g_i8[i], 0, sizeof g_i8[i]);
        }
}

/* ---- batches (the attention core) --------------------------------------------
 * A GemmBatch is a matmul of 4-d tensors [nb, nh, rows, cols] whose strides
 * are the batch's: src A [nb, nh, m, k], weights B [nb, nh, k, n], dst C
 * [nb, nh, m, n]; alpha is oneDNN's output scale (C = alpha * sum, as BLIS's
 * alpha). Made for each prepare call (oneDNN's cache answers the shapes it
 * has seen), freed by gemm_dnnl_batch_free. */
static int batch_make(Prim *p, const GemmBatch *g) {
    dnnl_dims_t adim = {g->nb, g->nh, g->m, g->k}, bdim = {g->nb, g->nh, g->k, g->n}, cdim = {g->nb, g->nh, g->m, g->n};
    dnnl_dims_t ast = {g->as[0], g->as[1], g->ta ? 1 : g->lda, g->ta ? g->lda : 1};
    dnnl_dims_t bst = {g->bs[0], g->bs[1], g->tb ? 1 : g->ldb, g->tb ? g->ldb : 1};
    dnnl_dims_t cst = {g->cs[0], g->cs[1], g->ldc, 1};
    p->prim = NULL;
    p->has_bias = 0;
    dnnl_data_type_t t = g->f32 ? dnnl_f32 : dnnl_bf16;
    if (dnnl_memory_desc_init_by_strides(&p->a, 4, adim, t, ast) != dnnl_success ||
        dnnl_memory_desc_init_by_strides(&p->b, 4, bdim, t, bst) != dnnl_success ||
        dnnl_memory_desc_init_by_strides(&p->c, 4, cdim, dnnl_f32, cst) != dnnl_success)
        return -1;
    return prim_make(p, 0, g->alpha, NULL, 0);
}

int gemm_dnnl_batch_prepare(const GemmBatch *g, int count, const void **prim) {
    if (omp_in_parallel() || init() != 1) return -1;
    int nt = threads_count() < MAXT ? threads_count() : MAXT;
    size_t scratch = 0;
    for (int i = 0; i < count; i++) {
        ASSERT(g[i].m > 0 && g[i].n > 0 && g[i].k > 0 && g[i].nb > 0 && g[i].nh > 0);
        ASSERT(g[i].lda >= (g[i].ta ? g[i].m : g[i].k) && g[i].ldb >= (g[i].tb ? g[i].k : g[i].n) && g[i].ldc >= g[i].n);
        Prim *p = xmalloc(sizeof *p);
        if (batch_make(p, &g[i])) {
            free(p);
            gemm_dnnl_batch_free(prim, i);
            return -1;
        }
        prim[i] = p;
        if (p->scratch_bytes > scratch) scratch = p->scratch_bytes;
    }
    scratch_reserve(nt, scratch);
    return 0;
}

void gemm_dnnl_batch_run(const void *prim, const void *a, const void *b, float *c) {
    const Prim *p = prim;
    int tid = omp_get_thread_num() < MAXT ? omp_get_thread_num() : 0;
    if (prim_run(p, a, b, NULL, c, g_scratch[tid]))
        die("oneDNN: a batch of %s products failed to run (%ld x %ld cells of %ld x %ld x %ld)",
            p->a.data_type == dnnl_f32 ? "fp32" : "bf16", (long)p->c.dims[0],
            (long)p->c.dims[1], (long)p->c.dims[2], (long)p->c.dims[3], (long)p->a.dims[3]);
}

void gemm_dnnl_batch_free(const void **prim, int count) {
    for (int i = 0; i < count; i++) {
        Prim *p = (Prim *)prim[i];
        prim_free(p);
        free(p);
        prim[i] = NULL;
    }
}

#else   /* built without oneDNN (make DNNL=0) */

int gemm_dnnl_many(const Gemm *g, int count) { (void)g; (void)count; (void)shadow_of; return -1; }
void gemm_dnnl_pieces(int on) { (void)on; }
const void *gemm_dnnl_u8s8_get(int m, int k, int n, size_t *scratch_bytes) {
    (void)m; (void)k; (void)n;
    *scratch_bytes = 0;
    return NULL;
}
void gemm_dnnl_u8s8_run(const void *prim, int32_t *c, const uint8_t *a, const int8_t *b, void *scratch) {
    (void)prim; (void)c; (void)a; (void)b; (void)scratch;
    ASSERT(!"gemm_dnnl_u8s8_run without oneDNN: gemm_dnnl_u8s8_get declined");
}
void gemm_dnnl_u8s8_put(const void *prim) { (void)prim; }
int gemm_dnnl_u8s8_kept(void) { return 0; }
int gemm_dnnl_cache(int *from_env) { *from_env = 0; return -1; }
void gemm_dnnl_release(void) {}
void gemm_dnnl_batch_free(const void **prim, int count) { (void)prim; (void)count; }
const char *gemm_dnnl_int8_impl(void) { return "tfm is built without oneDNN"; }
void gemm_dnnl_made(long *count, double *seconds) { *count = 0; *seconds = 0; }
int gemm_dnnl_batch_prepare(const GemmBatch *g, int count, const void **prim) { (void)g; (void)count; (void)prim; return -1; }
void gemm_dnnl_batch_run(const void *prim, const void *a, const void *b, float *c) {
    (void)prim; (void)a; (void)b; (void)c;
    ASSERT(!"gemm_dnnl_batch_run without oneDNN: gemm_dnnl_batch_prepare declined");
}

#endif
