/* test_serve.c — the engine of tfm serve (serve.h), without HTTP:
 *
 *   - jobs with the same options are decoded together (one engine call for
 *     three jobs), jobs with other options and sampled jobs apart;
 *   - max_batch_tokens splits a job over engine calls; a sampled job split so
 *     still draws sentence i with (seed, i);
 *   - every sentence's output equals translator_ids on its job alone, bit for
 *     bit (tokens, log-prob, score), also with jobs submitted from 4 threads
 *     while the engine runs;
 *   - the wait for company: the first job waits max_delay, a lone job after
 *     a one-job call is decoded at once;
 *   - the queue bound: a job that does not fit is refused with a Retry-After
 *     >= 1, a smaller one still fits; after serve_stop submissions are
 *     refused and what was queued is still decoded. */
#include "test.h"

#include <pthread.h>
#include <stdint.h>
#include <string.h>

#include "decode.h"
#include "dispatch.h"
#include "model.h"
#include "serve.h"
#include "util.h"

enum { V = 40 };

static void tiny_model(Model *m, uint64_t seed) {
    ModelDims d = {.vocab = V, .d_model = 16, .d_ff = 32, .heads = 2, .enc_layers = 2, .dec_layers = 2,
                   .max_positions = 64, .pre_norm = 1};
    CHECK(model_init(m, &d, seed) == 0);
    Rng r;   /* sharpen the random weights so that search decisions matter (as test_decode.c) */
    rng_seed(&r, seed + 1);
    for (size_t i = 0; i < m->num_params; i++) m->params[i] += 0.3f * rng_normal(&r);
}

/* A job of n random sentences of the given length (0: random 1..12). */
static ServeJob *new_job(Rng *r, int n, int len, const DecodeOptions *o) {
    ServeJob *j = xcalloc(1, sizeof *j);
    j->o = *o;
    j->n = n;
    j->src = xcalloc((size_t)n + 1, sizeof *j->src);
    j->src_len = xcalloc((size_t)n + 1, sizeof(int));
    for (int i = 0; i < n; i++) {
        j->src_len[i] = len ? len : 1 + (int)(rng_u64(r) % 12);
        j->src[i] = xmalloc((size_t)j->src_len[i] * sizeof(int) + 1);
        for (int t = 0; t < j->src_len[i]; t++) j->src[i][t] = 4 + (int)(rng_u64(r) % (V - 4));
    }
    return j;
}

/* j's outputs equal translator_ids on j alone (index_base 0), bit for bit. */
static int same_as_alone(const Translator *tr, ServeJob *j, int batch_size) {
    DecodeOptions o = j->o;
    o.batch_size = batch_size;
    o.index_base = 0;
    NBest *want = xcalloc((size_t)j->n + 1, sizeof *want);
    int ok = translator_ids(tr, &o, j->n, (const int *const *)j->src, j->src_len, want) == 0 && !j->failed;
    for (int i = 0; ok && i < j->n; i++) {
        ok = want[i].n == j->out[i].n;
        for (int k = 0; ok && k < want[i].n; k++) {
            const Hypothesis *a = &want[i].hyps[k], *b = &j->out[i].hyps[k];
            ok = a->len == b->len && a->logprob == b->logprob && a->score == b->score &&
                 !memcmp(a->tokens, b->tokens, (size_t)a->len * sizeof(int));
        }
    }
    for (int i = 0; i < j->n; i++) nbest_free(&want[i]);
    free(want);
    return ok;
}

static void free_job(ServeJob *j) {
    for (int i = 0; i < j->n; i++) { nbest_free(&j->out[i]); free(j->src[i]); }
    serve_job_free(j);
    free(j->src); free(j->src_len); free(j);
}

static DecodeOptions opts(int beam, int nbest, int sample, unsigned long long seed) {
    return (DecodeOptions){.beam = beam, .alpha = 0.6, .max_len_a = 1, .max_len_b = 5, .nbest = nbest,
                           .batch_size = 4, .sample = sample, .temperature = 1, .topk = 0, .seed = seed};
}

static Model g_m;
static Translator *g_tr;

