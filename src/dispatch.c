/* dispatch.c — threads, BLIS's kernel set and tfm's own kernels, chosen
 * once from the CPU's features (see dispatch.h; the rules and their
 * measurements are in cpu.c). */
#include "dispatch.h"

#include <blis.h>
#include <errno.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cpu.h"
#include "util.h"

#ifdef TFM_DNNL
#include <oneapi/dnnl/dnnl.h>   /* the CPU as oneDNN sees it (int8_onednn) */
#endif

/* ---- BLIS's kernel set ---------------------------------------------------- */
static int g_chosen;              /* 1 once BLIS is initialised with its set */
static const char *g_source = "BLIS";
static char g_own[32] = "?";

/* The set BLIS would choose by itself. BLIS reads its choice once per
 * process (BLIS_ARCH_TYPE, else its CPUID tables) and fixes it: asking it
 * here would fix it before tfm could ask for another. So a child process
 * asks (fork, bli_arch_query_id, the id back through a pipe): a millisecond,
 * once, and it follows whatever BLIS is installed, where a copy of BLIS's
 * tables would not. -1 when that fails (tfm then keeps BLIS's choice). */
static int blis_own_id(void) {
    int fd[2];
    if (pipe(fd)) return -1;
    pid_t pid = fork();
    if (pid < 0) {
        close(fd[0]);
        close(fd[1]);
        return -1;
    }
    if (pid == 0) {   /* the child: BLIS on its own, whatever the user asked for */
        close(fd[0]);
        unsetenv("BLIS_ARCH_TYPE");
        int id = (int)bli_arch_query_id();
        _exit(write(fd[1], &id, sizeof id) == (ssize_t)sizeof id ? 0 : 1);
    }
    close(fd[1]);
    int id = -1;
    ssize_t r;
    do r = read(fd[0], &id, sizeof id);
    while (r < 0 && errno == EINTR);
    close(fd[0]);
    while (waitpid(pid, NULL, 0) < 0 && errno == EINTR) {}
    return r == (ssize_t)sizeof id && id >= 0 && id < BLIS_NUM_ARCHS ? id : -1;
}

static int arch_by_name(const char *name) {
    for (int id = 0; id < BLIS_NUM_ARCHS; id++)
        if (!strcmp(name, bli_arch_string((arch_t)id))) return id;
    return -1;
}

/* BLIS 0.9 reads BLIS_ARCH_TYPE as the number of an arch_t (skx 0, haswell
 * 3, zen3 6, generic 25, ...) and quietly reads a name, or an empty value,
 * as 0, i.e. skx; tfm takes an empty value as unset, accepts the names as well (BLIS's own spelling,
 * bli_arch_string), turns them into the number, and refuses anything else
 * rather than let BLIS run kernels nobody asked for. */
static int blis_choose(void) {
    if (g_chosen) return 0;
    if (cpu_init()) return -1;
    const char *env = getenv("BLIS_ARCH_TYPE");
    if (env && !*env) {   /* empty: unset (BLIS would read it as 0, skx) */
        unsetenv("BLIS_ARCH_TYPE");
        env = NULL;
    }
    int id = -1, own = blis_own_id();
    if (own >= 0) snprintf(g_own, sizeof g_own, "%s", bli_arch_string((arch_t)own));
    if (env) {
        char *end;
        long n = strtol(env, &end, 10);
        id = end != env && !*end ? (n >= 0 && n < BLIS_NUM_ARCHS ? (int)n : -1) : arch_by_name(env);
        if (id < 0)
            return errorf("BLIS_ARCH_TYPE=%s: not a BLIS kernel set (a name such as skx, haswell, zen3, generic, "
                          "or its number 0..%d)", env, BLIS_NUM_ARCHS - 1);
        g_source = "BLIS_ARCH_TYPE";
    } else if (own >= 0) {
        int want = arch_by_name(cpu_blis_kernels(cpu_info(), g_own));
        if (want >= 0 && want != own) {
            id = want;
            g_source = "tfm";
        }
    }
    if (id >= 0) {
        char num[16];
        snprintf(num, sizeof num, "%d", id);
        setenv("BLIS_ARCH_TYPE", num, 1);
    }
    bli_init();
    g_chosen = 1;
    if (!strcmp(blis_kernels(), "generic"))
        log_warn("BLIS runs its portable C kernels ('generic'%s): matrix products at a third or less of this CPU's "
                 "speed; BLIS_ARCH_TYPE=haswell (AVX2) or skx (AVX-512) names a faster set, see `tfm info`",
                 !strcmp(g_source, "BLIS_ARCH_TYPE") ? ", as BLIS_ARCH_TYPE asks" : ": no vector kernel set fits this CPU");
    return 0;
}

