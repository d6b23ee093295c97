/* checkpoint.h — tfm checkpoints: a model, its config and tokenizer (and,
 * for training, its optimizer state) in one safetensors file
 * (safetensors.h); loading them back, checked; averaging them (tfm average).
 * The run directory that holds a run's checkpoints: rundir.h.
 */
#ifndef TFM_CHECKPOINT_H
#define TFM_CHECKPOINT_H

#include <stddef.h>
#include <stdint.h>

#include "bpe.h"
#include "config.h"
#include "model.h"
#include "safetensors.h"

/* ---- tfm checkpoints --------------------------------------------------- */
/* The sums of the log interval in progress (train.tsv's next row): kept in
 * the training state so that a resumed run logs the rows an uninterrupted
 * one would. Metadata "log_steps" "log_tokens" "log_real_tokens" "log_loss"
 * "log_nll" "log_seconds" (doubles as %.17g: exact); absent in older files
 * (zeros). */
typedef struct {
    long steps, tokens, real_tokens;   /* updates, target tokens, source + target tokens */
    double loss, nll, seconds;         /* summed over the target tokens; seconds in updates */
} LogWindow;

/* Training state beyond the weights (NULL in a model-only file). */
typedef struct {
    long step;              /* updates done */
    int epoch;              /* current epoch (0-based) */
    long batch_index;       /* next batch within the epoch's order */
    uint64_t rng_state;     /* dropout/shuffle RNG */
    float *adam_m, *adam_v; /* [num_params] each */
    double best_valid;      /* best validation NLL so far (for early stopping) */
    int bad_valids;         /* validations without improvement */
    double elapsed;         /* training seconds so far */
    int ranks;              /* processes that trained it (mpirun -np); 1 if absent */
    LogWindow log;          /* the log interval in progress */
    /* checkpoint_save with adam_m and adam_v NULL: the moments made as they
     * are written, by moments_fill (moments_ctx[0]: adam_m's bytes, [1]:
     * adam_v's; StFill), e.g. gathered from the ranks' slices (train.c) */
    StFill moments_fill;
    void *moments_ctx[2];
} TrainState;

/* Write a model (and, if ts != NULL, its training state), atomically.
 * Tensors: the model's parameters under their fairseq names (model_tensor_table),
 * F32; with ts, also "optimizer.adam_m" and "optimizer.adam_v" [num_params]
 * (from ts->adam_m/adam_v, or ts->moments_fill where those are NULL).
 * Metadata: "format" = "tfm-checkpoint-1", "config" (the effective config
 * as INI text), "tokenizer" (bpe_to_string), "vocab", "pad_id" "unk_id"
 * "bos_id" "eos_id", "source_format" "decoder_input" "decoder_target",
 * the model's shape and conventions (d_model, d_ff, heads, layers,
 * max_positions, norm, embedding_scale, positions(_formula), layer_norm_eps,
 * activation, attention, linear_layout, tie_embeddings, shared_embeddings,
 * num_params); with ts: "step" "epoch" "batch_index" "rng_state" (decimal
 * u64) "best_valid" (%.17g) "bad_valids" "elapsed" "ranks" "log_*" (checkpoint.c's TRAIN_STATE table). Refuses a model with a
 * non-finite parameter or a config/tokenizer that does not match it. */
int checkpoint_save(const char *path, const Model *m, const Config *c, const Bpe *bpe, const TrainState *ts);
/* Load a checkpoint: config, tokenizer and a model built from them
 * (model_alloc, then every tensor copied in after checking that the file holds
 * exactly the tensors the config implies, with the right shapes and dtype, and
 * that the tokenizer's vocabulary matches the embedding). If ts != NULL: a
 * training checkpoint fills it (moments allocated with xaligned, free() them);
 * a model-only file zeroes it (ts->adam_m == NULL), which is not an error.
 * Any of c, bpe, m, ts may be NULL to skip. On error nothing is left
 * allocated and the message names the file. */
int checkpoint_load(const char *path, Config *c, Bpe **bpe, Model *m, TrainState *ts);
/* The training state with only the slice [lo, hi) of the Adam moments
 * (ZeRO-1 at resume, train.c: each rank reads its own slice of the flat
 * parameters' moments from the file, never the whole): ts->adam_m and
 * adam_v hold hi - lo floats, the moments of parameters lo..hi-1; num_params
 * is the model's (checkpoint_load it first: the weights, config and
 * tokenizer checked there). The moments' checksums are the whole tensors',
 * so the slice's are left in *part, unchecked: checkpoint_moments_check
 * over every rank's parts checks them. 1 with a state, 0 for a model-only
 * file (*ts zeroed), -1 + errorf. */
typedef struct {
    size_t lo, hi;        /* the slice, in floats */
    size_t total;         /* the moments' length: num_params */
    uint32_t crc[2];      /* CRC-32C of the slice's bytes of adam_m, adam_v */
    uint32_t want[2];     /* the whole tensors' CRC-32C, as the file records them */
    int has_crc;          /* the file records checksums */
} MomentSlice;
int checkpoint_load_state(const char *path, size_t num_params, size_t lo, size_t hi, TrainState *ts, MomentSlice *part);
/* parts[0..n), in order, must cover [0, total) end to end; their
 * checksums joined (crc32c_combine) must be the file's: 0, or -1 + errorf
 * naming the file and the tensor. Every rank gets the same answer from the
 * same parts (train.c gathers them). */
int checkpoint_moments_check(const char *path, const MomentSlice *parts, int n);
/* What checkpoint_load(path, &c, &bpe, &m, &ts) checks, keeping nothing:
 * the file, its config and tokenizer, every tensor present with its shape
 * and checksum, the weights finite, the training state's metadata; the
 * tensors read a 64 KB piece at a time and the file's pages given back as
 * they are read, so its memory is a few pages whatever the model (loading a
 * base-model training checkpoint whole took 1.5 GB: weights, moments and the
 * mapped file). 1 if the file holds a training state, 0 if it is model-only,
 * -1 + errorf (the same message checkpoint_load gives). */
int checkpoint_verify(const char *path);
/* A tokenizer from a BPE model file (bpe_load) or from the "tokenizer"
 * metadata of a safetensors file (any tfm checkpoint). NULL + errorf. */
Bpe *tokenizer_load(const char *path);

/* ---- averaging (tfm average) ------------------------------------------ */
/* Element-wise mean, accumulated in double, of the model tensors of
 * inputs[0..n) (every tensor except "optimizer.*"). Refuses inputs that are
 * not tfm checkpoints or whose tensor names/shapes, model config
 * (config_same_model) or tokenizer differ, naming the two files and the
 * difference, and any non-finite value. Writes a model-only checkpoint to
 * `out` with the metadata of inputs[n-1] (the newest), without training-state
 * keys, plus "averaged_from": a JSON array of the input paths. `out` is
 * opened (atomic_open) before the first input is read, so an unwritable
 * output fails first and a signal while averaging removes its temporary. */
int checkpoint_average(const char *const *inputs, int n, const char *out);

#endif
