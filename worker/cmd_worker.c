/* cmd_worker.c: `redlm worker`: options, the engine, then serve.c's loop. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "worker/commands.h"
#include "worker/engine/engine_flags.h"
#include "worker/redis/serve.h"

static void worker_usage(FILE *f) {
    fprintf(f,
            "usage: redlm worker --model DIR --redis redis://[user:pass@]host:port[/db] [options]\n\n"
            "Redis:\n"
            "  --stream KEY            job stream (default redlm:jobs)\n"
            "  --group NAME            consumer group (default redlm)\n"
            "  --consumer NAME         this instance's name (default host:pid)\n"
            "  --dead KEY              dead-letter stream (default redlm:dead)\n"
            "  --cancel KEY            cancel stream (default redlm:cancel)\n"
            "  --claim-idle-ms N       take over others' jobs idle this long (default 30000)\n"
            "  --max-deliveries N      give up on a job delivered more often (default 3)\n"
            "  --stream-interval N     tokens per chunk event (default 8)\n"
            "  --reply-ttl S           reply stream expiry in seconds (default 86400)\n"
            "  --drain-timeout S       on SIGTERM, finish running jobs for up to S s (default 30)\n"
            "  --max-backlog BYTES     unwritten replies kept while Redis is away (default 256MiB)\n"
            "  --metrics-port N        serve Prometheus metrics on http://0.0.0.0:N/metrics\n"
            "  --redis-wait S          at start, wait up to S s for Redis, then exit 8 (default 10)\n\n"
            "engine:\n"
            "  --model DIR             Hugging Face model directory\n%s",
            engine_flags_help);
}

static int worker_int(const char *flag, const char *v, long lo, long hi, long *out) {
    char *end;
    long x = strtol(v, &end, 10);
    if (end == v || *end || x < lo || x > hi) {
        fprintf(stderr, "redlm worker: %s: '%s' is not a whole number from %ld to %ld\n", flag, v, lo, hi);
        return -1;
    }
    *out = x;
    return 0;
}

int cmd_worker(int argc, char **argv) {
    rlEngineFlags flags;
    engine_flags_init(&flags);
    rlEngineOptions *eo = &flags.o;
    rlServeOptions so;
    serve_options_init(&so);
    const char *url = NULL;
    int redis_wait = 10;
    char consumer[300];
    rlError err = {0};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            worker_usage(stdout);
            return 0;
        }
        int r = engine_flags_parse(argc, argv, &i, &flags, &err);
        if (r < 0) {
            fprintf(stderr, "redlm worker: %s\n", err.msg);
            return RL_EUSAGE;
        }
        if (r) continue;
        if (i + 1 >= argc) {
            fprintf(stderr, "redlm worker: unknown option %s (or it needs a value)\n\n", a);
            worker_usage(stderr);
            return RL_EUSAGE;
        }
        const char *v = argv[++i];
        long x;
        if (!strcmp(a, "--redis")) url = v;
        else if (!strcmp(a, "--stream")) so.keys.stream = v;
        else if (!strcmp(a, "--group")) so.keys.group = v;
        else if (!strcmp(a, "--consumer")) so.keys.consumer = v;
        else if (!strcmp(a, "--dead")) so.keys.dead = v;
        else if (!strcmp(a, "--cancel")) so.keys.cancel = v;
        else if (!strcmp(a, "--claim-idle-ms")) {
            if (worker_int(a, v, 10, 1L << 30, &x)) return RL_EUSAGE;
            so.claim_idle_ms = (int)x;
        } else if (!strcmp(a, "--max-deliveries")) {
            if (worker_int(a, v, 1, 1000000, &x)) return RL_EUSAGE;
            so.max_deliveries = (int)x;
        } else if (!strcmp(a, "--stream-interval")) {
            if (worker_int(a, v, 1, 1000000, &x)) return RL_EUSAGE;
            so.stream_interval = (int)x;
        } else if (!strcmp(a, "--reply-ttl")) {
            if (worker_int(a, v, 0, 1L << 40, &x)) return RL_EUSAGE;
            so.reply_ttl = x;
        } else if (!strcmp(a, "--drain-timeout")) {
            if (worker_int(a, v, 0, 1L << 30, &x)) return RL_EUSAGE;
            so.drain_timeout = (double)x;
        } else if (!strcmp(a, "--max-backlog")) {
            if (worker_int(a, v, 1 << 20, 1L << 40, &x)) return RL_EUSAGE;
            so.max_backlog = (size_t)x;
        } else if (!strcmp(a, "--redis-wait")) {
            if (worker_int(a, v, 0, 3600, &x)) return RL_EUSAGE;
            redis_wait = (int)x;
        } else if (!strcmp(a, "--metrics-port")) {
            if (worker_int(a, v, 1, 65535, &x)) return RL_EUSAGE;
            so.metrics_port = (int)x;
        } else {
            fprintf(stderr, "redlm worker: unknown option %s\n\n", a);
            worker_usage(stderr);
            return RL_EUSAGE;
        }
    }
    engine_flags_finish(&flags);
    if (!url || !eo->model) {
        fprintf(stderr, "redlm worker: --model and --redis are required\n\n");
        worker_usage(stderr);
        return RL_EUSAGE;
    }
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
    so.layout = layout;
    so.devices = devices;
    rlEngine *e = engine_open(eo, &err);
    if (!e) {
        fprintf(stderr, "redlm worker: %s\n", err.msg);
        return err.code ? err.code : RL_EINTERNAL;
    }
    int rc = serve_run(e, &so, &err);
    engine_close(e);
    if (rc) {
        fprintf(stderr, "redlm worker: %s\n", err.msg);
        return err.code ? err.code : RL_EINTERNAL;
    }
    return 0;
}
