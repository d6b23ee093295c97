/* test_model.c — the whole Transformer: gradient check of every parameter
 * against finite differences (post-norm and pre-norm, padded batch, with and
 * without dropout), recomputation (bit for bit), masking (padding and causal), the loss contract, and
 * Adam/the learning-rate schedule. (The PyTorch parity dump and the
 * training benchmark are dev/dump_parity.c and dev/bench_train.c.) */
#include "dispatch.h"
#include "test.h"
#include "batch.h"

#include "config.h"
#include "gemm_bf16.h"
#include "model.h"
#include "ops.h"
#include "optim.h"
#include "util.h"

/* ---- a tiny model and a padded batch ----------------------------------------- */
static ModelDims tiny_dims(int pre_norm, float drop) {
    ModelDims d = {.vocab = 13, .d_model = 8, .d_ff = 12, .heads = 2, .enc_layers = 2, .dec_layers = 2,
                   .max_positions = 16, .pre_norm = pre_norm, .dropout = drop, .attention_dropout = drop,
                   .relu_dropout = drop, .label_smoothing = 0.1f};
    return d;
}

static const int SRC_LEN[3] = {5, 3, 1}, TGT_LEN[3] = {4, 2, 3};

/* Loss of the batch as a function of the parameters: forward only, with
 * the dropout masks of a fixed RNG state when `drop`. */
static double loss_of(Model *m, const Batch *b, int drop, uint64_t seed) {
    LossStats st = {0};
    Rng r;
    rng_seed(&r, seed);
    int rc = drop ? model_forward_backward(m, b, &r, 1, 0.0f, &st) : model_forward(m, b, &st);
    if (rc) CHECK(rc == 0);   /* counted only when it fails: this runs ~23000 times */
    return st.loss;
}

/* ---- whole-model gradient check ----------------------------------------------
 * Every entry of every parameter tensor, centered differences of the summed
 * label-smoothed loss (L ~ 30 over 9 target tokens) with h = 1e-3.
 *
 * Tolerance |num - ana| <= 2e-3 + 2e-2 |num|. Why: the forward is float32
 * through ~60 ops, so L carries a rounding noise of ~3e-7 (relative 1e-8),
 * i.e. ~3e-4 in the quotient after dividing by 2h; the truncation error
 * (h^2/6 times the third derivative) is below 1e-5 at h = 1e-3 (measured:
 * the quotients at h = 1e-3 and 3e-4 agree with the analytic gradient to
 * ~5e-4 on the steepest entries, the embeddings that are also the output
 * weights). ReLU makes L only piecewise smooth: an entry whose +-h step
 * crosses a kink gets a wrong quotient (seen at h = 1e-2: 5% errors that
 * vanish at smaller h), so an entry that fails at h = 1e-3 is tried again
 * at h = 3e-4 and counts as failed only if it fails there too (and fewer
 * than 2% of the entries may need that). A wrong gradient (a missing term,
 * a wrong scale or mask) is off by about its own size at every h, far
 * above the tolerance. */
static double central(Model *m, const Batch *b, int drop, uint64_t seed, float *p, float h) {
    float p0 = *p;
    *p = p0 + h; double lp = loss_of(m, b, drop, seed);
    *p = p0 - h; double lm = loss_of(m, b, drop, seed);
    *p = p0;
    return (lp - lm) / (2.0 * h);
}

/* The tiny model with non-trivial LayerNorm parameters and biases, so
 * every path carries signal, and a padded batch. */
static OwnedBatch gradcheck_setup(Model *m, int pre_norm, float drop) {
    ModelDims d = tiny_dims(pre_norm, drop);
    CHECK(model_init(m, &d, 7) == 0);
    Rng r;
    rng_seed(&r, 99);
    for (int t = 0; t < m->num_tensors; t++) {
        const TensorInfo *ti = &m->tensors[t];
        if (ti->ndim == 1)
            for (size_t i = 0; i < ti->size; i++) m->params[ti->offset + i] += 0.3f * (2 * rng_uniform(&r) - 1);
    }
    return make_batch(3, 5, 4, SRC_LEN, TGT_LEN, d.vocab, &r);
}

/* drop: with dropout, and the backward's recomputation on (m->recompute) */
static void gradcheck_model(int pre_norm, int drop) {
    Model m;
    OwnedBatch ob = gradcheck_setup(&m, pre_norm, drop ? 0.2f : 0.0f);
    m.recompute = drop;
    uint64_t seed = 1234;
    model_zero_grad(&m);
    Rng rd;
    rng_seed(&rd, seed);
    LossStats st = {0};
    CHECK(model_forward_backward(&m, &ob.b, &rd, drop, 1.0f, &st) == 0);
    CHECK(st.tokens == 9);
    CHECK_NEAR(st.loss, loss_of(&m, &ob.b, drop, seed), 1e-9);
    int bad = 0, checked = 0, retried = 0, worst_t = -1;
    double worst = 0.0;
    for (int t = 0; t < m.num_tensors; t++) {
        const TensorInfo *ti = &m.tensors[t];
        for (size_t i = 0; i < ti->size; i++) {
            float *p = &m.params[ti->offset + i];
            double ana = m.grads[ti->offset + i];
            double num = central(&m, &ob.b, drop, seed, p, 1e-3f);
            if (fabs(num - ana) > 2e-3 + 2e-2 * fabs(num)) {
                retried++;
                num = central(&m, &ob.b, drop, seed, p, 3e-4f);
            }
            double err = fabs(num - ana), rel = err / (fabs(num) + 0.1);
            if (rel > worst) { worst = rel; worst_t = t; }
            checked++;
            if (err > 2e-3 + 2e-2 * fabs(num) && bad++ < 8)
                fprintf(stderr, "  %s[%zu]: numeric %.6g analytic %.6g\n", ti->name, i, num, ana);
        }
    }
    printf("gradcheck %s-norm%s: %d entries (%d retried at h = 3e-4), worst |num-ana| / (|num| + 0.1) = %.3g (%s)\n",
           pre_norm ? "pre" : "post", drop ? " with dropout, recompute on" : "", checked, retried, worst,
           worst_t >= 0 ? m.tensors[worst_t].name : "-");
    CHECK_MSG(bad == 0, "%d of %d parameter gradients off", bad, checked);
    CHECK(checked == (int)m.num_params);
    CHECK_MSG(retried < checked / 50, "%d of %d entries needed the smaller step", retried, checked);
    free(ob.buf);
    model_free(&m);
}

