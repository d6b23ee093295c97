/* prof.h — where the time of a training step goes (scripts/bench-train.sh).
 *
 * A handful of accumulators, one per kind of work: seconds, matrix-product
 * FLOPs and bytes moved. model.c, ops.c and the step server wrap their
 * calls in PROF(kind, flops, bytes, statement); with prof_on == 0 (always,
 * except in dev/bench_train) a PROF costs one load and one branch. The
 * FLOPs let a product-bound kind be rated against the peak of the unit it
 * ran on, the bytes let a memory-bound one be rated against the measured
 * memory bandwidth (dev/peaks.c): the bytes are what the kernel must read
 * and write at the least (each operand once), not what the caches saw.
 *
 * Threads waiting: gemm_many's pieces add the seconds each thread spent
 * computing (prof_busy), so that the idle time inside the products is
 * threads x wall - busy (a thread that finished its pieces waiting for the
 * slower one, or a piece descheduled by another process). oneDNN's pieces
 * (gemm_dnnl.c) are counted the same way; a product oneDNN runs whole on
 * its own threads is out of sight: counted all busy. Of the busy time,
 * prof_convert tells the part spent converting operands to bf16.
 *
 * Not thread-safe by design: PROF is used from serial code only (every kind
 * here opens its own parallel region), and prof_busy is atomic. */
#ifndef TFM_PROF_H
#define TFM_PROF_H

enum {
    PROF_ATT_PROJ,      /* q/k/v/out projections, forward and backward */
    PROF_FFN,           /* fc1, fc2, forward and backward */
    PROF_OUT_PROD,      /* output layer products: logits = y E^T, dy = dlogits E, dE += dlogits^T y */
    PROF_OUT_LOSS,      /* log-softmax + label-smoothed loss + its gradient, row gathers */
    PROF_ATT_CORE,      /* softmax(Q K^T / sqrt(dk)) V and its backward */
    PROF_NORM,          /* layer norms, residuals, dropout, ReLU */
    PROF_EMBED,         /* embedding lookups and their gradient */
    PROF_GRAD_NORM,     /* the gradient's norm */
    PROF_ADAM,          /* the update: clipping, Adam, the weights' bf16 copies (optim.h: one pass) */
    PROF_BF16,          /* rounding to bf16: the weights (at the first forward; later the update does it), the sublayers' inputs */
    PROF_KINDS
};

typedef struct {
    double seconds[PROF_KINDS];
    double flops[PROF_KINDS];     /* matrix-product (or attention-product) FLOPs */
    double bytes[PROF_KINDS];     /* least bytes read + written */
    double prod_wall;             /* wall seconds inside gemm_many's parallel loops */
    double prod_busy;             /* summed seconds the threads computed there */
    int prod_threads;             /* threads of those loops */
    double prod_convert;          /* of prod_busy, thread-seconds converting bf16 operands: oneDNN's 16-bit
                                   * copies, the emulation's rounded float copies (the AVX512_BF16 kernel
                                   * converts as it packs: not told apart) */
} Prof;

extern int prof_on;
extern Prof prof;

const char *prof_name(int kind);   /* "attention projections", ... */
void prof_reset(void);
double prof_clock(void);           /* now_seconds() when prof_on, else 0 */
void prof_add(int kind, double t0, double flops, double bytes);
void prof_busy(double seconds);    /* atomic add to prof.prod_busy */
void prof_convert(double seconds); /* atomic add to prof.prod_convert */

#define PROF(kind, flops, bytes, ...) do {                                          \
        double prof_t0_ = prof_on ? prof_clock() : 0.0;                            \
        __VA_ARGS__;                                                                \
        if (prof_on) prof_add((kind), prof_t0_, (double)(flops), (double)(bytes)); \
    } while (0)

#endif
