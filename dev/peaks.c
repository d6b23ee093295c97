/* peaks.c — this CPU's physical peaks, for scripts/bench-train.sh's step
 * breakdown (each part of a step is rated against the limit of what it
 * runs on):
 *   build/dev/peaks [THREADS [SECONDS]]
 * prints one line per unit, "NAME  1-THREAD  ALL-THREADS  UNIT", for:
 *   fp32-fma   VFMADD231PS zmm (2 FLOP per lane: 32 per instruction), or
 *              ymm (16) on a CPU without AVX-512 (AVX2 + FMA: AMD Zen 3)
 *   bf16-dp    VDPBF16PS zmm (32 bf16 pairs: 64 FLOP per instruction)
 *   int8-vnni  VPDPBUSD zmm (64 u8 x s8 products summed by 4: 128 OP)
 *   amx-bf16   TDPBF16PS (16 x 16 fp32 sums of 32 bf16 pairs: 16,384 FLOP)
 *   amx-int8   TDPBUSD (16 x 16 int32 sums of 64 u8 x s8: 32,768 OP)
 *              (AMX: only where the CPU has the tiles and Linux grants
 *              them, else a "skipped" line saying why)
 *   mem-read   GB/s summing a 256 MB array (reads only)
 *   mem-copy   GB/s copying 128 MB to another 128 MB (read + write counted)
 * A compute peak is a loop of one instruction on 12 independent
 * accumulators (enough to cover its latency on Zen 4 and Intel cores; AMX:
 * the four C tiles of a 2 x 2 block, as oneDNN's and tfm's kernels run), on
 * each thread at once; the best of 5 runs; rates per CPU second of each
 * thread, summed (so a machine shared with other work does not lower them,
 * as long as the threads get cores). */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cpu.h"
#include "util.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define HAVE_X86 1
#else
#define HAVE_X86 0
#endif

enum { ACC = 12 };

#if HAVE_X86
__attribute__((target("avx512f"), noinline))
static float loop_fma(long iters) {
    __m512 acc[ACC], a = _mm512_set1_ps(1.0000001f), b = _mm512_set1_ps(0.9999999f);
    for (int i = 0; i < ACC; i++) acc[i] = _mm512_set1_ps((float)i);
    for (long it = 0; it < iters; it++)
        for (int i = 0; i < ACC; i++) acc[i] = _mm512_fmadd_ps(acc[i], a, b);
    __m512 s = acc[0];
    for (int i = 1; i < ACC; i++) s = _mm512_add_ps(s, acc[i]);
    return _mm512_reduce_add_ps(s);
}

__attribute__((target("avx2,fma"), noinline))
static float loop_fma256(long iters) {
    __m256 acc[ACC], a = _mm256_set1_ps(1.0000001f), b = _mm256_set1_ps(0.9999999f);
    for (int i = 0; i < ACC; i++) acc[i] = _mm256_set1_ps((float)i);
    for (long it = 0; it < iters; it++)
        for (int i = 0; i < ACC; i++) acc[i] = _mm256_fmadd_ps(acc[i], a, b);
    __m256 s = acc[0];
    for (int i = 1; i < ACC; i++) s = _mm256_add_ps(s, acc[i]);
    float l[8];
    _mm256_storeu_ps(l, s);
    return l[0] + l[1] + l[2] + l[3] + l[4] + l[5] + l[6] + l[7];
}

__attribute__((target("avx512f,avx512bf16"), noinline))
static float loop_bf16(long iters) {
    __m512 acc[ACC];
    __m512bh a = (__m512bh)_mm512_set1_epi16(0x3f80), b = (__m512bh)_mm512_set1_epi16(0x3c00);   /* 1.0, 2^-7 */
    for (int i = 0; i < ACC; i++) acc[i] = _mm512_set1_ps((float)i);
    for (long it = 0; it < iters; it++)
        for (int i = 0; i < ACC; i++) acc[i] = _mm512_dpbf16_ps(acc[i], a, b);
    __m512 s = acc[0];
    for (int i = 1; i < ACC; i++) s = _mm512_add_ps(s, acc[i]);
    return _mm512_reduce_add_ps(s);
}

__attribute__((target("avx512f,avx512vnni"), noinline))
static float loop_vnni(long iters) {
    __m512i acc[ACC], a = _mm512_set1_epi8(1), b = _mm512_set1_epi8(1);
    for (int i = 0; i < ACC; i++) acc[i] = _mm512_set1_epi32(i);
    for (long it = 0; it < iters; it++)
        for (int i = 0; i < ACC; i++) acc[i] = _mm512_dpbusd_epi32(acc[i], a, b);
    __m512i s = acc[0];
    for (int i = 1; i < ACC; i++) s = _mm512_add_epi32(s, acc[i]);
    return (float)_mm512_reduce_add_epi32(s);
}

