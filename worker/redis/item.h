/* item.h: one Redis write the worker owes (a job's start, a reply event, a
 * dead-letter copy, an acknowledgement), and the job it belongs to.
 *
 * Items are built where the knowledge is (the engine thread for events, the
 * intake for bad entries), queued in order, and written by writer.c.  Each
 * is an FCALL of one of functions.c's job functions, so each is fenced: it
 * writes only while this consumer still holds the job's entry.  A job's last
 * items are always: its final event, then its XACK (with its dead-letter
 * copy, in one operation, when it failed); writing them in order on one
 * connection is what makes "acknowledged only after the reply is stored"
 * hold. */
#ifndef RL_ITEM_H
#define RL_ITEM_H

#include <stddef.h>

#include "worker/request/codec.h"

struct json_t;
struct rlRequest;

/* Heartbeat hashes are this prefix + the consumer's name. */
#define KEYS_HEARTBEAT_PREFIX "redlm:instances:"

/* The Redis names a worker uses (PROTOCOL.md's defaults are options). */
typedef struct rlKeys {
    const char *stream;       /* redlm:jobs */
    const char *group;        /* redlm */
    const char *consumer;     /* host:pid */
    const char *dead;         /* redlm:dead */
    const char *cancel;       /* redlm:cancel */
    const char *reply_prefix; /* redlm:reply: (every reply stream is under it) */
    const char *running;      /* <stream>:running: job id -> entry of the job running it */
    long reply_ttl;           /* seconds, 0: no expiry */
    long dead_maxlen;         /* 0: dead letters uncapped */
} rlKeys;

/* The reply stream of a job: reply_to when given, else <prefix><id>.
 * Returns 0 and a malloc'd *key, or -1 (*key NULL) when that key is not a
 * reply stream the worker may write: outside reply_prefix, or one of its
 * own streams; *why then says so (RL_ERROR_LEN bytes). */
int keys_reply_to(const rlKeys *k, const char *id, const char *reply_to, char **key, char *why);

typedef struct rlJob {
    char entry[48];           /* stream entry id, e.g. 1700000000000-0 */
    char *id;                 /* the job's id, or NULL when the entry has none */
    char *reply_to;           /* reply stream key (NULL: none to write to) */
    rlEncoding enc;
    int attempt;              /* delivery count: with the consumer, the job's fence */
    /* engine thread only, while the job runs */
    int seq;                  /* next event's seq */
    int samples_left;         /* done events still to come */
    /* loop thread only */
    struct rlRequest *req;    /* waiting for its start's answer, then handed to the runner */
    int lost;                 /* the fence failed: nothing more is written for it */
    int acking;               /* its XACK is queued: it no longer runs */
    /* its XACK is held, sent again later: 1 its dead letter was refused
     * (the entry pending, not refreshed: another worker may take it), 2 the
     * running hash or the dead-letter stream holds another type (the
     * worker holds; the entry is kept fresh: another would be refused alike) */
    int held;
    int start_owed;           /* Redis refused its start: sent again when the worker resumes */
    struct rlJob *prev, *next; /* the list of jobs not yet acknowledged */
} rlJob;

/* id may be NULL (an entry without one); reply_to NULL: no reply stream. */
rlJob *job_create(const char *entry, const char *id, size_t id_len, const char *reply_to,
                  rlEncoding enc, int attempt);
void job_free(rlJob *j);

typedef enum rlItemKind {
    RL_ITEM_START,   /* redlm_start: the job may run (or it is a duplicate, or lost) */
    RL_ITEM_REPLY,   /* redlm_reply: XADD to the reply stream + EXPIRE */
    RL_ITEM_ACK,     /* redlm_ack: XACK (redlm_fail: dead letter + XACK); the job is finished after it */
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

/* Each returns -1 when out of memory. */
int items_start(rlItemList *out, rlJob *job);
/* A reply event (a JSON object) for the job, encoded as the job asked. */
int items_event(rlItemList *out, rlJob *job, const struct json_t *event);
int items_ack(rlItemList *out, rlJob *job);
/* The items that end a failed job: its error event (when it has a reply
 * stream), then a dead-letter copy of its entry with the error and XACK,
 * one operation (no XACK when the dead letter is refused). */
int items_fail(rlItemList *out, rlJob *job, const char *code, const char *message);
/* A job cancelled before it ran: one `done` with finish_reason "abort" and
 * no tokens per sample, then XACK. */
int items_abort(rlItemList *out, rlJob *job, const struct rlRequest *req);

void items_push(rlItemList *l, rlItem *it);
void items_append(rlItemList *l, rlItemList *from); /* moves everything, from is left empty */
rlItem *items_pop(rlItemList *l);

#endif