/* bf16 products (model_set_precision). The bf16 loss is a step function of
 * the weights (they are rounded to 8 significant bits, steps of ~2^-8
 * relative), so finite differences of it say nothing; instead the bf16
 * gradient is checked against the fp32 gradient (checked above against
 * finite differences) with a bound from the rounding:
 *   each product's inputs carry relative error <= u = 2^-8, so a product's
 *   output is off by ~u relative (random-signed errors over k terms against
 *   a sum of k random-signed terms); the errors of the ~P products on a
 *   path through the network (forward and backward) add up to ~u sqrt(P).
 *   This model has P ~ 30 products on its longest path (2 + 2 layers, 4-6
 *   per layer each way): ~0.4% sqrt(30) ~ 2% norm-wise. The test allows 8%
 *   (and the loss 2%), while a wrong product in the bf16 path (a transpose,
 *   a stale or missing operand) is off by O(1). It also checks that bf16 is
 *   on (the results differ from fp32's by more than fp32 rounding) and
 *   that the rounded weights follow the parameters after model_params_changed,
 *   and checks the gradient along its own direction against finite
 *   differences of the fp32 loss (the descent direction is right). */
static void gradcheck_bf16(int pre_norm) {
    Model m;
    OwnedBatch ob = gradcheck_setup(&m, pre_norm, 0.0f);
    size_t P = m.num_params;
    float *g32 = xmalloc(P * sizeof(float)), *g16 = xmalloc(P * sizeof(float));
    LossStats s32 = {0}, s16 = {0};
    model_zero_grad(&m);
    CHECK(model_forward_backward(&m, &ob.b, NULL, 0, 1.0f, &s32) == 0);
    memcpy(g32, m.grads, P * sizeof(float));
    model_set_precision(&m, 1);
    model_zero_grad(&m);
    CHECK(model_forward_backward(&m, &ob.b, NULL, 0, 1.0f, &s16) == 0);
    memcpy(g16, m.grads, P * sizeof(float));
    double dn = 0, gn = 0, dot = 0, worst_t = 0;
    int worst_i = -1;
    for (int t = 0; t < m.num_tensors; t++) {
        const TensorInfo *ti = &m.tensors[t];
        double td = 0, tg = 0;
        for (size_t i = ti->offset; i < ti->offset + ti->size; i++) {
            double e = (double)g16[i] - g32[i];
            td += e * e; tg += (double)g32[i] * g32[i]; dot += (double)g16[i] * g32[i];
        }
        dn += td; gn += tg;
        /* per tensor, relative to the tensor's own norm plus 1% of the whole
         * (a tensor with almost no gradient has no relative accuracy to keep) */
        double rel = sqrt(td) / (sqrt(tg) + 1e-30);
        if (tg > 0 && rel > worst_t && sqrt(tg) > 1e-2 * sqrt(gn)) { worst_t = rel; worst_i = t; }
    }
    double rel = sqrt(dn / gn), lrel = fabs(s16.loss - s32.loss) / fabs(s32.loss);
    printf("gradcheck bf16 %s-norm: loss %.6f vs fp32 %.6f (%.2g relative); gradient %.3g relative (norm), "
           "worst tensor %.3g (%s)\n", pre_norm ? "pre" : "post", s16.loss, s32.loss, lrel, rel, worst_t,
           worst_i >= 0 ? m.tensors[worst_i].name : "-");
    CHECK_MSG(lrel < 2e-2, "bf16 loss %.3g relative from fp32's", lrel);
    CHECK_MSG(rel < 8e-2, "bf16 gradient %.3g relative from fp32's", rel);
    CHECK_MSG(worst_t < 0.25, "bf16 gradient of %s %.3g relative from fp32's", m.tensors[worst_i].name, worst_t);
    CHECK_MSG(rel > 1e-4 && lrel > 1e-7, "bf16 changes nothing (%.3g, %.3g): not on?", rel, lrel);
    /* along its own direction v = g16 / |g16|, the bf16 gradient predicts the
     * change of the fp32 loss: (L(p + h v) - L(p - h v)) / 2h ~ g16 . v */
    double n16 = 0;
    for (size_t i = 0; i < P; i++) n16 += (double)g16[i] * g16[i];
    n16 = sqrt(n16);
    model_set_precision(&m, 0);
    float *p0 = xmalloc(P * sizeof(float));
    memcpy(p0, m.params, P * sizeof(float));
    double h = 1e-2, lp, lm;
    for (size_t i = 0; i < P; i++) m.params[i] = p0[i] + (float)(h * g16[i] / n16);
    LossStats a = {0}, b = {0};
    CHECK(model_forward(&m, &ob.b, &a) == 0);
    for (size_t i = 0; i < P; i++) m.params[i] = p0[i] - (float)(h * g16[i] / n16);
    CHECK(model_forward(&m, &ob.b, &b) == 0);
    lp = a.loss; lm = b.loss;
    double num = (lp - lm) / (2 * h);
    CHECK_MSG(fabs(num - n16) < 0.05 * n16, "along the bf16 gradient: fp32 loss changes at %.5g, bf16 predicts %.5g", num, n16);
    /* the rounded weights (the emulated route's copy, oneDNN's twin, the AMX
     * kernel's kept panels) follow the parameters: stale until
     * model_params_changed; the kernel route packs the masters as they are */
    memcpy(m.params, p0, P * sizeof(float));
    model_set_precision(&m, 1);
    LossStats x = {0}, y = {0}, z = {0};
    CHECK(model_forward(&m, &ob.b, &x) == 0);
    int held = m.params_bf16 || m.params_b16 || bf16_route() == BF16_AMX;
    for (size_t i = 0; i < P; i++) m.params[i] *= 1.5f;   /* the weights change (the embedding too) */
    CHECK(model_forward(&m, &ob.b, &y) == 0);
    model_params_changed(&m);
    CHECK(model_forward(&m, &ob.b, &z) == 0);
    if (held) CHECK(z.loss != y.loss);   /* the products now read the new weights */
    else CHECK(y.loss != x.loss && z.loss == y.loss);   /* they read them at once */
    CHECK_NEAR(x.loss, s16.loss, 1e-9 * fabs(s16.loss));   /* the same rounding of the same weights */
    free(g32); free(g16); free(p0); free(ob.buf);
    model_free(&m);
}
static void test_gradcheck_bf16(void) { gradcheck_bf16(0); gradcheck_bf16(1); }

