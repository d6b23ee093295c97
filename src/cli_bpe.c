/* cli_bpe.c — `tfm bpe learn|encode|decode` (the tokenizer is bpe.c). */
#include <errno.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dispatch.h"
#include "bpe.h"
#include "checkpoint.h"
#include "cli.h"
#include "text.h"
#include "util.h"

static void help_bpe(void) {
    printf("usage: tfm bpe <learn|encode|decode> [options]\n"
           "\n"
           "Joint byte-pair encoding on Unicode text (one vocabulary for source and target).\n"
           "  learn    learn a model from training files\n"
           "  encode   text (stdin) -> pieces or ids (stdout), one line per line\n"
           "  decode   pieces or ids (stdin) -> text (stdout), one line per line\n"
           "'tfm bpe <command> --help' describes each.\n"
           "Special ids: 0 <pad>, 1 <unk>, 2 <s>, 3 </s>; 4-259 byte tokens <0x00>-<0xFF>.\n"
           "\n"
           "example: tfm bpe learn --vocab-size 8000 -o bpe.model train.en train.de\n");
}

static void help_learn(void) {
    printf("usage: tfm bpe learn --vocab-size N -o MODEL [options] FILE...\n"
           "\n"
           "Learns one joint BPE model from all FILEs (plain text or .gz, one sentence a line).\n"
           "\n"
           "options:\n"
           "  --vocab-size N        total vocabulary, specials and 256 byte tokens included (>= 261)\n"
           "  -o, --output MODEL    where to write the model (text format, see src/bpe.c)\n"
           "  --normalization NAME  nfkc (default) | nfc | none; white space is always collapsed\n"
           "  --symbols LIST        user-defined symbols, comma-separated (e.g. '<2de>,<bt>'): each is one\n"
           "                        piece, never split or merged with its neighbours (tags for languages,\n"
           "                        back-translation); no white space, no leading '#'\n"
           "  --skip-invalid        skip (and count) lines with invalid UTF-8 instead of failing\n"
           "  --threads N           threads for reading and counting (default: all cores)\n"
           "  -q, --quiet           no progress on stderr\n"
           "\n"
           "example: tfm bpe learn --vocab-size 10000 -o bpe.model train.en train.de.gz\n");
}

static void help_encode(void) {
    printf("usage: tfm bpe encode -m MODEL [--ids] [--dropout P [--seed N]] [--threads N] < text > pieces\n"
           "\n"
           "Normalizes and encodes each line of stdin; writes the pieces (or ids), separated\n"
           "by spaces, one line per input line (empty lines stay empty). Invalid UTF-8 becomes\n"
           "U+FFFD with one warning.\n"
           "\n"
           "options:\n"
           "  -m, --model MODEL  a BPE model file or a tfm checkpoint (.safetensors)\n"
           "  --ids              write integer ids instead of pieces\n"
           "  --dropout P        BPE-dropout, as [data] bpe_dropout trains with: each merge\n"
           "                     left out with probability P (default 0: the plain encoding)\n"
           "  --seed N           the random numbers of --dropout (default 1; line k of the\n"
           "                     input gets its own from N and k, whatever the threads)\n"
           "  --threads N        threads (default: all cores)\n"
           "\n"
           "example: tfm bpe encode -m bpe.model < test.en > test.bpe.en\n");
}

static void help_decode(void) {
    printf("usage: tfm bpe decode -m MODEL [--ids] < pieces > text\n"
           "\n"
           "Inverse of encode: reads space-separated pieces (or ids) a line and writes the text.\n"
           "Special tokens are dropped. decode(encode(x)) is x normalized.\n"
           "\n"
           "options:\n"
           "  -m, --model MODEL  a BPE model file or a tfm checkpoint (.safetensors)\n"
           "  --ids              read integer ids instead of pieces\n"
           "\n"
           "example: tfm bpe encode -m bpe.model < in.txt | tfm bpe decode -m bpe.model\n");
}

