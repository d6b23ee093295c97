/* train.c — `tfm train config.ini`: the training loop (issue 5). */
#include "cli.h"
#include "config.h"
#include "model.h"
#include "util.h"

#include <stdio.h>
#include <string.h>

static void train_help(void) {
    printf("usage: tfm train [options] CONFIG.ini\n"
           "\n"
           "Trains the model that CONFIG describes; running it again resumes the run.\n"
           "\n"
           "options:\n"
           "  --set SECTION.KEY=VALUE  override one config key (repeatable)\n"
           "  --dry-run                print the effective config and the parameter count, then exit\n"
           "  --threads N              threads (default: [run] threads, 0 = all cores)\n"
           "  -q, --quiet              only warnings and errors on stderr\n"
           "  -h, --help               this help\n"
           "\n"
           "config keys (section, key, default, meaning):\n");
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
    int dry = 0, threads = -1;
    const char *sets[256];
    int nsets = 0;
    for (int i = 1; i < argc; i++) {
        if (is_help(argv[i])) { train_help(); return 0; }
        else if (!strcmp(argv[i], "--dry-run")) dry = 1;
        else if (!strcmp(argv[i], "-q") || !strcmp(argv[i], "--quiet")) log_quiet = 1;
        else if (opt_value(argc, argv, &i, "--set", &v)) {
            if (nsets == 256) usage_error("train", "too many --set options");
            sets[nsets++] = v;
        } else if (opt_value(argc, argv, &i, "--threads", &v)) threads = opt_int("train", "--threads", v);
        else if (argv[i][0] == '-' && argv[i][1]) usage_error("train", "unknown option '%s'", argv[i]);
        else if (path) usage_error("train", "more than one config file ('%s' and '%s')", path, argv[i]);
        else path = argv[i];
    }
    if (!path) usage_error("train", "missing CONFIG.ini");
    Config c;
    if (config_load(&c, path)) die_error();
    for (int i = 0; i < nsets; i++)
        if (config_set(&c, sets[i])) die_error();
    if (threads >= 0) c.threads = threads;
    if (dry) { dry_run(&c); config_free(&c); return 0; }
    config_free(&c);
    return not_implemented("tfm train (the training loop, issue 5)");
}
