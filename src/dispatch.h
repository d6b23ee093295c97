/* dispatch.h — what runs on this CPU, decided once: the thread count, BLIS's
 * kernel set and tfm's own kernels (bf16 products today), each from the
 * features cpu.h reads. The kernels (ops.c, gemm_bf16.c) ask here; every
 * compute command calls threads_init before its first product.
 *
 * Threads: tfm's own OpenMP regions use threads_count() threads. BLIS runs
 * on one thread per call where training's products are cut into pieces
 * those threads share (ops.c's gemm_many), with threads_count() of its own
 * for decoding's products from serial code (linear_rows), and on one thread
 * inside OpenMP regions (ops.c passes a 1-thread rntm there), so the two
 * never oversubscribe. Nested parallelism stays off. When a loop or a
 * product goes parallel at all: parallel.h.
 *
 * BLIS's kernel set: BLIS_ARCH_TYPE if the user set it (a name such as skx,
 * or BLIS's number for it), else cpu_blis_kernels (cpu.h) of this CPU and
 * of BLIS's own choice; chosen before BLIS initialises (after bli_init it
 * is fixed) by setting BLIS_ARCH_TYPE, which child processes inherit. A
 * warning goes to stderr, once, whenever the set is BLIS's portable C one
 * ("generic"): a third or less of the speed of the CPU's vector kernels.
 *
 * Dependencies: cpu.h, util.h and BLIS; nothing above the kernels. */
#ifndef TFM_DISPATCH_H
#define TFM_DISPATCH_H

#include <stdio.h>

/* n <= 0: all cores. Sets OpenMP's and BLIS's thread counts; the first call
 * also reads the CPU and chooses the kernels. -1 + errorf on a malformed
 * BLIS_ARCH_TYPE or TFM_CPU_FEATURES. */
int threads_init(int n);
int threads_count(void);

/* BLIS's kernel set ("skx", "haswell", "zen3", "generic", ...), chosen once,
 * and its number (the value of BLIS_ARCH_TYPE that selects it, for a child
 * process that should run the same one). */
const char *blis_kernels(void);
int blis_kernels_id(void);
/* The set BLIS picks by itself on this CPU ("?" if it could not be asked),
 * and where blis_kernels() came from: "BLIS_ARCH_TYPE", "tfm" (cpu.h's rule
 * chose another set than BLIS's) or "BLIS". */
const char *blis_kernels_own(void);
const char *blis_kernels_source(void);

/* tfm's own kernels, each chosen from cpu_has() here and nowhere else:
 * bf16 products run the AVX512_BF16 kernel (VDPBF16PS) when the CPU has
 * AVX512F and AVX512_BF16, else the emulation (gemm_bf16.h). */
int bf16_native(void);
/* 1 where bf16 rounding (gemm_bf16.h's bf16_round_run, vec16.h's
 * bf16_round16) runs on VCVTNEPS2BF16, the same bits as the integer code:
 * set to bf16_native() by threads_init (0 before it: the integer code);
 * tests set it to run each code. */
extern int bf16_round_cvt;
/* Where the bf16 products of training (ops.c's gemm_many, from serial
 * code) run, chosen once by bf16_rule:
 *   BF16_AMX       tfm's own AMX-BF16 tile kernel (gemm_amx.h), where the
 *                  CPU has the tiles and Linux grants them (a base step
 *                  1.19x oneDNN's AMX route, multi30k.ini's 0.999x:
 *                  doc/precision.md);
 *   BF16_ONEDNN    oneDNN's matmul (gemm_dnnl.h), in a build with oneDNN,
 *                  where its bf16 unit outruns fp32: AVX512_BF16 on AMD
 *                  (Zen 4/5), or AMX-BF16 that Linux refused tfm;
 *   BF16_KERNEL    our AVX512_BF16 kernel (gemm_bf16.h), on such an AMD CPU
 *                  without oneDNN;
 *   BF16_EMULATED  everywhere else (Intel's VDPBF16PS runs at half its FMA
 *                  rate): rounded operands, fp32 products (BLIS).
 * TFM_BF16_PRODUCTS = onednn | kernel | emulated | amx overrides the choice
 * (the tests run every route on any host that can: oneDNN runs bf16
 * matmuls on any AVX-512 CPU, if slowly (gemm_dnnl_runs); "kernel" needs
 * bf16_native(), "amx" bf16_amx()). Inside parallel
 * regions (decoding) and where oneDNN declines a product, the kernel runs
 * (the emulation without AVX512_BF16). Measured in doc/precision.md. */
