/* config.c — the table of settings, INI parsing (inih), validation.
 *
 * One row per key: section, name, type, where it lives in Config, allowed
 * range, the paper's default, and a line of help. Defaults are applied by
 * parsing the default strings through the same code as the file, so the
 * table is the only place a default is written down.
 */
#include "config.h"
#include "text.h"
#include "utf8.h"
#include "util.h"

#include <ctype.h>
#include <errno.h>
#include <ini.h>
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

typedef enum { T_INT, T_LONG, T_FLOAT, T_BOOL, T_STR, T_PATH, T_DURATION, T_NORM, T_UNICODE, T_PRECISION } KeyType;

/* MODEL: the key changes the model itself (its shape, its parameters), so a
 * checkpoint resumes, averages and fine-tunes only under the same value
 * (config_same_model); every other key may change between sessions. */
enum { MODEL = 1 };

typedef struct {
    const char *section, *name;
    KeyType type;
    size_t offset;
    double min, max;
    const char *def;
    const char *help;
    int flags;
} Key;

#define O(f) offsetof(Config, f)
static const Key KEYS[] = {
    {"model", "encoder_layers", T_INT, O(encoder_layers), 1, 64, "6", "encoder layers N", MODEL},
    {"model", "decoder_layers", T_INT, O(decoder_layers), 1, 64, "6", "decoder layers N", MODEL},
    {"model", "d_model", T_INT, O(d_model), 2, 65536, "512", "model width d_model", MODEL},
    {"model", "d_ff", T_INT, O(d_ff), 1, 1 << 20, "2048", "inner FFN width d_ff", MODEL},
    {"model", "heads", T_INT, O(heads), 1, 1024, "8", "attention heads h (must divide d_model)", MODEL},
    {"model", "dropout", T_FLOAT, O(dropout), 0, 0.99, "0.1", "residual and embedding dropout P_drop", 0},
    {"model", "attention_dropout", T_FLOAT, O(attention_dropout), 0, 0.99, "0", "dropout on attention weights", 0},
    {"model", "relu_dropout", T_FLOAT, O(relu_dropout), 0, 0.99, "0", "dropout after the FFN's ReLU", 0},
    {"model", "label_smoothing", T_FLOAT, O(label_smoothing), 0, 0.99, "0.1", "label smoothing eps_ls", 0},
    {"model", "tie_embeddings", T_BOOL, O(tie_embeddings), 0, 1, "true", "share source/target embeddings and pre-softmax weights", MODEL},
    {"model", "norm", T_NORM, O(pre_norm), 0, 1, "post", "post (paper: LayerNorm after residual add) or pre", MODEL},
    {"model", "max_positions", T_INT, O(max_positions), 8, 1 << 20, "1024", "longest sequence (tokens) the model accepts", MODEL},

    {"data", "train_src", T_PATH, O(train_src), 0, 0, "", "training source text (plain or .gz)", 0},
    {"data", "train_tgt", T_PATH, O(train_tgt), 0, 0, "", "training target text, line-aligned with train_src", 0},
    {"data", "valid_src", T_PATH, O(valid_src), 0, 0, "", "dev source text", 0},
    {"data", "valid_tgt", T_PATH, O(valid_tgt), 0, 0, "", "dev target text", 0},
    {"data", "src_lang", T_STR, O(src_lang), 0, 0, "en", "source language code", 0},
    {"data", "tgt_lang", T_STR, O(tgt_lang), 0, 0, "de", "target language code", 0},
    {"data", "bpe_model", T_PATH, O(bpe_model), 0, 0, "bpe.model", "joint BPE model; learned from the training data if missing", 0},
    {"data", "symbols", T_STR, O(symbols), 0, 0, "", "user-defined BPE symbols (tags), comma-separated, e.g. <2de>,<bt>: one piece each, never split", 0},
    {"data", "vocab_size", T_INT, O(vocab_size), 8, 1 << 24, "37000", "joint BPE vocabulary size", MODEL},
    {"data", "normalization", T_UNICODE, O(normalization), 0, 0, "nfkc", "Unicode normalization: nfkc, nfc or none", 0},
    {"data", "max_src_len", T_INT, O(max_src_len), 1, 1 << 20, "256", "drop pairs whose source is longer (BPE tokens)", 0},
    {"data", "max_tgt_len", T_INT, O(max_tgt_len), 1, 1 << 20, "256", "drop pairs whose target is longer (BPE tokens)", 0},
    {"data", "max_len_ratio", T_FLOAT, O(max_len_ratio), 0, 1e9, "9", "drop pairs whose length ratio exceeds this (0: off)", 0},
    {"data", "bpe_dropout", T_FLOAT, O(bpe_dropout), 0, 1, "0", "BPE-dropout (Provilkov et al. 2020): each epoch encodes the training text again, each merge left out with this probability (0: off; 0.1 in their paper)", 0},

    {"train", "dir", T_PATH, O(dir), 0, 0, "run", "run directory: checkpoints, logs, caches", 0},
    {"train", "init_from", T_PATH, O(init_from), 0, 0, "", "fine-tune: a new run starts from this checkpoint's weights (and tokenizer), with a fresh optimizer, schedule and step count", 0},
    {"train", "batch_tokens", T_INT, O(batch_tokens), 2, 1 << 30, "50000", "source + target tokens per batch (paper: ~25k + 25k)", 0},
    {"train", "accumulate", T_INT, O(accumulate), 1, 1 << 16, "1", "batches whose gradients are summed per update", 0},
    {"train", "lr_scale", T_FLOAT, O(lr_scale), 0, 1e6, "1", "factor on lr = d_model^-0.5 * min(step^-0.5, step * warmup^-1.5)", 0},
    {"train", "warmup", T_INT, O(warmup), 1, 1 << 30, "4000", "warmup steps", 0},
    {"train", "beta1", T_FLOAT, O(beta1), 0, 0.999999, "0.9", "Adam beta1", 0},
    {"train", "beta2", T_FLOAT, O(beta2), 0, 0.999999, "0.98", "Adam beta2", 0},
    {"train", "eps", T_FLOAT, O(eps), 0, 1, "1e-9", "Adam epsilon", 0},
    {"train", "clip_norm", T_FLOAT, O(clip_norm), 0, 1e9, "0", "clip the gradient's global L2 norm (0: off)", 0},
    {"train", "max_steps", T_LONG, O(max_steps), 0, 1e15, "100000", "stop after this many updates (0: no limit)", 0},
    {"train", "max_epochs", T_INT, O(max_epochs), 0, 1 << 30, "0", "stop after this many epochs (0: no limit)", 0},
    {"train", "max_time", T_DURATION, O(max_time), 0, 1e12, "0", "stop after this long: seconds or 90m, 2h, 2h30m, 1d (0: no limit)", 0},
    {"train", "seed", T_LONG, O(seed), 0, 1e15, "1", "random seed (init, dropout, batch order)", 0},
    {"train", "log_interval", T_INT, O(log_interval), 1, 1 << 30, "100", "log every this many steps", 0},
    {"train", "checkpoint_interval", T_INT, O(checkpoint_interval), 1, 1 << 30, "1000", "save a training checkpoint every this many steps", 0},
    {"train", "keep", T_INT, O(keep), 1, 1 << 20, "5", "training checkpoints kept", 0},
    {"train", "valid_interval", T_INT, O(valid_interval), 1, 1 << 30, "1000", "validate every this many steps", 0},
    {"train", "patience", T_INT, O(patience), 0, 1 << 20, "0", "stop after this many validations without improvement (0: off)", 0},
    {"train", "valid_bleu", T_BOOL, O(valid_bleu), 0, 1, "false", "also translate the dev set (greedy) and report BLEU", 0},
    {"train", "recompute", T_BOOL, O(recompute), 0, 1, "false", "remake FFN hidden layers, attention queries and cores (cross-attention keys, values) in backward: less memory, more time", 0},
    {"train", "average_last", T_INT, O(average_last), 1, 1 << 20, "5", "checkpoints averaged for the final model (paper: 5 base, 20 big)", 0},

    {"decode", "beam", T_INT, O(beam), 1, 1024, "4", "beam size (1: greedy)", 0},
    {"decode", "alpha", T_FLOAT, O(alpha), 0, 10, "0.6", "length penalty alpha, lp(Y) = ((5+|Y|)/6)^alpha", 0},
    {"decode", "max_len_a", T_FLOAT, O(max_len_a), 0, 1000, "1", "max output length = a * |input| + b", 0},
    {"decode", "max_len_b", T_INT, O(max_len_b), 0, 1 << 20, "50", "max output length = a * |input| + b", 0},
    {"decode", "batch_size", T_INT, O(batch_size), 1, 1 << 20, "32", "sentences per decoding batch", 0},

    {"run", "threads", T_INT, O(threads), 0, 4096, "0", "threads for all compute (0: all cores)", 0},
    {"run", "precision", T_PRECISION, O(bf16), 0, 2, "fp32", "matrix products: fp32, bf16 (inputs rounded to bf16, fp32 sums), or int8 (translate and eval only)", 0},
};
#undef O
#define NKEYS ((int)(sizeof KEYS / sizeof KEYS[0]))