const char *blis_kernels(void) {
    (void)blis_choose();   /* refused: threads_init said so */
    return bli_arch_string(bli_arch_query_id());
}

int blis_kernels_id(void) {
    (void)blis_choose();
    return (int)bli_arch_query_id();
}

const char *blis_kernels_own(void) {
    (void)blis_choose();
    return g_own;
}

const char *blis_kernels_source(void) {
    (void)blis_choose();
    return g_source;
}

/* ---- threads -------------------------------------------------------------- */
static int g_threads = 1;

int threads_init(int n) {
    if (blis_choose()) return -1;
    if (n <= 0) n = omp_get_num_procs();
    if (n < 1) n = 1;
    g_threads = n;
    omp_set_num_threads(n);
    omp_set_max_active_levels(1);
    bli_thread_set_num_threads(n);
    bf16_round_cvt = bf16_native();
    return 0;
}

int threads_count(void) { return g_threads; }

/* ---- tfm's own kernels ----------------------------------------------------- */
int bf16_native(void) { return cpu_has(CPU_AVX512F) && cpu_has(CPU_AVX512_BF16); }
int bf16_round_cvt;

static Bf16Route g_route = (Bf16Route)-1;

int gemm_dnnl_built(void) {
#ifdef TFM_DNNL
    return 1;
#else
    return 0;
#endif
}

/* oneDNN 2.6's bf16 and f32 matmuls need AVX-512 (avx512_core, as oneDNN
 * sees the CPU: it emulates bf16 there without AVX512_BF16). On an AMD EPYC
 * Zen 3 (AVX2 only) it declined every bf16 product of test_bf16, and its f32
 * gemm:jit summed a bias product cut in k slices in another order than the
 * slices without it (test_ops): neither route is offered there. */
int gemm_dnnl_runs(void) {
#ifdef TFM_DNNL
    static int ok = -1;   /* asked once, from serial code (the routes' choice) */
    if (ok < 0) {
        unsigned core = dnnl_cpu_isa_avx512_core;
        ok = ((unsigned)dnnl_get_effective_cpu_isa() & core) == core;
    }
    return ok;
#else
    return 0;
#endif
}

/* oneDNN's bf16 units as oneDNN sees them, capped by tfm's feature masks
 * (TFM_CPU_FEATURES=-amx_bf16 takes its tiles away here as it does ours):
 * 0 none (or not built), 1 AVX512_BF16, 2 AMX-BF16. */
int bf16_onednn(void) {
#ifdef TFM_DNNL
    static int level = -1;   /* asked once, from serial code */
    if (level < 0) {
        unsigned isa = (unsigned)dnnl_get_effective_cpu_isa();
        unsigned amx = dnnl_cpu_isa_avx512_core_amx, b16 = dnnl_cpu_isa_avx512_core_bf16;
        if ((isa & amx) == amx && cpu_has(CPU_AMX_BF16) && cpu_has(CPU_AMX_TILE)) level = 2;
        else if ((isa & b16) == b16 && bf16_native()) level = 1;
        else level = 0;
    }
    return level;
#else
    return 0;
#endif
}