typedef enum { BF16_EMULATED, BF16_KERNEL, BF16_ONEDNN, BF16_AMX } Bf16Route;
/* 1 where this CPU has AMX-BF16 tiles (capped by TFM_CPU_FEATURES) and
 * Linux granted their state (cpu_amx_request, asked once). */
int bf16_amx(void);
/* 1 if tfm was built with oneDNN (make DNNL=1, the default; the Makefile
 * compiles dispatch.c and gemm_dnnl.c with TFM_DNNL). Here, not in
 * gemm_dnnl.c, so that the chooser does not include the kernel it chooses. */
int gemm_dnnl_built(void);
/* 1 where it is built with oneDNN and oneDNN has its bf16 and f32 matmuls
 * on this CPU (AVX-512): the oneDNN routes can be forced only there. */
int gemm_dnnl_runs(void);
/* oneDNN's bf16 units here (capped by tfm's feature masks): 0 none or
 * not built, 1 AVX512_BF16, 2 AMX-BF16. */
int bf16_onednn(void);
/* The rule, pure so that tests run every branch on any CPU: env
 * (TFM_BF16_PRODUCTS, NULL or "" for the default), native (bf16_native()),
 * amd (the vendor), onednn (bf16_onednn()), amx (bf16_amx()). The route, or
 * -1 when env names an unknown route or one this CPU or build cannot run
 * (why: *why). */
int bf16_rule(const char *env, int native, int amd, int onednn, int amx, const char **why);
Bf16Route bf16_route(void);
/* Sets the route (benchmarks, tests); BF16_KERNEL needs bf16_native(),
 * BF16_ONEDNN gemm_dnnl_runs() (BF16_AMX: ops.h's gemm_amx_kernel says
 * whether the tiles or their model run it). */
void bf16_route_set(Bf16Route r);
/* For logs: "oneDNN matmul (...)", "AVX512_BF16 kernel" or "emulated: ...,
 * same numerics, no speedup". */
const char *bf16_mode(void);
/* For logs: where translation's bf16 products run (decode.c, whatever the
 * route: they run inside its own threads' regions, on weights packed for
 * the kernel): "AVX512_BF16 kernel (tfm's)" or "emulated: ...". */
const char *bf16_decode_mode(void);
/* 1 where translation's bf16 products run tfm's AVX512_BF16 kernel: on AMD
 * CPUs with AVX512_BF16, or anywhere with it when TFM_BF16_PRODUCTS names
 * the unit (kernel, onednn); 0: emulated (Intel's VDPBF16PS runs at half
 * its FMA rate; TFM_BF16_PRODUCTS=emulated; no AVX512_BF16). */
int bf16_decode_kernel(void);

/* Where training's fp32 products run (ops.c's gemm_many, from serial code;
 * the emulated bf16 route's products of rounded copies too):
 *   FP32_ONEDNN  oneDNN's f32 matmul (gemm_dnnl.h), cut into the same
 *                pieces on our threads, in a build with oneDNN where it
 *                has its AVX-512 brgemm kernels (fp32_onednn);
 *   FP32_BLIS    BLIS sgemm, everywhere else.
 * Inside parallel regions (the attention core's loops, decoding), where
 * oneDNN declines a product (alpha != 1, beta not 0 or 1) and for
 * translation's products (linear_rows), BLIS. TFM_FP32_PRODUCTS = onednn |
 * blis overrides the choice. Measured in doc/cpus.md. */
typedef enum { FP32_BLIS, FP32_ONEDNN } Fp32Route;
/* 1 if oneDNN's f32 brgemm runs here: built with oneDNN, its ISA has
 * avx512_core, and tfm's feature masks leave AVX512F, DQ, BW and VL. */
int fp32_onednn(void);
/* The rule, pure for the tests: env (TFM_FP32_PRODUCTS, NULL or "" for the
 * default), onednn (fp32_onednn()). The route, or -1 when env names an
 * unknown route or oneDNN where it cannot run (why: *why). */
