/* gemm_dnnl.c — bf16 products through oneDNN's matmul (see gemm_dnnl.h).
 *
 * A product C [m, n] = beta C + op(A) op(B) (beta 0 or 1) becomes a oneDNN
 * matmul of a bf16 "src" [m, k] and bf16 "weights" [k, n] into an f32 "dst"
 * [m, n], each described by its strides, so tfm's transposes stay strides:
 *   A stored [m, k] (ta 0): strides (lda, 1); stored [k, m] (ta 1): (1, lda)
 *   B stored [k, n] (tb 0): strides (ldb, 1); stored [n, k] (tb 1): (1, ldb)
 * beta = 1 is oneDNN's "sum" post-op (C += the product). A primitive is
 * made per shape and kept (a small cache): making one costs far more than
 * running a small product, and a training run sees few shapes.
 *
 * Conversion: the operands with their GEMM_BF16_* bit are rounded to 16
 * bits into grow-only buffers (vectorised, threaded); an operand two
 * products of one call share is converted once. The others are taken from
 * a registered twin (gemm_dnnl_shadow), or converted likewise. */
#include "gemm_dnnl.h"

#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dispatch.h"
#include "gemm_bf16.h"
#include "parallel.h"
#include "util.h"

static struct { const float *f; const uint16_t *h; size_t n; } g_shadow[4];

void gemm_dnnl_shadow(const float *f, const uint16_t *h, size_t n) {
    int free_slot = -1;
    for (int i = 0; i < 4; i++) {
        if (g_shadow[i].f == f) { g_shadow[i].h = h; g_shadow[i].n = h ? n : 0; if (!h) g_shadow[i].f = NULL; return; }
        if (!g_shadow[i].f && free_slot < 0) free_slot = i;
    }
    if (!h) return;
    ASSERT(free_slot >= 0);   /* a few models at once at most */
    g_shadow[free_slot].f = f; g_shadow[free_slot].h = h; g_shadow[free_slot].n = n;
}

/* The twin of p's buffer holding [rows, cols] with row stride ld, or NULL. */
static const uint16_t *shadow_of(const float *p, int rows, int cols, int ld) {
    for (int i = 0; i < 4; i++) {
        if (!g_shadow[i].f || p < g_shadow[i].f) continue;
        size_t off = (size_t)(p - g_shadow[i].f), span = (size_t)(rows - 1) * ld + cols;
        if (off + span <= g_shadow[i].n) return g_shadow[i].h + off;
    }
    return NULL;
}

#ifdef TFM_DNNL
#include <oneapi/dnnl/dnnl.h>

typedef struct {
    int ta, tb, m, n, k, lda, ldb, ldc, sum;   /* the key */
    dnnl_primitive_t prim;
    dnnl_memory_t a, b, c;
    dnnl_memory_desc_t scratch;   /* its scratchpad, which the caller provides (see primitive()) */
    size_t scratch_bytes;
} Entry;

enum { CACHE = 64 };
static Entry g_cache[CACHE];
static int g_cache_next;
static dnnl_engine_t g_engine;
static dnnl_stream_t g_stream;
static int g_init;   /* 0 not tried, 1 ready, -1 failed */
enum { MAXT = 64 };
static dnnl_stream_t g_streams[MAXT];   /* one per thread of ours */
static int g_pieces = 1;
static void *g_scratch[MAXT];          /* one scratchpad per thread of ours, grow-only */
static size_t g_scratch_size[MAXT];

static long g_made;          /* primitives asked of oneDNN, and the seconds that took */
static double g_made_seconds;
static void made(double t0) {
    double dt = now_seconds() - t0;
    #pragma omp atomic
    g_made++;
    #pragma omp atomic
    g_made_seconds += dt;
}

void gemm_dnnl_made(long *count, double *seconds) { *count = g_made; *seconds = g_made_seconds; }

static int init(void) {
    if (g_init) return g_init;
    g_init = -1;
    if (dnnl_engine_create(&g_engine, dnnl_cpu, 0) != dnnl_success) return -1;
    if (dnnl_stream_create(&g_stream, g_engine, dnnl_stream_default_flags) != dnnl_success) return -1;
    return g_init = 1;
}

