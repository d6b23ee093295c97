/* decode.c — the Transformer as a step function for beam search: the
 * incremental decoder of paper section 6.1, and translating token sequences
 * and lines with it. See decode.h; the search itself is search.c, the
 * kernels ops_infer.c, `tfm translate` cli_translate.c.
 *
 * Layout of one decoding batch (B sentences, D = d_model, H heads of Dk):
 *   encoder      the source tokens of all sentences packed end to end, no
 *                padding: sentence s is rows src_off[s] .. + src_n[s] (its
 *                tokens and EOS) of every [Ntok, D] matrix;
 *   cross K/V    per decoder layer, the encoder output projected by W^K, W^V
 *                of that layer's encoder-decoder attention: [Ntok, D] each,
 *                computed once per batch;
 *   self K/V     per step t, one [n_t, D] block of keys and one of values per
 *                decoder layer for the n_t hypotheses live at step t. A step
 *                never copies a cache: hypothesis i at step t reads the keys
 *                of its ancestors through anc[i][j] = its ancestor's row at
 *                step j (hypotheses that share a prefix share its keys).
 *
 * Determinism: the output of a sentence must not depend on which sentences
 * share its batch or on the thread count. The products and row kernels are
 * ops.h's inference kernels, which compute each row the same way whatever
 * the other rows are; the loops here go row by row and never look at
 * padding (there is none).
 *
 * Threads: with several batches to decode, each thread decodes whole
 * batches with single-threaded kernels (no synchronisation inside a step,
 * which matters on a busy machine); a single batch shares its matrix
 * products and row loops among the threads instead.
 *
 * Vocabulary shortlist (shortlist.h): the search sees a batch's candidates
 * as its columns; each sentence's rows are scored by an output layer of its
 * own candidates' rows of E (decoder_shortlist, the end of decoder_step).
 *
 * Over 700 lines: one model's decoder in three precisions (fp32, bf16 and
 * the int8 layers that replace the packed fp32 ones) and with a shortlist;
 * the int8 quantization of a loaded model is the part that could move out,
 * next to gemm_int8.c. */
#include "dispatch.h"
#include "decode.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gemm_bf16.h"
#include "gemm_int8.h"
#include "gemm_dnnl.h"
#include "ops.h"
#include "parallel.h"
#include "util.h"

/* ---- options ------------------------------------------------------------ */
void decode_options_from_config(DecodeOptions *o, const Config *c) {
    o->beam = c->beam;
    o->alpha = c->alpha;
    o->max_len_a = c->max_len_a;
    o->max_len_b = c->max_len_b;
    o->nbest = 1;
    o->batch_size = c->batch_size;
    o->sample = 0;
    o->temperature = 1.0;
    o->topk = 0;
    o->seed = 1;
    o->index_base = 0;
}

/* ---- sublayers ----------------------------------------------------------- */
/* x = LayerNorm(x + o) (post-norm, the paper) or x = x + o (pre-norm). */
static void residual(float *x, const float *o, const LayerNormParams *ln, int n, int D, int pre_norm) {
    residual_dropout(x, x, o, (size_t)n * D, 0.0f, 0);
    if (!pre_norm) layernorm_rows(x, x, ln->w, ln->b, n, D);
}

/* The sublayer input: LayerNorm(x) before the sublayer (pre-norm) or x. */
static const float *sublayer_input(float *y, const float *x, const LayerNormParams *ln, int n, int D, int pre_norm) {
    if (!pre_norm) return x;
    layernorm_rows(y, x, ln->w, ln->b, n, D);
    return y;
}

/* ======================================================================
 * The Transformer as a step function
 * ====================================================================== */

/* A float buffer that only grows (decoding reuses its buffers from batch to
 * batch: no allocation, and no page faults, in the steady state). */
static float *grow(float *p, size_t *cap, size_t need) {
    if (need <= *cap) return p;
    free(p);
    *cap = need + need / 4;
    return xaligned(*cap * sizeof(float));
}

static int *grow_ints(int *p, size_t *cap, size_t need) {
    if (need <= *cap) return p;
    free(p);
    *cap = need + need / 4;
    return xmalloc(*cap * sizeof(int));
}

/* A linear layer as the Translator runs it: fp32 or bf16 products
 * (ops.h's PackedLinear: every layer packed once, the encoder's too), or
 * int8 ones (gemm_int8.h) when q.data is set. */
typedef struct {
    PackedLinear f;
    Int8Matrix q;
    const float *b;               /* bias [out] (int8: the ModelPack's copy) */
} Linear;

typedef struct {
    Linear q, k, v, o;            /* self-attention */
    Linear fc1, fc2;              /* FFN */
} EncoderLinears;

typedef struct {
    Linear q, k, v, o;            /* self-attention */
    Linear cq, ck, cv, co;        /* encoder-decoder attention (ck, cv: once per batch, on the encoder output) */
    Linear fc1, fc2;              /* FFN */
} DecoderLinears;

typedef struct {
    const Model *m;
    int bf16, int8;         /* the model's precision (m->bf16, m->int8) */
    ParameterTensors fp;    /* the float tensors read as they are (biases, LayerNorm, fp32/bf16: the
                             * embedding): m->p's, or pointers into own */
    float *own;             /* int8, and fp32/bf16 with every layer packed: a copy of the float tensors
                             * read (own_floats), so that the Model's parameters can go (model_release_params) */
    size_t own_bytes;       /* of own that is in use */
    EncoderLinears *enc;    /* [enc_layers] */
    DecoderLinears *dec;    /* [dec_layers] */
    Linear out;             /* logits = x E^T, the shared embedding (section 3.4); int8: also the embeddings */
    int pack;               /* translator_new's pack (a shortlist's output layer is packed alike) */
    int sl_mode;            /* int8 with a shortlist: how its output layer multiplies (SL_*) */
    float *e32;             /* SL_FP32: the fp32 embedding, kept when the parameters go */
    uint16_t *e16;          /* int8: the embedding E [V, D] in bf16: its lookups, int8_rescore's rows */
} ModelPack;

/* int8 with a shortlist: the candidates' rows of the output layer as
 * int8 (SL_INT8: the same products as without a shortlist), or the fp32
 * embedding's rows with unquantized activations (SL_FP32: an fp32 output
 * layer, which the shortlist makes small). */
enum { SL_INT8, SL_FP32 };

/* One model, or an ensemble of models that share the vocabulary. */
struct Translator {
    int n;
    ModelPack *p;           /* [n] */
    int max_positions;      /* the smallest of the models' */
    Shortlist *sl;          /* NULL, or the vocabulary shortlist (owned) */
    long *sl_count;         /* [4]: batches, their candidates, sentences, theirs (atomic; for the logs) */
};

/* Set up one linear layer: W [out, in] (the model's fp32 weights: int8
 * quantizes them, bf16 rounds them), b [out] or NULL. */
static int linear_init(Linear *L, const ModelPack *t, const float *w, const float *b, int out, int in, int pack) {
    memset(L, 0, sizeof *L);
    L->b = b;
    if (t->int8) return int8_quantize_weights(&L->q, w, out, in, in);
    packed_linear_init(&L->f, w, b, out, in, pack, t->bf16);
    return 0;
}

static void linear_free(Linear *L) {
    packed_linear_free(&L->f);
    int8_matrix_free(&L->q);
}

static size_t linear_bytes(const Linear *L) { return packed_linear_bytes(&L->f) + int8_matrix_bytes(&L->q); }

/* The attention layer's linears, [q, k, v, o] in that order (fp: biases). */
static int attention_init(Linear *L, const ModelPack *t, const AttentionParams *w, const AttentionParams *fp, int D,
                          int pack) {
    return linear_init(&L[0], t, w->q_w, fp->q_b, D, D, pack) || linear_init(&L[1], t, w->k_w, fp->k_b, D, D, pack) ||
           linear_init(&L[2], t, w->v_w, fp->v_b, D, D, pack) || linear_init(&L[3], t, w->o_w, fp->o_b, D, D, pack);
}

