/* cpu.c — CPUID, the TFM_CPU_FEATURES mask and BLIS's kernel set (see cpu.h).
 *
 * CPUID leaves read (Intel SDM vol. 2A, "CPUID"; AMD APM vol. 3, appendix E):
 *   0            vendor string (EBX, EDX, ECX)
 *   1            family/model (EAX), FMA (ECX bit 12), SSE4.2 (ECX bit 20), OSXSAVE (ECX bit 27)
 *   7, subleaf 0 AVX2 (EBX 5), AVX512F (EBX 16), DQ (EBX 17), BW (EBX 30),
 *                VL (EBX 31), AVX512_VNNI (ECX 11), AMX-BF16 (EDX 22),
 *                AMX-TILE (EDX 24), AMX-INT8 (EDX 25)
 *   7, subleaf 1 AVX512_BF16 (EAX 5)
 *   0x80000002-4 the brand string
 * and XGETBV(0) = XCR0, the register state the OS saves on a context switch:
 * bits 1-2 (xmm, ymm) for AVX*, 5-7 (opmask, zmm) for AVX-512, 17-18 (tile
 * config, tile data) for AMX. A feature whose state the OS does not save
 * counts as absent. */
#include "cpu.h"

#include <stdlib.h>
#include <string.h>

#include "util.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>
#define HAVE_X86 1
#else
#define HAVE_X86 0
#endif

static const char *const feature_names[CPU_NFEATURES] = {
    [CPU_FMA] = "fma",
    [CPU_AVX2] = "avx2",
    [CPU_AVX512F] = "avx512f",
    [CPU_AVX512DQ] = "avx512dq",
    [CPU_AVX512BW] = "avx512bw",
    [CPU_AVX512VL] = "avx512vl",
    [CPU_AVX512_VNNI] = "avx512_vnni",
    [CPU_AVX512_BF16] = "avx512_bf16",
    [CPU_AMX_TILE] = "amx_tile",
    [CPU_AMX_BF16] = "amx_bf16",
    [CPU_AMX_INT8] = "amx_int8",
    [CPU_SSE4_2] = "sse4_2",
};

const char *cpu_feature_name(CpuFeature f) {
    ASSERT(f >= 0 && f < CPU_NFEATURES);
    return feature_names[f];
}

/* ---- reading CPUID ----------------------------------------------------- */
#if HAVE_X86
static void detect(CpuInfo *c) {
    unsigned a, b, cx, d, max;
    if (!__get_cpuid(0, &max, &b, &cx, &d)) return;
    memcpy(c->vendor_id, &b, 4);
    memcpy(c->vendor_id + 4, &d, 4);
    memcpy(c->vendor_id + 8, &cx, 4);
    c->vendor_id[12] = '\0';
    c->vendor = !strcmp(c->vendor_id, "GenuineIntel") ? CPU_VENDOR_INTEL
              : !strcmp(c->vendor_id, "AuthenticAMD") ? CPU_VENDOR_AMD : CPU_VENDOR_OTHER;

    __cpuid(1, a, b, cx, d);
    /* display family = base + extended (when base is 0xF); display model =
     * extended model << 4 | base model (when base family is 6 or 0xF) */
    int base_family = (a >> 8) & 0xF, base_model = (a >> 4) & 0xF;
    c->family = base_family == 0xF ? base_family + (int)((a >> 20) & 0xFF) : base_family;
    c->model = base_family == 0x6 || base_family == 0xF ? (int)((a >> 16) & 0xF) << 4 | base_model : base_model;
    int fma = (cx >> 12) & 1, osxsave = (cx >> 27) & 1;

    unsigned long long xcr0 = 0;
    if (osxsave) {
        unsigned lo, hi;
        __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
        xcr0 = (unsigned long long)hi << 32 | lo;
    }
    int os_avx = (xcr0 & 0x6) == 0x6, os_avx512 = os_avx && (xcr0 & 0xE0) == 0xE0;
    int os_amx = (xcr0 & 0x60000) == 0x60000;

    unsigned f = 0;
    if (fma && os_avx) f |= CPU_BIT(CPU_FMA);
    if (cx >> 20 & 1) f |= CPU_BIT(CPU_SSE4_2);   /* xmm state only: every x86-64 OS saves it */
    if (max >= 7) {
        __cpuid_count(7, 0, a, b, cx, d);
        unsigned max7 = a;
        if (os_avx && (b >> 5 & 1)) f |= CPU_BIT(CPU_AVX2);
        if (os_avx512) {
            if (b >> 16 & 1) f |= CPU_BIT(CPU_AVX512F);
            if (b >> 17 & 1) f |= CPU_BIT(CPU_AVX512DQ);
            if (b >> 30 & 1) f |= CPU_BIT(CPU_AVX512BW);
            if (b >> 31 & 1) f |= CPU_BIT(CPU_AVX512VL);
            if (cx >> 11 & 1) f |= CPU_BIT(CPU_AVX512_VNNI);
        }
        if (os_amx) {
            if (d >> 22 & 1) f |= CPU_BIT(CPU_AMX_BF16);
            if (d >> 24 & 1) f |= CPU_BIT(CPU_AMX_TILE);
            if (d >> 25 & 1) f |= CPU_BIT(CPU_AMX_INT8);
        }
        if (max7 >= 1) {
            __cpuid_count(7, 1, a, b, cx, d);
            if (os_avx512 && (a >> 5 & 1)) f |= CPU_BIT(CPU_AVX512_BF16);
        }
    }
    c->features = f;

    unsigned ext;
    __cpuid(0x80000000, ext, b, cx, d);
    if (ext >= 0x80000004) {
        unsigned r[12];
        for (unsigned i = 0; i < 3; i++) __cpuid(0x80000002 + i, r[4 * i], r[4 * i + 1], r[4 * i + 2], r[4 * i + 3]);
        memcpy(c->brand, r, 48);
        c->brand[48] = '\0';
        /* trim the padding some CPUs put around the name */
        char *s = c->brand;
        while (*s == ' ') s++;
        memmove(c->brand, s, strlen(s) + 1);
        for (size_t n = strlen(c->brand); n > 0 && c->brand[n - 1] == ' '; n--) c->brand[n - 1] = '\0';
    }
}
#else
static void detect(CpuInfo *c) { (void)c; }   /* not x86-64: no features, BLIS decides alone */
#endif

