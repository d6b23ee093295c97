/* search.c — beam search over an abstract step function (see search.h). */
#include "search.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "modeldefs.h"
#include "parallel.h"
#include "util.h"

double length_penalty(int len, double alpha) { return pow((5.0 + len) / 6.0, alpha); }

int decode_max_len(const DecodeOptions *o, int src_len, int max_positions) {
    double l = floor(o->max_len_a * src_len + o->max_len_b);
    /* The decoder input is BOS y_1 .. y_max_len: max_len + 1 positions. */
    if (l > max_positions - 1) l = max_positions - 1;
    return l < 0 ? 0 : (int)l;
}

void nbest_free(NBest *nb) {
    for (int i = 0; i < nb->n; i++) free(nb->hyps[i].tokens);
    free(nb->hyps);
    nb->hyps = NULL;
    nb->n = 0;
}

/* ---- the search ---------------------------------------------------------- */
typedef struct { int tok; float logp; } TokLogp;
typedef struct { double score; int row, tok; } Candidate;   /* raw score, parent row, token */
typedef struct { int t, row; double logprob, score; } Finished;  /* row of step t + EOS */

/* The best k tokens of one row of log-probs x[w] - lognorm (PAD and BOS
 * excluded), best first, ties to the lower token id; NaN never enters. The
 * order is that of the log-probs themselves (as float), so that any scorer
 * giving the same log-probs (an ensemble of a model with itself) gives the
 * same choices. Blocks of 16 with nothing that can enter are skipped (after
 * the first blocks, nearly all; scores_above16). Returns the count. */
static int row_top_k(const float *x, float lognorm, int V, int k, TokLogp *top) {
    int n = 0;
    for (int w0 = 0; w0 < V; w0 += 16) {
        int w1 = w0 + 16 < V ? w0 + 16 : V;
        if (n == k && w1 == w0 + 16 && !scores_above16(x + w0, lognorm, top[n - 1].logp)) continue;
        for (int w = w0; w < w1; w++) {
            float v = x[w] - lognorm;
            if (w == TOK_PAD || w == TOK_BOS || isnan(v)) continue;
            if (n == k && !(v > top[n - 1].logp)) continue;
            int i = n < k ? n++ : n - 1;
            while (i > 0 && v > top[i - 1].logp) { top[i] = top[i - 1]; i--; }
            top[i].tok = w;
            top[i].logp = v;
        }
    }
    return n;
}

static int cand_cmp(const void *a, const void *b) {   /* score desc, row asc, token asc */
    const Candidate *x = a, *y = b;
    if (x->score != y->score) return x->score > y->score ? -1 : 1;
    if (x->row != y->row) return x->row < y->row ? -1 : 1;
    return (x->tok > y->tok) - (x->tok < y->tok);
}

/* Keep the nbest best finished hypotheses of a sentence, best first (a tie
 * keeps the one found first). */
static void finished_add(Finished *fin, int *nfin, int cap, Finished f) {
    if (isnan(f.score)) return;
    if (*nfin == cap && !(f.score > fin[cap - 1].score)) return;
    int i = *nfin < cap ? (*nfin)++ : cap - 1;
    while (i > 0 && f.score > fin[i - 1].score) { fin[i] = fin[i - 1]; i--; }
    fin[i] = f;
}

/* The history of a search: per step, each row's parent, token and sentence. */
typedef struct {
    int **parent, **tok;
    int steps, cap;
} History;

static void history_push(History *h, int n, const int *parent, const int *tok) {
    if (h->steps == h->cap) {
        h->cap = h->cap ? 2 * h->cap : 64;
        h->parent = xrealloc(h->parent, (size_t)h->cap * sizeof *h->parent);
        h->tok = xrealloc(h->tok, (size_t)h->cap * sizeof *h->tok);
    }
    h->parent[h->steps] = xmalloc((size_t)(n ? n : 1) * sizeof(int));
    h->tok[h->steps] = xmalloc((size_t)(n ? n : 1) * sizeof(int));
    memcpy(h->parent[h->steps], parent, (size_t)n * sizeof(int));
    memcpy(h->tok[h->steps], tok, (size_t)n * sizeof(int));
    h->steps++;
}