static void test_batching(void) {
    Rng r;
    rng_seed(&r, 1);
    ServeLimits lim = {.max_batch_tokens = 1 << 20, .max_delay = 0, .max_queue = 1000, .batch_size = 4};
    ServeEngine *e = serve_engine_new(g_tr, &lim);
    DecodeOptions b2 = opts(2, 2, 0, 0), b3 = opts(3, 1, 0, 0), s7 = opts(1, 1, 1, 7), s8 = opts(1, 1, 1, 8);
    ServeJob *jobs[7] = {new_job(&r, 5, 0, &b2), new_job(&r, 3, 0, &b3), new_job(&r, 6, 0, &b2), new_job(&r, 4, 0, &s7),
                         new_job(&r, 2, 0, &b2), new_job(&r, 5, 0, &s8), new_job(&r, 0, 0, &b2)};
    int ra = 0;
    for (int k = 0; k < 7; k++) CHECK(serve_submit(e, jobs[k], &ra) == 0);
    ServeStats st;
    serve_stats(e, &st);
    CHECK(st.queued_jobs == 6 && st.queued_sentences == 25);   /* the empty job is done at once */
    serve_stop(e);
    ServeJob *late = new_job(&r, 1, 0, &b2);
    CHECK(serve_submit(e, late, &ra) == 2);   /* stopping: refused */
    free_job(late);
    serve_run(e);
    serve_stats(e, &st);
    /* b2 jobs 0, 2, 4 together; b3; s7 alone; s8 alone */
    CHECK_MSG(st.batches == 4, "batches %ld, expected 4", st.batches);
    CHECK(st.sentences == 25 && st.queued_jobs == 0 && st.queued_sentences == 0);
    for (int k = 0; k < 7; k++) {
        serve_wait(e, jobs[k]);
        CHECK_MSG(same_as_alone(g_tr, jobs[k], 4), "job %d differs from its translation alone", k);
        free_job(jobs[k]);
    }
    serve_engine_free(e);
}

static void test_token_budget(void) {
    Rng r;
    rng_seed(&r, 2);
    ServeLimits lim = {.max_batch_tokens = 10, .max_delay = 0, .max_queue = 1000, .batch_size = 4};
    ServeEngine *e = serve_engine_new(g_tr, &lim);
    DecodeOptions b2 = opts(2, 1, 0, 0), s = opts(1, 1, 1, 3);
    ServeJob *a = new_job(&r, 4, 4, &b2), *b = new_job(&r, 5, 4, &s);   /* 4 tokens each: 2 sentences a call */
    int ra;
    CHECK(serve_submit(e, a, &ra) == 0);
    CHECK(serve_submit(e, b, &ra) == 0);
    serve_stop(e);
    serve_run(e);
    ServeStats st;
    serve_stats(e, &st);
    CHECK_MSG(st.batches == 2 + 3, "batches %ld, expected 5", st.batches);
    CHECK(same_as_alone(g_tr, a, 4));
    CHECK_MSG(same_as_alone(g_tr, b, 4), "a sampled job split over calls draws as it would alone");
    free_job(a); free_job(b);
    serve_engine_free(e);
}

static void test_queue_bound(void) {
    Rng r;
    rng_seed(&r, 3);
    ServeLimits lim = {.max_batch_tokens = 100, .max_delay = 0, .max_queue = 5, .batch_size = 4};
    ServeEngine *e = serve_engine_new(g_tr, &lim);
    DecodeOptions b2 = opts(2, 1, 0, 0);
    ServeJob *a = new_job(&r, 3, 0, &b2), *b = new_job(&r, 3, 0, &b2), *c = new_job(&r, 2, 0, &b2);
    int ra = 0;
    CHECK(serve_submit(e, a, &ra) == 0);
    CHECK(serve_submit(e, b, &ra) == 1);
    CHECK(ra >= 1 && ra <= 60);
    CHECK(serve_submit(e, c, &ra) == 0);   /* 3 + 2 = 5 fits */
    serve_stop(e);
    ServeJob *d = new_job(&r, 1, 0, &b2);
    CHECK(serve_submit(e, d, &ra) == 2);
    serve_run(e);
    CHECK(same_as_alone(g_tr, a, 4) && same_as_alone(g_tr, c, 4));
    free_job(a); free_job(b); free_job(c); free_job(d);   /* b, d refused: outputs empty */
    serve_engine_free(e);
}