/* The primitive for key e (made on first use), or NULL if oneDNN refuses it. */
static Entry *primitive(const Entry *key) {
    for (int i = 0; i < CACHE; i++)
        if (g_cache[i].prim && !memcmp(&g_cache[i], key, offsetof(Entry, prim))) return &g_cache[i];
    dnnl_memory_desc_t ad, bd, cd;
    dnnl_dims_t adim = {key->m, key->k}, bdim = {key->k, key->n}, cdim = {key->m, key->n};
    dnnl_dims_t ast = {key->ta ? 1 : key->lda, key->ta ? key->lda : 1};
    dnnl_dims_t bst = {key->tb ? 1 : key->ldb, key->tb ? key->ldb : 1};
    dnnl_dims_t cst = {key->ldc, 1};
    dnnl_matmul_desc_t md;
    dnnl_primitive_attr_t attr = NULL;
    dnnl_post_ops_t po = NULL;
    dnnl_primitive_desc_t pd = NULL;
    dnnl_primitive_t prim = NULL;
    int ok = dnnl_memory_desc_init_by_strides(&ad, 2, adim, dnnl_bf16, ast) == dnnl_success &&
             dnnl_memory_desc_init_by_strides(&bd, 2, bdim, dnnl_bf16, bst) == dnnl_success &&
             dnnl_memory_desc_init_by_strides(&cd, 2, cdim, dnnl_f32, cst) == dnnl_success &&
             dnnl_matmul_desc_init(&md, &ad, &bd, NULL, &cd) == dnnl_success &&
             dnnl_primitive_attr_create(&attr) == dnnl_success;
    /* The scratchpad is ours: a primitive's own (the library's default) is
     * shared by every execution of it, and our pieces run one primitive on
     * several threads at once (found as a race: wrong sums, now and then) */
    ok = ok && dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user) == dnnl_success;
    if (ok && key->sum)
        ok = dnnl_post_ops_create(&po) == dnnl_success && dnnl_post_ops_append_sum(po, 1.0f) == dnnl_success &&
             dnnl_primitive_attr_set_post_ops(attr, po) == dnnl_success;
    double t0 = now_seconds();
    ok = ok && dnnl_primitive_desc_create(&pd, &md, attr, g_engine, NULL) == dnnl_success &&
         dnnl_primitive_create(&prim, pd) == dnnl_success;
    made(t0);
    dnnl_memory_desc_t scratch;
    memset(&scratch, 0, sizeof scratch);
    if (ok) {
        const dnnl_memory_desc_t *smd = dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
        if (smd) scratch = *smd;
    }
    if (po) dnnl_post_ops_destroy(po);
    if (attr) dnnl_primitive_attr_destroy(attr);
    if (pd) dnnl_primitive_desc_destroy(pd);
    if (!ok) {
        if (prim) dnnl_primitive_destroy(prim);
        return NULL;
    }
    Entry *e = &g_cache[g_cache_next];
    g_cache_next = (g_cache_next + 1) % CACHE;
    if (e->prim) {
        dnnl_primitive_destroy(e->prim);
        dnnl_memory_destroy(e->a); dnnl_memory_destroy(e->b); dnnl_memory_destroy(e->c);
    }
    *e = *key;
    e->prim = prim;
    e->scratch = scratch;
    e->scratch_bytes = dnnl_memory_desc_get_size(&scratch);
    /* memory objects without buffers: each call sets its pointers */
    if (dnnl_memory_create(&e->a, &ad, g_engine, DNNL_MEMORY_NONE) != dnnl_success ||
        dnnl_memory_create(&e->b, &bd, g_engine, DNNL_MEMORY_NONE) != dnnl_success ||
        dnnl_memory_create(&e->c, &cd, g_engine, DNNL_MEMORY_NONE) != dnnl_success)
        die("oneDNN: out of memory making the memory objects of a %d x %d x %d product", key->m, key->n, key->k);
    return e;
}

/* Grow-only 16-bit buffers for converted operands (serial code only). */
enum { MAXOP = 8 };
static uint16_t *g_buf[MAXOP];
static size_t g_buf_size[MAXOP];