static void history_free(History *h) {
    for (int i = 0; i < h->steps; i++) { free(h->parent[i]); free(h->tok[i]); }
    free(h->parent);
    free(h->tok);
}

/* Tokens of the hypothesis ending at row `row` of step t: the input tokens
 * of its ancestors at steps 1..t (step 0's input is BOS). */
static Hypothesis hypothesis_from(const History *h, const Finished *f) {
    Hypothesis y = {.tokens = xmalloc((size_t)(f->t ? f->t : 1) * sizeof(int)), .len = f->t,
                    .logprob = f->logprob, .score = f->score};
    for (int t = f->t, r = f->row; t >= 1; t--) {
        y.tokens[t - 1] = h->tok[t][r];
        r = h->parent[t][r];
    }
    return y;
}

int beam_search(const StepFunction *f, int nsent, const int *max_len,
                const DecodeOptions *o, NBest *out) {
    const int K = o->beam < 1 ? 1 : o->beam, V = f->vocab;
    const int N = o->nbest < 1 ? 1 : (o->nbest > K ? K : o->nbest);
    if (nsent <= 0) return 0;
    /* Rows of the current step, grouped by sentence in sentence order. */
    size_t cap = (size_t)nsent * K;
    int *sent = xmalloc(cap * sizeof(int)), *parent = xmalloc(cap * sizeof(int)), *tok = xmalloc(cap * sizeof(int));
    int *nsent_rows = xcalloc((size_t)nsent, sizeof(int));    /* live rows per sentence */
    double *score = xmalloc(cap * sizeof(double));
    int *nsent2 = xmalloc(cap * sizeof(int)), *nparent = xmalloc(cap * sizeof(int)), *ntok = xmalloc(cap * sizeof(int));
    double *nscore = xmalloc(cap * sizeof(double));
    TokLogp *top = xmalloc(cap * (size_t)K * sizeof(TokLogp));
    int *ntop = xmalloc(cap * sizeof(int));
    float *eos = xmalloc(cap * sizeof(float));     /* log p(EOS) per row */
    Candidate *cand = xmalloc((size_t)K * K * sizeof(Candidate));
    Finished *fin = xmalloc((size_t)nsent * N * sizeof(Finished));
    int *nfin = xcalloc((size_t)nsent, sizeof(int));
    History hist = {0};
    int rc = 0;

    int n = nsent;
    for (int s = 0; s < nsent; s++) {
        sent[s] = s; parent[s] = -1; tok[s] = TOK_BOS; score[s] = 0.0; nsent_rows[s] = 1;
    }
    for (int t = 0; n > 0; t++) {
        history_push(&hist, n, parent, tok);
        const float *lognorm = NULL;
        const float *x = f->step(f->ctx, t, n, sent, parent, tok, &lognorm);
        if (!x) { rc = -1; break; }
        /* Each row's best K continuations (a sentence's K best extensions
         * are among the union of its rows' K best), as log-probs. */
        PAR_FOR(par_go((size_t)n * V, PAR_MIN), (int i = 0; i < n; i++), {
            ntop[i] = row_top_k(x + (size_t)i * V, lognorm ? lognorm[i] : 0.0f, V, K, top + (size_t)i * K);
            if (f->ids)   /* columns to token ids (increasing: the order and its ties stay) */
                for (int j = 0; j < ntop[i]; j++) top[(size_t)i * K + j].tok = f->ids[top[(size_t)i * K + j].tok];
            eos[i] = x[(size_t)i * V + TOK_EOS] - (lognorm ? lognorm[i] : 0.0f);
        });

        int nn = 0;
        for (int r0 = 0; r0 < n;) {
            int s = sent[r0], r1 = r0 + nsent_rows[s];
            Finished *fs = fin + (size_t)s * N;
            int new_rows = 0;
            if (t >= max_len[s]) {   /* max length: every live hypothesis ends here */
                for (int r = r0; r < r1; r++) {
                    double lp = score[r] + eos[r];
                    finished_add(fs, &nfin[s], N, (Finished){t, r, lp, lp / length_penalty(t + 1, o->alpha)});
                }
            } else {
                int nc = 0;
                for (int r = r0; r < r1; r++)
                    for (int j = 0; j < ntop[r]; j++) {
                        const TokLogp *c = &top[(size_t)r * K + j];
                        cand[nc++] = (Candidate){score[r] + c->logp, r, c->tok};
                    }
                qsort(cand, (size_t)nc, sizeof *cand, cand_cmp);
                if (nc > K) nc = K;
                double best_live = -INFINITY;
                for (int j = 0; j < nc; j++) {
                    const Candidate *c = &cand[j];
                    if (c->tok == TOK_EOS) {
                        finished_add(fs, &nfin[s], N,
                                     (Finished){t, c->row, c->score, c->score / length_penalty(t + 1, o->alpha)});
                    } else if (c->score > -INFINITY) {
                        nsent2[nn] = s; nparent[nn] = c->row; ntok[nn] = c->tok; nscore[nn] = c->score;
                        if (c->score > best_live) best_live = c->score;
                        nn++; new_rows++;
                    }
                }
                /* Can a live hypothesis still beat the N-th finished one?
                 * Its raw score only falls, and lp grows with length, so
                 * the best it can reach is s / lp(max_len + 1). */
                if (new_rows && nfin[s] == N &&
                    best_live / length_penalty(max_len[s] + 1, o->alpha) <= fs[N - 1].score) {
                    nn -= new_rows;
                    new_rows = 0;
                }
            }
            nsent_rows[s] = new_rows;
            r0 = r1;
        }
        n = nn;
        memcpy(sent, nsent2, (size_t)n * sizeof(int));
        memcpy(parent, nparent, (size_t)n * sizeof(int));
        memcpy(tok, ntok, (size_t)n * sizeof(int));
        memcpy(score, nscore, (size_t)n * sizeof(double));
    }
    for (int s = 0; s < nsent; s++) {
        NBest *nb = &out[s];
        nb->n = rc < 0 ? 0 : nfin[s];
        nb->hyps = xcalloc((size_t)N, sizeof(Hypothesis));
        for (int j = 0; j < nb->n; j++) nb->hyps[j] = hypothesis_from(&hist, &fin[(size_t)s * N + j]);
        if (rc == 0 && nb->n == 0) {   /* every score was NaN or -inf: say so with an empty output */
            nb->hyps[0] = (Hypothesis){.tokens = xmalloc(sizeof(int)), .len = 0, .logprob = -INFINITY, .score = -INFINITY};
            nb->n = 1;
        }
    }
    history_free(&hist);
    free(sent); free(parent); free(tok); free(nsent_rows); free(score);
    free(nsent2); free(nparent); free(ntok); free(nscore);
    free(top); free(ntop); free(eos); free(cand); free(fin); free(nfin);
    return rc;
}

