/* functions.h: the worker's Redis functions (FUNCTION LOAD, Redis 7.0+).
 *
 * Every write a job owes (its start, reply events, dead letter, XACK) is an
 * FCALL of one of these, so the checks that make the queue safe run inside
 * Redis, atomically with the write they guard:
 *   - the fence: the job's entry is still pending, held by this consumer at
 *     this delivery count; a worker that lost the entry (paused, claimed by
 *     another) writes nothing more for it;
 *   - a reply key that holds another type is never touched, and its EXPIRE
 *     runs only after the XADD succeeded;
 *   - one running job per id (a hash <stream>:running, id -> entry);
 * plus the housekeeping every worker runs: refreshing its entries' idle
 * time, claiming idle entries still in the stream, taking the entries of
 * consumers whose heartbeat is gone (and dead-lettering those deleted from
 * the stream meanwhile), removing empty dead consumers,
 * trimming acknowledged entries.  No job is acknowledged unless its dead
 * letter, when it owes one, is stored.  The library is loaded (REPLACE) on
 * every connection before its first FCALL. */
#ifndef RL_FUNCTIONS_H
#define RL_FUNCTIONS_H

#include <hiredis/async.h>

/* The library's version, in its name and in each of its functions' names:
 * workers of two versions on one Redis (a rolling upgrade) each load and
 * call their own, where one name for every version would have the last
 * worker to connect swap the others' functions under them (FUNCTION LOAD
 * REPLACE).  It goes up whenever a function's keys, arguments or answers
 * change; an older one stays loaded until an operator deletes it (FUNCTION
 * DELETE redlm_vN) once no worker of that version is left. */
#define FUNCTIONS_VERSION "6"
#define FUNCTIONS_LIBRARY "redlm_v" FUNCTIONS_VERSION
/* A function's name as this version registers it: FUNCTIONS_FN("redlm_batch"). */
#define FUNCTIONS_FN(name) name "_v" FUNCTIONS_VERSION

/* The library's source ("#!lua name=redlm_v6 ..."). */
extern const char functions_library[];

/* redlm_batch: KEYS job stream, running hash, dead-letter stream; ARGV
 * group, consumer, reply ttl, dead-letter cap, then operations, each
 * (op, entry, attempt, job id, args...): start, reply <stream> <field>
 * <payload>, fail <error json> (dead letter + ack), ack.  The answer holds
 * one reply per operation; errors among them begin with these words: */
#define FUNCTIONS_LOST "LOST"         /* the fence: the entry is no longer ours */
#define FUNCTIONS_REFUSED "REFUSED"   /* the reply key holds another type: dead letter + ack done */
/* the dead letter was refused (the key holds another type, an ACL
 * selector): nothing acknowledged, the entry left pending.  After a reply,
 * the attempt is fenced out too (its delivery count raised); after a fail,
 * the same fail may be sent again later. */
#define FUNCTIONS_HELD "HELD"
/* in a HELD answer, before Redis's reason for refusing the dead letter */
#define FUNCTIONS_DEAD_REFUSED "refused its dead letter: "
/* A whole FCALL refused because the user may not write one of its keys
 * (ACL key patterns); `FCALL redlm_keys_v6 1 KEY` tells which. */
#define FUNCTIONS_NOPERM "NOPERM"
/* One of the worker's keys holds another type: `FCALL redlm_keys_v6 3
 * STREAM RUNNING DEAD stream hash stream` tells which (FUNCTIONS_KEY_TYPES). */
#define FUNCTIONS_WRONGTYPE "WRONGTYPE"
#define FUNCTIONS_KEY_TYPES "stream", "hash", "stream"

/* Whether a refusal in one of redlm_batch's answers would meet every job
 * of the worker alike (so the worker holds rather than give up the job): a
 * key of another type (the running hash, or the dead-letter stream under
 * a refused dead letter), or an ACL that denies a command or a key inside
 * the functions ("The user executing the script can't ..."). */
int functions_refused_for_all(const char *why);

/* Send FUNCTION LOAD REPLACE on ac; fn gets Redis's answer. */
void functions_load(redisAsyncContext *ac, redisCallbackFn *fn, void *priv);

#endif
