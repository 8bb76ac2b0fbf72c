/* writer.h: writes the worker's items to Redis, pipelined, in order, and
 * again after a reconnect.
 *
 * Items stay queued until Redis has answered them, so a connection lost
 * mid-flight loses nothing: whatever was not confirmed is sent again on the
 * next connection (a reply event may then be stored twice; readers drop
 * repeats by `seq`).  The queue's size in bytes is shared with the engine
 * thread, which pauses when Redis has been away long enough to fill it. */
#ifndef RL_WRITER_H
#define RL_WRITER_H

#include <hiredis/async.h>
#include <stdatomic.h>

#include "worker/redis/item.h"

typedef struct rlWriter rlWriter;
/* Called when a job's XACK has been confirmed: the job may be freed. */
typedef void (*rlWriterDoneFn)(void *ctx, rlJob *job);

rlWriter *writer_create(long reply_ttl_s, rlWriterDoneFn done, void *ctx);
void writer_free(rlWriter *w);
/* Take the items (the list is left empty) and send what the window allows. */
void writer_push(rlWriter *w, rlItemList *items);
/* The connection is up (ac) or gone (NULL); gone resends everything
 * unconfirmed once it is back. */
void writer_connected(rlWriter *w, redisAsyncContext *ac);
size_t writer_pending(const rlWriter *w);   /* items not yet confirmed */
/* Bytes queued and not yet confirmed (readable from any thread). */
_Atomic size_t *writer_bytes(rlWriter *w);
/* Items answered with an error by Redis (e.g. the reply key has another type). */
unsigned long writer_errors(const rlWriter *w);

#endif
