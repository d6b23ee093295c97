/* config.h — one INI file describes a whole experiment.
 *
 * Every setting has the paper's value as its default ("Attention Is All You
 * Need", base model, section 5 and 6.1); configs/base.ini spells them out.
 * Parsing is done by inih; the table in config.c is the single list of keys,
 * their types, ranges, defaults and help, used for parsing, --set, printing
 * and "did you mean".
 */
#ifndef TFM_CONFIG_H
#define TFM_CONFIG_H

#include <stdio.h>

typedef struct {
    /* [model] */
    int encoder_layers, decoder_layers;   /* N = 6 */
    int d_model, d_ff, heads;             /* 512, 2048, 8 */
    double dropout;                       /* residual + embedding dropout, 0.1 */
    double attention_dropout;             /* on attention weights, 0 */
    double relu_dropout;                  /* inside the FFN, 0 */
    double label_smoothing;               /* eps_ls = 0.1 */
    int tie_embeddings;                   /* 1: src emb = tgt emb = pre-softmax W */
    int pre_norm;                         /* norm = post (0, paper) | pre (1) */
    int max_positions;                    /* longest sequence the model accepts */

    /* [data] */
    char *train_src, *train_tgt;          /* paths resolved against the config */
    char *valid_src, *valid_tgt;
    char *src_lang, *tgt_lang;
    char *bpe_model;                      /* learned here if it does not exist */
    char *symbols;                        /* user-defined BPE symbols, "<2de>,<bt>" */
    int vocab_size;                       /* joint BPE vocabulary, ~37000 */
    char *normalization;                  /* nfkc | nfc | none */
    int max_src_len, max_tgt_len;         /* in BPE tokens; longer pairs dropped */
    double max_len_ratio;                 /* drop pairs with len ratio above this */
    double bpe_dropout;                   /* BPE-dropout of the training text, each epoch (0: off) */

    /* [train] */
    char *dir;                            /* run directory */
    char *init_from;                      /* fine-tuning: a new run starts from this checkpoint's weights */
    int batch_tokens;                     /* source + target tokens per batch */
    int accumulate;                       /* batches per update */
    double lr_scale;                      /* multiplies the paper's schedule */
    int warmup;                           /* 4000 */
    double beta1, beta2, eps;             /* 0.9, 0.98, 1e-9 */
    double clip_norm;                     /* 0: off */
    long max_steps;                       /* 100000 */
    int max_epochs;                       /* 0: unlimited */
    double max_time;                      /* seconds, 0: unlimited */
    long seed;
    int log_interval, checkpoint_interval, keep, valid_interval, patience;
    int valid_bleu;                       /* also translate the dev set and score it */
    int recompute;                        /* the backward remakes activations (model.h m->recompute) */
    int average_last;                     /* checkpoints to average at the end, 5 */

    /* [decode] */
    int beam;                             /* 4 */
    double alpha;                         /* length penalty, 0.6 */
    double max_len_a;                     /* max output = a * |x| + b */
    int max_len_b;
    int batch_size;                       /* sentences per decoding batch */

    /* [run] */
    int threads;                          /* 0: all cores */
    int bf16;                             /* precision: a Precision (util.h), fp32 0, bf16 1, int8 2 (translation only) */

    char *path;                           /* file it was loaded from, or NULL */
} Config;

void config_defaults(Config *c);
void config_free(Config *c);
void config_copy(Config *dst, const Config *src);

/* Load `path` on top of the defaults and validate. -1 + errorf("file:line: ..."),
 * and the config is left freed. */
int config_load(Config *c, const char *path);
/* Parse INI text (e.g. from a checkpoint's metadata); `name` is for messages. */
int config_load_string(Config *c, const char *text, const char *name);
/* Apply "section.key=value" (from --set). Every setting, whatever its
 * source (file, --set, an option such as --threads, a checkpoint's recorded
 * config), goes through one check of its type, range and characters, so
 * that whatever tfm accepts it can write into a checkpoint and read back. */
int config_set(Config *c, const char *assignment);
/* An option that stands for a key ("--threads" for "run.threads"): sets it
 * through the same check; messages name the option. On -1 (both), the
 * config is left as it was. */
int config_set_option(Config *c, const char *option, const char *key, const char *value);
/* The value of such an option, checked by the key's own rules, for commands
 * that take it before (or without) a config; a bad one is a usage error of
 * `cmd` naming the option and the key (exit 2). */
double config_option(const char *cmd, const char *option, const char *key, const char *value);
/* String settings are at most this long (a path, a list of symbols). */
#define CONFIG_MAX_STRING 4000

/* The settings table, for tests and tools. */
typedef struct {
    const char *section, *name;
    int is_string;       /* free text (T_STR, T_PATH) */
    int is_number, is_integer;
    int changes_model;   /* a different value is a different model */
    double min, max;     /* numbers */
} ConfigKeyInfo;
int config_num_keys(void);
int config_key_info(int i, ConfigKeyInfo *info);
/* The value of "section.key" as config_write writes it. */
int config_get(const Config *c, const char *key, char *buf, size_t n);
/* Range and consistency checks (heads divide d_model, ...). */
int config_validate(const Config *c);
/* Check the files training needs exist (train_src, train_tgt, valid_*). */
int config_check_train_paths(const Config *c);
/* Write the effective configuration as INI text. */
void config_write(const Config *c, FILE *f);
char *config_to_string(const Config *c);
/* 1 if a and b describe the same model (resume-compatible): every key the
 * table marks as changing the model is equal. On 0, `why` names the first
 * differing key. */
int config_same_model(const Config *a, const Config *b, char *why, int why_len);
/* Print the key reference (for --help and the README). */
void config_print_reference(FILE *f);

#endif
