/* cli.c — `tfm <command> [options]`: the dispatch table (cli_main, called
 * by main.c) and what the commands share; each command is in cli_<name>.c. */
#include "cli.h"
#include "checkpoint.h"
#include "decode.h"
#include "dispatch.h"
#include "gemm_dnnl.h"
#include "gemm_int8.h"
#include "util.h"

#include <errno.h>
#include <stdlib.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

typedef struct {
    const char *name;
    int (*run)(int argc, char **argv);
    const char *summary;
} Command;

static int cmd_version(int argc, char **argv);
static int cmd_info(int argc, char **argv);
static int cmd_help(int argc, char **argv);

static const Command COMMANDS[] = {
    {"train", cmd_train, "train a Transformer from a config file (resumes a stopped run)"},
    {"translate", cmd_translate, "translate stdin to stdout with beam search"},
    {"eval", cmd_eval, "NLL, perplexity and BLEU of a model on a dev set"},
    {"bleu", cmd_bleu, "corpus BLEU / chrF as sacreBLEU computes them"},
    {"bpe", cmd_bpe, "learn, apply and invert a joint BPE model"},
    {"average", cmd_average, "average the weights of checkpoints"},
    {"shortlist", cmd_shortlist, "learn a vocabulary shortlist for decoding from a parallel corpus"},
    {"info", cmd_info, "what runs on this CPU: features, BLIS kernels, threads, bf16"},
    {"serve", cmd_serve, "an HTTP translation server (batches concurrent requests)"},
    {"version", cmd_version, "print the version"},
    {"help", cmd_help, "help on a command"},
};
#define NCOMMANDS ((int)(sizeof COMMANDS / sizeof COMMANDS[0]))

static void usage(FILE *f) {
    fprintf(f,
            "tfm " TFM_VERSION " — the Transformer of \"Attention Is All You Need\" for translation\n"
            "\n"
            "usage: tfm <command> [options]\n"
            "\n"
            "commands:\n");
    for (int i = 0; i < NCOMMANDS; i++) fprintf(f, "  %-10s %s\n", COMMANDS[i].name, COMMANDS[i].summary);
    fprintf(f,
            "\n"
            "Every command takes --help. Logs go to stderr, data to stdout.\n"
            "example: tfm train configs/multi30k.ini && tfm translate -m run/best.safetensors < in.en\n");
}

static void short_usage(void) {
    fprintf(stderr, "usage: tfm <command> [options], command one of:");
    for (int i = 0; i < NCOMMANDS; i++) fprintf(stderr, " %s", COMMANDS[i].name);
    fprintf(stderr, " (tfm --help)\n");
}

int is_help(const char *arg) { return !strcmp(arg, "-h") || !strcmp(arg, "--help"); }

void decode_args_init(DecodeArgs *a) {
    a->beam = a->max_len_b = a->batch_size = a->threads = a->precision = a->topk = -1;
    a->alpha = a->max_len_a = a->temperature = NAN;
    a->sample = 0;
    a->seed = -1;
    a->shortlist = NULL;
}

int decode_args_parse(DecodeArgs *a, const char *cmd, int argc, char **argv, int *i) {
    const char *v;
    /* the options that stand for [decode] and [run] keys accept what the keys do (config_option) */
    if (opt_value(argc, argv, i, "--beam", &v)) {
        a->beam = (int)config_option(cmd, "--beam", "decode.beam", v);
    } else if (opt_value(argc, argv, i, "--alpha", &v)) {
        a->alpha = config_option(cmd, "--alpha", "decode.alpha", v);
    } else if (opt_value(argc, argv, i, "--max-len-a", &v)) {
        a->max_len_a = config_option(cmd, "--max-len-a", "decode.max_len_a", v);
    } else if (opt_value(argc, argv, i, "--max-len-b", &v)) {
        a->max_len_b = (int)config_option(cmd, "--max-len-b", "decode.max_len_b", v);
    } else if (opt_value(argc, argv, i, "--batch-size", &v)) {
        a->batch_size = (int)config_option(cmd, "--batch-size", "decode.batch_size", v);
    } else if (opt_value(argc, argv, i, "--threads", &v)) {
        a->threads = (int)config_option(cmd, "--threads", "run.threads", v);
    } else if (opt_value(argc, argv, i, "--precision", &v)) {
        a->precision = (int)config_option(cmd, "--precision", "run.precision", v);
    } else if (opt_value(argc, argv, i, "--shortlist", &v)) {
        a->shortlist = v;
    } else if (opt_flag(argv, *i, "--sample")) {
        a->sample = 1;
    } else if (opt_value(argc, argv, i, "--temperature", &v)) {
        if (!((a->temperature = opt_double(cmd, "--temperature", v, 0, 1e6)) > 0)) usage_error(cmd, "--temperature must be > 0");
    } else if (opt_value(argc, argv, i, "--topk", &v)) {
        a->topk = opt_int(cmd, "--topk", v, 0, 2147483647);   /* 0: all tokens; above the vocabulary: all of it */
    } else if (opt_value(argc, argv, i, "--seed", &v)) {
        double s;
        if (parse_number(v, 1, 0, 9007199254740992.0, &s)) usage_error(cmd, "option --seed expects an integer in [0, 2^53], got '%s'", v);
        a->seed = (long long)s;
    } else {
        return 0;
    }
    return 1;
}