static const char *SECTIONS[] = {"model", "data", "train", "decode", "run"};

static int is_string_type(KeyType t) { return t == T_STR || t == T_PATH || t == T_UNICODE; }

/* Parse "90", "90s", "15m", "2h", "1d", or parts in falling units as the
 * logs print them ("2h30m", "1h19m07s"), into seconds; each number by
 * parse_number, the one strict parser. A bare number is seconds only alone
 * ("1h30" is refused: 30 what?). */
static int parse_duration(const char *v, double *out) {
    static const char UNITS[] = "dhms";
    static const double SECONDS[] = {86400, 3600, 60, 1};
    double total = 0;
    int parts = 0, last = -1;           /* index in UNITS of the previous part's unit */
    for (const char *p = v; *p;) {
        while (*p == ' ' && parts) p++;   /* "2h 30m" */
        if (!*p) break;
        size_t n = strcspn(p, UNITS);
        int u = p[n] ? (int)(strchr(UNITS, p[n]) - UNITS) : 3;
        if (!p[n] && parts) return -1;  /* a trailing bare number after a unit */
        if (u <= last) return -1;       /* units must fall: "30m2h", "1h1h" */
        size_t len = n;
        while (p[n] && len && p[len - 1] == ' ') len--;   /* "10 h" (but not "10 ") */
        char num[64];
        if (len == 0 || len >= sizeof num) return -1;
        memcpy(num, p, len);
        num[len] = 0;
        double x;
        if (parse_number(num, 0, -INFINITY, INFINITY, &x)) return -1;   /* nan, inf: not a duration */
        if (parts && x < 0) return -1;  /* "1h-5m" */
        total += x * SECONDS[u];
        parts++;
        last = u;
        p += n + (p[n] != 0);
    }
    if (!parts) return -1;
    *out = total;
    return 0;
}