/* Copy the float tensors the Translator reads as they are into t->own, at
 * their offsets in the parameter buffer, and point t->fp there: the model's
 * vectors (every one-dimensional tensor: biases, LayerNorm), and for fp32
 * and bf16 the embedding too (its lookups, and a shortlist's rows; the
 * output layer is packed apart). own is as large as the whole buffer but calloc'd: the pages of
 * the weight matrices are never written, so they are never resident (Linux
 * maps them on first touch). */
static int own_floats(ModelPack *t, const Model *m) {
    TensorInfo *tab;
    size_t total;
    int nt = model_tensor_table(&m->dims, &tab, &total);
    if (nt < 0) return -1;
    t->own = calloc(total ? total : 1, sizeof(float));
    if (!t->own) {
        free(tab);
        return errorf("%s: out of memory for a copy of the model's float tensors (%zu floats)",
                      t->int8 ? "int8" : t->bf16 ? "bf16" : "fp32", total);
    }
    size_t embed = (size_t)(m->p.embed - m->params);
    for (int i = 0; i < nt; i++)
        if (tab[i].ndim == 1 || (!t->int8 && tab[i].offset == embed)) {
            memcpy(t->own + tab[i].offset, m->params + tab[i].offset, tab[i].size * sizeof(float));
            t->own_bytes += tab[i].size * sizeof(float);
        }
    free(tab);
    memset(&t->fp, 0, sizeof t->fp);   /* (model_point_parameters frees what fp points to: m->p's arrays) */
    model_point_parameters(&m->dims, &t->fp, t->own);
    return 0;
}

static void model_pack_free(ModelPack *t);

static int model_pack_init(ModelPack *t, const Model *m, int pack) {
    int D = m->dims.d_model, F = m->dims.d_ff;
    memset(t, 0, sizeof *t);
    t->m = m;
    t->bf16 = m->bf16;
    t->int8 = m->int8;
    t->pack = pack;
    t->enc = xcalloc((size_t)m->dims.enc_layers, sizeof *t->enc);
    t->dec = xcalloc((size_t)m->dims.dec_layers, sizeof *t->dec);
    /* Every layer packed, those that run once per batch on all its tokens too
     * (the encoder's, the cross-attention keys and values: the same
     * micro-kernel and k blocks as BLIS's own packing, so the same sums), so
     * that the Model's weights are read by nothing once packed. */
    t->fp = m->p;
    if ((t->int8 || packed_linear_packs(pack, t->bf16)) && own_floats(t, m)) goto fail;
    for (int l = 0; l < m->dims.enc_layers; l++) {
        const EncoderLayerParams *W = &m->p.enc[l], *P = &t->fp.enc[l];
        EncoderLinears *e = &t->enc[l];
        if (attention_init(&e->q, t, &W->self_attn, &P->self_attn, D, pack) ||
            linear_init(&e->fc1, t, W->ffn.fc1_w, P->ffn.fc1_b, F, D, pack) ||
            linear_init(&e->fc2, t, W->ffn.fc2_w, P->ffn.fc2_b, D, F, pack)) goto fail;
    }
    for (int l = 0; l < m->dims.dec_layers; l++) {
        const DecoderLayerParams *W = &m->p.dec[l], *P = &t->fp.dec[l];
        DecoderLinears *q = &t->dec[l];
        if (attention_init(&q->q, t, &W->self_attn, &P->self_attn, D, pack) ||
            linear_init(&q->cq, t, W->encoder_attn.q_w, P->encoder_attn.q_b, D, D, pack) ||
            linear_init(&q->ck, t, W->encoder_attn.k_w, P->encoder_attn.k_b, D, D, pack) ||
            linear_init(&q->cv, t, W->encoder_attn.v_w, P->encoder_attn.v_b, D, D, pack) ||
            linear_init(&q->co, t, W->encoder_attn.o_w, P->encoder_attn.o_b, D, D, pack) ||
            linear_init(&q->fc1, t, W->ffn.fc1_w, P->ffn.fc1_b, F, D, pack) ||
            linear_init(&q->fc2, t, W->ffn.fc2_w, P->ffn.fc2_b, D, F, pack)) goto fail;
    }
    if (linear_init(&t->out, t, m->p.embed, NULL, m->dims.vocab, D, pack)) goto fail;
    if (t->int8) {   /* int8: the embedding in bf16 for its lookups and int8_rescore (+2 bytes a weight of E) */
        size_t ve = (size_t)m->dims.vocab * D;
        t->e16 = malloc(ve * sizeof *t->e16);
        if (!t->e16) { errorf("int8: out of memory for the embedding in bf16 (%zu MB)", ve * 2 >> 20); goto fail; }
        for (size_t i = 0; i < ve; i++) t->e16[i] = bf16_from_float(m->p.embed[i]);
        t->fp.embed = NULL;
    }
    return 0;
fail:
    model_pack_free(t);
    return -1;
}

static void model_pack_free(ModelPack *t) {
    if (!t->m) return;
    for (int l = 0; l < t->m->dims.enc_layers; l++) {
        EncoderLinears *e = &t->enc[l];
        Linear *all[] = {&e->q, &e->k, &e->v, &e->o, &e->fc1, &e->fc2};
        for (int i = 0; i < 6; i++) linear_free(all[i]);
    }
    for (int l = 0; l < t->m->dims.dec_layers; l++) {
        DecoderLinears *q = &t->dec[l];
        Linear *all[] = {&q->q, &q->k, &q->v, &q->o, &q->cq, &q->ck, &q->cv, &q->co, &q->fc1, &q->fc2};
        for (int i = 0; i < 10; i++) linear_free(all[i]);
    }
    linear_free(&t->out);
    if (t->own) { free(t->own); free(t->fp.enc); free(t->fp.dec); }
    free(t->e32);
    free(t->e16);
    free(t->enc);
    free(t->dec);
    memset(t, 0, sizeof *t);
}

/* Bytes of the weights one ModelPack reads: the Model's parameters while it
 * has them, and the copies made here. */
static size_t model_pack_bytes(const ModelPack *t) {
    const Model *m = t->m;
    size_t b = (m->params ? m->num_params * sizeof(float) : 0) + t->own_bytes + linear_bytes(&t->out) +
               (t->e32 ? (size_t)m->dims.vocab * m->dims.d_model * sizeof(float) : 0) +
               (t->e16 ? (size_t)m->dims.vocab * m->dims.d_model * sizeof(uint16_t) : 0);
    for (int l = 0; l < m->dims.enc_layers; l++) {
        const EncoderLinears *e = &t->enc[l];
        const Linear *all[] = {&e->q, &e->k, &e->v, &e->o, &e->fc1, &e->fc2};
        for (int i = 0; i < 6; i++) b += linear_bytes(all[i]);
    }
    for (int l = 0; l < m->dims.dec_layers; l++) {
        const DecoderLinears *q = &t->dec[l];
        const Linear *all[] = {&q->q, &q->k, &q->v, &q->o, &q->cq, &q->ck, &q->cv, &q->co, &q->fc1, &q->fc2};
        for (int i = 0; i < 10; i++) b += linear_bytes(all[i]);
    }
    return b;
}

size_t translator_bytes(const Translator *t) {
    size_t b = 0;
    for (int i = 0; i < t->n; i++) b += model_pack_bytes(&t->p[i]);
    return b;
}

Translator *translator_new(const Model *m, int pack) { return translator_new_ensemble(&m, 1, pack); }

Translator *translator_new_ensemble(const Model *const *m, int n, int pack) {
    for (int i = 1; i < n; i++)
        if (m[i]->dims.vocab != m[0]->dims.vocab) {
            errorf("ensemble: model %d has a vocabulary of %d, model 1 of %d", i + 1, m[i]->dims.vocab, m[0]->dims.vocab);
            return NULL;
        }
    Translator *t = xcalloc(1, sizeof *t);
    t->n = n;
    t->p = xcalloc((size_t)n, sizeof *t->p);
    t->max_positions = m[0]->dims.max_positions;
    for (int i = 0; i < n; i++) {
        if (model_pack_init(&t->p[i], m[i], pack)) {
            translator_free(t);
            return NULL;
        }
        if (m[i]->dims.max_positions < t->max_positions) t->max_positions = m[i]->dims.max_positions;
    }
    return t;
}

