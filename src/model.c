/* model.c — the Transformer: parameter layout, forward, backward.
 * See model.h for the shapes and the paper's sections. */
#include "model.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