static void convert(uint16_t *dst, const float *src, int rows, int cols, int ld) {
    #pragma omp parallel for schedule(static) if ((size_t)rows * cols >= ((size_t)1 << 16) && !omp_in_parallel())
    for (int i = 0; i < rows; i++) {
        const float *s = src + (size_t)i * ld;
        uint16_t *d = dst + (size_t)i * cols;
        #pragma omp simd
        for (int j = 0; j < cols; j++) d[j] = bf16_from_float(s[j]);
    }
}

int gemm_dnnl_many(const Gemm *g, int count) {
    if (omp_in_parallel() || count > MAXOP / 2 || init() != 1) return -1;
    for (int j = 0; j < count; j++)
        if (g[j].alpha != 1.0f || (g[j].beta != 0.0f && g[j].beta != 1.0f)) return -1;
    int nt = threads_count();
    if (nt > MAXT) nt = MAXT;
    for (int t = 0; t < nt; t++)
        if (!g_streams[t] && dnnl_stream_create(&g_streams[t], g_engine, dnnl_stream_default_flags) != dnnl_success) return -1;
    /* the operands in 16 bits, then the primitives of every piece, so that
     * a refusal leaves C unwritten */
    const uint16_t *op16[MAXOP];
    int ld16[MAXOP];
    struct { const float *src; int rows, cols, ld; const uint16_t *dst; } done[MAXOP];
    int used = 0;
    double work[MAXOP / 2], total = 0;
    int deferred[MAXOP / 2];
    struct { uint16_t *dst; const float *src; int rows, cols, ld; } pend[MAXOP];   /* conversions to make */
    int npend = 0;
    for (int j = 0; j < count; j++) {
        const Gemm *x = &g[j];
        work[j] = 0;
        deferred[j] = 0;
        if (x->m <= 0 || x->n <= 0) continue;   /* an empty C: nothing to do */
        if (x->k == 0) return -1;               /* C = beta C: the caller's kernel does it */
        ASSERT(x->lda >= (x->ta ? x->m : x->k) && x->ldb >= (x->tb ? x->k : x->n) && x->ldc >= x->n && x->k > 0);
        total += work[j] = (double)x->m * x->n * x->k;
        for (int o = 0; o < 2; o++) {
            int t = o ? x->tb : x->ta, ld = o ? x->ldb : x->lda;
            int rows = o ? (t ? x->n : x->k) : (t ? x->k : x->m);   /* as stored */
            int cols = o ? (t ? x->k : x->n) : (t ? x->m : x->k);
            const float *src = o ? x->b : x->a;
            const uint16_t *h = NULL;
            if (!(x->bf16 & (o ? GEMM_BF16_B : GEMM_BF16_A)) && (h = shadow_of(src, rows, cols, ld))) {
                op16[2 * j + o] = h;
                ld16[2 * j + o] = ld;
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
                deferred[j] = 1;
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
            op16[2 * j + o] = h;
            ld16[2 * j + o] = cols;
        }
    }
    /* Pieces as ops.c's gemm_many cuts them (see there): along the longer
     * of m and n, in proportion to each product's work, three per thread
     * for one product, at least 128 rows or columns each; one piece per
     * product on one thread or for small work. */
    int want = count >= nt ? count : (count == 1 ? 3 * nt : 2 * nt);
    int first[MAXOP / 2 + 1], piece[MAXOP / 2], by_rows[MAXOP / 2], len[MAXOP / 2];
    Entry *full[MAXOP / 2], *last[MAXOP / 2];
    first[0] = 0;
    for (int j = 0; j < count; j++) {
        const Gemm *x = &g[j];
        by_rows[j] = x->m >= x->n;
        len[j] = work[j] > 0 ? (by_rows[j] ? x->m : x->n) : 0;
        int p = (int)(want * work[j] / (total > 0 ? total : 1) + 0.5);
        if (nt < 2 || total < GEMM_PAR_MIN || !g_pieces) p = 1;
        if (len[j] / (p > 0 ? p : 1) < 128) p = len[j] / 128;
        if (count == 1 && p < nt && nt > 1 && total >= GEMM_PAR_MIN && g_pieces) p = nt;
        if (p < 1) p = 1;
        if (p > 64) p = 64;
        piece[j] = len[j] ? (len[j] + p - 1) / p : 1;
        int q = len[j] ? (len[j] + piece[j] - 1) / piece[j] : 0;
        first[j + 1] = first[j] + q;
        full[j] = last[j] = NULL;
        if (!q) continue;
        for (int e = 0; e < 2; e++) {   /* the shape of a whole piece and of the last one */
            int cnt = e ? len[j] - (q - 1) * piece[j] : piece[j];
            Entry key = {x->ta, x->tb, by_rows[j] ? cnt : x->m, by_rows[j] ? x->n : cnt, x->k, ld16[2 * j],
                         ld16[2 * j + 1], x->ldc, x->beta != 0.0f || x->bias, NULL, NULL, NULL, NULL, {0}, 0};
            Entry *en = primitive(&key);
            if (!en) return -1;
            if (e) last[j] = en; else full[j] = en;
        }
    }
    int fail = 0, np = first[count];
    size_t scratch = 0;   /* the largest scratchpad of this call's primitives, for each thread */
    for (int j = 0; j < count; j++)
        for (int e = 0; e < 2 && first[j + 1] > first[j]; e++) {
            size_t sz = (e ? last[j] : full[j])->scratch_bytes;
            if (sz > scratch) scratch = sz;
        }
    for (int t = 0; t < nt; t++)
        if (scratch > g_scratch_size[t]) {
            free(g_scratch[t]);
            g_scratch[t] = xaligned(scratch);
            g_scratch_size[t] = scratch;
        }
    /* the shared conversions and the pieces in one parallel region (one
     * barrier between them instead of a region each); one piece: the
     * conversions threaded, then oneDNN on its own threads */
    enum { CB = 64 };   /* rows per block of conversion */
    int cfirst[MAXOP + 1];
    cfirst[0] = 0;
    for (int u = 0; u < npend; u++) cfirst[u + 1] = cfirst[u] + (pend[u].rows + CB - 1) / CB;
    if (np <= 1)
        for (int u = 0; u < npend; u++) convert(pend[u].dst, pend[u].src, pend[u].rows, pend[u].cols, pend[u].ld);
    #pragma omp parallel num_threads(nt) if (np > 1) reduction(|:fail)
    {
        if (np > 1) {
            #pragma omp for schedule(static)
            for (int b = 0; b < cfirst[npend]; b++) {
                int u = 0;
                while (b >= cfirst[u + 1]) u++;
                int r0 = (b - cfirst[u]) * CB, nr = pend[u].rows - r0 < CB ? pend[u].rows - r0 : CB;
                convert(pend[u].dst + (size_t)r0 * pend[u].cols, pend[u].src + (size_t)r0 * pend[u].ld, nr, pend[u].cols,
                        pend[u].ld);
            }
        }
        #pragma omp for schedule(dynamic, 1)
        for (int q = 0; q < np; q++) {
            int j = 0;
            while (q >= first[j + 1]) j++;
            const Gemm *x = &g[j];
            int i0 = (q - first[j]) * piece[j], cnt = len[j] - i0 < piece[j] ? len[j] - i0 : piece[j];
            Entry *e = q == first[j + 1] - 1 ? last[j] : full[j];
            const uint16_t *a = op16[2 * j], *b = op16[2 * j + 1];
            float *c = x->c;
            if (by_rows[j]) { a += x->ta ? (size_t)i0 : (size_t)i0 * ld16[2 * j]; c += (size_t)i0 * x->ldc; }
            else { b += x->tb ? (size_t)i0 * ld16[2 * j + 1] : (size_t)i0; c += i0; }
            if (deferred[j])   /* this piece's rows of A (stored [m, k], by rows) */
                convert((uint16_t *)a, x->a + (size_t)i0 * x->lda, cnt, x->k, x->lda);
            if (x->bias) {     /* this piece's block of C = the bias, then C += the product */
                if (by_rows[j]) gemm_fill_bias(c, x->ldc, x->bias, cnt, x->n);
                else gemm_fill_bias(c, x->ldc, x->bias + i0, x->m, cnt);
            }
            int tid = omp_get_thread_num() < MAXT ? omp_get_thread_num() : 0;
            dnnl_memory_t ma = NULL, mb = NULL, mc = NULL, ms = NULL;
            const dnnl_memory_desc_t *ad, *bd, *cd;
            int ok = dnnl_memory_get_memory_desc(e->a, &ad) == dnnl_success && dnnl_memory_get_memory_desc(e->b, &bd) == dnnl_success &&
                     dnnl_memory_get_memory_desc(e->c, &cd) == dnnl_success &&
                     dnnl_memory_create(&ma, ad, g_engine, (void *)a) == dnnl_success &&
                     dnnl_memory_create(&mb, bd, g_engine, (void *)b) == dnnl_success &&
                     dnnl_memory_create(&mc, cd, g_engine, c) == dnnl_success &&
                     dnnl_memory_create(&ms, &e->scratch, g_engine, g_scratch[tid]) == dnnl_success;
            dnnl_stream_t st = g_streams[tid];
            dnnl_exec_arg_t args[4] = {{DNNL_ARG_SRC, ma}, {DNNL_ARG_WEIGHTS, mb}, {DNNL_ARG_DST, mc}, {DNNL_ARG_SCRATCHPAD, ms}};
            ok = ok && dnnl_primitive_execute(e->prim, st, 4, args) == dnnl_success && dnnl_stream_wait(st) == dnnl_success;
            if (ma) dnnl_memory_destroy(ma);
            if (mb) dnnl_memory_destroy(mb);
            if (mc) dnnl_memory_destroy(mc);
            if (ms) dnnl_memory_destroy(ms);
            fail |= !ok;
        }
    }
    if (fail) die("oneDNN: a bf16 product failed to run (%d products, first %d x %d x %d)", count, g[0].m, g[0].n, g[0].k);
    return 0;
}

void gemm_dnnl_pieces(int on) { g_pieces = on; }

/* ---- int8: u8 x s8 -> s32 on tfm's packed panels (gemm_dnnl.h) ------------
 * One table of primitives for every thread, keyed by (m, n, k), open
 * addressing, never evicted: gemm_int8.c rounds the row counts up to a few
 * buckets, so a translation makes tens to a few hundred (0.1 ms each, a
 * JIT compile; oneDNN's own cache would answer in ~4 us, as long as a
 * small product). Each thread runs a primitive with its own stream and
 * scratchpad. oneDNN is made to see one thread (omp_set_num_threads(1)
 * around the calls, an ICV of the calling task alone): the primitives
 * split no work, whichever context made or runs them. */
typedef struct {
    int m, n, k;   /* the key; m = 0: an empty slot */
    dnnl_primitive_t prim;
    dnnl_memory_desc_t a, b, c, scratch;
    size_t scratch_bytes;
} I8Entry;

enum { I8_SLOTS = 2048 };
static I8Entry g_i8[I8_SLOTS];
static int g_i8_used;
static char g_i8_impl[96];
static _Thread_local dnnl_stream_t t_stream;
static _Thread_local void *t_scratch;
static _Thread_local size_t t_scratch_size;

/* The primitive for (m, n, k), made on first use; NULL when oneDNN refuses
 * it or the table is full. Called under the lock. */
static I8Entry *i8_primitive(int m, int n, int k) {
    unsigned h = ((unsigned)m * 2654435761u) ^ ((unsigned)n * 40503u) ^ ((unsigned)k * 2246822519u);
    for (int probe = 0; probe < I8_SLOTS; probe++) {
        I8Entry *e = &g_i8[(h + (unsigned)probe) % I8_SLOTS];
        if (e->m == m && e->n == n && e->k == k) return e->prim ? e : NULL;
        if (e->m) continue;
        if (2 * g_i8_used >= I8_SLOTS) return NULL;   /* half full: far more shapes than the buckets make */
        dnnl_dims_t ad = {m, k}, bd = {k, n}, cd = {m, n};
        dnnl_matmul_desc_t md;
        dnnl_primitive_attr_t attr = NULL;
        dnnl_primitive_desc_t pd = NULL;
        int ok = dnnl_memory_desc_init_by_tag(&e->a, 2, ad, dnnl_u8, dnnl_ab) == dnnl_success &&
                 dnnl_memory_desc_init_by_tag(&e->b, 2, bd, dnnl_s8, dnnl_BA16a64b4a) == dnnl_success &&
                 dnnl_memory_desc_init_by_tag(&e->c, 2, cd, dnnl_s32, dnnl_ab) == dnnl_success &&
                 dnnl_matmul_desc_init(&md, &e->a, &e->b, NULL, &e->c) == dnnl_success &&
                 dnnl_primitive_attr_create(&attr) == dnnl_success &&
                 dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user) == dnnl_success;
        double t0 = now_seconds();
        ok = ok && dnnl_primitive_desc_create(&pd, &md, attr, g_engine, NULL) == dnnl_success &&
             dnnl_primitive_create(&e->prim, pd) == dnnl_success;
        made(t0);
        if (ok) {
            const dnnl_memory_desc_t *smd = dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
            if (smd) e->scratch = *smd;
            e->scratch_bytes = dnnl_memory_desc_get_size(&e->scratch);
            const char *impl = NULL;
            if (!g_i8_impl[0] && dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl) == dnnl_success && impl)
                snprintf(g_i8_impl, sizeof g_i8_impl, "%s", impl);
        } else {
            e->prim = NULL;   /* remembered as refused */
        }
        if (attr) dnnl_primitive_attr_destroy(attr);
        if (pd) dnnl_primitive_desc_destroy(pd);
        e->m = m; e->n = n; e->k = k;
        g_i8_used++;
        return e->prim ? e : NULL;
    }
    return NULL;
}