/* The characters a string setting may hold: what config_write can write and
 * the INI reader give back unchanged (in a file, a checkpoint's recorded
 * config or --set alike). NULL if `v` is fine, else what is wrong. */
static const char *string_problem(const char *v) {
    size_t n = strlen(v);
    if (n > CONFIG_MAX_STRING) return "longer than " "4000" " bytes";
    if (!utf8_valid(v, n)) return "not valid UTF-8";
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)v[i];
        if (ch < 0x20 || ch == 0x7f) return "a control character (a newline, a tab, ...)";
        if (ch == ';' && (i == 0 || v[i - 1] == ' ')) return "';' after a space (the INI reader takes it for a comment)";
    }
    if (n && (v[0] == ' ' || v[n - 1] == ' ')) return "a leading or trailing space (the INI reader strips it)";
    return NULL;
}

/* Set one key from its text value. `where` is "file:line" for messages;
 * `base` is the config path that relative paths are resolved against.
 * Every setting comes through here, whatever its source: a config file,
 * a checkpoint's recorded config, --set, and the command-line options that
 * stand for a key (config_option). */
/* x as a person writes it: an integer in full (1048576, 1000000000000000), else 15 digits. */
static void number_text(double x, char *buf, size_t n) {
    if (x == floor(x) && fabs(x) < 1e18) snprintf(buf, n, "%.0f", x);
    else snprintf(buf, n, "%.15g", x);
}

