/* prof.c — step breakdown accumulators (see prof.h). */
#include "prof.h"

#include <string.h>

#include "util.h"

int prof_on;
Prof prof;

static const char *const names[PROF_KINDS] = {
    [PROF_ATT_PROJ] = "attention projections",
    [PROF_FFN] = "feed-forward products",
    [PROF_OUT_PROD] = "output layer products",
    [PROF_OUT_LOSS] = "softmax + loss",
    [PROF_ATT_CORE] = "attention core",
    [PROF_NORM] = "norms, residuals, dropout",
    [PROF_EMBED] = "embeddings",
    [PROF_GRAD_NORM] = "gradient norm",
    [PROF_ADAM] = "Adam (+ clip, bf16 copies)",
    [PROF_BF16] = "bf16 rounding (weights, inputs)",
};

const char *prof_name(int kind) { return kind >= 0 && kind < PROF_KINDS ? names[kind] : "?"; }

void prof_reset(void) { memset(&prof, 0, sizeof prof); }

double prof_clock(void) { return now_seconds(); }

void prof_add(int kind, double t0, double flops, double bytes) {
    ASSERT(kind >= 0 && kind < PROF_KINDS);
    prof.seconds[kind] += now_seconds() - t0;
    prof.flops[kind] += flops;
    prof.bytes[kind] += bytes;
}

void prof_busy(double seconds) {
    #pragma omp atomic
    prof.prod_busy += seconds;
}

void prof_convert(double seconds) {
    #pragma omp atomic
    prof.prod_convert += seconds;
}
