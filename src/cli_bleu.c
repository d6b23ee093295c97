/* cli_bleu.c — `tfm bleu`: corpus BLEU / chrF of files as sacreBLEU 2.6.0 computes them (the metrics are bleu.c). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bleu.h"
#include "cli.h"
#include "util.h"


/* repr(float) of Python: the shortest string that reads back as x. */
static void py_float_repr(double x, char *buf, size_t n) {
    char e[40];
    for (int p = 1; p <= 17; p++) {
        snprintf(e, sizeof e, "%.*e", p - 1, x);
        if (strtod(e, NULL) == x) break;
    }
    /* e = "[-]d.ddde[+-]XX": digits and decimal exponent */
    const char *s = e;
    int neg = *s == '-';
    if (neg) s++;
    char dig[24];
    int nd = 0;
    for (; *s && *s != 'e'; s++)
        if (*s != '.') dig[nd++] = *s;
    int exp10 = atoi(s + 1);
    while (nd > 1 && dig[nd - 1] == '0') nd--;
    dig[nd] = 0;
    if (x == 0) { snprintf(buf, n, "%s0.0", neg ? "-" : ""); return; }
    int decpt = exp10 + 1;
    char out[64];
    int k = 0;
    if (neg) out[k++] = '-';
    if (decpt <= -4 || decpt > 16) {          /* 1e-05, 1.5e+16 */
        out[k++] = dig[0];
        if (nd > 1) { out[k++] = '.'; for (int i = 1; i < nd; i++) out[k++] = dig[i]; }
        k += snprintf(out + k, sizeof out - (size_t)k, "e%c%02d", exp10 < 0 ? '-' : '+', abs(exp10));
    } else if (decpt <= 0) {                  /* 0.000123 */
        out[k++] = '0'; out[k++] = '.';
        for (int i = 0; i < -decpt; i++) out[k++] = '0';
        for (int i = 0; i < nd; i++) out[k++] = dig[i];
    } else {                                  /* 12.5, 100.0 */
        for (int i = 0; i < decpt; i++) out[k++] = i < nd ? dig[i] : '0';
        out[k++] = '.';
        if (decpt >= nd) out[k++] = '0';
        for (int i = decpt; i < nd; i++) out[k++] = dig[i];
    }
    out[k] = 0;
    snprintf(buf, n, "%s", out);
}

/* sacreBLEU's Score.format(is_json=True): json.dumps(d, indent=1). */
static void print_json(const char *name, double score, int width, const char *sig, const char *verbose) {
    char sc[64], rounded[64];
    snprintf(sc, sizeof sc, "%.*f", width, score);
    py_float_repr(strtod(sc, NULL), rounded, sizeof rounded);
    printf("{\n \"name\": \"%s\",\n \"score\": %s,\n \"signature\": \"%s\"", name, rounded, sig);
    if (verbose) printf(",\n \"verbose_score\": \"%s\"", verbose);
    for (const char *p = sig; *p;) {   /* each signature field, as a string */
        const char *bar = strchr(p, '|'), *end = bar ? bar : p + strlen(p), *colon = memchr(p, ':', (size_t)(end - p));
        if (colon) printf(",\n \"%.*s\": \"%.*s\"", (int)(colon - p), p, (int)(end - colon - 1), colon + 1);
        p = bar ? bar + 1 : end;
    }
    printf("\n}");
}

