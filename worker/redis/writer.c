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

#include "worker/redis/functions.h"

#define WRITER_WINDOW 4096

struct rlWriter {
    rlItemList q;            /* unconfirmed items, oldest first */
    rlItem *unsent;          /* first item not yet sent on this connection */
    size_t inflight;
    redisAsyncContext *ac;
    rlWriterHooks hooks;
    _Atomic size_t bytes;
    unsigned long errors;
};

rlWriter *writer_create(const rlWriterHooks *hooks) {
    rlWriter *w = calloc(1, sizeof(*w));
    if (!w) return NULL;
    w->hooks = *hooks;
    atomic_init(&w->bytes, 0);
    return w;
}

void writer_free(rlWriter *w) {
    if (!w) return;
    for (rlItem *it; (it = items_pop(&w->q));) item_free(it);
    free(w);
}

static void writer_send(rlWriter *w);

static int writer_is(const redisReply *r, const char *word) {
    size_t n = strlen(word);
    return r->type == REDIS_REPLY_ERROR && r->len > n && !strncmp(r->str, word, n) && r->str[n] == ' ';
}

static void writer_on_reply(redisAsyncContext *ac, void *r, void *priv) {
    (void)ac;
    rlWriter *w = priv;
    redisReply *reply = r;
    if (!reply) return; /* connection lost: writer_connected(NULL) requeues */
    rlItem *it = items_pop(&w->q);
    w->inflight--;
    const rlWriterHooks *h = &w->hooks;
    int lost = writer_is(reply, FUNCTIONS_LOST);
    if (reply->type == REDIS_REPLY_ERROR && !lost) {
        /* Not retried: an error reply (wrong key type, a missing function)
         * would come back the same way every time. */
        if (w->errors++ < 10)
            fprintf(stderr, "redlm worker: Redis refused %s of job %s (entry %s): %s\n", it->argv[1],
                    it->job && it->job->id ? it->job->id : "(no id)", it->job ? it->job->entry : "-",
                    reply->str);
    }
    if (it->kind == RL_ITEM_START) {
        if (h->started) h->started(h->ctx, it->job, reply);
    } else if ((lost || writer_is(reply, FUNCTIONS_REFUSED)) && h->lost)
        h->lost(h->ctx, it->job, reply->str);
    atomic_fetch_sub(&w->bytes, item_bytes(it));
    if (it->kind == RL_ITEM_ACK && h->done) h->done(h->ctx, it->job);
    item_free(it);
    if (w->unsent && w->inflight < WRITER_WINDOW / 2) writer_send(w);
}

static void writer_send(rlWriter *w) {
    while (w->ac && w->unsent && w->inflight < WRITER_WINDOW) {
        rlItem *it = w->unsent;
        redisAsyncCommandArgv(w->ac, writer_on_reply, w, it->argc, (const char **)it->argv, it->argvlen);
        w->inflight++;
        w->unsent = it->next;
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