/* The rule (dispatch.h). A bf16 product is worth running on a bf16 unit
 * only where that unit outruns the fp32 FMAs (build/dev/peaks, one core):
 *   Intel with AMX-BF16: TDPBF16PS 3,246 GFLOP/s against FMA's 226 (14x);
 *   AMD Zen 4/5, AVX512_BF16: VDPBF16PS 1.84x the FMA rate on Zen 5; on
 *     Zen 4 bf16 training steps ran 1.45-1.77x fp32's (doc/precision.md);
 *   Intel with AVX512_BF16 and no AMX (Cooper Lake, or a Sapphire/Emerald
 *     Rapids VM that hides the tiles): VDPBF16PS at half the FMA rate (86
 *     against 174 GFLOP/s on an Emerald Rapids VM, 112 against 226 on
 *     another Xeon): oneDNN's bf16 steps ran 0.65x fp32's there, so the
 *     products run in fp32 on rounded operands (the same numbers as the
 *     bf16 unit's up to the order of the sums), never slower than fp32 by
 *     more than the rounding;
 *   any other CPU: no measurement says VDPBF16PS wins, so the same.
 * On the tiles, tfm's kernel (gemm_amx.c) rather than oneDNN 2.6.3's: the
 * base benchmark's step 1.19x faster, configs/multi30k.ini's 0.999x (Intel
 * model 0xa7 with AMX, 2 threads, 2026-12-02, scripts/bench_ab.py; the
 * twelve products of a base step 1.42x oneDNN's, dev/bench_amx). */
int bf16_rule(const char *env, int native, int amd, int onednn, int amx, const char **why) {
    *why = "";
    if (env && *env) {
        if (!strcmp(env, "emulated")) return BF16_EMULATED;
        if (!strcmp(env, "amx")) {
            if (amx) return BF16_AMX;
            *why = "this CPU lacks AMX-BF16 tiles (or TFM_CPU_FEATURES masks them, or Linux refused their state)";
            return -1;
        }
        if (!strcmp(env, "kernel")) {
            if (native) return BF16_KERNEL;
            *why = "this CPU lacks AVX512_BF16 (or TFM_CPU_FEATURES masks it)";
            return -1;
        }
        if (!strcmp(env, "onednn")) {
            if (gemm_dnnl_runs()) return BF16_ONEDNN;   /* any AVX-512 CPU: oneDNN emulates what it lacks, slowly */
            *why = gemm_dnnl_built() ? "oneDNN 2.6 has no bf16 matmul on this CPU (it needs AVX-512)"
                                     : "this tfm is built without oneDNN (make DNNL=0)";
            return -1;
        }
        *why = "expected onednn, kernel, emulated or amx";
        return -1;
    }
    if (amx) return BF16_AMX;                                /* AMX tiles: tfm's kernel (below) */
    if (onednn == 2) return BF16_ONEDNN;                     /* AMX tiles Linux refused tfm */
    if (native && amd) return onednn ? BF16_ONEDNN : BF16_KERNEL;
    return BF16_EMULATED;
}

Bf16Route bf16_route(void) {   /* first called from serial code */
    if ((int)g_route >= 0) return g_route;
    const char *why, *e = getenv("TFM_BF16_PRODUCTS");
    int r = bf16_rule(e, bf16_native(), cpu_info()->vendor == CPU_VENDOR_AMD, bf16_onednn(), bf16_amx(), &why);
    if (r < 0) die("TFM_BF16_PRODUCTS=%s: %s", e, why);
    g_route = (Bf16Route)r;
    return g_route;
}

void bf16_route_set(Bf16Route r) {
    ASSERT(r == BF16_EMULATED || r == BF16_AMX || (r == BF16_KERNEL && bf16_native()) ||
           (r == BF16_ONEDNN && gemm_dnnl_runs()));
    g_route = r;
}

int bf16_amx(void) {
    static int ok = -1;   /* asked once, from serial code */
    if (ok < 0) ok = cpu_has(CPU_AMX_TILE) && cpu_has(CPU_AMX_BF16) && cpu_amx_request() == 0;
    return ok;
}

