/* item.h: one Redis write the worker owes (a reply event, a dead-letter
 * copy, an acknowledgement), and the job it belongs to.
 *
 * Items are built where the knowledge is (the engine thread for events, the
 * intake for bad entries), queued in order, and written by writer.c.  A job's
 * last items are always: its final event, its dead-letter copy when it
 * failed, then XACK; writing them in order on one connection is what makes
 * "acknowledged only after the reply is stored" hold. */
#ifndef RL_ITEM_H
#define RL_ITEM_H

#include <stddef.h>

#include "worker/request/codec.h"

struct json_t;

/* The Redis names a worker uses (worker/redis/PROTOCOL.md's defaults are
 * options). */
typedef struct rlKeys {
    const char *stream;      /* redlm:jobs */
    const char *group;       /* redlm */
    const char *consumer;    /* host:pid */
    const char *dead;        /* redlm:dead */
    const char *cancel;      /* redlm:cancel */
} rlKeys;

typedef struct rlJob {
    char entry[48];          /* stream entry id, e.g. 1700000000000-0 */
    char *id;                /* the job's id, or NULL when the entry has none */
    char *reply_to;          /* reply stream key (NULL without an id) */
    rlEncoding enc;
    char *payload;           /* the entry's json/msgpack field, for dead letters */
    size_t payload_len;
    int attempt;             /* delivery count */
    /* engine thread only, while the job runs */
    int seq;                 /* next event's seq */
    int samples_left;        /* done events still to come */
    int n_samples;
    struct json_t **pending; /* per sample: chunk text/tokens not yet sent */
    /* loop thread only: the list of jobs not yet acknowledged */
    struct rlJob *prev, *next;
} rlJob;

/* id may be NULL (an entry without one: no reply stream); reply_to NULL
 * means redlm:reply:<id>; payload is copied. */
rlJob *job_create(const char *entry, const char *id, size_t id_len, const char *reply_to,
                  rlEncoding enc, const char *payload, size_t payload_len, int attempt);
void job_free(rlJob *j);

typedef enum rlItemKind {
    RL_ITEM_REPLY,   /* XADD <reply_to> * <field> <event>, then EXPIRE <reply_to> */
    RL_ITEM_DEAD,    /* XADD <dead> * ... */
    RL_ITEM_ACK,     /* XACK <stream> <group> <entry>; the job is finished after it */
} rlItemKind;

typedef struct rlItem {
    struct rlItem *next;
    rlItemKind kind;
    rlJob *job;
    int argc;
    char **argv;             /* argv and argvlen point into the same allocation */
    size_t *argvlen;
} rlItem;

/* A command from argc (pointer, length) pairs, copied into one block. */
rlItem *item_create(rlItemKind kind, rlJob *job, int argc, const char *const *argv,
                    const size_t *argvlen);
void item_free(rlItem *it);
size_t item_bytes(const rlItem *it);

/* A FIFO of items; the caller provides any locking. */
typedef struct rlItemList {
    rlItem *head, *tail;
    size_t n;
} rlItemList;

/* The items that end a job: its error event (when it has an id), a
 * dead-letter copy of the entry (fields: the entry's own field/value pairs)
 * with the error, then XACK.  Returns -1 when out of memory. */
int items_fail(rlItemList *out, const rlKeys *k, rlJob *job, int n_fields, const char *const *fields,
               const size_t *field_lens, const char *code, const char *message);
/* A reply event (a JSON object) for the job, encoded as the job asked. */
int items_event(rlItemList *out, rlJob *job, const struct json_t *event);
int items_ack(rlItemList *out, const rlKeys *k, rlJob *job);
/* A job cancelled before it ran: one `done` with finish_reason "abort" and
 * no tokens per sample, then XACK. */
struct rlRequest;
int items_abort(rlItemList *out, const rlKeys *k, rlJob *job, const struct rlRequest *req);

void items_push(rlItemList *l, rlItem *it);
void items_append(rlItemList *l, rlItemList *from); /* moves everything, from is left empty */
rlItem *items_pop(rlItemList *l);

#endif