static void test_gradcheck_post(void) { gradcheck_model(0, 0); }
static void test_gradcheck_pre(void) { gradcheck_model(1, 0); }
static void test_gradcheck_dropout(void) { gradcheck_model(0, 1); gradcheck_model(1, 1); }

/* ---- masking ----------------------------------------------------------------- */
static void grads_of(Model *m, const Batch *b, float *out, double *loss) {
    LossStats st = {0};
    model_zero_grad(m);
    CHECK(model_forward_backward(m, b, NULL, 0, 1.0f, &st) == 0);
    memcpy(out, m->grads, m->num_params * sizeof(float));
    *loss = st.loss;
}

static void masking(int pre_norm) {
    ModelDims d = tiny_dims(pre_norm, 0.0f);
    Model m;
    CHECK(model_init(&m, &d, 3) == 0);
    Rng r;
    rng_seed(&r, 5);
    OwnedBatch ob = make_batch(3, 5, 4, SRC_LEN, TGT_LEN, d.vocab, &r);
    Batch *b = &ob.b;
    size_t P = m.num_params;
    float *g0 = xmalloc(P * sizeof(float)), *g1 = xmalloc(P * sizeof(float));
    double l0, l1;
    grads_of(&m, b, g0, &l0);

    /* padded source tokens and padded target positions (input and output)
     * change nothing at all: same loss, same gradients, bit for bit */
    b->src[1 * 5 + 4] = 7; b->src[2 * 5 + 1] = 9;       /* sentence 1 has 3 source tokens, sentence 2 has 1 */
    b->tgt_in[1 * 4 + 3] = 5; b->tgt_out[1 * 4 + 2] = 6;  /* sentence 1 has 2 target tokens */
    b->tgt_out[2 * 4 + 3] = 11;                           /* sentence 2 has 3 */
    grads_of(&m, b, g1, &l1);
    CHECK(l0 == l1);
    CHECK(!memcmp(g0, g1, P * sizeof(float)));

    /* causal: changing target input token t changes no log-probability
     * before t, and does change the ones from t on */
    float lp0[12], lp1[12];
    CHECK(model_score(&m, b, lp0) == 0);
    b->tgt_in[0 * 4 + 2] = b->tgt_in[0 * 4 + 2] == 5 ? 6 : 5;
    CHECK(model_score(&m, b, lp1) == 0);
    CHECK(lp0[0] == lp1[0] && lp0[1] == lp1[1]);
    CHECK(lp0[2] != lp1[2] && lp0[3] != lp1[3]);
    for (int i = 4; i < 12; i++) CHECK(lp0[i] == lp1[i]);   /* other sentences untouched */

    /* a real source token changes its own sentence only */
    CHECK(model_score(&m, b, lp0) == 0);
    b->src[1 * 5 + 0] = b->src[1 * 5 + 0] == 4 ? 8 : 4;
    CHECK(model_score(&m, b, lp1) == 0);
    CHECK(lp0[4] != lp1[4] && lp0[5] != lp1[5]);
    for (int i = 0; i < 4; i++) CHECK(lp0[i] == lp1[i]);
    for (int i = 8; i < 12; i++) CHECK(lp0[i] == lp1[i]);
    /* and the score is 0 at pads, sums to -nll elsewhere */
    LossStats st = {0};
    CHECK(model_forward(&m, b, &st) == 0);
    double s = 0;
    for (int i = 0; i < 12; i++) s += lp1[i];
    CHECK(lp1[6] == 0.0f && lp1[7] == 0.0f && lp1[11] == 0.0f);
    CHECK_NEAR(-s, st.nll, 1e-5);
    CHECK(st.tokens == 9);
    free(g0); free(g1); free(ob.buf);
    model_free(&m);
}
/* Threads change how the matrix products are cut (ops.c: pieces of rows or
 * columns, a linear layer's dW and dx side by side, slices of k), not what
 * they compute: a model big enough for every threaded path gives the same
 * loss and gradients on 2 threads as on 1, up to the order of the k-slice
 * sums (float rounding: 1e-5 relative to the largest gradient). */
