/* test_model.c — the whole Transformer: gradient check of every parameter
 * against finite differences (post-norm and pre-norm, padded batch, with and
 * without dropout), masking (padding and causal), the loss contract, and
 * Adam/the learning-rate schedule.
 *
 *   build/test_model              run the tests
 *   build/test_model --dump DIR [pre]
 *       write DIR/model.safetensors (a tfm checkpoint of a small random
 *       model), DIR/batch.safetensors and DIR/grads.safetensors (loss and
 *       every parameter gradient, dropout off) for tests/torch_parity.py.
 *   build/test_model --bench CONFIG B S T V THREADS
 *       a step server for scripts/bench_train.py: training steps (forward,
 *       backward, Adam) of CONFIG's model on a synthetic batch of B
 *       sentences x S / T tokens, vocabulary V, on command (see bench()). */
#include "test.h"

#include "checkpoint.h"
#include "config.h"
#include "model.h"
#include "ops.h"
#include "optim.h"
#include "util.h"

#include <blis.h>
#include <sys/resource.h>

/* ---- a tiny model and a padded batch ----------------------------------------- */
static ModelDims tiny_dims(int pre_norm, float drop) {
    ModelDims d = {.vocab = 13, .d_model = 8, .d_ff = 12, .heads = 2, .enc_layers = 2, .dec_layers = 2,
                   .max_positions = 16, .pre_norm = pre_norm, .dropout = drop, .attention_dropout = drop,
                   .relu_dropout = drop, .label_smoothing = 0.1f};
    return d;
}

typedef struct { Batch b; int *buf; } OwnedBatch;

/* B sentences with the given lengths (incl. EOS); PAD after them. Source
 * x_1..x_n EOS; target input BOS y_1..y_m; target output y_1..y_m EOS. */
static OwnedBatch make_batch(int B, int S, int T, const int *src_len, const int *tgt_len, int V, Rng *r) {
    OwnedBatch o;
    o.buf = xcalloc((size_t)B * (S + 2 * T + 2), sizeof(int));
    Batch *b = &o.b;
    b->B = B; b->S = S; b->T = T;
    b->src = o.buf; b->tgt_in = b->src + B * S; b->tgt_out = b->tgt_in + B * T;
    b->src_len = b->tgt_out + B * T; b->tgt_len = b->src_len + B;
    b->src_tokens = b->tgt_tokens = 0;
    for (int i = 0; i < B; i++) {
        b->src_len[i] = src_len[i]; b->tgt_len[i] = tgt_len[i];
        b->src_tokens += src_len[i]; b->tgt_tokens += tgt_len[i];
        for (int t = 0; t < S; t++)
            b->src[i * S + t] = t < src_len[i] - 1 ? 4 + (int)(rng_u64(r) % (V - 4)) : t == src_len[i] - 1 ? TOK_EOS : TOK_PAD;
        for (int t = 0; t < T; t++) {
            int y = t < tgt_len[i] - 1 ? 4 + (int)(rng_u64(r) % (V - 4)) : t == tgt_len[i] - 1 ? TOK_EOS : TOK_PAD;
            b->tgt_out[i * T + t] = y;
        }
        for (int t = 0; t < T; t++)
            b->tgt_in[i * T + t] = t == 0 ? TOK_BOS : t < tgt_len[i] ? b->tgt_out[i * T + t - 1] : TOK_PAD;
    }
    return o;
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

static void gradcheck_model(int pre_norm, int drop) {
    ModelDims d = tiny_dims(pre_norm, drop ? 0.2f : 0.0f);
    Model m;
    CHECK(model_init(&m, &d, 7) == 0);
    /* non-trivial LayerNorm parameters and biases, so every path carries signal */
    Rng r;
    rng_seed(&r, 99);
    for (int t = 0; t < m.num_tensors; t++) {
        const TensorInfo *ti = &m.tensors[t];
        if (ti->ndim == 1)
            for (size_t i = 0; i < ti->size; i++) m.params[ti->offset + i] += 0.3f * (2 * rng_uniform(&r) - 1);
    }
    OwnedBatch ob = make_batch(3, 5, 4, SRC_LEN, TGT_LEN, d.vocab, &r);
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
           pre_norm ? "pre" : "post", drop ? " with dropout" : "", checked, retried, worst,
           worst_t >= 0 ? m.tensors[worst_t].name : "-");
    CHECK_MSG(bad == 0, "%d of %d parameter gradients off", bad, checked);
    CHECK(checked == (int)m.num_params);
    CHECK_MSG(retried < checked / 50, "%d of %d entries needed the smaller step", retried, checked);
    free(ob.buf);
    model_free(&m);
}

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
    /* bad dimensions are an error */
    d.heads = 3;
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
}

