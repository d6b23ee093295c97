/* checkpoint.c — tfm checkpoints on top of safetensors files, and
 * checkpoint averaging (tfm average). See checkpoint.h for the format. */
#include "checkpoint.h"
#include "crc32c.h"
#include "text.h"
#include "json.h"
#include "util.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* ---- tfm checkpoints ----------------------------------------------------- */
#define CHECKPOINT_FORMAT "tfm-checkpoint-1"

static void shape_text(const StTensor *t, char *buf, size_t n) {
    size_t k = (size_t)snprintf(buf, n, "[");
    for (int d = 0; d < t->ndim && k < n; d++) k += (size_t)snprintf(buf + k, n - k, "%s%lld", d ? ", " : "", (long long)t->shape[d]);
    if (k < n) snprintf(buf + k, n - k, "]");
}

/* A tfm checkpoint's format and config, parsed. */
static int read_tfm_header(const char *path, const SafeTensors *st, Config *c) {
    const char *fmt = st_meta(st, "format");
    if (!fmt || strcmp(fmt, CHECKPOINT_FORMAT))
        return errorf("%s: not a tfm checkpoint (metadata \"format\" is %s%s%s, expected \"%s\")", path,
                      fmt ? "\"" : "", fmt ? fmt : "missing", fmt ? "\"" : "", CHECKPOINT_FORMAT);
    const char *text = st_meta(st, "config");
    if (!text) return errorf("%s: no \"config\" in the metadata", path);
    char name[1100];
    snprintf(name, sizeof name, "%s [config]", path);
    return config_load_string(c, text, name);
}

/* ---- the training state: one table for the writer, the reader and the
 * validator. Each key is a field of TrainState, written as decimal text in
 * the metadata and read back with parse_number / parse_u64; the range is
 * what the field can mean (the config's own limits where a key mirrors one):
 * a state outside it is refused on save and on load, naming the key. */
typedef enum { TS_LONG, TS_INT, TS_U64, TS_DOUBLE } TsType;
static const struct {
    const char *key;
    TsType type;
    size_t offset;
    double min, max;     /* TS_U64: min only (the rest of the 64 bits is fine) */
    int optional;        /* absent in older files: then `min` */
    const char *meaning;
} TRAIN_STATE[] = {
    {"step", TS_LONG, offsetof(TrainState, step), 0, 1e15, 0, "updates done ([train] max_steps is at most 1e15)"},
    {"epoch", TS_INT, offsetof(TrainState, epoch), 0, 1 << 30, 0, "the current epoch, 0-based ([train] max_epochs is at most 2^30)"},
    {"batch_index", TS_LONG, offsetof(TrainState, batch_index), 0, 1e15, 0,
     "the next batch of the epoch (checked against the epoch's batches on resume)"},
    {"rng_state", TS_U64, offsetof(TrainState, rng_state), 1, 0, 0,
     "the dropout RNG's state (xorshift: 0 would draw the same mask forever)"},
    {"best_valid", TS_DOUBLE, offsetof(TrainState, best_valid), 0, INFINITY, 0,
     "the best validation NLL (>= 0, inf before any validation)"},
    {"bad_valids", TS_INT, offsetof(TrainState, bad_valids), 0, 1 << 20, 0,
     "validations without improvement ([train] patience is at most 2^20)"},
    {"elapsed", TS_DOUBLE, offsetof(TrainState, elapsed), 0, 1e12, 0,
     "training seconds so far ([train] max_time is at most 1e12)"},
    {"ranks", TS_INT, offsetof(TrainState, ranks), 1, 1 << 24, 1, "processes that trained it (mpirun -np)"},
    /* the log interval in progress (train.tsv's next row; 0 in older files) */
    {"log_steps", TS_LONG, offsetof(TrainState, log.steps), 0, 1e15, 1, "updates in the log interval in progress"},
    {"log_tokens", TS_LONG, offsetof(TrainState, log.tokens), 0, 1e18, 1, "target tokens in the log interval in progress"},
    {"log_real_tokens", TS_LONG, offsetof(TrainState, log.real_tokens), 0, 1e18, 1,
     "source + target tokens in the log interval in progress"},
    {"log_loss", TS_DOUBLE, offsetof(TrainState, log.loss), 0, 1e300, 1, "the loss summed over the interval's target tokens"},
    {"log_nll", TS_DOUBLE, offsetof(TrainState, log.nll), 0, 1e300, 1, "the NLL summed over the interval's target tokens"},
    {"log_seconds", TS_DOUBLE, offsetof(TrainState, log.seconds), 0, 1e12, 1, "seconds in the interval's updates"},
};
#define NTRAIN_STATE ((int)(sizeof TRAIN_STATE / sizeof TRAIN_STATE[0]))

