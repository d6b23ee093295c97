/* cli_translate.c — `tfm translate`: stdin to stdout with beam search,
 * streaming (a chunk is translated as soon as the input pauses). The
 * translation itself is decode.c. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dispatch.h"
#include "checkpoint.h"
#include "cli.h"
#include "decode.h"
#include "gemm_bf16.h"
#include "gemm_int8.h"
#include "text.h"
#include "util.h"

static void translate_usage(FILE *f) {
    fprintf(f,
        "usage: tfm translate -m MODEL [options] < input.txt > output.txt\n"
        "       tfm translate -m MODEL [-m MODEL2 ...] -i input.txt -o output.txt\n"
        "\n"
        "Translates stdin (or -i) to stdout (or -o), one output line per input line, in\n"
        "input order, with beam search (paper section 6.1) or sampling. Output is written while input is read:\n"
        "lines are read in chunks, each chunk is sorted by length into batches,\n"
        "translated, and written back in input order. MODEL is any tfm checkpoint\n"
        "(training checkpoint, best or averaged model): it holds the tokenizer.\n"
        "Options override the checkpoint's [decode] settings.\n"
        "\n"
        "options:\n"
        "  -m, --model FILE     the model (required); given several times, an ensemble:\n"
        "                       each step scores a token by the mean of the models'\n"
        "                       log-probabilities (the models must share the tokenizer)\n"
        "  -i, --input FILE     read FILE (plain or .gz) instead of stdin\n"
        "  -o, --output FILE    write FILE (complete, or not at all) instead of stdout\n"
        "  --beam K             beam size, 1..1024; 1 = greedy search (config: decode.beam)\n"
        "  --alpha A            length penalty lp(Y) = ((5+|Y|)/6)^A; hypotheses are\n"
        "                       ranked by log P(Y|X) / lp(Y), |Y| counting EOS\n"
        "  --max-len-a A        at most A*|x|+B output tokens, |x| = source BPE tokens\n"
        "  --max-len-b B        (default from the checkpoint: input + 50)\n"
        "  --nbest K            up to K best hypotheses per input (K <= beam), one per line:\n"
        "                       LINE<TAB>RANK<TAB>SCORE<TAB>LOGPROB<TAB>TEXT\n"
        "                       LINE = input line number (from 1), RANK = 1..K,\n"
        "                       SCORE = LOGPROB / lp(Y), LOGPROB = log P(Y|X) incl. EOS\n"
        "  --scores             1-best mode: append <TAB>SCORE<TAB>LOGPROB to each line\n"
        "  --sample             sample each translation instead of beam search (for\n"
        "                       back-translation): the next token w is drawn with\n"
        "                       p(w) ~ exp(log p(w|y<t,x) / T) among the top-k tokens\n"
        "  --temperature T      T > 0 (default 1)\n"
        "  --topk K             draw among the K most probable tokens (default 0: all)\n"
        "  --seed S             the sample of input line i depends on (S, i) only\n"
        "                       (default 1): reproducible, batch and thread invariant\n"
        "  --batch-size N       sentences decoded together (does not change the output)\n"
        "  --threads N          threads (0: all cores; does not change the output)\n"
        "  --precision P        fp32, bf16 or int8 matrix products (default: the\n"
        "                       checkpoint's [run] precision); bf16 is emulated (same output,\n"
        "                       fp32 speed) on CPUs without AVX512_BF16; int8 quantizes the\n"
        "                       weights per row at load and the activations per row (an\n"
        "                       AVX512_VNNI kernel, else its scalar model: same output)\n"
        "  --shortlist FILE     score only the candidates of each batch's sources (a\n"
        "                       vocabulary shortlist from tfm shortlist: faster output\n"
        "                       layer, softmax renormalised over the candidates)\n"
        "  -q, --quiet          no progress on stderr\n"
        "\n"
        "Input: an empty line gives an empty line (score 0); invalid UTF-8 becomes\n"
        "U+FFFD with one warning; a line longer than the model's max_positions is\n"
        "truncated, with a warning naming the line. Input that looks BPE-encoded\n"
        "already (▁ marks, '@@ ') is warned about: give plain text.\n"
        "An option given twice is an error, except -m.\n"
        "\n"
        "example: tfm translate -m runs/multi30k-en-de/average.safetensors --beam 4 < test.en > test.de\n"
        "         tfm translate -m de-en/average.safetensors --sample --seed 1 -i mono.de -o mono.bt.en\n");
}

/* Write the outputs of one chunk in input order. */
static void write_chunk(FILE *f, const Bpe *bpe, NBest *nb, int n, long first_line, int nbest, int scores) {
    for (int i = 0; i < n; i++) {
        int k = nbest ? nb[i].n : 1;
        for (int j = 0; j < k; j++) {
            const Hypothesis *y = &nb[i].hyps[j];
            char *text = decode_output_text(bpe, y->tokens, y->len);
            if (nbest) fprintf(f, "%ld\t%d\t%.6f\t%.6f\t%s\n", first_line + i, j + 1, y->score, y->logprob, text);
            else if (scores) fprintf(f, "%s\t%.6f\t%.6f\n", text, y->score, y->logprob);
            else fprintf(f, "%s\n", text);
            free(text);
        }
    }
    fflush(f);
}