static void bleu_help(void) {
    printf(
        "usage: tfm bleu [options] REF [REF2 ...] < HYP\n"
        "       tfm bleu [options] REF [REF2 ...] -i HYP\n"
        "\n"
        "Corpus BLEU and chrF / chrF++ of a detokenized hypothesis file against one or\n"
        "more reference files (one sentence per line, UTF-8), computed exactly as\n"
        "sacreBLEU " SACREBLEU_VERSION " does; the options mirror sacreBLEU's command line.\n"
        "Prints the score line and the signature that makes the score reproducible:\n"
        "  BLEU = 34.12 65.3/40.1/27.0/18.9 (BP = 0.987 ratio = 0.987 hyp_len = 12345 ref_len = 12500)\n"
        "  nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:" SACREBLEU_VERSION "\n"
        "\n"
        "input:\n"
        "  -i, --input HYP         read the hypothesis from HYP instead of stdin\n"
        "  --replace-invalid       read invalid UTF-8 as U+FFFD (default: error naming file and line)\n"
        "metrics:\n"
        "  -m, --metrics M [M]     bleu (default), chrf, or both: -m bleu chrf\n"
        "BLEU:\n"
        "  -tok, --tokenize T      13a (default, mteval-v13a), intl (Unicode punctuation and\n"
        "                          symbols), none (whitespace only), char (every character)\n"
        "  -lc, --lowercase        case-insensitive BLEU (Unicode lowercasing)\n"
        "  -s, --smooth-method S   exp (default), floor, add-k, none\n"
        "  -sv, --smooth-value X   the value for floor (default 0.1) and add-k (default 1)\n"
        "  --force                 no warning when the hypothesis looks tokenized\n"
        "chrF:\n"
        "  -cc, --chrf-char-order N  character n-gram order (default 6)\n"
        "  -cw, --chrf-word-order N  word n-gram order (default 0; 2 = chrF++)\n"
        "  --chrf-beta N           recall weight beta (default 2)\n"
        "  --chrf-whitespace       keep whitespace in character n-grams\n"
        "  --chrf-lowercase        case-insensitive chrF (-lc applies to BLEU only, as in sacreBLEU)\n"
        "  --chrf-eps-smoothing    chrF++.py's epsilon smoothing instead of effective order\n"
        "output:\n"
        "  -b, --score-only        print only the score\n"
        "  -w, --width N           decimals of the score (default 2; sacreBLEU's CLI uses 1)\n"
        "  -f, --format F          text (default: score line, then signature) or json\n"
        "                          (sacreBLEU's JSON object)\n"
        "  -q, --quiet             no warnings on stderr\n"
        "\n"
        "Lines are split on \\n and stripped of trailing whitespace. An empty reference line\n"
        "is a missing reference (nrefs:var); an empty hypothesis file scores 0.\n"
        "\n"
        "example: tfm bleu newstest2014.de -i hyp.de\n"
        "example: tfm translate -m run/best.safetensors < test.en | tfm bleu test.de -m bleu chrf\n");
}

static int metric_name(const char *s) {   /* 1 bleu, 2 chrf, 0 neither */
    if (!strcasecmp(s, "bleu")) return 1;
    if (!strcasecmp(s, "chrf")) return 2;
    return 0;
}

/* Does the line end in " ." (after rstrip)? sacreBLEU warns about tokenized input. */
static int ends_tokenized(const char *s) {
    size_t n = strlen(s);
    while (n && (s[n - 1] == ' ' || (s[n - 1] >= '\t' && s[n - 1] <= '\r'))) n--;
    return n >= 2 && s[n - 1] == '.' && s[n - 2] == ' ';
}

static void die_score_error(const char **ref_paths, int nrefs) {   /* empty references */
    if (nrefs == 1) error_wrap("%s", ref_paths[0]);
    die_error();
}

static void die_read_error(void) {
    if (strstr(error_message(), "UTF-8")) die("%s; --replace-invalid reads it as U+FFFD", error_message());
    die_error();
}

