/* instances.h: the workers' heartbeats, written by serve.c and read back by
 * `redlm status` and `redlm submit`.
 *
 * Each worker refreshes the hash redlm:instances:<consumer> every second
 * and sets its TTL to 10 s.  An instance is live while its last beat is at
 * most INSTANCES_LIVE_S old; a killed one is listed as dead until the key
 * expires (then the others' reap takes what it held, serve.c), so an
 * operator sees which worker stopped beating and when.  The age comes from
 * the key's remaining TTL: Redis's clock alone, whatever the hosts' clocks
 * say. */
#ifndef RL_INSTANCES_H
#define RL_INSTANCES_H

#include <hiredis/hiredis.h>

#include "kernels/error.h"
#include "worker/redis/item.h"  /* KEYS_HEARTBEAT_PREFIX */

#define INSTANCES_BEAT_S 1.0    /* a heartbeat every second */
#define INSTANCES_TTL_S 10      /* the hash outlives its last beat by 10 s: then it is reaped */
#define INSTANCES_LIVE_S 5.0    /* live: a beat within the last 5 s (4 missed are tolerated) */

typedef struct rlInstance {
    char *consumer;
    redisReply *hash;           /* HGETALL's flat [field, value, ...] */
    double age_s;               /* since the last beat */
    int live;
} rlInstance;

/* Every heartbeat hash, live and dead, of workers reading stream (any
 * stream when NULL); *out is malloc'd, release with instances_free. */
int instances_read(redisContext *c, const char *stream, rlInstance **out, int *n, rlError *err);
void instances_free(rlInstance *v, int n);

/* A heartbeat field's value, or NULL. */
const char *instances_field(const rlInstance *in, const char *name);

/* Live instances of stream (any when NULL), or -1 with err set. */
int instances_live(redisContext *c, const char *stream, rlError *err);

#endif
