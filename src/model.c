/* model.c — the Transformer: parameter layout, forward, backward.
 * See model.h for the shapes and the paper's sections. */
#include "model.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bpe.h"
#include "ops.h"

ModelDims model_dims_from_config(const Config *c, int vocab) {
    ModelDims d = {
        .vocab = vocab, .d_model = c->d_model, .d_ff = c->d_ff, .heads = c->heads,
        .enc_layers = c->encoder_layers, .dec_layers = c->decoder_layers,
        .max_positions = c->max_positions, .pre_norm = c->pre_norm,
        .dropout = (float)c->dropout, .attention_dropout = (float)c->attention_dropout,
        .relu_dropout = (float)c->relu_dropout, .label_smoothing = (float)c->label_smoothing,
    };
    return d;
}

/* snprintf that refuses to truncate a tensor name */
#define NAME(buf, ...) do { if (snprintf(buf, sizeof buf, __VA_ARGS__) >= (int)sizeof buf) die("tensor name too long"); } while (0)

/* ---- parameter layout (llm.c's fill_in_parameter_sizes) -------------- */
typedef struct { TensorInfo *t; int n, cap; size_t total; } Table;

static void add(Table *tb, const char *name, int rows, int cols) {
    if (tb->n == tb->cap) { tb->cap = tb->cap ? 2 * tb->cap : 64; tb->t = xrealloc(tb->t, (size_t)tb->cap * sizeof *tb->t); }
    TensorInfo *t = &tb->t[tb->n++];
    NAME(t->name, "%s", name);
    t->ndim = cols ? 2 : 1;
    t->shape[0] = rows;
    t->shape[1] = cols;
    t->offset = tb->total;
    t->size = (size_t)rows * (size_t)(cols ? cols : 1);
    tb->total += t->size;
}

static void add_linear(Table *tb, const char *prefix, int out, int in) {
    char n[96];
    NAME(n, "%s.weight", prefix); add(tb, n, out, in);
    NAME(n, "%s.bias", prefix); add(tb, n, out, 0);
}

static void add_attention(Table *tb, const char *prefix, int D) {
    static const char *proj[] = {"q_proj", "k_proj", "v_proj", "out_proj"};
    char n[96];
    for (int i = 0; i < 4; i++) { NAME(n, "%s.%s", prefix, proj[i]); add_linear(tb, n, D, D); }
}

static void add_layernorm(Table *tb, const char *prefix, int D) {
    char n[96];
    NAME(n, "%s.weight", prefix); add(tb, n, D, 0);
    NAME(n, "%s.bias", prefix); add(tb, n, D, 0);
}

int model_tensor_table(const ModelDims *d, TensorInfo **table, size_t *total) {
    Table tb = {0};
    int D = d->d_model, F = d->d_ff;
    char p[96], q[96];
    add(&tb, "encoder.embed_tokens.weight", d->vocab, D);
    for (int i = 0; i < d->enc_layers; i++) {
        NAME(p, "encoder.layers.%d", i);
        NAME(q, "%s.self_attn", p); add_attention(&tb, q, D);
        NAME(q, "%s.self_attn_layer_norm", p); add_layernorm(&tb, q, D);
        NAME(q, "%s.fc1", p); add_linear(&tb, q, F, D);
        NAME(q, "%s.fc2", p); add_linear(&tb, q, D, F);
        NAME(q, "%s.final_layer_norm", p); add_layernorm(&tb, q, D);
    }
    if (d->pre_norm) add_layernorm(&tb, "encoder.layer_norm", D);
    for (int i = 0; i < d->dec_layers; i++) {
        NAME(p, "decoder.layers.%d", i);
        NAME(q, "%s.self_attn", p); add_attention(&tb, q, D);
        NAME(q, "%s.self_attn_layer_norm", p); add_layernorm(&tb, q, D);
        NAME(q, "%s.encoder_attn", p); add_attention(&tb, q, D);
        NAME(q, "%s.encoder_attn_layer_norm", p); add_layernorm(&tb, q, D);
        NAME(q, "%s.fc1", p); add_linear(&tb, q, F, D);
        NAME(q, "%s.fc2", p); add_linear(&tb, q, D, F);
        NAME(q, "%s.final_layer_norm", p); add_layernorm(&tb, q, D);
    }
    if (d->pre_norm) add_layernorm(&tb, "decoder.layer_norm", D);
    *table = tb.t;
    if (total) *total = tb.total;
    return tb.n;
}

