/* serve.c — the queue and the engine of `tfm serve` (see serve.h). */
#include "serve.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "util.h"

struct ServeEngine {
    const Translator *tr;
    ServeLimits lim;
    pthread_mutex_t mu;
    pthread_cond_t work;         /* signalled on submit and stop */
    ServeJob *head, *tail;       /* FIFO of jobs with sentences not yet handed out */
    long queued_sentences;       /* submitted and not finished (the max_queue bound) */
    long queued_jobs;
    long queued_tokens;          /* source tokens of sentences not yet handed out */
    long last_jobs;              /* jobs in the previous engine call (LONG_MAX before the first) */
    int stopping;
    /* totals, for serve_stats and Retry-After */
    long batches, sentences, src_tokens, out_tokens;
    double busy;
};

ServeEngine *serve_engine_new(const Translator *tr, const ServeLimits *lim) {
    ServeEngine *e = xcalloc(1, sizeof *e);
    e->tr = tr;
    e->lim = *lim;
    e->last_jobs = LONG_MAX;
    if (e->lim.max_batch_tokens < 1) e->lim.max_batch_tokens = 1;
    if (e->lim.batch_size < 1) e->lim.batch_size = 1;
    pthread_mutex_init(&e->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);   /* timed waits on the clock now_seconds reads */
    pthread_cond_init(&e->work, &ca);
    pthread_condattr_destroy(&ca);
    return e;
}

void serve_engine_free(ServeEngine *e) {
    if (!e) return;
    pthread_mutex_destroy(&e->mu);
    pthread_cond_destroy(&e->work);
    free(e);
}

/* Two jobs may share a batch when they decode the same way: every option
 * but index_base (where sampling starts counting) and batch_size (which does
 * not change the output). Sampled jobs are never mixed (serve.h). */
static int same_options(const DecodeOptions *a, const DecodeOptions *b) {
    return !a->sample && !b->sample && a->beam == b->beam && a->alpha == b->alpha && a->max_len_a == b->max_len_a &&
           a->max_len_b == b->max_len_b && a->nbest == b->nbest;
}

int serve_submit(ServeEngine *e, ServeJob *j, int *retry_after) {
    j->out = xcalloc((size_t)(j->n ? j->n : 1), sizeof *j->out);
    j->failed = 0;
    j->error[0] = 0;
    j->next = 0;
    j->remaining = j->n;
    j->done = 0;
    j->queue_next = NULL;
    j->t_submit = now_seconds();
    pthread_cond_init(&j->cond, NULL);
    pthread_mutex_lock(&e->mu);
    int rc = 0;
    if (e->stopping) rc = 2;
    else if (e->queued_sentences + j->n > e->lim.max_queue) {
        /* Retry-After: the time to decode what is queued at the rate measured so far */
        double rate = e->busy > 0 ? e->sentences / e->busy : 0;
        double wait = rate > 0 ? e->queued_sentences / rate : 1;
        *retry_after = wait < 1 ? 1 : wait > 60 ? 60 : (int)ceil(wait);
        rc = 1;
    } else if (j->n == 0) {
        j->done = 1;
    } else {
        if (e->tail) e->tail->queue_next = j;
        else e->head = j;
        e->tail = j;
        e->queued_sentences += j->n;
        e->queued_jobs++;
        for (int i = 0; i < j->n; i++) e->queued_tokens += j->src_len[i];
        pthread_cond_signal(&e->work);
    }
    pthread_mutex_unlock(&e->mu);
    return rc;
}

void serve_wait(ServeEngine *e, ServeJob *j) {
    pthread_mutex_lock(&e->mu);
    while (!j->done) pthread_cond_wait(&j->cond, &e->mu);
    pthread_mutex_unlock(&e->mu);
}

void serve_job_free(ServeJob *j) {
    free(j->out);
    j->out = NULL;
    pthread_cond_destroy(&j->cond);
}

void serve_stop(ServeEngine *e) {
    pthread_mutex_lock(&e->mu);
    e->stopping = 1;
    pthread_cond_broadcast(&e->work);
    pthread_mutex_unlock(&e->mu);
}

void serve_stats(ServeEngine *e, ServeStats *s) {
    pthread_mutex_lock(&e->mu);
    *s = (ServeStats){.queued_jobs = e->queued_jobs, .queued_sentences = e->queued_sentences, .batches = e->batches,
                      .sentences = e->sentences, .src_tokens = e->src_tokens, .out_tokens = e->out_tokens,
                      .busy_seconds = e->busy, .stopping = e->stopping};
    pthread_mutex_unlock(&e->mu);
}

/* One sentence of a batch: which job and which of its sentences. */
typedef struct { ServeJob *job; int idx; } Slot;

