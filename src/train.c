/* train.c — the training loop of `tfm train` (paper section 5; train.h).
 *
 * One update ("step") = the gradients of `accumulate` token batches summed,
 * scaled by 1 / (their target tokens), so the loss is the mean per target
 * token over the update; then global-norm clipping (optional) and Adam with
 *   lr = lr_scale * d_model^-0.5 * min(step^-0.5, step * warmup^-1.5).
 * An update never spans two epochs: the last one of an epoch may be shorter.
 *
 * Everything the next step depends on is in the checkpoint: weights, Adam
 * moments, step, the dropout RNG and the data position (epoch, next batch).
 * The batches of an epoch are re-derived from (seed, epoch), so resuming
 * from a checkpoint continues bit for bit as if the run had never stopped
 * (at the same thread count).
 *
 * Fine-tuning ([train] init_from = CHECKPOINT): a run directory without
 * checkpoints starts from that model's weights and tokenizer instead of a
 * random initialisation; the optimizer (Adam moments), the learning-rate
 * schedule, the step count and early stopping start afresh, and the config
 * must describe the same model shape. Once the run has checkpoints it
 * resumes from them as any run does.
 *
 * Run directory ([train] dir):
 *   checkpoint-<step>.safetensors  every checkpoint_interval steps, last `keep`
 *   best.safetensors               best validation NLL so far
 *   average.safetensors            mean of the last average_last checkpoints
 *   train.tsv, valid.tsv           the logged figures, for scripts/plot.sh
 *   train.corpus, valid.corpus     the encoded corpora (cache)
 *
 * With N ranks (`mpirun -np N tfm train`, see dist.h) an update takes
 * N * accumulate batches of the same epoch plan, rank r the batches r, r+N,
 * ...; the gradients are scaled by the global target-token count and
 * reduce-scattered, each rank clips (global norm) and runs Adam on its slice
 * of the parameters alone, with the Adam moments of that slice alone, and
 * the updated weights are all-gathered (ZeRO-1, dist.h). A checkpoint holds
 * the whole moments, gathered by rank 0 a piece at a time as it writes them,
 * so a run resumes at any N: there each rank reads its own slice of them
 * from the file and nothing more, and the slices' checksums, joined over the
 * ranks, check the whole (checkpoint_load_state). Rank 0
 * does everything that writes to the run directory and logs; the others
 * wait for it where they need its files (tokenizer, corpus caches).
 *
 * Over 700 lines: the loop and the helpers it alone calls (signals,
 * checkpoints of the run, validation, logging, each behind its banner) share
 * the Trainer's state; cut apart, that state would become an interface.
 */
#include "dispatch.h"
#include "bpe.h"
#include "checkpoint.h"
#include "rundir.h"
#include "config.h"
#include "data.h"
#include "decode.h"
#include "eval.h"
#include "dist.h"
#include "gemm_bf16.h"
#include "gemm_dnnl.h"
#include "model.h"
#include "ops.h"
#include "optim.h"
#include "train.h"
#include "text.h"
#include "util.h"

#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>

enum { MAX_BAD_STEPS = 5 };   /* NaN/inf updates in a row before giving up */

/* ---- signals: finish the step, checkpoint, exit 0 -------------------- */
static volatile sig_atomic_t g_stop_signal;

static void on_signal(int sig) {
    g_stop_signal = sig;
    static const char msg[] = "\ntfm: stopping after this step and writing a checkpoint (again to quit at once)\n";
    ssize_t r = write(2, msg, sizeof msg - 1);
    (void)r;
}

static void install_signals(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sa.sa_flags = SA_RESETHAND;     /* a second signal takes the default action */
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGUSR1, &sa, NULL);   /* mpirun forwards SIGUSR1 to the ranks (SIGINT/SIGTERM it does not) */
}

/* ---- small helpers --------------------------------------------------- */
static int mkdir_p(const char *dir) {
    char *p = xstrdup(dir);
    for (char *s = p + 1; *s; s++) {
        if (*s != '/') continue;
        *s = 0;
        if (mkdir(p, 0777) && errno != EEXIST) { errorf("%s: cannot create directory: %s", p, strerror(errno)); free(p); return -1; }
        *s = '/';
    }
    int r = 0;
    if (mkdir(p, 0777) && errno != EEXIST) r = errorf("%s: cannot create directory: %s", p, strerror(errno));
    free(p);
    return r;
}

static char *join(const char *dir, const char *name) {
    size_t n = strlen(dir) + strlen(name) + 2;
    char *p = xmalloc(n);
    snprintf(p, n, "%s/%s", dir, name);
    return p;
}

static int all_finite(const float *x, size_t n) {
    int ok = 1;
    #pragma omp parallel for reduction(&&:ok)
    for (size_t i = 0; i < n; i++) ok = ok && isfinite(x[i]);
    return ok;
}

/* "1,234,567" */
static const char *commas(long v, char *buf, size_t n) {
    char t[32];
    snprintf(t, sizeof t, "%ld", v < 0 ? -v : v);
    size_t len = strlen(t), o = 0;
    if (v < 0 && o < n - 1) buf[o++] = '-';
    for (size_t i = 0; i < len && o < n - 1; i++) {
        buf[o++] = t[i];
        if ((len - 1 - i) % 3 == 0 && i + 1 < len && o < n - 1) buf[o++] = ',';
    }
    buf[o] = 0;
    return buf;
}

/* Two spellings of one file ("data/a.en", "/home/x/data/a.en", a link to
 * it): the resolved paths are compared, and the strings where a file is
 * gone. */
static int same_file(const char *a, const char *b) {
    char *ra = realpath(a, NULL), *rb = realpath(b, NULL);
    int same = ra && rb ? !strcmp(ra, rb) : !strcmp(a, b);
    free(ra);
    free(rb);
    return same;
}

/* The lines of the config text, "[section] key = value", in order. */
static void log_config_changes(const Config *old, const Config *cur) {
    char *a = config_to_string(old), *b = config_to_string(cur);
    char sec[64] = "", *sa, *sb;
    char *la = strtok_r(a, "\n", &sa), *lb = strtok_r(b, "\n", &sb);
    int changes = 0;
    while (la && lb) {
        if (la[0] == '[') snprintf(sec, sizeof sec, "%s", la);
        else if (strcmp(la, lb)) {
            const char *eqa = strstr(la, " = "), *eqb = strstr(lb, " = ");
            log_info("config changed since the checkpoint: %s %.*s: %s -> %s", sec, (int)(eqa ? eqa - la : 0), la,
                     eqa ? eqa + 3 : la, eqb ? eqb + 3 : lb);
            changes++;
        }
        la = strtok_r(NULL, "\n", &sa);
        lb = strtok_r(NULL, "\n", &sb);
    }
    free(a);
    free(b);
    if (changes) log_info("(%d setting%s changed; the model shape is the same, so the run goes on)", changes, changes > 1 ? "s" : "");
}

/* Keep the header and the rows whose step (first column) is <= step: after
 * a resume, rows logged past the checkpoint by the stopped run would repeat.
 * With log_interval > 0 (train.tsv), a row at `step` itself that is not a
 * multiple of it goes too: the partial interval at the end of the session,
 * which the resumed run logs whole (its sums are in the checkpoint). Only a
 * regular file is read back, through text.h, at most TEXT_MAX_LOG bytes (a
 * device such as /dev/zero is written to, never read; a FIFO is neither):
 * -1 + errorf when it cannot be read. */
static int tsv_truncate(const char *path, long step, int log_interval) {
    size_t len;
    struct stat sb;
    if (stat(path, &sb) != 0 || !S_ISREG(sb.st_mode)) return 0;   /* absent, or a device: nothing to read back */
    TextOptions o = TEXT_DEFAULT;
    o.invalid = TEXT_BYTES;
    o.stream = 0;
    o.max_bytes = TEXT_MAX_LOG;
    char *text = text_read_all(path, &o, &len);
    if (!text) return -1;
    AtomicFile af;
    FILE *f = atomic_open(&af, path);
    if (!f) { log_warn("%s", error_message()); error_clear(); free(text); return 0; }
    char *save, *line = strtok_r(text, "\n", &save);
    for (int first = 1; line; line = strtok_r(NULL, "\n", &save), first = 0)
        if (first || atol(line) < step || (atol(line) == step && (log_interval <= 0 || step % log_interval == 0)))
            fprintf(f, "%s\n", line);
    if (atomic_commit(&af)) { log_warn("%s", error_message()); error_clear(); }
    free(text);
    return 0;
}

