/* writer.c: pipelined, ordered, reconnect-safe Redis writes (see writer.h).
 *
 * One FIFO holds every item until Redis answers it; `unsent` marks where the
 * next command starts.  Items go out in runs of up to WRITER_BATCH, each run
 * one FCALL of redlm_batch answered with one reply per item.  Answers come
 * back in order on one connection, so the head of the FIFO is always the
 * first item of the run being answered, and a ring of run lengths is all the
 * bookkeeping there is.  At most WRITER_WINDOW runs are in flight, which
 * keeps hiredis's output buffer small.  A job's XACK refused for want of
 * its dead letter (HELD) or for a running hash of another type (WRONGTYPE)
 * waits apart, in `held`, until the owner sends it again: it is the job's
 * last item, so nothing of the job waits behind it. */
#include "worker/redis/writer.h"
#include "worker/redis/rconn.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "worker/redis/functions.h"

#define WRITER_BATCH 256
#define WRITER_BATCH_BYTES (1 << 20)
#define WRITER_WINDOW 64
#define WRITER_HEADER 10     /* FCALL redlm_batch 3 <3 keys> group consumer ttl maxlen */

struct rlWriter {
    rlItemList q;            /* unconfirmed items, oldest first */
    rlItemList held;         /* XACKs whose dead letter or running hash refused them, to send again */
    rlItem *unsent;          /* first item not yet sent on this connection */
    int runs[WRITER_WINDOW]; /* lengths of the runs in flight, oldest at run_head */
    int run_head, n_runs;
    redisAsyncContext *ac;
    const rlKeys *k;
    char ttl[24], maxlen[24];
    rlWriterHooks hooks;
    _Atomic size_t bytes;
    unsigned long errors;
};

rlWriter *writer_create(const rlKeys *k, const rlWriterHooks *hooks) {
    rlWriter *w = calloc(1, sizeof(*w));
    if (!w) return NULL;
    w->k = k;
    snprintf(w->ttl, sizeof(w->ttl), "%ld", k->reply_ttl);
    snprintf(w->maxlen, sizeof(w->maxlen), "%ld", k->dead_maxlen);
    w->hooks = *hooks;
    atomic_init(&w->bytes, 0);
    return w;
}

void writer_free(rlWriter *w) {
    if (!w) return;
    for (rlItem *it; (it = items_pop(&w->q));) item_free(it);
    for (rlItem *it; (it = items_pop(&w->held));) item_free(it);
    free(w);
}

static void writer_send(rlWriter *w);

static int writer_is(const redisReply *r, const char *word) {
    size_t n = strlen(word);
    return r->type == REDIS_REPLY_ERROR && r->len > n && !strncmp(r->str, word, n) && r->str[n] == ' ';
}

/* One item's answer: the hooks hear about starts, fenced or refused writes
 * and finished jobs. */
static void writer_answer(rlWriter *w, rlItem *it, const redisReply *reply) {
    const rlWriterHooks *h = &w->hooks;
    int lost = writer_is(reply, FUNCTIONS_LOST), held = writer_is(reply, FUNCTIONS_HELD);
    /* an XACK refused as every job's would be (functions.h) is owed as well */
    if ((held || (reply->type == REDIS_REPLY_ERROR && functions_refused_for_all(reply->str))) &&
        it->kind == RL_ITEM_ACK) {
        w->errors++;
        items_push(&w->held, it); /* still owed: its bytes stay counted */
        if (h->held) h->held(h->ctx, it->job, reply->str);
        return;
    }
    if (reply->type == REDIS_REPLY_ERROR && !lost) {
        /* Not retried: an error reply (wrong key type, a missing function)
         * would come back the same way every time. */
        if (w->errors++ < 10)
            fprintf(stderr, "redlm worker: Redis refused the %s of job %s (entry %s): %s\n", it->argv[0],
                    it->job->id ? it->job->id : "(no id)", it->job->entry, reply->str);
    }
    if (it->kind == RL_ITEM_START) {
        if (h->started) h->started(h->ctx, it->job, reply);
    } else if ((lost || held || writer_is(reply, FUNCTIONS_REFUSED)) && h->lost)
        h->lost(h->ctx, it->job, reply->str);
    atomic_fetch_sub(&w->bytes, item_bytes(it));
    if (it->kind == RL_ITEM_ACK && h->done) h->done(h->ctx, it->job);
    item_free(it);
}