static void test_threads_agree(void) {
    ModelDims d = {.vocab = 300, .d_model = 64, .d_ff = 256, .heads = 4, .enc_layers = 2, .dec_layers = 2,
                   .max_positions = 32, .pre_norm = 0, .label_smoothing = 0.1f};
    int B = 16, S = 32, T = 32, len_s[16], len_t[16];
    for (int i = 0; i < B; i++) { len_s[i] = S - i; len_t[i] = T - (i * 3) % 7; }
    CHECK((double)B * T * d.d_model * d.d_ff >= 1 << 23);   /* the FFN products are threaded */
    Model m;
    CHECK(model_init(&m, &d, 7) == 0);
    Rng r;
    rng_seed(&r, 3);
    OwnedBatch ob = make_batch(B, S, T, len_s, len_t, d.vocab, &r);
    float *g1 = xmalloc(m.num_params * sizeof(float)), *g2 = xmalloc(m.num_params * sizeof(float));
    double l1, l2;
    grads_of(&m, &ob.b, g1, &l1);
    threads_init(2);
    grads_of(&m, &ob.b, g2, &l2);
    threads_init(1);
    double worst = 0, big = 0;
    for (size_t i = 0; i < m.num_params; i++) {
        if (fabs(g1[i]) > big) big = fabs(g1[i]);
        if (fabs(g1[i] - g2[i]) > worst) worst = fabs(g1[i] - g2[i]);
    }
    CHECK_MSG(fabs(l1 - l2) <= 1e-6 * fabs(l1), "loss %.9g on 1 thread, %.9g on 2", l1, l2);
    CHECK_MSG(big > 0 && worst <= 1e-5 * big, "gradients on 2 threads off by %.3g (largest %.3g)", worst, big);
    free(g1); free(g2); free(ob.buf);
    model_free(&m);
}

/* Recomputation (m->recompute): the backward remakes h, the attention
 * cores and cross-attention's q, k, v with the forward's own calls, so the
 * loss and every gradient must equal those of the kept activations bit for
 * bit (no tolerance: same kernels, same shapes, same cut into threads, same
 * dropout seeds) — post- and pre-norm, all three dropouts on, fp32 and bf16
 * (tests/bf16.sh runs this on every bf16 route), on 2 threads with shapes
 * whose products are threaded, over three steps with the weights updated in
 * between (stale remade buffers would show), and with recompute switched on
 * and off on one model (the activations planned again). */
static void recompute_agrees(int pre_norm, int bf16) {
    ModelDims d = {.vocab = 300, .d_model = 64, .d_ff = 256, .heads = 4, .enc_layers = 2, .dec_layers = 2,
                   .max_positions = 32, .pre_norm = pre_norm, .dropout = 0.1f, .attention_dropout = 0.1f,
                   .relu_dropout = 0.1f, .label_smoothing = 0.1f};
    int B = 16, S = 32, T = 32, len_s[16], len_t[16];
    for (int i = 0; i < B; i++) { len_s[i] = S - i; len_t[i] = T - (i * 3) % 7; }
    CHECK((double)B * T * d.d_model * d.d_ff >= 1 << 23);   /* the FFN products are threaded */
    threads_init(2);
    Model m[2];
    for (int k = 0; k < 2; k++) {
        CHECK(model_init(&m[k], &d, 7) == 0);
        model_set_precision(&m[k], bf16 ? PREC_BF16 : PREC_FP32);
        m[k].recompute = k;
    }
    Rng r;
    rng_seed(&r, 3);
    OwnedBatch ob = make_batch(B, S, T, len_s, len_t, d.vocab, &r);
    size_t P = m[0].num_params;
    int same = 1;
    for (int step = 0; step < 4; step++) {
        if (step == 3) { m[0].recompute = 1; m[1].recompute = 0; }   /* switched on one model */
        LossStats st[2] = {{.loss = 0}, {.loss = 0}};
        for (int k = 0; k < 2; k++) {
            Rng rd;
            rng_seed(&rd, 100 + step);
            model_zero_grad(&m[k]);
            CHECK(model_forward_backward(&m[k], &ob.b, &rd, 1, 1.0f, &st[k]) == 0);
        }
        same &= st[0].loss == st[1].loss && st[0].nll == st[1].nll && !memcmp(m[0].grads, m[1].grads, P * sizeof(float));
        for (int k = 0; k < 2; k++) {   /* a plain step, so that the next one sees other weights */
            for (size_t i = 0; i < P; i++) m[k].params[i] -= 1e-3f * m[k].grads[i];
            model_params_changed(&m[k]);
        }
    }
    printf("recompute %s-norm %s, dropout on, 2 threads: loss and gradients %s over 4 steps\n", pre_norm ? "pre" : "post",
           bf16 ? "bf16" : "fp32", same ? "bit-identical" : "DIFFER");
    CHECK_MSG(same, "recomputation changes the loss or the gradients");
    threads_init(1);
    free(ob.buf);
    model_free(&m[0]);
    model_free(&m[1]);
}
static void test_recompute(void) {
    for (int pre = 0; pre < 2; pre++)
        for (int bf16 = 0; bf16 < 2; bf16++) recompute_agrees(pre, bf16);
}

static void test_masking_post(void) { masking(0); }
static void test_masking_pre(void) { masking(1); }

