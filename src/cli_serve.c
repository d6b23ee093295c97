/* cli_serve.c — `tfm serve`: an HTTP/1.1 + JSON translation server on
 * libmicrohttpd (doc/serve.md).
 *
 * Threads. libmicrohttpd runs one thread per connection; a POST /translate
 * handler parses and checks the body, BPE-encodes its lines (bpe_encode is
 * thread-safe), queues them as one ServeJob and blocks until the engine has
 * decoded them. The engine (serve.c) runs in the main thread, which owns
 * the OpenMP threads and BLIS (threads_init), so that one copy of the model
 * serves every connection with all threads. A signal thread waits for
 * SIGINT/SIGTERM (blocked in every other thread) and starts the drain.
 *
 * Drain. The listening socket is closed (no new connections), requests on
 * open connections get 503, queued and running jobs finish and are answered;
 * then the daemon stops and tfm exits 0.
 *
 * Over 700 lines: one command whose handlers, libmicrohttpd callbacks and
 * drain all work on the server's state (its banner, below); the engine they
 * feed is serve.c, already apart.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <math.h>
#include <netdb.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <microhttpd.h>

#include "checkpoint.h"
#include "cli.h"
#include "decode.h"
#include "gemm_int8.h"
#include "dispatch.h"
#include "json.h"
#include "serve.h"
#include "utf8.h"
#include "util.h"

static void serve_usage(FILE *f) {
    fprintf(f,
        "usage: tfm serve -m MODEL [-m MODEL2 ...] [--host 127.0.0.1] [--port 8080] [options]\n"
        "\n"
        "An HTTP/1.1 translation server (doc/serve.md). The model is loaded once, before\n"
        "the port is opened; the sentences of concurrent requests are queued, sorted by\n"
        "length and decoded together by one engine on all threads. A request's\n"
        "translations are byte for byte those of `tfm translate` with the same options.\n"
        "\n"
        "  POST /translate  {\"text\": [\"line\", ...], \"beam\": 4, \"alpha\": 0.6, \"n_best\": 1,\n"
        "                   \"scores\": false, \"max_len\": N, \"sample\": false, \"temperature\": 1,\n"
        "                   \"topk\": 0, \"seed\": 1}   (every field but text optional)\n"
        "                   -> {\"translations\": [...], \"model\": ..., \"time_ms\": ...}\n"
        "  GET /health      {\"status\": \"ready\"} (503 \"draining\" while stopping)\n"
        "  GET /info        the model, its config, precision, kernels, threads, limits\n"
        "  GET /metrics     Prometheus text: requests, sentences, tokens, errors by kind,\n"
        "                   queue length, a latency histogram\n"
        "Errors are JSON {\"error\": MESSAGE, \"kind\": KIND}: 400 (malformed JSON, wrong\n"
        "types, unknown fields, invalid UTF-8), 413 (body, lines or line over the limits),\n"
        "429 with Retry-After (queue full), 503 (stopping).\n"
        "\n"
        "options:\n"
        "  -m, --model FILE        the model (required); several: an ensemble, as translate\n"
        "  --host ADDR             address to listen on (default 127.0.0.1: this machine only)\n"
        "  --port N                TCP port (default 8080; 0: any free port, logged)\n"
        "  --max-batch-tokens N    source tokens decoded together, at most (default 4096)\n"
        "  --max-delay-ms MS       how long a request may wait for others to batch with, when\n"
        "                          fewer are queued than the last batch held (default 10;\n"
        "                          0: decode at once)\n"
        "  --max-queue N           sentences queued or decoding, at most; beyond: 429 (default 4096)\n"
        "  --max-lines N           lines per request, at most; beyond: 413 (default 256)\n"
        "  --max-line-bytes N      bytes per line, at most; beyond: 413 (default 4096)\n"
        "  --max-body-bytes N      request body bytes, at most; beyond: 413 (default 1048576)\n"
        "  --max-connections N     open connections, at most (default 256; more are closed)\n"
        "  --timeout S             close a connection idle (not sending, not reading) for S\n"
        "                          seconds (default 30)\n"
        "  --beam K, --alpha A, --max-len-a A, --max-len-b B, --sample, --temperature T,\n"
        "  --topk K, --seed S      default decoding options (as translate; a request's\n"
        "                          fields override them)\n"
        "  --batch-size N          sentences per decoder batch (does not change the output)\n"
        "  --threads N             threads of the engine (0: all cores)\n"
        "  --precision P           fp32, bf16 or int8 matrix products (as translate)\n"
        "  --shortlist FILE        a vocabulary shortlist (tfm shortlist; as translate)\n"
        "  -q, --quiet             no per-start log lines on stderr\n"
        "\n"
        "SIGINT/SIGTERM: stop accepting, finish the requests in flight, exit 0.\n"
        "\n"
        "example: tfm serve -m runs/multi30k-en-de/average.safetensors --port 8080 &\n"
        "         curl -s localhost:8080/translate -d '{\"text\": [\"A dog runs.\"]}'\n");
}

/* ---- the server's state ------------------------------------------------- */

typedef struct {
    int max_lines, max_line_bytes, timeout;
    size_t max_body;
} Limits;