static FILE *tsv_open(const char *path, const char *header, long resume_step, int log_interval) {
    if (tsv_truncate(path, resume_step, log_interval)) {
        log_warn("%s (this run writes no %s)", error_message(), path);
        error_clear();
        return NULL;
    }
    struct stat sb;   /* a FIFO: opening it to write would wait for a reader */
    if (stat(path, &sb) == 0 && S_ISFIFO(sb.st_mode)) {
        log_warn("%s: is a %s, not a regular file: this run writes no log there", path, file_kind(sb.st_mode));
        return NULL;
    }
    int fresh = !file_exists(path);
    FILE *f = fopen(path, "a");
    if (!f) { log_warn("%s: cannot write: %s", path, strerror(errno)); return NULL; }
    if (fresh) fprintf(f, "%s\n", header);
    fflush(f);
    return f;
}

/* ---- the trainer --------------------------------------------------------- */
typedef struct {
    Config c;
    const char *config_path;
    Bpe *bpe;
    Model m;
    TrainState ts;             /* adam_m, adam_v: this rank's slice [lo, hi) of the moments (all of them on one process) */
    size_t lo, hi;             /* this rank's slice of the flat parameter buffer (dist_slice_lo) */
    size_t *wire_off, *wire_len;   /* bf16 on the wire (N ranks, bf16): each rank's slice packed, its bytes in m.grads */
    int wire;                  /* with wire_off: WIRE_TRY (measuring both), WIRE_FP32 or WIRE_BF16 (chosen) */
    double wire_try[2];        /* WIRE_TRY: seconds of the all-gathers in fp32 [0] and bf16 [1], this rank */
    int masters_rounded;       /* since the last fp32 all-gather, the others' product weights hold their bf16 values */
    Rng rng;                   /* dropout; its state is ts.rng_state at checkpoints */
    Corpus train, valid;
    TextLines train_text[2];   /* bpe_dropout: the training source and target text, encoded again each epoch */
    Epoch ep;
    Batch batch;
    TextLines valid_src_text;  /* for valid_bleu: the source lines, and the */
    char **valid_refs;         /* references, read as tfm eval reads them */
    long valid_nrefs;
    FILE *tsv, *vtsv;
    int tty;                   /* stderr is a terminal: live progress line */
    int progress_shown;
    int warned_empty_refs;     /* validation BLEU has said that it leaves lines out */
    double session_start, elapsed0;
    long session_steps, session_batches;
    long last_saved_step;
    int stop;                  /* signal number that stops the run (agreed by all ranks) */
    int lock_fd;               /* RUN_DIR_LOCK, held while training (rank 0) */
    int batches_changed;       /* resumed with other data or batching than the checkpoint's run */
    char *resumed_from;        /* the checkpoint this session resumed from, or NULL */
    /* figures since the last log line: ts.log (checkpointed), and */
    double last_gnorm;
    double opt_seconds;        /* this session: the optimizer steps (norm, clipping, Adam on the slice, rounding) */
    int log_failed;            /* a write to train.tsv or valid.tsv failed (errno) */
} Trainer;

static void tsv_written(Trainer *t, FILE *f, const char *name);

static double elapsed(const Trainer *t) { return t->elapsed0 + (now_seconds() - t->session_start); }

static void progress_clear(Trainer *t) {
    if (t->progress_shown) { fputs("\r\033[K", stderr); t->progress_shown = 0; }
}

/* The tokenizer must have exactly the config's [data] symbols. */
static int check_symbols(const Config *c, const Bpe *b, const char *from) {
    char **syms;
    int n = bpe_split_symbols(c->symbols, &syms);
    int r = bpe_check_symbols(b, (const char *const *)syms, n, from);
    bpe_free_symbols(syms, n);
    return r ? error_wrap("[data] symbols") : 0;
}

/* Load the tokenizer named by the config, or learn it from the training
 * data (source and target together: one joint vocabulary). */
static int tokenizer_open(Trainer *t) {
    const Config *c = &t->c;
    if (file_exists(c->bpe_model)) {
        t->bpe = tokenizer_load(c->bpe_model);
        if (!t->bpe || check_symbols(c, t->bpe, c->bpe_model)) return -1;
        log_info("tokenizer: %s (%d tokens)", c->bpe_model, bpe_vocab_size(t->bpe));
        return 0;
    }
    log_info("learning a joint BPE of %d tokens from %s + %s (%s does not exist yet)", c->vocab_size,
             c->train_src, c->train_tgt, c->bpe_model);
    const char *files[2] = {c->train_src, c->train_tgt};
    char **syms;
    /* tfm train has no --skip-invalid: the advice names the command that has
     * (training itself reads such lines as U+FFFD, once a model exists) */
    char hint[1200];
    snprintf(hint, sizeof hint, "learn the model first with 'tfm bpe learn --skip-invalid --vocab-size %d -o %s %s %s' "
             "(training then reads the line with U+FFFD)", c->vocab_size, c->bpe_model, c->train_src, c->train_tgt);
    BpeLearnOptions o = {.vocab_size = c->vocab_size, .normalization = c->normalization, .quiet = log_quiet,
                         .invalid_hint = hint};
    o.nsymbols = bpe_split_symbols(c->symbols, &syms);
    o.symbols = (const char *const *)syms;
    t->bpe = bpe_learn(files, 2, &o);
    bpe_free_symbols(syms, o.nsymbols);
    if (!t->bpe) return o.nsymbols && strstr(error_message(), "user symbol") ? error_wrap("[data] symbols") : -1;
    char *dir = xstrdup(c->bpe_model), *slash = strrchr(dir, '/');
    if (slash) { *slash = 0; if (dir[0] && mkdir_p(dir)) { free(dir); return -1; } }
    free(dir);
    if (bpe_save(t->bpe, c->bpe_model)) return -1;
    log_info("tokenizer: learned %d tokens, saved to %s", bpe_vocab_size(t->bpe), c->bpe_model);
    return 0;
}

/* Dropout and label smoothing are not part of a model's shape: on a model
 * loaded from a checkpoint, the current config's apply. */
static void use_config_rates(Model *m, const Config *c) {
    ModelDims d = model_dims_from_config(c, m->dims.vocab);
    m->dims.dropout = d.dropout;
    m->dims.attention_dropout = d.attention_dropout;
    m->dims.relu_dropout = d.relu_dropout;
    m->dims.label_smoothing = d.label_smoothing;
}

/* Fine-tuning: the weights and tokenizer of c->init_from; the config must
 * describe the same model, and a tokenizer it names (an existing bpe_model)
 * must be the checkpoint's. */
static int init_from_checkpoint(Trainer *t) {
    const Config *c = &t->c;
    Config old;
    memset(&old, 0, sizeof old);
    Bpe *bpe = NULL;
    if (checkpoint_load(c->init_from, &old, &bpe, &t->m, NULL)) return error_wrap("[train] init_from = %s", c->init_from);
    char why[256];
    int r = 0;
    if (!config_same_model(&old, c, why, sizeof why))
        r = errorf("%s: [train] init_from = %s holds a different model than the config describes (%s); "
                   "fine-tuning keeps the model's shape", t->config_path, c->init_from, why);
    config_free(&old);
    if (!r && file_exists(c->bpe_model)) {   /* the config names a tokenizer: it must be the model's */
        Bpe *named = bpe_load(c->bpe_model);
        if (!named) r = -1;
        else {
            char *a = bpe_to_string(named), *b = bpe_to_string(bpe);
            if (strcmp(a, b)) {
                int v = bpe_vocab_size(named) < bpe_vocab_size(bpe) ? bpe_vocab_size(named) : bpe_vocab_size(bpe), id = 0;
                while (id < v && !strcmp(bpe_piece(named, id), bpe_piece(bpe, id))) id++;
                if (id < v)
                    r = errorf("%s: [data] bpe_model = %s is not the tokenizer of [train] init_from = %s: piece %d is '%s' "
                               "there but '%s' in the checkpoint (remove bpe_model to use the checkpoint's)",
                               t->config_path, c->bpe_model, c->init_from, id, bpe_piece(named, id), bpe_piece(bpe, id));
                else
                    r = errorf("%s: [data] bpe_model = %s is not the tokenizer of [train] init_from = %s: %d vs %d pieces "
                               "(remove bpe_model to use the checkpoint's)",
                               t->config_path, c->bpe_model, c->init_from, bpe_vocab_size(named), bpe_vocab_size(bpe));
            }
            free(a);
            free(b);
            bpe_free(named);
        }
    } else if (!r) {   /* keep a copy where the config expects it, as a learned one would be */
        char *dir = xstrdup(c->bpe_model), *slash = strrchr(dir, '/');
        if (slash) { *slash = 0; if (dir[0] && mkdir_p(dir)) r = -1; }
        free(dir);
        if (!r) r = bpe_save(bpe, c->bpe_model);
    }
    if (!r) r = check_symbols(c, bpe, c->init_from);
    if (r) { bpe_free(bpe); model_free(&t->m); memset(&t->m, 0, sizeof t->m); return -1; }
    t->bpe = bpe;
    use_config_rates(&t->m, c);
    return 0;
}