/* ---- dump for tests/torch_parity.py ----------------------------------------------- */
static int write_tensors(const char *path, const TensorInfo *ti, int n, const float *buf, const char *prefix,
                         const char *const *mk, const char *const *mv, int nm) {
    StTensor *t = xcalloc((size_t)n, sizeof *t);
    char **names = xcalloc((size_t)n, sizeof *names);
    for (int i = 0; i < n; i++) {
        size_t len = strlen(prefix) + strlen(ti[i].name) + 1;
        names[i] = xmalloc(len);
        snprintf(names[i], len, "%s%s", prefix, ti[i].name);
        t[i].name = names[i];
        t[i].dtype = ST_F32;
        t[i].ndim = ti[i].ndim;
        t[i].shape[0] = ti[i].shape[0];
        t[i].shape[1] = ti[i].shape[1];
        t[i].data = (void *)(buf + ti[i].offset);
        t[i].nbytes = ti[i].size * sizeof(float);
    }
    int rc = st_write(path, t, n, mk, mv, nm);
    for (int i = 0; i < n; i++) free(names[i]);
    free(names); free(t);
    return rc;
}

static int dump(const char *dir, int pre_norm) {
    threads_init(0);
    /* a small model of the real shape family: 2+2 layers, several heads, a
     * padded batch; LayerNorm parameters and biases randomised so that every
     * gradient is non-trivial */
    Config c;
    config_defaults(&c);
    c.encoder_layers = 2; c.decoder_layers = 2; c.d_model = 32; c.d_ff = 48; c.heads = 4;
    c.max_positions = 64; c.pre_norm = pre_norm; c.label_smoothing = 0.1;
    c.vocab_size = 50;
    ModelDims d = model_dims_from_config(&c, c.vocab_size);
    Model m;
    if (model_init(&m, &d, 42)) die_error();
    Rng r;
    rng_seed(&r, 4);
    for (int t = 0; t < m.num_tensors; t++)
        if (m.tensors[t].ndim == 1)
            for (size_t i = 0; i < m.tensors[t].size; i++) m.params[m.tensors[t].offset + i] += 0.2f * rng_normal(&r);
    int sl[4] = {11, 4, 9, 1}, tl[4] = {7, 12, 2, 5};
    OwnedBatch ob = make_batch(4, 11, 12, sl, tl, d.vocab, &r);
    LossStats st = {0};
    model_zero_grad(&m);
    if (model_forward_backward(&m, &ob.b, NULL, 0, 1.0f, &st)) die_error();

    char path[4096], loss[64], nll[64], tokens[32];
    char *cfg = config_to_string(&c);
    const char *mk[2] = {"format", "config"}, *mv[2] = {"tfm-checkpoint-1", cfg};
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    if (write_tensors(path, m.tensors, m.num_tensors, m.params, "", mk, mv, 2)) die_error();
    snprintf(loss, sizeof loss, "%.17g", st.loss);
    snprintf(nll, sizeof nll, "%.17g", st.nll);
    snprintf(tokens, sizeof tokens, "%ld", st.tokens);
    const char *gk[3] = {"loss", "nll", "tokens"}, *gv[3] = {loss, nll, tokens};
    snprintf(path, sizeof path, "%s/grads.safetensors", dir);
    if (write_tensors(path, m.tensors, m.num_tensors, m.grads, "grad.", gk, gv, 3)) die_error();
    /* the batch as I64 tensors */
    const Batch *b = &ob.b;
    struct { const char *name; const int *v; int rows, cols; } parts[] = {
        {"src", b->src, b->B, b->S}, {"tgt_in", b->tgt_in, b->B, b->T}, {"tgt_out", b->tgt_out, b->B, b->T},
        {"src_len", b->src_len, b->B, 0}, {"tgt_len", b->tgt_len, b->B, 0}};
    StTensor t[5];
    int64_t *data[5];
    for (int i = 0; i < 5; i++) {
        size_t n = (size_t)parts[i].rows * (parts[i].cols ? parts[i].cols : 1);
        data[i] = xmalloc(n * sizeof(int64_t));
        for (size_t k = 0; k < n; k++) data[i][k] = parts[i].v[k];
        t[i] = (StTensor){.name = (char *)parts[i].name, .dtype = ST_I64, .ndim = parts[i].cols ? 2 : 1,
                          .shape = {parts[i].rows, parts[i].cols}, .data = data[i], .nbytes = n * sizeof(int64_t)};
    }
    snprintf(path, sizeof path, "%s/batch.safetensors", dir);
    if (st_write(path, t, 5, NULL, NULL, 0)) die_error();
    for (int i = 0; i < 5; i++) free(data[i]);
    printf("wrote %s/{model,batch,grads}.safetensors: %s-norm, loss %.6f over %ld tokens\n", dir,
           pre_norm ? "pre" : "post", st.loss, st.tokens);
    free(cfg); free(ob.buf);
    model_free(&m);
    config_free(&c);
    return 0;
}


