/* optim.h — Adam (Kingma & Ba 2015) and the paper's learning-rate schedule
 * (section 5.3), global gradient norm and clipping.
 *
 *   lr(step) = lr_scale * d_model^-0.5 * min(step^-0.5, step * warmup^-1.5)
 *
 * rises linearly for `warmup` steps, then decays as step^-0.5. step counts
 * updates from 1. Adam uses bias-corrected moments, as torch.optim.Adam. */
#ifndef TFM_OPTIM_H
#define TFM_OPTIM_H

#include <stddef.h>
#include <stdint.h>

double lr_schedule(long step, int d_model, int warmup, double lr_scale);

/* One Adam update of n parameters; m, v [n] are the moments (zero at step
 * 1), step >= 1 is the number of this update (for bias correction):
 *   m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2
 *   p -= lr * (m / (1-b1^step)) / (sqrt(v / (1-b2^step)) + eps)          */
void adam_update(float *params, const float *grads, float *m, float *v, size_t n,
                 double lr, double beta1, double beta2, double eps, long step);

/* sum g^2 and sqrt(sum g^2), accumulated in double (in an order that
 * depends on the thread count). NaN/inf in g give a non-finite result. */
double grad_sumsq(const float *g, size_t n);
double grad_norm(const float *g, size_t n);
/* If max_norm > 0 and norm > max_norm: g *= max_norm / norm. Returns the
 * factor applied (1 when nothing was done). */
double grad_clip(float *g, size_t n, double norm, double max_norm);
/* That factor without touching g: max_norm / norm, or 1. */
double clip_factor(double norm, double max_norm);

/* The whole update in one pass over the parameters (one read of g, m, v, p,
 * one write of m, v, p and of the bf16 copies), multithreaded, vectorised:
 *   g' = g * (float)clip   (clip = clip_factor(...); 1: none)
 *   Adam as adam_update on g' (g itself is left as it is)
 *   round_f[i] = bf16_round(p[i]), round_h[i] = its 16 bits, if not NULL
 *     (the model's bf16 copies, model_bf16_copies)
 * Bit for bit grad_clip, then adam_update, then rounding the parameters:
 * the same operations on each element, in the same order. */
void adam_update_fused(float *params, const float *grads, float *m, float *v, size_t n, double lr, double beta1,
                       double beta2, double eps, long step, double clip, float *round_f, uint16_t *round_h);

#endif