static void unlink_job(ServeEngine *e, ServeJob *prev, ServeJob *j) {
    if (prev) prev->queue_next = j->queue_next;
    else e->head = j->queue_next;
    if (e->tail == j) e->tail = prev;
    j->queue_next = NULL;
}

/* Under the lock: take the next batch's sentences (serve.h: the head job's
 * options, oldest first, up to max_batch_tokens). Returns their count. */
static int take_batch(ServeEngine *e, Slot **slots, int *cap, DecodeOptions *o) {
    ServeJob *h = e->head;
    *o = h->o;
    o->batch_size = e->lim.batch_size;
    o->index_base = h->next;   /* sampling: a sampled batch holds consecutive sentences of one job */
    int n = 0;
    long tokens = 0;
    ServeJob *prev = NULL, *j = h;
    while (j && tokens < e->lim.max_batch_tokens) {
        ServeJob *nextj = j->queue_next;
        if (j == h || same_options(&h->o, &j->o)) {
            while (j->next < j->n && (n == 0 || tokens + j->src_len[j->next] <= e->lim.max_batch_tokens)) {
                if (n == *cap) { *cap = *cap * 2 + 64; *slots = xrealloc(*slots, (size_t)*cap * sizeof **slots); }
                (*slots)[n++] = (Slot){j, j->next};
                tokens += j->src_len[j->next];
                e->queued_tokens -= j->src_len[j->next];
                j->next++;
            }
            if (j->next == j->n) unlink_job(e, prev, j);
            else { prev = j; if (n > 0 && tokens + j->src_len[j->next] > e->lim.max_batch_tokens) break; }
            if (h->o.sample) break;   /* never mixed */
        } else {
            prev = j;
        }
        j = nextj;
    }
    return n;
}

void serve_run(ServeEngine *e) {
    Slot *slots = NULL;
    int cap = 0;
    const int **src = NULL;
    int *len = NULL;
    NBest *out = NULL;
    int bufcap = 0;
    pthread_mutex_lock(&e->mu);
    for (;;) {
        if (!e->head) {
            if (e->stopping) break;
            pthread_cond_wait(&e->work, &e->mu);
            continue;
        }
        /* wait for company (serve.h): up to max_delay after the oldest job
         * arrived, for as many jobs as the previous engine call held */
        double due = e->head->t_submit + e->lim.max_delay, now = now_seconds();
        long waiting = 0;
        for (ServeJob *j = e->head; j && waiting < e->last_jobs; j = j->queue_next) waiting++;
        if (!e->stopping && e->queued_tokens < e->lim.max_batch_tokens && waiting < e->last_jobs && now < due) {
            struct timespec ts;
            clock_gettime(CLOCK_MONOTONIC, &ts);
            double w = due - now;
            ts.tv_sec += (time_t)w;
            ts.tv_nsec += (long)((w - floor(w)) * 1e9);
            if (ts.tv_nsec >= 1000000000L) { ts.tv_sec++; ts.tv_nsec -= 1000000000L; }
            pthread_cond_timedwait(&e->work, &e->mu, &ts);
            continue;
        }
        DecodeOptions o;
        int n = take_batch(e, &slots, &cap, &o);
        long jobs = 0;
        for (int i = 0; i < n; i++) jobs += i == 0 || slots[i].job != slots[i - 1].job;
        e->last_jobs = jobs;
        pthread_mutex_unlock(&e->mu);

        if (n > bufcap) {
            bufcap = n;
            src = xrealloc(src, (size_t)n * sizeof *src);
            len = xrealloc(len, (size_t)n * sizeof *len);
            out = xrealloc(out, (size_t)n * sizeof *out);
        }
        long toks = 0;
        for (int i = 0; i < n; i++) {
            src[i] = slots[i].job->src[slots[i].idx];
            len[i] = slots[i].job->src_len[slots[i].idx];
            toks += len[i];
        }
        double t0 = now_seconds();
        int rc = translator_ids(e->tr, &o, n, src, len, out);
        double dt = now_seconds() - t0;
        long otoks = 0;
        if (rc == 0)
            for (int i = 0; i < n; i++) otoks += out[i].hyps[0].len;

        pthread_mutex_lock(&e->mu);
        e->batches++;
        e->sentences += n;
        e->src_tokens += toks;
        e->out_tokens += otoks;
        e->busy += dt;
        for (int i = 0; i < n; i++) {
            ServeJob *j = slots[i].job;
            if (rc == 0) j->out[slots[i].idx] = out[i];
            else if (!j->failed) { j->failed = 1; snprintf(j->error, sizeof j->error, "%s", error_message()); }
            e->queued_sentences--;
            if (--j->remaining == 0) {
                e->queued_jobs--;
                j->done = 1;
                pthread_cond_signal(&j->cond);
            }
        }
    }
    pthread_mutex_unlock(&e->mu);
    free(slots); free(src); free(len); free(out);
}