/* ---- benchmark (scripts/bench-train.sh) -------------------------------------------- */
static double peak_rss_mb(void) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_maxrss / 1024.0;
}

/* GFLOP/s of one BLIS sgemm C[m,n] += A[m,k] B[k,n]^T, best of reps */
static double sgemm_gflops(int m, int n, int k, int reps) {
    float *a = xaligned((size_t)m * k * 4), *b = xaligned((size_t)n * k * 4), *c = xaligned((size_t)m * n * 4);
    for (size_t i = 0; i < (size_t)m * k; i++) a[i] = 0.001f * (float)(i % 97);
    for (size_t i = 0; i < (size_t)n * k; i++) b[i] = 0.001f * (float)(i % 89);
    double best = 1e30;
    for (int r = 0; r < reps; r++) {
        double t0 = now_seconds();
        gemm(0, 1, m, n, k, 1.0f, a, k, b, k, 0.0f, c, n);
        double t = now_seconds() - t0;
        if (t < best) best = t;
    }
    free(a); free(b); free(c);
    return 2.0 * m * n * k / best / 1e9;
}

/* Matrix-product FLOPs of one training step: each linear layer of n rows
 * costs 2 n in out forward and twice that backward (dX and dW); attention
 * two products forward (Q K^T, P V) and four backward; the output layer is
 * a linear of the target rows onto V. */
static double step_flops(const ModelDims *d, int B, int S, int T) {
    double D = d->d_model, F = d->d_ff, V = d->vocab, ns = (double)B * S, nt = (double)B * T;
    double enc = ns * (4 * D * D + 2 * D * F) * 2, att_e = 2.0 * 2 * B * (double)S * S * D;
    double dec = (nt * (6 * D * D + 2 * D * F) + ns * 2 * D * D) * 2;
    double att_d = 2.0 * 2 * B * ((double)T * T + (double)T * S) * D;
    double out = 2 * nt * D * V;
    return 3 * (d->enc_layers * (enc + att_e) + d->dec_layers * (dec + att_d) + out);
}

static long minor_faults(void) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_minflt;
}
static double cpu_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* A step server for scripts/bench_train.py, which interleaves tfm's steps
 * with PyTorch's so that both see the same machine load. Commands on stdin,
 * one per line; answers on stdout:
 *   step   -> "step WALL_S CPU_S LOSS_PER_TOKEN PAGE_FAULTS"  (zero_grad,
 *             forward + backward with dropout, Adam)
 *   sgemm  -> "sgemm GFLOPS" of BLIS at the FFN's shape [B*T, D] x [D, F]
 *             (wall clock, all threads)
 *   sgemm1 -> "sgemm1 GFLOPS" of the same on one thread per CPU second
 *             (the peak of one core, whatever else runs on the machine)
 *   quit / end of input -> "rss PEAK_MB" and exit */