static int key_set(Config *c, const Key *k, const char *value, const char *where, const char *base) {
    char *p = (char *)c + k->offset;
    switch (k->type) {
    case T_INT: case T_LONG: case T_FLOAT: case T_DURATION: {
        double d;
        int r;
        if (k->type == T_DURATION) {
            if (parse_duration(value, &d))
                return errorf("%s: [%s] %s expects a duration (e.g. 3600, 90m, 2h, 2h30m), got '%s'", where, k->section, k->name, value);
            r = d >= k->min && d <= k->max ? 0 : NUM_RANGE;
        } else {
            r = parse_number(value, k->type != T_FLOAT, k->min, k->max, &d);
            if (r == NUM_SYNTAX)
                return errorf("%s: [%s] %s expects %s, got '%s'", where, k->section, k->name,
                              k->type == T_FLOAT ? "a number" : "an integer", value);
        }
        if (r == NUM_RANGE) {   /* the bounds as plain numbers: [8, 1048576], never 1.04858e+06 */
            char lo[40], hi[40];
            number_text(k->min, lo, sizeof lo);
            number_text(k->max, hi, sizeof hi);
            return errorf("%s: [%s] %s = %s is out of range [%s, %s]", where, k->section, k->name, value, lo, hi);
        }
        if (k->type == T_INT) *(int *)p = (int)d;
        else if (k->type == T_LONG) *(long *)p = (long)d;
        else *(double *)p = d;
        return 0;
    }
    case T_BOOL:
        if (!strcasecmp(value, "true") || !strcmp(value, "1") || !strcasecmp(value, "yes") || !strcasecmp(value, "on")) *(int *)p = 1;
        else if (!strcasecmp(value, "false") || !strcmp(value, "0") || !strcasecmp(value, "no") || !strcasecmp(value, "off")) *(int *)p = 0;
        else return errorf("%s: [%s] %s expects true or false, got '%s'", where, k->section, k->name, value);
        return 0;
    case T_NORM:
        if (!strcmp(value, "post")) *(int *)p = 0;
        else if (!strcmp(value, "pre")) *(int *)p = 1;
        else return errorf("%s: [%s] %s expects post or pre, got '%s'", where, k->section, k->name, value);
        return 0;
    case T_PRECISION:
        if ((*(int *)p = precision_from_name(value)) < 0)
            return errorf("%s: [%s] %s expects %s, got '%s'", where, k->section, k->name, precision_names(), value);
        return 0;
    case T_UNICODE:
        if (strcmp(value, "nfkc") && strcmp(value, "nfc") && strcmp(value, "none"))
            return errorf("%s: [%s] %s expects nfkc, nfc or none, got '%s'", where, k->section, k->name, value);
        /* fallthrough */
    case T_STR: case T_PATH: {
        char *v = (k->type == T_PATH && value[0] && base) ? path_relative_to(base, value) : xstrdup(value);
        const char *bad = string_problem(v);
        if (bad) {
            free(v);
            return errorf("%s: [%s] %s: the value holds %s; tfm could not write it into a checkpoint's config and "
                          "read it back", where, k->section, k->name, bad);
        }
        char **s = (char **)p;
        free(*s);
        *s = v;
        return 0;
    }
    }
    return errorf("%s: internal: bad key type", where);
}

static void value_text(const Config *c, const Key *k, char *buf, size_t n);

static const Key *key_find(const char *section, const char *name) {
    for (int i = 0; i < NKEYS; i++)
        if (!strcmp(KEYS[i].section, section) && !strcmp(KEYS[i].name, name)) return &KEYS[i];
    return NULL;
}

static int unknown_key(const char *where, const char *section, const char *name) {
    int known_section = 0;
    for (size_t i = 0; i < sizeof SECTIONS / sizeof *SECTIONS; i++)
        if (!strcmp(SECTIONS[i], section)) known_section = 1;
    if (!known_section) {
        const char *best = NULL; int bd = 3;
        for (size_t i = 0; i < sizeof SECTIONS / sizeof *SECTIONS; i++) {
            int d = edit_distance(section, SECTIONS[i]);
            if (d < bd) bd = d, best = SECTIONS[i];
        }
        if (best) return errorf("%s: unknown section [%s] (did you mean [%s]?)", where, section, best);
        return errorf("%s: unknown section [%s] (expected model, data, train, decode or run)", where, section);
    }
    const Key *best = NULL; int bd = 4;
    for (int i = 0; i < NKEYS; i++) {
        int d = edit_distance(name, KEYS[i].name);
        if (!strcmp(KEYS[i].section, section)) d -= 1; /* prefer same section */
        if (d < bd) bd = d, best = &KEYS[i];
    }
    if (best) return errorf("%s: unknown key '%s' in [%s] (did you mean [%s] %s?)", where, name, section, best->section, best->name);
    return errorf("%s: unknown key '%s' in [%s]", where, name, section);
}