int gemm_dnnl_u8s8(int32_t *c, const uint8_t *a, int m, int k, const int8_t *b, int n) {
    ASSERT(m > 0 && n > 0 && k > 0 && k % 64 == 0);
    int threads = omp_get_max_threads(), fail = 0;
    omp_set_num_threads(1);
    I8Entry *e = NULL;
    #pragma omp critical(tfm_dnnl_int8)
    {
        if (init() == 1) e = i8_primitive(m, n, k);
        if (e && !t_stream && dnnl_stream_create(&t_stream, g_engine, dnnl_stream_default_flags) != dnnl_success) e = NULL;
    }
    if (!e) fail = 1;
    if (!fail && e->scratch_bytes > t_scratch_size) {
        free(t_scratch);
        t_scratch = xaligned(e->scratch_bytes);
        t_scratch_size = e->scratch_bytes;
    }
    dnnl_memory_t ma = NULL, mb = NULL, mc = NULL, ms = NULL;
    int ok = !fail && dnnl_memory_create(&ma, &e->a, g_engine, (void *)a) == dnnl_success &&
             dnnl_memory_create(&mb, &e->b, g_engine, (void *)b) == dnnl_success &&
             dnnl_memory_create(&mc, &e->c, g_engine, c) == dnnl_success &&
             dnnl_memory_create(&ms, &e->scratch, g_engine, t_scratch) == dnnl_success;
    if (ok) {
        dnnl_exec_arg_t args[4] = {{DNNL_ARG_SRC, ma}, {DNNL_ARG_WEIGHTS, mb}, {DNNL_ARG_DST, mc}, {DNNL_ARG_SCRATCHPAD, ms}};
        if (dnnl_primitive_execute(e->prim, t_stream, 4, args) != dnnl_success || dnnl_stream_wait(t_stream) != dnnl_success)
            die("oneDNN: an int8 product failed to run (%d x %d x %d)", m, n, k);
    }
    if (ma) dnnl_memory_destroy(ma);
    if (mb) dnnl_memory_destroy(mb);
    if (mc) dnnl_memory_destroy(mc);
    if (ms) dnnl_memory_destroy(ms);
    omp_set_num_threads(threads);
    return ok ? 0 : -1;
}

