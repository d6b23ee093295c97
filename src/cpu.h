/* cpu.h — what this CPU can do: vendor, family, model and the instruction
 * set features tfm's kernels (and BLIS's) are chosen from, read once with
 * CPUID, and the pure rule that picks BLIS's kernel set from them.
 *
 * Every kernel choice in tfm asks cpu_has(); nothing else reads CPUID. A
 * feature counts only when the operating system also saves its registers
 * (XCR0: the ymm, zmm and tile state), so cpu_has(CPU_AVX512F) means "may
 * run AVX-512 instructions here".
 *
 * Test hook: the environment variable TFM_CPU_FEATURES masks features off,
 * a comma-separated list of "-name" (names as cpu_feature_name spells them,
 * as in /proc/cpuinfo): TFM_CPU_FEATURES=-avx512_bf16 runs the emulated bf16
 * products on a CPU that has the instruction, -avx512f takes every AVX-512
 * path (and BLIS's skx choice) away: a feature that needs a masked one
 * (the AVX-512 extensions need F, AMX-BF16/INT8 the tiles) goes with it. It only takes away: a feature the CPU
 * lacks cannot be added (it would crash on the first instruction). "-all"
 * masks every feature.
 *
 * AMX: cpu_has(CPU_AMX_*) says the CPU has the tiles and the kernel enabled
 * them in XCR0; on Linux a process must still ask for the tile data state
 * once before the first tile instruction (else SIGILL): cpu_amx_request(). */
#ifndef TFM_CPU_H
#define TFM_CPU_H

typedef enum {
    CPU_FMA,           /* VFMADD*PS ymm (FMA3) */
    CPU_AVX2,
    CPU_AVX512F,       /* 512-bit registers, the foundation */
    CPU_AVX512DQ,
    CPU_AVX512BW,
    CPU_AVX512VL,      /* F, DQ, BW, VL: what BLIS's skx kernels use */
    CPU_AVX512_VNNI,   /* VPDPBUSD: int8 dot products into int32 */
    CPU_AVX512_BF16,   /* VDPBF16PS: bf16 pair dot products into fp32 */
    CPU_AMX_TILE,      /* the tile registers (LDTILECFG, TILELOADD, ...) */
    CPU_AMX_BF16,      /* TDPBF16PS */
    CPU_AMX_INT8,      /* TDPBUSD and friends */
    CPU_SSE4_2,        /* CRC32 (crc32c.c: the tensor checksums) */
    CPU_NFEATURES
} CpuFeature;

#define CPU_BIT(f) (1u << (f))

typedef enum { CPU_VENDOR_OTHER, CPU_VENDOR_INTEL, CPU_VENDOR_AMD } CpuVendor;

typedef struct {
    CpuVendor vendor;
    char vendor_id[13];   /* "GenuineIntel", "AuthenticAMD", ...; "" off x86 */
    char brand[49];       /* "AMD EPYC 9654 96-Core Processor"; a VM may show less */
    int family, model;    /* display family and model (base + extended fields) */
    unsigned features;    /* CPU_BIT(f) for each CpuFeature present (after the mask) */
} CpuInfo;

/* Reads CPUID and applies TFM_CPU_FEATURES, once. -1 + errorf when
 * TFM_CPU_FEATURES is malformed (threads_init reports it, exit 1). */
int cpu_init(void);
/* This CPU (cpu_init first; a malformed TFM_CPU_FEATURES is fatal here). */
const CpuInfo *cpu_info(void);
int cpu_has(CpuFeature f);
const char *cpu_feature_name(CpuFeature f);   /* "avx512_bf16", as /proc/cpuinfo */

/* Pure: the features left after a TFM_CPU_FEATURES-style spec ("-avx2,
 * -amx_tile"; "" or NULL keeps all). -1 + errorf naming the bad entry. */
int cpu_mask(unsigned features, const char *spec, unsigned *out);

/* Pure: the BLIS kernel set (BLIS's own name: "skx", "haswell", "zen3",
 * "generic", ...) tfm asks for on a CPU c, given the set BLIS would choose
 * by itself (blis_choice). cpu.c has the measurements behind each rule:
 *   - AVX-512 F/DQ/BW/VL: "skx", unless BLIS already chose a 512-bit set, or
 *     the CPU is a Zen 4 (AMD family 0x19), where BLIS's zen3 kernels
 *     measured as fast or faster than skx;
 *   - else AVX2 + FMA: BLIS's choice if it is one of the 256-bit FMA sets,
 *     else (generic, sandybridge, ...: a CPU BLIS does not know) "haswell";
 *   - else BLIS's choice. */
const char *cpu_blis_kernels(const CpuInfo *c, const char *blis_choice);

/* Linux: ask for the AMX tile data state (arch_prctl ARCH_REQ_XCOMP_PERM),
 * once per process; 0 when granted, -1 + errorf otherwise (or no AMX). */
int cpu_amx_request(void);

#endif