static double ts_get(const TrainState *ts, int i) {
    const char *p = (const char *)ts + TRAIN_STATE[i].offset;
    switch (TRAIN_STATE[i].type) {
    case TS_LONG: return (double)*(const long *)p;
    case TS_INT: return (double)*(const int *)p;
    case TS_U64: return *(const uint64_t *)p ? 1 : 0;   /* only "not zero" is checked */
    default: return *(const double *)p;
    }
}

/* Every field in its range (NaN fails); -1 + errorf("PATH: ... KEY ..."). */
static int train_state_check(const char *path, const TrainState *ts) {
    for (int i = 0; i < NTRAIN_STATE; i++) {
        double v = ts_get(ts, i);
        int ok = TRAIN_STATE[i].type == TS_U64 ? v >= TRAIN_STATE[i].min : v >= TRAIN_STATE[i].min && v <= TRAIN_STATE[i].max;
        if (!ok) {
            if (TRAIN_STATE[i].type == TS_U64) return errorf("%s: training state %s = 0 is not valid: %s", path, TRAIN_STATE[i].key, TRAIN_STATE[i].meaning);
            return errorf("%s: training state %s = %.17g is out of range [%g, %g]: %s", path, TRAIN_STATE[i].key, v,
                          TRAIN_STATE[i].min, TRAIN_STATE[i].max, TRAIN_STATE[i].meaning);
        }
    }
    return 0;
}

/* The training-state fields from the metadata, each parsed strictly. */
static int train_state_read(const char *path, const SafeTensors *st, TrainState *ts) {
    for (int i = 0; i < NTRAIN_STATE; i++) {
        const char *key = TRAIN_STATE[i].key, *v = st_meta(st, key);
        char *p = (char *)ts + TRAIN_STATE[i].offset;
        if (!v && !TRAIN_STATE[i].optional) return errorf("%s: training state without metadata \"%s\"", path, key);
        if (TRAIN_STATE[i].type == TS_U64) {
            if (parse_u64(v, (uint64_t *)p)) return errorf("%s: training state %s = %s is not an unsigned 64-bit integer", path, key, v);
            continue;
        }
        double x = TRAIN_STATE[i].min;
        int integer = TRAIN_STATE[i].type != TS_DOUBLE;
        if (v && !(TRAIN_STATE[i].max == INFINITY && !strcmp(v, "inf")) &&   /* %.17g writes inf so */
            parse_number(v, integer, -INFINITY, INFINITY, &x))
            return errorf("%s: training state %s = %s is not %s", path, key, v, integer ? "an integer" : "a number");
        if (v && !strcmp(v, "inf") && TRAIN_STATE[i].max == INFINITY) x = INFINITY;
        if (!(x >= TRAIN_STATE[i].min && x <= TRAIN_STATE[i].max))   /* before the cast: no overflow */
            return errorf("%s: training state %s = %s is out of range [%g, %g]: %s", path, key, v, TRAIN_STATE[i].min,
                          TRAIN_STATE[i].max, TRAIN_STATE[i].meaning);
        if (TRAIN_STATE[i].type == TS_LONG) *(long *)p = (long)x;
        else if (TRAIN_STATE[i].type == TS_INT) *(int *)p = (int)x;
        else *(double *)p = x;
    }
    return train_state_check(path, ts);
}

static int is_train_state_key(const char *k) {
    for (int i = 0; i < NTRAIN_STATE; i++)
        if (!strcmp(k, TRAIN_STATE[i].key)) return 1;
    return 0;
}

/* Metadata pairs for st_write, grown as they are added; values made by
 * meta_num are owned here. */
typedef struct {
    const char **k, **v;
    char **own;
    int n, cap, nown, owncap;
} MetaList;

static void meta_add(MetaList *m, const char *key, const char *value) {
    if (m->n == m->cap) {
        m->cap = m->cap ? 2 * m->cap : 64;
        m->k = xrealloc(m->k, (size_t)m->cap * sizeof *m->k);
        m->v = xrealloc(m->v, (size_t)m->cap * sizeof *m->v);
    }
    m->k[m->n] = key;
    m->v[m->n++] = value;
}

