/* model.c — the Transformer: parameter layout, forward, backward.
 * See model.h for the shapes and the paper's sections.
 *
 * Over 700 lines: the forward and the backward of the encoder and the
 * decoder, each backward beside its forward so that one reads against the
 * other, and the one layout table every pointer comes from. */
#include "model.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dispatch.h"
#include "gemm_bf16.h"
#include "gemm_dnnl.h"
#include "ops.h"
#include "parallel.h"
#include "prof.h"

/* PROF FLOPs and bytes (prof.h): a linear layer of n rows forward, and
 * backward with both dx and dW; the bytes of n rows of D floats read or written. */
#define LIN_FWD(n, in, out) (2.0 * (n) * (in) * (out))
#define LIN_BWD(n, in, out) (4.0 * (n) * (in) * (out))
#define ROWS_B(n, D) (4.0 * (n) * (D))

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

/* ---- parameter layout: the one table ----------------------------------
 * layout() walks the model once, in fairseq's order, and lists every tensor:
 * its name, its shape, its place in the buffer, how it is initialised and
 * (given a ParameterTensors) the named pointer it sets. The table of
 * checkpoints, the pointers of the parameters and of the gradients, and the
 * initialisation all come from this one walk (llm.c's fill_in_parameter_sizes
 * and malloc_and_point_parameters in one). */
typedef struct {
    TensorInfo *t; int n, cap;
    size_t total;             /* floats so far */
    float *buf;               /* with p: the buffer the pointers point into */
} Layout;

/* out = "prefix.part" (a tensor name, or the prefix of several). */
#define NAME_MAX_LEN ((int)sizeof ((TensorInfo *)0)->name)
static void join(char *out, const char *prefix, const char *part) {
    int n = snprintf(out, NAME_MAX_LEN, "%s.%s", prefix, part);
    ASSERT(n > 0 && n < NAME_MAX_LEN);
}

/* Append the tensor "prefix.part" of shape [rows, cols] (cols 0: a vector);
 * with dst, *dst = its place in buf. */
static void add(Layout *L, float **dst, TensorInit init, const char *prefix, const char *part, int rows, int cols) {
    if (L->n == L->cap) { L->cap = L->cap ? 2 * L->cap : 64; L->t = xrealloc(L->t, (size_t)L->cap * sizeof *L->t); }
    TensorInfo *t = &L->t[L->n++];
    join(t->name, prefix, part);
    t->ndim = cols ? 2 : 1;
    t->shape[0] = rows;
    t->shape[1] = cols;
    t->offset = L->total;
    t->size = (size_t)rows * (size_t)(cols ? cols : 1);
    t->init = init;
    L->total += t->size;
    if (dst) *dst = L->buf + t->offset;
}

/* The fields of *s, or NULL when the walk sets no pointers (s == NULL). */
#define AT(s, field) ((s) ? &(s)->field : NULL)

/* y = x W^T + b: weight [out, in] (Xavier-uniform), bias [out] (zero) */
static void add_linear(Layout *L, float **w, float **b, const char *prefix, int out, int in) {
    add(L, w, INIT_XAVIER, prefix, "weight", out, in);
    add(L, b, INIT_ZERO, prefix, "bias", out, 0);
}

static void add_attention(Layout *L, AttentionParams *a, const char *prefix, int D) {
    char n[NAME_MAX_LEN];
    join(n, prefix, "q_proj");   add_linear(L, AT(a, q_w), AT(a, q_b), n, D, D);
    join(n, prefix, "k_proj");   add_linear(L, AT(a, k_w), AT(a, k_b), n, D, D);
    join(n, prefix, "v_proj");   add_linear(L, AT(a, v_w), AT(a, v_b), n, D, D);
    join(n, prefix, "out_proj"); add_linear(L, AT(a, o_w), AT(a, o_b), n, D, D);
}

static void add_layernorm(Layout *L, LayerNormParams *l, const char *prefix, int D) {
    add(L, AT(l, w), INIT_ONE, prefix, "weight", D, 0);
    add(L, AT(l, b), INIT_ZERO, prefix, "bias", D, 0);
}

static void add_ffn(Layout *L, FeedForwardParams *f, const char *prefix, int D, int F) {
    char n[NAME_MAX_LEN];
    join(n, prefix, "fc1"); add_linear(L, AT(f, fc1_w), AT(f, fc1_b), n, F, D);
    join(n, prefix, "fc2"); add_linear(L, AT(f, fc2_w), AT(f, fc2_b), n, D, F);
}

/* The walk. With p (whose enc/dec arrays are allocated) the named pointers
 * are set into buf; without, only the table is built. */
static void layout(const ModelDims *d, ParameterTensors *p, float *buf, Layout *L) {
    int D = d->d_model, F = d->d_ff;
    char n[NAME_MAX_LEN];
    *L = (Layout){.buf = buf};
    add(L, AT(p, embed), INIT_EMBEDDING, "encoder.embed_tokens", "weight", d->vocab, D);
    for (int i = 0; i < d->enc_layers; i++) {
        EncoderLayerParams *l = p ? &p->enc[i] : NULL;
        char q[NAME_MAX_LEN];
        snprintf(n, sizeof n, "encoder.layers.%d", i);
        join(q, n, "self_attn");            add_attention(L, AT(l, self_attn), q, D);
        join(q, n, "self_attn_layer_norm"); add_layernorm(L, AT(l, self_attn_ln), q, D);
        add_ffn(L, AT(l, ffn), n, D, F);
        join(q, n, "final_layer_norm");     add_layernorm(L, AT(l, final_ln), q, D);
    }
    if (d->pre_norm) add_layernorm(L, AT(p, enc_ln), "encoder.layer_norm", D);
    for (int i = 0; i < d->dec_layers; i++) {
        DecoderLayerParams *l = p ? &p->dec[i] : NULL;
        char q[NAME_MAX_LEN];
        snprintf(n, sizeof n, "decoder.layers.%d", i);
        join(q, n, "self_attn");               add_attention(L, AT(l, self_attn), q, D);
        join(q, n, "self_attn_layer_norm");    add_layernorm(L, AT(l, self_attn_ln), q, D);
        join(q, n, "encoder_attn");            add_attention(L, AT(l, encoder_attn), q, D);
        join(q, n, "encoder_attn_layer_norm"); add_layernorm(L, AT(l, encoder_attn_ln), q, D);
        add_ffn(L, AT(l, ffn), n, D, F);
        join(q, n, "final_layer_norm");        add_layernorm(L, AT(l, final_ln), q, D);
    }
    if (d->pre_norm) add_layernorm(L, AT(p, dec_ln), "decoder.layer_norm", D);
}
#undef AT

int model_tensor_table(const ModelDims *d, TensorInfo **table, size_t *total) {
    Layout L;
    layout(d, NULL, NULL, &L);
    *table = L.t;
    if (total) *total = L.total;
    return L.n;
}

size_t model_param_count(const ModelDims *d) {
    Layout L;
    layout(d, NULL, NULL, &L);
    free(L.t);
    return L.total;
}

void model_point_parameters(const ModelDims *d, ParameterTensors *p, float *buf) {
    free(p->enc);
    free(p->dec);
    memset(p, 0, sizeof *p);
    p->enc = xcalloc((size_t)d->enc_layers, sizeof *p->enc);
    p->dec = xcalloc((size_t)d->dec_layers, sizeof *p->dec);
    Layout L;
    layout(d, p, buf, &L);
    free(L.t);
}

static void acts_free(ModelActivations *a);   /* below, with the activations */

/* ---- initialisation -------------------------------------------------- */
/* As fairseq's transformer (and tensor2tensor) initialise it, tensor by
 * tensor in table order (one RNG stream, so the order is part of the result):
 *   every linear weight (q/k/v/out projections, fc1, fc2): Xavier-uniform,
 *     U(-a, a) with a = sqrt(6 / (fan_in + fan_out)) (Glorot & Bengio 2010);
 *   every bias: 0;
 *   the shared embedding: N(0, D^-0.5), the pad row (TOK_PAD) set to 0 —
 *     with the sqrt(D) scale of section 3.4 an embedded token has unit-size
 *     entries, and as the pre-softmax weight it gives logits of size ~1;
 *   LayerNorm: gamma 1, beta 0. */
static void init_tensor(const TensorInfo *t, float *w, Rng *r) {
    int rows = t->shape[0], cols = t->shape[1];
    switch (t->init) {
    case INIT_EMBEDDING: {
        float sd = 1.0f / sqrtf((float)cols);
        for (size_t i = 0; i < t->size; i++) w[i] = rng_normal(r) * sd;
        memset(w + (size_t)TOK_PAD * cols, 0, (size_t)cols * sizeof *w);
        break;
    }
    case INIT_XAVIER: {
        float a = sqrtf(6.0f / (float)(cols + rows));
        for (size_t i = 0; i < t->size; i++) w[i] = (2.0f * rng_uniform(r) - 1.0f) * a;
        break;
    }
    case INIT_ZERO: memset(w, 0, t->size * sizeof *w); break;
    case INIT_ONE: for (size_t i = 0; i < t->size; i++) w[i] = 1.0f; break;
    }
}

int model_dims_check(const ModelDims *d) {
    if (d->vocab < 4 || d->d_model < 1 || d->heads < 1 || d->d_model % d->heads || d->d_ff < 1 ||
        d->enc_layers < 1 || d->dec_layers < 1 || d->max_positions < 1)
        return errorf("model: bad dimensions (vocab %d, d_model %d, heads %d, d_ff %d, layers %d/%d, max_positions %d)",
                      d->vocab, d->d_model, d->heads, d->d_ff, d->enc_layers, d->dec_layers, d->max_positions);
    return 0;
}