void decode_args_check(const DecodeArgs *a, const char *cmd) {
    if (!a->sample && (!isnan(a->temperature) || a->topk >= 0 || a->seed >= 0))
        usage_error(cmd, "--temperature, --topk and --seed are options of --sample");
    if (a->sample && a->beam > 0) usage_error(cmd, "--sample draws one translation per input: drop --beam");
}

void decode_args_options(const DecodeArgs *a, const Config *c, DecodeOptions *o) {
    decode_options_from_config(o, c);
    o->sample = a->sample;
    if (!isnan(a->temperature)) o->temperature = a->temperature;
    if (a->topk >= 0) o->topk = a->topk;
    if (a->seed >= 0) o->seed = (unsigned long long)a->seed;
    if (a->beam > 0) o->beam = a->beam;
    if (!isnan(a->alpha)) o->alpha = a->alpha;
    if (!isnan(a->max_len_a)) o->max_len_a = a->max_len_a;
    if (a->max_len_b >= 0) o->max_len_b = a->max_len_b;
    if (a->batch_size > 0) o->batch_size = a->batch_size;
}

Shortlist *cli_shortlist_load(const DecodeArgs *a, const Bpe *bpe) {
    if (!a->shortlist) return NULL;
    Shortlist *sl = shortlist_load(a->shortlist, bpe);
    if (!sl) die_error();
    return sl;
}

void cli_shortlist_attach(Translator *tr, Shortlist *sl, const DecodeArgs *a) {
    if (!sl) return;
    int k = shortlist_k(sl), n = shortlist_n(sl);
    if (translator_set_shortlist(tr, sl)) die_error();
    log_info("shortlist: %s (k %d, n %d): each batch's output layer covers its sources' candidates only", a->shortlist, k, n);
}

void cli_load_models(const char *const *paths, int n, Config *c, Bpe **bpe, Model *m) {
    char *tok0 = NULL;
    for (int i = 0; i < n; i++) {
        Config ci = {0};
        Bpe *bi = NULL;
        memset(&m[i], 0, sizeof m[i]);
        if (checkpoint_load(paths[i], i ? &ci : c, i ? &bi : bpe, &m[i], NULL) < 0) die_error();
        if (i == 0) { tok0 = bpe_to_string(*bpe); continue; }
        char *tok = bpe_to_string(bi);
        int same = !strcmp(tok, tok0);
        free(tok);
        bpe_free(bi);
        config_free(&ci);
        if (!same)
            die("%s and %s have different tokenizers: the models of an ensemble share one vocabulary", paths[0], paths[i]);
    }
    free(tok0);
}

void cli_warn_if_encoded(const char *what, long line_no, const char *line, int *warned) {
    if (*warned) return;
    const char *at = strstr(line, "\xE2\x96\x81");
    for (const char *p = line; !at && (p = strstr(p, "@@ ")); p++)   /* "wo@@ rd": a joiner inside a word */
        if (p > line && p[-1] != ' ' && p[3] && p[3] != ' ') at = p;
    if (!at) return;
    log_warn("%s line %ld looks BPE-encoded already ('%.3s' at byte %ld): tfm takes plain text and encodes it with the "
             "model's tokenizer (decode it first: tfm bpe decode, or sed 's/@@ //g')",
             what, line_no, at, (long)(at - line));
    *warned = 1;
}

static int cmd_version(int argc, char **argv) {
    if (argc > 1 && is_help(argv[1])) {
        printf("usage: tfm version\n\nPrints the version of tfm.\nexample: tfm version\n");
        return 0;
    }
    if (argc > 1) usage_error("version", "unexpected argument '%s'", argv[1]);
    printf("tfm %s\n", TFM_VERSION);
    return 0;
}