/* ---- the loss/gradient contract ------------------------------------------------ */
static void test_contract(void) {
    ModelDims d = tiny_dims(0, 0.3f);
    Model m;
    CHECK(model_init(&m, &d, 11) == 0);
    Rng r;
    rng_seed(&r, 8);
    OwnedBatch ob = make_batch(3, 5, 4, SRC_LEN, TGT_LEN, d.vocab, &r);
    size_t P = m.num_params;
    float *g1 = xmalloc(P * sizeof(float));
    LossStats a = {0}, b = {0};
    /* no gradient buffer until model_zero_grad (translation never has one):
     * a backward before it is an error, scoring works */
    CHECK(m.grads == NULL);
    CHECK(model_forward_backward(&m, &ob.b, NULL, 0, 1.0f, &a) == -1);
    CHECK(strstr(error_message(), "model_zero_grad") != NULL);
    CHECK(model_forward(&m, &ob.b, &a) == 0 && a.tokens > 0);
    a = (LossStats){0};
    /* grad_scale scales, and gradients add up over calls */
    model_zero_grad(&m);
    CHECK(model_forward_backward(&m, &ob.b, NULL, 0, 1.0f, &a) == 0);
    memcpy(g1, m.grads, P * sizeof(float));
    model_zero_grad(&m);
    CHECK(model_forward_backward(&m, &ob.b, NULL, 0, 0.25f, &b) == 0);
    CHECK(model_forward_backward(&m, &ob.b, NULL, 0, 0.25f, &b) == 0);
    double worst = 0;
    for (size_t i = 0; i < P; i++) worst = fmax(worst, fabs(2 * m.grads[i] - g1[i]));
    CHECK_MSG(worst < 1e-6, "accumulation off by %g", worst);
    CHECK_NEAR(b.loss, 2 * a.loss, 1e-9);      /* stats add up too */
    CHECK(b.tokens == 2 * a.tokens);
    /* forward = forward_backward's loss; the label-smoothed loss exceeds the NLL at init
     * (the smoothed target has more entropy than the one-hot one) */
    LossStats f = {0};
    CHECK(model_forward(&m, &ob.b, &f) == 0);
    CHECK_NEAR(f.loss, a.loss, 1e-9);
    CHECK_NEAR(f.nll, a.nll, 1e-9);
    CHECK(f.loss > 0 && f.nll > 0);
    /* dropout: training differs from eval, is reproducible from the RNG,
     * and advances the RNG */
    Rng r1, r2;
    rng_seed(&r1, 77); rng_seed(&r2, 77);
    LossStats t1 = {0}, t2 = {0};
    CHECK(model_forward_backward(&m, &ob.b, &r1, 1, 1.0f, &t1) == 0);
    CHECK(model_forward_backward(&m, &ob.b, &r2, 1, 1.0f, &t2) == 0);
    CHECK(t1.loss == t2.loss && t1.loss != f.loss);
    CHECK(r1.s == r2.s && r1.s != 0);
    /* a bigger batch, then the first one again: activations re-planned, same answers */
    int sl[5] = {9, 7, 8, 2, 1}, tl[5] = {6, 9, 1, 3, 5};
    OwnedBatch big = make_batch(5, 9, 9, sl, tl, d.vocab, &r);
    LossStats bg = {0}, again = {0};
    CHECK(model_forward(&m, &big.b, &bg) == 0);
    CHECK(bg.tokens == 24);
    CHECK(model_forward(&m, &ob.b, &again) == 0);
    CHECK(again.loss == f.loss);
    /* bad batches are errors, not crashes */
    CHECK(model_forward_backward(&m, &ob.b, NULL, 1, 1.0f, &f) == -1);   /* dropout without an RNG */
    ob.b.src[0] = d.vocab;
    CHECK(model_forward(&m, &ob.b, &f) == -1);
    CHECK(strstr(error_message(), "vocabulary") != NULL);
    ob.b.src[0] = 5;
    ob.b.src_len[1] = 6;
    CHECK(model_forward(&m, &ob.b, &f) == -1);
    ob.b.src_len[1] = 3;
    ob.b.S = 17;
    CHECK(model_forward(&m, &ob.b, &f) == -1);
    CHECK(strstr(error_message(), "max_positions") != NULL);
    free(g1); free(ob.buf); free(big.buf);
    model_free(&m);
}

/* ---- initialisation and layout --------------------------------------------------- */
static void test_init(void) {
    ModelDims d = tiny_dims(1, 0.1f);
    d.vocab = 1000; d.d_model = 64; d.d_ff = 128; d.heads = 4;
    Model m;
    CHECK(model_init(&m, &d, 1) == 0);
    CHECK(m.num_params == model_param_count(&d));
    /* embeddings N(0, D^-0.5), pad row zero */
    double s = 0, s2 = 0;
    size_t n = (size_t)d.vocab * d.d_model;
    for (size_t i = 0; i < n; i++) { s += m.p.embed[i]; s2 += (double)m.p.embed[i] * m.p.embed[i]; }
    CHECK_NEAR(s / n, 0.0, 0.005);
    CHECK_NEAR(sqrt(s2 / n), 1.0 / 8.0, 0.005);
    for (int j = 0; j < d.d_model; j++) CHECK(m.p.embed[TOK_PAD * d.d_model + j] == 0.0f);
    /* Xavier-uniform: |w| <= sqrt(6 / (in + out)), variance 2 / (in + out) */
    float a = sqrtf(6.0f / (64 + 128)), mx = 0;
    s2 = 0;
    for (int i = 0; i < 128 * 64; i++) { mx = fmaxf(mx, fabsf(m.p.enc[0].ffn.fc1_w[i])); s2 += (double)m.p.enc[0].ffn.fc1_w[i] * m.p.enc[0].ffn.fc1_w[i]; }
    CHECK(mx <= a && mx > 0.95f * a);
    CHECK_NEAR(s2 / (128 * 64), 2.0 / (64 + 128), 0.002);
    CHECK(m.p.dec[1].encoder_attn.o_b[3] == 0.0f && m.p.dec[1].ffn.fc2_b[0] == 0.0f);
    CHECK(m.p.dec_ln.w[5] == 1.0f && m.p.dec_ln.b[5] == 0.0f && m.p.enc[1].final_ln.w[0] == 1.0f);
    /* same seed, same model */
    Model m2;
    CHECK(model_init(&m2, &d, 1) == 0);
    CHECK(!memcmp(m.params, m2.params, m.num_params * sizeof(float)));
    model_free(&m2);
    /* bad dimensions are an error: heads that do not divide d_model; an
     * encoder of no layers (config.c refuses it too; a checkpoint claiming
     * one is refused by its loader, model_dims_check) */
    d.heads = 3;
    CHECK(model_init(&m2, &d, 1) == -1);
    d.heads = 2;
    d.enc_layers = 0;
    CHECK(model_init(&m2, &d, 1) == -1);
    model_free(&m);
}

