/* cli_eval.c — `tfm eval`: how good a model is on a dev set (paper
 * section 6), with the scoring of eval.c:
 *
 *   1. teacher-forced scores, dropout off: the NLL per target token (every
 *      target token y_1 .. y_m and EOS, padding excluded, no label
 *      smoothing), its perplexity exp(NLL), and the label-smoothed loss the
 *      model was trained on;
 *   2. unless --no-translate: translate the sources with the decode
 *      settings (decode.c) and score the translations against the
 *      references with sacreBLEU's BLEU and chrF (bleu.c). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dispatch.h"
#include "bleu.h"
#include "checkpoint.h"
#include "rundir.h"
#include "cli.h"
#include "config.h"
#include "data.h"
#include "decode.h"
#include "gemm_bf16.h"
#include "gemm_int8.h"
#include "eval.h"
#include "model.h"
#include "util.h"

static void eval_usage(FILE *f) {
    fprintf(f,
        "usage: tfm eval -m MODEL --src SRC --ref REF [options]\n"
        "       tfm eval CONFIG.ini [options]\n"
        "\n"
        "Scores a model on a parallel dev set. Prints on stdout:\n"
        "  nll_per_token = X     -log p(y_t | y_<t, x) averaged over every target token\n"
        "                        and EOS (padding excluded, no label smoothing, dropout off)\n"
        "  perplexity = exp(X)\n"
        "  loss_per_token = L    the label-smoothed loss of training (eps from the model)\n"
        "  tokens = N, sentences = S\n"
        "then, unless --no-translate, translates SRC with beam search and prints\n"
        "BLEU and chrF against REF as sacreBLEU 2.6.0 does (default settings: 13a,\n"
        "exp smoothing; chrF2), each followed by its signature line.\n"
        "With CONFIG.ini: the config's dev set (valid_src, valid_tgt) and [decode]\n"
        "settings, and the model of its run directory: average.safetensors, else\n"
        "best.safetensors, else the latest checkpoint (-m picks another).\n"
        "Progress goes to stderr.\n"
        "\n"
        "options:\n"
        "  -m, --model FILE   the model (any tfm checkpoint); given several times, an\n"
        "                     ensemble (models sharing one tokenizer): the teacher-forced\n"
        "                     figures are printed for each model, then BLEU and chrF of\n"
        "                     the ensemble's translations (mean of the models' log-probs)\n"
        "  --src FILE         dev source text (plain or .gz)\n"
        "  --ref FILE         dev reference translations (plain or .gz), one per source line\n"
        "  --out FILE         also write the translations to FILE\n"
        "  --no-translate     only the teacher-forced scores\n"
        "  --beam K           beam size, 1..1024 (1: greedy); default: the [decode] settings\n"
        "  --alpha A          length penalty ((5+|Y|)/6)^A\n"
        "  --max-len-a A      at most A*|x|+B output tokens\n"
        "  --max-len-b B\n"
        "  --sample           sample the translations (--temperature T, --topk K, --seed S;\n"
        "                     see tfm translate --help)\n"
        "  --batch-size N     sentences per decoding batch\n"
        "  --threads N        threads (0: all cores)\n"
        "  --precision P      fp32, bf16 or int8 matrix products (default: [run] precision\n"
        "                     of the CONFIG, else of the checkpoint); bf16 is emulated\n"
        "                     (same numbers, fp32 speed) on CPUs without AVX512_BF16; int8\n"
        "                     is for the translations (BLEU, chrF): NLL stays fp32\n"
        "  --shortlist FILE   translate with a vocabulary shortlist (tfm shortlist; the\n"
        "                     translations only: NLL stays over the whole vocabulary)\n"
        "  -q, --quiet        no progress on stderr\n"
        "\n"
        "example: tfm eval -m runs/multi30k-en-de/average.safetensors --src test2016.en --ref test2016.de\n"
        "         tfm eval -m run/average.safetensors -m run/best.safetensors --src test2016.en --ref test2016.de.gz\n");
}

/* The model of a run directory: the average, else the best, else the latest checkpoint. */
static char *run_model(const Config *c) {
    const char *names[] = {CHECKPOINT_AVERAGE, CHECKPOINT_BEST};
    for (int i = 0; i < 2; i++) {
        char *p = checkpoint_run_file(c->dir, names[i]);
        if (file_exists(p)) return p;
        free(p);
    }
    char **paths;
    int n = checkpoint_list(c->dir, &paths);
    if (n < 0) return NULL;
    if (n == 0) {
        errorf("%s: no model in the run directory %s (no %s, %s or checkpoint-*.safetensors); train first or pass -m",
               c->path ? c->path : "config", c->dir, CHECKPOINT_AVERAGE, CHECKPOINT_BEST);
        checkpoint_list_free(paths, n);
        return NULL;
    }
    char *p = xstrdup(paths[n - 1]);
    checkpoint_list_free(paths, n);
    return p;
}

