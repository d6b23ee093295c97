/* cli_train.c — `tfm train CONFIG.ini`: options, --dry-run, then the
 * training of train.c. */
#include <stdio.h>
#include <string.h>

#include "bpe.h"
#include "cli.h"
#include "config.h"
#include "dist.h"
#include "model.h"
#include "train.h"
#include "util.h"

static void train_help(void) {
    printf("usage: tfm train [options] CONFIG.ini\n"
           "\n"
           "Trains the model that CONFIG describes; running it again resumes the run\n"
           "from the latest checkpoint in [train] dir, exactly where it stopped.\n"
           "Ctrl-C (SIGINT), SIGTERM or SIGUSR1: the current step finishes, a checkpoint\n"
           "is written, and tfm exits 0; a second Ctrl-C quits at once.\n"
           "\n"
           "Data-parallel on N processes (one per node or socket, each with its own\n"
           "--threads): mpirun -np N --bind-to none tfm train CONFIG.ini (same updates as\n"
           "accumulate = N x accumulate on one process; stop it with SIGUSR1 to mpirun,\n"
           "which forwards it; see README). This binary: %s.\n"
           "\n"
           "Logs go to stderr (a live line on a terminal); the same figures go to\n"
           "DIR/train.tsv and DIR/valid.tsv (plot them: scripts/plot.sh DIR).\n"
           "\n"
           "options:\n"
           "  --set SECTION.KEY=VALUE  override one config key (repeatable)\n"
           "  --dry-run                print the effective config and the parameter count, then exit\n"
           "  --threads N              threads (default: [run] threads, 0 = all cores)\n"
           "  --precision P            fp32 or bf16 matrix products (default: [run] precision); bf16 runs\n"
           "                           on the CPU's fastest bf16 unit (AMX or AVX512_BF16), or is emulated\n"
           "                           (same numbers, fp32 speed) where none beats the fp32 FMAs: tfm info\n"
           "                           says which; weights, optimizer and checkpoints stay fp32\n"
           "  -q, --quiet              only warnings and errors on stderr\n"
           "  -h, --help               this help\n"
           "\n"
           "config keys (section, key, default, meaning):\n", dist_library());
    config_print_reference(stdout);
    printf("\nexample: tfm train configs/multi30k.ini --set train.max_steps=2000\n");
}

/* Parameter count before the tokenizer exists: the vocabulary is the
 * configured vocab_size (a learned BPE can come out slightly smaller). */
static void dry_run(const Config *c) {
    config_write(c, stdout);
    ModelDims d = model_dims_from_config(c, c->vocab_size);
    size_t n = model_param_count(&d);
    size_t emb = (size_t)d.vocab * d.d_model;
    printf("\n; parameters: %zu (%.1fM) = shared embedding %zu (V=%d x D=%d, also the pre-softmax weight)"
           " + encoder/decoder layers %zu\n",
           n, n / 1e6, emb, d.vocab, d.d_model, n - emb);
}

int cmd_train(int argc, char **argv) {
    const char *path = NULL, *v;
    const char *threads = NULL, *precision = NULL;   /* options that stand for [run] keys */
    int dry = 0;
    const char *sets[256];
    int nsets = 0, ended = 0;
    for (int i = 1; i < argc; i++) {
        int kind = opt_kind(argv[i], &ended);
        if (kind == 2) continue;
        if (kind == 1) {
            if (path) usage_error("train", "more than one config file ('%s' and '%s')", path, argv[i]);
            path = argv[i];
        }
        else if (is_help(argv[i])) { train_help(); return 0; }
        else if (opt_flag(argv, i, "--dry-run")) dry = 1;
        else if (opt_flag(argv, i, "-q|--quiet")) log_quiet = 1;
        else if (opt_values(argc, argv, &i, "--set", &v)) {
            if (nsets == 256) usage_error("train", "too many --set options");
            sets[nsets++] = v;
        } else if (opt_value(argc, argv, &i, "--threads", &v)) threads = v;
        else if (opt_value(argc, argv, &i, "--precision", &v)) precision = v;
        else opt_unknown("train", argv, i);
    }
    if (!path) usage_error("train", "missing CONFIG.ini");
    Config c = {0};
    if (config_load(&c, path)) return cli_error_recorded();
    if (bpe_symbols_check(c.symbols, c.normalization)) {   /* as the file has them */
        error_wrap("%s: [data] symbols", path);
        config_free(&c);
        return cli_error_recorded();
    }
    for (int i = 0; i < nsets; i++)
        if (config_set(&c, sets[i])) usage_error("train", "%s", error_message());   /* a bad option: exit 2 */
    /* through the same check as the keys they stand for: what tfm accepts, its checkpoints can hold */
    if ((threads && config_set_option(&c, "--threads", "run.threads", threads)) ||
        (precision && config_set_option(&c, "--precision", "run.precision", precision)))
        usage_error("train", "%s", error_message());
    if (c.bf16 == PREC_INT8)   /* the config's, a --set or --precision */
        usage_error("train", "precision int8 is for tfm translate and eval; training runs in fp32 or bf16");
    if (nsets && bpe_symbols_check(c.symbols, c.normalization))
        usage_error("train", "--set data.symbols: %s", error_message());
    if (dry) { dry_run(&c); config_free(&c); return 0; }
    if (dist_init()) die_error();
    if (dist_rank() > 0) log_quiet = 1;   /* rank 0 logs; the others only warn */
    int r = train_run(&c, path);          /* frees c */
    if (r) {
        if (dist_size() > 1) {   /* the other ranks would wait for this one forever: end the job */
            error_wrap("rank %d of %d", dist_rank(), dist_size());
            cli_error_recorded();
            dist_abort(1);
        }
        cli_error_recorded();
    }
    dist_finalize();
    return r ? 1 : 0;
}