static const char *meta_num(MetaList *m, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static const char *meta_num(MetaList *m, const char *fmt, ...) {
    char buf[64];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    if (m->nown == m->owncap) {
        m->owncap = m->owncap ? 2 * m->owncap : 32;
        m->own = xrealloc(m->own, (size_t)m->owncap * sizeof *m->own);
    }
    return m->own[m->nown++] = xstrdup(buf);
}

static void meta_free(MetaList *m) {
    for (int i = 0; i < m->nown; i++) free(m->own[i]);
    free(m->k);
    free(m->v);
    free(m->own);
}

int checkpoint_save(const char *path, const Model *m, const Config *c, const Bpe *bpe, const TrainState *ts) {
    if (!m || !c || !bpe) return errorf("%s: checkpoint_save needs a model, its config and its tokenizer", path);
    const ModelDims *d = &m->dims;
    if (bpe_vocab_size(bpe) != d->vocab)
        return errorf("%s: the tokenizer has %d pieces but the model's vocabulary is %d", path, bpe_vocab_size(bpe), d->vocab);
    ModelDims cd = model_dims_from_config(c, d->vocab);
    if (cd.d_model != d->d_model || cd.d_ff != d->d_ff || cd.heads != d->heads || cd.enc_layers != d->enc_layers ||
        cd.dec_layers != d->dec_layers || cd.max_positions != d->max_positions || cd.pre_norm != d->pre_norm)
        return errorf("%s: the config does not describe this model's shape", path);
    for (size_t i = 0; i < m->num_params; i++)
        if (!isfinite(m->params[i]))
            return errorf("%s: parameter %zu is %g: refusing to write a poisoned checkpoint", path, i, m->params[i]);
    if (ts && (!ts->adam_m || !ts->adam_v) && !ts->moments_fill)
        return errorf("%s: training state without Adam moments", path);

    /* the weights under their fairseq names, then the optimizer state */
    StTensor *t = xcalloc((size_t)m->num_tensors + 2, sizeof *t);
    int nt = 0;
    for (int i = 0; i < m->num_tensors; i++) {
        const TensorInfo *ti = &m->tensors[i];
        t[nt++] = (StTensor){.name = (char *)ti->name, .dtype = ST_F32, .ndim = ti->ndim,
                             .shape = {ti->shape[0], ti->shape[1]}, .data = m->params + ti->offset,
                             .nbytes = ti->size * sizeof(float)};
    }
    if (ts) {
        int fill = !ts->adam_m || !ts->adam_v;
        t[nt++] = (StTensor){.name = "optimizer.adam_m", .dtype = ST_F32, .ndim = 1, .shape = {(int64_t)m->num_params},
                             .data = fill ? NULL : ts->adam_m, .nbytes = m->num_params * sizeof(float),
                             .fill = fill ? ts->moments_fill : NULL, .fill_ctx = ts->moments_ctx[0]};
        t[nt++] = (StTensor){.name = "optimizer.adam_v", .dtype = ST_F32, .ndim = 1, .shape = {(int64_t)m->num_params},
                             .data = fill ? NULL : ts->adam_v, .nbytes = m->num_params * sizeof(float),
                             .fill = fill ? ts->moments_fill : NULL, .fill_ctx = ts->moments_ctx[1]};
    }

    /* metadata: everything needed to use or rebuild the model elsewhere */
    TrainState w = {0};   /* the state as written: ranks 0 stands for one process */
    if (ts) {
        w = *ts;
        if (w.ranks <= 0) w.ranks = 1;
        if (train_state_check(path, &w)) { free(t); return error_wrap("not written"); }
    }
    char *config = config_to_string(c), *tok = bpe_to_string(bpe);
    MetaList ml = {0};
    #define NUM(fmt, ...) meta_num(&ml, fmt, __VA_ARGS__)
    #define META(key, value) meta_add(&ml, (key), (value))
    META("format", CHECKPOINT_FORMAT);
    META("tfm_version", TFM_VERSION);
    META("config", config);
    META("tokenizer", tok);
    META("vocab", NUM("%d", d->vocab));
    META("pad_id", NUM("%d", TOK_PAD));
    META("unk_id", NUM("%d", TOK_UNK));
    META("bos_id", NUM("%d", TOK_BOS));
    META("eos_id", NUM("%d", TOK_EOS));
    META("source_format", "x_1 .. x_n EOS");
    META("decoder_input", "BOS y_1 .. y_m");
    META("decoder_target", "y_1 .. y_m EOS");
    META("d_model", NUM("%d", d->d_model));
    META("d_ff", NUM("%d", d->d_ff));
    META("heads", NUM("%d", d->heads));
    META("encoder_layers", NUM("%d", d->enc_layers));
    META("decoder_layers", NUM("%d", d->dec_layers));
    META("max_positions", NUM("%d", d->max_positions));
    META("embedding_scale", "sqrt(d_model)");
    META("positions", "sinusoidal");
    META("positions_formula", "x = embed[token] * sqrt(d_model) + PE[pos], pos = 0, 1, ...; "
                              "PE[pos, 2i] = sin(pos / 10000^(2i / d_model)), PE[pos, 2i+1] = cos(pos / 10000^(2i / d_model)) "
                              "(interleaved, as in the paper)");
    META("norm", d->pre_norm ? "pre" : "post");
    META("layer_norm_eps", NUM("%g", (double)LAYERNORM_EPS));
    META("activation", "relu");
    META("attention", "scaled dot-product, softmax(Q K^T / sqrt(d_model / heads)) V; "
                      "heads are consecutive blocks of d_model / heads rows of q_proj, k_proj, v_proj");
    META("linear_layout", "weight [out_features, in_features], y = x W^T + b (torch.nn.Linear)");
    META("tie_embeddings", "true");
    META("shared_embeddings", "encoder.embed_tokens.weight is also the decoder's embedding and the output "
                              "projection (logits = h W^T, no bias)");
    META("num_params", NUM("%zu", m->num_params));
    if (ts) {   /* the training state, from its table */
        for (int i = 0; i < NTRAIN_STATE; i++) {
            const char *p = (const char *)&w + TRAIN_STATE[i].offset;
            switch (TRAIN_STATE[i].type) {
            case TS_LONG: META(TRAIN_STATE[i].key, NUM("%ld", *(const long *)p)); break;
            case TS_INT: META(TRAIN_STATE[i].key, NUM("%d", *(const int *)p)); break;
            case TS_U64: META(TRAIN_STATE[i].key, NUM("%llu", (unsigned long long)*(const uint64_t *)p)); break;
            case TS_DOUBLE: META(TRAIN_STATE[i].key, NUM("%.17g", *(const double *)p)); break;
            }
        }
    }
    #undef META
    #undef NUM
    int rc = st_write(path, t, nt, ml.k, ml.v, ml.n);
    meta_free(&ml);
    free(config);
    free(tok);
    free(t);
    return rc;
}

/* The Adam moments [lo, hi) and position; *ts zeroed if the file holds
 * none (0 returned). keep 0 (checkpoint_verify): the moments' checksums
 * checked, nothing kept (ts->adam_m stays NULL). keep 1: ts->adam_m and
 * adam_v hold the hi - lo floats from lo, read from the file alone (the
 * mapped pages given back as they are copied), and *part their checksums,
 * to be joined with the other slices' (checkpoint_moments_check). 1 if the
 * file holds a state. */
static int load_train_state(const char *path, const SafeTensors *st, size_t num_params, TrainState *ts, int keep,
                            size_t lo, size_t hi, MomentSlice *part) {
    memset(ts, 0, sizeof *ts);
    const StTensor *m = st_find(st, "optimizer.adam_m"), *v = st_find(st, "optimizer.adam_v");
    if (!m && !v && !st_meta(st, "step")) return 0;   /* a model-only file */
    const StTensor *mv[2] = {m, v};
    for (int i = 0; i < 2; i++) {
        const char *name = i ? "optimizer.adam_v" : "optimizer.adam_m";
        if (!mv[i]) return errorf("%s: training state without tensor %s", path, name);
        if (mv[i]->dtype != ST_F32 || mv[i]->ndim != 1 || (uint64_t)mv[i]->shape[0] != num_params)
            return errorf("%s: tensor %s must be F32 [%zu] (one moment per parameter)", path, name, num_params);
    }
    if (train_state_read(path, st, ts)) { memset(ts, 0, sizeof *ts); return -1; }
    if (!keep) {
        memset(ts, 0, sizeof *ts);
        return st_tensor_verify(path, m) || st_tensor_verify(path, v) ? -1 : 1;
    }
    if (lo > hi || hi > num_params) {
        memset(ts, 0, sizeof *ts);
        return errorf("%s: the slice [%zu, %zu) of the Adam moments is outside their %zu floats", path, lo, hi, num_params);
    }
    *part = (MomentSlice){.lo = lo, .hi = hi, .total = num_params, .has_crc = st->has_crc};
    float **dst[2] = {&ts->adam_m, &ts->adam_v};
    for (int i = 0; i < 2; i++) {
        *dst[i] = xaligned((hi - lo) * sizeof(float));
        part->crc[i] = st_tensor_range(mv[i], lo * sizeof(float), (hi - lo) * sizeof(float), *dst[i]);
        part->want[i] = mv[i]->crc;
    }
    return 1;
}

int checkpoint_moments_check(const char *path, const MomentSlice *parts, int n) {
    size_t end = 0;
    for (int r = 0; r < n; r++) {
        if (parts[r].lo != end || parts[r].hi < parts[r].lo)
            return errorf("%s: the ranks' slices of the Adam moments do not follow each other (slice %d is [%zu, %zu), "
                          "expected from %zu)", path, r, parts[r].lo, parts[r].hi, end);
        end = parts[r].hi;
    }
    if (n < 1 || end != parts[0].total)
        return errorf("%s: the ranks' slices of the Adam moments end at %zu, not at their length %zu", path, end,
                      n < 1 ? (size_t)0 : parts[0].total);
    if (!parts[0].has_crc || !st_verify_crc) return 0;   /* no checksums: st_read gave the notice */
    for (int i = 0; i < 2; i++) {
        uint32_t crc = 0;
        for (int r = 0; r < n; r++)
            crc = crc32c_combine(crc, parts[r].crc[i], (uint64_t)(parts[r].hi - parts[r].lo) * sizeof(float));
        if (crc != parts[0].want[i]) {   /* one slice: st_tensor_copy's words */
            char joined[64] = "";
            if (n > 1) snprintf(joined, sizeof joined, " joined over %d slices", n);
            return errorf("%s: tensor '%s': checksum mismatch (CRC-32C %08x%s, the file records %08x): the file is corrupt",
                          path, i ? "optimizer.adam_v" : "optimizer.adam_m", crc, joined, parts[0].want[i]);
        }
    }
    return 0;
}

/* A weight tensor's values, a piece at a time (st_tensor_scan): a NaN/inf
 * weight would only give empty translations. The first one is reported
 * after the scan, so that a damaged byte is named as such (the checksum)
 * before what it reads as. */
typedef struct {
    size_t index;        /* of the next value in the tensor */
    size_t bad;          /* the first non-finite one, if any */
    float bad_value;
    int any_bad;
} FiniteScan;

static int finite_values(void *ctx, const void *piece, size_t n) {
    FiniteScan *f = ctx;
    const float *w = piece;
    for (size_t k = 0; k < n / sizeof(float); k++, f->index++)
        if (!isfinite(w[k]) && !f->any_bad) f->any_bad = 1, f->bad = f->index, f->bad_value = w[k];
    return 0;
}

static int finite_report(const FiniteScan *f, const char *path, const char *name) {
    if (!f->any_bad) return 0;
    return errorf("%s: tensor %s holds a non-finite value (%g) at index %zu", path, name, f->bad_value, f->bad);
}

/* Check that the file holds exactly the tensors of the model its config
 * describes (tensors[0..nt), d), with their checksums and finite values;
 * copy them into params, or with params NULL keep nothing (checkpoint_verify:
 * a piece at a time). */
static int load_weights(const char *path, const SafeTensors *st, const ModelDims *d, const TensorInfo *tensors, int nt,
                        float *params) {
    const StTensor *e = st_find(st, tensors[0].name);
    if (e && e->ndim == 2 && e->shape[0] != d->vocab)
        return errorf("%s: the tokenizer has %d pieces but %s has %lld rows", path, d->vocab, e->name,
                      (long long)e->shape[0]);
    for (int i = 0; i < nt; i++) {
        const TensorInfo *ti = &tensors[i];
        const StTensor *t = st_find(st, ti->name);
        if (!t) return errorf("%s: missing tensor %s (expected by the config: norm = %s, %d+%d layers)", path, ti->name,
                              d->pre_norm ? "pre" : "post", d->enc_layers, d->dec_layers);
        int same = t->dtype == ST_F32 && t->ndim == ti->ndim;
        for (int k = 0; same && k < ti->ndim; k++) same = t->shape[k] == ti->shape[k];
        if (!same) {
            StTensor want = {.ndim = ti->ndim, .shape = {ti->shape[0], ti->shape[1]}};
            char got[128], exp[128];
            shape_text(t, got, sizeof got);
            shape_text(&want, exp, sizeof exp);
            return errorf("%s: tensor %s is %s %s, expected F32 %s", path, ti->name, st_dtype_name(t->dtype), got, exp);
        }
        FiniteScan f = {0};
        if (params ? st_tensor_copy(path, t, params + ti->offset) || finite_values(&f, params + ti->offset, t->nbytes)
                   : st_tensor_scan(path, t, finite_values, &f))
            return -1;
        if (finite_report(&f, path, ti->name)) return -1;
    }
    for (int i = 0; i < st->num_tensors; i++) {
        const char *name = st->tensors[i].name;
        if (!strcmp(name, "optimizer.adam_m") || !strcmp(name, "optimizer.adam_v")) continue;
        int known = 0;
        for (int j = 0; j < nt && !known; j++) known = !strcmp(tensors[j].name, name);
        if (!known) return errorf("%s: unknown tensor %s (not part of the model its config describes)", path, name);
    }
    return 0;
}

/* checkpoint_load, and with verify != NULL checkpoint_verify: then m and ts
 * are NULL and *verify = 1 if the file holds a training state, else 0. */
static int checkpoint_read(const char *path, Config *c, Bpe **bpe, Model *m, TrainState *ts, int *verify) {
    SafeTensors st;
    Config cfg = {0};
    Bpe *b = NULL;
    int model_ready = 0, rc = -1;
    if (bpe) *bpe = NULL;
    if (st_read(path, &st)) return -1;
    if (read_tfm_header(path, &st, &cfg)) goto done;
    static const struct { const char *key; int id; } ids[] = {
        {"pad_id", TOK_PAD}, {"unk_id", TOK_UNK}, {"bos_id", TOK_BOS}, {"eos_id", TOK_EOS}};
    for (int i = 0; i < 4; i++) {
        const char *v = st_meta(&st, ids[i].key);
        double x;
        if (v && (parse_number(v, 1, 0, 1e9, &x) || x != ids[i].id)) {
            errorf("%s: metadata %s = %s, but tfm's %s is %d", path, ids[i].key, v, ids[i].key, ids[i].id);
            goto done;
        }
    }
    if (bpe || m || ts || verify) {
        const char *text = st_meta(&st, "tokenizer");
        if (!text) { errorf("%s: no \"tokenizer\" in the metadata", path); goto done; }
        char name[1100];
        snprintf(name, sizeof name, "%s [tokenizer]", path);
        if (!(b = bpe_from_string(text, name))) goto done;
    }
    if (m || ts || verify) {
        ModelDims d = model_dims_from_config(&cfg, bpe_vocab_size(b));
        size_t num_params = model_param_count(&d);
        if (m) {
            if (model_alloc(m, &d)) { error_wrap("%s", path); goto done; }
            model_ready = 1;
            if (load_weights(path, &st, &m->dims, m->tensors, m->num_tensors, m->params)) goto done;
        }
        if (ts) {   /* the whole moments: one slice, checked alone */
            MomentSlice whole;
            int r = load_train_state(path, &st, num_params, ts, 1, 0, num_params, &whole);
            if (r < 0 || (r > 0 && checkpoint_moments_check(path, &whole, 1))) {
                free(ts->adam_m);
                free(ts->adam_v);
                memset(ts, 0, sizeof *ts);
                goto done;
            }
        }
        if (verify) {
            if (model_dims_check(&d)) { error_wrap("%s", path); goto done; }
            TensorInfo *tab;
            size_t total;
            int nt = model_tensor_table(&d, &tab, &total), r = load_weights(path, &st, &d, tab, nt, NULL);
            free(tab);
            TrainState none;
            if (r || (*verify = load_train_state(path, &st, num_params, &none, 0, 0, 0, NULL)) < 0) goto done;
        }
    }
    rc = 0;
done:
    if (rc && model_ready) model_free(m);
    if (!rc && c) *c = cfg;
    else config_free(&cfg);
    if (!rc && bpe) *bpe = b;
    else if (b) bpe_free(b);
    st_free(&st);
    return rc;
}

int checkpoint_load(const char *path, Config *c, Bpe **bpe, Model *m, TrainState *ts) {
    return checkpoint_read(path, c, bpe, m, ts, NULL);
}

int checkpoint_verify(const char *path) {
    int state = 0;
    return checkpoint_read(path, NULL, NULL, NULL, NULL, &state) ? -1 : state;
}

int checkpoint_load_state(const char *path, size_t num_params, size_t lo, size_t hi, TrainState *ts, MomentSlice *part) {
    SafeTensors st;
    memset(ts, 0, sizeof *ts);
    memset(part, 0, sizeof *part);
    if (st_read(path, &st)) return -1;
    int r = load_train_state(path, &st, num_params, ts, 1, lo, hi, part);
    st_free(&st);
    return r;
}

Bpe *tokenizer_load(const char *path) {
    /* A BPE model may come from a pipe (-m <(...), a FIFO): it is then read
     * once, through text.h; a checkpoint is mapped, so it must be a file. */
    struct stat sb;
    if (stat(path, &sb) != 0) { errorf("%s: cannot open: %s", path, strerror(errno)); return NULL; }
    if (!S_ISREG(sb.st_mode)) {
        if (S_ISDIR(sb.st_mode)) { errorf("%s: is a directory, not a BPE model or a checkpoint", path); return NULL; }
        TextOptions o = TEXT_DEFAULT;
        o.invalid = TEXT_BYTES;
        o.max_bytes = TEXT_MAX_MODEL;
        char *text = text_read_all(path, &o, NULL);
        if (!text) return NULL;
        Bpe *b = NULL;
        if (strncmp(text, "tfm-bpe ", 8))
            errorf("%s: not a regular file, and what it gave is not a tfm BPE model (first line 'tfm-bpe N'); "
                   "a checkpoint (.safetensors) must be a regular file", path);
        else b = bpe_from_string(text, path);
        free(text);
        return b;
    }
    FILE *f = fopen(path, "rb");
    if (!f) { errorf("%s: cannot open: %s", path, strerror(errno)); return NULL; }
    unsigned char head[9] = {0};
    size_t got = fread(head, 1, sizeof head, f);
    int err = ferror(f) ? errno : 0;
    fclose(f);
    if (err) { errorf("%s: read error: %s", path, strerror(err)); return NULL; }
    if (got >= 8 && !memcmp(head, "tfm-bpe ", 8)) return bpe_load(path);
    if (got == 9 && head[8] == '{') {   /* safetensors: 8-byte header length, then JSON */
        SafeTensors st;
        if (st_read(path, &st)) return NULL;
        const char *text = st_meta(&st, "tokenizer");
        Bpe *b = NULL;
        if (!text) errorf("%s: checkpoint has no 'tokenizer' in its metadata", path);
        else {
            char name[1100];
            snprintf(name, sizeof name, "%s [tokenizer]", path);
            b = bpe_from_string(text, name);
        }
        st_free(&st);
        return b;
    }
    errorf("%s: neither a tfm BPE model (first line 'tfm-bpe N') nor a tfm checkpoint (.safetensors)", path);
    return NULL;
}

/* ---- averaging ---------------------------------------------------------- */

static int is_model_tensor(const StTensor *t) { return strncmp(t->name, "optimizer.", 10) != 0; }

/* Same model tensors (names, dtype, shapes), same model config, same tokenizer. */
static int check_compatible(const char *pa, const SafeTensors *a, const Config *ca,
                            const char *pb, const SafeTensors *b, const Config *cb) {
    char why[512], sa[128], sb[128];
    if (!config_same_model(ca, cb, why, sizeof why))
        return errorf("%s and %s have different model configs: %s", pa, pb, why);
    const char *ta = st_meta(a, "tokenizer"), *tb = st_meta(b, "tokenizer");
    if ((ta == NULL) != (tb == NULL) || (ta && strcmp(ta, tb)))
        return errorf("%s and %s have different tokenizers", pa, pb);
    for (int i = 0; i < a->num_tensors; i++) {
        const StTensor *x = &a->tensors[i];
        if (!is_model_tensor(x)) continue;
        const StTensor *y = st_find(b, x->name);
        if (!y) return errorf("tensor '%s' is in %s but not in %s", x->name, pa, pb);
        shape_text(x, sa, sizeof sa);
        shape_text(y, sb, sizeof sb);
        if (x->dtype != y->dtype || strcmp(sa, sb))
            return errorf("tensor '%s' is %s %s in %s but %s %s in %s", x->name, st_dtype_name(x->dtype), sa, pa,
                          st_dtype_name(y->dtype), sb, pb);
    }
    for (int i = 0; i < b->num_tensors; i++)
        if (is_model_tensor(&b->tensors[i]) && !st_find(a, b->tensors[i].name))
            return errorf("tensor '%s' is in %s but not in %s", b->tensors[i].name, pb, pa);
    return 0;
}

/* t's checksum and values (a piece at a time, st_tensor_scan): every value
 * finite, before any of them is averaged. */
static int check_values(const char *path, const StTensor *t) {
    FiniteScan f = {0};
    if (st_tensor_scan(path, t, finite_values, &f)) return -1;
    if (!f.any_bad) return 0;
    return errorf("%s: tensor '%s' holds a non-finite value (%g) at index %zu", path, t->name, f.bad_value, f.bad);
}

/* The mean of one tensor over the n inputs, a piece at a time (StFill):
 * element-wise, summed in double in the inputs' order (the bits of summing
 * the whole tensors so), each input's piece read from its mapping, whose
 * pages are given back as they are read (st_tensor_piece). */
typedef struct {
    const StTensor **src;   /* the tensor in each input */
    int n;
    double *sum;            /* one piece's sums */
    float *x;               /* one input's piece */
} MeanPieces;

static int mean_piece(void *ctx, void *dst, size_t offset, size_t bytes) {
    const MeanPieces *m = ctx;
    size_t k = bytes / sizeof(float);
    memset(m->sum, 0, k * sizeof(double));
    for (int f = 0; f < m->n; f++) {
        st_tensor_piece(m->src[f], offset, bytes, m->x);
        for (size_t j = 0; j < k; j++) m->sum[j] += m->x[j];
    }
    float *out = dst;
    for (size_t j = 0; j < k; j++) out[j] = (float)(m->sum[j] / m->n);
    return 0;
}

/* Every input open (mapped) at once and checked whole first (compatible
 * with the first, every tensor's checksum and values); then each mean is
 * made a piece at a time as it is written (StFill; the header written again
 * with the checksums at the end), and where the output is a stream (a FIFO,
 * /dev/stdout: written in place, it cannot seek back) made once before for
 * its checksum: the memory is a few pieces, not the model's size in double
 * (a base model: 496 MB of sums and 248 MB of means, beside a training
 * run's state when tfm train averages at its end). */
int checkpoint_average(const char *const *inputs, int n, const char *out) {
    if (n < 1) return errorf("nothing to average");
    SafeTensors *st = xcalloc((size_t)n, sizeof *st);
    Config *cfg = xcalloc((size_t)n, sizeof *cfg);   /* filled by config_load_string, which frees on failure */
    StTensor *ts = NULL;
    MeanPieces *mp = NULL;
    const StTensor **src = NULL;
    size_t piece = st_fill_piece();
    double *sum = xaligned(piece / sizeof(float) * sizeof(double));
    float *x = xaligned(piece), *y = xaligned(piece);
    int rc = -1;
    /* the output first (its temporary file): an unwritable place fails
     * before the reading, and a signal during it removes the file (util.h) */
    AtomicFile af;
    if (!atomic_open(&af, out)) goto done;
    for (int f = 0; f < n; f++)
        if (st_read(inputs[f], &st[f]) || read_tfm_header(inputs[f], &st[f], &cfg[f]) ||
            (f > 0 && check_compatible(inputs[0], &st[0], &cfg[0], inputs[f], &st[f], &cfg[f])))
            goto done;
    const SafeTensors *ref = &st[0];
    for (int i = 0; i < ref->num_tensors; i++) {
        const StTensor *t = &ref->tensors[i];
        if (is_model_tensor(t) && t->dtype != ST_F32) {
            errorf("%s: tensor '%s' is %s; only F32 weights can be averaged", inputs[0], t->name, st_dtype_name(t->dtype));
            goto done;
        }
    }
    for (int f = 0; f < n; f++) {
        for (int i = 0; i < ref->num_tensors; i++)
            if (is_model_tensor(&ref->tensors[i]) && check_values(inputs[f], st_find(&st[f], ref->tensors[i].name)))
                goto done;
        log_info("averaging %d/%d: %s", f + 1, n, inputs[f]);
    }
    /* the means, as float tensors in the first input's order, with their checksums */
    ts = xcalloc((size_t)ref->num_tensors + 1, sizeof *ts);
    mp = xcalloc((size_t)ref->num_tensors + 1, sizeof *mp);
    src = xcalloc((size_t)ref->num_tensors * (size_t)n + 1, sizeof *src);
    int nt = 0;
    for (int i = 0; i < ref->num_tensors; i++) {
        if (!is_model_tensor(&ref->tensors[i])) continue;
        for (int f = 0; f < n; f++) src[(size_t)nt * (size_t)n + (size_t)f] = st_find(&st[f], ref->tensors[i].name);
        mp[nt] = (MeanPieces){src + (size_t)nt * (size_t)n, n, sum, x};
        ts[nt] = ref->tensors[i];
        ts[nt].data = NULL;
        ts[nt].fill = mean_piece;
        ts[nt].fill_ctx = &mp[nt];
        ts[nt].crc = 0;
        ts[nt].has_crc = af.tmp == NULL;   /* a stream: the checksum before the header; a file: summed as written */
        for (size_t off = 0; ts[nt].has_crc && off < ts[nt].nbytes; off += piece) {
            size_t k = ts[nt].nbytes - off < piece ? ts[nt].nbytes - off : piece;
            mean_piece(&mp[nt], y, off, k);
            ts[nt].crc = crc32c(ts[nt].crc, y, k);
        }
        nt++;
    }
    /* metadata of the newest input, without training state, plus the inputs */
    const SafeTensors *newest = &st[n - 1];
    const char **mk = xmalloc((size_t)(newest->num_meta + 1) * sizeof *mk);
    const char **mv = xmalloc((size_t)(newest->num_meta + 1) * sizeof *mv);
    int nm = 0;
    for (int i = 0; i < newest->num_meta; i++) {
        if (is_train_state_key(newest->meta_keys[i]) || !strcmp(newest->meta_keys[i], "averaged_from")) continue;
        mk[nm] = newest->meta_keys[i];
        mv[nm++] = newest->meta_values[i];
    }
    JsonBuf from = {0};
    jb_raw(&from, "[");
    for (int f = 0; f < n; f++) {
        if (f) jb_raw(&from, ", ");
        jb_string(&from, inputs[f]);
    }
    jb_raw(&from, "]");
    mk[nm] = "averaged_from";
    mv[nm++] = from.s;
    rc = st_write_to(&af, ts, nt, mk, mv, nm);   /* commits or aborts af (af.f is NULL after) */
    if (!rc) log_info("wrote the average of %d checkpoint%s to %s", n, n == 1 ? "" : "s", out);
    jb_free(&from);
    free(mk);
    free(mv);
done:
    if (af.f) atomic_abort(&af);   /* failed before the write */
    for (int f = 0; f < n; f++) {
        st_free(&st[f]);
        config_free(&cfg[f]);
    }
    free(st);
    free(cfg);
    free(ts);
    free(mp);
    free(src);
    free(sum);
    free(x);
    free(y);
    return rc;
}