int model_alloc(Model *m, const ModelDims *d) {
    memset(m, 0, sizeof *m);
    if (model_dims_check(d)) return -1;
    m->dims = *d;
    m->num_tensors = model_tensor_table(d, &m->tensors, &m->num_params);
    m->params = xaligned(m->num_params * sizeof(float));
    model_point_parameters(d, &m->p, m->params);   /* the gradients: model_zero_grad */
    m->pos_enc = xaligned((size_t)d->max_positions * d->d_model * sizeof(float));
    positional_encoding(m->pos_enc, d->max_positions, d->d_model);
    return 0;
}

int model_init(Model *m, const ModelDims *d, uint64_t seed) {
    if (model_alloc(m, d)) return -1;
    Rng r;
    rng_seed(&r, seed);
    for (int t = 0; t < m->num_tensors; t++) init_tensor(&m->tensors[t], m->params + m->tensors[t].offset, &r);
    return 0;
}

void model_zero_grad(Model *m) {
    if (!m->grads) {   /* first use: training needs them, translation and scoring never do */
        m->grads = xaligned(m->num_params * sizeof(float));
        model_point_parameters(&m->dims, &m->g, m->grads);
        return;
    }
    memset(m->grads, 0, m->num_params * sizeof(float));
}

/* The weights the bf16 products read, made on first use (a model that only
 * translates never needs them: the Translator keeps its own, decode.c):
 *   oneDNN route: params_b16 only, the 16-bit values, registered as the twin
 *     of m->params (gemm_dnnl_shadow): a product whose operand is a weight
 *     (a pointer into m->params, no GEMM_BF16_* bit) reads the twin; the
 *     other routes round such an operand as they go (ops.c gemm_many);
 *   AMX and kernel routes: none: tfm's kernels round every operand as they
 *     pack it (gemm_amx.c, gemm_bf16.c: to nearest even, as bf16_round), so
 *     they read the fp32 masters and pack the bits the rounded copy would
 *     have held (no copy: -4 bytes a parameter, 241 MiB at the base model);
 *     the AMX kernel keeps its panels until the masters are written again;
 *   emulated route: params_bf16, the values rounded to bf16 as floats (its
 *     products are fp32 ones, which round nothing); with recompute (the
 *     memory setting) none: each product rounds the weight it reads into its
 *     scratch copy (ops.h gemm_bf16_masters: -4 bytes a parameter, and the
 *     scratch grows to the largest weight, E: -169 MiB net at the base
 *     model, for ~1% of its step). */
static int reads_masters(const Model *m) {
    Bf16Route r = bf16_route();
    return m->bf16 && (r == BF16_AMX || r == BF16_KERNEL || (r == BF16_EMULATED && m->recompute));
}
/* The weights the products read are written (or made, or let go of): the
 * AMX route's kept panels of the old values go (gemm_amx.h amx_weights), and
 * the new values' panels will be kept until the next write. Every write of
 * params_bf16, and on the AMX and kernel routes of the masters, is preceded by this
 * call (model_bf16_copies, model_bf16_round, model_wire_unpack; a write from
 * elsewhere marks the copies stale, model_params_changed, and the next
 * forward comes here). */
static void bf16_written(const Model *m) {
    const float *w = m->params_bf16 ? m->params_bf16 : m->bf16 && bf16_route() == BF16_AMX ? m->params : NULL;
    amx_weights(w, w ? m->num_params : 0);
}

static void free_bf16(Model *m) {
    if (m->params_b16) gemm_dnnl_shadow(m->params, NULL, 0);
    gemm_bf16_masters(m->params, 0);
    amx_weights(NULL, 0);
    free(m->params_bf16);
    free(m->params_b16);
    m->params_bf16 = NULL;
    m->params_b16 = NULL;
}
static void alloc_bf16(Model *m) {
    if (!m->bf16) return;
    if (reads_masters(m)) {   /* no copy; one of another route's goes (bf16_route_set in tests) */
        if (m->params_bf16 || m->params_b16) {
            free_bf16(m);
            m->params_bf16_stale = 1;
        }
        gemm_bf16_masters(m->params, bf16_route() == BF16_EMULATED ? m->num_params : 0);
        return;
    }
    int dnnl = bf16_route() == BF16_ONEDNN;
    if (dnnl ? m->params_b16 != NULL : m->params_bf16 != NULL) return;
    free_bf16(m);   /* a twin of the other route's kind (bf16_route_set in tests) */
    if (dnnl) {
        m->params_b16 = xaligned(m->num_params * sizeof(uint16_t));
        gemm_dnnl_shadow(m->params, m->params_b16, m->num_params);
    } else {
        m->params_bf16 = xaligned(m->num_params * sizeof(float));
        bf16_written(m);
    }
    m->params_bf16_stale = 1;
}

/* The twin stays allocated when the precision goes back to fp32 (only
 * dev/bench_train switches back and forth: freeing it made every bf16 step
 * there fault in and zero 126-252 MB again); fp32 products never read it (W,
 * model_bf16_copies), and it is remade from the parameters at the next bf16
 * forward. model_free and model_release_params free it. */
void model_set_precision(Model *m, int precision) {
    m->bf16 = precision == PREC_BF16;
    m->int8 = precision == PREC_INT8;
    m->params_bf16_stale = 1;
}

void model_params_changed(Model *m) { m->params_bf16_stale = 1; }

void model_bf16_copies(Model *m, float **f, uint16_t **h) {
    if (!m->bf16) {   /* fp32: no copies to write (a twin left from bf16 stays stale) */
        *f = NULL;
        *h = NULL;
        return;
    }
    alloc_bf16(m);
    bf16_written(m);   /* the caller writes them now */
    *f = m->params_bf16;
    *h = m->params_b16;
    m->params_bf16_stale = 0;
}

/* The weight matrix a product reads: w itself (fp32, or bf16 through
 * oneDNN's twin), or its bf16-rounded copy. */
static const float *W(const Model *m, const float *w) {
    return m->bf16 && m->params_bf16 ? m->params_bf16 + (w - m->params) : w;
}

void model_bf16_round(Model *m, size_t lo, size_t hi) {
    if (!m->bf16 || hi <= lo) return;
    alloc_bf16(m);
    bf16_written(m);
    if (!m->params_bf16 && !m->params_b16) return;   /* no copy (reads_masters): the products round the masters */
    size_t n = hi - lo;
    const float *src = m->params + lo;
    /* the oneDNN route: only the 16-bit twin; the others: the rounded floats */
    uint16_t *h = m->params_b16 ? m->params_b16 + lo : NULL;
    float *dst = m->params_b16 ? NULL : m->params_bf16 + lo;
    size_t nr = (n + BF16_RUN - 1) / BF16_RUN;
    #pragma omp parallel for schedule(static) if (n >= STREAM_PAR_MIN)
    for (size_t r = 0; r < nr; r++) {
        size_t i0 = r * BF16_RUN, len = n - i0 < BF16_RUN ? n - i0 : BF16_RUN;
        bf16_round_run(dst ? dst + i0 : NULL, h ? h + i0 : NULL, src + i0, len);
    }
}

/* ---- bf16 on the wire ------------------------------------------------- */
/* A product weight: a linear layer's W, which with bf16 products the model
 * reads only through its bf16 copy (W()); biases, LayerNorm parameters and
 * the shared embedding (a lookup too) are read as fp32. */
static int wire16(const TensorInfo *t) { return t->init == INIT_XAVIER; }

/* A walk over a range of params, run by run (wire_runs: a run is all
 * product weights, or all not), and where on the wire its bytes go or come
 * from. */
typedef struct {
    const Model *m;
    Model *dst;         /* unpacking: the model written */
    char *out;          /* packing: the bytes written, advanced run by run */
    const char *in;     /* unpacking: the bytes read, the same way */
    size_t bytes;       /* counted */
} Wire;

/* Call f(w, a, b, sixteen) for the runs of params[lo, hi), in order. */
static void wire_runs(Wire *w, size_t lo, size_t hi, void (*f)(Wire *, size_t, size_t, int)) {
    size_t a = lo;
    int kind = -1;
    for (int i = 0; i < w->m->num_tensors && a < hi; i++) {
        const TensorInfo *t = &w->m->tensors[i];
        size_t tlo = t->offset, thi = t->offset + t->size;
        if (thi <= lo || tlo >= hi) continue;
        int k = wire16(t);
        size_t start = tlo > lo ? tlo : lo;
        if (kind >= 0 && k != kind) { f(w, a, start, kind); a = start; }
        kind = k;
    }
    if (a < hi) f(w, a, hi, kind > 0);
}

static size_t run_bytes(size_t a, size_t b, int sixteen) {
    return (b - a) * (sixteen ? sizeof(uint16_t) : sizeof(float));
}

static void count_run(Wire *w, size_t a, size_t b, int sixteen) { w->bytes += run_bytes(a, b, sixteen); }

size_t model_wire_bytes(const Model *m, size_t lo, size_t hi) {
    Wire w = {.m = m};
    if (hi > lo) wire_runs(&w, lo, hi, count_run);
    return w.bytes;
}

static void pack_run(Wire *w, size_t a, size_t b, int sixteen) {
    const float *src = w->m->params + a;
    size_t n = b - a;
    if (sixteen) {
        uint16_t *h = (uint16_t *)(void *)w->out;   /* 2-byte aligned: every run is a whole number of 16-bit values */
        #pragma omp parallel for simd schedule(static) if (n >= STREAM_PAR_MIN)
        for (size_t i = 0; i < n; i++) h[i] = bf16_from_float(src[i]);
    } else memcpy(w->out, src, n * sizeof(float));
    w->out += run_bytes(a, b, sixteen);
}

void model_wire_pack(const Model *m, size_t lo, size_t hi, void *out) {
    Wire w = {.m = m, .out = out};
    if (hi > lo) wire_runs(&w, lo, hi, pack_run);
}

