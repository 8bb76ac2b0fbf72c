/* instances.c: reading the heartbeat hashes back (see instances.h). */
#include "worker/redis/instances.h"

#include <stdlib.h>
#include <string.h>

const char *instances_field(const rlInstance *in, const char *name) {
    const redisReply *h = in->hash;
    for (size_t i = 0; i + 1 < h->elements; i += 2)
        if (h->element[i]->type == REDIS_REPLY_STRING && !strcmp(h->element[i]->str, name) &&
            h->element[i + 1]->type == REDIS_REPLY_STRING)
            return h->element[i + 1]->str;
    return NULL;
}

void instances_free(rlInstance *v, int n) {
    for (int i = 0; v && i < n; i++) {
        free(v[i].consumer);
        freeReplyObject(v[i].hash);
    }
    free(v);
}

/* One key's HGETALL and PTTL, pipelined, appended to *v unless it expired
 * since the SCAN, is not a hash, or belongs to another stream's worker. */
static int instances_add(redisContext *c, const char *key, const char *stream, rlInstance **v, int *n,
                         int *cap, rlError *err) {
    redisAppendCommand(c, "HGETALL %s", key);
    redisAppendCommand(c, "PTTL %s", key);
    redisReply *h = NULL, *t = NULL;
    if (redisGetReply(c, (void **)&h) != REDIS_OK || redisGetReply(c, (void **)&t) != REDIS_OK) {
        if (h) freeReplyObject(h);
        return rl_error(err, RL_EREDIS, "reading heartbeat %s: %s", key, c->errstr);
    }
    long long pttl = t->type == REDIS_REPLY_INTEGER ? t->integer : -2;
    freeReplyObject(t);
    rlInstance in = {.hash = h, .age_s = INSTANCES_TTL_S - (double)pttl / 1000};
    int hash = h->type == REDIS_REPLY_ARRAY && h->elements > 0;
    const char *s = hash ? instances_field(&in, "stream") : NULL; /* absent: an older worker */
    if (pttl < 0 || !hash || (stream && s && strcmp(s, stream))) {
        freeReplyObject(h);
        return 0;
    }
    if (in.age_s < 0) in.age_s = 0;
    in.live = in.age_s <= INSTANCES_LIVE_S;
    if (*n == *cap) {
        int nc = *cap ? *cap * 2 : 16;
        rlInstance *p = realloc(*v, (size_t)nc * sizeof(*p));
        if (!p) {
            freeReplyObject(h);
            return rl_error(err, RL_EMEMORY, "out of memory reading heartbeats");
        }
        *v = p, *cap = nc;
    }
    if (!(in.consumer = strdup(key + strlen(KEYS_HEARTBEAT_PREFIX)))) {
        freeReplyObject(h);
        return rl_error(err, RL_EMEMORY, "out of memory reading heartbeats");
    }
    (*v)[(*n)++] = in;
    return 0;
}

int instances_read(redisContext *c, const char *stream, rlInstance **out, int *n_out, rlError *err) {
    rlInstance *v = NULL;
    int n = 0, cap = 0;
    unsigned long long cursor = 0;
    do {
        redisReply *r = redisCommand(c, "SCAN %llu MATCH " KEYS_HEARTBEAT_PREFIX "* COUNT 1000", cursor);
        int bad = !r || r->type != REDIS_REPLY_ARRAY || r->elements != 2;
        if (bad) rl_error(err, RL_EREDIS, "SCAN for heartbeats failed: %s", r && r->str ? r->str : c->errstr);
        for (size_t i = 0; !bad && i < r->element[1]->elements; i++)
            bad = instances_add(c, r->element[1]->element[i]->str, stream, &v, &n, &cap, err);
        if (!bad) cursor = strtoull(r->element[0]->str, NULL, 10);
        if (r) freeReplyObject(r);
        if (bad) {
            instances_free(v, n);
            return -1;
        }
    } while (cursor);
    *out = v;
    *n_out = n;
    return 0;
}

int instances_live(redisContext *c, const char *stream, rlError *err) {
    rlInstance *v;
    int n, live = 0;
    if (instances_read(c, stream, &v, &n, err)) return -1;
    for (int i = 0; i < n; i++) live += v[i].live;
    instances_free(v, n);
    return live;
}
