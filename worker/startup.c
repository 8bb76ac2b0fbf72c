/* startup.c: start-up checks (see startup.h). */
#include "startup.h"

#include <string.h>
#include <time.h>
#include <unistd.h>

static double startup_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

int startup_wait_redis(const rlRedisUrl *u, int wait_s, rlError *err) {
    double end = startup_now() + wait_s;
    for (;;) {
        redisContext *c = redis_url_connect(u, (struct timeval){2, 0}, err);
        if (c) {
            redisReply *r = redisCommand(c, "PING");
            int ok = r && r->type != REDIS_REPLY_ERROR;
            if (!ok)
                rl_error(err, RL_EREDIS, "Redis at %s:%d accepted the connection but PING "
                         "failed: %s", u->host, u->port, r ? r->str : c->errstr);
            if (r) freeReplyObject(r);
            redisFree(c);
            if (ok) return 0;
        }
        if (startup_now() >= end) break;
        sleep(1);
    }
    char last[1024];
    memcpy(last, err->msg, sizeof(last) - 1);
    last[sizeof(last) - 1] = 0;
    return rl_error(err, RL_EREDIS,
                    "%s (gave up after %d s at start, --redis-wait); start redis-server there or "
                    "pass the right --redis URL (`redlm doctor --redis URL` checks it)",
                    last, wait_s);
}