static void unpack_run(Wire *w, size_t a, size_t b, int sixteen) {
    Model *m = w->dst;
    size_t n = b - a;
    if (!sixteen) {   /* fp32: the weights, and their copies rounded as an update rounds them */
        const char *x = w->in;   /* floats at any even address: memcpy reads them */
        float *p = m->params + a;
        if (!m->params_b16 && !m->params_bf16) {   /* no copy (reads_masters): the masters alone */
            memcpy(p, x, n * sizeof(float));
        } else if (m->params_b16) {
            uint16_t *t = m->params_b16 + a;
            #pragma omp parallel for simd schedule(static) if (n >= STREAM_PAR_MIN)
            for (size_t i = 0; i < n; i++) { float v; memcpy(&v, x + 4 * i, 4); p[i] = v; t[i] = bf16_from_float(v); }
        } else {
            float *f = m->params_bf16 + a;
            #pragma omp parallel for simd schedule(static) if (n >= STREAM_PAR_MIN)
            for (size_t i = 0; i < n; i++) { float v; memcpy(&v, x + 4 * i, 4); p[i] = v; f[i] = bf16_round(v); }
        }
    } else {          /* the bf16 values: into the copy the products read, and as floats into params */
        const uint16_t *h = (const uint16_t *)(const void *)w->in;
        float *p = m->params + a;
        if (!m->params_b16 && !m->params_bf16) {
            #pragma omp parallel for simd schedule(static) if (n >= STREAM_PAR_MIN)
            for (size_t i = 0; i < n; i++) p[i] = bf16_to_float(h[i]);
        } else if (m->params_b16) {
            uint16_t *t = m->params_b16 + a;
            #pragma omp parallel for simd schedule(static) if (n >= STREAM_PAR_MIN)
            for (size_t i = 0; i < n; i++) p[i] = bf16_to_float(t[i] = h[i]);
        } else {
            float *f = m->params_bf16 + a;
            #pragma omp parallel for simd schedule(static) if (n >= STREAM_PAR_MIN)
            for (size_t i = 0; i < n; i++) p[i] = f[i] = bf16_to_float(h[i]);
        }
    }
    w->in += run_bytes(a, b, sixteen);
}

void model_wire_unpack(Model *m, size_t lo, size_t hi, const void *in) {
    if (!m->bf16 || hi <= lo) return;
    alloc_bf16(m);
    bf16_written(m);
    Wire w = {.m = m, .dst = m, .in = in};
    wire_runs(&w, lo, hi, unpack_run);
}

static void round_params(Model *m) {
    if (!m->bf16) return;
    alloc_bf16(m);
    if (!m->params_bf16_stale) return;
    size_t n = m->num_params;
    double t0 = prof_on ? prof_clock() : 0.0;
    model_bf16_round(m, 0, n);
    if (prof_on && (m->params_b16 || m->params_bf16)) prof_add(PROF_BF16, t0, 0, (m->params_b16 ? 6.0 : 8.0) * n);
    m->params_bf16_stale = 0;
}

void model_release_params(Model *m) {
    free_bf16(m);   /* first: it unregisters the twin of m->params */
    free(m->params); free(m->grads);
    m->params = m->grads = NULL;
    free(m->p.enc); free(m->p.dec);
    free(m->g.enc); free(m->g.dec);
    memset(&m->p, 0, sizeof m->p);   /* no tensor left to point at */
    memset(&m->g, 0, sizeof m->g);
}

void model_free(Model *m) {
    if (!m) return;
    acts_free(m->acts);
    free_bf16(m);   /* first: it unregisters the twin of m->params */
    free(m->tensors);
    free(m->params);
    free(m->grads);
    free(m->pos_enc);
    free(m->p.enc); free(m->p.dec);
    free(m->g.enc); free(m->g.dec);
    memset(m, 0, sizeof *m);
    ops_release();   /* the workspaces its training or scoring grew (ops.h) */
}

/* ======================================================================
 * Activations: everything the backward pass needs, planned once per batch
 * shape in one buffer (llm.c's ActivationTensors) and reused; the buffer
 * only grows when a bigger batch comes.
 *
 * A sublayer (attention or FFN, section 3.1) wraps f with a residual
 * connection, dropout and LayerNorm:
 *   post-norm (paper):  res = x + dropout(f(x));      ln = LN(res);  out = ln
 *   pre-norm:           ln = LN(x);  res = x + dropout(f(ln));       out = res
 * Each sublayer keeps LayerNorm's input (`res`, or in pre-norm the stream x,
 * which is the sublayer before's res) and its mean/rstd; its output `ln`
 * goes to a buffer the sublayers share, and the backward remakes it bit for
 * bit from the input + mean/rstd (layernorm_apply) where it needs it. Only the
 * encoder output (the decoder's keys and values read it to the end) and the
 * pre-norm final LayerNorms keep their own.
 *
 * An attention sublayer keeps q, k, v, the context and the probabilities;
 * an FFN its hidden layer h.
 * The buffers only the forward of one sublayer, the output layer or the
 * backward use (the output layer's logits; the backward's gradients of
 * q, k, v, ctx, h) share one region, `shared`.
 *
 * Recomputation (m->recompute, `[train] recompute`): the FFN's h, every
 * attention's q, context and probabilities, and cross-attention's k and v
 * are not kept: they go to `shared` too (one sublayer's at a time), and the
 * backward remakes them from the sublayer's input (kept, or remade as above)
 * with the forward's own calls on the same values (same kernels, same
 * shapes, so the same cut into threads, the same dropout seeds): bit for bit
 * the forward's, so gradients and weights do not change (test_model checks
 * it). Cost: fc1, every q projection and cross-attention's k, v projections
 * once more (168 of a step's 1,562 GFLOP at the base model's benchmark
 * batch) and the attention core (doc/training.md has the memory and time).
 * Memory of each buffer at the benchmark shape: doc/training.md.
 * ====================================================================== */
typedef struct { float *ln, *mean, *rstd, *res; } Residual;
typedef struct { float *q, *k, *v, *ctx, *probs; } AttnActs;   /* [nq, D], [nk, D], [nk, D], [nq, D], [B, H, Tq, Tk] */

typedef struct {
    AttnActs att; Residual r1;      /* self-attention */
    float *h; Residual r2;          /* FFN: h = dropout(ReLU(x W1^T + b1)) [n_s, F] */
} EncoderLayerActs;

typedef struct {
    AttnActs self; Residual r1;     /* masked self-attention */
    AttnActs cross; Residual r2;    /* encoder-decoder attention: k, v are [n_s, D] */
    float *h; Residual r3;          /* FFN */
} DecoderLayerActs;

struct ModelActivations {
    int B, S, T, rc, twin;          /* shape planned for, m->recompute, and the 16-bit twins wanted (below) */
    size_t cap;                     /* floats in buf */
    float *buf;
    int icap;                       /* ints in ibuf */
    int *ibuf;
    EncoderLayerActs *enc;
    DecoderLayerActs *dec;
    float *enc_x, *dec_x;           /* embeddings (after dropout) [n_s, D], [n_t, D] */
    Residual enc_final, dec_final;  /* final LayerNorm of each stack (pre-norm) */
    float *mem;                     /* post-norm: the encoder output, LN of its last res [n_s, D] */
    float *ln2[2];                  /* LayerNorm outputs, shared (above) [max(n_s, n_t), D] */
    /* backward and scratch */
    float *d_enc, *d_dec;           /* gradient of the residual stream [n_s, D], [n_t, D] */
    /* in `shared`: the forward's and the backward's, or the output layer's */
    float *s_o, *s_ctx, *s_q, *s_k, *s_v, *s_a;   /* [max(n_s, n_t), D] */
    float *s_x16;                   /* bf16, post-norm forward: a sublayer's input rounded, once (bf16_input)
                                     * [max(n_s, n_t), D] */
    /* bf16 on the oneDNN route (twin; else NULL): the 16 bits of the sublayers' product inputs, written by
     * their producers beside the floats and lent to the products that read them (twin16, lend): pre-norm
     * the LayerNorm outputs ln2[0] (ln16) and the encoder output enc_final.ln (mem16); post-norm the
     * rounded copy s_x16 (x16h), the encoder output mem (mem16) and the backward's remade stream in
     * ln2[0] (ln16) */
    uint16_t *ln16, *mem16, *x16h;
    uint16_t *o16, *h16, *q16, *k16, *v16;   /* the same for the output gradients that two products
                                              * read: s_o, s_h, s_q, s_k, s_v */
    float *s_h;                     /* [max(n_s, n_t), F] */
    int C;                          /* output rows per chunk */
    float *logits;                  /* [C, V] */
    uint16_t *logits16;             /* bf16 on the oneDNN route: the dlogits in 16 bits too [C, V], written by the
                                     * loss and lent to its two products (gemm_dnnl_shadow) instead of a [C, V]
                                     * conversion by each; else NULL */
    float *xc, *dxc;                /* [C, D], [C, D] */
    int *rows, *tc;                 /* real (non-pad) target rows [n_t], chunk targets [C] */
    int *tgt_flat;                  /* [n_t] target id or -1 at pads */
};

static void acts_free(ModelActivations *a) {
    if (!a) return;
    free(a->buf); free(a->ibuf); free(a->enc); free(a->dec); free(a);
}

/* Offsets first, pointers second: take() counts floats when base is NULL. */
typedef struct { float *base; size_t used; } Planner;
static float *take_acts(Planner *pl, size_t n) {
    float *p = pl->base ? pl->base + pl->used : NULL;
    pl->used += (n + 15) & ~(size_t)15;   /* 64-byte aligned blocks */
    return p;
}
/* A sublayer's residual: res (post-norm: LN's input; pre-norm: the stream)
 * and mean/rstd kept, ln = where its LayerNorm output goes (kept only when
 * own_ln: the pre-norm final LayerNorms). */