static void writer_on_reply(redisAsyncContext *ac, void *r, void *priv) {
    rlWriter *w = priv;
    redisReply *reply = r;
    /* connection lost, or given up below: writer_connected(NULL) requeues
     * (a later run that did go through is then stored twice: readers drop
     * repeats by seq) */
    if (!reply || ac != w->ac) return;
    /* a run refused whole for a passing state, before any of it ran */
    if (rconn_transient(reply)) {
        if (w->errors++ < 10)
            fprintf(stderr, "redlm worker: Redis refused %d writes for now (%s); sending them again after a "
                    "reconnect\n", w->runs[w->run_head], reply->str);
        w->ac = NULL;
        if (w->hooks.retry) w->hooks.retry(w->hooks.ctx);
        return;
    }
    /* a run refused whole, before any of it ran, because the user may not
     * write one of the keys every run names: everything is kept, and sent
     * again once the owner finds the keys writable (writer_connected) */
    if (reply->type == REDIS_REPLY_ERROR && writer_is(reply, FUNCTIONS_NOPERM)) {
        w->errors++;
        writer_connected(w, NULL);
        if (w->hooks.refused) w->hooks.refused(w->hooks.ctx, reply->str);
        return;
    }
    int n = w->runs[w->run_head];
    w->run_head = (w->run_head + 1) % WRITER_WINDOW;
    w->n_runs--;
    /* one answer per item, or one error (e.g. out of memory) for the run */
    int each = reply->type == REDIS_REPLY_ARRAY && reply->elements == (size_t)n;
    for (int i = 0; i < n; i++) writer_answer(w, items_pop(&w->q), each ? reply->element[i] : reply);
    if (w->unsent && w->n_runs < WRITER_WINDOW / 2) writer_send(w);
}

static void writer_send(rlWriter *w) {
    while (w->ac && w->unsent && w->n_runs < WRITER_WINDOW) {
        int n = 0, argc = WRITER_HEADER;
        size_t bytes = 0;
        for (rlItem *it = w->unsent; it && n < WRITER_BATCH && (!n || bytes < WRITER_BATCH_BYTES); it = it->next)
            n++, argc += it->argc, bytes += item_bytes(it);
        const char **argv = malloc((size_t)argc * sizeof(*argv));
        size_t *len = malloc((size_t)argc * sizeof(*len));
        if (!argv || !len) {
            free(argv), free(len);
            return; /* out of memory: the next push or answer tries again */
        }
        const char *head[WRITER_HEADER] = {"FCALL", FUNCTIONS_FN("redlm_batch"), "3", w->k->stream, w->k->running, w->k->dead,
                                           w->k->group, w->k->consumer, w->ttl, w->maxlen};
        int a = 0;
        for (; a < WRITER_HEADER; a++) argv[a] = head[a], len[a] = strlen(head[a]);
        rlItem *it = w->unsent;
        for (int i = 0; i < n; i++, it = it->next)
            for (int j = 0; j < it->argc; j++, a++) argv[a] = it->argv[j], len[a] = it->argvlen[j];
        redisAsyncCommandArgv(w->ac, writer_on_reply, w, argc, argv, len);
        free(argv), free(len);
        w->runs[(w->run_head + w->n_runs++) % WRITER_WINDOW] = n;
        w->unsent = it;
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
        w->run_head = w->n_runs = 0;
        return;
    }
    writer_send(w);
}

void writer_resend_held(rlWriter *w) {
    if (!w->held.head) return;
    rlItem *first = w->held.head;
    items_append(&w->q, &w->held);
    if (!w->unsent) w->unsent = first;
    writer_send(w);
}

size_t writer_held(const rlWriter *w) { return w->held.n; }
size_t writer_pending(const rlWriter *w) { return w->q.n + w->held.n; }
_Atomic size_t *writer_bytes(rlWriter *w) { return &w->bytes; }
unsigned long writer_errors(const rlWriter *w) { return w->errors; }
