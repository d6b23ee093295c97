/* cli_average.c — `tfm average`: the mean of checkpoints' weights (checkpoint_average in checkpoint.c). */
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>

#include "checkpoint.h"
#include "cli.h"
#include "rundir.h"
#include "util.h"

static void average_help(void) {
    printf(
        "usage: tfm average [--last N] -o OUT (RUN_DIR | FILE...)\n"
        "\n"
        "Average the weights of checkpoints element by element (summed in double\n"
        "precision), as the paper does for its results (section 6.1: the last 5\n"
        "checkpoints for the base model, the last 20 for the big one). The inputs\n"
        "must be tfm checkpoints with the same tensor names and shapes, the same\n"
        "model config and the same tokenizer; otherwise nothing is written and the\n"
        "error names the two files and the difference. The output is a model-only\n"
        "checkpoint (no Adam moments), written atomically, with the metadata of the\n"
        "newest input plus \"averaged_from\" (the input paths). It can be used with\n"
        "translate and eval like any checkpoint.\n"
        "\n"
        "inputs:\n"
        "  RUN_DIR          a run directory: its training checkpoints\n"
        "                   RUN_DIR/checkpoint-<step>.safetensors, oldest to newest\n"
        "  FILE...          checkpoint files; the last one given counts as the newest\n"
        "\n"
        "options:\n"
        "  -o, --output OUT  the averaged checkpoint to write (required)\n"
        "  --last N          with RUN_DIR: average only its N newest training\n"
        "                    checkpoints (default: all of them); an error if the\n"
        "                    directory holds fewer than N\n"
        "  -h, --help        this help\n"
        "\n"
        "examples:\n"
        "  tfm average --last 5 -o run/average.safetensors run\n"
        "  tfm average -o avg.safetensors run/checkpoint-00099000.safetensors run/checkpoint-00100000.safetensors\n");
}

static int is_dir(const char *path) { struct stat sb; return stat(path, &sb) == 0 && S_ISDIR(sb.st_mode); }

int cmd_average(int argc, char **argv) {
    const char *out = NULL, *v;
    int last = 0;
    const char **files = xmalloc((size_t)argc * sizeof *files);
    int nfiles = 0, ended = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int kind = opt_kind(a, &ended);
        if (kind == 2) continue;
        if (kind == 1) { files[nfiles++] = a; continue; }
        if (is_help(a)) { average_help(); free(files); return 0; }
        if (opt_value(argc, argv, &i, "-o|--output", &out)) continue;
        if (opt_value(argc, argv, &i, "--last", &v)) {
            last = opt_int("average", "--last", v, 1, 1 << 20);
            continue;
        }
        opt_unknown("average", argv, i);
    }
    if (!out) usage_error("average", "missing -o OUT (the averaged checkpoint to write)");
    if (nfiles == 0) usage_error("average", "no input: give a run directory or checkpoint files");
    int ndirs = 0;
    for (int i = 0; i < nfiles; i++) ndirs += is_dir(files[i]);
    if (ndirs && nfiles > 1) usage_error("average", "give either one run directory or checkpoint files, not both");
    if (last && !ndirs) usage_error("average", "--last goes with a run directory; with files, list the ones to average");

    char **paths = NULL;
    int n = 0, rc;
    if (ndirs) {
        n = checkpoint_list(files[0], &paths);
        if (n < 0) die_error();
        if (n == 0) die("%s: no training checkpoints (checkpoint-<step>.safetensors) in this directory", files[0]);
        if (last > n) {
            checkpoint_list_free(paths, n);
            die("%s: --last %d asks for %d checkpoints but the directory holds %d", files[0], last, last, n);
        }
        int first = last ? n - last : 0;
        if (output_check("average -o", out, (const char *const *)paths + first, n - first, 0)) die_error();
        rc = checkpoint_average((const char *const *)paths + first, n - first, out);
        checkpoint_list_free(paths, n);
    } else {
        if (output_check("average -o", out, files, nfiles, 0)) die_error();   /* before any work */
        rc = checkpoint_average(files, nfiles, out);
    }
    free(files);
    if (rc) die_error();
    return 0;
}