int translator_set_shortlist(Translator *t, Shortlist *sl) {
    const Model *m = t->p[0].m;
    if (shortlist_vocab(sl) != m->dims.vocab) {
        int v = shortlist_vocab(sl);
        shortlist_free(sl);
        return errorf("shortlist: built for a vocabulary of %d, the model has %d", v, m->dims.vocab);
    }
    const char *mode = getenv("TFM_SHORTLIST_OUT");   /* int8 | fp32: how int8 multiplies the list */
    int sm = !mode || !strcmp(mode, "int8") ? SL_INT8 : !strcmp(mode, "fp32") ? SL_FP32 : -1;
    if (sm < 0) { shortlist_free(sl); return errorf("TFM_SHORTLIST_OUT='%s': expected int8 or fp32", mode); }
    for (int i = 0; i < t->n; i++) {
        ModelPack *p = &t->p[i];
        if (!p->int8) continue;
        p->sl_mode = sm;
        if (sm == SL_FP32) {
            if (!p->m->params) { shortlist_free(sl); return errorf("shortlist: the fp32 output layer needs the model's parameters"); }
            size_t ve = (size_t)p->m->dims.vocab * p->m->dims.d_model;
            p->e32 = xmalloc(ve * sizeof(float));
            memcpy(p->e32, p->m->p.embed, ve * sizeof(float));
        }
    }
    shortlist_free(t->sl);
    t->sl = sl;
    if (!t->sl_count) t->sl_count = xcalloc(4, sizeof(long));
    return 0;
}

void translator_shortlist_counts(const Translator *t, double *per_batch, double *per_sentence) {
    long *c = t->sl_count;
    *per_batch = c && c[0] ? (double)c[1] / c[0] : 0;
    *per_sentence = c && c[2] ? (double)c[3] / c[2] : 0;
}

int translator_owns_weights(const Translator *t) {
    for (int i = 0; i < t->n; i++)
        if (!t->p[i].own) return 0;
    return 1;
}

int translator_packed(const Translator *t) {
    const Linear *o = &t->p[0].out;
    return o->f.pw != NULL || o->f.p16.data != NULL || o->q.data != NULL;
}

void translator_free(Translator *t) {
    if (!t) return;
    for (int i = 0; i < t->n; i++) model_pack_free(&t->p[i]);
    free(t->p);
    shortlist_free(t->sl);
    free(t->sl_count);
    free(t);
    gemm_dnnl_release();   /* the int8 primitives its products made (gemm_dnnl.h) */
}

/* A shortlist's candidates for one batch (shortlist.h): the union of its
 * sentences' (the columns of the scores the search sees) and each
 * sentence's, as union columns in increasing id order. */
typedef struct {
    int C;                         /* the union's count (0: no shortlist) */
    int *ids;                      /* [V] the union's token ids, ascending */
    int *off, *col;                /* sentence s: columns col[off[s] .. off[s + 1]) */
    unsigned char *mark;           /* [V] scratch, all 0 between calls */
    int sent_cap;
    size_t col_cap;
} BatchCandidates;

static void batch_candidates_free(BatchCandidates *b) {
    free(b->ids); free(b->off); free(b->col); free(b->mark);
    memset(b, 0, sizeof *b);
}

/* Fill b for nsent sources; count (or NULL): the log's totals. */
static void batch_candidates(BatchCandidates *b, const Shortlist *sl, int nsent, const int *const *src, const int *len,
                             long *count) {
    int V = shortlist_vocab(sl);
    if (!b->ids) { b->ids = xmalloc((size_t)V * sizeof(int)); b->mark = xcalloc((size_t)V, 1); }
    if (nsent + 1 > b->sent_cap) { free(b->off); b->sent_cap = nsent + 1; b->off = xmalloc((size_t)b->sent_cap * sizeof(int)); }
    int C = b->C = shortlist_candidates(sl, nsent, src, len, b->ids, b->mark);
    size_t at = 0;
    for (int s = 0; s < nsent; s++) {
        shortlist_mark(sl, src[s], len[s], b->mark);
        if (at + (size_t)C > b->col_cap) { b->col_cap = 2 * (at + (size_t)C); b->col = xrealloc(b->col, b->col_cap * sizeof(int)); }
        b->off[s] = (int)at;
        for (int c = 0; c < C; c++)   /* a sentence's candidates are the union's: clearing these clears all */
            if (b->mark[b->ids[c]]) { b->col[at++] = c; b->mark[b->ids[c]] = 0; }
    }
    b->off[nsent] = (int)at;
    if (count) {
        #pragma omp atomic
        count[0]++;
        #pragma omp atomic
        count[1] += C;
        #pragma omp atomic
        count[2] += nsent;
        #pragma omp atomic
        count[3] += (long)at;
    }
}

typedef struct {
    const ModelPack *tr;
    const Model *m;
    int D, H, Dk, F, V, L;
    float *abuf;                   /* scratch of packed_linear_forward */
    Int8Scratch i8;                /* scratch of int8_linear */
    Int8Kernel kern;               /* int8_kernel(), once */
    /* encoder side of the batch */
    int nsent, ntok, maxn;         /* sentences, packed rows, longest source (with EOS) */
    int *src_off, *src_n;          /* [nsent]: first row and length (tokens + EOS) */
    float *enc_out;                /* [ntok, D] */
    float **ck, **cv;              /* [L] -> [ntok, D] cross-attention keys / values */
    size_t enc_cap, *ck_cap, *cv_cap;
    int sent_cap;
    /* self-attention caches: step t holds K then V of every layer, [L][2][n_t][D] */
    float **kv;
    size_t *kv_cap;
    int *kv_rows;                  /* n_t */
    int steps_cap;
    int *anc, *anc_prev;           /* [n_t, t+1] ancestor rows, this step and the last */
    size_t anc_cap, anc_cap_prev;
    /* scratch rows (encoder: ntok rows, step: n rows) */
    float *x, *y, *q, *k, *v, *att, *o, *h, *logp, *lse;   /* logp: the logits [n, V] */
    size_t x_cap, y_cap, q_cap, k_cap, v_cap, att_cap, o_cap, h_cap, logp_cap, lse_cap;
    /* a shortlist: the batch's candidates (the caller's; NULL: the whole vocabulary) and each
     * sentence's output layer, the rows of E of its candidates */
    const BatchCandidates *bc;
    Linear *sl_lin;                /* [sl_n]: one per sentence, or one for the union (sl_union) */
    int sl_n, sl_union;
    float *sl_w;                   /* unpacked layers only: the rows their products read, sentence after sentence */
    int *sl_tok;                   /* one sentence's candidate ids (int8 gathers them) */
    float *sl_y;                   /* one sentence's rows of logits, its candidates only */
    size_t sl_w_cap, sl_tok_cap, sl_y_cap;
} Decoder;

static void decoder_init(Decoder *d, const ModelPack *tr) {
    const Model *m = tr->m;
    memset(d, 0, sizeof *d);
    d->tr = tr;
    d->m = m;
    if (tr->out.f.pw) d->abuf = xaligned(packed_scratch_floats() * sizeof(float));
    d->kern = int8_kernel();
    d->D = m->dims.d_model;
    d->H = m->dims.heads;
    d->Dk = d->D / d->H;
    d->F = m->dims.d_ff;
    d->V = m->dims.vocab;
    d->L = m->dims.dec_layers;
    d->ck = xcalloc((size_t)d->L, sizeof(float *));
    d->cv = xcalloc((size_t)d->L, sizeof(float *));
    d->ck_cap = xcalloc((size_t)d->L, sizeof(size_t));
    d->cv_cap = xcalloc((size_t)d->L, sizeof(size_t));
}