static int cmd_learn(int argc, char **argv) {
    BpeLearnOptions o = {.normalization = "nfkc"};
    const char *out = NULL, *v, *symbols = NULL;
    int threads = 0, vocab = -1, vocab_given = 0;
    const char **files = xmalloc((size_t)argc * sizeof *files);
    int nfiles = 0, ended = 0;
    for (int i = 1; i < argc; i++) {
        int kind = opt_kind(argv[i], &ended);
        if (kind == 2) continue;
        if (kind == 1) files[nfiles++] = argv[i];
        else if (is_help(argv[i])) { help_learn(); free(files); return 0; }
        else if (opt_value(argc, argv, &i, "--vocab-size", &v)) vocab = (int)config_option("bpe learn", "--vocab-size", "data.vocab_size", v), vocab_given = 1;
        else if (opt_value(argc, argv, &i, "-o|--output", &v)) out = v;
        else if (opt_value(argc, argv, &i, "--normalization", &v)) o.normalization = v;
        else if (opt_value(argc, argv, &i, "--symbols", &v)) symbols = v;
        else if (opt_value(argc, argv, &i, "--threads", &v)) threads = (int)config_option("bpe learn", "--threads", "run.threads", v);
        else if (opt_flag(argv, i, "--skip-invalid")) o.skip_invalid = 1;
        else if (opt_flag(argv, i, "-q|--quiet")) o.quiet = 1;
        else opt_unknown("bpe learn", argv, i);
    }
    if (!vocab_given) usage_error("bpe learn", "--vocab-size N is required");
    if (vocab < BPE_MIN_VOCAB) usage_error("bpe learn", "--vocab-size must be at least %d (4 specials + 256 bytes + ▁), got %d", BPE_MIN_VOCAB, vocab);
    if (!out) usage_error("bpe learn", "-o MODEL is required");
    if (!bpe_normalization_known(o.normalization)) usage_error("bpe learn", "--normalization expects nfkc, nfc or none, got '%s'", o.normalization);
    if (nfiles == 0) usage_error("bpe learn", "no training files given");
    if (symbols && bpe_symbols_check(symbols, o.normalization)) usage_error("bpe learn", "--symbols: %s", error_message());
    if (output_check("bpe learn -o", out, files, nfiles, 0)) die_error();   /* before any work */
    if (threads_init(threads)) die_error();
    /* The output is opened (as its temporary file) before the work: a place
     * that cannot be written fails now, not after the learning, and a signal
     * at any time removes the temporary file (util.h). */
    AtomicFile af;
    FILE *f = atomic_open(&af, out);
    if (!f) die_error();
    o.vocab_size = vocab;
    o.threads = threads_count();
    char **syms;
    o.nsymbols = bpe_split_symbols(symbols, &syms);
    o.symbols = (const char *const *)syms;
    Bpe *b = bpe_learn(files, nfiles, &o);
    free(files);
    bpe_free_symbols(syms, o.nsymbols);
    if (!b) { atomic_abort(&af); die_error(); }
    char *text = bpe_to_string(b);
    fputs(text, f);   /* a failed write: atomic_commit reports it */
    free(text);
    if (atomic_commit(&af)) die_error();
    if (!o.quiet) log_info("bpe: wrote %s", out);
    bpe_free(b);
    return 0;
}

static Bpe *load_model_or_die(const char *cmd, const char *model) {
    if (!model) usage_error(cmd, "-m MODEL is required");
    Bpe *b = tokenizer_load(model);
    if (!b) die_error();
    return b;
}

typedef struct { char *buf; size_t len, cap; } OutBuf;
static void ob_reserve(OutBuf *o, size_t more) {
    if (o->len + more > o->cap) {
        while (o->len + more > o->cap) o->cap = o->cap ? 2 * o->cap : 1 << 16;
        o->buf = xrealloc(o->buf, o->cap);
    }
}