void config_defaults(Config *c) {
    memset(c, 0, sizeof *c);
    for (int i = 0; i < NKEYS; i++)
        ASSERT(key_set(c, &KEYS[i], KEYS[i].def, "default", NULL) == 0);   /* the table's own defaults parse */
}

void config_free(Config *c) {
    for (int i = 0; i < NKEYS; i++)
        if (is_string_type(KEYS[i].type)) {
            char **s = (char **)((char *)c + KEYS[i].offset);
            free(*s);
            *s = NULL;
        }
    free(c->path);
    c->path = NULL;
}

void config_copy(Config *dst, const Config *src) {
    *dst = *src;
    for (int i = 0; i < NKEYS; i++)
        if (is_string_type(KEYS[i].type)) {
            char **s = (char **)((char *)dst + KEYS[i].offset);
            if (*s) *s = xstrdup(*s);
        }
    if (src->path) dst->path = xstrdup(src->path);
}

/* ---- parsing with inih ---------------------------------------------- */
typedef struct {
    Config *c;
    const char *name;     /* file name for messages */
    const char *base;     /* for relative paths, NULL: keep as written */
    int line;             /* inih's current line (via ini_parse_stream trick below) */
    unsigned char seen[sizeof KEYS / sizeof KEYS[0]];
    int failed;
} ParseState;

/* inih does not pass line numbers to the handler; it returns the line of the
 * first handler failure. We record the message without a line and prefix
 * "file:line:" once ini_parse returns. */
static int on_ini_pair(void *user, const char *section, const char *name, const char *value) {
    ParseState *st = user;
    if (st->failed) return 0;
    if (!name) return 1; /* section start (INI_CALL_HANDLER_ON_NEW_SECTION) */
    const Key *k = key_find(section, name);
    if (!k && !section[0]) { errorf("@: key '%s' outside any [section]", name); st->failed = 1; return 0; }
    if (!k) { unknown_key("@", section, name); st->failed = 1; return 0; }
    int idx = (int)(k - KEYS);
    if (st->seen[idx]) {
        errorf("@: duplicate key '%s' in [%s]", name, section);
        st->failed = 1;
        return 0;
    }
    st->seen[idx] = 1;
    if (key_set(st->c, k, value, "@", st->base)) { st->failed = 1; return 0; }
    return 1;
}

/* Replace the "@" placeholder at the start of the error with "file:line". */
static int fix_location(const char *name, int line) {
    char msg[2048];
    snprintf(msg, sizeof msg, "%s", error_message());
    const char *rest = msg[0] == '@' ? msg + 1 : msg;
    return errorf("%s:%d%s", name, line, rest);
}

static int parse_common(Config *c, const char *name, const char *base, const char *text) {
    ParseState st = {.c = c, .name = name, .base = base};
    ini_use_stack = 0;               /* heap line buffer that may grow ... */
    ini_allow_realloc = 1;
    ini_max_line = 1 << 16;          /* ... to 64 KiB: Debian's default 200 silently truncates;
                                      * config_load refuses longer lines (text.h) */
    ini_allow_inline_comments = 1;
    ini_stop_on_first_error = 1;
    ini_allow_multiline = 0;
    ini_allow_no_value = 0;
    int r = ini_parse_string(text, on_ini_pair, &st);
    if (r == -2) return errorf("%s: out of memory while parsing", name);
    if (r > 0) {
        if (st.failed) return fix_location(name, r);
        return errorf("%s:%d: syntax error (expected [section] or key = value)", name, r);
    }
    return config_validate(c) ? error_wrap("%s", name) : 0;
}

/* On failure the config is freed (config_free on it stays harmless). */
int config_load(Config *c, const char *path) {
    config_defaults(c);
    if (!file_exists(path)) { config_free(c); return errorf("%s: config file not found", path); }
    /* Through text.h: a directory or an unreadable file fails here, not as an
     * empty config; a NUL byte (inih would stop there) or a line longer than
     * inih's buffer (it would parse the rest as a new line) is an error
     * naming the file and line; at most TEXT_MAX_CONFIG bytes. */
    TextOptions o = TEXT_DEFAULT;
    o.invalid = TEXT_BYTES;
    o.max_line = TEXT_MAX_CONFIG_LINE;
    o.max_bytes = TEXT_MAX_CONFIG;
    char *text = text_read_all(path, &o, NULL);
    if (!text) { config_free(c); return error_wrap("config file"); }
    c->path = xstrdup(path);
    int r = parse_common(c, path, path, text);
    free(text);
    if (r) { config_free(c); return -1; }
    return 0;
}