static void decoder_free(Decoder *d) {
    for (int i = 0; i < d->steps_cap; i++) free(d->kv[i]);
    free(d->kv); free(d->kv_cap); free(d->kv_rows);
    for (int l = 0; l < d->L; l++) { free(d->ck[l]); free(d->cv[l]); }
    free(d->ck); free(d->cv); free(d->ck_cap); free(d->cv_cap);
    free(d->src_off); free(d->src_n); free(d->enc_out);
    free(d->anc); free(d->anc_prev);
    free(d->x); free(d->y); free(d->q); free(d->k); free(d->v); free(d->att); free(d->o); free(d->h);
    free(d->logp); free(d->lse); free(d->abuf);
    int8_scratch_free(&d->i8);
    for (int s = 0; s < d->sl_n; s++) linear_free(&d->sl_lin[s]);
    free(d->sl_lin); free(d->sl_w); free(d->sl_tok); free(d->sl_y);
}

/* Whether a shortlist's output layers are packed (straight from E's rows),
 * or read unpacked from the rows copied to d->sl_w (pack = 0, or no kernel
 * to pack for). */
static int shortlist_packs(const ModelPack *tr) { return packed_linear_packs(tr->int8 ? 1 : tr->pack, tr->bf16); }

/* An output layer of the rows tok[0..cnt) of E (the same bytes as the full
 * layer's): int8 rows gathered; fp32/bf16 rows packed where they lie in E,
 * or (unpacked) copied to w [cnt, D], which the products then read. */
static int gather_layer(Decoder *d, Linear *L, const int *tok, int cnt, float *w) {
    const ModelPack *tr = d->tr;
    int D = d->D;
    memset(L, 0, sizeof *L);
    if (tr->int8 && tr->sl_mode == SL_INT8) return int8_matrix_gather(&L->q, &tr->out.q, tok, cnt);
    const float *from = tr->int8 ? tr->e32 : tr->fp.embed;   /* int8: SL_FP32's copy; bf16: rounded as packed */
    if (shortlist_packs(tr)) {
        packed_linear_init_rows(&L->f, from, tok, NULL, cnt, D, tr->bf16);
        if (L->f.pw && !d->abuf) d->abuf = xaligned(packed_scratch_floats() * sizeof(float));
        return 0;
    }
    for (int j = 0; j < cnt; j++) memcpy(w + (size_t)j * D, from + (size_t)tok[j] * D, (size_t)D * sizeof(float));
    packed_linear_init(&L->f, w, NULL, cnt, D, 0, tr->bf16);
    return 0;
}

/* Products of the output layer per sentence (its own candidates' rows) are
 * bound by memory traffic (every weight is read for a sentence's few rows,
 * `beam` of them), so their cost grows with the sum of the sentences' lists
 * sum C_s; one product over the batch's union C for all nsent x beam rows
 * costs nsent x beam x C in arithmetic. Per sentence while
 *     15 x mean C_s <= beam x C,
 * i.e. while a sentence's list is at most beam / 15 of the union (0.27 at
 * beam 4). Measured on the 2-core Zen 4 (fp32, d_model 256, beam 4, batch
 * 64, a 5k vocabulary, test2016): the output layer per sentence ~1.8x
 * faster than over the union at sum C_s / C = 9.4 (mean C_s / C = 0.15),
 * ~1.7x slower at 39 (0.61): the costs meet near 17 (0.27). */
static double g_union_ratio = 15;
void decode_shortlist_union_ratio(double r) { g_union_ratio = r; }

/* A shortlist: this batch's output layer (bc NULL: the whole vocabulary
 * again). Sentence s scores its own candidates only, with the rows of E
 * they name: logits x E_s^T and a softmax over them, the full softmax
 * renormalised over the sentence's candidates (shortlist.h), whatever else
 * is in the batch; the other columns of the batch's scores are -inf for its
 * rows. The products run per sentence, or once over the union of the batch
 * (g_union_ratio; rows: the rows a sentence will have, the beam): the same
 * numbers either way, as gathered rows give the same products as the full
 * layer's columns (the same weights, the same kernel, each element its own
 * dot product), and the normaliser sums a sentence's candidates in id
 * order: not even the rounding depends on the batch. */
static int decoder_shortlist(Decoder *d, const BatchCandidates *bc, int nsent, int rows) {
    int D = d->D;
    for (int s = 0; s < d->sl_n; s++) linear_free(&d->sl_lin[s]);
    d->bc = bc;
    d->sl_n = 0;
    if (!bc) return 0;
    d->sl_union = (double)bc->off[nsent] / nsent * g_union_ratio > (double)rows * bc->C;
    free(d->sl_lin);
    d->sl_n = d->sl_union ? 1 : nsent;
    d->sl_lin = xcalloc((size_t)d->sl_n, sizeof *d->sl_lin);
    int copy = !shortlist_packs(d->tr);   /* unpacked: the products read the rows copied to sl_w */
    if (d->sl_union) {
        if (copy) d->sl_w = grow(d->sl_w, &d->sl_w_cap, (size_t)bc->C * D);
        return gather_layer(d, &d->sl_lin[0], bc->ids, bc->C, d->sl_w);
    }
    if (copy) d->sl_w = grow(d->sl_w, &d->sl_w_cap, (size_t)bc->off[nsent] * D);
    for (int s = 0; s < nsent; s++) {
        int c0 = bc->off[s], cs = bc->off[s + 1] - c0;
        d->sl_tok = grow_ints(d->sl_tok, &d->sl_tok_cap, (size_t)cs);
        for (int j = 0; j < cs; j++) d->sl_tok[j] = bc->ids[bc->col[c0 + j]];
        if (gather_layer(d, &d->sl_lin[s], d->sl_tok, cs, copy ? d->sl_w + (size_t)c0 * D : NULL)) return -1;
    }
    return 0;
}

/* y = x W^T + b for a decoder layer: packed weights when there are some. */
static void apply(Decoder *d, float *y, const float *x, const Linear *L, int n) {
    if (L->q.data) int8_linear(d->kern, y, L->q.out, x, L->q.in, n, &L->q, L->b, &d->i8);
    else packed_linear_forward(y, x, &L->f, n, d->abuf);
}

/* int8: row tok of the embedding E, from its bf16 copy (a lookup reads
 * E[tok] sqrt(D): bf16 keeps 8 significant bits of every element, where
 * the int8 row keeps 7 of the row's largest only). */
static void int8_embed_row(float *dst, const ModelPack *tr, int tok, int D) {
    const uint16_t *e = tr->e16 + (size_t)tok * D;
    for (int c = 0; c < D; c++) dst[c] = bf16_to_float(e[c]);
}

/* int8: the output layer's best columns of each row scored again
 * (decode.h's int8_rescore). Measured (the demo model, 2,492 updates,
 * Multi30k val, beam 4, the 279-280 of its first 300 lines where fp32's
 * and int8's 1-best agree): |log P int8 - log P fp32| 0.0366 nats a
 * sentence on average without it, 0.0313 with R = 8, 0.0311 with 16, 0.0312
 * rescoring the whole row; the rest is the int8 hidden state's. R = 8
 * costs 13% of int8's CPU time there (the scan of each row), 16 costs 20%. */
static int g_rescore = INT8_RESCORE;
void decode_int8_rescore(int r) { g_rescore = r < 0 ? INT8_RESCORE : r; }

static float dot_bf16(const float *x, const uint16_t *e, int D) {
    float acc[16] = {0};   /* 16 lanes, summed in a fixed order: vectorises, and every row alike */
    int c = 0;
    for (; c + 16 <= D; c += 16)
        for (int l = 0; l < 16; l++) acc[l] += x[c + l] * bf16_to_float(e[c + l]);
    for (; c < D; c++) acc[c & 15] += x[c] * bf16_to_float(e[c]);
    float s = 0.0f;
    for (int l = 0; l < 16; l++) s += acc[l];
    return s;
}

