/* checkpoint.h — safetensors files: models, training state, averaging.
 *
 * Format (https://github.com/huggingface/safetensors): 8-byte little-endian
 * header length N, N bytes of JSON header
 *   {"__metadata__": {"k": "v", ...}, "name": {"dtype": "F32", "shape": [..],
 *    "data_offsets": [begin, end]}, ...}
 * then the raw little-endian tensor bytes. Writes are atomic (temp file,
 * fsync, rename). Reads check everything and never crash on a bad file.
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
} StTensor;

typedef struct {
    StTensor *tensors; int num_tensors;
    char **meta_keys, **meta_values; int num_meta;
    void *blob;        /* whole file */
    size_t blob_len;
} SafeTensors;

int st_write(const char *path, const StTensor *t, int n,
             const char *const *meta_keys, const char *const *meta_values, int nmeta);
int st_read(const char *path, SafeTensors *out);     /* -1 + errorf naming the problem */
const StTensor *st_find(const SafeTensors *st, const char *name);
const char *st_meta(const SafeTensors *st, const char *key);
void st_free(SafeTensors *st);

/* ---- tfm checkpoints --------------------------------------------------- */
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
} TrainState;

/* Write a model (and, if ts != NULL, its training state). Metadata holds the
 * effective config (INI text), the tokenizer (BPE model text), the special
 * token ids and how source / decoder input are formed. */
int checkpoint_save(const char *path, const Model *m, const Config *c, const Bpe *bpe, const TrainState *ts);
/* Load a checkpoint: config, tokenizer and a model initialised from it. If
 * ts != NULL and the file holds training state, fill it (allocating moments).
 * Any of c, bpe, m, ts may be NULL to skip. */
int checkpoint_load(const char *path, Config *c, Bpe **bpe, Model *m, TrainState *ts);

#endif