/* /metrics counters (under g.mu). */
enum { EP_TRANSLATE, EP_HEALTH, EP_INFO, EP_METRICS, EP_OTHER, NEP };
static const char *EP_NAME[NEP] = {"translate", "health", "info", "metrics", "other"};
static const int CODES[] = {200, 400, 404, 405, 413, 429, 500, 503};
#define NCODES ((int)(sizeof CODES / sizeof CODES[0]))
enum { E_BAD_JSON, E_BAD_REQUEST, E_INVALID_UTF8, E_TOO_LARGE, E_QUEUE_FULL, E_SHUTTING_DOWN, E_NOT_FOUND,
       E_METHOD, E_INTERNAL, E_TIMEOUT, E_CLIENT_GONE, NERR };
static const char *ERR_NAME[NERR] = {"bad_json", "bad_request", "invalid_utf8", "too_large", "queue_full",
                                     "shutting_down", "not_found", "method_not_allowed", "internal", "timeout",
                                     "client_gone"};
static const double BUCKETS[] = {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10};
#define NBUCKETS ((int)(sizeof BUCKETS / sizeof BUCKETS[0]))

static struct {
    /* set once at start, read-only afterwards */
    const Model *m;              /* the first model (tokenizer limits, dims) */
    int nmodels;
    const char **model_path;
    const Config *c;
    const Bpe *bpe;
    DecodeOptions defaults;
    DecodeArgs da;
    Limits lim;
    ServeLimits slim;
    int max_connections;
    char model_name[1024];
    ServeEngine *engine;
    struct MHD_Daemon *daemon;
    double t_start;
    /* changing */
    atomic_int draining;
    pthread_mutex_t mu;
    pthread_cond_t idle;         /* signalled when active drops */
    long active;                 /* requests begun and not completed */
    long requests[NEP][NCODES];
    long errors[NERR];
    long sentences, src_tokens, truncated;
    long hist[NBUCKETS + 1];     /* /translate 200 latencies, [i]: <= BUCKETS[i]; last: +Inf */
    double hist_sum;
    long hist_count;
} g = {.mu = PTHREAD_MUTEX_INITIALIZER, .idle = PTHREAD_COND_INITIALIZER};

/* One HTTP request (libmicrohttpd's con_cls). */
typedef struct {
    int endpoint;
    double t0;
    char *body;
    size_t len, cap;
    int too_large;
    int answered;
} Req;

static int code_index(int code) {
    for (int i = 0; i < NCODES; i++)
        if (CODES[i] == code) return i;
    return -1;
}

/* Queue a response (body malloc'd, taken over) and count it. */
static enum MHD_Result respond(struct MHD_Connection *conn, Req *r, int code, const char *type, char *body,
                               int retry_after) {
    struct MHD_Response *resp = MHD_create_response_from_buffer(strlen(body), body, MHD_RESPMEM_MUST_FREE);
    if (!resp) { free(body); return MHD_NO; }
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, type);
    if (retry_after > 0) {
        char ra[16];
        snprintf(ra, sizeof ra, "%d", retry_after);
        MHD_add_response_header(resp, MHD_HTTP_HEADER_RETRY_AFTER, ra);
    }
    if (code == 405)
        MHD_add_response_header(resp, MHD_HTTP_HEADER_ALLOW, r->endpoint == EP_TRANSLATE ? "POST" : "GET");
    if (atomic_load(&g.draining)) MHD_add_response_header(resp, MHD_HTTP_HEADER_CONNECTION, "close");
    enum MHD_Result rc = MHD_queue_response(conn, (unsigned)code, resp);
    MHD_destroy_response(resp);
    double dt = now_seconds() - r->t0;
    pthread_mutex_lock(&g.mu);
    int ci = code_index(code);
    if (ci >= 0) g.requests[r->endpoint][ci]++;
    if (r->endpoint == EP_TRANSLATE && code == 200) {
        int b = 0;
        while (b < NBUCKETS && dt > BUCKETS[b]) b++;
        g.hist[b]++;
        g.hist_sum += dt;
        g.hist_count++;
    }
    pthread_mutex_unlock(&g.mu);
    r->answered = 1;
    return rc;
}

static enum MHD_Result respond_error(struct MHD_Connection *conn, Req *r, int code, int kind, int retry_after,
                                     const char *fmt, ...) __attribute__((format(printf, 6, 7)));
static enum MHD_Result respond_error(struct MHD_Connection *conn, Req *r, int code, int kind, int retry_after,
                                     const char *fmt, ...) {
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    JsonBuf b = {0};
    jb_raw(&b, "{\"error\": ");
    jb_string(&b, msg);
    jb_raw(&b, ", \"kind\": ");
    jb_string(&b, ERR_NAME[kind]);
    jb_printf(&b, ", \"code\": %d}\n", code);
    pthread_mutex_lock(&g.mu);
    g.errors[kind]++;
    pthread_mutex_unlock(&g.mu);
    return respond(conn, r, code, "application/json", b.s, retry_after);
}

/* ---- POST /translate ------------------------------------------------------ */

static const char *const FIELDS[] = {"text", "beam", "alpha", "n_best", "scores", "max_len", "sample", "temperature",
                                     "topk", "seed"};
#define NFIELDS ((int)(sizeof FIELDS / sizeof FIELDS[0]))

/* An integer field in [lo, hi]: 0, or -1 with msg set. */
static int field_int(const Json *v, const char *name, long long lo, long long hi, long long *out, char *msg, size_t n) {
    if (v->type == JSON_NUMBER) {
        char *end;
        errno = 0;
        long long x = strtoll(v->text, &end, 10);
        if (!errno && !*end && x >= lo && x <= hi) { *out = x; return 0; }
    }
    snprintf(msg, n, "\"%s\" must be an integer from %lld to %lld, got %s", name, lo, hi,
             v->type == JSON_NUMBER ? v->text : json_type_name(v->type));
    return -1;
}