size_t model_param_count(const ModelDims *d) {
    TensorInfo *t;
    size_t total;
    model_tensor_table(d, &t, &total);
    free(t);
    return total;
}

/* Walk the buffer in table order (llm.c's malloc_and_point_parameters).
 * The order here must match model_tensor_table exactly. */
static float *take(float **cur, size_t n) { float *p = *cur; *cur += n; return p; }

static void point_attention(AttentionParams *a, float **cur, int D) {
    a->q_w = take(cur, (size_t)D * D); a->q_b = take(cur, D);
    a->k_w = take(cur, (size_t)D * D); a->k_b = take(cur, D);
    a->v_w = take(cur, (size_t)D * D); a->v_b = take(cur, D);
    a->o_w = take(cur, (size_t)D * D); a->o_b = take(cur, D);
}
static void point_layernorm(LayerNormParams *l, float **cur, int D) { l->w = take(cur, D); l->b = take(cur, D); }
static void point_ffn(FeedForwardParams *f, float **cur, int D, int F) {
    f->fc1_w = take(cur, (size_t)F * D); f->fc1_b = take(cur, F);
    f->fc2_w = take(cur, (size_t)D * F); f->fc2_b = take(cur, D);
}

void model_point_parameters(const ModelDims *d, ParameterTensors *p, float *buf) {
    int D = d->d_model, F = d->d_ff;
    float *cur = buf;
    free(p->enc);
    free(p->dec);
    memset(p, 0, sizeof *p);
    p->enc = xcalloc((size_t)d->enc_layers, sizeof *p->enc);
    p->dec = xcalloc((size_t)d->dec_layers, sizeof *p->dec);
    p->embed = take(&cur, (size_t)d->vocab * D);
    for (int i = 0; i < d->enc_layers; i++) {
        EncoderLayerParams *l = &p->enc[i];
        point_attention(&l->self_attn, &cur, D);
        point_layernorm(&l->self_attn_ln, &cur, D);
        point_ffn(&l->ffn, &cur, D, F);
        point_layernorm(&l->final_ln, &cur, D);
    }
    if (d->pre_norm) point_layernorm(&p->enc_ln, &cur, D);
    for (int i = 0; i < d->dec_layers; i++) {
        DecoderLayerParams *l = &p->dec[i];
        point_attention(&l->self_attn, &cur, D);
        point_layernorm(&l->self_attn_ln, &cur, D);
        point_attention(&l->encoder_attn, &cur, D);
        point_layernorm(&l->encoder_attn_ln, &cur, D);
        point_ffn(&l->ffn, &cur, D, F);
        point_layernorm(&l->final_ln, &cur, D);
    }
    if (d->pre_norm) point_layernorm(&p->dec_ln, &cur, D);
}

/* ---- activations (filled in below) ---- */
struct ModelActivations { int dummy; };
static void acts_free(ModelActivations *a) { free(a); }

/* ---- initialisation -------------------------------------------------- */
/* As fairseq's transformer (and tensor2tensor) initialise it:
 *   every linear weight (q/k/v/out projections, fc1, fc2): Xavier-uniform,
 *     U(-a, a) with a = sqrt(6 / (fan_in + fan_out)) (Glorot & Bengio 2010);
 *   every bias: 0;
 *   the shared embedding: N(0, D^-0.5), the pad row (TOK_PAD) set to 0 —
 *     with the sqrt(D) scale of section 3.4 an embedded token has unit-size
 *     entries, and as the pre-softmax weight it gives logits of size ~1;
 *   LayerNorm: gamma 1, beta 0. */