int fp32_rule(const char *env, int onednn, const char **why);
Fp32Route fp32_route(void);
/* Sets the route (tests, benchmarks); FP32_ONEDNN needs gemm_dnnl_runs(). */
void fp32_route_set(Fp32Route r);
/* For logs and `tfm info`: "oneDNN matmul (AVX-512 brgemm)" or "BLIS sgemm
 * (...)", with why (forced, no oneDNN, no AVX-512). */
const char *fp32_mode(void);

/* int8 products (gemm_int8.h): the AVX512_VNNI kernel needs AVX512F, BW and
 * VNNI; the AMX one AMX-TILE and AMX-INT8, and Linux's permission for the
 * tile data (cpu_amx_request, asked once). TFM_CPU_FEATURES=-avx512_vnni
 * masks the kernel off like any feature. */
int int8_vnni(void);
int int8_amx(void);
/* oneDNN's int8 matmul (gemm_dnnl.h) in this build and on this CPU as
 * oneDNN itself sees it (it dispatches on its own; DNNL_MAX_CPU_ISA caps
 * it): 0 not built or no exact int8 unit, 1 VNNI (AVX512_VNNI or
 * AVX_VNNI), 2 AMX-INT8. Only with VNNI or AMX are its u8 x s8 sums exact:
 * without, oneDNN pairs products in saturating 16-bit VPMADDUBSW. */
int int8_onednn(void);

/* Which int8 kernel runs (gemm_int8.c computes each, bit for bit the same):
 *   INT8_ONEDNN     oneDNN's u8 x s8 -> s32 matmul on our packed weights,
 *                   under tfm's quantization and epilogue: where oneDNN has
 *                   AMX-INT8 (Intel Sapphire Rapids and later), and where
 *                   it has VNNI and measured faster than ours (see
 *                   int8_rule);
 *   INT8_VNNI       tfm's AVX512_VNNI kernel;
 *   INT8_MODEL      its scalar model (CPUs without VNNI; tests);
 *   INT8_AMX        tfm's AMX-INT8 tile kernel (TFM_INT8_KERNEL=amx; by
 *                   default for products of 16-64 rows, below);
 *   INT8_AMX_MODEL  the AMX loops with a scalar model of the tiles (tests). */
typedef enum { INT8_VNNI, INT8_MODEL, INT8_AMX, INT8_AMX_MODEL, INT8_ONEDNN, INT8_BY_ROWS } Int8Kernel;
/* INT8_BY_ROWS, the default where the CPU has AMX-INT8 and oneDNN its AMX
 * path: each product runs the kernel int8_by_rows picks for its row count
 * (all of them compute the same bits). The choice, pure for the tests:
 * under INT8_VNNI_BELOW rows tfm's VNNI kernel, to INT8_AMX_UPTO tfm's AMX kernel, above oneDNN's
 * matmul (each as the CPU has it; measured in dispatch.c). */
enum { INT8_VNNI_BELOW = 16, INT8_AMX_UPTO = 64 };   /* int8_by_rows's switches, in rows */
Int8Kernel int8_by_rows(int n, int vnni, int amx, int onednn);
/* 1 if kernel k runs on this CPU and build (the scalar models always do;
 * by rows where both AMX-INT8 and oneDNN's int8 do). */
int int8_runs(Int8Kernel k);
/* The rule, a pure function so that tests run every branch on any CPU:
 * env (TFM_INT8_KERNEL: model | vnni | amx | amx-model | onednn, NULL or ""
 * for the default), the CPU's vnni and amx (int8_vnni, int8_amx) and
 * onednn (int8_onednn). Returns the kernel, or -1 when env names an
 * unknown kernel or one this CPU or build cannot run (why: *why). */
int int8_rule(const char *env, int vnni, int amx, int onednn, const char **why);
/* The kernel decode.c uses, decided once from serial code (int8_rule on
 * this CPU; a bad TFM_INT8_KERNEL dies with the reason), and its name for
 * logs and `tfm info`. */
Int8Kernel int8_kernel(void);
const char *int8_mode(void);
/* Tests, benchmarks: make int8_kernel() return k (INT8_VNNI needs
 * int8_vnni(), INT8_AMX int8_amx(), INT8_ONEDNN int8_onednn()). */
void int8_set_kernel(Int8Kernel k);

/* `tfm info`: the CPU, the features tfm uses, the kernels chosen and the
 * default threads, one "key: value" per line. */
void dispatch_report(FILE *f);

#endif