/* ---- the mask ---------------------------------------------------------- */
/* A feature that builds on one that is absent (or masked off) goes too: the
 * AVX-512 extensions need AVX512F, the AMX instructions the tiles. */
static unsigned cpu_consistent(unsigned f) {
    if (!(f & CPU_BIT(CPU_AVX512F)))
        f &= ~(CPU_BIT(CPU_AVX512DQ) | CPU_BIT(CPU_AVX512BW) | CPU_BIT(CPU_AVX512VL) | CPU_BIT(CPU_AVX512_VNNI) |
               CPU_BIT(CPU_AVX512_BF16));
    if (!(f & CPU_BIT(CPU_AMX_TILE))) f &= ~(CPU_BIT(CPU_AMX_BF16) | CPU_BIT(CPU_AMX_INT8));
    return f;
}

int cpu_mask(unsigned features, const char *spec, unsigned *out) {
    *out = features;
    if (!spec) return 0;
    const char *p = spec;
    while (*p) {
        while (*p == ',' || *p == ' ') p++;
        if (!*p) break;
        size_t n = strcspn(p, ", ");
        if (*p != '-')
            return errorf("TFM_CPU_FEATURES=%s: '%.*s' should be -NAME (a feature to mask off; features can only be "
                          "taken away)", spec, (int)n, p);
        const char *name = p + 1;
        size_t len = n - 1;
        if (len == 3 && !strncmp(name, "all", 3)) {
            *out = 0;
        } else {
            int f = 0;
            while (f < CPU_NFEATURES && !(strlen(feature_names[f]) == len && !strncmp(name, feature_names[f], len))) f++;
            if (f == CPU_NFEATURES) {
                char known[256] = "";
                for (int i = 0; i < CPU_NFEATURES; i++) {
                    strcat(known, feature_names[i]);
                    strcat(known, ", ");
                }
                return errorf("TFM_CPU_FEATURES=%s: unknown feature '%.*s' (known: %sall)", spec, (int)len, name, known);
            }
            *out &= ~CPU_BIT(f);
        }
        p += n;
    }
    *out = cpu_consistent(*out);
    return 0;
}

/* ---- this CPU, once -------------------------------------------------------- */
static CpuInfo g_cpu;
static int g_state;   /* 0: not read, 1: read, -1: TFM_CPU_FEATURES malformed */