/* ---- Adam and the schedule ------------------------------------------------------- */
static void test_optim(void) {
    /* lr = d^-0.5 min(s^-0.5, s w^-1.5): linear warmup, peak at s = w, then s^-0.5 */
    CHECK_NEAR(lr_schedule(1, 512, 4000, 1.0), pow(512, -0.5) * pow(4000, -1.5), 1e-12);
    CHECK_NEAR(lr_schedule(4000, 512, 4000, 1.0), pow(512, -0.5) * pow(4000, -0.5), 1e-12);
    CHECK_NEAR(lr_schedule(16000, 512, 4000, 2.0), 2.0 * pow(512, -0.5) / 126.49110640673517, 1e-12);
    CHECK(lr_schedule(3999, 512, 4000, 1) < lr_schedule(4000, 512, 4000, 1));
    CHECK(lr_schedule(4001, 512, 4000, 1) < lr_schedule(4000, 512, 4000, 1));
    /* Adam against a double-precision reference over 5 steps */
    enum { N = 37 };
    float p[N], g[N], m[N] = {0}, v[N] = {0};
    double rp[N], rm[N] = {0}, rv[N] = {0};
    Rng r;
    rng_seed(&r, 3);
    for (int i = 0; i < N; i++) rp[i] = p[i] = rng_normal(&r);
    for (int step = 1; step <= 5; step++) {
        for (int i = 0; i < N; i++) g[i] = rng_normal(&r) * (i + 1) * 0.1f;
        adam_update(p, g, m, v, N, 1e-3, 0.9, 0.98, 1e-9, step);
        for (int i = 0; i < N; i++) {
            rm[i] = 0.9 * rm[i] + 0.1 * g[i];
            rv[i] = 0.98 * rv[i] + 0.02 * (double)g[i] * g[i];
            double mh = rm[i] / (1 - pow(0.9, step)), vh = rv[i] / (1 - pow(0.98, step));
            rp[i] -= 1e-3 * mh / (sqrt(vh) + 1e-9);
        }
    }
    double worst = 0;
    for (int i = 0; i < N; i++) worst = fmax(worst, fabs(p[i] - rp[i]));
    CHECK_MSG(worst < 1e-6, "Adam off by %g", worst);
    /* first step moves each parameter by lr against the sign of its gradient */
    float q[2] = {1, 1}, gq[2] = {0.5f, -3}, mq[2] = {0}, vq[2] = {0};
    adam_update(q, gq, mq, vq, 2, 0.01, 0.9, 0.98, 1e-9, 1);
    CHECK_NEAR(q[0], 0.99, 1e-6);
    CHECK_NEAR(q[1], 1.01, 1e-6);
    /* norm and clipping */
    float c[3] = {3, 4, 0};
    double nrm = grad_norm(c, 3);
    CHECK_NEAR(nrm, 5.0, 1e-12);
    CHECK_NEAR(grad_clip(c, 3, nrm, 1.0), 0.2, 1e-12);
    CHECK_NEAR(c[0], 0.6, 1e-6);
    CHECK_NEAR(grad_clip(c, 3, 1.0, 2.0), 1.0, 0);   /* below the threshold: untouched */
    CHECK_NEAR(grad_clip(c, 3, 1.0, 0.0), 1.0, 0);   /* 0: off */
    c[2] = NAN;
    CHECK(!isfinite(grad_norm(c, 3)));
    CHECK_NEAR(clip_factor(5.0, 1.0), 0.2, 1e-15);
    CHECK(clip_factor(0.5, 1.0) == 1.0 && clip_factor(5.0, 0.0) == 1.0);
    /* the fused update (clip, Adam, bf16 copies in one pass) is bit for bit
     * grad_clip, then adam_update, then rounding, over a few steps, with
     * and without clipping and copies */
    enum { M = 70001 };   /* above PAR_MIN, odd */
    float *P1 = xmalloc(M * 4), *P2 = xmalloc(M * 4), *G = xmalloc(M * 4), *G1 = xmalloc(M * 4);
    float *M1 = xcalloc(M, 4), *V1 = xcalloc(M, 4), *M2 = xcalloc(M, 4), *V2 = xcalloc(M, 4);
    float *RF = xmalloc(M * 4);
    uint16_t *RH = xmalloc(M * 2);
    for (int i = 0; i < M; i++) P1[i] = P2[i] = rng_normal(&r);
    int same = 1, copies = 1;
    for (int step = 1; step <= 4; step++) {
        for (int i = 0; i < M; i++) G[i] = rng_normal(&r) * 0.3f;
        double norm = grad_norm(G, M), max_norm = step % 2 ? 0.5 * norm : 0.0;   /* clipped on odd steps */
        memcpy(G1, G, M * 4);
        grad_clip(G1, M, norm, max_norm);
        adam_update(P1, G1, M1, V1, M, 1e-3, 0.9, 0.98, 1e-9, step);
        adam_update_fused(P2, G, M2, V2, M, 1e-3, 0.9, 0.98, 1e-9, step, clip_factor(norm, max_norm),
                          step < 3 ? RF : NULL, step == 1 || step == 3 ? RH : NULL);   /* both, floats, 16 bits, none */
        same &= !memcmp(P1, P2, M * 4) && !memcmp(M1, M2, M * 4) && !memcmp(V1, V2, M * 4);
        if (step < 4)
            for (int i = 0; i < M; i++)
                copies &= (step == 3 || RF[i] == bf16_round(P1[i])) && (step == 2 || RH[i] == bf16_from_float(P1[i]));
    }
    CHECK_MSG(same, "the fused update differs from clip + Adam");
    CHECK_MSG(copies, "the fused update's bf16 copies differ from rounding the parameters");
    free(P1); free(P2); free(G); free(G1); free(M1); free(V1); free(M2); free(V2); free(RF); free(RH);
}

/* The bf16 routes (dispatch.h) the model's tests run on, where this CPU
 * and build can: the AMX route on the tiles, or on their model elsewhere
 * (gemm_amx_kernel, set in main). */
static const Bf16Route ROUTES[] = {BF16_EMULATED, BF16_KERNEL, BF16_ONEDNN, BF16_AMX};
static const char *const ROUTE_NAMES[] = {"emulated", "kernel", "oneDNN", "AMX (tfm's tiles, or their model without AMX)"};
#define NROUTES ((int)(sizeof ROUTES / sizeof ROUTES[0]))

static int route_here(int k) {
    return !(ROUTES[k] == BF16_KERNEL && !bf16_native()) && !(ROUTES[k] == BF16_ONEDNN && !gemm_dnnl_runs());
}