static void plan_residual(Planner *pl, Residual *r, size_t n, int D, float *ln, int own_ln) {
    r->res = own_ln ? NULL : take_acts(pl, n * D);
    r->ln = own_ln ? take_acts(pl, n * D) : ln;
    r->mean = take_acts(pl, n); r->rstd = take_acts(pl, n);
}
/* rc (recompute): what is not kept (all but self-attention's k, v) plan
 * sets to the remade ones in `shared` */
static void plan_attention(Planner *pl, AttnActs *a, int B, int H, int Tq, int Tk, int D, int rc, int cross) {
    size_t nq = (size_t)B * Tq, nk = (size_t)B * Tk;
    *a = (AttnActs){0};
    if (!rc) {
        a->q = take_acts(pl, nq * D); a->ctx = take_acts(pl, nq * D); a->probs = take_acts(pl, (size_t)B * H * Tq * Tk);
    }
    if (!rc || !cross) { a->k = take_acts(pl, nk * D); a->v = take_acts(pl, nk * D); }
}

static size_t plan(const ModelDims *d, ModelActivations *a, float *base, int B, int S, int T, int rc, int twin) {
    Planner pl = {base, 0};
    int D = d->d_model, F = d->d_ff, H = d->heads, pre = d->pre_norm, Tm = S > T ? S : T;
    size_t ns = (size_t)B * S, nt = (size_t)B * T, nmax = ns > nt ? ns : nt;
    a->ln2[0] = take_acts(&pl, nmax * D); a->ln2[1] = take_acts(&pl, nmax * D);
    /* post-norm: a sublayer's output is the next one's input, so LN outputs
     * alternate between the two buffers (k counts the sublayers); pre-norm:
     * LN(x) only feeds its own sublayer, one buffer */
    int k = 0;
#define LN_OUT() (pre ? a->ln2[0] : a->ln2[k++ % 2])
    a->enc_x = take_acts(&pl, ns * D);
    a->mem = !pre ? take_acts(&pl, ns * D) : NULL;
    for (int l = 0; l < d->enc_layers; l++) {
        EncoderLayerActs *e = &a->enc[l];
        plan_attention(&pl, &e->att, B, H, S, S, D, rc, 0); plan_residual(&pl, &e->r1, ns, D, LN_OUT(), 0);
        e->h = rc ? NULL : take_acts(&pl, ns * F); plan_residual(&pl, &e->r2, ns, D, LN_OUT(), 0);
    }
    if (a->mem) a->enc[d->enc_layers - 1].r2.ln = a->mem;
    a->dec_x = take_acts(&pl, nt * D);
    for (int l = 0; l < d->dec_layers; l++) {
        DecoderLayerActs *e = &a->dec[l];
        plan_attention(&pl, &e->self, B, H, T, T, D, rc, 0); plan_residual(&pl, &e->r1, nt, D, LN_OUT(), 0);
        plan_attention(&pl, &e->cross, B, H, T, S, D, rc, 1); plan_residual(&pl, &e->r2, nt, D, LN_OUT(), 0);
        e->h = rc ? NULL : take_acts(&pl, nt * F); plan_residual(&pl, &e->r3, nt, D, LN_OUT(), 0);
    }
#undef LN_OUT
    if (pre) { plan_residual(&pl, &a->enc_final, ns, D, NULL, 1); plan_residual(&pl, &a->dec_final, nt, D, NULL, 1); }
    a->d_enc = take_acts(&pl, ns * D); a->d_dec = take_acts(&pl, nt * D);
    /* the output layer works on chunks of C target rows: logits for 32M
     * entries at most (128 MB) instead of [B*T, V]; ~900 rows at V = 37000,
     * enough for BLIS to run the [C, D] x [D, V] product at full speed */
    long C = (1L << 25) / d->vocab;
    if (C < 256) C = 256;
    if (C > (long)nt) C = (long)nt;
    a->C = (int)C;
    a->xc = take_acts(&pl, (size_t)C * D); a->dxc = take_acts(&pl, (size_t)C * D);
    a->ln16 = twin ? (uint16_t *)take_acts(&pl, (nmax * D + 1) / 2) : NULL;
    a->mem16 = twin ? (uint16_t *)take_acts(&pl, (ns * D + 1) / 2) : NULL;
    /* `shared`: the logits, or the scratch of one sublayer's forward or
     * backward: s_o, s_a, s_x16 [nmax, D] (and the twins x16h, o16), then either an FFN's gradient dh
     * (s_h) [nmax, F] (and its twin h16; with rc its remade h), or an attention's gradients
     * s_ctx, s_q, s_k, s_v [nmax, D] (and the twins q16, k16, v16; with rc its remade q, ctx [nmax, D],
     * k, v [n_s, D], probs [B, H, Tm, Tm]) */
    Planner sh = {pl.base ? pl.base + pl.used : NULL, 0};
    a->logits = take_acts(&sh, (size_t)C * d->vocab);
    a->logits16 = twin ? (uint16_t *)take_acts(&sh, ((size_t)C * d->vocab + 1) / 2) : NULL;
    size_t logits = sh.used;
    sh.used = 0;
    a->s_o = take_acts(&sh, nmax * D); a->s_a = take_acts(&sh, nmax * D);
    a->s_x16 = take_acts(&sh, nmax * D);
    a->x16h = twin && !pre ? (uint16_t *)take_acts(&sh, (nmax * D + 1) / 2) : NULL;
    a->o16 = twin ? (uint16_t *)take_acts(&sh, (nmax * D + 1) / 2) : NULL;
    size_t at = sh.used;
    a->s_h = take_acts(&sh, nmax * F);
    a->h16 = twin ? (uint16_t *)take_acts(&sh, (nmax * F + 1) / 2) : NULL;
    float *h = rc ? take_acts(&sh, nmax * F) : NULL;
    size_t ffn = sh.used;
    sh.used = at;
    a->s_ctx = take_acts(&sh, nmax * D); a->s_q = take_acts(&sh, nmax * D);
    a->s_k = take_acts(&sh, nmax * D); a->s_v = take_acts(&sh, nmax * D);
    a->q16 = twin ? (uint16_t *)take_acts(&sh, (nmax * D + 1) / 2) : NULL;
    a->k16 = twin ? (uint16_t *)take_acts(&sh, (nmax * D + 1) / 2) : NULL;
    a->v16 = twin ? (uint16_t *)take_acts(&sh, (nmax * D + 1) / 2) : NULL;
    AttnActs r = {0};
    if (rc)
        r = (AttnActs){take_acts(&sh, nmax * D), take_acts(&sh, ns * D), take_acts(&sh, ns * D),
                       take_acts(&sh, nmax * D), take_acts(&sh, (size_t)B * H * Tm * Tm)};
    if (sh.used < ffn) sh.used = ffn;
    if (rc) {   /* what the backward remakes: h; q, ctx, probs; cross-attention's k, v too */
        for (int l = 0; l < d->enc_layers; l++) {
            EncoderLayerActs *e = &a->enc[l];
            e->h = h; e->att.q = r.q; e->att.ctx = r.ctx; e->att.probs = r.probs;
        }
        for (int l = 0; l < d->dec_layers; l++) {
            DecoderLayerActs *e = &a->dec[l];
            e->h = h; e->self.q = r.q; e->self.ctx = r.ctx; e->self.probs = r.probs;
            e->cross = r;
        }
    }
    return pl.used + (sh.used > logits ? sh.used : logits);
}

/* Point the activations at a buffer big enough for (B, S, T). */
static void acts_prepare(Model *m, int B, int S, int T) {
    ModelActivations *a = m->acts;
    if (!a) {
        a = m->acts = xcalloc(1, sizeof *a);
        a->enc = xcalloc((size_t)m->dims.enc_layers, sizeof *a->enc);
        a->dec = xcalloc((size_t)m->dims.dec_layers, sizeof *a->dec);
    }
    int rc = m->recompute != 0, twin = m->bf16 && bf16_route() == BF16_ONEDNN;
    if (a->buf && a->B == B && a->S == S && a->T == T && a->rc == rc && a->twin == twin) return;
    size_t need = plan(&m->dims, a, NULL, B, S, T, rc, twin);
    if (need > a->cap) { free(a->buf); a->buf = xaligned(need * sizeof(float)); a->cap = need; }
    plan(&m->dims, a, a->buf, B, S, T, rc, twin);
    int ni = 2 * B * T + a->C;
    if (ni > a->icap) { free(a->ibuf); a->ibuf = xmalloc((size_t)ni * sizeof(int)); a->icap = ni; }
    a->rows = a->ibuf; a->tgt_flat = a->ibuf + (size_t)B * T; a->tc = a->tgt_flat + (size_t)B * T;
    a->B = B; a->S = S; a->T = T; a->rc = rc; a->twin = twin;
}

/* ======================================================================
 * Forward pass
 * ====================================================================== */
typedef struct {          /* what one call needs besides the model */
    const Batch *b;
    uint64_t seed;        /* base of the dropout masks of this call */
    float p_drop, p_attn, p_relu;
} Pass;

/* The seed of dropout site `site` (one per dropout in the network), so that
 * backward regenerates each mask from (pass seed, site) alone. */
