/* test_cpu.c — cpu.h: the BLIS kernel rule on a table of CPUs, the
 * TFM_CPU_FEATURES mask, and this CPU as CPUID reports it (dispatch follows
 * the mask: bf16 products emulated when AVX512_BF16 is masked off). */
#include "cpu.h"
#include "dispatch.h"
#include "test.h"
#include "util.h"

#define B(f) CPU_BIT(CPU_##f)
enum {
    AVX2 = B(AVX2) | B(FMA),
    AVX512 = AVX2 | B(AVX512F) | B(AVX512DQ) | B(AVX512BW) | B(AVX512VL),
    ICX = AVX512 | B(AVX512_VNNI),
    SPR = ICX | B(AVX512_BF16) | B(AMX_TILE) | B(AMX_BF16) | B(AMX_INT8),
    ZEN4 = ICX | B(AVX512_BF16),
};

/* CPUs as CPUID shows them, BLIS 0.9's own choice on each (Intel by features
 * and the brand string's FMA units, AMD by family and model, else generic),
 * and the set tfm should ask for (cpu.c has the measurements). */
static const struct {
    const char *name;
    CpuVendor vendor;
    int family, model;
    unsigned features;
    const char *blis, *want;
} CPUS[] = {
    {"Haswell", CPU_VENDOR_INTEL, 6, 0x3C, AVX2, "haswell", "haswell"},
    {"Skylake-X (Gold 6148)", CPU_VENDOR_INTEL, 6, 0x55, AVX512, "skx", "skx"},
    {"Ice Lake (one FMA unit by its brand)", CPU_VENDOR_INTEL, 6, 0x7E, ICX, "haswell", "skx"},
    {"Ice Lake server", CPU_VENDOR_INTEL, 6, 0x6A, ICX, "skx", "skx"},
    {"Sapphire Rapids VM, bare brand string", CPU_VENDOR_INTEL, 6, 0x8F, SPR, "haswell", "skx"},
    {"Granite Rapids VM (family 6, model 0xAD)", CPU_VENDOR_INTEL, 6, 0xAD, SPR, "haswell", "skx"},
    {"Zen 2", CPU_VENDOR_AMD, 0x17, 0x31, AVX2, "zen2", "zen2"},
    {"Zen 3", CPU_VENDOR_AMD, 0x19, 0x01, AVX2, "zen3", "zen3"},
    {"Zen 4 (skx measured no faster)", CPU_VENDOR_AMD, 0x19, 0x11, ZEN4, "zen3", "zen3"},
    {"Zen 5 (BLIS 0.9 does not know it)", CPU_VENDOR_AMD, 0x1A, 0x02, ZEN4, "generic", "skx"},
    {"Zen 5, with a BLIS that knows it", CPU_VENDOR_AMD, 0x1A, 0x02, ZEN4, "zen5", "zen5"},
    {"unknown future AMD family, AVX-512", CPU_VENDOR_AMD, 0x1B, 0x00, AVX512, "generic", "skx"},
    {"unknown vendor, AVX-512", CPU_VENDOR_OTHER, 0x1A, 0x00, AVX512, "generic", "skx"},
    {"unknown vendor, AVX2 + FMA (Hygon)", CPU_VENDOR_OTHER, 0x18, 0x01, AVX2, "generic", "haswell"},
    {"AVX2 without FMA (a VM hiding it)", CPU_VENDOR_OTHER, 6, 0x3C, B(AVX2), "generic", "generic"},
    {"no AVX2: Sandy Bridge", CPU_VENDOR_INTEL, 6, 0x2A, 0, "sandybridge", "sandybridge"},
    {"no AVX2: unknown", CPU_VENDOR_OTHER, 6, 0x0F, 0, "generic", "generic"},
    {"AVX-512 masked off on a Zen 5 (TFM_CPU_FEATURES=-avx512f)", CPU_VENDOR_AMD, 0x1A, 0x02, AVX2, "generic", "haswell"},
};

static void test_blis_rule(void) {
    for (size_t i = 0; i < sizeof CPUS / sizeof *CPUS; i++) {
        CpuInfo c = {.vendor = CPUS[i].vendor, .family = CPUS[i].family, .model = CPUS[i].model,
                     .features = CPUS[i].features};
        const char *got = cpu_blis_kernels(&c, CPUS[i].blis);
        CHECK_MSG(!strcmp(got, CPUS[i].want), "%s, BLIS's choice %s: got %s, expected %s", CPUS[i].name,
                  CPUS[i].blis, got, CPUS[i].want);
    }
}

