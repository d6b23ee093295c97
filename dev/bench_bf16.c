/* bench_bf16.c — bf16 products at the model's shapes: our AVX512_BF16
 * kernel (src/gemm_bf16.c through ops.c's gemm_many) against oneDNN's
 * matmul (Debian libdnnl 2.6: it dispatches to AVX512_BF16, AVX512-BF16
 * emulation or AMX by itself) and against BLIS sgemm, side by side, each
 * shape's three runs alternating so that all see the same machine load:
 *   build/dev/bench_bf16 [THREADS [REPS [D F ROWS V C]]]
 *   defaults: 2 threads, 5 repetitions (best kept), the base model at the
 *   benchmark batch: D 512, F 2048, 4096 rows, V 37000, 906 output rows.
 * For each product of a training step (forward y = x W^T; backward
 * dx = dy W and dW += dy^T x; the output layer's three), GFLOP/s of:
 *   sgemm   BLIS, fp32, as tfm's fp32 step runs it there (gemm_many's
 *           pieces, TFM_FP32_PRODUCTS=blis)
 *   f32dnn  oneDNN's f32 matmul as tfm's fp32 step runs it where it has
 *           AVX-512 (the same pieces, gemm_dnnl_many; dispatch.h's
 *           fp32_route): not a bf16 route, but the fp32 that bf16 must beat
 *   ours    the bf16 kernel as tfm's bf16 step runs it (gemm_many)
 *   onednn  oneDNN bf16 matmul, its own threads, fp32 sums into C, plus the
 *           conversion of the operands that are activations (fp32 -> bf16,
 *           vectorised, threaded) that it needs and ours does in its
 *           packing; weights are taken as already bf16 (converted once per
 *           update). "(+cvt)" is that share.
 *   pieces  oneDNN as tfm runs it (gemm_dnnl_many: conversion, then the
 *           product cut into pieces our threads take, one oneDNN call on
 *           one thread each; the weights from their registered 16-bit twin)
 *   packed  oneDNN with A and B in the layouts it picks (format_tag_any:
 *           blocked for its kernels, e.g. B in VNNI pairs for AMX), its own
 *           threads, the product alone; "reorder" is what bringing tfm's
 *           row-major bf16 A and B into those layouts costs (ms, each
 *           timed on its own): the bound on what storing operands in
 *           oneDNN's layouts could gain
 *   B packed  (products whose B is a weight: forward and dx) oneDNN with B
 *           alone in the layout it picks, reordered beforehand as a weight
 *           would be once per update, A converted from the floats as stored
 *           (as in "onednn"): what keeping the weights' 16-bit twins in
 *           oneDNN's layout would gain
 * Prints the winner per shape and oneDNN's ISA (dnnl_get_effective_cpu_isa). */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef TFM_DNNL
int main(void) {
    printf("bench_bf16: built without oneDNN (make DNNL=0): nothing to compare\n");
    return 0;
}
#else
#include <oneapi/dnnl/dnnl.h>

#include "dispatch.h"
#include "gemm_bf16.h"
#include "gemm_dnnl.h"
#include "ops.h"
#include "util.h"

#define CHECK(x) do { dnnl_status_t s_ = (x); if (s_ != dnnl_success) die("%s:%d: oneDNN: %s failed (status %d)", __FILE__, __LINE__, #x, (int)s_); } while (0)

typedef struct { const char *name; int ta, tb, m, n, k, flags; float beta; } Shape;

static void to_bf16(uint16_t *dst, const float *src, size_t n) {
    #pragma omp parallel for simd schedule(static) if (n >= ((size_t)1 << 16))
    for (size_t i = 0; i < n; i++) dst[i] = bf16_from_float(src[i]);
}

/* A oneDNN matmul C[m,n] (beta 0 or 1) = op(A) op(B), A and B bf16 with
 * tfm's row-major strides, C fp32; packed: A and B in the layouts oneDNN
 * picks (PACK_AB), or B alone (PACK_B: A as stored), pa and pb made from a
 * and b by the reorders ra and rb. */