static int field_num(const Json *v, const char *name, double lo, int lo_open, double *out, char *msg, size_t n) {
    if (v->type == JSON_NUMBER) {
        double x = strtod(v->text, NULL);
        if (isfinite(x) && (lo_open ? x > lo : x >= lo)) { *out = x; return 0; }
    }
    snprintf(msg, n, "\"%s\" must be a number %s %g, got %s", name, lo_open ? ">" : ">=", lo,
             v->type == JSON_NUMBER ? v->text : json_type_name(v->type));
    return -1;
}

static int field_bool(const Json *v, const char *name, int *out, char *msg, size_t n) {
    if (v->type == JSON_TRUE || v->type == JSON_FALSE) { *out = v->type == JSON_TRUE; return 0; }
    snprintf(msg, n, "\"%s\" must be true or false, got %s", name, json_type_name(v->type));
    return -1;
}

/* The options of a request: the server's defaults overridden by its fields.
 * 0, or -1 with msg (a 400). */
static int request_options(const Json *req, DecodeOptions *o, int *scores, char *msg, size_t n) {
    *o = g.defaults;
    *scores = 0;
    long long x;
    double d;
    const Json *v;
    int sample = o->sample, has_sampling = 0, has_beam = 0, nbest = 1, b;
    if ((v = json_get(req, "sample"))) { if (field_bool(v, "sample", &b, msg, n)) return -1; sample = b; }
    if ((v = json_get(req, "beam"))) {
        if (field_int(v, "beam", 1, 64, &x, msg, n)) return -1;
        o->beam = (int)x;
        has_beam = 1;
    }
    if ((v = json_get(req, "alpha"))) { if (field_num(v, "alpha", 0, 0, &d, msg, n)) return -1; o->alpha = d; }
    if ((v = json_get(req, "n_best"))) { if (field_int(v, "n_best", 1, 64, &x, msg, n)) return -1; nbest = (int)x; }
    if ((v = json_get(req, "scores"))) { if (field_bool(v, "scores", scores, msg, n)) return -1; }
    if ((v = json_get(req, "max_len"))) {
        if (field_int(v, "max_len", 0, 100000, &x, msg, n)) return -1;
        o->max_len_a = 0;   /* as translate --max-len-a 0 --max-len-b N */
        o->max_len_b = (int)x;
    }
    if ((v = json_get(req, "temperature"))) {
        if (field_num(v, "temperature", 0, 1, &d, msg, n)) return -1;
        o->temperature = d;
        has_sampling = 1;
    }
    if ((v = json_get(req, "topk"))) {
        if (field_int(v, "topk", 0, 1000000, &x, msg, n)) return -1;
        o->topk = (int)x;
        has_sampling = 1;
    }
    if ((v = json_get(req, "seed"))) {
        if (field_int(v, "seed", 0, INT64_MAX, &x, msg, n)) return -1;
        o->seed = (unsigned long long)x;
        has_sampling = 1;
    }
    /* the checks of translate's decode_args_check */
    if (has_sampling && !sample) { snprintf(msg, n, "\"temperature\", \"topk\" and \"seed\" need \"sample\": true"); return -1; }
    if (sample && (has_beam || nbest > 1)) {
        snprintf(msg, n, "\"sample\": true draws one translation per line: drop \"beam\" and \"n_best\"");
        return -1;
    }
    if (nbest > o->beam) { snprintf(msg, n, "\"n_best\" %d is larger than the beam (%d)", nbest, o->beam); return -1; }
    o->sample = sample;
    o->nbest = nbest;
    o->index_base = 0;
    return 0;
}

/* One output as translate writes it: text, or {text, score, logprob}. */
static void write_hyp(JsonBuf *b, const Hypothesis *y, int with_scores) {
    char *text = decode_output_text(g.bpe, y->tokens, y->len);
    if (with_scores) {
        jb_raw(b, "{\"text\": ");
        jb_string(b, text);
        jb_printf(b, ", \"score\": %.6f, \"logprob\": %.6f}", y->score, y->logprob);
    } else {
        jb_string(b, text);
    }
    free(text);
}

