/* doctor_redis.c: Redis reachable, logged in and answering PING, each step
 * within 2 s so an unroutable address or a stuck server cannot hang the
 * check; the server's version, since every job write is a Redis function
 * (FUNCTION LOAD, new in Redis 7.0); and the keys the worker will use, each
 * of its type or absent (a key of another type stops the worker). */
#include <stdlib.h>
#include <string.h>

#include "worker/doctor/doctor.h"
#include "worker/lib/redis_url.h"

/* The worker's keys for job stream `stream` and dead letters `dead`: one
 * line for those of another type. */
static void doctor_check_keys(rlDoctor *d, redisContext *c, const char *stream, const char *dead) {
    char running[512];
    snprintf(running, sizeof(running), "%s:running", stream);
    const char *keys[3] = {stream, running, dead}, *want[3] = {"stream", "hash", "stream"};
    int bad = 0;
    for (int k = 0; k < 3; k++) {
        redisReply *r = redisCommand(c, "TYPE %s", keys[k]);
        if (r && r->type == REDIS_REPLY_STATUS && strcmp(r->str, "none") && strcmp(r->str, want[k])) {
            doctor_line(d, RL_DOC_FAIL, RL_EREDIS, "redis",
                        "%s holds a %s where the worker keeps a %s (another program uses the name, or "
                        "it is stale): DEL it, or give the pool other keys (--stream, --dead)",
                        keys[k], r->str, want[k]);
            bad = 1;
        }
        if (r) freeReplyObject(r);
    }
    if (!bad)
        doctor_line(d, RL_DOC_OK, 0, "redis", "%s, %s and %s are free or of their types", stream, running,
                    dead);
}

void doctor_check_redis(rlDoctor *d, const char *url, const char *stream, const char *dead) {
    rlRedisUrl u;
    rlError err = {0};
    if (redis_url_parse(url, &u, &err)) {
        doctor_line(d, RL_DOC_FAIL, err.code, "redis", "%s", err.msg);
        return;
    }
    redisContext *c = redis_url_connect(&u, (struct timeval){2, 0}, &err);
    if (!c) {
        doctor_line(d, RL_DOC_FAIL, RL_EREDIS, "redis",
                    "%s (checked with a 2 s limit); start Redis or pass --redis with the right "
                    "host and port", err.msg);
        return;
    }
    redisReply *r = redisCommand(c, "PING");
    if (!r || r->type == REDIS_REPLY_ERROR) {
        doctor_line(d, RL_DOC_FAIL, RL_EREDIS, "redis",
                    "%s:%d accepted the connection but PING failed: %s; check that it is a "
                    "Redis server and not another service on that port", u.host, u.port,
                    r ? r->str : c->errstr);
        if (r) freeReplyObject(r);
        redisFree(c);
        return;
    }
    freeReplyObject(r);
    char version[32] = "?";
    r = redisCommand(c, "INFO server");
    if (r && r->type == REDIS_REPLY_STRING) {
        const char *v = strstr(r->str, "redis_version:");
        if (v) sscanf(v + 14, "%31[0-9.]", version);
    }
    if (r) freeReplyObject(r);
    int major = 0;
    sscanf(version, "%d", &major);
    if (major && major < 7)
        doctor_line(d, RL_DOC_FAIL, RL_EREDIS, "redis",
                    "%s:%d runs Redis %s; redlm needs 7.0 or newer (its job writes are Redis "
                    "functions, FUNCTION LOAD and FCALL): upgrade the server", u.host, u.port, version);
    else
        doctor_line(d, RL_DOC_OK, 0, "redis", "%s:%d answers PING (Redis %s)", u.host, u.port,
                    version);
    doctor_check_keys(d, c, stream, dead);
    redisFree(c);
}
