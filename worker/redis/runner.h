/* runner.h: the engine on its own thread, fed and drained through queues.
 *
 * The event loop must never wait for a forward pass and the engine must
 * never wait for Redis, so they meet only here: the loop hands requests and
 * aborts in, the engine thread hands finished Redis items (reply events,
 * dead letters, acks) out and wakes the loop with an ev_async.  The engine
 * emits chunks of --stream-interval tokens itself (engine options); the
 * runner numbers them as events and queues them. */
#ifndef RL_RUNNER_H
#define RL_RUNNER_H

#include <ev.h>
#include <stdatomic.h>

#include "worker/engine/engine.h"
#include "worker/redis/item.h"
#include "worker/redis/metrics.h"

typedef struct rlRunnerOptions {
    size_t max_backlog;             /* pause the engine above this many unwritten bytes */
    rlMetrics *metrics;             /* or NULL */
    _Atomic size_t *backlog;        /* the writer's unconfirmed bytes */
    struct ev_loop *loop;
    ev_async *wake;                 /* sent whenever items or credit change */
} rlRunnerOptions;

typedef struct rlRunner rlRunner;

rlRunner *runner_start(rlEngine *e, const rlRunnerOptions *o, rlError *err);
/* Stop the thread after its current step and join it (the engine stays open). */
void runner_stop(rlRunner *r);

/* Loop thread: hand a request over (req->user is its rlJob). */
void runner_add(rlRunner *r, rlRequest *req);
void runner_abort(rlRunner *r, const char *id);
/* How many more requests the engine can start now, minus those handed over
 * and not yet added: what XREADGROUP may ask for. */
int runner_credit(rlRunner *r);
/* Move the items produced so far into out. */
void runner_take(rlRunner *r, rlItemList *out);
/* Latest engine counters, and whether the engine failed (*err filled). */
void runner_stats(rlRunner *r, rlEngineStats *st);
int runner_failed(rlRunner *r, rlError *err);

#endif
