/* writer.c: pipelined, ordered, reconnect-safe Redis writes (see writer.h).
 *
 * One FIFO holds every item until Redis answers it; `unsent` marks where the
 * next command starts.  Answers come back in order on one connection, so
 * the head of the FIFO is always the item being answered: no lookup table.
 * At most WRITER_WINDOW commands are in flight, which keeps hiredis's output
 * buffer small while still putting thousands of commands in each write. */
#include "worker/redis/writer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define WRITER_WINDOW 4096

struct rlWriter {
    rlItemList q;            /* unconfirmed items, oldest first */
    rlItem *unsent;          /* first item not yet sent on this connection */
    size_t inflight;
    redisAsyncContext *ac;
    long ttl;
    char ttl_s[24];
    rlWriterDoneFn done;
    void *ctx;
    _Atomic size_t bytes;
    unsigned long errors;
};

rlWriter *writer_create(long reply_ttl_s, rlWriterDoneFn done, void *ctx) {
    rlWriter *w = calloc(1, sizeof(*w));
    if (!w) return NULL;
    w->ttl = reply_ttl_s;
    snprintf(w->ttl_s, sizeof(w->ttl_s), "%ld", reply_ttl_s);
    w->done = done;
    w->ctx = ctx;
    atomic_init(&w->bytes, 0);
    return w;
}

void writer_free(rlWriter *w) {
    if (!w) return;
    for (rlItem *it; (it = items_pop(&w->q));) item_free(it);
    free(w);
}

static void writer_send(rlWriter *w);

static void writer_on_reply(redisAsyncContext *ac, void *r, void *priv) {
    (void)ac;
    rlWriter *w = priv;
    redisReply *reply = r;
    if (!reply) return; /* connection lost: writer_connected(NULL) requeues */
    rlItem *it = items_pop(&w->q);
    w->inflight--;
    if (reply->type == REDIS_REPLY_ERROR) {
        /* Not retried: an error reply (wrong key type, bad stream name) would
         * come back the same way every time. */
        if (w->errors++ < 10)
            fprintf(stderr, "redlm worker: Redis refused %s %s: %s\n", it->argv[0], it->argv[1],
                    reply->str);
    }
    atomic_fetch_sub(&w->bytes, item_bytes(it));
    if (it->kind == RL_ITEM_ACK && w->done) w->done(w->ctx, it->job);
    item_free(it);
    if (w->unsent && w->inflight < WRITER_WINDOW / 2) writer_send(w);
}

static void writer_send(rlWriter *w) {
    static const char *expire = "EXPIRE";
    while (w->ac && w->unsent && w->inflight < WRITER_WINDOW) {
        rlItem *it = w->unsent;
        redisAsyncCommandArgv(w->ac, writer_on_reply, w, it->argc, (const char **)it->argv, it->argvlen);
        w->inflight++;
        w->unsent = it->next;
        /* One EXPIRE per run of events to the same stream: the TTL is
         * refreshed by every batch that touches the stream, at half the
         * commands of one EXPIRE per event. */
        rlItem *nx = it->next;
        if (it->kind == RL_ITEM_REPLY && w->ttl > 0 &&
            !(nx && nx->kind == RL_ITEM_REPLY && nx->argvlen[1] == it->argvlen[1] &&
              !memcmp(nx->argv[1], it->argv[1], it->argvlen[1]))) {
            const char *argv[3] = {expire, it->argv[1], w->ttl_s};
            size_t len[3] = {6, it->argvlen[1], strlen(w->ttl_s)};
            redisAsyncCommandArgv(w->ac, NULL, NULL, 3, argv, len);
        }
    }
}

void writer_push(rlWriter *w, rlItemList *items) {
    if (!items->head) return;
    rlItem *first = items->head;
    size_t bytes = 0;
    for (rlItem *it = first; it; it = it->next) bytes += item_bytes(it);
    atomic_fetch_add(&w->bytes, bytes);
    items_append(&w->q, items);
    if (!w->unsent) w->unsent = first;
    writer_send(w);
}

void writer_connected(rlWriter *w, redisAsyncContext *ac) {
    w->ac = ac;
    if (!ac) {
        w->unsent = w->q.head;
        w->inflight = 0;
        return;
    }
    writer_send(w);
}

size_t writer_pending(const rlWriter *w) { return w->q.n; }
_Atomic size_t *writer_bytes(rlWriter *w) { return &w->bytes; }
unsigned long writer_errors(const rlWriter *w) { return w->errors; }