const char *bf16_mode(void) {
    int forced = getenv("TFM_BF16_PRODUCTS") && *getenv("TFM_BF16_PRODUCTS");
    switch (bf16_route()) {
    case BF16_ONEDNN:
        if (forced) return "oneDNN matmul (TFM_BF16_PRODUCTS=onednn)";
        return bf16_onednn() == 2 ? "oneDNN matmul (AMX-BF16)" : "oneDNN matmul (AVX512_BF16)";
    case BF16_KERNEL: return forced ? "AVX512_BF16 kernel (TFM_BF16_PRODUCTS=kernel)" : "AVX512_BF16 kernel";
    case BF16_AMX: return forced ? "tfm's AMX-BF16 tile kernel (TFM_BF16_PRODUCTS=amx)" : "tfm's AMX-BF16 tile kernel";
    default:
        if (forced) return "emulated (TFM_BF16_PRODUCTS=emulated): fp32 products of rounded operands, same numerics";
        return bf16_native() ? "emulated: fp32 products of rounded operands (this CPU's VDPBF16PS is no faster than its "
                               "fp32 FMAs, and it has no AMX-BF16), same numerics"
                             : "emulated: AVX512_BF16 not found, same numerics, no speedup";
    }
}

/* Translation's products are tfm's own (its AVX512_BF16 kernel on weights
 * packed once): worth it where VDPBF16PS outruns the FMAs, i.e. on AMD; on
 * an Intel Xeon (model 0xcf, AVX512_BF16, 1 thread, beam 4, multi30k model)
 * the kernel translated at 0.56x fp32's speed (greedy 0.58x). */
int bf16_decode_kernel(void) {
    static int k = -1;   /* asked once, from serial code */
    if (k < 0) {
        const char *e = getenv("TFM_BF16_PRODUCTS");   /* forced: onednn, kernel name the bf16 unit */
        int forced = e && *e, r = forced ? bf16_route() : BF16_EMULATED;
        int unit = forced ? r == BF16_ONEDNN || r == BF16_KERNEL : cpu_info()->vendor == CPU_VENDOR_AMD;
        k = bf16_native() && unit;
    }
    return k;
}

const char *bf16_decode_mode(void) {
    if (bf16_decode_kernel()) return "AVX512_BF16 kernel (tfm's; the attention core emulated)";
    if (!bf16_native()) return "emulated: AVX512_BF16 not found, same numerics, no speedup";
    if (getenv("TFM_BF16_PRODUCTS") && *getenv("TFM_BF16_PRODUCTS")) return "emulated (TFM_BF16_PRODUCTS=emulated): same numerics";
    return cpu_has(CPU_AMX_BF16) ? "emulated: this CPU's VDPBF16PS is no faster than its fp32 FMAs and translation does not use "
                                   "the AMX tiles (not measured end to end: doc/cpus.md), same numerics"
                                 : "emulated: this CPU's VDPBF16PS is no faster than its fp32 FMAs, same numerics";
}

/* ---- fp32 products ---------------------------------------------------------- */
static Fp32Route g_fp32 = (Fp32Route)-1;

int fp32_onednn(void) {
#ifdef TFM_DNNL
    static int ok = -1;   /* asked once, from serial code */
    if (ok < 0) {
        unsigned isa = (unsigned)dnnl_get_effective_cpu_isa(), core = dnnl_cpu_isa_avx512_core;
        ok = (isa & core) == core && cpu_has(CPU_AVX512F) && cpu_has(CPU_AVX512DQ) && cpu_has(CPU_AVX512BW) &&
             cpu_has(CPU_AVX512VL);
    }
    return ok;
#else
    return 0;
#endif
}