int config_load_string(Config *c, const char *text, const char *name) {
    config_defaults(c);
    if (parse_common(c, name, NULL, text)) { config_free(c); return -1; }
    return 0;
}

/* The key named "section.name" (k and a message about it on failure). */
static const Key *key_lookup(const char *dotted, const char *where) {
    const char *dot = strchr(dotted, '.');
    char section[64], name[128];
    size_t ls = dot ? (size_t)(dot - dotted) : 0, ln = dot ? strlen(dot + 1) : 0;
    if (!dot || ls >= sizeof section || ln >= sizeof name) { errorf("%s: no setting '%s'", where, dotted); return NULL; }
    memcpy(section, dotted, ls); section[ls] = 0;
    memcpy(name, dot + 1, ln); name[ln] = 0;
    const Key *k = key_find(section, name);
    if (!k) unknown_key(where, section, name);
    return k;
}

int config_set(Config *c, const char *assignment) {
    const char *dot = strchr(assignment, '.'), *eq = strchr(assignment, '=');
    if (!dot || !eq || dot > eq)
        return errorf("--set %s: expected section.key=value (e.g. train.max_steps=100)", assignment);
    char key[192];
    if ((size_t)(eq - assignment) >= sizeof key) return errorf("--set %s: key too long", assignment);
    memcpy(key, assignment, (size_t)(eq - assignment));
    key[eq - assignment] = 0;
    /* Paths given on the command line are relative to the current directory. */
    return config_set_option(c, "--set", key, eq + 1);
}

int config_set_option(Config *c, const char *option, const char *key, const char *value) {
    const Key *k = key_lookup(key, option);
    if (!k) return -1;
    Config before;   /* a refused value leaves the config as it was */
    config_copy(&before, c);
    if (key_set(c, k, value, option, NULL) || config_validate(c)) {
        config_free(c);
        *c = before;
        return -1;
    }
    config_free(&before);
    return 0;
}

double config_option(const char *cmd, const char *option, const char *key, const char *value) {
    Config scratch;
    config_defaults(&scratch);
    const Key *k = key_lookup(key, option);
    ASSERT(k && !is_string_type(k->type));   /* options that stand for numeric (or named) keys */
    if (key_set(&scratch, k, value, option, NULL)) {
        config_free(&scratch);
        usage_error(cmd, "%s", error_message());
    }
    const char *p = (const char *)&scratch + k->offset;
    double v = k->type == T_LONG ? (double)*(const long *)p
             : k->type == T_FLOAT || k->type == T_DURATION ? *(const double *)p : (double)*(const int *)p;
    config_free(&scratch);
    return v;
}

int config_num_keys(void) { return NKEYS; }

int config_key_info(int i, ConfigKeyInfo *info) {
    if (i < 0 || i >= NKEYS) return -1;
    const Key *k = &KEYS[i];
    info->section = k->section;
    info->name = k->name;
    info->is_string = is_string_type(k->type) && k->type != T_UNICODE;
    info->is_integer = k->type == T_INT || k->type == T_LONG;
    info->is_number = info->is_integer || k->type == T_FLOAT || k->type == T_DURATION;
    info->changes_model = (k->flags & MODEL) != 0;
    info->min = k->min;
    info->max = k->max;
    return 0;
}

int config_get(const Config *c, const char *key, char *buf, size_t n) {
    const Key *k = key_lookup(key, "config_get");
    if (!k) return -1;
    value_text(c, k, buf, n);
    return 0;
}