int cmd_eval(int argc, char **argv) {
    const char *src = NULL, *ref = NULL, *out_path = NULL, *config_path = NULL;
    const char **model_arg = xmalloc((size_t)argc * sizeof *model_arg);
    int no_translate = 0, nmodels = 0;
    DecodeArgs da;   /* not given: the [decode] settings apply */
    decode_args_init(&da);
    int ended = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v;
        int kind = opt_kind(a, &ended);
        if (kind == 2) continue;
        if (kind == 1) {
            if (config_path) usage_error("eval", "unexpected argument '%s' (one CONFIG.ini at most)", a);
            config_path = a;
        }
        else if (is_help(a)) { eval_usage(stdout); free(model_arg); return 0; }
        else if (opt_values(argc, argv, &i, "-m|--model", &v)) model_arg[nmodels++] = v;
        else if (opt_value(argc, argv, &i, "--src", &v)) src = v;
        else if (opt_value(argc, argv, &i, "--ref", &v)) ref = v;
        else if (opt_value(argc, argv, &i, "--out", &v)) out_path = v;
        else if (decode_args_parse(&da, "eval", argc, argv, &i)) continue;
        else if (opt_flag(argv, i, "--no-translate")) no_translate = 1;
        else if (opt_flag(argv, i, "-q|--quiet")) log_quiet = 1;
        else opt_unknown("eval", argv, i);
    }
    if (!config_path && (!nmodels || !src || !ref))
        usage_error("eval", "give -m MODEL --src SRC --ref REF, or a CONFIG.ini");
    if (out_path && no_translate) usage_error("eval", "--out needs translations: drop --no-translate");
    if (da.shortlist && no_translate) usage_error("eval", "--shortlist is for translations: drop --no-translate");
    decode_args_check(&da, "eval");

    /* everything that can fail before the work starts: config, files, model */
    Config run = {0};   /* filled by config_load (with a CONFIG.ini) */
    char *run_path = NULL;
    if (config_path) {
        if (config_load(&run, config_path) < 0) die_error();
        if (!src) src = run.valid_src;
        if (!ref) ref = run.valid_tgt;
        if (!src || !*src || !ref || !*ref) die("%s: no dev set ([data] valid_src, valid_tgt)", config_path);
        if (!nmodels) {
            if (!(run_path = run_model(&run))) die_error();
            model_arg[nmodels++] = run_path;
        }
    }
    if (out_path) {   /* before any work: --out must not be what is read, and its directory must exist */
        const char **in = xmalloc((size_t)(nmodels + 3) * sizeof *in);
        for (int k = 0; k < nmodels; k++) in[k] = model_arg[k];
        in[nmodels] = src, in[nmodels + 1] = ref, in[nmodels + 2] = config_path;
        if (output_check("eval --out", out_path, in, nmodels + 3, 0)) die_error();
        free(in);
    }
    /* --out is opened (as its temporary file) before the work: a place that
     * cannot be written fails now, and a signal or an error at any time
     * removes the temporary file (util.h); it is written at the end. */
    AtomicFile af;
    FILE *out_f = out_path ? atomic_open(&af, out_path) : NULL;
    if (out_path && !out_f) die_error();
    Config mc = {0};    /* the (first) model's, filled by checkpoint_load */
    Bpe *bpe = NULL;
    Model *m = xmalloc((size_t)nmodels * sizeof *m);
    const Model **mp = xmalloc((size_t)nmodels * sizeof *mp);
    cli_load_models(model_arg, nmodels, &mc, &bpe, m);
    Shortlist *slist = cli_shortlist_load(&da, bpe);   /* a bad file fails before any work */
    DecodeOptions o;
    decode_args_options(&da, config_path ? &run : &mc, &o);
    /* --threads, else the given config's [run] threads, else all cores (not the
     * model's recorded threads: those are its training host's) */
    if (threads_init(da.threads >= 0 ? da.threads : (config_path ? run.threads : 0))) die_error();
    for (int k = 0; k < nmodels; k++) {
        model_set_precision(&m[k], da.precision >= 0 ? da.precision : (config_path ? run.bf16 : mc.bf16));
        mp[k] = &m[k];
    }
    log_info("eval: %s%s on %s -> %s (%d threads%s%s%s%s)", model_arg[0], nmodels > 1 ? " and more: an ensemble" : "",
             src, ref, threads_count(), m[0].bf16 ? ", bf16 products: scoring " : m[0].int8 ? ", int8 translation: " : "",
             m[0].bf16 ? bf16_mode() : m[0].int8 ? int8_mode() : "", m[0].bf16 ? ", translating " : "",
             m[0].bf16 ? bf16_decode_mode() : "");

    /* 1. teacher-forced scores, of each model (an ensemble's mean log-probs
     * are not a normalised distribution: it has no perplexity of its own) */
    Corpus c;
    CorpusStats cst;
    if (corpus_load(&c, src, ref, bpe, NULL, &cst) < 0) die_error();
    if (cst.invalid_utf8) log_warn("eval: %ld lines with invalid UTF-8 or NUL bytes (read as U+FFFD)", cst.invalid_utf8);
    long nlines = c.n;
    for (int k = 0; k < nmodels; k++) {
        long first_cut;
        long cut = corpus_truncate(&c, m[k].dims.max_positions, &first_cut);
        if (cut)
            log_warn("eval: %ld sentence pairs longer than the model's %d positions were truncated (the first: line %ld)",
                     cut, m[k].dims.max_positions, first_cut + 1);
        int batch_tokens = mc.batch_tokens < 8192 ? mc.batch_tokens : 8192;
        if (batch_tokens < 2 * m[k].dims.max_positions) batch_tokens = 2 * m[k].dims.max_positions;
        double t0 = now_seconds();
        LossStats st = {0};
        if (eval_loss(&m[k], &c, batch_tokens, "eval", &st) < 0) die_error();
        if (st.tokens == 0)   /* no perplexity of nothing (exp(0/0) is no 1.0) */
            die("%s + %s: the dev set has no sentence pairs to score (%ld lines)", src, ref, c.n);
        double nll = st.tokens ? st.nll / st.tokens : 0, loss = st.tokens ? st.loss / st.tokens : 0;
        if (nmodels > 1) printf("# model %d: %s\n", k + 1, model_arg[k]);
        printf("nll_per_token = %.6f\n", nll);
        printf("perplexity = %.4f\n", exp(nll));
        printf("loss_per_token = %.6f\n", loss);
        printf("tokens = %ld\n", st.tokens);
        printf("sentences = %ld\n", c.n);
        fflush(stdout);
        log_info("eval: scored %ld sentences, %ld target tokens in %.1fs", c.n, st.tokens, now_seconds() - t0);
    }
    if (nmodels > 1) printf("# the ensemble of the %d models\n", nmodels);
    corpus_free(&c);

    /* 2. translate and score */
    int rc = 0;
    if (!no_translate) {
        TextLines sl;
        char **refs = NULL;
        long nref = 0;
        TextOptions again = TEXT_DEFAULT;   /* read above: said once already */
        again.quiet = 1;
        if (text_lines_read_with(&sl, src, &again) < 0 || (nref = bleu_read_lines_with(ref, &again, &refs)) < 0) die_error();
        if (sl.n != nlines || nref != nlines)
            die("%s has %ld lines but %s has %ld", src, sl.n, ref, nref);
        const char **lines = xmalloc((size_t)(nlines ? nlines : 1) * sizeof *lines);
        for (long i = 0; i < nlines; i++) lines[i] = sl.text + sl.start[i];
        int warned_bpe = 0;
        for (long i = 0; i < nlines && !warned_bpe; i++) cli_warn_if_encoded(src, i + 1, lines[i], &warned_bpe);
        Translator *tr = translator_new_ensemble(mp, nmodels, 1);
        if (!tr) die_error();
        cli_shortlist_attach(tr, slist, &da);
        slist = NULL;
        if (translator_owns_weights(tr))   /* scored above: the Translator's copies are all that is read now */
            for (int k = 0; k < nmodels; k++) model_release_params(&m[k]);
        char **hyp;
        DevScores ds;
        int sr = eval_translate(tr, bpe, &o, lines, (const char *const *)refs, nlines, "eval", &hyp, &ds);
        translator_free(tr);
        if (!hyp) die_error();
        if (out_f) {
            for (long i = 0; i < nlines; i++) fprintf(out_f, "%s\n", hyp[i]);
            if (atomic_commit(&af)) die_error();
        }
        if (ds.empty)   /* sacreBLEU refuses empty references: they are left out */
            log_warn("eval: %ld empty reference lines (the first: line %ld) are left out of BLEU and chrF",
                     ds.empty, ds.first_empty + 1);
        if (sr < 0) {
            rc = cli_error_recorded();
        } else {
            BleuOptions bo;
            bleu_options_default(&bo);
            ChrfOptions co;
            chrf_options_default(&co);
            char line[512], sig[256];
            bleu_format(&ds.bleu, 2, line, sizeof line);
            bleu_signature(&bo, 1, sig, sizeof sig);
            printf("%s\n%s\n", line, sig);
            chrf_format(&ds.chrf, &co, 2, line, sizeof line);
            chrf_signature(&co, 1, sig, sizeof sig);
            printf("%s\n%s\n", line, sig);
        }
        translate_free_lines(hyp, (int)nlines);
        free(lines);
        bleu_free_lines(refs, nref);
        text_lines_free(&sl);
    }
    for (int k = 0; k < nmodels; k++) model_free(&m[k]);
    free(m); free(mp); free(model_arg); free(run_path);
    bpe_free(bpe);
    config_free(&mc);
    config_free(&run);
    return rc;
}