int cpu_init(void) {
    if (g_state == 1) return 0;
    CpuInfo c = {0};
    detect(&c);
    const char *spec = getenv("TFM_CPU_FEATURES");
    if (cpu_mask(c.features, spec, &c.features)) {
        g_state = -1;
        return -1;
    }
    g_cpu = c;
    g_state = 1;
    return 0;
}

const CpuInfo *cpu_info(void) {
    if (g_state != 1 && cpu_init()) die_error();
    return &g_cpu;
}

int cpu_has(CpuFeature f) {
    ASSERT(f >= 0 && f < CPU_NFEATURES);
    return (cpu_info()->features & CPU_BIT(f)) != 0;
}

/* ---- BLIS's kernel set --------------------------------------------------
 * BLIS 0.9 picks its kernels from a list of CPUs it knows: Intel by
 * features plus the FMA units it reads off the brand string (a VM's bare
 * "Intel(R) Xeon(R) Processor" gets the AVX2 'haswell' kernels on an
 * AVX-512 Sapphire Rapids), AMD by family and model (family 0x19 gets
 * 'zen3'; family 0x1A, Zen 5, is unknown and gets the portable C kernels,
 * 'generic'), any other vendor 'generic'. sgemm 2048^3, one thread, GFLOP/s:
 *   Sapphire Rapids VM (bare brand): haswell ~88, skx ~140
 *   Zen 5 (EPYC, family 0x1A):       generic 30, skx 174, zen2 105,
 *                                    haswell 96, zen3 94
 *   Zen 4 (EPYC, family 0x19 model 0x11, per CPU second on a shared
 *   2-core VM, best of 4):           generic 33, haswell 104, zen3 104,
 *                                    skx 99
 * (doc/training.md has the whole-step figures). So: the 512-bit skx kernels
 * wherever the CPU has what they use (AVX-512 F/DQ/BW/VL), except on Zen 4,
 * whose AVX-512 runs as two 256-bit halves and where BLIS's own choice is
 * as fast; else never generic on a CPU with AVX2 and FMA: haswell. A set
 * BLIS chose that already uses the CPU's full width is kept (a newer BLIS
 * may know a CPU better than this table). */
static int in_list(const char *s, const char *const *list) {
    for (; *list; list++)
        if (!strcmp(s, *list)) return 1;
    return 0;
}

const char *cpu_blis_kernels(const CpuInfo *c, const char *blis_choice) {
    static const char *const wide512[] = {"skx", "knl", "zen4", "zen5", NULL};
    static const char *const fma256[] = {"haswell", "zen", "zen2", "zen3", "excavator", NULL};
    unsigned avx512 = CPU_BIT(CPU_AVX512F) | CPU_BIT(CPU_AVX512DQ) | CPU_BIT(CPU_AVX512BW) | CPU_BIT(CPU_AVX512VL);
    unsigned avx2 = CPU_BIT(CPU_AVX2) | CPU_BIT(CPU_FMA);
    int zen4 = c->vendor == CPU_VENDOR_AMD && c->family == 0x19;   /* Zen 3 or 4; with AVX-512, Zen 4 */
    if ((c->features & avx512) == avx512 && !zen4)
        return in_list(blis_choice, wide512) ? blis_choice : "skx";
    if ((c->features & avx2) == avx2)
        return in_list(blis_choice, wide512) || in_list(blis_choice, fma256) ? blis_choice : "haswell";
    return blis_choice;
}

/* ---- AMX permission ----------------------------------------------------- */
int cpu_amx_request(void) {
    if (!cpu_has(CPU_AMX_TILE)) return errorf("AMX: this CPU (or TFM_CPU_FEATURES) has no AMX tiles");
#if HAVE_X86 && defined(__linux__)
    /* arch_prctl(ARCH_REQ_XCOMP_PERM = 0x1023, XFEATURE_XTILEDATA = 18):
     * Linux 5.16+ enables the 8 KB of tile state per thread on request */
    if (syscall(SYS_arch_prctl, 0x1023, 18) != 0)
        return errorf("AMX: the kernel refused the tile data state (arch_prctl ARCH_REQ_XCOMP_PERM): Linux 5.16 or later "
                      "is needed");
    return 0;
#else
    return errorf("AMX: only set up on Linux x86-64");
#endif
}