static void init_linear(float *w, float *b, int out, int in, Rng *r) {
    float a = sqrtf(6.0f / (float)(in + out));
    for (size_t i = 0; i < (size_t)out * in; i++) w[i] = (2.0f * rng_uniform(r) - 1.0f) * a;
    memset(b, 0, (size_t)out * sizeof *b);
}
static void init_attention(AttentionParams *a, int D, Rng *r) {
    init_linear(a->q_w, a->q_b, D, D, r);
    init_linear(a->k_w, a->k_b, D, D, r);
    init_linear(a->v_w, a->v_b, D, D, r);
    init_linear(a->o_w, a->o_b, D, D, r);
}
static void init_layernorm(LayerNormParams *l, int D) {
    for (int i = 0; i < D; i++) { l->w[i] = 1.0f; l->b[i] = 0.0f; }
}
static void init_ffn(FeedForwardParams *f, int D, int F, Rng *r) {
    init_linear(f->fc1_w, f->fc1_b, F, D, r);
    init_linear(f->fc2_w, f->fc2_b, D, F, r);
}

int model_init(Model *m, const ModelDims *d, uint64_t seed) {
    memset(m, 0, sizeof *m);
    if (d->vocab < 4 || d->d_model < 1 || d->heads < 1 || d->d_model % d->heads || d->d_ff < 1 ||
        d->enc_layers < 0 || d->dec_layers < 1 || d->max_positions < 1)
        return errorf("model: bad dimensions (vocab %d, d_model %d, heads %d, d_ff %d, layers %d/%d, max_positions %d)",
                      d->vocab, d->d_model, d->heads, d->d_ff, d->enc_layers, d->dec_layers, d->max_positions);
    m->dims = *d;
    m->num_tensors = model_tensor_table(d, &m->tensors, &m->num_params);
    m->params = xaligned(m->num_params * sizeof(float));
    m->grads = xaligned(m->num_params * sizeof(float));
    model_point_parameters(d, &m->p, m->params);
    model_point_parameters(d, &m->g, m->grads);
    m->pos_enc = xaligned((size_t)d->max_positions * d->d_model * sizeof(float));
    positional_encoding(m->pos_enc, d->max_positions, d->d_model);

    int D = d->d_model, F = d->d_ff;
    Rng r;
    rng_seed(&r, seed);
    float sd = 1.0f / sqrtf((float)D);
    for (size_t i = 0; i < (size_t)d->vocab * D; i++) m->p.embed[i] = rng_normal(&r) * sd;
    memset(m->p.embed + (size_t)TOK_PAD * D, 0, (size_t)D * sizeof(float));
    for (int i = 0; i < d->enc_layers; i++) {
        EncoderLayerParams *l = &m->p.enc[i];
        init_attention(&l->self_attn, D, &r);
        init_layernorm(&l->self_attn_ln, D);
        init_ffn(&l->ffn, D, F, &r);
        init_layernorm(&l->final_ln, D);
    }
    for (int i = 0; i < d->dec_layers; i++) {
        DecoderLayerParams *l = &m->p.dec[i];
        init_attention(&l->self_attn, D, &r);
        init_layernorm(&l->self_attn_ln, D);
        init_attention(&l->encoder_attn, D, &r);
        init_layernorm(&l->encoder_attn_ln, D);
        init_ffn(&l->ffn, D, F, &r);
        init_layernorm(&l->final_ln, D);
    }
    if (d->pre_norm) { init_layernorm(&m->p.enc_ln, D); init_layernorm(&m->p.dec_ln, D); }
    return 0;
}

void model_zero_grad(Model *m) { memset(m->grads, 0, m->num_params * sizeof(float)); }

void model_free(Model *m) {
    if (!m) return;
    acts_free(m->acts);
    free(m->tensors);
    free(m->params);
    free(m->grads);
    free(m->pos_enc);
    free(m->p.enc); free(m->p.dec);
    free(m->g.enc); free(m->g.dec);
    memset(m, 0, sizeof *m);
}