enum { PACK_NONE, PACK_AB, PACK_B };
typedef struct { dnnl_primitive_t prim, ra, rb; dnnl_memory_t a, b, c, pa, pb; } Dnnl;

static void dnnl_make(Dnnl *d, dnnl_engine_t eng, const Shape *s, uint16_t *a, uint16_t *b, float *c, int packed) {
    dnnl_memory_desc_t ad, bd, cd;
    dnnl_dims_t adim = {s->m, s->k}, bdim = {s->k, s->n}, cdim = {s->m, s->n};
    dnnl_dims_t ast = {s->ta ? 1 : s->k, s->ta ? s->m : 1};   /* A stored [m,k] or [k,m] */
    dnnl_dims_t bst = {s->tb ? 1 : s->n, s->tb ? s->k : 1};   /* B stored [k,n] or [n,k] */
    dnnl_dims_t cst = {s->n, 1};
    CHECK(dnnl_memory_desc_init_by_strides(&ad, 2, adim, dnnl_bf16, ast));
    CHECK(dnnl_memory_desc_init_by_strides(&bd, 2, bdim, dnnl_bf16, bst));
    CHECK(dnnl_memory_desc_init_by_strides(&cd, 2, cdim, dnnl_f32, cst));
    dnnl_memory_desc_t aany, bany;
    CHECK(dnnl_memory_desc_init_by_tag(&aany, 2, adim, dnnl_bf16, dnnl_format_tag_any));
    CHECK(dnnl_memory_desc_init_by_tag(&bany, 2, bdim, dnnl_bf16, dnnl_format_tag_any));
    dnnl_matmul_desc_t md;
    CHECK(dnnl_matmul_desc_init(&md, packed == PACK_AB ? &aany : &ad, packed ? &bany : &bd, NULL, &cd));
    dnnl_primitive_attr_t attr;
    CHECK(dnnl_primitive_attr_create(&attr));
    if (s->beta != 0.0f) {
        dnnl_post_ops_t po;
        CHECK(dnnl_post_ops_create(&po));
        CHECK(dnnl_post_ops_append_sum(po, 1.0f));
        CHECK(dnnl_primitive_attr_set_post_ops(attr, po));
        dnnl_post_ops_destroy(po);
    }
    dnnl_primitive_desc_t pd;
    CHECK(dnnl_primitive_desc_create(&pd, &md, attr, eng, NULL));
    const char *impl = NULL;
    dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl);
    printf("    onednn implementation%s: %s\n", packed == PACK_AB ? " (packed)" : packed ? " (B packed)" : "", impl ? impl : "?");
    CHECK(dnnl_primitive_create(&d->prim, pd));
    CHECK(dnnl_memory_create(&d->a, &ad, eng, a));
    CHECK(dnnl_memory_create(&d->b, &bd, eng, b));
    CHECK(dnnl_memory_create(&d->c, &cd, eng, c));
    d->ra = d->rb = NULL;
    d->pa = d->pb = NULL;
    if (packed) {
        const dnnl_memory_desc_t *pam = dnnl_primitive_desc_query_md(pd, dnnl_query_src_md, 0);
        const dnnl_memory_desc_t *pbm = dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 0);
        dnnl_primitive_desc_t rpd;
        if (packed == PACK_AB) {
            CHECK(dnnl_memory_create(&d->pa, pam, eng, DNNL_MEMORY_ALLOCATE));
            CHECK(dnnl_reorder_primitive_desc_create(&rpd, &ad, eng, pam, eng, NULL));
            CHECK(dnnl_primitive_create(&d->ra, rpd));
            dnnl_primitive_desc_destroy(rpd);
        }
        CHECK(dnnl_memory_create(&d->pb, pbm, eng, DNNL_MEMORY_ALLOCATE));
        CHECK(dnnl_reorder_primitive_desc_create(&rpd, &bd, eng, pbm, eng, NULL));
        CHECK(dnnl_primitive_create(&d->rb, rpd));
        dnnl_primitive_desc_destroy(rpd);
    }
    dnnl_primitive_desc_destroy(pd);
    dnnl_primitive_attr_destroy(attr);
}