/* ---- submitters on threads while the engine runs ---------------------- */
typedef struct { ServeEngine *e; int id, ok; } Sub;

static void *submitter(void *arg) {
    Sub *s = arg;
    Rng r;
    rng_seed(&r, 100 + (uint64_t)s->id);
    s->ok = 1;
    for (int k = 0; k < 8; k++) {
        DecodeOptions o = k % 3 == 2 ? opts(1, 1, 1, (unsigned long long)k) : opts(1 + k % 2, 1, 0, 0);
        ServeJob *j = new_job(&r, 1 + (int)(rng_u64(&r) % 6), 0, &o);
        int ra;
        if (serve_submit(s->e, j, &ra) != 0) { s->ok = 0; free_job(j); continue; }
        serve_wait(s->e, j);
        if (!same_as_alone(g_tr, j, 4)) s->ok = 0;
        free_job(j);
    }
    return NULL;
}

static void *controller(void *arg) {
    ServeEngine *e = arg;
    pthread_t th[4];
    Sub s[4];
    for (int i = 0; i < 4; i++) { s[i] = (Sub){e, i, 0}; pthread_create(&th[i], NULL, submitter, &s[i]); }
    for (int i = 0; i < 4; i++) pthread_join(th[i], NULL);
    for (int i = 0; i < 4; i++) CHECK_MSG(s[i].ok, "submitter %d: an output differs from its job alone", i);
    serve_stop(e);
    return NULL;
}

static void test_threads(void) {
    ServeLimits lim = {.max_batch_tokens = 40, .max_delay = 0.002, .max_queue = 1000, .batch_size = 4};
    ServeEngine *e = serve_engine_new(g_tr, &lim);
    pthread_t c;
    pthread_create(&c, NULL, controller, e);
    serve_run(e);   /* here, in the thread that owns the OpenMP threads */
    pthread_join(c, NULL);
    ServeStats st;
    serve_stats(e, &st);
    CHECK(st.queued_jobs == 0 && st.queued_sentences == 0 && st.batches > 0);
    serve_engine_free(e);
}

/* The wait for company: the first job waits max_delay (no previous call to
 * go by); a lone job after a call of one job does not wait. */
typedef struct { ServeEngine *e; double first, second; } Lone;

static void *lone_client(void *arg) {
    Lone *l = arg;
    Rng r;
    rng_seed(&r, 9);
    DecodeOptions o = opts(1, 1, 0, 0);
    for (int k = 0; k < 2; k++) {
        ServeJob *j = new_job(&r, 1, 3, &o);
        int ra;
        double t0 = now_seconds();
        CHECK(serve_submit(l->e, j, &ra) == 0);
        serve_wait(l->e, j);
        *(k ? &l->second : &l->first) = now_seconds() - t0;
        free_job(j);
    }
    serve_stop(l->e);
    return NULL;
}

static void test_wait_for_company(void) {
    ServeLimits lim = {.max_batch_tokens = 1000, .max_delay = 2.0, .max_queue = 100, .batch_size = 4};
    Lone l = {.e = serve_engine_new(g_tr, &lim)};
    pthread_t c;
    pthread_create(&c, NULL, lone_client, &l);
    serve_run(l.e);
    pthread_join(c, NULL);
    CHECK_MSG(l.first >= 2.0, "the first job waited %.3f s, expected max_delay (2 s)", l.first);
    CHECK_MSG(l.second < 1.0, "a lone job after a lone job waited %.3f s: expected no wait", l.second);
    serve_engine_free(l.e);
}

int main(void) {
    CHECK(threads_init(2) == 0);
    tiny_model(&g_m, 11);
    g_tr = translator_new(&g_m, 1);
    CHECK(g_tr != NULL);
    RUN(test_batching);
    RUN(test_token_budget);
    RUN(test_queue_bound);
    RUN(test_threads);
    RUN(test_wait_for_company);
    translator_free(g_tr);
    model_free(&g_m);
    return test_summary();
}