/* bf16 training on every route this build and CPU can run (dispatch.h's
 * Bf16Route: the emulation, tfm's AVX512_BF16 kernel, oneDNN's matmul, which
 * emulates what the CPU lacks): the same loss and gradients up to the order
 * of the fp32 sums. That order can move a value across a bf16 rounding
 * boundary: with sums of <= 12 terms here (error ~12 x 2^-24 relative)
 * against bf16's spacing of 2^-8, ~4e-4 of the ~2,000 rounded values of a
 * step, so about one flip a step on some CPU and BLIS kernel set, changing
 * one value by 2^-8 and the gradient by 2^-8 times that value's share of it
 * (measured: 7e-6 and 2e-8 of the norm). An operand the emulation reads
 * unrounded where the others round it (a producer that ought to have
 * written it rounded: the ReLU output, the attention context, the dlogits)
 * moves every value of a product by up to 2^-9: measured 7.5e-3 to 3.3e-2
 * of the norm with the ReLU's or the context's rounding left out. Allowed:
 * 2e-3 (half a flip of a value that carries all of the gradient), loss 1e-4.
 * Dropout on, recomputation on, pre- and post-norm. */
static void test_bf16_routes(void) {
    Bf16Route saved = bf16_route();
    for (int pre = 0; pre <= 1; pre++) {
        Model m;
        OwnedBatch ob = gradcheck_setup(&m, pre, 0.2f);
        m.recompute = 1;
        size_t P = m.num_params;
        float *g0 = xmalloc(P * sizeof(float));
        double loss0 = 0;
        for (int k = 0; k < NROUTES; k++) {
            if (!route_here(k)) {
                SKIP("bf16 route %s: not on this CPU or build", ROUTE_NAMES[k]);
                continue;
            }
            bf16_route_set(ROUTES[k]);
            model_set_precision(&m, PREC_FP32);   /* the weights' bf16 form is the route's (copy or twin) */
            model_set_precision(&m, PREC_BF16);
            model_zero_grad(&m);
            Rng rd;
            rng_seed(&rd, 4321);
            LossStats st = {0};
            CHECK(model_forward_backward(&m, &ob.b, &rd, 1, 1.0f, &st) == 0);
            if (k == 0) { memcpy(g0, m.grads, P * sizeof(float)); loss0 = st.loss; continue; }
            double dn = 0, gn = 0;
            for (size_t i = 0; i < P; i++) { double e = (double)m.grads[i] - g0[i]; dn += e * e; gn += (double)g0[i] * g0[i]; }
            double rel = sqrt(dn / gn), lrel = fabs(st.loss - loss0) / fabs(loss0);
            printf("bf16 %s-norm: %s against emulated: gradient %.3g relative (norm), loss %.3g\n", pre ? "pre" : "post",
                   ROUTE_NAMES[k], rel, lrel);
            CHECK_MSG(rel < 2e-3 && lrel < 1e-4, "%s-norm: bf16 on %s: gradient %.3g, loss %.3g relative from emulated's",
                      pre ? "pre" : "post", ROUTE_NAMES[k], rel, lrel);
        }
        bf16_route_set(saved);
        model_set_precision(&m, PREC_FP32);
        free(g0);
        free(ob.buf);
        model_free(&m);
    }
}

/* The AMX route keeps its panels of the weights (gemm_amx.h amx_weights)
 * until model.c writes its bf16 copy again: four updates of bf16 training
 * (Adam's fused copies), other weights loaded before the third
 * (model_params_changed) and received on the wire before the fourth, give
 * every loss and gradient of the same run with nothing kept, bit for bit
 * (the tiles' model where there are no tiles); a forward before each of
 * the two, which keeps the panels of the weights as they were. */
static void test_amx_kept(void) {
    Bf16Route saved = bf16_route();
    bf16_route_set(BF16_AMX);
    double loss[2][4];
    float *grads[2][4];
    size_t P = 0;
    for (int keep = 0; keep < 2; keep++) {
        amx_keep(keep);
        Model m, other;
        OwnedBatch ob = gradcheck_setup(&m, 1, 0.0f);
        CHECK(model_init(&other, &m.dims, 12) == 0);
        model_set_precision(&m, PREC_BF16);
        P = m.num_params;
        float *am = xcalloc(P, sizeof(float)), *av = xcalloc(P, sizeof(float));
        unsigned char *wire = xmalloc(model_wire_bytes(&m, 0, P) + 1);
        for (int step = 1; step <= 4; step++) {
            if (step >= 3) {   /* a forward first (validation), which packs and keeps the weights as they are */
                LossStats sv = {0};
                CHECK(model_forward(&m, &ob.b, &sv) == 0);
            }
            if (step == 3) {   /* as a checkpoint load writes them */
                for (size_t i = 0; i < P; i++) m.params[i] *= 0.75f;
                model_params_changed(&m);
            }
            if (step == 4) {
                model_set_precision(&other, PREC_BF16);
                model_wire_pack(&other, 0, P, wire);
                model_wire_unpack(&m, 0, P, wire);
            }
            model_zero_grad(&m);
            Rng rd;
            rng_seed(&rd, 5);
            LossStats st = {0};
            CHECK(model_forward_backward(&m, &ob.b, &rd, 1, 1.0f, &st) == 0);
            loss[keep][step - 1] = st.loss;
            grads[keep][step - 1] = xmalloc(P * sizeof(float));
            memcpy(grads[keep][step - 1], m.grads, P * sizeof(float));
            float *rf;
            uint16_t *rh;
            model_bf16_copies(&m, &rf, &rh);
            adam_update_fused(m.params, m.grads, am, av, P, 1e-2, 0.9, 0.98, 1e-9, step, 1.0f, rf, rh);
        }
        free(am); free(av); free(wire); free(ob.buf);
        model_free(&m);
        model_free(&other);
    }
    amx_keep(1);
    for (int step = 0; step < 4; step++) {
        CHECK_MSG(loss[0][step] == loss[1][step] && !memcmp(grads[0][step], grads[1][step], P * sizeof(float)),
                  "update %d on the AMX route: with its panels kept, loss %.9g (%.9g with none kept) or the gradients differ",
                  step + 1, loss[1][step], loss[0][step]);
        free(grads[0][step]); free(grads[1][step]);
    }
    bf16_route_set(saved);
}