int main(int argc, char **argv) {
    int threads = argc > 1 ? atoi(argv[1]) : 2, reps = argc > 2 ? atoi(argv[2]) : 5;
    int D = argc > 3 ? atoi(argv[3]) : 512, F = argc > 4 ? atoi(argv[4]) : 2048, N = argc > 5 ? atoi(argv[5]) : 4096;
    int V = argc > 6 ? atoi(argv[6]) : 37000, C = argc > 7 ? atoi(argv[7]) : 906;
    if (threads_init(threads)) die_error();
    omp_set_num_threads(threads_count());
    if (!gemm_dnnl_runs()) {
        printf("bench_bf16: no AVX-512 here: oneDNN 2.6 has no bf16 matmul to compare\n");
        return 0;
    }
    if (!bf16_native()) printf("no AVX512_BF16 here: 'ours' runs emulated (rounding + sgemm)\n");
    printf("oneDNN effective ISA 0x%x (0xe7 avx512_core_bf16, 0x3e7 avx512_core_amx), %d threads, BLIS %s\n",
           (unsigned)dnnl_get_effective_cpu_isa(), threads_count(), blis_kernels());
    Shape sh[] = {   /* name, ta, tb, m, n, k, flags (which operands are activations), beta */
        {"attn proj fwd  y=xW^T",   0, 1, N, D, D, GEMM_BF16_A, 1},
        {"attn proj dx=dyW",        0, 0, N, D, D, GEMM_BF16_A, 0},
        {"attn proj dW+=dy^Tx",     1, 0, D, D, N, GEMM_BF16_A | GEMM_BF16_B, 1},
        {"fc1 fwd",                 0, 1, N, F, D, GEMM_BF16_A, 1},
        {"fc1 dx=dyW",              0, 0, N, D, F, GEMM_BF16_A, 1},
        {"fc1 dW+=dy^Tx",           1, 0, F, D, N, GEMM_BF16_A | GEMM_BF16_B, 1},
        {"fc2 fwd",                 0, 1, N, D, F, GEMM_BF16_A, 1},
        {"fc2 dx=dyW",              0, 0, N, F, D, GEMM_BF16_A, 0},
        {"fc2 dW+=dy^Tx",           1, 0, D, F, N, GEMM_BF16_A | GEMM_BF16_B, 1},
        {"logits=yE^T",             0, 1, C, V, D, GEMM_BF16_A, 0},
        {"dy=dlogitsE",             0, 0, C, D, V, GEMM_BF16_A, 0},
        {"dE+=dlogits^Ty",          1, 0, V, D, C, GEMM_BF16_A | GEMM_BF16_B, 1},
        {"decode step 8 rows fc1",  0, 1, 8, F, D, GEMM_BF16_A, 1},
        {"decode step 32 rows V",   0, 1, 32, V, D, GEMM_BF16_A, 0},
    };
    dnnl_engine_t eng;
    dnnl_stream_t str;
    CHECK(dnnl_engine_create(&eng, dnnl_cpu, 0));
    CHECK(dnnl_stream_create(&str, eng, dnnl_stream_default_flags));
    double tot[6] = {0}, reorder_tot[2] = {0}, wtot[3] = {0};
    printf("%-24s %6s %6s %6s %9s %9s %9s %9s %7s %9s %9s %15s  %s\n", "product", "m", "n", "k", "sgemm", "f32dnn", "ours", "onednn",
           "(+cvt)", "pieces", "packed", "reorder A, B ms", "B packed  best bf16");
    for (size_t i = 0; i < sizeof sh / sizeof *sh; i++) {
        const Shape *s = &sh[i];
        size_t na = (size_t)s->m * s->k, nb = (size_t)s->k * s->n, nc = (size_t)s->m * s->n;
        float *a = xaligned(na * 4), *b = xaligned(nb * 4), *c = xaligned(nc * 4);
        uint16_t *a16 = xaligned(na * 2), *b16 = xaligned(nb * 2);
        for (size_t j = 0; j < na; j++) a[j] = 0.01f * (float)((j * 7) % 101) - 0.5f;
        for (size_t j = 0; j < nb; j++) b[j] = bf16_round(0.01f * (float)((j * 13) % 97) - 0.48f);   /* weights: bf16 values */
        to_bf16(b16, b, nb);
        Dnnl d, pk, wp;
        int weight = !(s->flags & GEMM_BF16_B);   /* B is a weight: packing it once per update would do */
        dnnl_make(&d, eng, s, a16, b16, c, PACK_NONE);
        dnnl_make(&pk, eng, s, a16, b16, c, PACK_AB);
        if (weight) dnnl_make(&wp, eng, s, a16, b16, c, PACK_B);
        int lda = s->ta ? s->m : s->k, ldb = s->tb ? s->k : s->n;
        double best[7] = {1e30, 1e30, 1e30, 1e30, 1e30, 1e30, 1e30}, cvt = 0, reorder[2] = {1e30, 1e30};
        if (!(s->flags & GEMM_BF16_B)) gemm_dnnl_shadow(b, b16, nb);
        for (int r = 0; r < reps + 1; r++) {   /* the first round warms up */
            for (int v = 0; v < 7; v++) {
                double t0 = now_seconds(), tc = 0;
                if (v == 6) {   /* B packed (its reorder done before, as once per update), A converted as stored */
                    if (!weight) continue;
                    if (!r) {
                        dnnl_exec_arg_t rb[2] = {{DNNL_ARG_FROM, wp.b}, {DNNL_ARG_TO, wp.pb}};
                        CHECK(dnnl_primitive_execute(wp.rb, str, 2, rb));
                        CHECK(dnnl_stream_wait(str));
                    }
                    t0 = now_seconds();
                    to_bf16(a16, a, na);
                    dnnl_exec_arg_t args[3] = {{DNNL_ARG_SRC, wp.a}, {DNNL_ARG_WEIGHTS, wp.pb}, {DNNL_ARG_DST, wp.c}};
                    CHECK(dnnl_primitive_execute(wp.prim, str, 3, args));
                    CHECK(dnnl_stream_wait(str));
                } else if (v == 4) {   /* packed: the two reorders, each timed, then the product alone */
                    to_bf16(a16, a, na);
                    for (int o = 0; o < 2; o++) {
                        double r0 = now_seconds();
                        dnnl_exec_arg_t ra[2] = {{DNNL_ARG_FROM, o ? pk.b : pk.a}, {DNNL_ARG_TO, o ? pk.pb : pk.pa}};
                        CHECK(dnnl_primitive_execute(o ? pk.rb : pk.ra, str, 2, ra));
                        CHECK(dnnl_stream_wait(str));
                        if (r && now_seconds() - r0 < reorder[o]) reorder[o] = now_seconds() - r0;
                    }
                    t0 = now_seconds();
                    dnnl_exec_arg_t args[3] = {{DNNL_ARG_SRC, pk.pa}, {DNNL_ARG_WEIGHTS, pk.pb}, {DNNL_ARG_DST, pk.c}};
                    CHECK(dnnl_primitive_execute(pk.prim, str, 3, args));
                    CHECK(dnnl_stream_wait(str));
                } else if (v < 2 || v == 5) {
                    Gemm g = {s->ta, s->tb, s->m, s->n, s->k, 1.0f, a, lda, b, ldb, s->beta, c, s->n, v == 1 ? s->flags : 0, NULL, 0};
                    Bf16Route keep = bf16_route();
                    Fp32Route keep32 = fp32_route();
                    if (v == 1) bf16_route_set(bf16_native() ? BF16_KERNEL : BF16_EMULATED);   /* ours, as gemm_many runs it */
                    else fp32_route_set(v ? FP32_ONEDNN : FP32_BLIS);
                    gemm_many(&g, 1);
                    bf16_route_set(keep);
                    fp32_route_set(keep32);
                } else if (v == 3) {
                    Gemm g = {s->ta, s->tb, s->m, s->n, s->k, 1.0f, a, lda, b, ldb, s->beta, c, s->n, s->flags, NULL, 0};
                    gemm_dnnl_pieces(1);
                    if (gemm_dnnl_many(&g, 1)) die("oneDNN declined %s", s->name);
                } else {
                    to_bf16(a16, a, na);
                    if (s->flags & GEMM_BF16_B) to_bf16(b16, b, nb);
                    tc = now_seconds() - t0;
                    dnnl_exec_arg_t args[3] = {{DNNL_ARG_SRC, d.a}, {DNNL_ARG_WEIGHTS, d.b}, {DNNL_ARG_DST, d.c}};
                    CHECK(dnnl_primitive_execute(d.prim, str, 3, args));
                    CHECK(dnnl_stream_wait(str));
                }
                double t = now_seconds() - t0;
                if (r && t < best[v]) { best[v] = t; if (v == 2) cvt = tc; }
            }
        }
        gemm_dnnl_shadow(b, NULL, 0);
        double fl = 2.0 * s->m * s->n * s->k / 1e9;
        int w = 0;
        for (int v = 1; v < 5; v++) if (best[v] < best[w]) w = v;
        char wcol[16] = "        -";
        if (weight) snprintf(wcol, sizeof wcol, "%9.1f", fl / best[6]);
        printf("%-24s %6d %6d %6d %9.1f %9.1f %9.1f %9.1f %6.0f%% %9.1f %9.1f %7.2f %7.2f %s  %s\n", s->name, s->m, s->n, s->k,
               fl / best[0], fl / best[5], fl / best[1], fl / best[2], 100 * cvt / best[2], fl / best[3], fl / best[4],
               1e3 * reorder[0], 1e3 * reorder[1], wcol, (const char *[]){"sgemm", "ours", "onednn", "pieces", "packed"}[w]);
        if (i < 12) {
            for (int v = 0; v < 6; v++) tot[v] += best[v];
            if (weight) { wtot[0] += best[2]; wtot[1] += best[6]; wtot[2] += reorder[1]; }
            reorder_tot[0] += reorder[0];
            reorder_tot[1] += reorder[1];
        }
        fflush(stdout);
        for (int q = 0; q < 2 + weight; q++) {
            Dnnl *e = q == 2 ? &wp : q ? &pk : &d;
            dnnl_primitive_destroy(e->prim);
            if (e->ra) { dnnl_primitive_destroy(e->ra); dnnl_memory_destroy(e->pa); }
            if (e->rb) { dnnl_primitive_destroy(e->rb); dnnl_memory_destroy(e->pb); }
            dnnl_memory_destroy(e->a); dnnl_memory_destroy(e->b); dnnl_memory_destroy(e->c);
        }
        free(a); free(b); free(c); free(a16); free(b16);
    }
    printf("training products (one of each): sgemm %.3f s, f32dnn %.3f s (%.2fx sgemm), ours %.3f s (%.2fx sgemm), onednn %.3f s "
           "(%.2fx sgemm), onednn in pieces %.3f s (%.2fx sgemm), packed %.3f s (%.2fx sgemm; reorders of A %.3f s, of B %.3f s)\n",
           tot[0], tot[5], tot[0] / tot[5], tot[1], tot[0] / tot[1], tot[2], tot[0] / tot[2], tot[3], tot[0] / tot[3], tot[4],
           tot[0] / tot[4], reorder_tot[0], reorder_tot[1]);
    printf("the products whose B is a weight (forward and dx): onednn %.3f s, B packed %.3f s (%.2fx; B's reorders %.3f s, "
           "once per update)\n", wtot[0], wtot[1], wtot[0] / wtot[1], wtot[2]);
    dnnl_stream_destroy(str);
    dnnl_engine_destroy(eng);
    return 0;
}
#endif