int cmd_translate(int argc, char **argv) {
    const char **model_path = xmalloc((size_t)(argc + 1) * sizeof *model_path), *in_path = NULL, *out_path = NULL;
    int nmodels = 0;
    DecodeArgs da;   /* not given: the checkpoint's [decode] value applies */
    decode_args_init(&da);
    int nbest = 0, scores = 0;
    int ended = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v;
        int kind = opt_kind(a, &ended);
        if (kind == 2) continue;
        if (kind == 1) usage_error("translate", "unexpected argument '%s' (the text is read from stdin)", a);
        if (is_help(a)) { translate_usage(stdout); free(model_path); return 0; }
        else if (opt_values(argc, argv, &i, "-m|--model", &v)) model_path[nmodels++] = v;
        else if (opt_value(argc, argv, &i, "-i|--input", &v)) in_path = v;
        else if (opt_value(argc, argv, &i, "-o|--output", &v)) out_path = v;
        else if (decode_args_parse(&da, "translate", argc, argv, &i)) continue;
        else if (opt_value(argc, argv, &i, "--nbest", &v)) {
            nbest = opt_int("translate", "--nbest", v, 1, 1024);   /* at most [decode] beam's maximum */
        } else if (opt_flag(argv, i, "--scores")) scores = 1;
        else if (opt_flag(argv, i, "-q|--quiet")) log_quiet = 1;
        else opt_unknown("translate", argv, i);
    }
    if (!nmodels) usage_error("translate", "a model is required (-m MODEL; -m A -m B ... for an ensemble)");
    decode_args_check(&da, "translate");
    if (da.sample && nbest > 1) usage_error("translate", "--sample draws one translation per input: drop --nbest");
    if (out_path) {   /* before any work: -o must not be what is read */
        model_path[nmodels] = in_path;
        if (output_check("translate -o", out_path, model_path, nmodels + 1, !in_path)) die_error();
    }

    /* The models first: a missing or bad file is an error before any input is read. */
    Config c = {0};   /* the first model's, filled by checkpoint_load */
    Bpe *bpe = NULL;
    Model *m = xmalloc((size_t)nmodels * sizeof *m);
    const Model **mp = xmalloc((size_t)nmodels * sizeof *mp);
    cli_load_models(model_path, nmodels, &c, &bpe, m);
    Shortlist *sl = cli_shortlist_load(&da, bpe);
    DecodeOptions o;
    decode_args_options(&da, &c, &o);
    if (nbest > o.beam) usage_error("translate", "--nbest %d is larger than the beam (%d)", nbest, o.beam);
    o.nbest = nbest > 0 ? nbest : 1;
    /* --threads, else all cores (-1, unset, means that to threads_init); not the
     * model's [run] threads: those are its training host's (1 for a MEMBERS=N member) */
    if (threads_init(da.threads)) die_error();
    for (int k = 0; k < nmodels; k++) {
        model_set_precision(&m[k], da.precision >= 0 ? da.precision : c.bf16);
        mp[k] = &m[k];
    }
    Translator *tr = translator_new_ensemble(mp, nmodels, 1);
    if (!tr) die_error();
    cli_shortlist_attach(tr, sl, &da);
    if (translator_owns_weights(tr))   /* packed or int8: it holds its own copies; the fp32 weights can go */
        for (int k = 0; k < nmodels; k++) model_release_params(&m[k]);
    char how[128];
    if (o.sample) snprintf(how, sizeof how, "sampling (temperature %g, top-k %d, seed %llu)", o.temperature, o.topk, o.seed);
    else snprintf(how, sizeof how, "beam %d, alpha %g", o.beam, o.alpha);
    log_info("translate: %s%s (d_model %d, %d+%d layers, vocab %d), %s, max length %g*|x|+%d, batch %d, %d threads%s%s%s",
             model_path[0], nmodels > 1 ? " and more: an ensemble (mean of log-probs)" : "", m[0].dims.d_model,
             m[0].dims.enc_layers, m[0].dims.dec_layers, m[0].dims.vocab, how, o.max_len_a, o.max_len_b, o.batch_size,
             threads_count(), translator_packed(tr) ? "" : " (BLIS products)",
             m[0].bf16 ? ", bf16 products: " : m[0].int8 ? ", int8 products: " : "",
             m[0].bf16 ? bf16_decode_mode() : m[0].int8 ? int8_mode() : "");
    log_info("translate: model weights in memory %.1f MB (%s); process resident %.1f MB", (double)translator_bytes(tr) / 1e6,
             precision_name(m[0].int8 ? PREC_INT8 : m[0].bf16 ? PREC_BF16 : PREC_FP32), resident_mb());
    /* -i: a file (plain or .gz) instead of stdin; -o: a file, complete or not there at all */
    /* text.h: lines of any file or stream, read once; text_ready says whether
     * more input is there now, so that a chunk is translated as soon as the
     * input pauses (interactive use) and is full-sized when it is a file */
    TextReader *r = text_open(in_path ? in_path : "-", &TEXT_DEFAULT);
    if (!r) die_error();
    AtomicFile af;
    FILE *out = stdout;
    if (out_path && !(out = atomic_open(&af, out_path))) die_error();

    /* Chunks of up to `chunk` lines: enough to sort into full batches. The
     * arrays grow with the lines read (`have`), never to a size the option
     * alone asks for: --batch-size 1000000 on 60 lines takes 60 lines' worth. */
    int chunk = o.batch_size > (1 << 27) ? 1 << 30 : o.batch_size * 8 > 256 ? o.batch_size * 8 : 256, have = 0;
    char **lines = NULL;
    size_t *lens = NULL;
    int **src = NULL, *cap = NULL, *len = NULL;
    NBest *nb = NULL;
    long line_no = 0, out_tokens = 0;
    int warned = 0, warned_bpe = 0, rc = 0, done = 0;
    double t0 = now_seconds(), last_log = t0;
    while (!done && rc == 0) {
        int n = 0;
        while (n < chunk) {
            if (n > 0 && !text_ready(r)) break;   /* input paused: translate what we have */
            char *line;
            long k = text_line(r, &line);
            if (k == -2) { rc = 1; break; }
            if (k < 0) { done = 1; break; }
            if (n == have) {
                int more = have ? (have < chunk / 2 ? 2 * have : chunk) : (chunk < 256 ? chunk : 256);
                lines = xrealloc(lines, (size_t)more * sizeof *lines);
                lens = xrealloc(lens, (size_t)more * sizeof *lens);
                src = xrealloc(src, (size_t)more * sizeof *src);
                cap = xrealloc(cap, (size_t)more * sizeof *cap);
                len = xrealloc(len, (size_t)more * sizeof *len);
                nb = xrealloc(nb, (size_t)more * sizeof *nb);
                for (int i = have; i < more; i++) src[i] = NULL, cap[i] = 0, nb[i] = (NBest){0};
                have = more;
            }
            lines[n] = xmalloc((size_t)k + 1);
            memcpy(lines[n], line, (size_t)k + 1);
            lens[n++] = (size_t)k;
        }
        if (rc) { for (int i = 0; i < n; i++) free(lines[i]); break; }
        for (int i = 0; i < n && rc == 0; i++) {
            cli_warn_if_encoded(in_path ? in_path : "input", line_no + i + 1, lines[i], &warned_bpe);
            len[i] = encode_source_line(bpe, &m[0], lines[i], lens[i], line_no + i + 1, &src[i], &cap[i], &warned);
            if (len[i] < 0) rc = 1;
        }
        o.index_base = line_no;   /* sampling: sentence i of the input draws with (seed, i) */
        if (rc == 0 && translator_ids(tr, &o, n, (const int *const *)src, len, nb) < 0) rc = 1;
        if (rc == 0) {
            write_chunk(out, bpe, nb, n, line_no + 1, nbest > 0, scores);
            for (int i = 0; i < n; i++) { out_tokens += nb[i].hyps[0].len; nbest_free(&nb[i]); }
            if (!out_path && stdout_flush()) rc = 1;   /* a full disk: stop now, not after the whole input */
        }
        for (int i = 0; i < n; i++) free(lines[i]);
        line_no += n;
        double now = now_seconds();
        if (now - last_log > 10 && !done) {
            log_info("translate: %ld lines, %.1f lines/s", line_no, line_no / (now - t0));
            last_log = now;
        }
    }
    double el = now_seconds() - t0;
    if (rc == 0)
        log_info("translate: %ld lines, %ld output tokens in %.2fs (%.1f lines/s, %.0f tokens/s)",
                 line_no, out_tokens, el, el > 0 ? line_no / el : 0.0, el > 0 ? out_tokens / el : 0.0);
    if (rc == 0 && da.shortlist) {
        double pb, ps;
        translator_shortlist_counts(tr, &pb, &ps);
        log_info("shortlist: %.0f candidates per batch on average (the output layer's rows, of %d), %.0f per sentence",
                 pb, m[0].dims.vocab, ps);
    }
    if (out_path) {
        if (rc == 0 && atomic_commit(&af)) rc = 1;
        else if (rc) atomic_abort(&af);
    }
    if (rc) cli_error_recorded();
    for (int i = 0; i < have; i++) free(src[i]);
    free(src); free(cap); free(len); free(nb); free(lines); free(lens);
    text_close(r);
    translator_free(tr);
    for (int k = 0; k < nmodels; k++) model_free(&m[k]);
    free(m); free(mp); free(model_path);
    bpe_free(bpe);
    config_free(&c);
    return rc;
}