const char *gemm_dnnl_int8_impl(void) {
    static int8_t w[256 * 256];   /* zeros: a probe of a decoder's shape, its sums unread */
    static uint8_t u[64 * 256];
    static int32_t c[64 * 256];
    if (!g_i8_impl[0] && gemm_dnnl_u8s8(c, u, 64, 256, w, 256) < 0) return "oneDNN refused tfm's int8 layout here";
    return g_i8_impl;
}

/* ---- batches (the attention core) --------------------------------------------
 * A GemmBatch is a matmul of 4-d tensors [nb, nh, rows, cols] whose strides
 * are the batch's: src A [nb, nh, m, k], weights B [nb, nh, k, n], dst C
 * [nb, nh, m, n]; alpha is oneDNN's output scale (C = alpha * sum, as BLIS's
 * alpha). Their own cache, least recently used out: the primitives one
 * prepare call returns are all stamped with its epoch and none of them is
 * evicted by another of the same call. */
typedef struct {
    GemmBatch key;
    dnnl_primitive_t prim;
    dnnl_memory_desc_t ad, bd, cd, scratch;
    size_t scratch_bytes;
    long stamp;
} BatchEntry;

enum { BCACHE = 32 };
static BatchEntry g_bcache[BCACHE];
static long g_epoch;

