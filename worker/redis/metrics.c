/* metrics.c: Prometheus text exposition of the worker (see metrics.h).
 *
 * Histograms are fixed arrays of cumulative-at-render counters; buckets
 * reach down to milliseconds because the CPU backend on a tiny model answers
 * that fast, and up to minutes for long generations on big models. */
#include "worker/redis/metrics.h"

#include <microhttpd.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define METRICS_MAX_BUCKETS 24
#define METRICS_MAX_CODES 12

typedef struct rlHistogram {
    const char *name, *help;
    const double *le;
    int n_le;
    unsigned long long counts[METRICS_MAX_BUCKETS + 1]; /* per bucket, last = +Inf */
    double sum;
    unsigned long long count;
} rlHistogram;

static const double metrics_ttft_le[] = {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5,
                                         0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0};
static const double metrics_tpot_le[] = {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.075,
                                         0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5};
static const double metrics_e2e_le[] = {0.01, 0.05, 0.1, 0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0,
                                        10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0};

struct rlMetrics {
    pthread_mutex_t mu;
    struct MHD_Daemon *httpd;
    rlEngineStats st;
    size_t backlog_bytes, backlog_items;
    unsigned long write_errors;
    int held;                       /* Redis refuses the worker's writes */
    unsigned long long finished[4];              /* by rlFinish */
    char codes[METRICS_MAX_CODES][32];
    unsigned long long code_counts[METRICS_MAX_CODES];
    rlHistogram ttft, tpot, e2e;
    char quantization[64];
};

static void metrics_hist_init(rlHistogram *h, const char *name, const char *help, const double *le,
                              int n) {
    memset(h, 0, sizeof(*h));
    h->name = name, h->help = help, h->le = le, h->n_le = n;
}

rlMetrics *metrics_create(const char *quantization) {
    rlMetrics *m = calloc(1, sizeof(*m));
    if (!m) return NULL;
    pthread_mutex_init(&m->mu, NULL);
    if (quantization) metrics_set_quantization(m, quantization);
#define N(a) (int)(sizeof(a) / sizeof(a[0]))
    metrics_hist_init(&m->ttft, "redlm:time_to_first_token_seconds",
                      "Time from arrival to the first generated token.", metrics_ttft_le, N(metrics_ttft_le));
    metrics_hist_init(&m->tpot, "redlm:time_per_output_token_seconds",
                      "Mean time between generated tokens of a sample.", metrics_tpot_le, N(metrics_tpot_le));
    metrics_hist_init(&m->e2e, "redlm:e2e_request_latency_seconds",
                      "Time from arrival to the done event.", metrics_e2e_le, N(metrics_e2e_le));
#undef N
    return m;
}

void metrics_free(rlMetrics *m) {
    if (!m) return;
    if (m->httpd) MHD_stop_daemon(m->httpd);
    pthread_mutex_destroy(&m->mu);
    free(m);
}

void metrics_set_quantization(rlMetrics *m, const char *quantization) {
    pthread_mutex_lock(&m->mu);
    snprintf(m->quantization, sizeof(m->quantization), "%s", quantization);
    pthread_mutex_unlock(&m->mu);
}

static void metrics_hist_observe(rlHistogram *h, double v) {
    int b = 0;
    while (b < h->n_le && v > h->le[b]) b++;
    h->counts[b]++;
    h->sum += v;
    h->count++;
}

void metrics_set_engine(rlMetrics *m, const rlEngineStats *st) {
    pthread_mutex_lock(&m->mu);
    m->st = *st;
    pthread_mutex_unlock(&m->mu);
}

void metrics_set_writer(rlMetrics *m, size_t bytes, size_t items, unsigned long errors) {
    pthread_mutex_lock(&m->mu);
    m->backlog_bytes = bytes, m->backlog_items = items, m->write_errors = errors;
    pthread_mutex_unlock(&m->mu);
}

void metrics_set_held(rlMetrics *m, int held) {
    pthread_mutex_lock(&m->mu);
    m->held = held;
    pthread_mutex_unlock(&m->mu);
}

void metrics_observe_done(rlMetrics *m, rlFinish finish, double ttft, double tpot, double e2e) {
    pthread_mutex_lock(&m->mu);
    if (finish >= 0 && finish < 4) m->finished[finish]++;
    if (ttft >= 0) metrics_hist_observe(&m->ttft, ttft);
    if (tpot >= 0) metrics_hist_observe(&m->tpot, tpot);
    metrics_hist_observe(&m->e2e, e2e);
    pthread_mutex_unlock(&m->mu);
}

