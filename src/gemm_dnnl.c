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
#include <stdlib.h>
#include <string.h>

#include "gemm_bf16.h"
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

int gemm_dnnl_built(void) { return 1; }

typedef struct {
    int ta, tb, m, n, k, lda, ldb, ldc, sum;   /* the key */
    dnnl_primitive_t prim;
    dnnl_memory_t a, b, c;
} Entry;

enum { CACHE = 64 };
static Entry g_cache[CACHE];
static int g_cache_next;
static dnnl_engine_t g_engine;
static dnnl_stream_t g_stream;
static int g_init;   /* 0 not tried, 1 ready, -1 failed */

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
    if (ok && key->sum)
        ok = dnnl_post_ops_create(&po) == dnnl_success && dnnl_post_ops_append_sum(po, 1.0f) == dnnl_success &&
             dnnl_primitive_attr_set_post_ops(attr, po) == dnnl_success;
    ok = ok && dnnl_primitive_desc_create(&pd, &md, attr, g_engine, NULL) == dnnl_success &&
         dnnl_primitive_create(&prim, pd) == dnnl_success;
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
    #pragma omp parallel for schedule(static) if ((size_t)rows * cols >= ((size_t)1 << 16))
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
    /* the primitives first, so that a refusal leaves nothing written */
    Entry *ent[MAXOP / 2];
    const uint16_t *op16[MAXOP];
    int ld16[MAXOP];
    struct { const float *src; int rows, cols, ld; const uint16_t *dst; } done[MAXOP];
    int used = 0;
    for (int j = 0; j < count; j++) {
        const Gemm *x = &g[j];
        ent[j] = NULL;
        if (x->m <= 0 || x->n <= 0) continue;   /* an empty C: nothing to do */
        if (x->k == 0) return -1;               /* C = beta C: the caller's kernel does it */
        ASSERT(x->lda >= (x->ta ? x->m : x->k) && x->ldb >= (x->tb ? x->k : x->n) && x->ldc >= x->n && x->k > 0);
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
            if (!h) {
                size_t need = (size_t)rows * cols;
                if (need > g_buf_size[used]) {
                    free(g_buf[used]);
                    g_buf[used] = xaligned(need * sizeof(uint16_t));
                    g_buf_size[used] = need;
                }
                convert(g_buf[used], src, rows, cols, ld);
                done[used].src = src; done[used].rows = rows; done[used].cols = cols; done[used].ld = ld;
                h = done[used].dst = g_buf[used];
                used++;
            }
            op16[2 * j + o] = h;
            ld16[2 * j + o] = cols;
        }
        Entry key = {x->ta, x->tb, x->m, x->n, x->k, ld16[2 * j], ld16[2 * j + 1], x->ldc, x->beta != 0.0f, NULL, NULL, NULL, NULL};
        if (!(ent[j] = primitive(&key))) return -1;
    }
    for (int j = 0; j < count; j++) {
        if (!ent[j]) continue;
        Entry *e = ent[j];
        dnnl_memory_set_data_handle(e->a, (void *)op16[2 * j]);
        dnnl_memory_set_data_handle(e->b, (void *)op16[2 * j + 1]);
        dnnl_memory_set_data_handle(e->c, g[j].c);
        dnnl_exec_arg_t args[3] = {{DNNL_ARG_SRC, e->a}, {DNNL_ARG_WEIGHTS, e->b}, {DNNL_ARG_DST, e->c}};
        if (dnnl_primitive_execute(e->prim, g_stream, 3, args) != dnnl_success || dnnl_stream_wait(g_stream) != dnnl_success)
            die("oneDNN: a %d x %d x %d bf16 product failed to run", g[j].m, g[j].n, g[j].k);
    }
    return 0;
}

#else   /* built without oneDNN (make DNNL=0) */

int gemm_dnnl_built(void) { return 0; }
int gemm_dnnl_many(const Gemm *g, int count) { (void)g; (void)count; (void)shadow_of; return -1; }

#endif