int cmd_bleu(int argc, char **argv) {
    const char *cmd = "bleu", *input = NULL, *format = "text", *v;
    BleuOptions bo;
    ChrfOptions co;
    bleu_options_default(&bo);
    chrf_options_default(&co);
    int want_bleu = 0, want_chrf = 0, score_only = 0, width = 2, replace = 0, force = 0;
    int nrefs = 0, refs_after_input = 0;
    const char **ref_paths = xcalloc((size_t)argc + 1, sizeof *ref_paths);

    int ended = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int kind = opt_kind(a, &ended);
        if (kind == 2) continue;
        if (kind == 1) {
            if (input) refs_after_input = 1;
            ref_paths[nrefs++] = a;
            continue;
        }
        if (is_help(a)) { bleu_help(); free(ref_paths); return 0; }
        if (opt_value(argc, argv, &i, "-i|--input", &input)) continue;
        if (opt_value(argc, argv, &i, "-m|--metrics", &v)) {
            for (;;) {   /* nargs='+': take the following metric names too */
                int m = metric_name(v);
                if (!m) usage_error(cmd, "unknown metric '%s' (expected bleu or chrf)", v);
                if (m == 1) want_bleu = 1; else want_chrf = 1;
                if (i + 1 < argc && metric_name(argv[i + 1])) v = argv[++i];
                else break;
            }
            continue;
        }
        if (opt_value(argc, argv, &i, "-tok", &v) || opt_value(argc, argv, &i, "--tokenize", &v)) {
            if (!bleu_tokenizer_known(v))
                usage_error(cmd, "tokenizer '%s' is not supported (expected 13a, intl, none or char)", v);
            bo.tokenize = v;
            continue;
        }
        if (opt_flag(argv, i, "-lc") || opt_flag(argv, i, "--lowercase")) { bo.lowercase = 1; continue; }
        if (opt_value(argc, argv, &i, "-s|--smooth-method", &v)) {
            if (!bleu_smoothing_known(v)) usage_error(cmd, "unknown smoothing '%s' (expected exp, floor, add-k or none)", v);
            bo.smooth = v;
            continue;
        }
        if (opt_value(argc, argv, &i, "-sv", &v) || opt_value(argc, argv, &i, "--smooth-value", &v)) {
            bo.smooth_value = opt_double(cmd, "--smooth-value", v, 0, 1e9);
            continue;
        }
        if (opt_flag(argv, i, "--force")) { force = 1; continue; }
        if (opt_value(argc, argv, &i, "-cc", &v) || opt_value(argc, argv, &i, "--chrf-char-order", &v)) {
            co.char_order = opt_int(cmd, "--chrf-char-order", v, 1, 32);
            continue;
        }
        if (opt_value(argc, argv, &i, "-cw", &v) || opt_value(argc, argv, &i, "--chrf-word-order", &v)) {
            co.word_order = opt_int(cmd, "--chrf-word-order", v, 0, 7);
            continue;
        }
        if (opt_value(argc, argv, &i, "--chrf-beta", &v)) {
            co.beta = opt_int(cmd, "--chrf-beta", v, 0, 1000);
            continue;
        }
        if (opt_flag(argv, i, "--chrf-whitespace")) { co.whitespace = 1; continue; }
        if (opt_flag(argv, i, "--chrf-lowercase")) { co.lowercase = 1; continue; }
        if (opt_flag(argv, i, "--chrf-eps-smoothing")) { co.eps_smoothing = 1; continue; }
        if (opt_flag(argv, i, "-b|--score-only")) { score_only = 1; continue; }
        if (opt_value(argc, argv, &i, "-w|--width", &v)) {
            width = opt_int(cmd, "--width", v, 0, 20);
            continue;
        }
        if (opt_value(argc, argv, &i, "-f|--format", &v)) {
            if (strcmp(v, "text") && strcmp(v, "json")) usage_error(cmd, "unknown format '%s' (expected text or json)", v);
            format = v;
            continue;
        }
        if (opt_flag(argv, i, "--replace-invalid")) { replace = 1; continue; }
        if (opt_flag(argv, i, "-q|--quiet")) { log_quiet = 1; continue; }
        opt_unknown(cmd, argv, i);
    }
    if (nrefs == 0) usage_error(cmd, "no reference file given");
    if (refs_after_input)
        usage_error(cmd, "give the references before -i (tfm bleu REF... -i HYP); one hypothesis file at a time");
    if (!want_bleu && !want_chrf) want_bleu = 1;

    /* read everything, check line counts */
    char ***refs = xcalloc((size_t)nrefs, sizeof *refs);
    long *ref_n = xcalloc((size_t)nrefs, sizeof *ref_n);
    for (int r = 0; r < nrefs; r++) {
        ref_n[r] = bleu_read_lines(ref_paths[r], replace, &refs[r]);
        if (ref_n[r] < 0) die_read_error();
    }
    const char *hyp_name = input ? input : "stdin";
    if (!input && isatty(0) && !log_quiet) log_warn("reading the hypothesis from the terminal (stdin); end with Ctrl-D, or use -i HYP");
    char **hyp = NULL;
    long n = bleu_read_lines(input ? input : "-", replace, &hyp);
    if (n < 0) die_read_error();
    for (int r = 0; r < nrefs; r++)
        if (ref_n[r] != ref_n[0])
            die("reference %s has %ld lines but reference %s has %ld", ref_paths[r], ref_n[r], ref_paths[0], ref_n[0]);
    long nlines = ref_n[0];
    if (n == 0 && nlines > 0) {
        if (!log_quiet) log_warn("hypothesis %s is empty: scoring %ld empty lines (score 0)", hyp_name, nlines);
        bleu_free_lines(hyp, 0);
        hyp = xcalloc((size_t)nlines, sizeof *hyp);
        for (long i = 0; i < nlines; i++) hyp[i] = xstrdup("");
        n = nlines;
    }
    if (n != nlines)
        die("hypothesis %s has %ld lines but reference %s has %ld", hyp_name, n, ref_paths[0], nlines);

    if (want_bleu && !force) {
        long tokenized = 0;
        for (long i = 0; i < n; i++) tokenized += ends_tokenized(hyp[i]);
        if (tokenized >= 100 && !log_quiet)
            log_warn("%ld lines end in a tokenized period (' .'): is the hypothesis detokenized? BLEU expects "
                     "detokenized text (--force silences this)", tokenized);
    }

    /* score, in sacreBLEU's order (sorted metric names: BLEU, then chrF) */
    const char *const **rp = xcalloc((size_t)nrefs, sizeof *rp);
    for (int r = 0; r < nrefs; r++) rp[r] = (const char *const *)refs[r];
    int json = !strcmp(format, "json"), printed = 0, many = want_bleu && want_chrf;
    if (json && many && !score_only) printf("[\n");
    if (want_bleu) {
        BleuResult res;
        if (bleu_corpus((const char *const *)hyp, rp, nrefs, n, &bo, &res) < 0) die_score_error(ref_paths, nrefs);
        char line[512], sig[256], verbose[256];
        bleu_signature(&bo, res.nrefs, sig, sizeof sig);
        bleu_verbose(&res, verbose, sizeof verbose);
        if (score_only) printf("%.*f\n", width, res.score);
        else if (json) print_json("BLEU", res.score, width, sig, verbose);
        else { bleu_format(&res, width, line, sizeof line); printf("%s\n%s\n", line, sig); }
        printed = 1;
    }
    if (want_chrf) {
        ChrfResult res;
        if (chrf_corpus((const char *const *)hyp, rp, nrefs, n, &co, &res) < 0) die_score_error(ref_paths, nrefs);
        char line[256], sig[256], name[32];
        chrf_signature(&co, res.nrefs, sig, sizeof sig);
        chrf_format(&res, &co, width, line, sizeof line);
        snprintf(name, sizeof name, "%.*s", (int)strcspn(line, " "), line);
        if (score_only) printf("%.*f\n", width, res.score);
        else if (json) { if (printed) printf(",\n"); print_json(name, res.score, width, sig, NULL); }
        else printf("%s\n%s\n", line, sig);
    }
    if (json && !score_only) printf(many ? "\n]\n" : "\n");

    for (int r = 0; r < nrefs; r++) bleu_free_lines(refs[r], ref_n[r]);
    bleu_free_lines(hyp, n);
    free(refs); free(ref_n); free(rp); free(ref_paths);
    return 0;
}
