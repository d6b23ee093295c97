/* model.h — the Transformer of "Attention Is All You Need" (Vaswani et al.
 * 2017), section 3: an encoder-decoder of N layers each, multi-head
 * attention, position-wise FFN, residual connections + LayerNorm, sinusoidal
 * positions, shared embeddings, hand-written backprop.
 *
 * Layout in the llm.c way: every parameter lives in one contiguous float
 * buffer; ParameterTensors holds named pointers into it. The gradients (and
 * Adam's moments) are twin buffers with the same layout. The order and names
 * of the tensors are fairseq's (see model_tensor_table), so a checkpoint is a
 * fairseq-style state dict in safetensors form.
 *
 * Shapes: B sentences, S source positions, T target positions, D = d_model,
 * F = d_ff, H heads of Dk = D/H, V = vocabulary. Linear weights are stored
 * [out_features, in_features] as torch.nn.Linear does: y = x W^T + b.
 */
#ifndef TFM_MODEL_H
#define TFM_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "config.h"
#include "modeldefs.h"
#include "util.h"

/* ---- hyperparameters the model needs (from Config + tokenizer) ------- */
typedef struct {
    int vocab;                  /* V: shared BPE vocabulary */
    int d_model, d_ff, heads;   /* D, F, H */
    int enc_layers, dec_layers;
    int max_positions;
    int pre_norm;               /* 0: post-LN (paper), 1: pre-LN + final LN per stack */
    float dropout, attention_dropout, relu_dropout, label_smoothing;
} ModelDims;

ModelDims model_dims_from_config(const Config *c, int vocab);

/* ---- parameters ------------------------------------------------------ */
typedef struct {            /* multi-head attention, section 3.2.2 */
    float *q_w, *q_b;       /* [D, D], [D]  W^Q for all heads stacked */
    float *k_w, *k_b;       /* [D, D], [D]  W^K */
    float *v_w, *v_b;       /* [D, D], [D]  W^V */
    float *o_w, *o_b;       /* [D, D], [D]  W^O */
} AttentionParams;

typedef struct { float *w, *b; } LayerNormParams;   /* gamma [D], beta [D] */

typedef struct {            /* FFN(x) = max(0, x W1 + b1) W2 + b2, section 3.3 */
    float *fc1_w, *fc1_b;   /* [F, D], [F] */
    float *fc2_w, *fc2_b;   /* [D, F], [D] */
} FeedForwardParams;

typedef struct {
    AttentionParams self_attn;
    LayerNormParams self_attn_ln;
    FeedForwardParams ffn;
    LayerNormParams final_ln;
} EncoderLayerParams;

typedef struct {
    AttentionParams self_attn;      /* masked (causal) */
    LayerNormParams self_attn_ln;
    AttentionParams encoder_attn;   /* Q from decoder, K/V from encoder output */
    LayerNormParams encoder_attn_ln;
    FeedForwardParams ffn;
    LayerNormParams final_ln;
} DecoderLayerParams;

typedef struct {
    float *embed;                   /* [V, D] shared: src emb, tgt emb, pre-softmax W */
    EncoderLayerParams *enc;        /* [enc_layers] */
    DecoderLayerParams *dec;        /* [dec_layers] */
    LayerNormParams enc_ln, dec_ln; /* final LayerNorms, pre-norm only (NULL otherwise) */
} ParameterTensors;

/* How model_init fills a tensor (see model.c). */
typedef enum { INIT_EMBEDDING, INIT_XAVIER, INIT_ZERO, INIT_ONE } TensorInit;

/* One row of the tensor table: fairseq name, shape, offset into the buffer,
 * initialisation. */
typedef struct {
    char name[80];
    int ndim;
    int shape[2];
    size_t offset;   /* in floats, into the parameter buffer */
    size_t size;     /* in floats */
    TensorInit init;
} TensorInfo;