/* ---- sampling ------------------------------------------------------------ */
/* The generator of sentence `index`: a function of (seed, index) only. */
static Rng sentence_rng(unsigned long long seed, long index) {
    Rng a, r;
    rng_seed(&a, (uint64_t)seed);
    rng_seed(&r, rng_u64(&a) + (uint64_t)index);
    return r;
}

/* Draw a token from one row of scores x (log-probs x[w] - lognorm):
 * p(w) ∝ exp((x[w] - lognorm) / T) over the topk best (all if topk = 0),
 * PAD, BOS and NaN excluded. Sums run in a fixed order (rank for top-k, id
 * otherwise), in double. top: scratch of topk entries. -1 if no token can
 * be drawn (every score -inf or NaN). */
static int sample_row(const float *x, float lognorm, int V, const DecodeOptions *o, Rng *rng, TokLogp *top) {
    double inv_t = 1.0 / o->temperature, total = 0, u = (double)(rng_u64(rng) >> 11) * (1.0 / 9007199254740992.0);
    if (o->topk > 0) {
        int n = row_top_k(x, lognorm, V, o->topk, top);
        if (n == 0 || !(top[0].logp > -INFINITY)) return -1;
        for (int j = 0; j < n; j++) total += exp(((double)top[j].logp - top[0].logp) * inv_t);
        double cum = 0, at = u * total;
        for (int j = 0; j < n; j++) {
            cum += exp(((double)top[j].logp - top[0].logp) * inv_t);
            if (cum > at) return top[j].tok;
        }
        return top[n - 1].tok;   /* u * total rounded up to the total */
    }
    float mx = -INFINITY;
    int last = -1;
    for (int w = 0; w < V; w++)
        if (w != TOK_PAD && w != TOK_BOS && x[w] > mx) mx = x[w];
    if (!(mx > -INFINITY)) return -1;
    for (int w = 0; w < V; w++)
        if (w != TOK_PAD && w != TOK_BOS && !isnan(x[w])) total += exp(((double)x[w] - mx) * inv_t);
    double cum = 0, at = u * total;
    for (int w = 0; w < V; w++) {
        if (w == TOK_PAD || w == TOK_BOS || isnan(x[w])) continue;
        double e = exp(((double)x[w] - mx) * inv_t);
        cum += e;
        if (e > 0) last = w;
        if (cum > at) return w;
    }
    return last;
}

