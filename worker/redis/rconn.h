/* rconn.h: one asynchronous Redis connection that comes back by itself.
 *
 * The worker keeps three (jobs reader, cancel reader, writer) because a
 * blocking XREADGROUP holds its connection: replies written on the same one
 * would wait behind it.  Each reconnects with exponential backoff when Redis
 * goes away; the owner hears on_ready (logged in, usable) and on_lost
 * (every command still pending has been answered with a NULL reply). */
#ifndef RL_RCONN_H
#define RL_RCONN_H

#include <ev.h>
#include <hiredis/async.h>

#include "worker/lib/redis_url.h"

typedef struct rlConn rlConn;
typedef void (*rlConnFn)(rlConn *c, void *ctx);

rlConn *rconn_create(struct ev_loop *loop, const rlRedisUrl *url, const char *name,
                     rlConnFn on_ready, rlConnFn on_lost, void *ctx);
/* The live context, or NULL while disconnected. */
redisAsyncContext *rconn_ctx(rlConn *c);
/* Drop the connection now and reconnect after the backoff (used when a
 * reply shows the connection is unusable, e.g. AUTH refused). */
void rconn_reset(rlConn *c);
/* Disconnect for good and free: gracefully (pending replies still arrive
 * first) or now (pending commands get NULL replies, e.g. a blocked XREAD). */
void rconn_close(rlConn *c, int now);

#endif