static enum MHD_Result handle_translate(struct MHD_Connection *conn, Req *r) {
    char msg[512];
    if (r->too_large)
        return respond_error(conn, r, 413, E_TOO_LARGE, 0, "the request body is larger than %zu bytes (--max-body-bytes)",
                             g.lim.max_body);
    /* invalid UTF-8 is its own error (JSON text is UTF-8, RFC 8259 section 8.1) */
    const unsigned char *s = (const unsigned char *)r->body;
    for (size_t i = 0; i < r->len;) {
        int32_t cp;
        int k = utf8_decode(s + i, r->len - i, &cp);
        if (k < 0)
            return respond_error(conn, r, 400, E_INVALID_UTF8, 0, "the body is not valid UTF-8: byte %zu (0x%02x)", i, s[i]);
        i += (size_t)k;
    }
    Json req;
    if (json_parse(r->body ? r->body : "", r->len, "body", &req) < 0)
        return respond_error(conn, r, 400, E_BAD_JSON, 0, "malformed JSON: %s", error_message());
    enum MHD_Result rc;
    int nlines = 0;
    ServeJob job = {0};
    int **src = NULL, *cap = NULL, *len = NULL;
    if (req.type != JSON_OBJECT) {
        rc = respond_error(conn, r, 400, E_BAD_REQUEST, 0, "the body must be a JSON object, got %s", json_type_name(req.type));
        goto done;
    }
    for (int i = 0; i < req.n; i++) {   /* unknown fields: an error, with the closest known name */
        int known = 0, best = 0, bestd = 1 << 30;
        for (int f = 0; f < NFIELDS; f++) {
            if (!strcmp(req.keys[i], FIELDS[f])) known = 1;
            int dist = edit_distance(req.keys[i], FIELDS[f]);
            if (dist < bestd) { bestd = dist; best = f; }
        }
        if (!known) {
            rc = respond_error(conn, r, 400, E_BAD_REQUEST, 0, "unknown field \"%s\"%s%s%s", req.keys[i],
                               bestd <= 2 ? " (did you mean \"" : "", bestd <= 2 ? FIELDS[best] : "", bestd <= 2 ? "\"?)" : "");
            goto done;
        }
        for (int k = 0; k < i; k++)
            if (!strcmp(req.keys[i], req.keys[k])) {
                rc = respond_error(conn, r, 400, E_BAD_REQUEST, 0, "field \"%s\" given twice", req.keys[i]);
                goto done;
            }
    }
    const Json *text = json_get(&req, "text");
    if (!text || text->type != JSON_ARRAY) {
        rc = respond_error(conn, r, 400, E_BAD_REQUEST, 0, "\"text\" must be an array of strings (one per line), got %s",
                           text ? json_type_name(text->type) : "nothing");
        goto done;
    }
    if (text->n > g.lim.max_lines) {
        rc = respond_error(conn, r, 413, E_TOO_LARGE, 0, "%d lines, more than %d (--max-lines)", text->n, g.lim.max_lines);
        goto done;
    }
    for (int i = 0; i < text->n; i++) {
        const Json *t = &text->items[i];
        if (t->type != JSON_STRING) {
            rc = respond_error(conn, r, 400, E_BAD_REQUEST, 0, "\"text\"[%d] must be a string, got %s", i, json_type_name(t->type));
            goto done;
        }
        size_t n = strlen(t->text);
        if (n > (size_t)g.lim.max_line_bytes) {
            rc = respond_error(conn, r, 413, E_TOO_LARGE, 0, "\"text\"[%d] has %zu bytes, more than %d (--max-line-bytes)", i, n,
                               g.lim.max_line_bytes);
            goto done;
        }
        if (memchr(t->text, '\n', n)) {
            rc = respond_error(conn, r, 400, E_BAD_REQUEST, 0, "\"text\"[%d] contains a newline: give one line per string", i);
            goto done;
        }
    }
    DecodeOptions o;
    int scores;
    if (request_options(&req, &o, &scores, msg, sizeof msg) < 0) {
        rc = respond_error(conn, r, 400, E_BAD_REQUEST, 0, "%s", msg);
        goto done;
    }
    /* encode, as translate does (long lines truncated to the model's positions, with a warning) */
    nlines = text->n;
    src = xcalloc((size_t)(nlines ? nlines : 1), sizeof *src);
    cap = xcalloc((size_t)(nlines ? nlines : 1), sizeof *cap);
    len = xcalloc((size_t)(nlines ? nlines : 1), sizeof *len);
    int warned = 0;
    long toks = 0;
    for (int i = 0; i < nlines; i++) {
        const char *line = text->items[i].text;
        len[i] = encode_source_line(g.bpe, g.m, line, strlen(line), i + 1, &src[i], &cap[i], &warned);
        if (len[i] < 0) {
            rc = respond_error(conn, r, 500, E_INTERNAL, 0, "encoding line %d: %s", i + 1, error_message());
            goto done;
        }
        toks += len[i];
    }
    job.o = o;
    job.n = nlines;
    job.src = src;
    job.src_len = len;
    int retry = 0, q = serve_submit(g.engine, &job, &retry);
    if (q == 1) {
        serve_job_free(&job);
        rc = respond_error(conn, r, 429, E_QUEUE_FULL, retry, "the queue is full (%d sentences, --max-queue): retry after %d s",
                           g.slim.max_queue, retry);
        goto done;
    }
    if (q == 2) {
        serve_job_free(&job);
        rc = respond_error(conn, r, 503, E_SHUTTING_DOWN, 0, "the server is shutting down");
        goto done;
    }
    pthread_mutex_lock(&g.mu);
    g.sentences += nlines;
    g.src_tokens += toks;
    pthread_mutex_unlock(&g.mu);
    serve_wait(g.engine, &job);
    if (job.failed) {
        rc = respond_error(conn, r, 500, E_INTERNAL, 0, "decoding failed: %s", job.error);
    } else {
        JsonBuf b = {0};
        jb_raw(&b, "{\"translations\": [");
        for (int i = 0; i < nlines; i++) {
            if (i) jb_raw(&b, ", ");
            if (o.nbest > 1) {
                jb_raw(&b, "[");
                for (int k = 0; k < job.out[i].n; k++) {
                    if (k) jb_raw(&b, ", ");
                    write_hyp(&b, &job.out[i].hyps[k], 1);
                }
                jb_raw(&b, "]");
            } else {
                write_hyp(&b, &job.out[i].hyps[0], scores);
            }
        }
        jb_raw(&b, "], \"model\": ");
        jb_string(&b, g.model_name);
        jb_printf(&b, ", \"time_ms\": %.3f}\n", (now_seconds() - r->t0) * 1e3);
        rc = respond(conn, r, 200, "application/json", b.s, 0);
    }
    for (int i = 0; i < nlines; i++) nbest_free(&job.out[i]);
    serve_job_free(&job);
done:
    for (int i = 0; i < nlines; i++) free(src[i]);
    free(src); free(cap); free(len);
    json_free(&req);
    return rc;
}