/* Build the table of tensors for dims (names as fairseq's transformer):
 *   encoder.embed_tokens.weight [V, D]
 *   encoder.layers.{i}.self_attn.{q,k,v,out}_proj.{weight,bias}
 *   encoder.layers.{i}.self_attn_layer_norm.{weight,bias}
 *   encoder.layers.{i}.fc1.{weight,bias}, .fc2.{weight,bias}
 *   encoder.layers.{i}.final_layer_norm.{weight,bias}
 *   decoder.layers.{i}.self_attn.*, self_attn_layer_norm.*, encoder_attn.*,
 *     encoder_attn_layer_norm.*, fc1.*, fc2.*, final_layer_norm.*
 *   encoder.layer_norm.*, decoder.layer_norm.*   (pre-norm only)
 * Returns the number of tensors; *table is malloc'd. *total = floats. */
int model_tensor_table(const ModelDims *d, TensorInfo **table, size_t *total);
size_t model_param_count(const ModelDims *d);
/* Point the named pointers of p into buf (laid out by the table; the same walk). */
void model_point_parameters(const ModelDims *d, ParameterTensors *p, float *buf);

/* ---- a batch, as the data pipeline builds it ------------------------- */
/* Source rows: x_1 .. x_n EOS, then PAD. Decoder input: BOS y_1 .. y_m, then
 * PAD. Decoder target: y_1 .. y_m EOS, then PAD. Token ids: bpe.h. */
typedef struct {
    int B, S, T;            /* sentences, padded source / target lengths */
    int *src;               /* [B, S] */
    int *tgt_in;            /* [B, T] */
    int *tgt_out;           /* [B, T] */
    int *src_len, *tgt_len; /* [B] non-pad lengths (incl. EOS) */
    long src_tokens, tgt_tokens;
} Batch;

/* Sums over the non-pad target tokens of a batch. The model functions ADD
 * to the LossStats they are given (zero it to start a sum). */
typedef struct {
    double loss;     /* label-smoothed cross-entropy, summed */
    double nll;      /* plain -log p(y_t), summed */
    long tokens;     /* target tokens counted */
} LossStats;

/* ---- the model ------------------------------------------------------- */
typedef struct ModelActivations ModelActivations;   /* private to model.c */

typedef struct {
    ModelDims dims;
    TensorInfo *tensors;
    int num_tensors;
    size_t num_params;
    float *params;           /* one buffer, num_params floats */
    ParameterTensors p;
    float *grads;            /* twin buffer, same layout; NULL until model_zero_grad */
    ParameterTensors g;
    ModelActivations *acts;  /* planned once per batch shape, reused */
    float *pos_enc;          /* [max_positions, D] sinusoids, section 3.5 */
    int bf16;                /* 1: matrix products in bf16 (model_set_precision) */
    int int8;                /* 1: translate with int8 products (decode.c; training and scoring stay fp32) */
    int recompute;           /* 1: the backward remakes what the forward would keep (model.c, activations) */
    float *params_bf16;      /* bf16: params rounded to bf16, what the products read (emulated route, no recompute) */
    uint16_t *params_b16;    /* bf16 through oneDNN: the same as 16-bit values (gemm_dnnl_shadow) */
    int params_bf16_stale;   /* params changed since params_bf16 was made */
} Model;

/* Allocate the parameters (uninitialised: checkpoint_load fills them); -1
 * with the error set on impossible dimensions. The gradients come with the
 * first model_zero_grad, so a model that only translates or scores never
 * holds them (a parameter-sized buffer: 241 MiB on the base model). */
int model_alloc(Model *m, const ModelDims *d);
/* model_alloc's check of the dimensions alone: 0, or -1 + errorf. */
int model_dims_check(const ModelDims *d);
/* model_alloc, then initialise the weights with `seed`
 * (Xavier-uniform projections, N(0, D^-0.5) embeddings, zero biases,
 * LayerNorm gamma 1, beta 0). */
