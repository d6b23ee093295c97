/* checkpoint.h — safetensors files: models, training state, averaging.
 *
 * Format (https://github.com/huggingface/safetensors): 8-byte little-endian
 * header length N, N bytes of JSON header
 *   {"__metadata__": {"k": "v", ...}, "name": {"dtype": "F32", "shape": [..],
 *    "data_offsets": [begin, end]}, ...}
 * then the raw little-endian tensor bytes. Writes are atomic (temp file,
 * fsync, rename). Reads check everything and never crash on a bad file.
 *
 * Integrity: st_write adds the metadata "crc32c", a JSON object (as a string,
 * metadata values are strings) mapping every tensor name to the CRC-32C of
 * its bytes (crc32c.h), and "__metadata__" to the CRC-32C of the other
 * metadata (each key and value with a NUL after it, keys in byte order),
 * as 8 lowercase hex digits:
 *   "crc32c": "{\"__metadata__\":\"1c291ca3\",\"encoder.embed_tokens.weight\":\"e3069283\",...}"
 * st_read checks the metadata's; a tensor's bytes are checked where they are
 * used (st_tensor_copy, st_tensor_verify), so a corrupt byte is an error that
 * names the file and the tensor. A file without "crc32c" (another tool, a tfm
 * before it) loads with a one-line notice that its data cannot be verified.
 */
#ifndef TFM_CHECKPOINT_H
#define TFM_CHECKPOINT_H

#include <stddef.h>
#include <stdint.h>

#include "bpe.h"
#include "config.h"
#include "model.h"

/* ---- generic safetensors --------------------------------------------- */
typedef enum { ST_F32, ST_I64, ST_U8 } StDtype;

typedef struct {
    char *name;
    StDtype dtype;
    int ndim;
    int64_t shape[4];
    void *data;        /* points into the file's blob when read */
    size_t nbytes;
    uint32_t crc;      /* read: the CRC-32C the file records for it, if has_crc */
    int has_crc;
} StTensor;

typedef struct {
    StTensor *tensors; int num_tensors;
    char **meta_keys, **meta_values; int num_meta;
    int has_crc;       /* the file records checksums (then every tensor has one) */
    void *blob;        /* whole file */
    size_t blob_len;
} SafeTensors;

/* Write tensors t[0..n) (in that order, packed) and the metadata pairs.
 * Atomic: writes PATH.tmp.<pid> in the same directory, fsyncs it, renames it
 * over PATH and fsyncs the directory, so PATH is always either the old or the
 * new complete file (a crash leaves at most a stale .tmp.<pid> file beside
 * it). Every write is checked: on failure (disk full, ...) the temp file is
 * removed and -1 + errorf names PATH and the reason. Names and metadata must
 * be valid UTF-8; the header is padded with spaces to a multiple of 8 so the
 * data starts 8-byte aligned. */
int st_write(const char *path, const StTensor *t, int n,
             const char *const *meta_keys, const char *const *meta_values, int nmeta);
/* Read and validate a whole file (mapped read-only). Checks: length, header
 * size (at most ST_MAX_HEADER), JSON syntax, dtypes, shapes, offsets in range
 * and matching shape x dtype size, tensors covering the data region exactly
 * (no overlap, no gap, no trailing bytes), unique names, string metadata.
 * -1 + errorf("PATH: ...") naming the problem; never crashes on bad input.
 * Tensors keep the header's order. t->data may be unaligned for files written
 * by other tools: copy with memcpy. */
int st_read(const char *path, SafeTensors *out);
const StTensor *st_find(const SafeTensors *st, const char *name);
/* Copy t's bytes to dst (t->nbytes), checking their CRC-32C on the way (in
 * 64 KB pieces, while they are in cache: the check costs no second pass over
 * memory). -1 + errorf("PATH: tensor 'NAME': ...checksum...") on a mismatch. */
int st_tensor_copy(const char *path, const StTensor *t, void *dst);
/* The same check without a copy. */
int st_tensor_verify(const char *path, const StTensor *t);
/* 1 (always, in tfm): the two above check the checksums. 0 only for the
 * baseline of dev/bench_load.c (the cost of checking, side by side). */
extern int st_verify_crc;
/* st_write's metadata key for the checksums; a caller's pair of that name
 * (copied from a file read) is dropped: st_write writes new ones. */
#define ST_CRC_KEY "crc32c"
const char *st_meta(const SafeTensors *st, const char *key);
void st_free(SafeTensors *st);
const char *st_dtype_name(StDtype d);   /* "F32", "I64", "U8" */
size_t st_dtype_size(StDtype d);        /* 4, 8, 1 */
#define ST_MAX_HEADER 100000000         /* the safetensors library's limit */

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
} TrainState;