/* ---- GET /health, /info, /metrics ---------------------------------------- */

static enum MHD_Result handle_health(struct MHD_Connection *conn, Req *r) {
    int d = atomic_load(&g.draining);
    return respond(conn, r, d ? 503 : 200, "application/json",
                   xstrdup(d ? "{\"status\": \"draining\"}\n" : "{\"status\": \"ready\"}\n"), 0);
}

static enum MHD_Result handle_info(struct MHD_Connection *conn, Req *r) {
    const ModelDims *d = &g.m->dims;
    JsonBuf b = {0};
    jb_raw(&b, "{\"version\": \"" TFM_VERSION "\", \"models\": [");
    for (int i = 0; i < g.nmodels; i++) {
        if (i) jb_raw(&b, ", ");
        jb_string(&b, g.model_path[i]);
    }
    jb_printf(&b, "], \"model\": {\"vocab\": %d, \"d_model\": %d, \"d_ff\": %d, \"heads\": %d, \"encoder_layers\": %d, "
              "\"decoder_layers\": %d, \"max_positions\": %d, \"norm\": \"%s\", \"parameters\": %zu}",
              d->vocab, d->d_model, d->d_ff, d->heads, d->enc_layers, d->dec_layers, d->max_positions,
              d->pre_norm ? "pre" : "post", g.m->num_params);
    char *ini = config_to_string(g.c);
    jb_raw(&b, ", \"config\": ");
    jb_string(&b, ini);
    free(ini);
    jb_printf(&b, ", \"precision\": \"%s\"", precision_name(g.m->int8 ? PREC_INT8 : g.m->bf16 ? PREC_BF16 : PREC_FP32));
    if (g.m->bf16) { jb_raw(&b, ", \"bf16_kernel\": "); jb_string(&b, bf16_decode_mode()); }
    if (g.m->int8) { jb_raw(&b, ", \"int8_kernel\": "); jb_string(&b, int8_mode()); }
    jb_raw(&b, ", \"blis_kernels\": ");
    jb_string(&b, blis_kernels());
    const DecodeOptions *o = &g.defaults;
    jb_printf(&b, ", \"threads\": %d, \"decode\": {\"beam\": %d, \"alpha\": %g, \"max_len_a\": %g, \"max_len_b\": %d, "
              "\"sample\": %s, \"temperature\": %g, \"topk\": %d, \"seed\": %llu, \"batch_size\": %d}",
              threads_count(), o->beam, o->alpha, o->max_len_a, o->max_len_b, o->sample ? "true" : "false",
              o->temperature, o->topk, o->seed, o->batch_size);
    jb_printf(&b, ", \"limits\": {\"max_batch_tokens\": %d, \"max_delay_ms\": %g, \"max_queue\": %d, \"max_lines\": %d, "
              "\"max_line_bytes\": %d, \"max_body_bytes\": %zu, \"max_connections\": %d, \"timeout_s\": %d}}\n",
              g.slim.max_batch_tokens, g.slim.max_delay * 1e3, g.slim.max_queue, g.lim.max_lines, g.lim.max_line_bytes,
              g.lim.max_body, g.max_connections, g.lim.timeout);
    return respond(conn, r, 200, "application/json", b.s, 0);
}

