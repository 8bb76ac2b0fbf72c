/* serve.h: the Redis worker's event loop: jobs in, replies out.
 *
 * One libev loop owns three Redis connections (jobs reader, cancel reader,
 * writer), the timers (heartbeat, idle refresh, trimming, drain) and the
 * signals; the engine runs on the runner's thread.  serve_run() returns when
 * a SIGTERM or SIGINT drain has finished (or timed out), when the engine
 * fails, or when Redis refuses the worker (login, functions); whatever it
 * still holds is handed back to the other workers. */
#ifndef RL_SERVE_H
#define RL_SERVE_H

#include "worker/engine/engine.h"
#include "worker/redis/item.h"
#include "worker/lib/redis_url.h"

typedef struct rlServeOptions {
    rlRedisUrl url;
    rlKeys keys;
    int claim_idle_ms;        /* claim others' entries idle this long, default 30000 */
    int max_deliveries;       /* default 3 */
    double drain_timeout;     /* seconds, default 30 */
    struct rlMetrics *metrics; /* or NULL: what the worker records, served and freed by the caller */
    size_t max_backlog;       /* bytes of unwritten items before the engine pauses */
    int block_ms;             /* XREADGROUP BLOCK, default 1000 */
    long jobs_maxlen;         /* cap on the job stream besides trimming what is acknowledged; 0: none */
    double redis_wait;        /* a login refused this long ends the worker (--redis-wait) */
    const char *model;        /* for the heartbeat */
    const char *served_model_name;  /* --served-model-name: the name jobs know the model by */
    const char *layout;
    const char *devices;
} rlServeOptions;

void serve_options_init(rlServeOptions *o);
int serve_run(rlEngine *e, const rlServeOptions *o, rlError *err);

#endif