/* On resume the checkpoint's tokenizer is the run's: a [data] bpe_model
 * that names another (an existing file with other pieces) is an error, not
 * silently ignored while the next checkpoint records the new name. */
static int resume_tokenizer_check(const Trainer *t, const Bpe *bpe, const char *ck) {
    const Config *c = &t->c;
    if (!file_exists(c->bpe_model)) return 0;   /* gone: the checkpoint's is used (and saved with it) */
    Bpe *named = tokenizer_load(c->bpe_model);
    if (!named) return error_wrap("%s: [data] bpe_model", t->config_path);
    char *a = bpe_to_string(named), *b = bpe_to_string(bpe);
    int same = !strcmp(a, b), na = bpe_vocab_size(named), nb = bpe_vocab_size(bpe);
    free(a);
    free(b);
    bpe_free(named);
    if (same) return 0;
    return errorf("%s: [data] bpe_model = %s (%d pieces) is not the tokenizer of the run in %s (%s holds its own, %d "
                  "pieces, which a resumed run keeps); restore the setting, or train in a new [train] dir",
                  t->config_path, c->bpe_model, na, c->dir, ck, nb);
}

/* Resume from the newest readable checkpoint in the run directory (an
 * unreadable one is reported and skipped), or start a new run. */
static int trainer_open(Trainer *t) {
    Config *c = &t->c;
    if (mkdir_p(c->dir)) return -1;
    if (dist_rank() == 0 && (t->lock_fd = run_dir_lock(c->dir)) < 0) return -1;   /* before any work */
    if (dist_rank() == 0) {   /* NAME.tmp.PID of interrupted writes, of every kind, and of the BPE model */
        run_dir_clean(c->dir, NULL);
        char *bdir = path_dirname(c->bpe_model), *slash = strrchr(c->bpe_model, '/');
        run_dir_clean(bdir, slash ? slash + 1 : c->bpe_model);
        free(bdir);
    }
    char **paths;
    int n = checkpoint_list(c->dir, &paths);
    if (n < 0) return -1;
    int loaded = 0;
    for (int i = n - 1; i >= 0 && !loaded; i--) {
        Config old;
        memset(&old, 0, sizeof old);
        Bpe *bpe = NULL;
        Model m;
        TrainState ts;
        memset(&m, 0, sizeof m);
        memset(&ts, 0, sizeof ts);
        /* The weights whole, the Adam moments of this rank's slice alone
         * (dist.h); the slices' checksums joined over the ranks check the
         * whole moments. Every rank takes the same checkpoint: a failure on
         * one is a failure on all. */
        int have_model = checkpoint_load(paths[i], &old, &bpe, &m, NULL) == 0, state = -1;
        MomentSlice part;
        if (have_model) {
            size_t lo = dist_slice_lo(m.num_params, dist_rank()), hi = dist_slice_lo(m.num_params, dist_rank() + 1);
            state = checkpoint_load_state(paths[i], m.num_params, lo, hi, &ts, &part);
        }
        int mine = state < 0, bad = dist_any(mine);
        if (!bad && state > 0) {
            MomentSlice *parts = xmalloc((size_t)dist_size() * sizeof *parts);
            dist_all_gather_bytes(&part, sizeof part, parts);
            bad = mine = checkpoint_moments_check(paths[i], parts, dist_size()) != 0;
            free(parts);
        }
        if (bad) {
            log_warn("%s: cannot resume from it: %s", paths[i], mine ? error_message() : "another rank could not read it");
            error_clear();
            if (have_model) { bpe_free(bpe); model_free(&m); }
            free(ts.adam_m);
            free(ts.adam_v);
            config_free(&old);
            continue;
        }
        char why[256];
        if (!config_same_model(&old, c, why, sizeof why)) {
            errorf("%s: the config changes the model's shape (%s) but %s holds a run of the old shape; "
                   "restore the setting or train in a new [train] dir", t->config_path, why, c->dir);
            config_free(&old); bpe_free(bpe); model_free(&m); free(ts.adam_m); free(ts.adam_v);
            checkpoint_list_free(paths, n);
            return -1;
        }
        if (!ts.adam_m || !ts.adam_v) {
            log_warn("%s: holds no training state (model only); skipped", paths[i]);
            config_free(&old); bpe_free(bpe); model_free(&m);
            continue;
        }
        if (check_symbols(c, bpe, paths[i]) || resume_tokenizer_check(t, bpe, paths[i])) {
            config_free(&old); bpe_free(bpe); model_free(&m); free(ts.adam_m); free(ts.adam_v);
            checkpoint_list_free(paths, n);
            return -1;
        }
        log_config_changes(&old, c);
        t->batches_changed = old.seed != c->seed || old.batch_tokens != c->batch_tokens || old.accumulate != c->accumulate ||
            old.max_src_len != c->max_src_len || old.max_tgt_len != c->max_tgt_len ||
            old.max_len_ratio != c->max_len_ratio || old.bpe_dropout != c->bpe_dropout ||
            !same_file(old.train_src, c->train_src) ||
            !same_file(old.train_tgt, c->train_tgt);
        if (t->batches_changed)
            log_warn("the batches differ from the checkpoint's run (seed, batch_tokens, accumulate, length filters or "
                     "training data or bpe_dropout changed): training goes on, but not exactly as an uninterrupted run would");
        config_free(&old);
        t->bpe = bpe;
        t->m = m;
        t->ts = ts;
        use_config_rates(&t->m, c);
        t->rng.s = ts.rng_state;
        t->resumed_from = xstrdup(paths[i]);
        char buf[32], dur[32];
        format_duration(ts.elapsed, dur, sizeof dur);
        log_info("resuming from %s: step %s, epoch %d, %s of training so far", paths[i],
                 commas(ts.step, buf, sizeof buf), ts.epoch + 1, dur);
        if (ts.ranks != dist_size())
            log_info("the checkpoint was written by %d rank%s, this run has %d: the data goes on from epoch %d, batch %ld "
                     "(the same batches, but summed in another order and with other dropout draws than an "
                     "uninterrupted run)", ts.ranks, ts.ranks > 1 ? "s" : "", dist_size(), ts.epoch + 1, ts.batch_index);
        loaded = 1;
    }
    int had_checkpoints = n > 0;
    checkpoint_list_free(paths, n);
    if (!loaded && had_checkpoints)
        return errorf("%s: has checkpoints but none could be loaded (see the warnings above); "
                      "move them away to start afresh", c->dir);
    if (loaded && c->init_from[0])
        log_info("[train] init_from = %s is ignored: %s already holds a run, which resumes", c->init_from, c->dir);
    if (!loaded) {
        /* rank 0 learns (or copies from init_from) and saves the tokenizer; the others then load it */
        if (dist_rank() > 0) dist_barrier();
        if (c->init_from[0] ? init_from_checkpoint(t) : tokenizer_open(t)) return -1;
        if (dist_rank() == 0) dist_barrier();
        if (!c->init_from[0]) {
            ModelDims d = model_dims_from_config(c, bpe_vocab_size(t->bpe));
            if (model_init(&t->m, &d, (uint64_t)c->seed)) return -1;
        }
        memset(&t->ts, 0, sizeof t->ts);
        /* the moments of this rank's slice (dist.h), zero */
        size_t slice = dist_slice_lo(t->m.num_params, dist_rank() + 1) - dist_slice_lo(t->m.num_params, dist_rank());
        t->ts.adam_m = xaligned(slice * sizeof(float));
        t->ts.adam_v = xaligned(slice * sizeof(float));
        t->ts.best_valid = INFINITY;
        rng_seed(&t->rng, (uint64_t)c->seed ^ 0x5DEECE66DULL);
        if (c->init_from[0])
            log_info("new run in %s, fine-tuning the weights of %s (tokenizer: %d tokens); fresh optimizer, schedule and step count",
                     c->dir, c->init_from, bpe_vocab_size(t->bpe));
        else log_info("new run in %s", c->dir);
    }
    t->last_saved_step = loaded ? t->ts.step : -1;
    t->lo = dist_slice_lo(t->m.num_params, dist_rank());
    t->hi = dist_slice_lo(t->m.num_params, dist_rank() + 1);
    return 0;
}