enum { SITE_EMB, SITE_ATT1, SITE_RES1, SITE_ATT2, SITE_RES2, SITE_RELU, SITE_RES3, SITES };
static uint64_t site_seed(const Pass *ps, int decoder, int layer, int site) {
    uint64_t z = ps->seed + 0x9E3779B97F4A7C15ULL * (uint64_t)(((decoder * 4096 + layer + 1) * SITES) + site);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

/* bf16 on the oneDNN route: the 16-bit twin of p, a buffer that two or
 * more products read (ModelActivations.ln16, mem16, x16h: a sublayer's
 * inputs; o16, h16, q16, k16, v16: the output gradients s_o, s_h, s_q, s_k, s_v), which its producer
 * writes beside the floats; NULL for any other buffer or route. lend()
 * registers it for the products that read p's first count floats (gemm_dnnl_shadow:
 * they read it instead of converting p), unlend() withdraws it: only while
 * nothing rewrites p. */
static uint16_t *twin16(const Model *m, const float *p) {
    const ModelActivations *a = m->acts;
    if (!a->twin) return NULL;
    if (p == a->s_o) return a->o16;
    if (p == a->s_h) return a->h16;
    if (p == a->s_q) return a->q16;
    if (p == a->s_k) return a->k16;
    if (p == a->s_v) return a->v16;
    if (p == a->ln2[0]) return a->ln16;
    if (m->dims.pre_norm) return p == a->enc_final.ln ? a->mem16 : NULL;
    return p == a->mem ? a->mem16 : p == a->s_x16 ? a->x16h : NULL;
}
static void lend(const Model *m, const float *p, size_t count) {
    uint16_t *h = twin16(m, p);
    if (h) gemm_dnnl_shadow(p, h, count);
}
static void unlend(const Model *m, const float *p) {
    if (twin16(m, p)) gemm_dnnl_shadow(p, NULL, 0);
}

static const float *bf16_input(const Model *m, const float *x, int n, float *buf);
/* What the sublayer's products read: pre-norm LN(x) (bf16: written rounded,
 * and its twin); post-norm x itself (bf16: a rounded copy, bf16_input) */
static const float *sublayer_in(const Model *m, Residual *r, const LayerNormParams *ln, const float *x, int n) {
    if (!m->dims.pre_norm) return bf16_input(m, x, n, m->acts->s_x16);
    PROF(PROF_NORM, 0, 2 * ROWS_B(n, m->dims.d_model),
         layernorm_forward(r->ln, r->mean, r->rstd, x, ln->w, ln->b, n, m->dims.d_model, m->bf16, twin16(m, r->ln)));
    return r->ln;
}
/* res = x + dropout(f); post-norm: out = LN(res). Returns the new stream
 * (post-norm bf16: the encoder output, which only products read, written
 * rounded, with its twin). */
static const float *sublayer_out(const Model *m, Residual *r, const LayerNormParams *ln, const float *x,
                                 const float *f, int n, float p, uint64_t seed) {
    int D = m->dims.d_model;
    if (m->dims.pre_norm) {
        PROF(PROF_NORM, 0, 3 * ROWS_B(n, D), residual_dropout(r->res, x, f, (size_t)n * D, p, seed));
        return r->res;
    }
    int held = m->bf16 && r->ln == m->acts->mem;
    PROF(PROF_NORM, 0, 4 * ROWS_B(n, D),   /* residual_dropout + layernorm_forward, fused */
         residual_dropout_layernorm(r->res, r->ln, r->mean, r->rstd, x, f, ln->w, ln->b, n, D, p, seed, held,
                                    held ? twin16(m, r->ln) : NULL));
    return r->ln;
}

/* Multi-head attention (section 3.2.2): out = Concat(heads) W^O, each head
 * softmax(Q K^T / sqrt(d_k)) V with Q = xq W^Q, K = xkv W^K, V = xkv W^V. */
/* The pieces the backward remakes (recompute), called by the forward and by
 * the backward alike: q = xq W^Q, k, v = xkv W^K, xkv W^V (+ biases); the
 * attention core ctx, probs from q, k, v; the FFN's h. */
/* bf16: x [n, D] rounded into buf (and its twin), once for all the products
 * that read it (Q, K, V or W1: LINEAR_BF16_X_HELD), instead of by each of
 * them; fp32: x itself. The sublayers take their inputs as their products
 * read them (bf16: rounded). Pre-norm every one of them is a LayerNorm's
 * output (and the encoder output the final one's), written rounded by the
 * LayerNorm's own pass, forward and remade (sublayer_in, f_in, the final
 * LayerNorms). Post-norm the forward's sublayer input is the residual
 * stream, kept in fp32: the copy is made here (sublayer_in); the encoder
 * output is written rounded by its LayerNorm (sublayer_out: nothing but
 * products reads it), and the backward's stream, remade, written rounded by
 * the pass that remakes it (stream_in), as the products alone read it
 * there. */
static const float *bf16_input(const Model *m, const float *x, int n, float *buf) {
    if (!m->bf16) return x;
    int D = m->dims.d_model;
    uint16_t *h = twin16(m, buf);
    if (h) PROF(PROF_BF16, 0, 2.5 * ROWS_B(n, D), bf16_round_twin(buf, h, x, (size_t)n * D));
    else PROF(PROF_BF16, 0, 2 * ROWS_B(n, D), bf16_round_matrix(buf, D, x, D, n, D));
    return buf;
}
#define X_HELD(m) ((m)->bf16 ? LINEAR_BF16_X_HELD : 0)

/* Where the attention core's bf16 operands are floats (ops.h
 * attention_core16: off the oneDNN and AMX routes), q, k, v (forward) and
 * dO (backward) are written rounded by their products' pieces
 * (LINEAR_ROUND_OUT), once for the core's forward and backward
 * (AttnShape.held); on those two, the core makes 16-bit copies anyway. */
static int core_held(const Model *m) { return m->bf16 && !attention_core16(); }
#define CORE_IN(m) (core_held(m) ? LINEAR_ROUND_OUT : 0)

/* Q, K, V from their inputs as bf16_input gave them */
static void attention_q(const Model *m, const AttentionParams *p, const AttnActs *a, const float *xq, int nq) {
    int D = m->dims.d_model, how = X_HELD(m) | CORE_IN(m);
    PROF(PROF_ATT_PROJ, LIN_FWD(nq, D, D), 0, linear_forward(a->q, xq, W(m, p->q_w), p->q_b, nq, D, D, how));
}
static void attention_kv(const Model *m, const AttentionParams *p, const AttnActs *a, const float *xkv, int nk) {
    int D = m->dims.d_model, how = X_HELD(m) | CORE_IN(m);
    PROF(PROF_ATT_PROJ, LIN_FWD(2.0 * nk, D, D), 0,
         linear_forward(a->k, xkv, W(m, p->k_w), p->k_b, nk, D, D, how);
         linear_forward(a->v, xkv, W(m, p->v_w), p->v_b, nk, D, D, how));
}
/* ctx, probs from q, k, v (bf16: ctx comes rounded, AttnShape.bf16, as W^O's
 * products read it forward and backward) */
static void attention_core(const Model *m, const AttnActs *a, const AttnShape *sh) {
    int D = m->dims.d_model;
    PROF(PROF_ATT_CORE, 4.0 * sh->B * sh->Tq * sh->Tk * D, 0,
         attention_forward(seq_view(a->ctx, sh->Tq, D), seq_view(a->q, sh->Tq, D),
                           seq_view(a->k, sh->Tk, D), seq_view(a->v, sh->Tk, D), a->probs, sh));
}
/* bf16 on the oneDNN route: the 16 bits of the FFN hidden h that ffn_hidden
 * has just made (the scratch twin of s_h, which the FFN's backward rewrites
 * later), lent to fc2's products that read h right after it; else NULL. h
 * itself is kept per layer, its twin is not: without recompute fc2's
 * backward converts h again. */
static uint16_t *hidden16(const Model *m) { return m->acts->twin ? m->acts->h16 : NULL; }

/* h = dropout(ReLU(x W1^T + b1)) [n, F], x as bf16_input gave it */
static void ffn_hidden(const Model *m, const FeedForwardParams *p, float *h, const float *x, int n, float p_relu,
                       uint64_t seed) {
    int D = m->dims.d_model, F = m->dims.d_ff;
    PROF(PROF_FFN, LIN_FWD(n, D, F), 0, linear_forward(h, x, W(m, p->fc1_w), p->fc1_b, n, D, F, X_HELD(m)));
    /* bf16: h written rounded, as fc2's products read it (no pass of their own; on the oneDNN route its 16
     * bits too, hidden16) */
    PROF(PROF_NORM, 0, 2 * ROWS_B(n, F), relu_dropout_forward(h, (size_t)n * F, p_relu, seed, m->bf16, hidden16(m)));
}

static void attention_sublayer(const Model *m, const AttentionParams *p, AttnActs *a,
                               const float *xq, const float *xkv, const AttnShape *sh, float *out) {
    int D = m->dims.d_model, nq = sh->B * sh->Tq, nk = sh->B * sh->Tk;
    const float *rq = xq, *rkv = xkv;   /* as the products read them (bf16_input) */
    lend(m, rq, (size_t)nq * D);
    if (rkv != rq) lend(m, rkv, (size_t)nk * D);
    attention_q(m, p, a, rq, nq);
    attention_kv(m, p, a, rkv, nk);
    unlend(m, rq);
    if (rkv != rq) unlend(m, rkv);
    attention_core(m, a, sh);
    PROF(PROF_ATT_PROJ, LIN_FWD(nq, D, D), 0,
         linear_forward(out, a->ctx, W(m, p->o_w), p->o_b, nq, D, D, X_HELD(m)));
}

/* FFN (section 3.3): out = dropout(ReLU(x W1^T + b1)) W2^T + b2. */
static void ffn_sublayer(const Model *m, const FeedForwardParams *p, float *h, const float *x, int n,
                         float p_relu, uint64_t seed, float *out) {
    int D = m->dims.d_model, F = m->dims.d_ff;
    const float *rx = x;   /* as the products read it (bf16_input) */
    lend(m, rx, (size_t)n * D);
    ffn_hidden(m, p, h, rx, n, p_relu, seed);
    unlend(m, rx);
    uint16_t *h16 = hidden16(m);
    if (h16) gemm_dnnl_shadow(h, h16, (size_t)n * F);
    PROF(PROF_FFN, LIN_FWD(n, F, D), 0,
         linear_forward(out, h, W(m, p->fc2_w), p->fc2_b, n, F, D, X_HELD(m)));
    if (h16) gemm_dnnl_shadow(h, NULL, 0);
}

static AttnShape shape_of(const Model *m, const Pass *ps, int Tq, int Tk, const int *k_len, int causal, uint64_t seed) {
    AttnShape sh = {.B = ps->b->B, .H = m->dims.heads, .Tq = Tq, .Tk = Tk, .Dk = m->dims.d_model / m->dims.heads,
                    .k_len = k_len, .causal = causal, .q_pos0 = 0, .dropout = ps->p_attn, .seed = seed, .bf16 = m->bf16,
                    .held = core_held(m)};
    return sh;
}

/* The encoder output (the last layer's stream, or its final LN), as the
 * decoder's products read it (bf16: written rounded). [model]
 * encoder_layers is at least 1 (config.c, model_dims_check). */
static const float *encoder_out(const Model *m) {
    const ModelActivations *a = m->acts;
    if (m->dims.pre_norm) return a->enc_final.ln;
    ASSERT(m->dims.enc_layers > 0 && a->mem == a->enc[m->dims.enc_layers - 1].r2.ln);
    return a->mem;
}
static const float *decoder_out(const Model *m) {
    const ModelActivations *a = m->acts;
    return m->dims.pre_norm ? a->dec_final.ln : a->dec[m->dims.dec_layers - 1].r3.ln;
}

static void forward(Model *m, const Pass *ps) {
    ModelActivations *a = m->acts;
    const Batch *b = ps->b;
    const ModelDims *d = &m->dims;
    int B = b->B, S = b->S, T = b->T, D = d->d_model, ns = B * S, nt = B * T;

    /* encoder: x = dropout(E[src] sqrt(D) + PE), then N layers */
    PROF(PROF_EMBED, 0, 3 * ROWS_B(ns, D), embedding_forward(a->enc_x, b->src, ns, S, 0, m->p.embed, m->pos_enc, D));
    PROF(PROF_NORM, 0, 2 * ROWS_B(ns, D), dropout(a->enc_x, a->enc_x, (size_t)ns * D, ps->p_drop, site_seed(ps, 0, -1, SITE_EMB), 0, NULL));
    const float *x = a->enc_x;
    for (int l = 0; l < d->enc_layers; l++) {
        const EncoderLayerParams *p = &m->p.enc[l];
        EncoderLayerActs *e = &a->enc[l];
        AttnShape sh = shape_of(m, ps, S, S, b->src_len, 0, site_seed(ps, 0, l, SITE_ATT1));
        const float *in = sublayer_in(m, &e->r1, &p->self_attn_ln, x, ns);
        attention_sublayer(m, &p->self_attn, &e->att, in, in, &sh, a->s_o);
        x = sublayer_out(m, &e->r1, &p->self_attn_ln, x, a->s_o, ns, ps->p_drop, site_seed(ps, 0, l, SITE_RES1));
        in = sublayer_in(m, &e->r2, &p->final_ln, x, ns);
        ffn_sublayer(m, &p->ffn, e->h, in, ns, ps->p_relu, site_seed(ps, 0, l, SITE_RELU), a->s_o);
        x = sublayer_out(m, &e->r2, &p->final_ln, x, a->s_o, ns, ps->p_drop, site_seed(ps, 0, l, SITE_RES2));
    }
    if (d->pre_norm)
        PROF(PROF_NORM, 0, 2 * ROWS_B(ns, D),
             layernorm_forward(a->enc_final.ln, a->enc_final.mean, a->enc_final.rstd, x, m->p.enc_ln.w, m->p.enc_ln.b, ns, D,
                               m->bf16, twin16(m, a->enc_final.ln)));
    const float *mem = encoder_out(m);

    /* decoder: same input path on the shifted target, then N layers */
    PROF(PROF_EMBED, 0, 3 * ROWS_B(nt, D), embedding_forward(a->dec_x, b->tgt_in, nt, T, 0, m->p.embed, m->pos_enc, D));
    PROF(PROF_NORM, 0, 2 * ROWS_B(nt, D), dropout(a->dec_x, a->dec_x, (size_t)nt * D, ps->p_drop, site_seed(ps, 1, -1, SITE_EMB), 0, NULL));
    x = a->dec_x;
    for (int l = 0; l < d->dec_layers; l++) {
        const DecoderLayerParams *p = &m->p.dec[l];
        DecoderLayerActs *e = &a->dec[l];
        AttnShape sh = shape_of(m, ps, T, T, NULL, 1, site_seed(ps, 1, l, SITE_ATT1));
        const float *in = sublayer_in(m, &e->r1, &p->self_attn_ln, x, nt);
        attention_sublayer(m, &p->self_attn, &e->self, in, in, &sh, a->s_o);
        x = sublayer_out(m, &e->r1, &p->self_attn_ln, x, a->s_o, nt, ps->p_drop, site_seed(ps, 1, l, SITE_RES1));
        sh = shape_of(m, ps, T, S, b->src_len, 0, site_seed(ps, 1, l, SITE_ATT2));
        in = sublayer_in(m, &e->r2, &p->encoder_attn_ln, x, nt);
        attention_sublayer(m, &p->encoder_attn, &e->cross, in, mem, &sh, a->s_o);
        x = sublayer_out(m, &e->r2, &p->encoder_attn_ln, x, a->s_o, nt, ps->p_drop, site_seed(ps, 1, l, SITE_RES2));
        in = sublayer_in(m, &e->r3, &p->final_ln, x, nt);
        ffn_sublayer(m, &p->ffn, e->h, in, nt, ps->p_relu, site_seed(ps, 1, l, SITE_RELU), a->s_o);
        x = sublayer_out(m, &e->r3, &p->final_ln, x, a->s_o, nt, ps->p_drop, site_seed(ps, 1, l, SITE_RES3));
    }
    if (d->pre_norm)
        PROF(PROF_NORM, 0, 2 * ROWS_B(nt, D),
             layernorm_forward(a->dec_final.ln, a->dec_final.mean, a->dec_final.rstd, x, m->p.dec_ln.w, m->p.dec_ln.b, nt, D,
                               m->bf16, NULL));
}

/* Output layer (section 3.4): logits = y E^T with the shared embedding E,
 * softmax, label-smoothed cross-entropy; only the real (non-pad) target
 * rows, gathered C at a time. With grad_scale != 0 also the backward:
 * d_y (a->d_dec, 0 at pads) and dE += dlogits^T y. */
static void output_layer(Model *m, const Pass *ps, float grad_scale, LossStats *st, float *logprob) {
    ModelActivations *a = m->acts;
    const Batch *b = ps->b;
    int D = m->dims.d_model, V = m->dims.vocab, T = b->T, n = 0;
    const float *y = decoder_out(m);
    for (int i = 0; i < b->B; i++)
        for (int t = 0; t < b->tgt_len[i]; t++) a->rows[n++] = i * T + t;
    if (grad_scale != 0.0f) memset(a->d_dec, 0, (size_t)b->B * T * D * sizeof(float));
    double loss = 0.0, nll = 0.0;
    for (int c0 = 0; c0 < n; c0 += a->C) {
        int c = n - c0 < a->C ? n - c0 : a->C;
        for (int r = 0; r < c; r++) {   /* bf16: rounded as they are gathered, as the products read them */
            int row = a->rows[c0 + r];
            float *xr = a->xc + (size_t)r * D;
            const float *yr = y + (size_t)row * D;
            if (m->bf16) for (int j = 0; j < D; j++) xr[j] = bf16_round(yr[j]);
            else memcpy(xr, yr, (size_t)D * sizeof(float));
            a->tc[r] = b->tgt_out[row];
        }
        int held = m->bf16 ? GEMM_BF16_HELD : 0;   /* y rows and dlogits: written rounded, E the model's bf16 */
        Gemm lg = {0, 1, c, V, D, 1.0f, a->xc, D, W(m, m->p.embed), D, 0.0f, a->logits, V, held, NULL, 0};
        PROF(PROF_OUT_PROD, LIN_FWD(c, D, V), 0, gemm_many(&lg, 1));
        float *lp = logprob ? a->dxc : NULL;   /* dxc is free until the backward below */
        uint16_t *d16 = grad_scale != 0.0f ? a->logits16 : NULL;
        PROF(PROF_OUT_LOSS, 0, (grad_scale != 0.0f ? 2 : 1) * ROWS_B(c, V) + (d16 ? ROWS_B(c, V) / 2 : 0),
             cross_entropy_forward_backward(a->logits, a->tc, c, V, m->dims.label_smoothing, grad_scale, &loss, &nll, lp,
                                            m->bf16, d16));
        if (logprob)
            for (int r = 0; r < c; r++) logprob[a->rows[c0 + r]] = lp[r];
        if (grad_scale == 0.0f) continue;
        Gemm g[2] = {{0, 0, c, D, V, 1.0f, a->logits, V, W(m, m->p.embed), D, 0.0f, a->dxc, D, held, NULL, 0},   /* dy = dlogits E */
                     {1, 0, V, D, c, 1.0f, a->logits, V, a->xc, D, 1.0f, m->g.embed, D, held, NULL, 0}};  /* dE += dlogits^T y */
        /* one after the other, each cut over all the threads: side by side, one
         * thread each, the thread with dy waited for dE's (fp32, Multi30k shape,
         * AMD Zen 5: 22 against 28 ms a step; the output layer's products 1.07x
         * faster apart at that shape, 1.03x at the base model's; bf16 1.07x and
         * 1.00x) */
        if (d16) gemm_dnnl_shadow(a->logits, d16, (size_t)c * V);   /* lent for these two products only */
        PROF(PROF_OUT_PROD, LIN_BWD(c, D, V), 0, gemm_many(g, 1); gemm_many(g + 1, 1));
        if (d16) gemm_dnnl_shadow(a->logits, NULL, 0);
        for (int r = 0; r < c; r++)
            memcpy(a->d_dec + (size_t)a->rows[c0 + r] * D, a->dxc + (size_t)r * D, (size_t)D * sizeof(float));
    }
    st->loss += loss;
    st->nll += nll;
    st->tokens += n;
}

/* ======================================================================
 * Backward pass: the forward in reverse. `dx` is the gradient of the
 * residual stream, updated in place from the top of the stack down.
 * ====================================================================== */

/* Backward of an attention sublayer given dout = d(its output) [nq, D]:
 * parameter gradients, dxq (+)= d(query input), dxkv += d(key/value input).
 * For self-attention xq == xkv and dxq == dxkv. */
static void attention_sublayer_backward(Model *m, const AttentionParams *p, AttentionParams *g, const AttnActs *a,
                                        const float *xq, const float *xkv, const AttnShape *sh, float *dout,
                                        float *dxq, int accumulate_q, float *dxkv) {
    ModelActivations *s = m->acts;
    int D = m->dims.d_model, nq = sh->B * sh->Tq, nk = sh->B * sh->Tk;
    const float *rq = xq, *rkv = xkv;   /* as the products read them (bf16_input) */
    lend(m, rq, (size_t)nq * D);
    if (rkv != rq) lend(m, rkv, (size_t)nk * D);
    if (m->recompute) {   /* remade as the forward made them (cross-attention, xq != xkv: k, v too) */
        attention_q(m, p, a, rq, nq);
        if (xq != xkv) attention_kv(m, p, a, rkv, nk);
        attention_core(m, a, sh);
    }
    lend(m, dout, (size_t)nq * D);
    PROF(PROF_ATT_PROJ, LIN_BWD(nq, D, D), 0,
         linear_backward(s->s_ctx, g->o_w, g->o_b, dout, a->ctx, W(m, p->o_w), nq, D, D, 0, X_HELD(m) | CORE_IN(m)));
    unlend(m, dout);
    AttnShape shb = *sh;   /* dq, dk, dv with their twins, lent to the projections' products */
    float *dqkv[3] = {s->s_q, s->s_k, s->s_v};
    for (int o = 0; o < 3; o++) shb.d16[o] = twin16(m, dqkv[o]);
    PROF(PROF_ATT_CORE, 8.0 * sh->B * sh->Tq * sh->Tk * D, 0,
         attention_backward(seq_view(s->s_q, sh->Tq, D), seq_view(s->s_k, sh->Tk, D), seq_view(s->s_v, sh->Tk, D),
                            seq_view(s->s_ctx, sh->Tq, D), seq_view(a->q, sh->Tq, D), seq_view(a->k, sh->Tk, D),
                            seq_view(a->v, sh->Tk, D), a->probs, &shb));
    for (int o = 0; o < 3; o++) lend(m, dqkv[o], (size_t)(o ? nk : nq) * D);
    PROF(PROF_ATT_PROJ, LIN_BWD(nq + 2.0 * nk, D, D), 0,
         linear_backward(dxq, g->q_w, g->q_b, s->s_q, rq, W(m, p->q_w), nq, D, D, accumulate_q, X_HELD(m));
         linear_backward(dxkv, g->k_w, g->k_b, s->s_k, rkv, W(m, p->k_w), nk, D, D, 1, X_HELD(m));
         linear_backward(dxkv, g->v_w, g->v_b, s->s_v, rkv, W(m, p->v_w), nk, D, D, 1, X_HELD(m)));
    for (int o = 0; o < 3; o++) unlend(m, dqkv[o]);
    unlend(m, rq);
    if (rkv != rq) unlend(m, rkv);
}

static void ffn_sublayer_backward(Model *m, const FeedForwardParams *p, FeedForwardParams *g, float *h,
                                  const float *x, int n, float p_relu, uint64_t seed, float *dout, float *dx,
                                  int accumulate) {
    ModelActivations *s = m->acts;
    int D = m->dims.d_model, F = m->dims.d_ff;
    const float *rx = x;   /* as the products read it (bf16_input) */
    lend(m, rx, (size_t)n * D);
    if (m->recompute) ffn_hidden(m, p, h, rx, n, p_relu, seed);
    uint16_t *h16 = m->recompute ? hidden16(m) : NULL;   /* h's twin: only where h was made just now */
    if (h16) gemm_dnnl_shadow(h, h16, (size_t)n * F);
    lend(m, dout, (size_t)n * D);
    PROF(PROF_FFN, LIN_BWD(n, F, D), 0,
         linear_backward(s->s_h, g->fc2_w, g->fc2_b, dout, h, W(m, p->fc2_w), n, F, D, 0, X_HELD(m)));
    unlend(m, dout);
    if (h16) gemm_dnnl_shadow(h, NULL, 0);
    PROF(PROF_NORM, 0, 3 * ROWS_B(n, F),
         relu_dropout_backward(s->s_h, s->s_h, h, (size_t)n * F, p_relu, m->bf16, twin16(m, s->s_h)));
    lend(m, s->s_h, (size_t)n * F);
    PROF(PROF_FFN, LIN_BWD(n, D, F), 0, linear_backward(dx, g->fc1_w, g->fc1_b, s->s_h, rx, W(m, p->fc1_w), n, D, F, accumulate, X_HELD(m)));
    unlend(m, s->s_h);
    unlend(m, rx);
}

/* The two halves of a sublayer's backward around f's backward:
 *   sublayer_grad_out: from d(stream out) in dx, d(f output) into s_o
 *     (post-norm first turns dx into d(res) through the LayerNorm; bf16:
 *     s_o written rounded, as f's first linear_backward takes its dy);
 *   then f's backward writes d(f input) into dest (post-norm: dx itself,
 *     accumulated onto the residual path; pre-norm: s_a, then
 *   sublayer_grad_in adds LayerNorm's backward of it into dx). */
static float *sublayer_grad_out(Model *m, const Residual *r, const LayerNormParams *ln, LayerNormParams *gln,
                                float *dx, int n, float p, uint64_t seed, const LayerNormRemake *also) {
    int D = m->dims.d_model;
    if (!m->dims.pre_norm)   /* layernorm_backward + dropout (+ the stream below remade), fused */
        PROF(PROF_NORM, 0, (also->y ? 6 : 4) * ROWS_B(n, D),
             layernorm_backward_dropout(dx, gln->w, gln->b, dx, r->res, r->mean, r->rstd, ln->w, n, D, m->acts->s_o, p, seed,
                                        m->bf16, twin16(m, m->acts->s_o), also));
    else
        PROF(PROF_NORM, 0, 2 * ROWS_B(n, D),
             dropout(m->acts->s_o, dx, (size_t)n * D, p, seed, m->bf16, twin16(m, m->acts->s_o)));
    return m->acts->s_o;
}
static void sublayer_grad_in(Model *m, const Residual *r, const LayerNormParams *ln, LayerNormParams *gln,
                             const float *x, float *dx, int n) {
    if (m->dims.pre_norm)
        PROF(PROF_NORM, 0, 4 * ROWS_B(n, m->dims.d_model),
             layernorm_backward(dx, gln->w, gln->b, m->acts->s_a, x, r->mean, r->rstd, ln->w, n, m->dims.d_model, 1));
}

/* The stream entering a sublayer, given the sublayer before it in the stack
 * (prev, with its LayerNorm; NULL: the first, whose stream is the embeddings
 * emb [n, D]): pre-norm prev->res, kept; post-norm LN(prev->res), to be
 * remade into buf by the sublayer's sublayer_grad_out, in its pass (*rm says
 * what; its y is NULL when there is nothing to remake). Post-norm bf16: as
 * the sublayer's products read it, for they alone read it in the backward:
 * remade rounded, with its twin, or emb rounded into buf (bf16_input). */
static const float *stream_in(const Model *m, const Residual *prev, const LayerNormParams *prev_ln, const float *emb,
                              int n, float *buf, LayerNormRemake *rm) {
    *rm = (LayerNormRemake){0};
    if (m->dims.pre_norm) return prev ? prev->res : emb;
    if (!prev) return bf16_input(m, emb, n, buf);
    *rm = (LayerNormRemake){buf, prev->res, prev->mean, prev->rstd, prev_ln->w, prev_ln->b, m->bf16, twin16(m, buf)};
    return buf;
}
/* What f of sublayer r read, given the stream x entering it: post-norm x;
 * pre-norm LN(x), remade into buf (bf16: rounded, as sublayer_in made it). */
static const float *f_in(Model *m, const Residual *r, const LayerNormParams *ln, const float *x, float *buf, int n) {
    if (!m->dims.pre_norm) return x;
    PROF(PROF_NORM, 0, 2 * ROWS_B(n, m->dims.d_model),
         layernorm_apply(buf, x, r->mean, r->rstd, ln->w, ln->b, n, m->dims.d_model, m->bf16, twin16(m, buf)));
    return buf;
}

static void backward(Model *m, const Pass *ps) {
    ModelActivations *a = m->acts;
    const Batch *b = ps->b;
    const ModelDims *d = &m->dims;
    int B = b->B, S = b->S, T = b->T, D = d->d_model, ns = B * S, nt = B * T, pre = d->pre_norm;
    float *dest;

    /* decoder, top down; a->d_dec holds d(decoder output) */
    float *dx = a->d_dec;
    if (pre) {
        const float *x = a->dec[d->dec_layers - 1].r3.res;
        layernorm_backward(dx, m->g.dec_ln.w, m->g.dec_ln.b, dx, x, a->dec_final.mean, a->dec_final.rstd,
                           m->p.dec_ln.w, nt, D, 0);
    }
    memset(a->d_enc, 0, (size_t)ns * D * sizeof(float));   /* d(encoder output), summed over layers */
    const float *mem = encoder_out(m);
    float *buf = a->ln2[0];   /* free since the output layer: the remade LayerNorm outputs */
    for (int l = d->dec_layers - 1; l >= 0; l--) {
        const DecoderLayerParams *p = &m->p.dec[l];
        DecoderLayerParams *g = &m->g.dec[l];
        const DecoderLayerActs *e = &a->dec[l];
        dest = pre ? a->s_a : dx;
        /* FFN; x2 = the stream entering it */
        LayerNormRemake rm;
        const float *x2 = stream_in(m, &e->r2, &p->encoder_attn_ln, NULL, nt, buf, &rm);
        float *df = sublayer_grad_out(m, &e->r3, &p->final_ln, &g->final_ln, dx, nt, ps->p_drop, site_seed(ps, 1, l, SITE_RES3), &rm);
        ffn_sublayer_backward(m, &p->ffn, &g->ffn, e->h, f_in(m, &e->r3, &p->final_ln, x2, buf, nt), nt, ps->p_relu,
                              site_seed(ps, 1, l, SITE_RELU), df, dest, !pre);
        sublayer_grad_in(m, &e->r3, &p->final_ln, &g->final_ln, x2, dx, nt);
        /* encoder-decoder attention: K, V from the encoder output */
        AttnShape sh = shape_of(m, ps, T, S, b->src_len, 0, site_seed(ps, 1, l, SITE_ATT2));
        const float *x1 = stream_in(m, &e->r1, &p->self_attn_ln, NULL, nt, buf, &rm);
        df = sublayer_grad_out(m, &e->r2, &p->encoder_attn_ln, &g->encoder_attn_ln, dx, nt, ps->p_drop, site_seed(ps, 1, l, SITE_RES2), &rm);
        attention_sublayer_backward(m, &p->encoder_attn, &g->encoder_attn, &e->cross, f_in(m, &e->r2, &p->encoder_attn_ln, x1, buf, nt),
                                    mem, &sh, df, dest, !pre, a->d_enc);
        sublayer_grad_in(m, &e->r2, &p->encoder_attn_ln, &g->encoder_attn_ln, x1, dx, nt);
        /* masked self-attention */
        sh = shape_of(m, ps, T, T, NULL, 1, site_seed(ps, 1, l, SITE_ATT1));
        const float *x0 = stream_in(m, l ? &a->dec[l - 1].r3 : NULL, l ? &m->p.dec[l - 1].final_ln : NULL, a->dec_x, nt, buf, &rm);
        df = sublayer_grad_out(m, &e->r1, &p->self_attn_ln, &g->self_attn_ln, dx, nt, ps->p_drop, site_seed(ps, 1, l, SITE_RES1), &rm);
        const float *in = f_in(m, &e->r1, &p->self_attn_ln, x0, buf, nt);
        attention_sublayer_backward(m, &p->self_attn, &g->self_attn, &e->self, in, in, &sh, df, dest, !pre, dest);
        sublayer_grad_in(m, &e->r1, &p->self_attn_ln, &g->self_attn_ln, x0, dx, nt);
    }
    /* decoder embedding: dropout, then dE[tgt_in] += sqrt(D) dx */
    PROF(PROF_NORM, 0, 2 * ROWS_B(nt, D), dropout(dx, dx, (size_t)nt * D, ps->p_drop, site_seed(ps, 1, -1, SITE_EMB), 0, NULL));
    PROF(PROF_EMBED, 0, 3 * ROWS_B(nt, D), embedding_backward(m->g.embed, dx, b->tgt_in, nt, D));

    /* encoder, top down; a->d_enc holds d(encoder output) */
    dx = a->d_enc;
    if (pre) {
        layernorm_backward(dx, m->g.enc_ln.w, m->g.enc_ln.b, dx, a->enc[d->enc_layers - 1].r2.res, a->enc_final.mean, a->enc_final.rstd,
                           m->p.enc_ln.w, ns, D, 0);
    }
    for (int l = d->enc_layers - 1; l >= 0; l--) {
        const EncoderLayerParams *p = &m->p.enc[l];
        EncoderLayerParams *g = &m->g.enc[l];
        const EncoderLayerActs *e = &a->enc[l];
        dest = pre ? a->s_a : dx;
        LayerNormRemake rm;
        const float *x1 = stream_in(m, &e->r1, &p->self_attn_ln, NULL, ns, buf, &rm);
        float *df = sublayer_grad_out(m, &e->r2, &p->final_ln, &g->final_ln, dx, ns, ps->p_drop, site_seed(ps, 0, l, SITE_RES2), &rm);
        ffn_sublayer_backward(m, &p->ffn, &g->ffn, e->h, f_in(m, &e->r2, &p->final_ln, x1, buf, ns), ns, ps->p_relu,
                              site_seed(ps, 0, l, SITE_RELU), df, dest, !pre);
        sublayer_grad_in(m, &e->r2, &p->final_ln, &g->final_ln, x1, dx, ns);
        AttnShape sh = shape_of(m, ps, S, S, b->src_len, 0, site_seed(ps, 0, l, SITE_ATT1));
        const float *x0 = stream_in(m, l ? &a->enc[l - 1].r2 : NULL, l ? &m->p.enc[l - 1].final_ln : NULL, a->enc_x, ns, buf, &rm);
        df = sublayer_grad_out(m, &e->r1, &p->self_attn_ln, &g->self_attn_ln, dx, ns, ps->p_drop, site_seed(ps, 0, l, SITE_RES1), &rm);
        const float *in = f_in(m, &e->r1, &p->self_attn_ln, x0, buf, ns);
        attention_sublayer_backward(m, &p->self_attn, &g->self_attn, &e->att, in, in, &sh, df, dest, !pre, dest);
        sublayer_grad_in(m, &e->r1, &p->self_attn_ln, &g->self_attn_ln, x0, dx, ns);
    }
    PROF(PROF_NORM, 0, 2 * ROWS_B(ns, D), dropout(dx, dx, (size_t)ns * D, ps->p_drop, site_seed(ps, 0, -1, SITE_EMB), 0, NULL));
    PROF(PROF_EMBED, 0, 3 * ROWS_B(ns, D), embedding_backward(m->g.embed, dx, b->src, ns, D));
}

/* ======================================================================
 * Entry points
 * ====================================================================== */
static int check_batch(const Model *m, const Batch *b) {
    const ModelDims *d = &m->dims;
    if (b->B < 1 || b->S < 1 || b->T < 1)
        return errorf("model: empty batch (B %d, S %d, T %d)", b->B, b->S, b->T);
    if (b->S > d->max_positions || b->T > d->max_positions)
        return errorf("model: batch of source length %d / target length %d exceeds max_positions %d",
                      b->S, b->T, d->max_positions);
    for (int i = 0; i < b->B; i++) {
        if (b->src_len[i] < 1 || b->src_len[i] > b->S || b->tgt_len[i] < 0 || b->tgt_len[i] > b->T)
            return errorf("model: sentence %d of the batch has lengths %d/%d outside 1..%d / 0..%d",
                          i, b->src_len[i], b->tgt_len[i], b->S, b->T);
    }
    for (long i = 0; i < (long)b->B * b->S; i++)
        if (b->src[i] < 0 || b->src[i] >= d->vocab) return errorf("model: source token %d out of vocabulary (%d)", b->src[i], d->vocab);
    for (long i = 0; i < (long)b->B * b->T; i++) {
        if (b->tgt_in[i] < 0 || b->tgt_in[i] >= d->vocab) return errorf("model: target input token %d out of vocabulary (%d)", b->tgt_in[i], d->vocab);
        if (i % b->T < b->tgt_len[i / b->T] && (b->tgt_out[i] < 0 || b->tgt_out[i] >= d->vocab))
            return errorf("model: target token %d out of vocabulary (%d)", b->tgt_out[i], d->vocab);
    }
    return 0;
}

static int run(Model *m, const Batch *b, Rng *rng, int training, float grad_scale, LossStats *stats, float *logprob) {
    if (check_batch(m, b)) return -1;
    if (training && !rng) return errorf("model: training (dropout) needs an RNG");
    if (grad_scale != 0.0f && !m->grads) return errorf("model: no gradient buffer (model_zero_grad makes it)");
    if (logprob) memset(logprob, 0, (size_t)b->B * b->T * sizeof *logprob);
    acts_prepare(m, b->B, b->S, b->T);
    round_params(m);
    Pass ps = {.b = b};
    if (training) {
        ps.seed = rng_u64(rng);
        ps.p_drop = m->dims.dropout;
        ps.p_attn = m->dims.attention_dropout;
        ps.p_relu = m->dims.relu_dropout;
    }
    LossStats st = {0};
    forward(m, &ps);
    output_layer(m, &ps, grad_scale, &st, logprob);
    if (grad_scale != 0.0f) backward(m, &ps);
    if (stats) { stats->loss += st.loss; stats->nll += st.nll; stats->tokens += st.tokens; }
    return 0;
}

int model_forward_backward(Model *m, const Batch *b, Rng *rng, int training, float grad_scale, LossStats *stats) {
    return run(m, b, rng, training, grad_scale, stats, NULL);
}

int model_forward(Model *m, const Batch *b, LossStats *stats) {
    return run(m, b, NULL, 0, 0.0f, stats, NULL);
}

int model_score(Model *m, const Batch *b, float *logprob) {
    return run(m, b, NULL, 0, 0.0f, NULL, logprob);
}