static void test_mask(void) {
    unsigned out;
    CHECK(cpu_mask(SPR, NULL, &out) == 0 && out == SPR);
    CHECK(cpu_mask(SPR, "", &out) == 0 && out == SPR);
    CHECK(cpu_mask(SPR, "-avx512_bf16", &out) == 0 && out == (SPR & ~B(AVX512_BF16)));
    CHECK(cpu_mask(SPR, " -amx_tile, -amx_bf16,-amx_int8 ", &out) == 0 && out == ICX + B(AVX512_BF16));
    CHECK(cpu_mask(AVX2, "-avx512f", &out) == 0 && out == AVX2);   /* masking an absent feature: no-op */
    CHECK(cpu_mask(SPR, "-all", &out) == 0 && out == 0);
    /* only taking away: "avx2" without '-' would add it */
    CHECK(cpu_mask(AVX2, "avx512f", &out) == -1 && strstr(error_message(), "-NAME"));
    CHECK(cpu_mask(AVX2, "-avx513", &out) == -1 && strstr(error_message(), "unknown feature 'avx513'") &&
          strstr(error_message(), "avx512_bf16"));
    /* what needs a masked feature goes with it */
    CHECK(cpu_mask(SPR, "-avx512f", &out) == 0 && out == (AVX2 | B(AMX_TILE) | B(AMX_BF16) | B(AMX_INT8)));
    CHECK(cpu_mask(SPR, "-amx_tile", &out) == 0 && out == ZEN4);
    /* every name is understood and masks its feature, and only it when nothing needs it */
    unsigned all = (1u << CPU_NFEATURES) - 1;
    for (int f = 0; f < CPU_NFEATURES; f++) {
        char spec[64];
        snprintf(spec, sizeof spec, "-%s", cpu_feature_name((CpuFeature)f));
        int base = f == CPU_AVX512F || f == CPU_AMX_TILE;
        CHECK_MSG(cpu_mask(all, spec, &out) == 0 && !(out & CPU_BIT(f)) && (base || out == (all & ~CPU_BIT(f))), "%s", spec);
    }
}

/* This process runs with TFM_CPU_FEATURES=-avx512_bf16,-amx_bf16 (main sets
 * it before the first look at the CPU): those read as absent whatever the
 * CPU, and bf16 products take the emulated path. */
static void test_this_cpu(void) {
    const CpuInfo *c = cpu_info();
    printf("this CPU: %s, %s, family 0x%x model 0x%x, features:", c->brand, c->vendor_id, c->family, c->model);
    for (int f = 0; f < CPU_NFEATURES; f++)
        if (cpu_has((CpuFeature)f)) printf(" %s", cpu_feature_name((CpuFeature)f));
    printf("\n");
    CHECK(!cpu_has(CPU_AVX512_BF16) && !cpu_has(CPU_AMX_BF16));
    CHECK(!bf16_native());
    CHECK(strstr(bf16_mode(), "emulated") != NULL);
#if defined(__x86_64__)
    CHECK(c->vendor_id[0] != '\0');   /* CPUID answered */
    CHECK(c->family >= 6);
    /* the features this binary was compiled for (-march) are there */
#ifdef __AVX2__
    CHECK(cpu_has(CPU_AVX2));
#endif
#ifdef __FMA__
    CHECK(cpu_has(CPU_FMA));
#endif
#ifdef __AVX512F__
    CHECK(cpu_has(CPU_AVX512F));
#endif
#endif
    /* AVX-512 parts imply the foundation: a CPU that reports one without F
     * would be a CPUID bug or a bad mask */
    if (cpu_has(CPU_AVX512BW) || cpu_has(CPU_AVX512VL) || cpu_has(CPU_AVX512DQ)) CHECK(cpu_has(CPU_AVX512F));
}

int main(void) {
    setenv("TFM_CPU_FEATURES", "-avx512_bf16,-amx_bf16", 1);
    RUN(test_blis_rule);
    RUN(test_mask);
    RUN(test_this_cpu);
    return test_summary();
}
