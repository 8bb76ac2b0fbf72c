/* cmd_worker.c: `redlm worker`: options, the engine, then serve.c's loop. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "worker/commands.h"
#include "worker/engine/engine_flags.h"
#include "worker/lib/flags.h"
#include "worker/lib/interrupt.h"
#include "worker/redis/metrics.h"
#include "worker/redis/serve.h"

/* The worker's own streams must be distinct: a dead-letter stream that is
 * the job stream reads every dead letter back as a job, for ever. */
static int worker_check_keys(const rlKeys *k) {
    const char *names[] = {"--stream", "--dead", "--cancel", "--stream's :running hash"};
    const char *keys[] = {k->stream, k->dead, k->cancel, k->running};
    for (int i = 0; i < 4; i++)
        for (int j = i + 1; j < 4; j++)
            if (!strcmp(keys[i], keys[j])) {
                fprintf(stderr, "redlm worker: %s and %s are both '%s'; give each its own key (defaults: "
                        "redlm:jobs, redlm:dead, redlm:cancel)\n", names[i], names[j], keys[i]);
                return -1;
            }
    size_t pl = strlen(k->reply_prefix);
    if (!pl) {
        fprintf(stderr, "redlm worker: --reply-prefix is empty: every key would be a reply stream; use "
                "e.g. redlm:reply:\n");
        return -1;
    }
    for (int i = 0; i < 3; i++)
        if (!strncmp(keys[i], k->reply_prefix, pl)) {
            fprintf(stderr, "redlm worker: %s '%s' is under --reply-prefix '%s'; keep reply streams apart "
                    "from the worker's own\n", names[i], keys[i], k->reply_prefix);
            return -1;
        }
    return 0;
}

