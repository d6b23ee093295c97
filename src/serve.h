/* serve.h — the translation engine of `tfm serve`: a queue of requests and
 * one engine that decodes the sentences of concurrent requests together.
 * HTTP is cli_serve.c's; this file knows nothing of it.
 *
 * A request (ServeJob) is n BPE-encoded sentences and the decoding options
 * it asked for. Handler threads submit jobs; one engine thread (the
 * process's main thread, which owns the OpenMP threads and BLIS) takes
 * sentences from the queue, oldest job first, and decodes them with
 * translator_ids (decode.h), which sorts them by length into batches of
 * o->batch_size and runs the batches on all threads. A job is done when its
 * last sentence is; the handler waiting on it then answers.
 *
 * Which sentences go together. A batch holds only sentences whose options
 * agree (beam, alpha, n-best, lengths, sampling settings): those of every
 * queued job with the head job's options, in queue order, until the batch
 * has max_batch_tokens source tokens (at least one sentence; a job may be
 * split over several batches). A sampled job is never mixed with another:
 * sentence i of a request draws with (seed, i), as line i of
 * `tfm translate --sample` does. Since decoding is batch invariant
 * (search.h), a sentence's output is the same whichever batch it lands in,
 * so a request's translations are byte for byte those of `tfm translate`.
 *
 * When a batch starts. The engine, once free, waits for company: until the
 * queue holds max_batch_tokens source tokens, or as many jobs as its previous
 * call decoded (all it can expect under a steady load; before the first call:
 * no limit), or its oldest job has waited max_delay seconds (0: never
 * waits). So a lone client's request after a lone request is decoded at
 * once, and a burst of concurrent requests is gathered into one call. While
 * a call runs, new requests queue up and need no waiting.
 *
 * Overload. The queue holds at most max_queue sentences (taken or not yet
 * taken by the engine): a job that does not fit is refused (serve_submit
 * says so, with a Retry-After estimate), never dropped later.
 */
#ifndef TFM_SERVE_H
#define TFM_SERVE_H

#include <pthread.h>

#include "decode.h"
#include "search.h"

typedef struct ServeJob {
    /* set by the submitter */
    DecodeOptions o;             /* index_base and batch_size are the engine's */
    int n;                       /* sentences */
    int **src;                   /* src[i]: src_len[i] BPE tokens (no EOS) */
    int *src_len;
    /* filled by the engine */
    NBest *out;                  /* out[i], in input order, once done */
    int failed;                  /* 1: decoding failed, error says why */
    char error[256];
    /* the engine's bookkeeping */
    int next;                    /* sentences handed to the decoder so far */
    int remaining;               /* sentences not finished yet */
    int done;
    double t_submit;
    struct ServeJob *queue_next;
    pthread_cond_t cond;
} ServeJob;

typedef struct {
    int max_batch_tokens;        /* source tokens per engine call (>= 1) */
    double max_delay;            /* seconds the oldest job may wait for company */
    int max_queue;               /* sentences waiting or being decoded, at most */
    int batch_size;              /* sentences per decoder batch (translator_ids) */
} ServeLimits;

/* Counters, for /metrics (a snapshot under the engine's lock). */
typedef struct {
    long queued_jobs, queued_sentences;        /* now: submitted, not finished */
    long batches, sentences, src_tokens, out_tokens;   /* totals decoded */
    double busy_seconds;                       /* time spent decoding */
    int stopping;
} ServeStats;

typedef struct ServeEngine ServeEngine;

/* The engine of a Translator (which must outlive it). */
ServeEngine *serve_engine_new(const Translator *tr, const ServeLimits *lim);
void serve_engine_free(ServeEngine *e);

/* Queue a job (j->o, n, src, src_len set; the rest is initialised here).
 * Returns 0; 1 if the queue is full (*retry_after: seconds after which it
 * has probably room, >= 1); 2 if the engine is stopping (draining). */
int serve_submit(ServeEngine *e, ServeJob *j, int *retry_after);
/* Block until j is done (j->out filled, or j->failed). Then the caller
 * owns j->out (nbest_free each) and must call serve_job_free. */
void serve_wait(ServeEngine *e, ServeJob *j);
void serve_job_free(ServeJob *j);   /* out, cond; not src (the caller's) */

/* The engine loop, in the calling thread (the one whose OpenMP threads
 * decode): returns once serve_stop was called and every queued job is done. */
void serve_run(ServeEngine *e);
/* Refuse new jobs (serve_submit returns 2) and let serve_run return once
 * the queue is empty. Safe from any thread (not from a signal handler). */
void serve_stop(ServeEngine *e);
void serve_stats(ServeEngine *e, ServeStats *s);

#endif