static enum MHD_Result handle_metrics(struct MHD_Connection *conn, Req *r) {
    ServeStats st;
    serve_stats(g.engine, &st);
    JsonBuf b = {0};   /* (a plain text buffer here) */
    pthread_mutex_lock(&g.mu);
    jb_raw(&b, "# HELP tfm_requests_total HTTP requests answered, by endpoint and status code.\n"
               "# TYPE tfm_requests_total counter\n");
    for (int e = 0; e < NEP; e++)
        for (int c = 0; c < NCODES; c++)
            if (g.requests[e][c] || (e == EP_TRANSLATE && c == 0))
                jb_printf(&b, "tfm_requests_total{endpoint=\"%s\",code=\"%d\"} %ld\n", EP_NAME[e], CODES[c], g.requests[e][c]);
    jb_raw(&b, "# HELP tfm_errors_total Requests refused or failed, by kind.\n# TYPE tfm_errors_total counter\n");
    for (int k = 0; k < NERR; k++) jb_printf(&b, "tfm_errors_total{kind=\"%s\"} %ld\n", ERR_NAME[k], g.errors[k]);
    jb_printf(&b, "# HELP tfm_sentences_total Sentences accepted into the queue.\n# TYPE tfm_sentences_total counter\n"
              "tfm_sentences_total %ld\n", g.sentences);
    jb_printf(&b, "# HELP tfm_source_tokens_total BPE tokens of the sentences accepted.\n"
              "# TYPE tfm_source_tokens_total counter\ntfm_source_tokens_total %ld\n", g.src_tokens);
    jb_printf(&b, "# HELP tfm_translated_sentences_total Sentences decoded.\n# TYPE tfm_translated_sentences_total counter\n"
              "tfm_translated_sentences_total %ld\n", st.sentences);
    jb_printf(&b, "# HELP tfm_output_tokens_total BPE tokens of the best translations (EOS excluded).\n"
              "# TYPE tfm_output_tokens_total counter\ntfm_output_tokens_total %ld\n", st.out_tokens);
    jb_printf(&b, "# HELP tfm_batches_total Engine calls (sentences decoded together).\n# TYPE tfm_batches_total counter\n"
              "tfm_batches_total %ld\n", st.batches);
    jb_printf(&b, "# HELP tfm_engine_busy_seconds_total Time the engine spent decoding.\n"
              "# TYPE tfm_engine_busy_seconds_total counter\ntfm_engine_busy_seconds_total %.6f\n", st.busy_seconds);
    jb_printf(&b, "# HELP tfm_queue_sentences Sentences queued or being decoded.\n# TYPE tfm_queue_sentences gauge\n"
              "tfm_queue_sentences %ld\n", st.queued_sentences);
    jb_printf(&b, "# HELP tfm_queue_requests Requests waiting for their translations.\n# TYPE tfm_queue_requests gauge\n"
              "tfm_queue_requests %ld\n", st.queued_jobs);
    jb_raw(&b, "# HELP tfm_request_duration_seconds Latency of successful POST /translate requests.\n"
               "# TYPE tfm_request_duration_seconds histogram\n");
    long cum = 0;
    for (int i = 0; i < NBUCKETS; i++) {
        cum += g.hist[i];
        jb_printf(&b, "tfm_request_duration_seconds_bucket{le=\"%g\"} %ld\n", BUCKETS[i], cum);
    }
    cum += g.hist[NBUCKETS];
    jb_printf(&b, "tfm_request_duration_seconds_bucket{le=\"+Inf\"} %ld\n", cum);
    jb_printf(&b, "tfm_request_duration_seconds_sum %.6f\ntfm_request_duration_seconds_count %ld\n", g.hist_sum, g.hist_count);
    jb_printf(&b, "# HELP tfm_uptime_seconds Seconds since the server started.\n# TYPE tfm_uptime_seconds gauge\n"
              "tfm_uptime_seconds %.3f\n", now_seconds() - g.t_start);
    pthread_mutex_unlock(&g.mu);
    return respond(conn, r, 200, "text/plain; version=0.0.4; charset=utf-8", b.s, 0);
}

/* ---- libmicrohttpd callbacks --------------------------------------------- */

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url, const char *method,
                                  const char *version, const char *upload_data, size_t *upload_size, void **con_cls) {
    (void)cls; (void)version;
    Req *r = *con_cls;
    if (!r) {   /* the first call: headers only */
        r = xcalloc(1, sizeof *r);
        r->t0 = now_seconds();
        r->endpoint = !strcmp(url, "/translate") ? EP_TRANSLATE : !strcmp(url, "/health") ? EP_HEALTH
                    : !strcmp(url, "/info") ? EP_INFO : !strcmp(url, "/metrics") ? EP_METRICS : EP_OTHER;
        *con_cls = r;
        pthread_mutex_lock(&g.mu);
        g.active++;
        pthread_mutex_unlock(&g.mu);
        if (r->endpoint == EP_OTHER)
            return respond_error(conn, r, 404, E_NOT_FOUND, 0, "no such endpoint: %s (POST /translate, GET /health, /info, /metrics)", url);
        int post = !strcmp(method, "POST"), get = !strcmp(method, "GET");
        if (r->endpoint == EP_TRANSLATE ? !post : !get)
            return respond_error(conn, r, 405, E_METHOD, 0, "%s %s: use %s", method, url, r->endpoint == EP_TRANSLATE ? "POST" : "GET");
        if (atomic_load(&g.draining) && r->endpoint == EP_TRANSLATE)
            return respond_error(conn, r, 503, E_SHUTTING_DOWN, 0, "the server is shutting down");
        if (r->endpoint == EP_TRANSLATE) {   /* refuse a declared oversized body before reading it */
            const char *cl = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
            if (cl && strtoull(cl, NULL, 10) > g.lim.max_body) {
                r->too_large = 1;
                return handle_translate(conn, r);
            }
        }
        return MHD_YES;
    }
    if (r->answered) { *upload_size = 0; return MHD_YES; }   /* discard the rest of a refused body */
    if (*upload_size) {
        size_t n = *upload_size;
        *upload_size = 0;
        if (r->too_large || r->len + n > g.lim.max_body) { r->too_large = 1; return MHD_YES; }
        if (r->len + n + 1 > r->cap) { r->cap = (r->len + n + 1) * 2; r->body = xrealloc(r->body, r->cap); }
        memcpy(r->body + r->len, upload_data, n);
        r->len += n;
        r->body[r->len] = 0;
        return MHD_YES;
    }
    switch (r->endpoint) {
    case EP_TRANSLATE: return handle_translate(conn, r);
    case EP_HEALTH: return handle_health(conn, r);
    case EP_INFO: return handle_info(conn, r);
    default: return handle_metrics(conn, r);
    }
}

static void on_completed(void *cls, struct MHD_Connection *conn, void **con_cls, enum MHD_RequestTerminationCode toe) {
    (void)cls; (void)conn;
    Req *r = *con_cls;
    if (!r) return;
    pthread_mutex_lock(&g.mu);
    if (toe == MHD_REQUEST_TERMINATED_TIMEOUT_REACHED) g.errors[E_TIMEOUT]++;
    else if (toe == MHD_REQUEST_TERMINATED_CLIENT_ABORT || toe == MHD_REQUEST_TERMINATED_READ_ERROR) g.errors[E_CLIENT_GONE]++;
    g.active--;
    pthread_cond_broadcast(&g.idle);
    pthread_mutex_unlock(&g.mu);
    free(r->body);
    free(r);
    *con_cls = NULL;
}