static int cmd_info(int argc, char **argv) {
    if (argc > 1 && is_help(argv[1])) {
        printf("usage: tfm info\n\n"
               "Prints what tfm runs on this CPU: the CPU (vendor, family, model), the instruction set\n"
               "features tfm's kernels are chosen from, BLIS's kernel set (and where the choice came from:\n"
               "BLIS_ARCH_TYPE, tfm's rule or BLIS itself), the default number of threads, where fp32\n"
               "products run (oneDNN or BLIS), whether bf16 products run natively (AVX512_BF16, AMX) or\n"
               "emulated, and which int8 kernel runs.\n"
               "\n"
               "environment:\n"
               "  BLIS_ARCH_TYPE=SET      run BLIS's kernel set SET (skx, haswell, zen3, generic, ...)\n"
               "  TFM_CPU_FEATURES=-F,..  mask CPU features off (e.g. -avx512_bf16), for tests\n"
               "  TFM_FP32_PRODUCTS=R     training's fp32 products on R: onednn, blis\n"
               "  TFM_BF16_PRODUCTS=R     training's bf16 products on R: onednn, kernel, emulated, amx\n"
               "  TFM_INT8_KERNEL=K       int8 products on K: onednn, vnni, model, amx, amx-model\n"
               "  DNNL_PRIMITIVE_CACHE_CAPACITY=N  oneDNN's cache of compiled products (tfm: %d)\n"
               "example: tfm info\n", GEMM_DNNL_CACHE);
        return 0;
    }
    if (argc > 1) usage_error("info", "unexpected argument '%s'", argv[1]);
    if (threads_init(0)) die_error();
    printf("tfm %s\n", TFM_VERSION);
    dispatch_report(stdout);
    /* dispatch.c chooses the int8 kernel; oneDNN's own choice of unit (a
     * probe product, made here) is what an AMX host must check */
    printf("int8 products: %s\n", int8_mode());
    if (gemm_dnnl_built())
        printf("oneDNN int8 matmul: %s (%s)\n", gemm_dnnl_int8_impl(),
               int8_onednn() ? (int8_kernel() == INT8_ONEDNN ? "in use" : int8_kernel() == INT8_BY_ROWS
                                                                          ? "in use, by rows"
                                                                          : "TFM_INT8_KERNEL=onednn runs it")
                             : "not used: no VNNI or AMX-INT8 as tfm sees this CPU, and without them its sums saturate");
    int env, cache = gemm_dnnl_cache(&env);
    if (cache >= 0)
        printf("oneDNN primitive cache: %d shapes (%s)\n", cache,
               env ? "from ONEDNN_PRIMITIVE_CACHE_CAPACITY / DNNL_PRIMITIVE_CACHE_CAPACITY" : "tfm's default");
    return 0;
}

static int cmd_help(int argc, char **argv) {
    if (argc < 2) { usage(stdout); return 0; }
    if (is_help(argv[1])) {
        printf("usage: tfm help [command]\n\nShows the list of commands, or the help of one.\nexample: tfm help translate\n");
        return 0;
    }
    for (int i = 0; i < NCOMMANDS; i++)
        if (!strcmp(argv[1], COMMANDS[i].name)) {
            char *args[] = {argv[1], "--help", NULL};
            return COMMANDS[i].run(2, args);
        }
    fprintf(stderr, "tfm: unknown command '%s'\n", argv[1]);
    short_usage();
    return 2;
}

/* A closed stdin, stdout or stderr: open /dev/null in its place, the wrong
 * way round (stdout read-only, stdin write-only), so that the next file tfm
 * opens does not become fd 1 and take the output, and every write to a
 * closed stdout still fails (EBADF) and is reported. */
static void std_fds_open(void) {
    for (int fd = 0; fd <= 2; fd++)
        if (fcntl(fd, F_GETFD) < 0 && errno == EBADF) {
            int r = open("/dev/null", fd == 1 ? O_RDONLY : O_WRONLY);
            if (r >= 0 && r != fd) close(r);   /* a lower fd was free: it is open now */
        }
}

/* After the command: every write to stdout must have succeeded. A command
 * that failed has said why; one that succeeded but lost output exits 1. */
static int stdout_finish(int rc) {
    int bad = stdout_flush() != 0;
    if (fclose(stdout) != 0 && !bad) bad = 1, errorf("cannot write to stdout: %s", strerror(errno));
    if (!bad) return rc;
    if (rc == 0 && stdout_errno() != EPIPE) cli_error_recorded();
    return rc ? rc : 1;
}

static int run_command(int argc, char **argv) {
    if (argc < 2) { usage(stderr); return 2; }
    if (is_help(argv[1])) { usage(stdout); return 0; }
    if (!strcmp(argv[1], "--version")) return cmd_version(1, argv + 1);
    for (int i = 0; i < NCOMMANDS; i++)
        if (!strcmp(argv[1], COMMANDS[i].name)) return COMMANDS[i].run(argc - 1, argv + 1);
    fprintf(stderr, "tfm: unknown command '%s'\n", argv[1]);
    short_usage();
    return 2;
}

int cli_main(int argc, char **argv) {
    std_fds_open();
    command_line_set(argc, argv);   /* for the resume hint of tfm train */
    signal(SIGPIPE, SIG_DFL);   /* `tfm ... | head`: end quietly, even if the parent ignored SIGPIPE */
    return stdout_finish(run_command(argc, argv));
}