void int8_rescore(const uint16_t *e16, float *y, int ldy, const float *x, int n, int cols, const int *ids, int D,
                  int R) {
    R = R < cols ? R : cols;
    if (R <= 0) return;
    PAR_FOR(par_go((size_t)n * cols, PAR_MIN), (int i = 0; i < n; i++), {
        float *yi = y + (size_t)i * ldy;
        const float *xi = x + (size_t)i * D;
        int top_s[65];
        float tv_s[64];
        int *top = R <= 64 ? top_s : xmalloc((size_t)(R + 1) * sizeof *top);   /* (tests ask for more) */
        float *tv = R <= 64 ? tv_s : xmalloc((size_t)R * sizeof *tv);
        int k = 0;
        for (int c0 = 0; c0 < cols; c0 += 16) {   /* the R best, descending; ties: the lower column first */
            int c1 = c0 + 16 < cols ? c0 + 16 : cols;
            if (k == R && c1 == c0 + 16) {   /* a block of 16 with nothing above the R-th best: skipped */
                if (!scores_above16(yi + c0, 0.0f, tv[R - 1])) continue;
            }
            for (int c = c0; c < c1; c++) {
                float v = yi[c];
                if (k == R && !(v > tv[R - 1])) continue;
                int j = k < R ? k++ : R - 1;
                while (j > 0 && v > tv[j - 1]) { tv[j] = tv[j - 1]; top[j] = top[j - 1]; j--; }
                tv[j] = v;
                top[j] = c;
            }
        }
        int eos = 0;
        for (int j = 0; j < k; j++) eos |= top[j] == TOK_EOS;
        if (!eos && TOK_EOS < cols) top[k++] = TOK_EOS;   /* (a shortlist's columns start with the specials) */
        for (int j = 0; j < k; j++) yi[top[j]] = dot_bf16(xi, e16 + (size_t)(ids ? ids[top[j]] : top[j]) * D, D);
        if (top != top_s) { free(top); free(tv); }
    });
}

/* FFN(x) = max(0, x W1 + b1) W2 + b2 (section 3.3): o [n, D], h [n, F]. */
/* bf16: the attention's queries, keys and values [n, D] (those not NULL)
 * rounded in place, once, as the model's bf16 attention rounds them
 * (attention_row then rounds only the probabilities). Rows independent. */
static void round_attention(const Decoder *d, float *q, float *k, float *v, int n) {
    if (!d->tr->bf16) return;
    int D = d->D;
    if (q) bf16_round_matrix(q, D, q, D, n, D);
    if (k) bf16_round_matrix(k, D, k, D, n, D);
    if (v) bf16_round_matrix(v, D, v, D, n, D);
}

static void feed_forward(Decoder *d, float *o, float *h, const float *x, const Linear *fc1, const Linear *fc2, int n) {
    apply(d, h, x, fc1, n);
    relu_dropout_forward(h, (size_t)n * d->F, 0.0f, 0, 0, NULL);
    apply(d, o, h, fc2, n);
}

/* Scratch for `rows` rows. */
static void decoder_scratch(Decoder *d, int rows) {
    size_t nD = (size_t)rows * d->D;
    d->x = grow(d->x, &d->x_cap, nD);
    d->y = grow(d->y, &d->y_cap, nD);
    d->q = grow(d->q, &d->q_cap, nD);
    d->k = grow(d->k, &d->k_cap, nD);
    d->v = grow(d->v, &d->v_cap, nD);
    d->att = grow(d->att, &d->att_cap, nD);
    d->o = grow(d->o, &d->o_cap, nD);
    d->h = grow(d->h, &d->h_cap, (size_t)rows * d->F);
}

/* Self-attention inside sentences [s0, s1) of the sources (packed rows). */
static void encoder_self_attention_part(const Decoder *d, float *out, const float *q, const float *k, const float *v,
                                        int s0, int s1) {
    int D = d->D, H = d->H, Dk = d->Dk;
    const float **keys = xmalloc((size_t)d->maxn * sizeof *keys), **vals = xmalloc((size_t)d->maxn * sizeof *vals);
    float *sc = xmalloc((size_t)H * d->maxn * sizeof *sc);
    for (int s = s0; s < s1; s++) {
        int off = d->src_off[s], nk = d->src_n[s];
        for (int j = 0; j < nk; j++) {
            keys[j] = k + (size_t)(off + j) * D;
            vals[j] = v + (size_t)(off + j) * D;
        }
        for (int i = off; i < off + nk; i++)
            attention_row(out + (size_t)i * D, q + (size_t)i * D, keys, vals, nk, H, Dk, sc, d->tr->bf16);
    }
    free(keys); free(vals); free(sc);
}
static void encoder_self_attention(Decoder *d, float *out, const float *q, const float *k, const float *v) {
    PAR_PARTS(par_go((size_t)d->ntok * d->maxn * d->D, PAR_MIN), {
        int s0, s1;
        par_share(d->nsent, par_t, par_nt, &s0, &s1);
        encoder_self_attention_part(d, out, q, k, v, s0, s1);
    });
}

/* Rows [i0, i1) of decoder layer l's attention at step t: masked
 * self-attention (each hypothesis attends to itself and to its ancestors'
 * keys and values at the earlier positions: the causal mask, for free) or,
 * cross, the encoder-decoder attention over the hypothesis' source sentence. */
static void decoder_attention_part(const Decoder *d, float *att, const float *q, const int *sent, int l, int t,
                                   int cross, int i0, int i1) {
    int D = d->D, maxk = cross ? d->maxn : t + 1;
    const float **keys = xmalloc((size_t)maxk * sizeof *keys), **vals = xmalloc((size_t)maxk * sizeof *vals);
    float *sc = xmalloc((size_t)d->H * maxk * sizeof *sc);
    for (int i = i0; i < i1; i++) {
        int nk = t + 1;
        if (cross) {
            int off = d->src_off[sent[i]];
            nk = d->src_n[sent[i]];
            for (int j = 0; j < nk; j++) {
                keys[j] = d->ck[l] + (size_t)(off + j) * D;
                vals[j] = d->cv[l] + (size_t)(off + j) * D;
            }
        } else {
            const int *an_i = d->anc + (size_t)i * (t + 1);
            for (int j = 0; j <= t; j++) {
                size_t nj = (size_t)d->kv_rows[j];
                const float *blk = d->kv[j] + (size_t)(2 * l) * nj * D;
                keys[j] = blk + (size_t)an_i[j] * D;
                vals[j] = blk + nj * D + (size_t)an_i[j] * D;
            }
        }
        attention_row(att + (size_t)i * D, q + (size_t)i * D, keys, vals, nk, d->H, d->Dk, sc, d->tr->bf16);
    }
    free(keys); free(vals); free(sc);
}
static void decoder_attention(const Decoder *d, float *att, const float *q, const int *sent, int l, int t, int cross,
                              int n) {
    PAR_PARTS(par_go((size_t)n * (cross ? d->maxn : t + 1) * d->D, PAR_MIN), {
        int i0, i1;
        par_share(n, par_t, par_nt, &i0, &i1);
        decoder_attention_part(d, att, q, sent, l, t, cross, i0, i1);
    });
}

/* Run the encoder on nsent sources (src[s] of len[s] tokens, EOS appended
 * here) and project the cross-attention keys/values of every decoder layer. */