int config_validate(const Config *c) {
    if (c->d_model % c->heads)
        return errorf("[model] heads = %d does not divide d_model = %d", c->heads, c->d_model);
    if (c->d_model % 2)
        return errorf("[model] d_model = %d must be even (sinusoidal positions pair sin and cos)", c->d_model);
    if (c->max_src_len + 2 > c->max_positions || c->max_tgt_len + 2 > c->max_positions)
        return errorf("[data] max_src_len/max_tgt_len (%d/%d) + 2 must not exceed [model] max_positions = %d",
                      c->max_src_len, c->max_tgt_len, c->max_positions);
    if (c->vocab_size < 261)
        return errorf("[data] vocab_size = %d is too small: the 4 special tokens, 256 byte-fallback tokens and the word mark ▁ need 261", c->vocab_size);
    if (!c->tie_embeddings)
        return errorf("[model] tie_embeddings = false is not supported: tfm uses one shared vocabulary (see README)");
    if (c->batch_tokens < c->max_src_len + c->max_tgt_len)
        return errorf("[train] batch_tokens = %d is smaller than one pair of maximum length (%d + %d)",
                      c->batch_tokens, c->max_src_len, c->max_tgt_len);
    return 0;
}

int config_check_train_paths(const Config *c) {
    struct { const char *key, *val; } req[] = {{"train_src", c->train_src}, {"train_tgt", c->train_tgt},
                                               {"valid_src", c->valid_src}, {"valid_tgt", c->valid_tgt}};
    for (int i = 0; i < 4; i++) {
        if (i >= 2 && !req[i].val[0]) continue; /* a dev set is optional */
        if (!req[i].val[0]) return errorf("%s: [data] %s is required for training", c->path ? c->path : "config", req[i].key);
        if (!file_exists(req[i].val))
            return errorf("%s: [data] %s = %s: file not found", c->path ? c->path : "config", req[i].key, req[i].val);
    }
    if (!c->dir || !c->dir[0])
        return errorf("%s: [train] dir is empty: training needs a run directory for its checkpoints", c->path ? c->path : "config");
    if (!c->valid_src[0] != !c->valid_tgt[0])
        return errorf("%s: [data] valid_src and valid_tgt must be given together", c->path ? c->path : "config");
    return 0;
}

static void value_text(const Config *c, const Key *k, char *buf, size_t n) {
    const char *p = (const char *)c + k->offset;
    switch (k->type) {
    case T_INT: snprintf(buf, n, "%d", *(const int *)p); break;
    case T_LONG: snprintf(buf, n, "%ld", *(const long *)p); break;
    case T_FLOAT: case T_DURATION: snprintf(buf, n, "%.17g", *(const double *)p); break;
    case T_BOOL: snprintf(buf, n, "%s", *(const int *)p ? "true" : "false"); break;
    case T_NORM: snprintf(buf, n, "%s", *(const int *)p ? "pre" : "post"); break;
    case T_PRECISION: snprintf(buf, n, "%s", precision_name(*(const int *)p)); break;
    default: snprintf(buf, n, "%s", *(char *const *)p ? *(char *const *)p : ""); break;
    }
}

void config_write(const Config *c, FILE *f) {
    const char *cur = "";
    for (int i = 0; i < NKEYS; i++) {
        const Key *k = &KEYS[i];
        if (strcmp(cur, k->section)) { fprintf(f, "%s[%s]\n", i ? "\n" : "", k->section); cur = k->section; }
        char v[CONFIG_MAX_STRING + 1];
        value_text(c, k, v, sizeof v);
        fprintf(f, "%s = %s\n", k->name, v);
    }
}

char *config_to_string(const Config *c) {
    char *buf = NULL; size_t len = 0;
    FILE *f = xmemstream(&buf, &len);
    config_write(c, f);
    fclose(f);
    return buf;
}

int config_same_model(const Config *a, const Config *b, char *why, int why_len) {
    for (int i = 0; i < NKEYS; i++) {
        const Key *k = &KEYS[i];
        if (!(k->flags & MODEL)) continue;
        char va[256], vb[256];
        value_text(a, k, va, sizeof va);
        value_text(b, k, vb, sizeof vb);
        if (strcmp(va, vb)) { snprintf(why, (size_t)why_len, "[%s] %s: %s vs %s", k->section, k->name, va, vb); return 0; }
    }
    return 1;
}

void config_print_reference(FILE *f) {
    const char *cur = "";
    for (int i = 0; i < NKEYS; i++) {
        const Key *k = &KEYS[i];
        if (strcmp(cur, k->section)) { fprintf(f, "  [%s]\n", k->section); cur = k->section; }
        fprintf(f, "    %-20s %-10s %s\n", k->name, k->def[0] ? k->def : "\"\"", k->help);
    }
}