static int batch_make(BatchEntry *e, const GemmBatch *g) {
    dnnl_dims_t adim = {g->nb, g->nh, g->m, g->k}, bdim = {g->nb, g->nh, g->k, g->n}, cdim = {g->nb, g->nh, g->m, g->n};
    dnnl_dims_t ast = {g->as[0], g->as[1], g->ta ? 1 : g->lda, g->ta ? g->lda : 1};
    dnnl_dims_t bst = {g->bs[0], g->bs[1], g->tb ? 1 : g->ldb, g->tb ? g->ldb : 1};
    dnnl_dims_t cst = {g->cs[0], g->cs[1], g->ldc, 1};
    dnnl_matmul_desc_t md;
    dnnl_primitive_attr_t attr = NULL;
    dnnl_primitive_desc_t pd = NULL;
    dnnl_primitive_t prim = NULL;
    float alpha = g->alpha;
    int ok = dnnl_memory_desc_init_by_strides(&e->ad, 4, adim, dnnl_bf16, ast) == dnnl_success &&
             dnnl_memory_desc_init_by_strides(&e->bd, 4, bdim, dnnl_bf16, bst) == dnnl_success &&
             dnnl_memory_desc_init_by_strides(&e->cd, 4, cdim, dnnl_f32, cst) == dnnl_success &&
             dnnl_matmul_desc_init(&md, &e->ad, &e->bd, NULL, &e->cd) == dnnl_success &&
             dnnl_primitive_attr_create(&attr) == dnnl_success &&
             dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user) == dnnl_success &&   /* ours, per thread */
             (alpha == 1.0f || dnnl_primitive_attr_set_output_scales(attr, 1, 0, &alpha) == dnnl_success);
    double t0 = now_seconds();
    ok = ok && dnnl_primitive_desc_create(&pd, &md, attr, g_engine, NULL) == dnnl_success &&
         dnnl_primitive_create(&prim, pd) == dnnl_success;
    made(t0);
    memset(&e->scratch, 0, sizeof e->scratch);
    if (ok) {
        const dnnl_memory_desc_t *smd = dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
        if (smd) e->scratch = *smd;
    }
    if (attr) dnnl_primitive_attr_destroy(attr);
    if (pd) dnnl_primitive_desc_destroy(pd);
    if (!ok) {
        if (prim) dnnl_primitive_destroy(prim);
        return -1;
    }
    e->key = *g;
    e->prim = prim;
    e->scratch_bytes = dnnl_memory_desc_get_size(&e->scratch);
    return 0;
}

