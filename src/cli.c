/* cli.c — `tfm <command> [options]`: main() and the dispatch table. */
#include "cli.h"
#include "util.h"

#include <stdio.h>
#include <string.h>

typedef struct {
    const char *name;
    int (*run)(int argc, char **argv);
    const char *summary;
} Command;

static int cmd_version(int argc, char **argv);
static int cmd_help(int argc, char **argv);

static const Command COMMANDS[] = {
    {"train", cmd_train, "train a Transformer from a config file (resumes a stopped run)"},
    {"translate", cmd_translate, "translate stdin to stdout with beam search"},
    {"eval", cmd_eval, "NLL, perplexity and BLEU of a model on a dev set"},
    {"bleu", cmd_bleu, "corpus BLEU / chrF as sacreBLEU computes them"},
    {"bpe", cmd_bpe, "learn, apply and invert a joint BPE model"},
    {"average", cmd_average, "average the weights of checkpoints"},
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

int not_implemented(const char *what) {
    fprintf(stderr, "tfm: %s is not implemented yet in this version (see README, status)\n", what);
    return 1;
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

int cli_main(int argc, char **argv) {
    if (argc < 2) { usage(stderr); return 2; }
    if (is_help(argv[1])) { usage(stdout); return 0; }
    if (!strcmp(argv[1], "--version")) return cmd_version(1, argv + 1);
    for (int i = 0; i < NCOMMANDS; i++)
        if (!strcmp(argv[1], COMMANDS[i].name)) return COMMANDS[i].run(argc - 1, argv + 1);
    fprintf(stderr, "tfm: unknown command '%s'\n", argv[1]);
    short_usage();
    return 2;
}