int model_init(Model *m, const ModelDims *d, uint64_t seed);
void model_free(Model *m);
/* Free the parameter and gradient buffers (m->params = NULL) of a model that
 * only a Translator that owns its weights reads from now on (packed or
 * int8: it keeps copies of what it needs, decode.h translator_owns_weights):
 * `tfm translate` then holds no second copy of the weights. Nothing else may
 * use the model's parameters afterwards. */
void model_release_params(Model *m);
/* Zero the gradients (the first call allocates them, zeroed). */
void model_zero_grad(Model *m);

/* Precision of the matrix products (gemm_bf16.h): bf16 = 0 fp32, 1 bf16:
 * every product of a linear layer and of the output layer (forward and
 * backward) takes its inputs rounded to bf16 and sums in fp32; the
 * parameters (master weights), their gradients, LayerNorm, softmax,
 * attention, the loss and every reduction stay fp32. The weights are
 * rounded into params_bf16 once per change of the parameters (on the AMX
 * and kernel routes tfm's kernels round m->params as they pack it, and so
 * does each emulated product with recompute: no copy, model.c): after
 * writing m->params (an update, a load), call model_params_changed, and the
 * next forward rounds (or packs) them again. Checkpoints hold the fp32
 * parameters either way. */
/* precision is a Precision (util.h); PREC_INT8 sets m->int8, which only
 * the Translator reads (decode.h): the model's own forward/backward then
 * run in fp32. */
void model_set_precision(Model *m, int precision);
void model_params_changed(Model *m);
/* For an optimizer that writes the bf16 copies while it updates the
 * parameters (adam_update_fused): *f, *h = the buffers to fill (NULL when
 * the model is fp32, or has no 16-bit twin), and the copies count as fresh
 * from now on: the caller must fill them in this update. */
void model_bf16_copies(Model *m, float **f, uint16_t **h);
/* Round params[lo, hi) into the bf16 copies (nothing in fp32): the same
 * bits as adam_update_fused's rounding. For a sharded optimizer step
 * (dist.h), whose update rounds only the rank's own slice: the other slices
 * arrive by the all-gather and are rounded here. */
void model_bf16_round(Model *m, size_t lo, size_t hi);

/* bf16 on the wire: a sharded optimizer step (dist.h) with bf16 products
 * all-gathers params[lo, hi) packed, the product weights (every linear
 * layer's W, which the model reads only as bf16) as their bf16 values and
 * the rest (biases, LayerNorm, the embedding, read as fp32) as fp32:
 * model_wire_bytes bytes, written by model_wire_pack. model_wire_unpack
 * writes a packed slice into the bf16 copies and into params, whose product
 * weights then hold their bf16 values, not the fp32 masters: the model
 * computes the same as with the fp32 weights (its products round them to
 * the same values), but the weights must be all-gathered in fp32 before
 * anything reads them as fp32 (a checkpoint, validation). */
size_t model_wire_bytes(const Model *m, size_t lo, size_t hi);
void model_wire_pack(const Model *m, size_t lo, size_t hi, void *out);
void model_wire_unpack(Model *m, size_t lo, size_t hi, const void *in);

/* Forward and backward on one batch. Adds grad_scale * d(loss)/d(params) to
 * m->grads (the caller zeroes them per update, model_zero_grad, which must
 * have run once: else -1; with accumulation the caller
 * passes 1/total target tokens of the update). Dropout uses rng when
 * training is 1; training 0 turns dropout off. Returns 0, or -1 + errorf. */
int model_forward_backward(Model *m, const Batch *b, Rng *rng, int training,
                           float grad_scale, LossStats *stats);
/* Forward only, dropout off: loss/NLL sums (for validation and eval). */
int model_forward(Model *m, const Batch *b, LossStats *stats);
/* Forward only, dropout off: logprob[b*T + t] = log p(tgt_out[b,t] | ...)
 * for every non-pad position, 0 at pads (for tests and rescoring). */
int model_score(Model *m, const Batch *b, float *logprob);

#endif
