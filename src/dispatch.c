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
    return 0;
}

int threads_count(void) { return g_threads; }

/* ---- tfm's own kernels ----------------------------------------------------- */
int bf16_native(void) { return cpu_has(CPU_AVX512F) && cpu_has(CPU_AVX512_BF16); }

static Bf16Route g_route = (Bf16Route)-1;

int gemm_dnnl_built(void) {
#ifdef TFM_DNNL
    return 1;
#else
    return 0;
#endif
}

Bf16Route bf16_route(void) {   /* first called from serial code */
    if ((int)g_route >= 0) return g_route;
    const char *e = getenv("TFM_BF16_PRODUCTS");
    if (e && *e) {
        if (!strcmp(e, "onednn") && gemm_dnnl_built()) g_route = BF16_ONEDNN;
        else if (!strcmp(e, "kernel") && bf16_native()) g_route = BF16_KERNEL;
        else if (!strcmp(e, "emulated")) g_route = BF16_EMULATED;
        else die("TFM_BF16_PRODUCTS=%s: expected onednn (in a build with oneDNN), kernel (on a CPU with AVX512_BF16) "
                 "or emulated; this build %s oneDNN and this CPU %s AVX512_BF16", e,
                 gemm_dnnl_built() ? "has" : "lacks", bf16_native() ? "has" : "lacks");
    } else {
        g_route = !bf16_native() ? BF16_EMULATED : gemm_dnnl_built() ? BF16_ONEDNN : BF16_KERNEL;
    }
    return g_route;
}

void bf16_route_set(Bf16Route r) {
    ASSERT(r == BF16_EMULATED || (r == BF16_KERNEL && bf16_native()) || (r == BF16_ONEDNN && gemm_dnnl_built()));
    g_route = r;
}

const char *bf16_mode(void) {
    switch (bf16_route()) {
    case BF16_ONEDNN: return "oneDNN matmul (AVX512_BF16 or AMX, as oneDNN picks)";
    case BF16_KERNEL: return "AVX512_BF16 kernel";
    default: return bf16_native() ? "emulated (TFM_BF16_PRODUCTS=emulated): same numerics, no speedup"
                                  : "emulated: AVX512_BF16 not found, same numerics, no speedup";
    }
}

int int8_vnni(void) { return cpu_has(CPU_AVX512F) && cpu_has(CPU_AVX512BW) && cpu_has(CPU_AVX512_VNNI); }

int int8_amx(void) {
    static int ok = -1;   /* asked once, from serial code (int8_kernel) */
    if (ok < 0) ok = cpu_has(CPU_AMX_TILE) && cpu_has(CPU_AMX_INT8) && cpu_amx_request() == 0;
    return ok;
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
    fprintf(f, "bf16 products: %s\n", bf16_mode());
}