/* ---- the listening socket, signals -------------------------------------- */

/* A listening TCP socket on host:port; -1 + errorf. *bound: the port. */
static int listen_on(const char *host, int port, int *bound) {
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE | AI_NUMERICSERV};
    struct addrinfo *res;
    char ps[16];
    snprintf(ps, sizeof ps, "%d", port);
    int e = getaddrinfo(host, ps, &hints, &res);
    if (e) return errorf("--host %s: %s", host, gai_strerror(e));
    int fd = -1, err = 0;
    for (struct addrinfo *a = res; a && fd < 0; a = a->ai_next) {
        fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
        if (fd < 0) { err = errno; continue; }
        int one = 1;
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        if (bind(fd, a->ai_addr, a->ai_addrlen) < 0 || listen(fd, 128) < 0) { err = errno; close(fd); fd = -1; }
    }
    freeaddrinfo(res);
    if (fd < 0) return errorf("cannot listen on %s port %d: %s", host, port, strerror(err));
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    *bound = port;
    if (getsockname(fd, (struct sockaddr *)&ss, &sl) == 0)
        *bound = ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port : ((struct sockaddr_in *)&ss)->sin_port);
    return fd;
}

static sigset_t g_sigs;
static atomic_int g_finished;

/* Waits for SIGINT/SIGTERM (blocked in every thread): the first starts the
 * drain; returns when the main thread says it is finished. */
static void *signal_thread(void *arg) {
    (void)arg;
    int stopping = 0;
    while (!atomic_load(&g_finished)) {
        struct timespec ts = {0, 100 * 1000 * 1000};
        int sig = sigtimedwait(&g_sigs, NULL, &ts);
        if (sig < 0) continue;
        if (stopping) { log_info("serve: %s again: still finishing the requests in flight", sig == SIGINT ? "SIGINT" : "SIGTERM"); continue; }
        stopping = 1;
        log_info("serve: %s: no new connections; finishing the requests in flight", sig == SIGINT ? "SIGINT" : "SIGTERM");
        atomic_store(&g.draining, 1);
        MHD_socket lfd = MHD_quiesce_daemon(g.daemon);
        if (lfd != MHD_INVALID_SOCKET) close(lfd);
        serve_stop(g.engine);
    }
    return NULL;
}

/* ---- the command ---------------------------------------------------------- */

static int opt_pos(const char *name, const char *v, int max) { return opt_int("serve", name, v, 1, max); }