static void decoder_encode(Decoder *d, int nsent, const int *const *src, const int *len) {
    const Model *m = d->m;
    const ModelPack *tr = d->tr;
    const ParameterTensors *p = &tr->fp;
    int D = d->D, pre = m->dims.pre_norm;
    if (nsent > d->sent_cap) {
        free(d->src_off); free(d->src_n);
        d->sent_cap = nsent;
        d->src_off = xmalloc((size_t)nsent * sizeof(int));
        d->src_n = xmalloc((size_t)nsent * sizeof(int));
    }
    d->nsent = nsent;
    int ntok = 0;
    d->maxn = 0;
    for (int s = 0; s < nsent; s++) {
        d->src_off[s] = ntok;
        d->src_n[s] = len[s] + 1;
        ntok += len[s] + 1;
        d->maxn = len[s] + 1 > d->maxn ? len[s] + 1 : d->maxn;
    }
    d->ntok = ntok;
    size_t nD = (size_t)ntok * D;
    decoder_scratch(d, ntok);
    d->enc_out = grow(d->enc_out, &d->enc_cap, nD);
    float *x = d->enc_out, *y = d->y, *q = d->q, *k = d->k, *v = d->v, *att = d->att, *o = d->o, *h = d->h;
    float sq = sqrtf((float)D);
    /* x = E[token] sqrt(D) + PE[position] (sections 3.4, 3.5) */
    PAR_FOR(par_go(nD, PAR_MIN), (int s = 0; s < nsent; s++), {
        for (int j = 0; j <= len[s]; j++) {
            int tok = j < len[s] ? src[s][j] : TOK_EOS;
            const float *pe = m->pos_enc + (size_t)j * D;
            float *xi = x + (size_t)(d->src_off[s] + j) * D;
            if (tr->int8) {   /* E's row from its bf16 copy */
                int8_embed_row(xi, tr, tok, D);
                for (int c = 0; c < D; c++) xi[c] = xi[c] * sq + pe[c];
            } else {
                const float *e = p->embed + (size_t)tok * D;
                for (int c = 0; c < D; c++) xi[c] = e[c] * sq + pe[c];
            }
        }
    });
    for (int l = 0; l < m->dims.enc_layers; l++) {
        const EncoderLayerParams *P = &p->enc[l];
        const EncoderLinears *W = &tr->enc[l];
        const float *a = sublayer_input(y, x, &P->self_attn_ln, ntok, D, pre);
        apply(d, q, a, &W->q, ntok);
        apply(d, k, a, &W->k, ntok);
        apply(d, v, a, &W->v, ntok);
        round_attention(d, q, k, v, ntok);
        encoder_self_attention(d, att, q, k, v);
        apply(d, o, att, &W->o, ntok);
        residual(x, o, &P->self_attn_ln, ntok, D, pre);
        a = sublayer_input(y, x, &P->final_ln, ntok, D, pre);
        feed_forward(d, o, h, a, &W->fc1, &W->fc2, ntok);
        residual(x, o, &P->final_ln, ntok, D, pre);
    }
    if (pre) layernorm_rows(x, x, p->enc_ln.w, p->enc_ln.b, ntok, D);
    for (int l = 0; l < d->L; l++) {
        d->ck[l] = grow(d->ck[l], &d->ck_cap[l], nD);
        d->cv[l] = grow(d->cv[l], &d->cv_cap[l], nD);
        apply(d, d->ck[l], x, &tr->dec[l].ck, ntok);
        apply(d, d->cv[l], x, &tr->dec[l].cv, ntok);
        round_attention(d, NULL, d->ck[l], d->cv[l], ntok);
    }
}

/* The step function: one new position for the n live hypotheses. */
static const float *decoder_step(void *ctx, int t, int n, const int *sent, const int *parent, const int *tok,
                                 const float **lognorm) {
    Decoder *d = ctx;
    const Model *m = d->m;
    const ParameterTensors *p = &d->tr->fp;
    int D = d->D, V = d->V, L = d->L, pre = m->dims.pre_norm;
    if (t >= m->dims.max_positions) {
        errorf("decoder: step %d is beyond max_positions %d", t, m->dims.max_positions);
        return NULL;
    }
    decoder_scratch(d, n);
    d->logp = grow(d->logp, &d->logp_cap, (size_t)n * V);
    d->lse = grow(d->lse, &d->lse_cap, (size_t)n);
    /* this step's cache block */
    if (t >= d->steps_cap) {
        int c = d->steps_cap ? 2 * d->steps_cap : 64;
        while (c <= t) c *= 2;
        d->kv = xrealloc(d->kv, (size_t)c * sizeof *d->kv);
        d->kv_cap = xrealloc(d->kv_cap, (size_t)c * sizeof *d->kv_cap);
        d->kv_rows = xrealloc(d->kv_rows, (size_t)c * sizeof *d->kv_rows);
        for (int i = d->steps_cap; i < c; i++) { d->kv[i] = NULL; d->kv_cap[i] = 0; }
        d->steps_cap = c;
    }
    d->kv[t] = grow(d->kv[t], &d->kv_cap[t], (size_t)L * 2 * n * D);
    d->kv_rows[t] = n;
    /* ancestry: anc[i][j] = row at step j of hypothesis i's ancestor */
    size_t an = (size_t)n * (t + 1);
    { int *tmp = d->anc_prev; d->anc_prev = d->anc; d->anc = tmp; }
    { size_t c = d->anc_cap_prev; d->anc_cap_prev = d->anc_cap; d->anc_cap = c; }
    if (an > d->anc_cap) {   /* the previous step's table stays in anc_prev */
        free(d->anc);
        d->anc_cap = an * 2;
        d->anc = xmalloc(d->anc_cap * sizeof(int));
    }
    for (int i = 0; i < n; i++) {
        if (t > 0) memcpy(d->anc + (size_t)i * (t + 1), d->anc_prev + (size_t)parent[i] * t, (size_t)t * sizeof(int));
        d->anc[(size_t)i * (t + 1) + t] = i;
    }

    float *x = d->x, *y = d->y, *q = d->q, *att = d->att, *o = d->o, *h = d->h, *logp = d->logp;
    if (d->tr->int8) {   /* E[tok] sqrt(D) + PE[t], E's rows from the bf16 copy */
        float sq = sqrtf((float)D);
        const float *pe = m->pos_enc + (size_t)t * D;
        for (int i = 0; i < n; i++) {
            float *xi = x + (size_t)i * D;
            int8_embed_row(xi, d->tr, tok[i], D);
            for (int c = 0; c < D; c++) xi[c] = xi[c] * sq + pe[c];
        }
    } else {
        embedding_forward(x, tok, n, 1, t, p->embed, m->pos_enc, D);   /* E[tok] sqrt(D) + PE[t] */
    }
    for (int l = 0; l < L; l++) {
        const DecoderLayerParams *P = &p->dec[l];
        const DecoderLinears *W = &d->tr->dec[l];
        float *K = d->kv[t] + (size_t)(2 * l) * n * D, *Vv = d->kv[t] + (size_t)(2 * l + 1) * n * D;
        /* masked self-attention: this position attends to itself and to
         * the hypothesis' earlier positions (the causal mask, for free) */
        const float *a = sublayer_input(y, x, &P->self_attn_ln, n, D, pre);
        apply(d, q, a, &W->q, n);
        apply(d, K, a, &W->k, n);
        apply(d, Vv, a, &W->v, n);
        round_attention(d, q, K, Vv, n);
        decoder_attention(d, att, q, sent, l, t, 0, n);
        apply(d, o, att, &W->o, n);
        residual(x, o, &P->self_attn_ln, n, D, pre);

        /* encoder-decoder attention over the hypothesis' source sentence */
        a = sublayer_input(y, x, &P->encoder_attn_ln, n, D, pre);
        apply(d, q, a, &W->cq, n);
        round_attention(d, q, NULL, NULL, n);
        decoder_attention(d, att, q, sent, l, t, 1, n);
        apply(d, o, att, &W->co, n);
        residual(x, o, &P->encoder_attn_ln, n, D, pre);

        a = sublayer_input(y, x, &P->final_ln, n, D, pre);
        feed_forward(d, o, h, a, &W->fc1, &W->fc2, n);
        residual(x, o, &P->final_ln, n, D, pre);
    }
    const float *fx = x;
    if (pre) { layernorm_rows(y, x, p->dec_ln.w, p->dec_ln.b, n, D); fx = y; }
    /* logits = x E^T with the shared embedding as pre-softmax weight (3.4);
     * with a shortlist, the candidates' rows of E only */
    if (d->bc) {   /* each run of rows of one sentence: its own output layer, then scattered to its columns */
        const BatchCandidates *bc = d->bc;
        int C = bc->C;
        if (d->sl_union) {   /* one product over the union, then each row keeps its sentence's columns */
            apply(d, logp, fx, &d->sl_lin[0], n);
            for (int i = 0; i < n; i++) {
                if (d->sl_lin[0].q.data) {   /* int8: rescored among the row's sentence's candidates, as below */
                    int c0 = bc->off[sent[i]], cs = bc->off[sent[i] + 1] - c0;
                    d->sl_y = grow(d->sl_y, &d->sl_y_cap, (size_t)cs);
                    d->sl_tok = grow_ints(d->sl_tok, &d->sl_tok_cap, (size_t)cs);
                    float *lr = logp + (size_t)i * C;
                    for (int j = 0; j < cs; j++) { d->sl_y[j] = lr[bc->col[c0 + j]]; d->sl_tok[j] = bc->ids[bc->col[c0 + j]]; }
                    int8_rescore(d->tr->e16, d->sl_y, cs, fx + (size_t)i * D, 1, cs, d->sl_tok, D, g_rescore);
                    for (int j = 0; j < cs; j++) lr[bc->col[c0 + j]] = d->sl_y[j];
                }
                int c0 = bc->off[sent[i]], cs = bc->off[sent[i] + 1] - c0, j = 0;
                float *lr = logp + (size_t)i * C;
                d->sl_y = grow(d->sl_y, &d->sl_y_cap, (size_t)cs);
                for (int c = 0; c < C; c++)
                    if (j < cs && bc->col[c0 + j] == c) d->sl_y[j++] = lr[c];
                    else lr[c] = -INFINITY;
                logsumexp_rows(d->lse + i, d->sl_y, 1, cs);
            }
            *lognorm = d->lse;
            return logp;
        }
        for (size_t j = 0; j < (size_t)n * C; j++) logp[j] = -INFINITY;
        for (int r0 = 0, r1; r0 < n; r0 = r1) {
            int s = sent[r0], c0 = bc->off[s], cs = bc->off[s + 1] - c0;
            for (r1 = r0 + 1; r1 < n && sent[r1] == s; r1++) {}
            d->sl_y = grow(d->sl_y, &d->sl_y_cap, (size_t)(r1 - r0) * cs);
            apply(d, d->sl_y, fx + (size_t)r0 * D, &d->sl_lin[s], r1 - r0);
            if (d->sl_lin[s].q.data) {   /* int8: each row's best candidates rescored (int8_rescore) */
                d->sl_tok = grow_ints(d->sl_tok, &d->sl_tok_cap, (size_t)cs);
                for (int j = 0; j < cs; j++) d->sl_tok[j] = bc->ids[bc->col[c0 + j]];
                int8_rescore(d->tr->e16, d->sl_y, cs, fx + (size_t)r0 * D, r1 - r0, cs, d->sl_tok, D, g_rescore);
            }
            logsumexp_rows(d->lse + r0, d->sl_y, r1 - r0, cs);
            for (int r = r0; r < r1; r++) {
                const float *yr = d->sl_y + (size_t)(r - r0) * cs;
                float *lr = logp + (size_t)r * C;
                for (int j = 0; j < cs; j++) lr[bc->col[c0 + j]] = yr[j];
            }
        }
    } else {
        apply(d, logp, fx, &d->tr->out, n);
        if (d->tr->int8) int8_rescore(d->tr->e16, logp, V, fx, n, V, NULL, D, g_rescore);
        logsumexp_rows(d->lse, logp, n, V);
    }
    *lognorm = d->lse;
    return logp;
}

