/* writer.h: writes the worker's items to Redis, pipelined, in order, and
 * again after a reconnect.
 *
 * Items stay queued until Redis has answered them, so a connection lost
 * mid-flight loses nothing: whatever was not confirmed is sent again on the
 * next connection (a reply event may then be stored twice; readers drop
 * repeats by `seq`).  The queue's size in bytes is shared with the engine
 * thread, which pauses when Redis has been away long enough to fill it.
 * What Redis answers goes back to the owner through hooks: a job's start,
 * a job whose writes were fenced out or refused, a job's confirmed XACK, a
 * run refused for now (Redis loading, out of memory): then resent; an XACK
 * held for want of its dead letter, or every write refused for want of
 * permission: kept until the owner says to send them again. */
#ifndef RL_WRITER_H
#define RL_WRITER_H

#include <hiredis/async.h>
#include <stdatomic.h>

#include "worker/redis/item.h"

typedef struct rlWriterHooks {
    /* a START item answered (OK, DUPLICATE <entry>, or an error) */
    void (*started)(void *ctx, rlJob *job, const redisReply *r);
    /* a write of the job was refused: the entry is no longer ours (LOST), or
     * its reply key holds another type (REFUSED: dead letter and XACK were
     * done in Redis; HELD: the dead letter was refused too, the entry left
     * pending and fenced out); the job should stop.  Called for every such
     * answer. */
    void (*lost)(void *ctx, rlJob *job, const char *why);
    /* the job's dead letter was refused (HELD), or its XACK for a running
     * hash of another type (WRONGTYPE): its XACK is kept, unsent, until
     * writer_resend_held */
    void (*held)(void *ctx, rlJob *job, const char *why);
    /* a run refused whole because the user may not write one of its keys
     * (NOPERM): the writer stopped using the connection and keeps
     * everything until writer_connected is called again */
    void (*refused)(void *ctx, const char *why);
    /* the job's XACK answered, whatever the answer: the job may be freed */
    void (*done)(void *ctx, rlJob *job);
    /* Redis refused a run whole for a passing state (loading, out of memory,
     * busy): the writer stopped using the connection; the owner drops it and
     * reconnects after a backoff, and everything unanswered goes again */
    void (*retry)(void *ctx);
    void *ctx;
} rlWriterHooks;

typedef struct rlWriter rlWriter;

/* k names the streams and the consumer every write is for (kept, not copied). */
rlWriter *writer_create(const rlKeys *k, const rlWriterHooks *hooks);
void writer_free(rlWriter *w);
/* Take the items (the list is left empty) and send what the window allows. */
void writer_push(rlWriter *w, rlItemList *items);
/* The connection is up (ac) or gone (NULL); gone resends everything
 * unconfirmed once it is back. */
void writer_connected(rlWriter *w, redisAsyncContext *ac);
size_t writer_pending(const rlWriter *w);   /* items not yet confirmed, held ones included */
/* Send the held XACKs again (after a backoff: their dead letters were
 * refused); writer_held counts them. */
void writer_resend_held(rlWriter *w);
size_t writer_held(const rlWriter *w);
/* Bytes queued and not yet confirmed (readable from any thread). */
_Atomic size_t *writer_bytes(rlWriter *w);
/* Writes Redis refused, other than fenced ones (a reply key of another
 * type, out of memory, a missing function): redlm:reply_write_errors_total. */
unsigned long writer_errors(const rlWriter *w);

#endif