void metrics_count_error(rlMetrics *m, const char *code) {
    pthread_mutex_lock(&m->mu);
    int i = 0;
    while (i < METRICS_MAX_CODES && m->codes[i][0] && strcmp(m->codes[i], code)) i++;
    if (i == METRICS_MAX_CODES) i--; /* PROTOCOL.md has fewer codes: never reached */
    if (!m->codes[i][0]) snprintf(m->codes[i], sizeof(m->codes[i]), "%s", code);
    m->code_counts[i]++;
    pthread_mutex_unlock(&m->mu);
}

typedef struct rlText {
    char *buf;
    size_t len, cap;
} rlText;

static void __attribute__((format(printf, 2, 3))) metrics_printf(rlText *t, const char *fmt, ...) {
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(t->buf ? t->buf + t->len : NULL, t->buf ? t->cap - t->len : 0, fmt, ap);
        va_end(ap);
        if (n < 0) return;
        if (t->buf && t->len + (size_t)n < t->cap) {
            t->len += (size_t)n;
            return;
        }
        size_t cap = (t->cap + (size_t)n + 1) * 2;
        char *nb = realloc(t->buf, cap);
        if (!nb) return;
        t->buf = nb, t->cap = cap;
    }
}

static void metrics_gauge(rlText *t, const char *name, const char *type, const char *help, double v) {
    metrics_printf(t, "# HELP %s %s\n# TYPE %s %s\n%s %.17g\n", name, help, name, type, name, v);
}

static void metrics_hist_render(rlText *t, const rlHistogram *h) {
    metrics_printf(t, "# HELP %s %s\n# TYPE %s histogram\n", h->name, h->help, h->name);
    unsigned long long cum = 0;
    for (int b = 0; b < h->n_le; b++) {
        cum += h->counts[b];
        metrics_printf(t, "%s_bucket{le=\"%g\"} %llu\n", h->name, h->le[b], cum);
    }
    metrics_printf(t, "%s_bucket{le=\"+Inf\"} %llu\n%s_sum %.17g\n%s_count %llu\n", h->name, h->count,
                   h->name, h->sum, h->name, h->count);
}

char *metrics_render(rlMetrics *m) {
    rlText t = {0};
    pthread_mutex_lock(&m->mu);
    const rlEngineStats *s = &m->st;
    if (m->quantization[0]) /* the model is loaded */
        metrics_printf(&t, "# HELP redlm:model_info How the model's weights are stored.\n"
                           "# TYPE redlm:model_info gauge\nredlm:model_info{quantization=\"%s\"} 1\n",
                       m->quantization);
    metrics_gauge(&t, "redlm:num_requests_running", "gauge", "Requests running on the engine.", s->running);
    metrics_gauge(&t, "redlm:num_requests_waiting", "gauge", "Requests waiting to start.", s->waiting);
    metrics_gauge(&t, "redlm:num_preemptions_total", "counter",
                  "Preemptions (a request's KV blocks freed, to be recomputed).", s->preempted);
    metrics_gauge(&t, "redlm:kv_cache_usage_perc", "gauge", "Fraction of KV blocks in use (0..1).",
                  s->kv_blocks_total ? (double)s->kv_blocks_used / s->kv_blocks_total : 0.0);
    metrics_gauge(&t, "redlm:kv_blocks_used", "gauge", "KV blocks in use.", s->kv_blocks_used);
    metrics_gauge(&t, "redlm:kv_blocks_cached", "gauge", "Free KV blocks kept for the prefix cache.",
                  s->kv_blocks_cached);
    metrics_gauge(&t, "redlm:kv_blocks_total", "gauge", "KV blocks in the pool.", s->kv_blocks_total);
    metrics_gauge(&t, "redlm:prefix_cache_queries_total", "counter",
                  "Prompt tokens looked up in the prefix cache.", (double)s->prefix_query_tokens);
    metrics_gauge(&t, "redlm:prefix_cache_hits_total", "counter",
                  "Prompt tokens found in the prefix cache.", (double)s->prefix_hit_tokens);
    metrics_gauge(&t, "redlm:prompt_tokens_total", "counter", "Prompt tokens processed.",
                  (double)s->prompt_tokens);
    metrics_gauge(&t, "redlm:generation_tokens_total", "counter", "Tokens generated.",
                  (double)s->generation_tokens);
    metrics_gauge(&t, "redlm:reply_backlog_bytes", "gauge",
                  "Reply events, dead letters and acks not yet stored in Redis, in bytes.",
                  (double)m->backlog_bytes);
    metrics_gauge(&t, "redlm:writes_held", "gauge",
                  "1 while Redis refuses this worker's writes (an ACL leaves out its keys): it reads, "
                  "answers and acknowledges no job until they are allowed.",
                  (double)m->held);
    metrics_gauge(&t, "redlm:reply_write_errors_total", "counter",
                  "Writes Redis refused: a reply key of another type or one the user may not "
                  "write (the job gets a dead letter), out of memory, a dead letter or a worker key "
                  "the user may not write (sent again later), ...",
                  (double)m->write_errors);
    static const char *reasons[4] = {"none", "stop", "length", "abort"};
    metrics_printf(&t, "# HELP redlm:request_success_total Samples finished, by finish reason.\n"
                       "# TYPE redlm:request_success_total counter\n");
    for (int i = 1; i < 4; i++)
        metrics_printf(&t, "redlm:request_success_total{finished_reason=\"%s\"} %llu\n", reasons[i],
                       m->finished[i]);
    metrics_printf(&t, "# HELP redlm:request_errors_total Jobs answered with an error event, by code.\n"
                       "# TYPE redlm:request_errors_total counter\n");
    for (int i = 0; i < METRICS_MAX_CODES && m->codes[i][0]; i++)
        metrics_printf(&t, "redlm:request_errors_total{code=\"%s\"} %llu\n", m->codes[i], m->code_counts[i]);
    metrics_hist_render(&t, &m->ttft);
    metrics_hist_render(&t, &m->tpot);
    metrics_hist_render(&t, &m->e2e);
    pthread_mutex_unlock(&m->mu);
    return t.buf;
}