/* The rule (dispatch.h). One thread, each product of a training step as
 * gemm_many cuts it (the Multi30k recipe's and the base model's), oneDNN's
 * f32 brgemm against BLIS's skx kernels on an AMD EPYC Zen 5: 1.04-1.26x
 * at every shape, the primitive's lookup in oneDNN's cache included; a
 * recipe step 1.16x (doc/cpus.md). On an AMD Zen 4 too, which runs AVX-512
 * as two 256-bit halves and where BLIS's zen3 kernels beat its skx ones:
 * oneDNN's brgemm against BLIS zen3 in alternating processes, 2 threads,
 * ran the recipe's step 1.02-1.31x and the base model's 1.02-1.07x faster
 * (twelve pairs, each won). Without AVX-512 oneDNN 2.6 has no f32 brgemm (its
 * gemm:jit runs, gemm_dnnl_runs): BLIS. */
int fp32_rule(const char *env, int onednn, const char **why) {
    *why = "";
    if (env && *env) {
        if (!strcmp(env, "blis")) return FP32_BLIS;
        if (!strcmp(env, "onednn")) {
            if (gemm_dnnl_runs()) return FP32_ONEDNN;   /* any AVX-512 CPU (its brgemm may need more) */
            *why = gemm_dnnl_built() ? "oneDNN 2.6 has no f32 brgemm on this CPU (it needs AVX-512)"
                                     : "this tfm is built without oneDNN (make DNNL=0)";
            return -1;
        }
        *why = "expected onednn or blis";
        return -1;
    }
    return onednn ? FP32_ONEDNN : FP32_BLIS;
}

Fp32Route fp32_route(void) {   /* first called from serial code */
    if ((int)g_fp32 >= 0) return g_fp32;
    const char *why, *e = getenv("TFM_FP32_PRODUCTS");
    int r = fp32_rule(e, fp32_onednn(), &why);
    if (r < 0) die("TFM_FP32_PRODUCTS=%s: %s", e, why);
    g_fp32 = (Fp32Route)r;
    return g_fp32;
}

void fp32_route_set(Fp32Route r) {
    ASSERT(r == FP32_BLIS || (r == FP32_ONEDNN && gemm_dnnl_runs()));
    g_fp32 = r;
}

const char *fp32_mode(void) {
    int forced = getenv("TFM_FP32_PRODUCTS") && *getenv("TFM_FP32_PRODUCTS");
    if (fp32_route() == FP32_ONEDNN)
        return forced ? "oneDNN matmul (TFM_FP32_PRODUCTS=onednn)" : "oneDNN matmul (AVX-512 brgemm)";
    if (forced) return "BLIS sgemm (TFM_FP32_PRODUCTS=blis)";
    if (!gemm_dnnl_built()) return "BLIS sgemm (built without oneDNN)";
    if (!fp32_onednn()) return "BLIS sgemm (oneDNN's f32 brgemm needs AVX-512)";
    return "BLIS sgemm (fp32_route_set)";
}

int int8_vnni(void) { return cpu_has(CPU_AVX512F) && cpu_has(CPU_AVX512BW) && cpu_has(CPU_AVX512_VNNI); }

int int8_amx(void) {
    static int ok = -1;   /* asked once, from serial code (int8_kernel) */
    if (ok < 0) ok = cpu_has(CPU_AMX_TILE) && cpu_has(CPU_AMX_INT8) && cpu_amx_request() == 0;
    return ok;
}

int int8_onednn(void) {
#ifdef TFM_DNNL
    static int level = -1;   /* asked once, from serial code */
    if (level < 0) {
        unsigned isa = (unsigned)dnnl_get_effective_cpu_isa(), amx = dnnl_cpu_isa_avx512_core_amx;
        unsigned v512 = dnnl_cpu_isa_avx512_core_vnni, v256 = dnnl_cpu_isa_avx2_vnni;
        /* oneDNN's ISA is a set of bits; tfm's feature masks (TFM_CPU_FEATURES)
         * cap it, so that -amx_int8 or -avx512_vnni take its units away here
         * as they do ours (AVX_VNNI alone has no tfm feature to mask) */
        if ((isa & amx) == amx && cpu_has(CPU_AMX_INT8) && cpu_has(CPU_AMX_TILE)) level = 2;
        else if ((isa & v512) == v512 && cpu_has(CPU_AVX512_VNNI)) level = 1;
        else if ((isa & v256) == v256 && (isa & v512) != v512) level = 1;
        else level = 0;
    }
    return level;
#else
    return 0;
#endif
}