/* AMX: 8 tiles of 16 rows x 64 bytes; C tiles 0-3 (a 2 x 2 block), A
 * tiles 4, 5, B tiles 6, 7 loaded once (the loop measures the unit, not
 * the loads). Each thread loads its own configuration (tile state is per
 * thread); cpu_amx_request() must have run. */
typedef struct { uint8_t palette, start_row, reserved[14]; uint16_t colsb[16]; uint8_t rows[16]; } AmxConfig;

/* The tiles' configuration, C tiles zeroed, the A and B tiles loaded from a
 * and b (16 rows of 64 bytes each); the tile state stays with the thread
 * for the loop that follows. */
__attribute__((target("amx-tile"), noinline))
static void amx_begin(const void *a, const void *b) {
    AmxConfig c;
    memset(&c, 0, sizeof c);
    c.palette = 1;
    for (int t = 0; t < 8; t++) { c.rows[t] = 16; c.colsb[t] = 64; }
    __asm__ volatile("" ::: "memory");   /* c, a and b written before the tile instructions read them */
    _tile_loadconfig(&c);
    _tile_zero(0); _tile_zero(1); _tile_zero(2); _tile_zero(3);
    _tile_loadd(4, a, 64); _tile_loadd(5, a, 64); _tile_loadd(6, b, 64); _tile_loadd(7, b, 64);
}

/* C tile 0 to out (16 x 16 four-byte sums), the tiles let go. */
__attribute__((target("amx-tile"), noinline))
static void amx_end(void *out) {
    _tile_stored(0, out, 64);
    _tile_release();
}

__attribute__((target("amx-tile,amx-bf16"), noinline))
static float loop_amx_bf16(long iters) {
    static __attribute__((aligned(64))) uint16_t a[16 * 32], b[16 * 32];
    float out[16 * 16];
    for (int i = 0; i < 16 * 32; i++) { a[i] = 0x3f80; b[i] = 0x3c00; }   /* 1.0, 2^-7 */
    amx_begin(a, b);
    for (long it = 0; it < iters; it++) {
        _tile_dpbf16ps(0, 4, 6); _tile_dpbf16ps(1, 4, 7); _tile_dpbf16ps(2, 5, 6); _tile_dpbf16ps(3, 5, 7);
    }
    amx_end(out);
    return out[0];
}

__attribute__((target("amx-tile,amx-int8"), noinline))
static float loop_amx_int8(long iters) {
    static __attribute__((aligned(64))) uint8_t a[16 * 64], b[16 * 64];
    int32_t out[16 * 16];
    memset(a, 1, sizeof a);
    memset(b, 1, sizeof b);
    amx_begin(a, b);
    for (long it = 0; it < iters; it++) {
        _tile_dpbusd(0, 4, 6); _tile_dpbusd(1, 4, 7); _tile_dpbusd(2, 5, 6); _tile_dpbusd(3, 5, 7);
    }
    amx_end(out);
    return (float)out[0];
}
#endif

typedef float (*Loop)(long);
static volatile float g_sink;

static double thread_cpu(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Operations per CPU second of `loop` (ops_per_iter per iteration) on
 * `threads` threads at once, summed over the threads, best of 5. CPU time,
 * not wall: on a shared machine a descheduled thread does not count as
 * slow, so this is the core's peak while it runs (the caches and memory
 * are still shared with whatever else runs). */
static double rate(Loop loop, double ops_per_iter, int threads, double seconds) {
    long iters = 1000;
    for (;;) {   /* calibrate: one run of ~seconds / 5 */
        double t0 = thread_cpu();
        g_sink = loop(iters);
        double t = thread_cpu() - t0;
        if (t > seconds / 20) { iters = (long)(iters * (seconds / 5) / t) + 1; break; }
        iters *= 4;
    }
    double best = 0;
    for (int r = 0; r < 5; r++) {
        double sum = 0;
        #pragma omp parallel num_threads(threads) reduction(+:sum)
        {
            double t0 = thread_cpu();
            g_sink = loop(iters);
            sum += ops_per_iter * iters / (thread_cpu() - t0);
        }
        if (sum > best) best = sum;
    }
    return best;
}

/* Memory bandwidth, bytes per CPU second summed over the threads, best of
 * 5: mode 0 sums n floats, mode 1 copies n / 2 floats into b. */
static double bandwidth(int mode, float *a, float *b, size_t n, int threads) {
    double best = 0;
    for (int r = 0; r < 5; r++) {
        double sum = 0;
        #pragma omp parallel num_threads(threads) reduction(+:sum)
        {
            int t = omp_get_thread_num(), nt = omp_get_num_threads();
            size_t len = mode == 0 ? n : n / 2, i0 = len * t / nt, i1 = len * (t + 1) / nt;
            double t0 = thread_cpu(), s = 0.0;
            if (mode == 0) {
                #pragma omp simd reduction(+:s)
                for (size_t i = i0; i < i1; i++) s += a[i];
            } else {
                memcpy(b + i0, a + i0, (i1 - i0) * sizeof *a);
            }
            g_sink = (float)s;
            sum += (double)(i1 - i0) * sizeof(float) * (mode == 0 ? 1 : 2) / (thread_cpu() - t0);
        }
        if (sum > best) best = sum;
    }
    return best;
}