static int cmd_encode(int argc, char **argv) {
    const char *model = NULL, *v;
    int as_ids = 0, threads = 0;
    double dropout = 0, seed = 1;
    int ended = 0;
    for (int i = 1; i < argc; i++) {
        int kind = opt_kind(argv[i], &ended);
        if (kind == 2) continue;
        if (kind == 1) usage_error("bpe encode", "unexpected argument '%s' (the text is read from stdin)", argv[i]);
        if (is_help(argv[i])) { help_encode(); return 0; }
        else if (opt_value(argc, argv, &i, "-m|--model", &v)) model = v;
        else if (opt_value(argc, argv, &i, "--dropout", &v)) dropout = config_option("bpe encode", "--dropout", "data.bpe_dropout", v);
        else if (opt_value(argc, argv, &i, "--seed", &v)) seed = config_option("bpe encode", "--seed", "train.seed", v);
        else if (opt_value(argc, argv, &i, "--threads", &v)) threads = (int)config_option("bpe encode", "--threads", "run.threads", v);
        else if (opt_flag(argv, i, "--ids")) as_ids = 1;
        else opt_unknown("bpe encode", argv, i);
    }
    Bpe *b = load_model_or_die("bpe encode", model);
    if (threads_init(threads)) die_error();
    int nt = threads_count();
    enum { BATCH = 8192 };
    TextReader *r = text_open("-", &TEXT_DEFAULT);   /* stdin, read once; text.h's policy (U+FFFD, one warning) */
    if (!r) die_error();
    typedef struct { char *buf; size_t cap; } LineBuf;
    LineBuf *lb = xcalloc(BATCH, sizeof *lb);
    long *len = xmalloc(BATCH * sizeof *len);
    int *out_t = xmalloc(BATCH * sizeof *out_t), *bad = xmalloc(BATCH * sizeof *bad);
    size_t *out_off = xmalloc(BATCH * sizeof *out_off), *out_len = xmalloc(BATCH * sizeof *out_len);
    OutBuf *ob = xcalloc((size_t)nt, sizeof *ob);
    int read_failed = 0;
    long lineno = 0;   /* lines before this batch */
    for (;;) {
        int n = 0;
        size_t bytes = 0;
        while (n < BATCH && bytes < (4u << 20)) {
            char *line;
            long k = text_line(r, &line);
            if (k == -2) read_failed = 1;
            if (k < 0) break;
            if ((size_t)k + 1 > lb[n].cap) { lb[n].cap = (size_t)k + 1; lb[n].buf = xrealloc(lb[n].buf, lb[n].cap); }
            memcpy(lb[n].buf, line, (size_t)k + 1);
            len[n] = k;
            bytes += (size_t)len[n++];
        }
        if (n == 0 || ferror(stdout)) break;
        for (int t = 0; t < nt; t++) ob[t].len = 0;
        #pragma omp parallel num_threads(nt)
        {
            int t = omp_get_thread_num(), *ids = NULL, cap = 0;
            OutBuf *o = &ob[t];
            #pragma omp for schedule(dynamic, 16)
            for (int i = 0; i < n; i++) {
                uint64_t line_seed = (uint64_t)seed * 0x9E3779B97F4A7C15ULL + (uint64_t)(lineno + i);
                int k = bpe_encode_dropout(b, lb[i].buf, (size_t)len[i], &ids, &cap, &bad[i], (float)dropout, line_seed);
                out_t[i] = t;
                out_off[i] = o->len;
                for (int j = 0; j < k; j++) {
                    if (as_ids) {
                        char d[12];
                        int nd = 0;
                        for (unsigned x = (unsigned)ids[j]; nd == 0 || x; x /= 10) d[nd++] = (char)('0' + x % 10);
                        ob_reserve(o, 12);
                        if (j) o->buf[o->len++] = ' ';
                        while (nd) o->buf[o->len++] = d[--nd];
                    }
                    else {
                        const char *p = bpe_piece(b, ids[j]);
                        size_t pl = strlen(p);
                        ob_reserve(o, pl + 1);
                        if (j) o->buf[o->len++] = ' ';
                        memcpy(o->buf + o->len, p, pl);
                        o->len += pl;
                    }
                }
                ob_reserve(o, 1);
                o->buf[o->len++] = '\n';
                out_len[i] = o->len - out_off[i];
            }
            free(ids);
        }
        for (int i = 0; i < n; i++)   /* (invalid UTF-8 was replaced, and warned about, by text.h) */
            fwrite(ob[out_t[i]].buf + out_off[i], 1, out_len[i], stdout);
        lineno += n;
        if (read_failed) break;   /* the lines before the error are written, then the error */
    }
    int rc = 0;
    if (read_failed) rc = -1;   /* a read error is an error, never the end of the input */
    else if (stdout_flush()) rc = -1;
    if (rc) rc = cli_error_recorded();
    for (int i = 0; i < BATCH; i++) free(lb[i].buf);
    text_close(r);
    for (int t = 0; t < nt; t++) free(ob[t].buf);
    free(lb); free(len); free(out_t); free(bad); free(out_off); free(out_len); free(ob);
    bpe_free(b);
    return rc;
}