static int batch_same(const GemmBatch *x, const GemmBatch *y) {   /* field by field: padding bytes may differ */
    return x->ta == y->ta && x->tb == y->tb && x->m == y->m && x->n == y->n && x->k == y->k && x->alpha == y->alpha &&
           x->nb == y->nb && x->nh == y->nh && x->as[0] == y->as[0] && x->as[1] == y->as[1] && x->bs[0] == y->bs[0] &&
           x->bs[1] == y->bs[1] && x->cs[0] == y->cs[0] && x->cs[1] == y->cs[1] && x->lda == y->lda && x->ldb == y->ldb &&
           x->ldc == y->ldc;
}

int gemm_dnnl_batch_prepare(const GemmBatch *g, int count, const void **prim) {
    ASSERT(count <= BCACHE);
    if (omp_in_parallel() || init() != 1) return -1;
    int nt = threads_count() < MAXT ? threads_count() : MAXT;
    for (int t = 0; t < nt; t++)
        if (!g_streams[t] && dnnl_stream_create(&g_streams[t], g_engine, dnnl_stream_default_flags) != dnnl_success) return -1;
    g_epoch++;
    size_t scratch = 0;
    for (int i = 0; i < count; i++) {
        ASSERT(g[i].m > 0 && g[i].n > 0 && g[i].k > 0 && g[i].nb > 0 && g[i].nh > 0);
        ASSERT(g[i].lda >= (g[i].ta ? g[i].m : g[i].k) && g[i].ldb >= (g[i].tb ? g[i].k : g[i].n) && g[i].ldc >= g[i].n);
        BatchEntry *e = NULL, *old = NULL;
        for (int j = 0; j < BCACHE && !e; j++) {
            BatchEntry *x = &g_bcache[j];
            if (x->prim && batch_same(&x->key, &g[i])) e = x;
            else if (!old || (!x->prim && old->prim) || (x->prim && old->prim && x->stamp < old->stamp)) old = x;
        }
        if (!e) {
            ASSERT(old->stamp != g_epoch);   /* count <= BCACHE: one of this call's is never the oldest */
            if (old->prim) dnnl_primitive_destroy(old->prim);
            old->prim = NULL;
            if (batch_make(old, &g[i])) return -1;
            e = old;
        }
        e->stamp = g_epoch;
        prim[i] = e;
        if (e->scratch_bytes > scratch) scratch = e->scratch_bytes;
    }
    for (int t = 0; t < nt; t++)
        if (scratch > g_scratch_size[t]) {
            free(g_scratch[t]);
            g_scratch[t] = xaligned(scratch);
            g_scratch_size[t] = scratch;
        }
    return 0;
}