/* The rule (dispatch.h). Where oneDNN has only VNNI, tfm's kernel: on an
 * AMD EPYC Zen 4 oneDNN's route ran 0.93-1.03x ours at the decoder's
 * products of 32 and 256 rows (1.2-1.3x at 4 rows of the base model's),
 * and 0.95x (multi30k) and 0.96x (base) ours in beam-4 translation, CPU
 * time, one thread (scripts/bench-int8.sh, doc/precision.md). */
int int8_rule(const char *env, int vnni, int amx, int onednn, const char **why) {
    /* (INT8_BY_ROWS below: measured on an Intel Xeon, family 6 model 0xcf,
     * with AMX-INT8, 2 threads, decoder-step products of the multi30k and
     * base shapes, speed against fp32 (dev/bench_int8): at 4 rows tfm's
     * VNNI kernel x7.1 / x6.7, oneDNN (AMX) x3.5 / x4.4, tfm's AMX kernel
     * x2.7 / x2.9; at 32 rows VNNI x5.1 / x7.2, oneDNN x3.4 / x6.3, AMX
     * x5.1 / x10.5; at 256 rows VNNI x4.6 / x4.3, oneDNN x6.4 / x9.2, AMX
     * x3.0 / x7.3.) */
    *why = "";
    if (env && *env) {
        if (!strcmp(env, "model")) return INT8_MODEL;
        if (!strcmp(env, "amx-model")) return INT8_AMX_MODEL;
        if (!strcmp(env, "vnni")) {
            if (vnni) return INT8_VNNI;
            *why = "this CPU lacks AVX512_VNNI (or TFM_CPU_FEATURES masks it)";
            return -1;
        }
        if (!strcmp(env, "amx")) {
            if (amx) return INT8_AMX;
            *why = "this CPU lacks AMX-INT8, or Linux refused the tile data, or TFM_CPU_FEATURES masks it";
            return -1;
        }
        if (!strcmp(env, "onednn")) {
            if (onednn) return INT8_ONEDNN;
            *why = gemm_dnnl_built() ? "oneDNN has neither VNNI nor AMX-INT8 on this CPU (its int8 sums would saturate)"
                                     : "this tfm is built without oneDNN (make DNNL=0)";
            return -1;
        }
        *why = "expected model, vnni, amx, amx-model or onednn";
        return -1;
    }
    if (amx && onednn == 2) return INT8_BY_ROWS;     /* AMX: each product on the fastest at its rows */
    if (vnni) return INT8_VNNI;
    if (onednn) return INT8_ONEDNN;                  /* AVX_VNNI without AVX-512: oneDNN's ymm kernels */
    return INT8_MODEL;
}

Int8Kernel int8_by_rows(int n, int vnni, int amx, int onednn) {
    if (n < INT8_VNNI_BELOW && vnni) return INT8_VNNI;
    if (n <= INT8_AMX_UPTO && amx) return INT8_AMX;
    if (onednn) return INT8_ONEDNN;
    if (amx) return INT8_AMX;
    return vnni ? INT8_VNNI : INT8_MODEL;
}

int int8_runs(Int8Kernel k) {
    switch (k) {
    case INT8_VNNI: return int8_vnni();
    case INT8_AMX: return int8_amx();
    case INT8_ONEDNN: return int8_onednn() != 0;
    case INT8_BY_ROWS: return int8_amx() && int8_onednn();
    default: return 1;
    }
}

static int g_int8 = -1;

Int8Kernel int8_kernel(void) {
    if (g_int8 < 0) {
        const char *e = getenv("TFM_INT8_KERNEL"), *why;
        int k = int8_rule(e, int8_vnni(), int8_amx(), int8_onednn(), &why);
        if (k < 0) die("TFM_INT8_KERNEL=%s: %s", e, why);
        g_int8 = k;
    }
    return (Int8Kernel)g_int8;
}