static int cmd_decode(int argc, char **argv) {
    const char *model = NULL, *v;
    int as_ids = 0;
    int ended = 0;
    for (int i = 1; i < argc; i++) {
        int kind = opt_kind(argv[i], &ended);
        if (kind == 2) continue;
        if (kind == 1) usage_error("bpe decode", "unexpected argument '%s' (the text is read from stdin)", argv[i]);
        if (is_help(argv[i])) { help_decode(); return 0; }
        else if (opt_value(argc, argv, &i, "-m|--model", &v)) model = v;
        else if (opt_flag(argv, i, "--ids")) as_ids = 1;
        else opt_unknown("bpe decode", argv, i);
    }
    Bpe *b = load_model_or_die("bpe decode", model);
    TextReader *r = text_open("-", &TEXT_DEFAULT);   /* stdin, read once, text.h's policy */
    if (!r) die_error();
    int *ids = NULL, cap = 0, rc = 0;
    long ln = 0, len;
    char *line;
    while (rc == 0 && (len = text_line(r, &line)) >= 0) {
        ln++;
        int n = 0;
        char *s = line, *end = line + len;
        while (s < end) {
            while (s < end && (*s == ' ' || *s == '\t' || *s == '\r')) s++;
            char *t = s;
            while (t < end && *t != ' ' && *t != '\t' && *t != '\r') t++;
            if (t == s) break;
            if (n == cap) { cap = cap ? 2 * cap : 256; ids = xrealloc(ids, (size_t)cap * sizeof *ids); }
            int id;
            if (as_ids) {
                char c = *t;
                double x;
                *t = 0;
                id = parse_number(s, 1, 0, bpe_vocab_size(b) - 1, &x) ? -1 : (int)x;
                *t = c;
            } else {
                char c = *t;   /* the line buffer has room for its NUL */
                *t = 0;
                id = bpe_piece_id(b, s);
                *t = c;
            }
            if (id < 0) {
                *t = 0;
                rc = cli_error("stdin line %ld: %s '%s' is not in the model (%s, %d pieces)", ln,
                               as_ids ? "id" : "piece", s, model, bpe_vocab_size(b));
                break;
            }
            ids[n++] = id;
            s = t;
        }
        if (rc) break;
        char *text = bpe_decode(b, ids, n);
        fputs(text, stdout);
        fputc('\n', stdout);
        free(text);
        if (ferror(stdout)) break;   /* reported below */
    }
    if (rc == 0 && len == -2) rc = cli_error_recorded();   /* a read error, never the end of the input */
    if (rc == 0 && stdout_flush() != 0) rc = cli_error_recorded();
    text_close(r);
    free(ids);
    bpe_free(b);
    return rc;
}

int cmd_bpe(int argc, char **argv) {
    if (argc < 2) { fprintf(stderr, "usage: tfm bpe <learn|encode|decode> [options] (tfm bpe --help)\n"); return 2; }
    if (is_help(argv[1])) { help_bpe(); return 0; }
    if (!strcmp(argv[1], "learn")) return cmd_learn(argc - 1, argv + 1);
    if (!strcmp(argv[1], "encode")) return cmd_encode(argc - 1, argv + 1);
    if (!strcmp(argv[1], "decode")) return cmd_decode(argc - 1, argv + 1);
    usage_error("bpe", "unknown command '%s' (learn, encode or decode)", argv[1]);
}
