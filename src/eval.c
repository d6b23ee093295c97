/* eval.c — how good a model is on a dev set (see eval.h). */
#include "eval.h"

#include <stdlib.h>
#include <string.h>

#include "util.h"

int eval_loss(Model *m, const Corpus *c, int batch_tokens, const char *progress, LossStats *total) {
    Epoch e;
    memset(&e, 0, sizeof e);
    epoch_plan(&e, c, batch_tokens, 0, 0, 0);
    Batch b;
    memset(&b, 0, sizeof b);
    batch_alloc(&b, e.max_B, e.max_cells);
    double last = now_seconds();
    int rc = 0;
    for (long k = 0; k < e.n; k++) {
        batch_fill(&b, c, &e, k);
        if (model_forward(m, &b, total) < 0) { rc = -1; break; }   /* adds to *total */
        double now = now_seconds();
        if (progress && now - last > 5) {
            log_info("%s: scored %ld/%ld batches", progress, k + 1, e.n);
            last = now;
        }
    }
    batch_free(&b);
    epoch_free(&e);
    return rc;
}

int eval_translate(const Translator *tr, const Bpe *bpe, const DecodeOptions *o,
                   const char *const *src, const char *const *ref, long n, const char *progress,
                   char ***hyps, DevScores *r) {
    memset(r, 0, sizeof *r);
    r->first_empty = -1;
    if (hyps) *hyps = NULL;
    char **hyp = xcalloc((size_t)(n ? n : 1), sizeof *hyp);
    double t0 = now_seconds(), last = t0;
    enum { CHUNK = 256 };   /* translate in chunks, for progress */
    for (long i = 0; i < n; i += CHUNK) {
        int k = n - i < CHUNK ? (int)(n - i) : CHUNK;
        char **h = translator_lines(tr, bpe, o, src + i, k);
        if (!h) { translate_free_lines(hyp, (int)n); return -1; }
        memcpy(hyp + i, h, (size_t)k * sizeof *h);
        free(h);
        double now = now_seconds();
        if (progress && now - last > 5 && i + k < n) {
            log_info("%s: translated %ld/%ld lines (%.1f lines/s)", progress, i + k, n, (i + k) / (now - t0));
            last = now;
        }
    }
    if (progress)
        log_info("%s: translated %ld lines in %.1fs (beam %d, alpha %g)", progress, n, now_seconds() - t0, o->beam, o->alpha);

    /* the lines with a reference, in order */
    const char **h = xmalloc((size_t)(n ? n : 1) * sizeof *h), **rf = xmalloc((size_t)(n ? n : 1) * sizeof *rf);
    for (long i = 0; i < n; i++) {
        if (ref[i][strspn(ref[i], " \t\r")] == 0) {
            if (r->first_empty < 0) r->first_empty = i;
            r->empty++;
            continue;
        }
        h[r->scored] = hyp[i];
        rf[r->scored++] = ref[i];
    }
    const char *const *refs[1] = {rf};
    BleuOptions bo;
    bleu_options_default(&bo);
    ChrfOptions co;
    chrf_options_default(&co);
    int rc = 0;
    if (bleu_corpus(h, refs, 1, r->scored, &bo, &r->bleu) < 0 || chrf_corpus(h, refs, 1, r->scored, &co, &r->chrf) < 0)
        rc = -1;
    free(h);
    free(rf);
    if (hyps) *hyps = hyp;
    else translate_free_lines(hyp, (int)n);
    return rc;
}