static void log_corpus(const char *what, const char *src, const char *tgt, const CorpusStats *st, const Corpus *c,
                       const Config *cfg, int train) {
    char a[32], b[32], d[32];
    log_info("%s: %s pairs from %s + %s%s", what, commas(st->read, a, sizeof a), src, tgt,
             st->from_cache ? " (encoded ids from the cache)" : "");
    if (train)
        log_info("%s: dropped %ld empty, %ld longer than %d/%d tokens, %ld with length ratio > %g; kept %s pairs, %s tokens",
                 what, st->empty, st->too_long, cfg->max_src_len, cfg->max_tgt_len, st->ratio, cfg->max_len_ratio,
                 commas(st->kept, b, sizeof b), commas(c->num_ids, d, sizeof d));
    if (st->invalid_utf8) log_warn("%s: %ld lines had invalid UTF-8 or NUL bytes (replaced by U+FFFD)", what, st->invalid_utf8);
}

static int data_open(Trainer *t) {
    const Config *c = &t->c;
    CorpusStats st;
    if (dist_rank() > 0) dist_barrier();   /* rank 0 writes the corpus caches first; the others read them */
    char *cache = join(c->dir, "train.corpus");
    int r = corpus_load(&t->train, c->train_src, c->train_tgt, t->bpe, cache, &st);
    free(cache);
    if (r) return -1;
    corpus_filter(&t->train, 1, c->max_src_len, c->max_tgt_len, c->max_len_ratio, &st);
    log_corpus("train", c->train_src, c->train_tgt, &st, &t->train, c, 1);
    if (t->train.n == 0)
        return errorf("%s + %s: no training pairs left after filtering (see the counts above)", c->train_src, c->train_tgt);
    if (c->bpe_dropout > 0) {   /* the pairs kept above, encoded again at each epoch (plan_epoch) */
        TextOptions again = TEXT_DEFAULT;   /* read for the ids already: said once there */
        again.quiet = 1;
        again.stream = 0;
        if (text_lines_read_with(&t->train_text[0], c->train_src, &again) ||
            text_lines_read_with(&t->train_text[1], c->train_tgt, &again))
            return -1;
        long last = t->train.line[t->train.n - 1];
        if (t->train_text[0].n <= last || t->train_text[1].n <= last)
            return errorf("%s + %s changed while being read (%ld/%ld lines, the corpus has %ld): run again",
                          c->train_src, c->train_tgt, t->train_text[0].n, t->train_text[1].n, last + 1);
        log_info("train: BPE-dropout %g: each epoch encodes these pairs again, each merge left out with that probability",
                 c->bpe_dropout);
    }
    if (c->valid_src[0]) {
        cache = join(c->dir, "valid.corpus");
        r = corpus_load(&t->valid, c->valid_src, c->valid_tgt, t->bpe, cache, &st);
        free(cache);
        if (r) return -1;
        /* the dev set is scored whole, as tfm eval scores it: a pair longer
         * than the model's positions is truncated, not dropped */
        log_corpus("valid", c->valid_src, c->valid_tgt, &st, &t->valid, c, 0);
        long first_cut, cut = corpus_truncate(&t->valid, c->max_positions, &first_cut);
        if (cut)
            log_warn("valid: %ld sentence pairs longer than the model's %d positions were truncated (the first: line %ld)",
                     cut, c->max_positions, first_cut + 1);
        if (c->valid_bleu) {
            TextOptions again = TEXT_DEFAULT;   /* read for the loss already: said once there */
            again.quiet = 1;
            if (text_lines_read_with(&t->valid_src_text, c->valid_src, &again) ||
                (t->valid_nrefs = bleu_read_lines_with(c->valid_tgt, &again, &t->valid_refs)) < 0)
                return -1;
            if (t->valid_nrefs != t->valid_src_text.n)
                return errorf("%s has %ld lines but %s has %ld", c->valid_src, t->valid_src_text.n, c->valid_tgt,
                              t->valid_nrefs);
        }
    }
    if (dist_rank() == 0) dist_barrier();
    return 0;
}

/* The batches of the current epoch (re-derived from seed and epoch); with
 * bpe_dropout, first the epoch's own segmentation of the training pairs
 * (from seed and epoch too, so a resumed run rebuilds it). */
static void plan_epoch(Trainer *t) {
    if (t->c.bpe_dropout > 0) {
        uint64_t seed = hash64(&t->ts.epoch, sizeof t->ts.epoch, (uint64_t)t->c.seed ^ 0xB9E0D50F0B7A5EEDULL);
        corpus_resample(&t->train, &t->train_text[0], &t->train_text[1], t->bpe, (float)t->c.bpe_dropout, seed);
        long first, cut = corpus_truncate(&t->train, t->c.max_positions, &first);
        if (cut)
            log_warn("epoch %d: %ld training pairs longer than the model's %d positions after BPE-dropout were "
                     "truncated (the first: line %ld)", t->ts.epoch + 1, cut, t->c.max_positions, t->train.line[first] + 1);
    }
    epoch_plan(&t->ep, &t->train, t->c.batch_tokens, (uint64_t)t->c.seed, t->ts.epoch, 1);
    batch_alloc(&t->batch, t->ep.max_B, t->ep.max_cells);
    if (t->session_batches == 0) {   /* once per session */
        char a[32];
        log_info("batches: %s per epoch of <= %d padded tokens (mean %.0f sentences), padding waste %.1f%%%s",
                 commas(t->ep.n, a, sizeof a), t->c.batch_tokens, (double)t->train.n / (t->ep.n ? t->ep.n : 1),
                 100 * epoch_padding_waste(&t->ep),
                 t->c.accumulate > 1 ? ", gradients summed over accumulate batches per update" : "");
    }
}

/* ---- checkpoints ------------------------------------------------------ */
/* One Adam moment, sliced over the ranks (each holds its slice, mine),
 * gathered a piece at a time as checkpoint_save writes it (StFill): every
 * rank makes the same calls of dist_gather_range in the same order, rank 0
 * from the writer, the others from save_checkpoint's loop. */
typedef struct {
    const float *mine;
    size_t n;
} MomentSlices;

static int gather_piece(void *ctx, void *dst, size_t offset, size_t bytes) {
    const MomentSlices *g = ctx;
    dist_gather_range(g->mine, g->n, offset / sizeof(float), bytes / sizeof(float), dst);
    return 0;
}

static int save_checkpoint(Trainer *t) {
    if (t->last_saved_step == t->ts.step) return 0;
    /* Each rank holds its slice of the Adam moments; rank 0 writes the whole
     * of them, gathered from the ranks one st_fill_piece() (16 MB) at a time
     * straight into the file: no buffer of the whole moments anywhere. If
     * rank 0 fails before or while writing, it ends the job (dist_abort in
     * cli_train.c), which frees the ranks waiting to send. */
    size_t np = t->m.num_params;
    TrainState ts = t->ts;
    MomentSlices slices[2] = {{t->ts.adam_m, np}, {t->ts.adam_v, np}};
    if (dist_size() > 1) {
        if (dist_rank() > 0) {   /* the pieces rank 0's writer asks for, in its order */
            size_t bytes = np * sizeof(float), piece = st_fill_piece();
            for (int i = 0; i < 2; i++)
                for (size_t off = 0; off < bytes; off += piece)
                    gather_piece(&slices[i], NULL, off, bytes - off < piece ? bytes - off : piece);
            t->last_saved_step = t->ts.step;
            return 0;
        }
        ts.adam_m = ts.adam_v = NULL;
        ts.moments_fill = gather_piece;
        ts.moments_ctx[0] = &slices[0];
        ts.moments_ctx[1] = &slices[1];
    }
    ts.ranks = dist_size();
    if (!all_finite(t->m.params, np))
        return errorf("not writing a checkpoint at step %ld: the weights contain NaN/inf", t->ts.step);
    ts.rng_state = t->rng.s;
    ts.elapsed = elapsed(t);
    char *path = checkpoint_path(t->c.dir, t->ts.step);
    int r = checkpoint_save(path, &t->m, &t->c, t->bpe, &ts);
    if (!r) {
        progress_clear(t);
        log_info("checkpoint %s", path);
        t->last_saved_step = t->ts.step;
        if (checkpoint_prune(t->c.dir, t->c.keep, path) < 0) { log_warn("%s", error_message()); error_clear(); }
    }
    free(path);
    return r;
}

/* Average the last average_last checkpoints that load into
 * average.safetensors (one that does not load is set aside, never averaged).
 * When no average is made, a message says why; an average.safetensors left
 * by an earlier session (of other checkpoints) is removed, never left to
 * pass for this run's. -1 + errorf if the averaging itself fails. */