/* ---- ensembles ------------------------------------------------------------
 * M models that share the vocabulary score the next token by the mean of
 * their log-probabilities,
 *     s(w | y_<t, x) = (1/M) sum_m log p_m(w | y_<t, x),
 * a product of experts (the geometric mean of the models' distributions),
 * left unnormalised as Marian does; beam search adds these scores up and
 * sampling draws from exp(s / T), normalised. (fairseq instead averages the
 * probabilities: log (1/M) sum_m p_m.) The mean of log-probs makes an
 * ensemble of a model with itself score exactly as that model does
 * ((v + v) / 2 = v in floating point), so it translates exactly alike. Each
 * model keeps its own decoder state; the search sees one scorer. */
typedef struct {
    int n, V;
    Decoder *d;        /* [n] */
    float *s;          /* [rows, V] the mean log-probs */
    size_t cap;
} Ensemble;

static const float *ensemble_step(void *ctx, int t, int n, const int *sent, const int *parent, const int *tok,
                                  const float **lognorm) {
    Ensemble *e = ctx;
    size_t nV = (size_t)n * e->V;
    e->s = grow(e->s, &e->cap, nV);
    float *s = e->s;
    for (int k = 0; k < e->n; k++) {
        const float *lse;
        const float *x = decoder_step(&e->d[k], t, n, sent, parent, tok, &lse);
        if (!x) return NULL;
        PAR_FOR(par_go(nV, PAR_MIN), (int i = 0; i < n; i++), {
            const float *xi = x + (size_t)i * e->V;
            float *si = s + (size_t)i * e->V, l = lse[i];
            if (k == 0) for (int w = 0; w < e->V; w++) si[w] = xi[w] - l;
            else for (int w = 0; w < e->V; w++) si[w] += xi[w] - l;
        });
    }
    float inv = 1.0f / (float)e->n;
    PAR_FOR(par_go(nV, PAR_MIN), (size_t j = 0; j < nV; j++), s[j] *= inv;);
    *lognorm = NULL;
    return s;
}

/* ======================================================================
 * Translating token sequences and lines
 * ====================================================================== */

typedef struct { int len, idx; } LenIdx;
static int lenidx_cmp(const void *a, const void *b) {
    const LenIdx *x = a, *y = b;
    if (x->len != y->len) return x->len < y->len ? -1 : 1;
    return (x->idx > y->idx) - (x->idx < y->idx);
}

/* With several threads and several batches, each thread decodes whole
 * batches on its own (single-threaded kernels, no synchronisation inside a
 * step); with one batch, the threads share its matrix products instead.
 * Either way a sentence's arithmetic is the same. */
int translate_ids(const Model *m, const DecodeOptions *o, int n,
                  const int *const *src, const int *src_len, NBest *out) {
    Translator *t = translator_new(m, 1);
    int rc = translator_ids(t, o, n, src, src_len, out);
    translator_free(t);
    return rc;
}