int cmd_serve(int argc, char **argv) {
    const char **model_path = xmalloc((size_t)argc * sizeof *model_path), *host = "127.0.0.1";
    int nmodels = 0, port = 8080, ended = 0;
    decode_args_init(&g.da);
    g.lim = (Limits){.max_lines = 256, .max_line_bytes = 4096, .timeout = 30, .max_body = 1 << 20};
    g.slim = (ServeLimits){.max_batch_tokens = 4096, .max_delay = 0.010, .max_queue = 4096};
    g.max_connections = 256;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v;
        int kind = opt_kind(a, &ended);
        if (kind == 2) continue;
        if (kind == 1) usage_error("serve", "unexpected argument '%s'", a);
        if (is_help(a)) { serve_usage(stdout); free(model_path); return 0; }
        else if (opt_values(argc, argv, &i, "-m|--model", &v)) model_path[nmodels++] = v;
        else if (opt_value(argc, argv, &i, "--host", &v)) host = v;
        else if (opt_value(argc, argv, &i, "--port", &v)) {
            port = opt_int("serve", "--port", v, 0, 65535);
        } else if (opt_value(argc, argv, &i, "--max-batch-tokens", &v)) g.slim.max_batch_tokens = opt_pos("--max-batch-tokens", v, 1 << 24);
        else if (opt_value(argc, argv, &i, "--max-delay-ms", &v)) {
            g.slim.max_delay = opt_double("serve", "--max-delay-ms", v, 0, 60000) / 1e3;
        } else if (opt_value(argc, argv, &i, "--max-queue", &v)) g.slim.max_queue = opt_pos("--max-queue", v, 1 << 24);
        else if (opt_value(argc, argv, &i, "--max-lines", &v)) g.lim.max_lines = opt_pos("--max-lines", v, 1 << 20);
        else if (opt_value(argc, argv, &i, "--max-line-bytes", &v)) g.lim.max_line_bytes = opt_pos("--max-line-bytes", v, 1 << 24);
        else if (opt_value(argc, argv, &i, "--max-body-bytes", &v)) g.lim.max_body = (size_t)opt_pos("--max-body-bytes", v, 1 << 30);
        else if (opt_value(argc, argv, &i, "--max-connections", &v)) g.max_connections = opt_pos("--max-connections", v, 65536);
        else if (opt_value(argc, argv, &i, "--timeout", &v)) g.lim.timeout = opt_pos("--timeout", v, 86400);
        else if (decode_args_parse(&g.da, "serve", argc, argv, &i)) continue;
        else if (opt_flag(argv, i, "-q|--quiet")) log_quiet = 1;
        else opt_unknown("serve", argv, i);
    }
    if (!nmodels) usage_error("serve", "a model is required (-m MODEL; -m A -m B ... for an ensemble)");
    decode_args_check(&g.da, "serve");
    if (g.lim.max_lines > g.slim.max_queue)
        usage_error("serve", "--max-lines %d is larger than --max-queue %d: such a request could never be queued",
                    g.lim.max_lines, g.slim.max_queue);

    /* The models first: a file that cannot load is an error before the port opens. */
    Config c = {0};
    Bpe *bpe = NULL;
    Model *m = xmalloc((size_t)nmodels * sizeof *m);
    const Model **mp = xmalloc((size_t)nmodels * sizeof *mp);
    cli_load_models(model_path, nmodels, &c, &bpe, m);
    Shortlist *slist = cli_shortlist_load(&g.da, bpe);
    decode_args_options(&g.da, &c, &g.defaults);
    g.defaults.nbest = 1;
    g.slim.batch_size = g.defaults.batch_size;
    /* Signals: blocked here, before any thread starts, so that every thread
     * inherits the mask and only signal_thread receives them. */
    sigemptyset(&g_sigs);
    sigaddset(&g_sigs, SIGINT);
    sigaddset(&g_sigs, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &g_sigs, NULL);
    signal(SIGPIPE, SIG_IGN);
    /* --threads, else all cores (-1, unset): the model's [run] threads are its training host's */
    if (threads_init(g.da.threads)) die_error();
    for (int k = 0; k < nmodels; k++) {
        model_set_precision(&m[k], g.da.precision >= 0 ? g.da.precision : c.bf16);
        mp[k] = &m[k];
    }
    Translator *tr = translator_new_ensemble(mp, nmodels, 1);
    if (!tr) die_error();
    cli_shortlist_attach(tr, slist, &g.da);
    if (translator_owns_weights(tr))   /* packed or int8: it holds its own copies; the fp32 weights can go (as translate) */
        for (int k = 0; k < nmodels; k++) model_release_params(&m[k]);
    g.m = &m[0];
    g.nmodels = nmodels;
    g.model_path = model_path;
    g.c = &c;
    g.bpe = bpe;
    size_t off = 0;
    for (int k = 0; k < nmodels && off < sizeof g.model_name; k++)
        off += (size_t)snprintf(g.model_name + off, sizeof g.model_name - off, "%s%s", k ? " + " : "", model_path[k]);
    g.engine = serve_engine_new(tr, &g.slim);
    g.t_start = now_seconds();

    int bound = 0;
    int lfd = listen_on(host, port, &bound);
    if (lfd < 0) die_error();
    g.daemon = MHD_start_daemon(MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ITC |
                                MHD_USE_POLL | MHD_USE_ERROR_LOG,
                                0, NULL, NULL, on_request, NULL,
                                MHD_OPTION_LISTEN_SOCKET, (MHD_socket)lfd,
                                MHD_OPTION_CONNECTION_LIMIT, (unsigned)g.max_connections,
                                MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)g.lim.timeout,
                                MHD_OPTION_NOTIFY_COMPLETED, on_completed, NULL,
                                MHD_OPTION_END);
    if (!g.daemon) die("cannot start the HTTP server on %s port %d (libmicrohttpd)", host, bound);
    pthread_t st;
    if (pthread_create(&st, NULL, signal_thread, NULL)) die("cannot start the signal thread");
    char how[128];
    if (g.defaults.sample) snprintf(how, sizeof how, "sampling (temperature %g, top-k %d)", g.defaults.temperature, g.defaults.topk);
    else snprintf(how, sizeof how, "beam %d, alpha %g", g.defaults.beam, g.defaults.alpha);
    log_info("serve: %s%s (d_model %d, %d+%d layers, vocab %d), %s by default, batches of <= %d source tokens "
             "(wait <= %g ms), queue <= %d sentences, %d threads%s%s",
             model_path[0], nmodels > 1 ? " and more: an ensemble" : "", m[0].dims.d_model, m[0].dims.enc_layers,
             m[0].dims.dec_layers, m[0].dims.vocab, how, g.slim.max_batch_tokens, g.slim.max_delay * 1e3,
             g.slim.max_queue, threads_count(), m[0].bf16 ? ", bf16 products: " : m[0].int8 ? ", int8 products: " : "",
             m[0].bf16 ? bf16_decode_mode() : m[0].int8 ? int8_mode() : "");
    /* always printed (scripts wait for it, and read the port when --port 0) */
    fprintf(stderr, "tfm: serve: listening on http://%s%s%s:%d\n", strchr(host, ':') ? "[" : "", host,
            strchr(host, ':') ? "]" : "", bound);

    serve_run(g.engine);   /* returns once a signal stopped it and the queue is empty */

    /* the answers of the last jobs are still being written: wait for them (bounded) */
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += g.lim.timeout + 5;
    pthread_mutex_lock(&g.mu);
    while (g.active > 0)
        if (pthread_cond_timedwait(&g.idle, &g.mu, &ts) == ETIMEDOUT) break;
    long left = g.active, done = 0;
    for (int k = 0; k < NCODES; k++) done += g.requests[EP_TRANSLATE][k];
    pthread_mutex_unlock(&g.mu);
    MHD_stop_daemon(g.daemon);
    atomic_store(&g_finished, 1);
    pthread_join(st, NULL);
    ServeStats s;
    serve_stats(g.engine, &s);
    log_info("serve: stopped after %ld translate requests, %ld sentences in %ld batches%s", done, s.sentences, s.batches,
             left ? " (some connections were still open: closed)" : "");
    serve_engine_free(g.engine);
    translator_free(tr);
    for (int k = 0; k < nmodels; k++) model_free(&m[k]);
    free(m); free(mp); free(model_path);
    bpe_free(bpe);
    config_free(&c);
    return 0;
}