static int average_checkpoints(Trainer *t) {
    if (dist_rank() > 0) return 0;
    char **paths;
    char *out = checkpoint_run_file(t->c.dir, CHECKPOINT_AVERAGE);
    int k = checkpoint_list_good(t->c.dir, t->c.average_last, &paths), rc = 0;
    if (k >= 2) {
        if (k < t->c.average_last)
            log_warn("averaging only %d checkpoints: average_last = %d, but %s", k, t->c.average_last,
                     t->c.keep < t->c.average_last ? "keep is smaller" : "the run has no more that load");
        if (checkpoint_average((const char *const *)paths, k, out) == 0)
            log_info("averaged the last %d checkpoints (steps %ld..%ld) into %s", k, checkpoint_step(paths[0]),
                     checkpoint_step(paths[k - 1]), out);
        else rc = -1;
    } else if (k >= 0) {   /* a promised output that is not made: say why */
        char why[160];
        if (t->c.average_last < 2) snprintf(why, sizeof why, "[train] average_last = %d (nothing to average)", t->c.average_last);
        else if (t->c.keep < 2) snprintf(why, sizeof why, "[train] keep = %d leaves one checkpoint (average_last = %d)", t->c.keep, t->c.average_last);
        else snprintf(why, sizeof why, "the run has %d checkpoint%s that load%s (average_last = %d)", k, k == 1 ? "" : "s",
                      k == 1 ? "s" : "", t->c.average_last);
        int gone = unlink(out) == 0;   /* too few checkpoints: an older average is not this run's */
        log_warn("no %s made: %s%s", out, why, gone ? "; the older one there, of other checkpoints, was removed" : "");
    } else rc = -1;
    if (rc) {
        int gone = unlink(out) == 0;
        error_wrap("training is done and its checkpoints are written, but %s could not be made%s", out,
                   gone ? " (the older one there was removed)" : "");
    }
    if (k >= 0) checkpoint_list_free(paths, k);
    free(out);
    return rc;
}

/* ---- validation --------------------------------------------------------- */
/* BLEU of greedy translations of the dev set, scored as tfm eval scores
 * them (eval.c: lines with an empty reference are left out). */
static double valid_bleu(Trainer *t) {
    DecodeOptions o;
    decode_options_from_config(&o, &t->c);
    o.beam = 1;   /* greedy: cheap and enough to follow progress */
    long n = t->valid_src_text.n;
    const char **src = xmalloc((size_t)(n ? n : 1) * sizeof *src), **ref = xmalloc((size_t)(n ? n : 1) * sizeof *ref);
    for (long i = 0; i < n; i++) {
        src[i] = t->valid_src_text.text + t->valid_src_text.start[i];
        ref[i] = t->valid_refs[i];
    }
    Translator *tr = translator_new(&t->m, 1);
    DevScores ds;
    double score = eval_translate(tr, t->bpe, &o, src, ref, n, NULL, NULL, &ds) == 0 ? ds.bleu.score : NAN;
    translator_free(tr);
    progress_clear(t);
    if (ds.empty && !t->warned_empty_refs) {
        log_warn("validation BLEU: %ld empty reference lines in %s (the first: line %ld) are left out, as tfm eval does",
                 ds.empty, t->c.valid_tgt, ds.first_empty + 1);
        t->warned_empty_refs = 1;
    }
    if (isnan(score)) { log_warn("validation BLEU failed: %s", error_message()); error_clear(); }
    free(src);
    free(ref);
    return score;
}

/* Loss, NLL and perplexity on the dev set (dropout off); early stopping
 * and best.safetensors. Returns -1 on error, 1 if patience ran out. */
static int validate(Trainer *t) {
    LossStats total = {0};
    if (eval_loss(&t->m, &t->valid, t->c.batch_tokens, NULL, &total)) return -1;
    double loss = total.loss / (double)total.tokens, nll = total.nll / (double)total.tokens;
    double bleu = t->c.valid_bleu ? valid_bleu(t) : NAN;
    int better = nll < t->ts.best_valid;
    if (better) { t->ts.best_valid = nll; t->ts.bad_valids = 0; }
    else t->ts.bad_valids++;
    progress_clear(t);
    char bl[32] = "";
    if (!isnan(bleu)) snprintf(bl, sizeof bl, " | BLEU %.2f", bleu);
    log_info("valid step %ld | loss %.4f | nll %.4f | ppl %.2f%s | best ppl %.2f%s", t->ts.step, loss, nll, exp(nll), bl,
             exp(t->ts.best_valid), better ? " (new best)" : "");
    if (t->vtsv) {
        fprintf(t->vtsv, "%ld\t%d\t%.6f\t%.6f\t%.4f\t%.2f\t%.1f\n", t->ts.step, t->ts.epoch + 1, loss, nll, exp(nll),
                isnan(bleu) ? -1.0 : bleu, elapsed(t));
        tsv_written(t, t->vtsv, "valid.tsv");
        if (t->log_failed) return -1;
    }
    if (better) {
        if (!all_finite(t->m.params, t->m.num_params)) return errorf("the weights contain NaN/inf at step %ld", t->ts.step);
        char *best = checkpoint_run_file(t->c.dir, CHECKPOINT_BEST);
        int r = checkpoint_save(best, &t->m, &t->c, t->bpe, NULL);
        free(best);
        if (r) return -1;
    }
    if (t->c.patience && t->ts.bad_valids >= t->c.patience) {
        log_info("early stopping: no better validation NLL in the last %d validations (best ppl %.2f)", t->c.patience,
                 exp(t->ts.best_valid));
        return 1;
    }
    return 0;
}

/* ---- logging ------------------------------------------------------------ */
/* Time left until the nearest of max_steps, max_epochs and max_time. */
static void eta(const Trainer *t, char *buf, size_t n) {
    double best = INFINITY, spent = now_seconds() - t->session_start;
    const char *which = "";
    if (t->session_steps > 0 && t->c.max_steps) {
        double s = (double)(t->c.max_steps - t->ts.step) * spent / t->session_steps;
        if (s < best) best = s, which = "max_steps";
    }
    if (t->session_batches > 0 && t->c.max_epochs) {
        double left = (double)(t->ep.n - t->ts.batch_index) + (double)(t->c.max_epochs - t->ts.epoch - 1) * t->ep.n;
        double s = left * spent / t->session_batches;
        if (s < best) best = s, which = "max_epochs";
    }
    if (t->c.max_time > 0) {
        double s = t->c.max_time - elapsed(t);
        if (s < best) best = s, which = "max_time";
    }
    if (isinf(best)) { snprintf(buf, n, "no limit"); return; }
    char d[32];
    format_duration(best < 0 ? 0 : best, d, sizeof d);
    snprintf(buf, n, "%s (%s)", d, which);
}