static enum MHD_Result metrics_on_request(void *cls, struct MHD_Connection *conn, const char *url,
                                          const char *method, const char *version,
                                          const char *upload_data, size_t *upload_size, void **con_cls) {
    (void)version, (void)upload_data, (void)upload_size, (void)con_cls;
    rlMetrics *m = cls;
    struct MHD_Response *resp;
    unsigned status = MHD_HTTP_OK;
    if (strcmp(url, "/metrics") && strcmp(url, "/")) {
        static const char nf[] = "not found: try GET /metrics\n";
        resp = MHD_create_response_from_buffer(sizeof(nf) - 1, (void *)nf, MHD_RESPMEM_PERSISTENT);
        status = MHD_HTTP_NOT_FOUND;
    } else if (strcmp(method, "GET") && strcmp(method, "HEAD")) {
        /* HEAD is GET without the body (libmicrohttpd leaves it out) */
        static const char na[] = "method not allowed: try GET /metrics\n";
        resp = MHD_create_response_from_buffer(sizeof(na) - 1, (void *)na, MHD_RESPMEM_PERSISTENT);
        if (resp) MHD_add_response_header(resp, "Allow", "GET, HEAD");
        status = MHD_HTTP_METHOD_NOT_ALLOWED;
    } else {
        char *text = metrics_render(m);
        if (!text) return MHD_NO;
        resp = MHD_create_response_from_buffer(strlen(text), text, MHD_RESPMEM_MUST_FREE);
        if (!resp) free(text);
        else MHD_add_response_header(resp, "Content-Type", "text/plain; version=0.0.4");
    }
    if (!resp) return MHD_NO;
    enum MHD_Result r = MHD_queue_response(conn, status, resp);
    MHD_destroy_response(resp);
    return r;
}

/* Whatever HTTP clients do, they cannot take the worker's file descriptors
 * (its Redis reconnects need some) nor hold a connection that sends nothing:
 * a scraper needs one connection for a few milliseconds.  Clients' bad
 * requests are answered, not logged: the worker's log is the operator's. */
int metrics_serve(rlMetrics *m, int port, rlError *err) {
    m->httpd = MHD_start_daemon(MHD_USE_AUTO_INTERNAL_THREAD, (uint16_t)port, NULL, NULL, metrics_on_request,
                                m, MHD_OPTION_CONNECTION_LIMIT, (unsigned)METRICS_MAX_CONNECTIONS,
                                MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)METRICS_IDLE_S, MHD_OPTION_END);
    if (!m->httpd)
        return rl_error(err, RL_EUSAGE, "cannot serve metrics on port %d (in use, or not allowed); "
                                        "pick another --metrics-port", port);
    return 0;
}
