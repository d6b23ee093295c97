/* bleu.h — corpus BLEU and chrF/chrF++ exactly as sacreBLEU 2.6.0 computes them.
 *
 * Scores agree with sacreBLEU to 1e-4 (tests/test_bleu.c checks 132 cases
 * scored by sacreBLEU 2.6.0). Inputs are UTF-8 lines WITHOUT the newline;
 * the scorer applies sacreBLEU's line cleanup (Python rstrip() of Unicode
 * whitespace), optional lowercasing and tokenization itself.
 *
 *   BleuOptions o; bleu_options_default(&o);
 *   const char *const *refs[1] = {ref_lines};
 *   BleuResult r;
 *   if (bleu_corpus(hyp_lines, refs, 1, n, &o, &r) < 0) die_error();
 *   char line[256], sig[256];
 *   bleu_format(&r, 2, line, sizeof line);     // "BLEU = 34.12 65.3/... (BP = ...)"
 *   bleu_signature(&o, r.nrefs, sig, sizeof sig);  // "nrefs:1|case:mixed|eff:no|tok:13a|..."
 *
 * As in sacreBLEU, an empty reference line is a missing reference for that
 * line (nrefs becomes "var"); a line whose references are all empty is an
 * error. nlines = 0 scores 0.
 *
 * Errors (errorf + return -1): unknown tokenizer/smoothing name, invalid
 * UTF-8, all references empty (the message names the line: "hypothesis
 * line 7" / "reference 2 line 7").
 */
#ifndef TFM_BLEU_H
#define TFM_BLEU_H

#include <stddef.h>

#include "text.h"

#define SACREBLEU_VERSION "2.6.0"
#define BLEU_MAX_ORDER 4

/* ---- BLEU (Papineni et al. 2002, sacreBLEU's corpus variant) ---------- */
typedef struct {
    const char *tokenize;   /* "13a" (default), "intl", "none", "char" */
    const char *smooth;     /* "exp" (default), "floor", "add-k", "none" */
    double smooth_value;    /* < 0: sacreBLEU's default (floor 0.1, add-k 1) */
    int lowercase;          /* 1: lowercase hyps and refs (Unicode-aware) */
    int effective_order;    /* 1: drop n-gram orders the hypothesis lacks (for
                               sentence BLEU); sacreBLEU's corpus default is 0 */
} BleuOptions;

typedef struct {
    double score;                       /* 0..100 */
    double precisions[BLEU_MAX_ORDER];  /* percent, after smoothing */
    long correct[BLEU_MAX_ORDER];       /* clipped n-gram matches, corpus sums */
    long total[BLEU_MAX_ORDER];         /* hypothesis n-grams, corpus sums */
    double bp;                          /* brevity penalty */
    double ratio;                       /* hyp_len / ref_len */
    long hyp_len, ref_len;              /* tokens; ref_len = closest ref lengths */
    int nrefs;          /* references per line, -1 if it varies ("nrefs:var") */
} BleuResult;

void bleu_options_default(BleuOptions *o);

/* hyps[i], i < nlines; refs[r][i], r < nrefs. Returns 0, or -1 + errorf. */
int bleu_corpus(const char *const *hyps, const char *const *const *refs,
                int nrefs, long nlines, const BleuOptions *o, BleuResult *out);

/* "BLEU = 48.90 85.7/66.7/40.0/25.0 (BP = 1.000 ratio = 1.000 hyp_len = 7 ref_len = 7)";
 * width = decimals of the score (sacreBLEU's --width, default 2). */
void bleu_format(const BleuResult *r, int width, char *buf, size_t n);
/* Only the part after the score: "85.7/66.7/40.0/25.0 (BP = ... ref_len = 7)". */
void bleu_verbose(const BleuResult *r, char *buf, size_t n);
/* "nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:2.6.0"; pass the
 * result's nrefs (-1 prints "var"). */
void bleu_signature(const BleuOptions *o, int nrefs, char *buf, size_t n);

/* ---- chrF / chrF++ (Popović 2015, 2017) -------------------------------- */
typedef struct {
    int char_order;     /* 6 */
    int word_order;     /* 0 = chrF, 2 = chrF++ */
    int beta;           /* 2: recall weighted beta^2 = 4 times as much as precision */
    int lowercase;      /* 1: lowercase first */
    int whitespace;     /* 1: keep whitespace in character n-grams (default 0) */
    int eps_smoothing;  /* 1: chrF++.py's epsilon smoothing instead of effective order */
} ChrfOptions;

typedef struct {
    double score;       /* 0..100 */
    int nrefs;          /* as in BleuResult */
} ChrfResult;

void chrf_options_default(ChrfOptions *o);
int chrf_corpus(const char *const *hyps, const char *const *const *refs,
                int nrefs, long nlines, const ChrfOptions *o, ChrfResult *out);
/* "chrF2 = 58.12" or "chrF2++ = 55.10" */
void chrf_format(const ChrfResult *r, const ChrfOptions *o, int width, char *buf, size_t n);
/* "nrefs:1|case:mixed|eff:yes|nc:6|nw:0|space:no|version:2.6.0" */
void chrf_signature(const ChrfOptions *o, int nrefs, char *buf, size_t n);

/* ---- shared pieces (exposed for tests) -------------------------------- */
/* sacreBLEU's tokenizers on one line: returns a malloc'd string of tokens
 * joined by single spaces, or NULL + errorf for an unknown name. */
char *bleu_tokenize(const char *name, const char *line);
/* 1 if the name is one of the tokenizers / smoothing methods above. */
int bleu_tokenizer_known(const char *name);
int bleu_smoothing_known(const char *name);
/* Python's str.rstrip() (Unicode whitespace) then optionally str.lower();
 * malloc'd result, or NULL + errorf if `line` is not valid UTF-8. */
char *bleu_clean_line(const char *line, int lowercase);
/* Read `path` ("-" = stdin) as lines, through text.h (CRLF, BOM, gzip and
 * limits as every reader). Invalid UTF-8 or a NUL byte: errorf naming `path`
 * and the line, return -1 (TEXT_STRICT) — unless `replace` is set, then bad
 * bytes become U+FFFD (TEXT_REPLACE). Returns the line count; *lines_out is
 * a malloc'd array of malloc'd strings (free with bleu_free_lines). */
long bleu_read_lines(const char *path, int replace, char ***lines_out);
/* The same with text.h's options (quiet: a file read before, warned about then). */
long bleu_read_lines_with(const char *path, const TextOptions *o, char ***lines_out);
void bleu_free_lines(char **lines, long n);

#endif
