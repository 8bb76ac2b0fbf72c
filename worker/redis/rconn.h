/* rconn.h: one asynchronous Redis connection that comes back by itself.
 *
 * The worker keeps three (jobs reader, cancel reader, writer) because a
 * blocking XREADGROUP holds its connection: replies written on the same one
 * would wait behind it.  Each reconnects with exponential backoff when Redis
 * goes away; the owner hears ready (logged in, usable), lost (every command
 * still pending has been answered with a NULL reply) and refused: Redis has
 * refused the login (a wrong or rotated password) for give_up_s seconds, so
 * retrying will not help and the owner should stop. */
#ifndef RL_RCONN_H
#define RL_RCONN_H

#include <ev.h>
#include <hiredis/async.h>

#include "worker/lib/redis_url.h"

typedef struct rlConn rlConn;

typedef struct rlConnHooks {
    void (*ready)(rlConn *c, void *ctx);
    void (*lost)(rlConn *c, void *ctx);
    void (*refused)(rlConn *c, void *ctx, const char *msg); /* or NULL: retry for ever */
    void *ctx;
    double give_up_s;
} rlConnHooks;

rlConn *rconn_create(struct ev_loop *loop, const rlRedisUrl *url, const char *name, const rlConnHooks *hooks);
/* The live context, or NULL while disconnected or logging in. */
redisAsyncContext *rconn_ctx(rlConn *c);
/* Drop the connection now and reconnect after the backoff. */
void rconn_reset(rlConn *c);
/* The same, for a Redis that refuses for now what it would take later:
 * the backoff keeps growing (to 2 s) across such drops. */
void rconn_retry(rlConn *c);
/* An error reply for a state that passes, given before the command ran:
 * Redis loading its data, out of memory, busy with a script, a replica
 * (READONLY, MASTERDOWN).  The command may be sent again later. */
int rconn_transient(const redisReply *r);
/* Disconnect for good and free: gracefully (pending replies still arrive
 * first, for at most 5 s) or now (pending commands get NULL replies, e.g. a
 * blocked XREAD). */
void rconn_close(rlConn *c, int now);

#endif