static void log_step(Trainer *t, double lr, int final_line) {
    double loss = t->ts.log.loss / (double)t->ts.log.tokens, nll = t->ts.log.nll / (double)t->ts.log.tokens;
    double tps = t->ts.log.seconds > 0 ? t->ts.log.real_tokens / t->ts.log.seconds : 0;
    char el[32], e[64], tp[32];
    format_duration(elapsed(t), el, sizeof el);
    eta(t, e, sizeof e);
    commas((long)tps, tp, sizeof tp);
    char line[512];
    snprintf(line, sizeof line,
             "step %ld | epoch %d | loss %.4f | nll %.4f | ppl %.2f | lr %.3e | gnorm %.3f | %s tok/s | time %s | ETA %s",
             t->ts.step, t->ts.epoch + 1, loss, nll, exp(nll), lr, t->last_gnorm, tp, el, e);
    if (log_quiet) return;
    if (!final_line) {   /* the live line on a terminal: short, cut to its width (a wrapped line breaks \r) */
        char e2[64], live[512];
        eta(t, e2, sizeof e2);
        snprintf(live, sizeof live, "step %ld | epoch %d | loss %.3f | ppl %.1f | lr %.2e | %s tok/s | time %s | ETA %s",
                 t->ts.step, t->ts.epoch + 1, loss, exp(nll), lr, tp, el, e2);
        struct winsize ws;
        size_t width = ioctl(2, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 1 ? ws.ws_col - 1 : 79;
        if (strlen(live) > width) live[width] = 0;
        fprintf(stderr, "\r\033[K%s", live);
        t->progress_shown = 1;
        return;
    }
    progress_clear(t);
    fprintf(stderr, "tfm: %s\n", line);
}

/* A row of train.tsv or valid.tsv was written: a failed write (a full disk)
 * is an error at once (the run stops; resumed, it logs the same rows). */
static void tsv_written(Trainer *t, FILE *f, const char *name) {
    if (fflush(f) == 0 && !ferror(f)) return;
    int e = errno ? errno : EIO;
    if (!t->log_failed) {
        char *p = join(t->c.dir, name);
        errorf("%s: cannot write the row of step %ld: %s (the run stops; free space, then resume: the rows are "
               "written again from the last checkpoint)", p, t->ts.step, strerror(e));
        free(p);
    }
    t->log_failed = e;
}

/* The row of the interval that ends at this step. At the end of a session
 * (end = 1) a partial interval is logged but its sums are kept, so that the
 * checkpoint holds them and a resumed run logs the whole interval (and
 * drops this partial row, tsv_truncate). */
static void log_window_flush(Trainer *t, double lr, int end) {
    if (!t->ts.log.steps) return;
    log_step(t, lr, 1);
    if (t->tsv && !t->log_failed) {
        double loss = t->ts.log.loss / (double)t->ts.log.tokens, nll = t->ts.log.nll / (double)t->ts.log.tokens;
        fprintf(t->tsv, "%ld\t%d\t%.6f\t%.6f\t%.4f\t%.6e\t%.4f\t%.0f\t%.1f\n", t->ts.step, t->ts.epoch + 1, loss, nll,
                exp(nll), lr, t->last_gnorm, t->ts.log.seconds > 0 ? t->ts.log.real_tokens / t->ts.log.seconds : 0, elapsed(t));
        tsv_written(t, t->tsv, "train.tsv");
    }
    if (end) return;
    t->ts.log.loss = t->ts.log.nll = 0;
    t->ts.log.tokens = t->ts.log.real_tokens = t->ts.log.steps = 0;
    t->ts.log.seconds = 0;
}

/* ---- the loop ------------------------------------------------------------ */
/* Weights bit-identical on every rank? (-1 + errorf if not) */
static int replicas_check(Trainer *t) {
    /* the weights; the Adam moments are sharded: each slice has one copy */
    float *bufs[1] = {t->m.params};
    size_t n[1] = {t->m.num_params};
    return dist_check_replicas(bufs, n, 1, t->ts.step);
}

/* The all-gather of an update with bf16 products on N ranks: each rank's
 * slice packed (model_wire_pack: the product weights as bf16, 2 bytes, the
 * rest fp32), into the gradient buffer, which is free until the next
 * update zeroes it; the others' slices unpacked into the bf16 copies, which
 * hold exactly what the fp32 all-gather and rounding would give them. The
 * fp32 masters of the others' product weights then hold those bf16 values
 * until weights_exact. */
static void gather_bf16(Trainer *t) {
    int N = dist_size(), rank = dist_rank();
    size_t np = t->m.num_params;
    char *buf = (char *)t->m.grads;
    double t0 = now_seconds();
    model_wire_pack(&t->m, t->lo, t->hi, buf + t->wire_off[rank]);
    t->opt_seconds += now_seconds() - t0;
    dist_all_gather_blocks(buf, t->wire_off, t->wire_len);
    t0 = now_seconds();
    for (int r = 0; r < N; r++)
        if (r != rank) model_wire_unpack(&t->m, dist_slice_lo(np, r), dist_slice_lo(np, r + 1), buf + t->wire_off[r]);
    t->opt_seconds += now_seconds() - t0;
    t->masters_rounded = 1;
}

/* The all-gather of an update, in fp32 or with bf16 on the wire, both
 * giving every rank the same bf16 copies, so the training is the same bit
 * for bit either way. Which is faster depends on the link: bf16 sends 0.65x
 * the bytes (the base model) but packs and unpacks them, which costs more
 * than it saves over shared memory (2 ranks on one machine) and less over a
 * network. So with bf16 products on N ranks each session measures both:
 * update 1 in fp32 (a warm-up), updates 2-7 alternating, and the rest go
 * the way whose seconds, summed over the ranks, were fewer. */
enum { WIRE_TRY, WIRE_FP32, WIRE_BF16, WIRE_TRIES = 7 };

static void gather_weights(Trainer *t) {
    size_t np = t->m.num_params;
    long k = t->session_steps;   /* this update's number in the session, from 1 */
    int bf16 = t->wire_off && (t->wire == WIRE_BF16 || (t->wire == WIRE_TRY && k > 1 && k % 2));
    double t0 = now_seconds();
    if (bf16) gather_bf16(t);
    else {
        dist_all_gather(t->m.params, np);
        double t1 = now_seconds();
        model_bf16_round(&t->m, 0, t->lo);
        model_bf16_round(&t->m, t->hi, np);
        t->opt_seconds += now_seconds() - t1;
        t->masters_rounded = 0;
    }
    if (!t->wire_off || t->wire != WIRE_TRY || k < 2) return;
    t->wire_try[bf16] += now_seconds() - t0;
    if (k < WIRE_TRIES) return;
    double s[2] = {t->wire_try[0], t->wire_try[1]};
    dist_sum_doubles(s, 2);   /* the same figures, so the same choice, on every rank */
    t->wire = s[1] < s[0] ? WIRE_BF16 : WIRE_FP32;
    int n = (WIRE_TRIES - 1) / 2;
    log_info("all-gather of the weights: %s from now on (%.3f s per update with bf16 on the wire, %.3f s in fp32: "
             "updates 2-%d, summed over the ranks)", t->wire == WIRE_BF16 ? "bf16 on the wire" : "fp32",
             s[1] / n, s[0] / n, WIRE_TRIES);
}

/* Before anything reads the weights as fp32 (a checkpoint, validation, the
 * replica check): after bf16 all-gathers, every slice again in fp32 from
 * its owner. Every rank calls it at the same points. */
static void weights_exact(Trainer *t) {
    if (!t->masters_rounded) return;
    dist_all_gather(t->m.params, t->m.num_params);
    t->masters_rounded = 0;
}

typedef enum { RUN_DONE, RUN_SIGNAL, RUN_ERROR } RunEnd;

static RunEnd train_loop(Trainer *t) {
    Config *c = &t->c;
    size_t np = t->m.num_params;
    int bad_in_row = 0;
    double lr = lr_schedule(t->ts.step > 0 ? t->ts.step : 1, c->d_model, c->warmup, c->lr_scale);
    char why[128] = "";   /* the limit that ended the run, logged after the last figures */
    for (;;) {
        /* limits, checked between updates */
        if (c->max_steps && t->ts.step >= c->max_steps) {
            snprintf(why, sizeof why, "reached max_steps = %ld", c->max_steps);
            break;
        }
        if (c->max_time > 0 && dist_any(elapsed(t) >= c->max_time)) {   /* the ranks' clocks differ: any */
            char d[32];
            format_duration(c->max_time, d, sizeof d);
            snprintf(why, sizeof why, "reached max_time = %s at step %ld", d, t->ts.step);
            break;
        }
        if (t->ts.batch_index >= t->ep.n) {           /* next epoch */
            t->ts.epoch++;
            t->ts.batch_index = 0;
            if (c->max_epochs && t->ts.epoch >= c->max_epochs) {
                snprintf(why, sizeof why, "reached max_epochs = %d at step %ld", c->max_epochs, t->ts.step);
                break;
            }
            plan_epoch(t);
            progress_clear(t);
            log_info("epoch %d", t->ts.epoch + 1);
        }

        /* one update: up to `accumulate` batches of this epoch per rank;
         * rank r of N takes batches first + r, first + r + N, ... */
        double t0 = now_seconds();
        int N = dist_size(), rank = dist_rank();
        long first = t->ts.batch_index, nb = t->ep.n - first;
        if (nb > (long)c->accumulate * N) nb = (long)c->accumulate * N;
        long tgt_tokens = 0;   /* of the whole update, all ranks */
        for (long k = first; k < first + nb; k++) tgt_tokens += t->ep.tgt_tokens[k];
        float scale = 1.0f / (float)tgt_tokens;
        /* dropout: one stream on one process; with N ranks, each update
         * draws a seed from the shared stream and rank r forks its own */
        Rng fork, *rng = &t->rng;
        if (N > 1) {
            rng_seed(&fork, rng_u64(&t->rng) ^ (0x9E3779B97F4A7C15ULL * (uint64_t)(rank + 1)));
            rng = &fork;
        }
        model_zero_grad(&t->m);
        LossStats sum = {0};
        long real = 0;
        /* Test hook: TFM_TEST_REVERSE_SUM sums this rank's batches last to
         * first, the same gradients in another order; tests/mpi.sh measures
         * with it what the order of the sums alone does to 20 updates, the
         * noise floor of its N ranks == 1 process check. */
        static int reverse = -1;
        if (reverse < 0) reverse = getenv("TFM_TEST_REVERSE_SUM") != NULL;
        long mine = nb > rank ? (nb - rank + N - 1) / N : 0;
        for (long j = 0; j < mine; j++) {
            long k = first + rank + (long)N * (reverse ? mine - 1 - j : j);
            LossStats s = {0};
            batch_fill(&t->batch, &t->train, &t->ep, k);
            if (model_forward_backward(&t->m, &t->batch, rng, 1, scale, &s)) return RUN_ERROR;
            sum.loss += s.loss;
            sum.nll += s.nll;
            sum.tokens += s.tokens;
            real += t->batch.src_tokens + t->batch.tgt_tokens;
        }
        t->ts.batch_index += nb;
        t->session_batches += nb;
        /* g[lo, hi) = this slice summed over the ranks, and its sum of
         * squares; then that and the figures summed over the ranks, with
         * whether any rank was asked to stop (one small collective) */
        dist_reduce_scatter(t->m.grads, np);
        double t_opt = now_seconds();
        double sumsq = grad_sumsq(t->m.grads + t->lo, t->hi - t->lo);
        t->opt_seconds += now_seconds() - t_opt;
        if (N > 1) {
            double fig[6] = {sum.loss, sum.nll, (double)sum.tokens, (double)real, g_stop_signal, sumsq};
            dist_sum_doubles(fig, 6);
            sum.loss = fig[0], sum.nll = fig[1], sum.tokens = (long)fig[2], real = (long)fig[3], sumsq = fig[5];
            if (fig[4] > 0 && !t->stop) t->stop = g_stop_signal ? g_stop_signal : SIGTERM;
        } else t->stop = g_stop_signal;
        double gnorm = sqrt(sumsq);
        if (!isfinite(sum.loss) || !isfinite(gnorm)) {
            bad_in_row++;
            progress_clear(t);
            log_warn("step %ld: %s is %s; update skipped (%d in a row)", t->ts.step + 1,
                     isfinite(sum.loss) ? "gradient norm" : "loss", isnan(isfinite(sum.loss) ? gnorm : sum.loss) ? "NaN" : "inf",
                     bad_in_row);
            if (bad_in_row >= MAX_BAD_STEPS) {
                errorf("stopping: %d updates in a row had a NaN/inf loss or gradient (at step %ld); no checkpoint was "
                       "written from the bad state. Try a smaller [train] lr_scale, a longer warmup, clip_norm = 1 or "
                       "[model] norm = pre, then resume from the last checkpoint in %s",
                       MAX_BAD_STEPS, t->ts.step + 1, c->dir);
                return RUN_ERROR;
            }
            if (t->stop) break;
            continue;
        }
        bad_in_row = 0;
        t->ts.step++;
        t->session_steps++;
        lr = lr_schedule(t->ts.step, c->d_model, c->warmup, c->lr_scale);
        /* clipping, Adam and (bf16) the products' rounded weights in one
         * pass over this rank's slice; then every slice to every rank, and
         * the bf16 copies of the others' */
        t_opt = now_seconds();
        float *round_f;
        uint16_t *round_h;
        size_t lo = t->lo, hi = t->hi;
        model_bf16_copies(&t->m, &round_f, &round_h);
        adam_update_fused(t->m.params + lo, t->m.grads + lo, t->ts.adam_m, t->ts.adam_v, hi - lo, lr, c->beta1, c->beta2,
                          c->eps, t->ts.step, clip_factor(gnorm, c->clip_norm), round_f ? round_f + lo : NULL,
                          round_h ? round_h + lo : NULL);
        t->opt_seconds += now_seconds() - t_opt;
        gather_weights(t);
        t->last_gnorm = gnorm;
        t->ts.log.loss += sum.loss;
        t->ts.log.nll += sum.nll;
        t->ts.log.tokens += sum.tokens;
        t->ts.log.real_tokens += real;
        t->ts.log.steps++;
        t->ts.log.seconds += now_seconds() - t0;

        if (t->ts.step % c->log_interval == 0) {
            log_window_flush(t, lr, 0);
            if (dist_any(t->log_failed)) {
                if (!t->log_failed) errorf("rank 0 could not write train.tsv at step %ld", t->ts.step);
                return RUN_ERROR;
            }
        } else if (t->tty) log_step(t, lr, 0);
        if (t->ts.step % c->checkpoint_interval == 0) {
            weights_exact(t);
            if (replicas_check(t)) return RUN_ERROR;   /* before any write */
        }
        if (t->valid.n && t->ts.step % c->valid_interval == 0) {
            weights_exact(t);
            /* rank 0 scores the whole dev set (the figures are exactly a
             * single process's); the others wait for its verdict */
            int v = rank == 0 ? validate(t) : 0;
            dist_broadcast(&v, sizeof v, 0);
            if (v < 0) return RUN_ERROR;
            if (v > 0) break;
        }
        if (t->ts.step % c->checkpoint_interval == 0 && save_checkpoint(t)) return RUN_ERROR;
        if (N == 1) t->stop = g_stop_signal;
        if (t->stop) break;
    }
    log_window_flush(t, lr, 1);
    if (dist_any(t->log_failed)) {
        if (!t->log_failed) errorf("rank 0 could not write train.tsv at step %ld", t->ts.step);
        return RUN_ERROR;
    }
    if (why[0]) log_info("%s", why);
    weights_exact(t);   /* for the last checkpoint */
    if (replicas_check(t)) return RUN_ERROR;
    return t->stop ? RUN_SIGNAL : RUN_DONE;
}

static void trainer_free(Trainer *t) {
    if (t->tsv) fclose(t->tsv);
    if (t->vtsv) fclose(t->vtsv);
    batch_free(&t->batch);
    epoch_free(&t->ep);
    corpus_free(&t->train);
    corpus_free(&t->valid);
    text_lines_free(&t->valid_src_text);
    text_lines_free(&t->train_text[0]);
    text_lines_free(&t->train_text[1]);
    bleu_free_lines(t->valid_refs, t->valid_nrefs > 0 ? t->valid_nrefs : 0);
    free(t->ts.adam_m);
    free(t->ts.adam_v);
    free(t->wire_off);
    model_free(&t->m);
    if (t->bpe) bpe_free(t->bpe);
    config_free(&t->c);
    free(t->resumed_from);
    if (t->lock_fd >= 0) close(t->lock_fd);   /* the run directory is free again */
}

/* The files tfm train writes in the run directory must not be files it
 * reads (a corpus, the config, the tokenizer, init_from): checked before
 * any work, as every command checks its outputs (output_check). */
static int run_dir_check_inputs(const Trainer *t) {
    const Config *c = &t->c;
    static const char *outputs[] = {"train.tsv", "valid.tsv", "train.corpus", "valid.corpus", CHECKPOINT_BEST,
                                    CHECKPOINT_AVERAGE, RUN_DIR_LOCK};
    struct stat sb;
    if (stat(c->dir, &sb) != 0 || !S_ISDIR(sb.st_mode)) return 0;   /* made later: nothing in it is read */
    const char *in[] = {c->train_src, c->train_tgt, c->valid_src, c->valid_tgt, t->config_path, c->bpe_model, c->init_from};
    for (size_t i = 0; i < sizeof outputs / sizeof *outputs; i++) {
        char *p = join(c->dir, outputs[i]);
        int r = stat(p, &sb) != 0 ? 0 : output_check(   /* absent: it is no input (run_dir_lock checks the directory) */"[train] dir: the run's", p, in, (int)(sizeof in / sizeof *in), 0);
        free(p);
        if (r) return -1;
    }
    return 0;
}

static int train(Trainer *t) {
    Config *c = &t->c;
    if (config_check_train_paths(c)) return -1;
    /* the corpora by their resolved paths: the checkpoints record them so, and a
     * resume through another spelling of the config's path finds the same files */
    static const char *const keys[] = {"data.train_src", "data.train_tgt", "data.valid_src", "data.valid_tgt"};
    const char *files[] = {c->train_src, c->train_tgt, c->valid_src, c->valid_tgt};
    for (int i = 0; i < 4; i++) {
        char *real = files[i][0] ? realpath(files[i], NULL) : NULL;
        if (real && config_set_option(c, "resolved path", keys[i], real)) error_clear();   /* kept as given */
        free(real);
    }
    if (run_dir_check_inputs(t)) return -1;
    if (threads_init(c->threads)) return -1;
    if (trainer_open(t)) return -1;
    if (data_open(t)) return -1;
    model_set_precision(&t->m, c->bf16);
    t->m.recompute = c->recompute;
    if (c->bf16) log_info("precision bf16: matrix products with bf16 inputs, fp32 sums (%s)", bf16_mode());
    char a[32];
    log_info("model: %d+%d layers, d_model %d, d_ff %d, %d heads, vocabulary %d: %s parameters; %d threads, BLIS kernels %s",
             c->encoder_layers, c->decoder_layers, c->d_model, c->d_ff, c->heads, t->m.dims.vocab,
             commas((long)t->m.num_params, a, sizeof a), threads_count(), blis_kernels());
    if (dist_size() > 1) {
        size_t np = t->m.num_params;
        int N = dist_size();
        char wire[128] = "";
        /* bf16 products: the product weights may go as bf16 (gather_weights
         * measures and chooses); the test hook TFM_TEST_WIRE=fp32 or bf16
         * forces one, for tests/mpi.sh to compare the two */
        const char *force = getenv("TFM_TEST_WIRE");
        if (t->m.bf16 && !(force && !strcmp(force, "fp32"))) {
            t->wire = force && !strcmp(force, "bf16") ? WIRE_BF16 : WIRE_TRY;
            t->wire_off = xmalloc(2 * (size_t)N * sizeof *t->wire_off);
            t->wire_len = t->wire_off + N;
            size_t total = 0;
            for (int r = 0; r < N; r++) {
                t->wire_off[r] = total;
                total += t->wire_len[r] = model_wire_bytes(&t->m, dist_slice_lo(np, r), dist_slice_lo(np, r + 1));
            }
            snprintf(wire, sizeof wire, " (%s: %.1f MB instead of %.1f)",
                     t->wire == WIRE_BF16 ? "bf16 on the wire for the product weights"
                                          : "bf16 on the wire for the product weights if faster", total / 1e6, np * 4 / 1e6);
        }
        log_info("data-parallel: %d ranks (%s), each update = %d ranks x accumulate %d batches; the gradient "
                 "(%.1f MB) reduce-scattered, Adam sharded: this rank updates %s parameters and holds their moments "
                 "(%.1f MB instead of %.1f), the weights all-gathered%s", N, dist_library(), N,
                 c->accumulate, np * 4 / 1e6, commas((long)(t->hi - t->lo), a, sizeof a), (t->hi - t->lo) * 8 / 1e6,
                 np * 8 / 1e6, wire);
        if (replicas_check(t)) return -1;   /* every rank loaded or built the same state */
    }
    if (c->max_steps && t->ts.step >= c->max_steps) {
        char at[64];
        if (t->ts.step == c->max_steps) snprintf(at, sizeof at, "= max_steps");
        else snprintf(at, sizeof at, "past max_steps = %ld", c->max_steps);
        log_info("the run in %s is already at step %ld %s: nothing to do (raise [train] max_steps to go on)",
                 c->dir, t->ts.step, at);
        return 0;
    }
    if (c->patience && t->ts.bad_valids >= c->patience) {
        log_info("the run in %s already stopped early (patience %d): nothing to do (raise [train] patience to go on)",
                 c->dir, c->patience);
        return 0;
    }
    char *p = join(c->dir, "train.tsv");
    if (dist_rank() == 0) t->tsv = tsv_open(p, "step\tepoch\tloss\tnll\tppl\tlr\tgnorm\ttokens_per_s\telapsed_s", t->ts.step,
                                         c->log_interval);
    free(p);
    if (t->valid.n && dist_rank() == 0) {
        p = join(c->dir, "valid.tsv");
        t->vtsv = tsv_open(p, "step\tepoch\tloss\tnll\tppl\tbleu\telapsed_s", t->ts.step, 0);
        free(p);
    }
    plan_epoch(t);
    /* the data position of a resumed run: within the epoch it names (batch_index = ep.n: the epoch is done) */
    if (t->ts.batch_index > t->ep.n) {
        if (!t->batches_changed)
            return errorf("%s: training state batch_index = %ld, but epoch %d has %ld batches (the checkpoint is "
                          "damaged; move it away to resume from an earlier one)", t->resumed_from ? t->resumed_from : c->dir, t->ts.batch_index, t->ts.epoch + 1, t->ep.n);
        log_warn("training state batch_index = %ld is past the %ld batches of epoch %d with the changed data or "
                 "batching: the next epoch starts", t->ts.batch_index, t->ep.n, t->ts.epoch + 1);
    }
    t->tty = isatty(2) && !log_quiet;
    t->session_start = now_seconds();
    t->elapsed0 = t->ts.elapsed;
    install_signals();
    RunEnd end = train_loop(t);
    if (end == RUN_ERROR) return -1;
    if (t->ts.step == 0 && t->last_saved_step < 0) {   /* stopped before the first update */
        log_info("stopped before the first update: nothing to save");
        return 0;
    }
    if (save_checkpoint(t)) return -1;
    if (dist_size() > 1) {
        double busy = now_seconds() - t->session_start, comm = dist_comm_seconds(), wait = dist_wait_seconds();
        double gather = dist_gather_seconds(), sent = dist_gather_bytes();
        dist_sum_doubles(&sent, 1);   /* the bytes all the ranks sent */
        long u = t->session_steps > 0 ? t->session_steps : 1;
        log_info("reduce-scatter: %.3f s per update (%.1f%% of this session's %.1f s), and %.3f s per update waiting "
                 "for the slowest rank (%.1f%%); all-gather: %.3f s per update (%.1f%%), %.1f MB per update sent by the "
                 "ranks in all", comm / u, busy > 0 ? 100 * comm / busy : 0.0, busy, wait / u,
                 busy > 0 ? 100 * wait / busy : 0.0, gather / u, busy > 0 ? 100 * gather / busy : 0.0, sent / u / 1e6);
        char b[32];
        log_info("optimizer step: %.3f s per update (%.1f%%): gradient norm, clipping and Adam on this rank's %s "
                 "of the %s parameters, bf16 copies", t->opt_seconds / u, busy > 0 ? 100 * t->opt_seconds / busy : 0.0,
                 commas((long)(t->hi - t->lo), a, sizeof a), commas((long)t->m.num_params, b, sizeof b));
    }
    long made;
    double made_s;
    gemm_dnnl_made(&made, &made_s);
    if (made) {
        double busy = now_seconds() - t->session_start;
        log_info("oneDNN: %ld primitives made in %.3f s (%.2f%% of this session's %.1f s)", made, made_s,
                 busy > 0 ? 100 * made_s / busy : 0.0, busy);
    }
    if (end == RUN_SIGNAL) {
        char *path = checkpoint_path(c->dir, t->ts.step);
        const char *sig = g_stop_signal != t->stop ? "a signal to another rank" : t->stop == SIGTERM ? "SIGTERM"
                          : t->stop == SIGUSR1 ? "SIGUSR1" : "SIGINT";
        log_info("interrupted (%s) at step %ld; checkpoint %s written. Resume with: %s%s", sig, t->ts.step, path,
                 dist_size() > 1 ? "mpirun ... " : "", command_line() ? command_line() : "tfm train (the same command)");
        free(path);
        return 0;
    }
    if (average_checkpoints(t)) return -1;
    if (dist_rank() == 0) {   /* the other promised output: say why it is not there */
        char *best = checkpoint_run_file(c->dir, CHECKPOINT_BEST);
        if (!file_exists(best)) {
            if (!c->valid_src[0]) log_warn("no %s made: no dev set ([data] valid_src and valid_tgt)", best);
            else log_warn("no %s made: no validation ran (valid_interval = %d, the run ended at step %ld)", best,
                          c->valid_interval, t->ts.step);
        }
        free(best);
    }
    char d[32];
    format_duration(elapsed(t), d, sizeof d);
    if (isfinite(t->ts.best_valid))
        log_info("done: step %ld, epoch %d, %s; best validation ppl %.2f (%s/%s)", t->ts.step, t->ts.epoch + 1, d,
                 exp(t->ts.best_valid), c->dir, CHECKPOINT_BEST);
    else
        log_info("done: step %ld, epoch %d, %s", t->ts.step, t->ts.epoch + 1, d);
    return 0;
}

int train_run(Config *c, const char *config_path) {
    Trainer t;
    memset(&t, 0, sizeof t);
    t.config_path = config_path;
    t.lock_fd = -1;
    t.c = *c;           /* the trainer owns it from here */
    memset(c, 0, sizeof *c);
    int r = train(&t);
    if (r) progress_clear(&t);   /* the caller prints the error on a clean line */
    trainer_free(&t);
    return r ? -1 : 0;
}