int main(int argc, char **argv) {
    if (argc > 1 && (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help"))) {
        printf("usage: peaks [THREADS [SECONDS]]\n  this CPU's fp32 FMA, VDPBF16PS, VNNI (AMX where present) "
               "peaks and memory bandwidth, 1 thread and THREADS (default 2)\n");
        return 0;
    }
    int threads = argc > 1 ? atoi(argv[1]) : 2;
    double seconds = argc > 2 ? atof(argv[2]) : 0.5;
    if (threads < 1 || seconds <= 0) { fprintf(stderr, "peaks: THREADS >= 1 and SECONDS > 0 expected\n"); return 2; }
    printf("# unit 1-thread %d-threads unit\n", threads);
#if HAVE_X86
    __builtin_cpu_init();
    struct { const char *name, *feature; Loop loop; double ops; const char *unit; } units[] = {
        {"fp32-fma", "avx512f", loop_fma, ACC * 32.0, "GFLOP/s"},
        {"bf16-dp", "avx512bf16", loop_bf16, ACC * 64.0, "GFLOP/s"},
        {"int8-vnni", "avx512vnni", loop_vnni, ACC * 128.0, "GOP/s"},
    };
    for (size_t u = 0; u < sizeof units / sizeof *units; u++) {
        int has = __builtin_cpu_supports("avx512f") && (!strcmp(units[u].feature, "avx512bf16")
                  ? __builtin_cpu_supports("avx512bf16") : !strcmp(units[u].feature, "avx512vnni")
                  ? __builtin_cpu_supports("avx512vnni") : 1);
        if (!has && u == 0 && __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
            printf("%-10s %8.1f %8.1f GFLOP/s (ymm: no AVX-512)\n", "fp32-fma", rate(loop_fma256, ACC * 16.0, 1, seconds) / 1e9,
                   rate(loop_fma256, ACC * 16.0, threads, seconds) / 1e9);
            continue;
        }
        if (!has) { printf("%-10s skipped (no %s)\n", units[u].name, units[u].feature); continue; }
        printf("%-10s %8.1f %8.1f %s\n", units[u].name, rate(units[u].loop, units[u].ops, 1, seconds) / 1e9,
               rate(units[u].loop, units[u].ops, threads, seconds) / 1e9, units[u].unit);
        fflush(stdout);
    }
    /* AMX: tfm's own feature check (CPUID and XCR0) and Linux's permission */
    struct { const char *name; CpuFeature f; Loop loop; double ops; const char *unit; } amx[] = {
        {"amx-bf16", CPU_AMX_BF16, loop_amx_bf16, 4 * 16 * 16 * 32 * 2.0, "GFLOP/s"},
        {"amx-int8", CPU_AMX_INT8, loop_amx_int8, 4 * 16 * 16 * 64 * 2.0, "GOP/s"},
    };
    for (size_t u = 0; u < sizeof amx / sizeof *amx; u++) {
        if (!cpu_has(amx[u].f) || !cpu_has(CPU_AMX_TILE)) { printf("%-10s skipped (no %s)\n", amx[u].name, amx[u].name); continue; }
        if (cpu_amx_request()) { printf("%-10s skipped (%s)\n", amx[u].name, error_message()); continue; }
        printf("%-10s %8.1f %8.1f %s\n", amx[u].name, rate(amx[u].loop, amx[u].ops, 1, seconds) / 1e9,
               rate(amx[u].loop, amx[u].ops, threads, seconds) / 1e9, amx[u].unit);
        fflush(stdout);
    }
#else
    printf("fp32-fma   skipped (not x86-64)\n");
#endif
    size_t n = (size_t)64 << 20;   /* 256 MB */
    float *a = xaligned(n * sizeof *a), *b = xaligned(n / 2 * sizeof *b);
    for (size_t i = 0; i < n; i++) a[i] = 1.0f;
    memset(b, 0, n / 2 * sizeof *b);
    printf("%-10s %8.1f %8.1f GB/s\n", "mem-read", bandwidth(0, a, b, n, 1) / 1e9, bandwidth(0, a, b, n, threads) / 1e9);
    printf("%-10s %8.1f %8.1f GB/s\n", "mem-copy", bandwidth(1, a, b, n, 1) / 1e9, bandwidth(1, a, b, n, threads) / 1e9);
    free(a);
    free(b);
    return 0;
}
