/* doctor_redis.c: Redis reachable, logged in and answering PING, each step
 * within 2 s so an unroutable address or a stuck server cannot hang the
 * check; also the server's version, since the worker takes over a dead
 * consumer's jobs with XPENDING ... IDLE, new in Redis 6.2. */
#include <stdlib.h>
#include <string.h>

#include "worker/doctor/doctor.h"
#include "worker/lib/redis_url.h"

void doctor_check_redis(rlDoctor *d, const char *url) {
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
    redisFree(c);
    int major = 0, minor = 0;
    sscanf(version, "%d.%d", &major, &minor);
    if (major && (major < 6 || (major == 6 && minor < 2)))
        doctor_line(d, RL_DOC_FAIL, RL_EREDIS, "redis",
                    "%s:%d runs Redis %s; redlm needs 6.2 or newer (XPENDING with IDLE): "
                    "upgrade the server", u.host, u.port, version);
    else
        doctor_line(d, RL_DOC_OK, 0, "redis", "%s:%d answers PING (Redis %s)", u.host, u.port,
                    version);
}