int cmd_worker(int argc, char **argv) {
    rlEngineFlags flags;
    engine_flags_init(&flags);
    rlEngineOptions *eo = &flags.o;
    rlServeOptions so;
    serve_options_init(&so);
    const char *url = NULL;
    int redis_wait = 10, metrics_port = 0;
    char consumer[300], running[512];
    rlError err = {0};
    long long reply_ttl = so.keys.reply_ttl, dead_maxlen = so.keys.dead_maxlen, jobs_maxlen = 0;
    eo->stream_interval = 8;
    rlFlags fs;
    flags_init(&fs, "worker",
               "usage: redlm worker --model DIR --redis redis://[user:pass@]host:port[/db] "
               "[options]\n");
    flags_section(&fs, "Redis:");
    flags_string(&fs, "--redis", &url, "URL", "redis://[user:pass@]host:port[/db]")->required = 1;
    flags_string(&fs, "--stream", &so.keys.stream, "KEY", "job stream (default redlm:jobs)");
    flags_string(&fs, "--group", &so.keys.group, "NAME", "consumer group (default redlm)");
    flags_string(&fs, "--consumer", &so.keys.consumer, "NAME",
                 "this instance's name (default host:pid)");
    flags_string(&fs, "--dead", &so.keys.dead, "KEY", "dead-letter stream (default redlm:dead)");
    flags_string(&fs, "--cancel", &so.keys.cancel, "KEY", "cancel stream (default redlm:cancel)");
    flags_int(&fs, "--claim-idle-ms", &so.claim_idle_ms, 10, 1 << 30, "N",
              "take over others' jobs idle this long (default 30000)");
    flags_int(&fs, "--max-deliveries", &so.max_deliveries, 1, 1000000, "N",
              "give up on a job delivered more often (default 3)");
    flags_string(&fs, "--reply-prefix", &so.keys.reply_prefix, "P",
                 "every reply stream is under P (default redlm:reply:)");
    flags_int(&fs, "--stream-interval", &eo->stream_interval, 1, 1000000, "N",
              "tokens per chunk event (default 8)");
    flags_long(&fs, "--reply-ttl", &reply_ttl, 0, 1LL << 40, "S",
               "reply stream expiry in seconds (default 86400)");
    flags_long(&fs, "--jobs-maxlen", &jobs_maxlen, 0, 1LL << 40, "N",
               "cap the job stream at about N entries, read or not (default 0:\n"
               "only entries every group has acknowledged are trimmed)");
    flags_long(&fs, "--dead-maxlen", &dead_maxlen, 0, 1LL << 40, "N",
               "keep about N dead letters (default 100000, 0: all)");
    flags_double(&fs, "--drain-timeout", &so.drain_timeout, 0, 0, 1 << 30, "S",
                 "on SIGTERM, finish running jobs for up to S s (default 30)");
    flags_size(&fs, "--max-backlog", &so.max_backlog, 1 << 20,
               "unwritten replies kept while Redis is away (default 256MiB)");
    flags_int(&fs, "--metrics-port", &metrics_port, 1, 65535, "N",
              "serve Prometheus metrics on http://0.0.0.0:N/metrics");
    flags_int(&fs, "--redis-wait", &redis_wait, 0, 3600, "S",
              "wait up to S s for Redis at start, and for a refused login\n"
              "to be accepted later, then exit 8 (default 10)");
    flags_section(&fs, "engine:");
    engine_flags_add(&fs, &flags);
    int rc = flags_main(&fs, argc, argv);
    if (rc >= 0) return rc;
    so.keys.reply_ttl = (long)reply_ttl;
    so.keys.dead_maxlen = (long)dead_maxlen;
    so.jobs_maxlen = (long)jobs_maxlen;
    engine_flags_finish(&flags);
    snprintf(running, sizeof(running), "%s:running", so.keys.stream);
    so.keys.running = running;
    if (worker_check_keys(&so.keys)) return RL_EUSAGE;
    so.redis_wait = redis_wait;
    /* Until serve_run's handlers drain jobs, a signal ends the start at once. */
    interrupt_at_start("worker", NULL, "no job was taken");
    /* Before the weights: an unreachable Redis is found in seconds, not after loading. */
    if (redis_url_parse(url, &so.url, &err) || redis_url_wait(&so.url, redis_wait, &err)) {
        fprintf(stderr, "redlm worker: %s\n", err.msg);
        return err.code;
    }
    if (!so.keys.consumer) {
        char host[256] = "localhost";
        gethostname(host, sizeof(host) - 1);
        snprintf(consumer, sizeof(consumer), "%s:%d", host, (int)getpid());
        so.keys.consumer = consumer;
    }
    char layout[64], devices[64];
    snprintf(layout, sizeof(layout), "tp%dxpp%d", eo->tp > 0 ? eo->tp : 1, eo->pp > 0 ? eo->pp : 1);
    /* "cpu", or "cuda:0,1,2" as the ranks will use them */
    int n = snprintf(devices, sizeof(devices), "%s", eo->backend ? eo->backend : "cpu");
    if (eo->backend && !strcmp(eo->backend, "cuda"))
        for (int d = 0; d < eo->tp * eo->pp && n > 0 && (size_t)n < sizeof(devices) - 8; d++)
            n += snprintf(devices + n, sizeof(devices) - (size_t)n, "%c%d", d ? ',' : ':',
                          eo->devices && d < eo->n_devices ? eo->devices[d] : d);
    so.model = eo->model;
    so.served_model_name = eo->served_model_name ? eo->served_model_name : eo->model;
    so.layout = layout;
    so.devices = devices;
    /* The port too: one in use is found in a second, not after loading the
     * weights; a scrape meanwhile sees a worker that is starting. */
    if (metrics_port) {
        if (!(so.metrics = metrics_create(NULL))) {
            fprintf(stderr, "redlm worker: out of memory\n");
            return RL_EMEMORY;
        }
        if (metrics_serve(so.metrics, metrics_port, &err)) {
            fprintf(stderr, "redlm worker: %s\n", err.msg);
            metrics_free(so.metrics);
            return err.code;
        }
    }
    rlEngine *e = engine_open(eo, &err);
    if (!e) {
        fprintf(stderr, "redlm worker: %s\n", err.msg);
        metrics_free(so.metrics);
        return err.code ? err.code : RL_EINTERNAL;
    }
    if (so.metrics) metrics_set_quantization(so.metrics, engine_quantization(e));
    rc = serve_run(e, &so, &err);
    engine_close(e);
    metrics_free(so.metrics);
    if (rc) {
        fprintf(stderr, "redlm worker: %s\n", err.msg);
        return err.code ? err.code : RL_EINTERNAL;
    }
    return 0;
}