/* Write a model (and, if ts != NULL, its training state), atomically.
 * Tensors: the model's parameters under their fairseq names (model_tensor_table),
 * F32; with ts, also "optimizer.adam_m" and "optimizer.adam_v" [num_params].
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
/* A tokenizer from a BPE model file (bpe_load) or from the "tokenizer"
 * metadata of a safetensors file (any tfm checkpoint). NULL + errorf. */
Bpe *tokenizer_load(const char *path);

/* ---- the run directory -------------------------------------------------
 * One training run ([train] dir) holds:
 *   checkpoint-<step, zero-padded to 8 digits>.safetensors
 *                        training checkpoints (weights + Adam + position),
 *                        e.g. checkpoint-00012000.safetensors
 *   best.safetensors     the model with the best validation score
 *   average.safetensors  the average of the last checkpoints (tfm average)
 * All are written with st_write, so none is ever half-written. */
#define CHECKPOINT_BEST "best.safetensors"
#define CHECKPOINT_AVERAGE "average.safetensors"
/* RUN_DIR/checkpoint-%08ld.safetensors, malloc'd. */
char *checkpoint_path(const char *run_dir, long step);
/* RUN_DIR/NAME (e.g. CHECKPOINT_BEST), malloc'd. */
char *checkpoint_run_file(const char *run_dir, const char *name);
/* The step in a training checkpoint's file name, or -1 if `path` is not one. */
long checkpoint_step(const char *path);
/* The training checkpoints in run_dir, sorted by step (oldest first; the
 * latest, for resume, is (*paths)[n-1]). Returns n (0 if run_dir does not
 * exist), or -1 + errorf. Free with checkpoint_list_free. */
int checkpoint_list(const char *run_dir, char ***paths);
void checkpoint_list_free(char **paths, int n);
/* 0 if `path` is a training checkpoint that loads whole (checkpoint_load:
 * the file, its config and tokenizer, every weight, the training state),
 * else -1 + errorf. Checked, never guessed from the name. */
int checkpoint_check(const char *path);
/* A checkpoint that does not load: renamed to PATH.corrupt, with a warning
 * naming both and `why`; never deleted, never averaged. -1 + errorf if the
 * rename fails. */
int checkpoint_set_aside(const char *path, const char *why);
/* Keep the newest `keep` training checkpoints that load and delete the
 * older ones. `current` (the checkpoint this run has just written; NULL:
 * none) is never deleted and counts as one of them. A newer checkpoint that
 * does not load is set aside, not counted: a damaged file never makes a good
 * one go. Returns the number deleted, or -1 + errorf. */
int checkpoint_prune(const char *run_dir, int keep, const char *current);
/* The newest `want` training checkpoints that load (want < 0: all), oldest
 * first; those that do not load on the way are set aside. Returns the count
 * (free with checkpoint_list_free), or -1 + errorf. */
int checkpoint_list_good(const char *run_dir, int want, char ***paths);
/* Remove the temporary files (NAME.tmp.<pid>) of every kind that processes
 * no longer running left in run_dir (an interrupted checkpoint, corpus cache
 * or log rewrite); with `only`, just ONLY.tmp.<pid> (the BPE model, which
 * may live elsewhere). tfm train calls it at the start. Returns the count. */
int run_dir_clean(const char *run_dir, const char *only);
/* One trainer per run directory: checks that run_dir is a directory tfm can
 * write in (before any work), then takes an exclusive lock on
 * RUN_DIR/train.lock (fcntl: it goes with the process, kill -9 included, so
 * nothing stale is left) and writes its PID there. Returns the lock's file
 * descriptor (keep it open while training), or -1 + errorf naming the
 * directory, or the PID of the process that holds the lock. */
int run_dir_lock(const char *run_dir);
#define RUN_DIR_LOCK "train.lock"

/* ---- averaging (tfm average) ------------------------------------------ */
/* Element-wise mean, accumulated in double, of the model tensors of
 * inputs[0..n) (every tensor except "optimizer.*"). Refuses inputs that are
 * not tfm checkpoints or whose tensor names/shapes, model config
 * (config_same_model) or tokenizer differ, naming the two files and the
 * difference, and any non-finite value. Writes a model-only checkpoint to
 * `out` with the metadata of inputs[n-1] (the newest), without training-state
 * keys, plus "averaged_from": a JSON array of the input paths. */
int checkpoint_average(const char *const *inputs, int n, const char *out);

#endif
