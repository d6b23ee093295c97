/* optim.c — Adam and the paper's learning-rate schedule (see optim.h). */
#include "optim.h"

#include <math.h>

#include "gemm_bf16.h"
#include "parallel.h"
#include "util.h"

double lr_schedule(long step, int d_model, int warmup, double lr_scale) {
    if (step < 1) step = 1;
    if (warmup < 1) warmup = 1;
    double s = (double)step, a = 1.0 / sqrt(s), b = s * pow((double)warmup, -1.5);
    return lr_scale / sqrt((double)d_model) * (a < b ? a : b);
}

void adam_update(float *params, const float *grads, float *m, float *v, size_t n,
                 double lr, double beta1, double beta2, double eps, long step) {
    /* bias corrections folded into the step size and epsilon:
     * p -= lr / c1 * m / (sqrt(v) / sqrt(c2) + eps) */
    double c1 = 1.0 - pow(beta1, (double)step), c2 = 1.0 - pow(beta2, (double)step);
    float b1 = (float)beta1, b2 = (float)beta2, a1 = (float)(1.0 - beta1), a2 = (float)(1.0 - beta2);
    float step_size = (float)(lr / c1), inv_sqrt_c2 = (float)(1.0 / sqrt(c2)), e = (float)eps;
    #pragma omp parallel for simd schedule(static) if (n >= PAR_MIN)
    for (size_t i = 0; i < n; i++) {
        float g = grads[i];
        float mi = b1 * m[i] + a1 * g;
        float vi = b2 * v[i] + a2 * g * g;
        m[i] = mi;
        v[i] = vi;
        params[i] -= step_size * mi / (sqrtf(vi) * inv_sqrt_c2 + e);
    }
}

double grad_sumsq(const float *g, size_t n) {
    double s = 0.0;
    #pragma omp parallel for simd schedule(static) if (n >= PAR_MIN) reduction(+:s)
    for (size_t i = 0; i < n; i++) s += (double)g[i] * g[i];
    return s;
}

double grad_norm(const float *g, size_t n) { return sqrt(grad_sumsq(g, n)); }

double clip_factor(double norm, double max_norm) {
    return max_norm <= 0.0 || !(norm > max_norm) ? 1.0 : max_norm / norm;
}

/* The constants of one Adam step, as adam_update_fused's loops use them. */
typedef struct { float b1, b2, a1, a2, step_size, inv_sqrt_c2, eps, clip; int clipped; } AdamStep;

/* One element: clip g, update the moments m and v, return the new weight. */
static inline float adam_element(const AdamStep *s, float p, float g, float *m, float *v) {
    if (s->clipped) g *= s->clip;
    float mi = s->b1 * *m + s->a1 * g;
    float vi = s->b2 * *v + s->a2 * g * g;
    *m = mi;
    *v = vi;
    return p - s->step_size * mi / (sqrtf(vi) * s->inv_sqrt_c2 + s->eps);
}

void adam_update_fused(float *params, const float *grads, float *m, float *v, size_t n, double lr, double beta1,
                       double beta2, double eps, long step, double clip, float *round_f, uint16_t *round_h) {
    double c1 = 1.0 - pow(beta1, (double)step), c2 = 1.0 - pow(beta2, (double)step);
    const AdamStep s = {(float)beta1, (float)beta2, (float)(1.0 - beta1), (float)(1.0 - beta2), (float)(lr / c1),
                        (float)(1.0 / sqrt(c2)), (float)eps, (float)clip, clip != 1.0};
    /* bf16: in runs of BF16_RUN, the run's update in fp32, then its rounded copies while in L1
     * (gemm_bf16.h's bf16_round_run); fp32: one loop */
    if (round_f || round_h) {
        size_t nr = (n + BF16_RUN - 1) / BF16_RUN;
        #pragma omp parallel for schedule(static) if (n >= PAR_MIN)
        for (size_t r = 0; r < nr; r++) {
            size_t i0 = r * BF16_RUN, i1 = n - i0 < BF16_RUN ? n : i0 + BF16_RUN;
            #pragma omp simd
            for (size_t i = i0; i < i1; i++) params[i] = adam_element(&s, params[i], grads[i], &m[i], &v[i]);
            bf16_round_run(round_f ? round_f + i0 : NULL, round_h ? round_h + i0 : NULL, params + i0, i1 - i0);
        }
    } else {
        #pragma omp parallel for simd schedule(static) if (n >= PAR_MIN)
        for (size_t i = 0; i < n; i++) params[i] = adam_element(&s, params[i], grads[i], &m[i], &v[i]);
    }
}

double grad_clip(float *g, size_t n, double norm, double max_norm) {
    if (max_norm <= 0.0 || !(norm > max_norm)) return 1.0;
    float f = (float)(max_norm / norm);
    #pragma omp parallel for simd schedule(static) if (n >= PAR_MIN)
    for (size_t i = 0; i < n; i++) g[i] *= f;
    return max_norm / norm;
}