void gemm_dnnl_batch_run(const void *prim, const uint16_t *a, const uint16_t *b, float *c) {
    const BatchEntry *e = prim;
    int tid = omp_get_thread_num() < MAXT ? omp_get_thread_num() : 0;
    dnnl_memory_t ma = NULL, mb = NULL, mc = NULL, ms = NULL;
    int ok = dnnl_memory_create(&ma, &e->ad, g_engine, (void *)a) == dnnl_success &&
             dnnl_memory_create(&mb, &e->bd, g_engine, (void *)b) == dnnl_success &&
             dnnl_memory_create(&mc, &e->cd, g_engine, c) == dnnl_success &&
             dnnl_memory_create(&ms, &e->scratch, g_engine, g_scratch[tid]) == dnnl_success;
    dnnl_exec_arg_t args[4] = {{DNNL_ARG_SRC, ma}, {DNNL_ARG_WEIGHTS, mb}, {DNNL_ARG_DST, mc}, {DNNL_ARG_SCRATCHPAD, ms}};
    ok = ok && dnnl_primitive_execute(e->prim, g_streams[tid], 4, args) == dnnl_success &&
         dnnl_stream_wait(g_streams[tid]) == dnnl_success;
    if (ma) dnnl_memory_destroy(ma);
    if (mb) dnnl_memory_destroy(mb);
    if (mc) dnnl_memory_destroy(mc);
    if (ms) dnnl_memory_destroy(ms);
    if (!ok)
        die("oneDNN: a batch of bf16 products failed to run (%d x %d cells of %d x %d x %d)", e->key.nb, e->key.nh,
            e->key.m, e->key.n, e->key.k);
}

#else   /* built without oneDNN (make DNNL=0) */

int gemm_dnnl_many(const Gemm *g, int count) { (void)g; (void)count; (void)shadow_of; return -1; }
void gemm_dnnl_pieces(int on) { (void)on; }
int gemm_dnnl_u8s8(int32_t *c, const uint8_t *a, int m, int k, const int8_t *b, int n) {
    (void)c; (void)a; (void)m; (void)k; (void)b; (void)n;
    return -1;
}
const char *gemm_dnnl_int8_impl(void) { return "tfm is built without oneDNN"; }
void gemm_dnnl_made(long *count, double *seconds) { *count = 0; *seconds = 0; }
int gemm_dnnl_batch_prepare(const GemmBatch *g, int count, const void **prim) { (void)g; (void)count; (void)prim; return -1; }
void gemm_dnnl_batch_run(const void *prim, const uint16_t *a, const uint16_t *b, float *c) {
    (void)prim; (void)a; (void)b; (void)c;
    ASSERT(!"gemm_dnnl_batch_run without oneDNN: gemm_dnnl_batch_prepare declined");
}

#endif