int sample_search(const StepFunction *f, int nsent, const int *max_len, const long *index,
                  const DecodeOptions *o, NBest *out) {
    /* top-k of more than the vocabulary is the whole vocabulary: K scratch
     * entries per sentence, never more than V (the option alone sizes nothing) */
    DecodeOptions clamped = *o;
    if (clamped.topk > f->vocab) clamped.topk = f->vocab;
    o = &clamped;
    const int V = f->vocab, K = o->topk > 0 ? o->topk : 1;
    if (nsent <= 0) return 0;
    if (!(o->temperature > 0)) return errorf("sampling: the temperature must be > 0 (got %g)", o->temperature);
    /* one row per live sentence, in sentence order */
    int *sent = xmalloc((size_t)nsent * sizeof(int)), *parent = xmalloc((size_t)nsent * sizeof(int));
    int *tok = xmalloc((size_t)nsent * sizeof(int)), *next = xmalloc((size_t)nsent * sizeof(int));
    Rng *rng = xmalloc((size_t)nsent * sizeof *rng);
    TokLogp *top = xmalloc((size_t)nsent * K * sizeof *top);
    double *logprob = xcalloc((size_t)nsent, sizeof(double));
    for (int s = 0; s < nsent; s++) {
        sent[s] = s; parent[s] = -1; tok[s] = TOK_BOS;
        rng[s] = sentence_rng(o->seed, index[s]);
        out[s].hyps = xcalloc(1, sizeof(Hypothesis));
        out[s].hyps[0].tokens = xmalloc((size_t)(max_len[s] > 0 ? max_len[s] : 1) * sizeof(int));
        out[s].n = 1;
    }
    int rc = 0, n = nsent;
    for (int t = 0; n > 0; t++) {
        const float *lognorm = NULL;
        const float *x = f->step(f->ctx, t, n, sent, parent, tok, &lognorm);
        if (!x) { rc = -1; break; }
        PAR_FOR(par_go((size_t)n * V, PAR_MIN), (int i = 0; i < n; i++), {
            int s = sent[i];
            float ln = lognorm ? lognorm[i] : 0.0f;
            const float *xi = x + (size_t)i * V;
            int w = t >= max_len[s] ? TOK_EOS : sample_row(xi, ln, V, o, &rng[s], top + (size_t)i * K);
            if (w < 0) w = TOK_EOS;   /* nothing to draw: end the sentence */
            logprob[s] += (double)(xi[w] - ln);
            next[i] = f->ids ? f->ids[w] : w;   /* column to token id (EOS's column is EOS) */
        });
        int nn = 0;
        for (int i = 0; i < n; i++) {
            int s = sent[i];
            Hypothesis *y = &out[s].hyps[0];
            if (next[i] == TOK_EOS) {
                y->logprob = logprob[s];
                y->score = logprob[s] / length_penalty(y->len + 1, o->alpha);
                continue;
            }
            y->tokens[y->len++] = next[i];
            sent[nn] = s; parent[nn] = i; tok[nn] = next[i];
            nn++;
        }
        n = nn;
    }
    if (rc < 0)
        for (int s = 0; s < nsent; s++) nbest_free(&out[s]);
    free(sent); free(parent); free(tok); free(next); free(rng); free(top); free(logprob);
    return rc;
}

int decode_search(const StepFunction *f, int nsent, const int *max_len, const long *index,
                  const DecodeOptions *o, NBest *out) {
    return o->sample ? sample_search(f, nsent, max_len, index, o, out) : beam_search(f, nsent, max_len, o, out);
}