int translator_ids(const Translator *tr, const DecodeOptions *o, int n,
                   const int *const *src, const int *src_len, NBest *out) {
    /* batches of at most the sentences there are: never an allocation sized by the option alone */
    int maxp = tr->max_positions, bs = o->batch_size < 1 ? 1 : o->batch_size < n ? o->batch_size : n > 0 ? n : 1;
    for (int i = 0; i < n; i++) {
        out[i].hyps = NULL;
        out[i].n = 0;
        if (src_len[i] + 1 > maxp)
            return errorf("translate: source %d has %d tokens, the model takes at most %d (with EOS)", i + 1, src_len[i], maxp);
    }
    LenIdx *order = xmalloc((size_t)(n ? n : 1) * sizeof *order);
    int nz = 0;
    for (int i = 0; i < n; i++) {
        if (src_len[i] == 0) {   /* empty line -> empty output, no model run */
            out[i].hyps = xcalloc(1, sizeof(Hypothesis));
            out[i].hyps[0].tokens = xmalloc(sizeof(int));
            out[i].n = 1;
        } else {
            order[nz++] = (LenIdx){src_len[i], i};
        }
    }
    qsort(order, (size_t)nz, sizeof *order, lenidx_cmp);
    int nbatch = (nz + bs - 1) / bs, T = threads_count();
    int teams = T > 1 && nbatch > 1 ? (nbatch < T ? nbatch : T) : 1;
    int rc = 0;
    char err[1024] = "";
    #pragma omp parallel num_threads(teams) if (teams > 1)
    {
        int V = tr->p[0].m->dims.vocab;
        Ensemble e = {.n = tr->n, .V = V, .d = xmalloc((size_t)tr->n * sizeof(Decoder))};
        for (int k = 0; k < tr->n; k++) decoder_init(&e.d[k], &tr->p[k]);
        StepFunction f = tr->n == 1 ? (StepFunction){.vocab = e.V, .step = decoder_step, .ctx = &e.d[0]}
                                    : (StepFunction){.vocab = e.V, .step = ensemble_step, .ctx = &e};
        BatchCandidates bc = {0};
        const int **bsrc = xmalloc((size_t)bs * sizeof *bsrc);
        int *blen = xmalloc((size_t)bs * sizeof(int)), *bmax = xmalloc((size_t)bs * sizeof(int));
        long *bidx = xmalloc((size_t)bs * sizeof(long));
        NBest *bout = xmalloc((size_t)bs * sizeof *bout);
        #pragma omp for schedule(dynamic, 1)
        for (int bi = 0; bi < nbatch; bi++) {
            /* the longest batch first: the buffers grow to their size once (no
             * page faults after), and the shortest come last, to even the threads */
            int b = nbatch - 1 - bi, b0 = b * bs, nb = nz - b0 < bs ? nz - b0 : bs, failed;
            #pragma omp atomic read
            failed = rc;
            if (failed) continue;
            for (int j = 0; j < nb; j++) {
                int i = order[b0 + j].idx;
                bsrc[j] = src[i];
                blen[j] = src_len[i];
                bmax[j] = decode_max_len(o, src_len[i], maxp);
                bidx[j] = o->index_base + i;
            }
            int bad = 0;
            for (int k = 0; k < tr->n; k++) decoder_encode(&e.d[k], nb, bsrc, blen);
            if (tr->sl) {   /* the batch's candidates: the search sees C columns, token cand[c] each */
                batch_candidates(&bc, tr->sl, nb, bsrc, blen, tr->sl_count);
                for (int k = 0; k < tr->n; k++) bad |= decoder_shortlist(&e.d[k], &bc, nb, o->sample ? 1 : o->beam) < 0;
                e.V = f.vocab = bc.C;
                f.ids = bc.ids;
                if (bad) for (int j = 0; j < nb; j++) bout[j] = (NBest){0};
            }
            if (bad || decode_search(&f, nb, bmax, bidx, o, bout) < 0) {
                #pragma omp critical(translate_error)
                {
                    if (!rc) snprintf(err, sizeof err, "%s", error_message());
                    rc = -1;
                }
                for (int j = 0; j < nb; j++) nbest_free(&bout[j]);
                continue;
            }
            for (int j = 0; j < nb; j++) out[order[b0 + j].idx] = bout[j];
        }
        for (int k = 0; k < tr->n; k++) decoder_free(&e.d[k]);
        free(e.d); free(e.s); batch_candidates_free(&bc);
        free(bsrc); free(blen); free(bmax); free(bidx); free(bout);
    }
    free(order);
    if (rc < 0) {
        for (int i = 0; i < n; i++) nbest_free(&out[i]);
        return errorf("%s", err);
    }
    return 0;
}

/* Column of token w among the C ascending candidate ids, or -1. */
static int candidate_column(const int *ids, int C, int w) {
    int lo = 0, hi = C - 1;
    while (lo <= hi) {
        int mid = (lo + hi) / 2;
        if (ids[mid] == w) return mid;
        if (ids[mid] < w) lo = mid + 1; else hi = mid - 1;
    }
    return -1;
}

int decode_force(const Model *m, const Shortlist *sl, int n, const int *const *src, const int *src_len,
                 const int *const *tgt, const int *tgt_len, float *const *logp) {
    int V = m->dims.vocab, T = 0, rc = 0;
    for (int s = 0; s < n; s++) {
        if (src_len[s] + 1 > m->dims.max_positions || tgt_len[s] + 1 > m->dims.max_positions)
            return errorf("decode_force: pair %d is longer than max_positions %d", s + 1, m->dims.max_positions);
        T = tgt_len[s] > T ? tgt_len[s] : T;
    }
    Translator *tr = translator_new(m, 1);
    Decoder d;
    decoder_init(&d, &tr->p[0]);
    decoder_encode(&d, n, src, src_len);
    BatchCandidates bc = {0};
    int W = V;
    if (sl) {   /* one batch: the candidates of all n sources */
        if (shortlist_vocab(sl) != V) rc = errorf("decode_force: a shortlist of vocabulary %d, the model has %d", shortlist_vocab(sl), V);
        if (!rc) batch_candidates(&bc, sl, n, src, src_len, NULL);
        if (!rc && decoder_shortlist(&d, &bc, n, 1)) rc = -1;
        W = bc.C;
    }
    int *sent = xmalloc((size_t)(n ? n : 1) * sizeof(int)), *parent = xmalloc((size_t)(n ? n : 1) * sizeof(int));
    int *tok = xmalloc((size_t)(n ? n : 1) * sizeof(int)), *prev_row = xmalloc((size_t)(n ? n : 1) * sizeof(int));
    for (int t = 0; t <= T && rc == 0; t++) {
        int rows = 0;
        for (int s = 0; s < n; s++) {
            if (tgt_len[s] < t) continue;
            sent[rows] = s;
            parent[rows] = t ? prev_row[s] : -1;
            tok[rows] = t ? tgt[s][t - 1] : TOK_BOS;
            prev_row[s] = rows++;
        }
        const float *lse;
        const float *out = decoder_step(&d, t, rows, sent, parent, tok, &lse);
        if (!out) { rc = -1; break; }
        for (int r = 0; r < rows; r++) {
            int s = sent[r], w = t < tgt_len[s] ? tgt[s][t] : TOK_EOS, c = sl ? candidate_column(bc.ids, bc.C, w) : w;
            logp[s][t] = c < 0 ? -INFINITY : out[(size_t)r * W + c] - lse[r];   /* not a candidate: p = 0 */
        }
    }
    batch_candidates_free(&bc);
    decoder_free(&d);
    translator_free(tr);
    free(sent); free(parent); free(tok); free(prev_row);
    return rc;
}

char *decode_output_text(const Bpe *bpe, const int *ids, int n) {
    char *s = bpe_decode(bpe, ids, n);   /* valid UTF-8 already */
    if (!s) return xstrdup("");
    for (char *p = s; *p; p++)           /* ASCII: never inside a multi-byte character */
        if (*p == '\n' || *p == '\r' || *p == '\t') *p = ' ';
    return s;
}

int encode_source_line(const Bpe *bpe, const Model *m, const char *line, size_t len, long line_no,
                       int **ids, int *cap, int *warned_utf8) {
    int bad = 0;
    int n = bpe_encode(bpe, line, len, ids, cap, &bad);
    if (n < 0) return -1;
    if (bad && !*warned_utf8) {
        log_warn("line %ld: invalid UTF-8 replaced by U+FFFD (further such lines are not reported)", line_no);
        *warned_utf8 = 1;
    }
    int maxn = m->dims.max_positions - 1;   /* room for EOS */
    if (n > maxn) {
        log_warn("line %ld: %d tokens, longer than the model's %d positions: truncated to %d tokens",
                 line_no, n, m->dims.max_positions, maxn);
        n = maxn;
    }
    return n;
}

char **translator_lines(const Translator *t, const Bpe *bpe, const DecodeOptions *o,
                        const char *const *lines, int n) {
    const Model *m = t->p[0].m;
    int **src = xcalloc((size_t)(n ? n : 1), sizeof *src), *len = xcalloc((size_t)(n ? n : 1), sizeof(int));
    NBest *nb = xcalloc((size_t)(n ? n : 1), sizeof *nb);
    int warned = 0, ok = 1;
    for (int i = 0; i < n && ok; i++) {
        int cap = 0;
        len[i] = encode_source_line(bpe, m, lines[i], strlen(lines[i]), i + 1, &src[i], &cap, &warned);
        if (len[i] < 0) { ok = 0; len[i] = 0; }
        if (len[i] > t->max_positions - 1) len[i] = t->max_positions - 1;   /* an ensemble's shortest */
    }
    char **out = NULL;
    if (ok && translator_ids(t, o, n, (const int *const *)src, len, nb) == 0) {
        out = xmalloc((size_t)(n ? n : 1) * sizeof *out);
        for (int i = 0; i < n; i++) {
            out[i] = decode_output_text(bpe, nb[i].hyps[0].tokens, nb[i].hyps[0].len);
            nbest_free(&nb[i]);
        }
    }
    for (int i = 0; i < n; i++) free(src[i]);
    free(src); free(len); free(nb);
    return out;
}

void translate_free_lines(char **out, int n) {
    if (!out) return;
    for (int i = 0; i < n; i++) free(out[i]);
    free(out);
}