/* bf16 on the wire (model_wire_*: the all-gather of a sharded step with
 * bf16 products): a range of the weights that cuts tensors, packed from one
 * model and unpacked into another, on each bf16 route: every linear layer's
 * W arrives as its bf16 value (2 bytes), everything else exact (4 bytes),
 * the copies the products read hold what rounding the sender's weights
 * gives, nothing outside the range moves, and a model that received all of
 * it computes the sender's loss bit for bit. */
static void test_wire(void) {
    Bf16Route saved = bf16_route();
    Model a, b;
    OwnedBatch ob = gradcheck_setup(&a, 1, 0.0f);
    size_t P = a.num_params;
    const TensorInfo *fc1 = NULL;
    for (int t = 0; t < a.num_tensors; t++)
        if (strstr(a.tensors[t].name, "encoder.layers.1.fc1.weight")) fc1 = &a.tensors[t];
    CHECK(fc1 != NULL);
    if (!fc1) return;
    size_t cuts[][2] = {{0, P}, {5, P - 3}, {fc1->offset + 3, fc1->offset + fc1->size + 5}, {7, 8}};
    for (int k = 0; k < NROUTES; k++) {
        if (!route_here(k)) {
            SKIP("bf16 route %s: not on this CPU or build", ROUTE_NAMES[k]);
            continue;
        }
        bf16_route_set(ROUTES[k]);
        for (size_t c = 0; c < sizeof cuts / sizeof *cuts; c++) {
            size_t lo = cuts[c][0], hi = cuts[c][1], want = 0;
            for (int t = 0; t < a.num_tensors; t++) {
                const TensorInfo *ti = &a.tensors[t];
                size_t x = ti->offset > lo ? ti->offset : lo, y = ti->offset + ti->size < hi ? ti->offset + ti->size : hi;
                if (x < y) want += (y - x) * (ti->init == INIT_XAVIER ? 2 : 4);
            }
            CHECK_MSG(model_wire_bytes(&a, lo, hi) == want, "[%zu, %zu): %zu bytes, want %zu", lo, hi,
                      model_wire_bytes(&a, lo, hi), want);
            CHECK(model_init(&b, &a.dims, 11) == 0);
            model_set_precision(&b, PREC_BF16);
            float *before = xmalloc(P * sizeof(float));
            memcpy(before, b.params, P * sizeof(float));
            unsigned char *wire = xmalloc(want + 1);
            model_wire_pack(&a, lo, hi, wire);
            model_wire_unpack(&b, lo, hi, wire);
            size_t bad = 0, moved = 0, badcopy = 0;
            for (int t = 0; t < a.num_tensors; t++) {
                const TensorInfo *ti = &a.tensors[t];
                for (size_t i = ti->offset; i < ti->offset + ti->size; i++) {
                    if (i < lo || i >= hi) { moved += memcmp(&b.params[i], &before[i], 4) != 0; continue; }
                    float w = ti->init == INIT_XAVIER ? bf16_round(a.params[i]) : a.params[i];
                    bad += memcmp(&b.params[i], &w, 4) != 0;
                    badcopy += b.params_b16    ? b.params_b16[i] != bf16_from_float(a.params[i])
                               : b.params_bf16 ? b.params_bf16[i] != bf16_round(a.params[i])
                                               : 0;   /* the AMX and kernel routes: no copy (below) */
                }
            }
            CHECK_MSG(bad == 0 && moved == 0 && badcopy == 0, "route %s, [%zu, %zu): %zu weights wrong, %zu copies wrong, "
                      "%zu outside moved", ROUTE_NAMES[k], lo, hi, bad, badcopy, moved);
            /* the copies the products read: none where tfm's kernels pack the masters (AMX, kernel), else one */
            int copies = (b.params_b16 != NULL) + (b.params_bf16 != NULL);
            int want_copies = ROUTES[k] == BF16_EMULATED || ROUTES[k] == BF16_ONEDNN;
            CHECK_MSG(copies == want_copies, "route %s: %d copies of the weights, want %d", ROUTE_NAMES[k], copies,
                      want_copies);
            if (lo == 0 && hi == P) {   /* the whole model received: the same bf16 forward */
                model_set_precision(&a, PREC_BF16);
                LossStats sa = {0}, sb = {0};
                CHECK(model_forward(&a, &ob.b, &sa) == 0 && model_forward(&b, &ob.b, &sb) == 0);
                CHECK_MSG(sa.loss == sb.loss, "route %s: loss %.9g sent, %.9g received", ROUTE_NAMES[k], sa.loss, sb.loss);
                model_set_precision(&a, PREC_FP32);
            }
            free(wire);
            free(before);
            model_set_precision(&b, PREC_FP32);
            model_free(&b);
        }
    }
    bf16_route_set(saved);
    free(ob.buf);
    model_free(&a);
}

int main(void) {
    threads_init(1);   /* tiny shapes: a thread team costs more than it saves */
    gemm_amx_kernel(bf16_amx() ? AMX_TILES : AMX_MODEL);
    RUN(test_init);
    RUN(test_optim);
    RUN(test_contract);
    RUN(test_masking_post);
    RUN(test_masking_pre);
    RUN(test_threads_agree);
    RUN(test_recompute);
    RUN(test_gradcheck_post);
    RUN(test_gradcheck_pre);
    RUN(test_gradcheck_dropout);
    RUN(test_gradcheck_bf16);
    RUN(test_bf16_routes);
    RUN(test_wire);
    RUN(test_amx_kept);
    return test_summary();
}