void int8_set_kernel(Int8Kernel k) {
    ASSERT(int8_runs(k));
    g_int8 = (int)k;
}

const char *int8_mode(void) {
    int forced = getenv("TFM_INT8_KERNEL") && *getenv("TFM_INT8_KERNEL");
    switch (int8_kernel()) {
    case INT8_ONEDNN:
        if (forced) return "oneDNN matmul (TFM_INT8_KERNEL=onednn)";
        return int8_onednn() == 2 ? "oneDNN matmul (AMX-INT8)" : "oneDNN matmul (VNNI)";
    case INT8_BY_ROWS: {
        static char by[160];
        if (int8_vnni())
            snprintf(by, sizeof by, "by rows: tfm's AVX512_VNNI kernel under %d, its AMX-INT8 kernel to %d, oneDNN "
                     "matmul (AMX-INT8) above", INT8_VNNI_BELOW, INT8_AMX_UPTO);
        else   /* (int8_by_rows: VNNI masked off) */
            snprintf(by, sizeof by, "by rows: tfm's AMX-INT8 kernel to %d, oneDNN matmul (AMX-INT8) above",
                     INT8_AMX_UPTO);
        return by;
    }
    case INT8_AMX: return "tfm's AMX-INT8 kernel (TFM_INT8_KERNEL=amx)";
    case INT8_VNNI: return forced ? "AVX512_VNNI kernel (TFM_INT8_KERNEL=vnni)" : "AVX512_VNNI kernel";
    case INT8_AMX_MODEL: return "scalar model of the AMX kernel (TFM_INT8_KERNEL=amx-model), same numbers, slow";
    default: return forced ? "scalar model (TFM_INT8_KERNEL=model)" : "scalar model: AVX512_VNNI not found, same numbers, slower";
    }
}

/* ---- tfm info -------------------------------------------------------------- */
void dispatch_report(FILE *f) {
    const CpuInfo *c = cpu_info();
    fprintf(f, "cpu: %s (%s, family 0x%x, model 0x%x)\n", c->brand[0] ? c->brand : "unknown",
            c->vendor_id[0] ? c->vendor_id : "not x86", c->family, c->model);
    fprintf(f, "features:");
    int any = 0;
    for (int i = 0; i < CPU_NFEATURES; i++)
        if (cpu_has((CpuFeature)i)) {
            fprintf(f, " %s", cpu_feature_name((CpuFeature)i));
            any = 1;
        }
    if (!any) fprintf(f, " none of those tfm uses");
    fprintf(f, "\n");
    const char *mask = getenv("TFM_CPU_FEATURES");
    if (mask && *mask) fprintf(f, "features masked off: TFM_CPU_FEATURES=%s\n", mask);
    const char *k = blis_kernels(), *src = blis_kernels_source();
    if (!strcmp(src, "BLIS"))
        fprintf(f, "blis kernels: %s (BLIS's own choice)", k);
    else
        fprintf(f, "blis kernels: %s (%s; BLIS's own choice: %s)", k,
                !strcmp(src, "tfm") ? "chosen by tfm from the CPU's features" : "as BLIS_ARCH_TYPE asks", blis_kernels_own());
    fprintf(f, "%s\n", !strcmp(k, "generic") ? "  WARNING: portable C kernels, slow" : "");
    fprintf(f, "default threads: %d (all cores; --threads N or [run] threads to change)\n", omp_get_num_procs());
    fprintf(f, "fp32 products: %s (training, eval's scoring)\n", fp32_mode());
    fprintf(f, "bf16 products: %s (training, eval's scoring)\n", bf16_mode());
    fprintf(f, "bf16 translation: %s\n", bf16_decode_mode());
    fprintf(f, "bf16 rounding: %s\n", bf16_native() ? "VCVTNEPS2BF16 (AVX512_BF16)" : "integer code (no AVX512_BF16)");
}