static int bench(int argc, char **argv) {
    if (argc < 8) { fprintf(stderr, "usage: test_model --bench CONFIG B S T V THREADS\n"); return 2; }
    Config c;
    if (config_load(&c, argv[2])) die_error();   /* defaults, then the file */
    int B = atoi(argv[3]), S = atoi(argv[4]), T = atoi(argv[5]), V = atoi(argv[6]);
    threads_init(atoi(argv[7]));
    ModelDims d = model_dims_from_config(&c, V);
    if (d.max_positions < S || d.max_positions < T) d.max_positions = S > T ? S : T;
    Model m;
    if (model_init(&m, &d, 1)) die_error();
    float *am = xaligned(m.num_params * 4), *av = xaligned(m.num_params * 4);
    Rng r;
    rng_seed(&r, 1);
    int *len_s = xmalloc(B * sizeof(int)), *len_t = xmalloc(B * sizeof(int));
    for (int i = 0; i < B; i++) { len_s[i] = S; len_t[i] = T; }
    OwnedBatch ob = make_batch(B, S, T, len_s, len_t, V, &r);
    printf("ready %zu %.6e %d %s %d\n", m.num_params, step_flops(&d, B, S, T), threads_count(),
           blis_kernels(), blis_kernels_id());
    fflush(stdout);
    char line[64];
    long step = 0;
    while (fgets(line, sizeof line, stdin)) {
        if (!strncmp(line, "step", 4)) {
            double t0 = now_seconds(), c0 = cpu_seconds();
            long f0 = minor_faults();
            LossStats st = {0};
            model_zero_grad(&m);
            if (model_forward_backward(&m, &ob.b, &r, 1, 1.0f / (B * T), &st)) die_error();
            step++;
            adam_update(m.params, m.grads, am, av, m.num_params, lr_schedule(step, d.d_model, c.warmup, c.lr_scale),
                        c.beta1, c.beta2, c.eps, step);
            printf("step %.4f %.4f %.4f %ld\n", now_seconds() - t0, cpu_seconds() - c0, st.loss / st.tokens,
                   minor_faults() - f0);
        } else if (!strncmp(line, "sgemm1", 6)) {
            int M = B * T, N = d.d_ff, K = d.d_model;
            float *x = xaligned((size_t)M * K * 4), *w = xaligned((size_t)N * K * 4), *y = xaligned((size_t)M * N * 4);
            double best = 1e30;
            for (int rep = 0; rep < 2; rep++) {
                double c0 = cpu_seconds();
                gemm1(0, 1, M, N, K, 1.0f, x, K, w, K, 0.0f, y, N);
                double t = cpu_seconds() - c0;
                if (t < best) best = t;
            }
            printf("sgemm1 %.2f\n", 2.0 * M * N * K / best / 1e9);
            free(x); free(w); free(y);
        } else if (!strncmp(line, "sgemm", 5)) {
            printf("sgemm %.2f\n", sgemm_gflops(B * T, d.d_ff, d.d_model, 2));
        } else break;
        fflush(stdout);
    }
    printf("rss %.0f\n", peak_rss_mb());
    free(am); free(av); free(len_s); free(len_t); free(ob.buf);
    model_free(&m);
    config_free(&c);
    return 0;
}

int main(int argc, char **argv) {
    if (argc >= 2 && !strcmp(argv[1], "--bench")) return bench(argc, argv);
    if (argc >= 3 && !strcmp(argv[1], "--dump")) return dump(argv[2], argc >= 4 && !strcmp(argv[3], "pre"));
    threads_init(1);   /* tiny shapes: a thread team costs more than it saves */
    RUN(test_init);
    RUN(test_optim);
    RUN(test_contract);
    RUN(test_masking_post);
    RUN(test_masking_pre);
    RUN(test_threads_agree);
    RUN(test_gradcheck_post);
    RUN(test_gradcheck_pre);
    RUN(test_gradcheck_dropout);
    return test_summary();
}
