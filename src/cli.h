/* cli.h — the subcommands. Each cmd_* parses its own options; cli.c holds
 * the dispatch table (cli_main), main.c the entry point that calls it. Each
 * returns the exit code: 0 ok, 1 runtime error, 2 usage error. */
#ifndef TFM_CLI_H
#define TFM_CLI_H

#include "bpe.h"
#include "config.h"
#include "decode.h"
#include "model.h"
#include "search.h"

int cmd_train(int argc, char **argv);      /* cli_train.c */
int cmd_translate(int argc, char **argv);  /* cli_translate.c */
int cmd_eval(int argc, char **argv);       /* cli_eval.c */
int cmd_bleu(int argc, char **argv);       /* cli_bleu.c */
int cmd_bpe(int argc, char **argv);        /* cli_bpe.c */
int cmd_average(int argc, char **argv);    /* cli_average.c */
int cmd_serve(int argc, char **argv);      /* cli_serve.c */
int cmd_shortlist(int argc, char **argv);  /* cli_shortlist.c */

/* The whole command line: dispatch to a cmd_*; returns the exit code. */
int cli_main(int argc, char **argv);

/* 1 if argv[i] is -h or --help. */
int is_help(const char *arg);

/* The options translate and eval share: --beam K, --alpha A, --max-len-a A,
 * --max-len-b B, --batch-size N, --threads N, --precision fp32|bf16|int8, and
 * sampling: --sample, --temperature T, --topk K, --seed S; --shortlist FILE. */
typedef struct {
    int beam, max_len_b, batch_size, threads;   /* -1: not given */
    int precision;                              /* --precision: -1 not given, else a Precision (util.h) */
    double alpha, max_len_a;                    /* NAN: not given */
    int sample, topk;                           /* --sample: 0/1; --topk: -1 not given */
    double temperature;                         /* NAN: not given */
    long long seed;                             /* -1: not given */
    const char *shortlist;                      /* --shortlist FILE: NULL not given */
} DecodeArgs;
void decode_args_init(DecodeArgs *a);
/* If argv[*i] is one of them: stores its value (a bad one is a usage error
 * of `cmd`, exit 2), advances *i past it and returns 1; else returns 0. */
int decode_args_parse(DecodeArgs *a, const char *cmd, int argc, char **argv, int *i);
/* Combinations that make no sense (--topk without --sample, --sample with
 * --beam) are usage errors of `cmd` (exit 2). */
void decode_args_check(const DecodeArgs *a, const char *cmd);
/* *o = the [decode] settings of c, overridden by the options given. */
void decode_args_options(const DecodeArgs *a, const Config *c, DecodeOptions *o);

/* --shortlist FILE: load it (checked against the tokenizer bpe; exits 1
 * naming the file on an error), NULL if not given; then give it to tr
 * (which owns it). Attach before model_release_params (an int8 fp32 output
 * layer copies the embedding). */
Shortlist *cli_shortlist_load(const DecodeArgs *a, const Bpe *bpe);
void cli_shortlist_attach(Translator *tr, Shortlist *sl, const DecodeArgs *a);
/* The models of -m given n times: an ensemble (decode.h) whose models must
 * share one tokenizer. Loads every checkpoint into m[0..n); *c and *bpe are
 * the first one's. Exits 1 with a message naming the file (and, for another
 * tokenizer, both files). */
void cli_load_models(const char *const *paths, int n, Config *c, Bpe **bpe, Model *m);
/* Warns once (on *warned) if an input line looks BPE-encoded already (▁
 * word marks or "@@ " joiners): tfm encodes plain text itself. */
void cli_warn_if_encoded(const char *what, long line_no, const char *line, int *warned);

#endif
