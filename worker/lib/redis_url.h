/* redis_url.h: where Redis is, as `redis://[user:pass@]host[:port][/db]`.
 *
 * One parser shared by `redlm worker`, `submit`, `status` and `doctor`, and
 * the commands every new connection must send first (AUTH, SELECT), so the
 * synchronous tools and the asynchronous worker log in the same way.  It
 * lives in lib/ because two sibling rooms need it: redis/ (the worker's
 * connections) and doctor/ (checking the Redis a start will use). */
#ifndef RL_REDIS_URL_H
#define RL_REDIS_URL_H

#include <hiredis/hiredis.h>
#include <sys/time.h>

#include "kernels/error.h"

typedef struct rlRedisUrl {
    char host[256];
    int port;              /* default 6379 */
    char user[128];        /* empty: no ACL user (AUTH pass) */
    char pass[256];        /* empty: no AUTH */
    int db;                /* default 0 */
} rlRedisUrl;

int redis_url_parse(const char *url, rlRedisUrl *u, rlError *err);

/* Connect synchronously, log in and select the database. */
redisContext *redis_url_connect(const rlRedisUrl *u, struct timeval timeout, rlError *err);

/* The message for a refused login command (AUTH or SELECT): names the
 * URL's user, never its password, and says what to change. */
void redis_url_refused(const rlRedisUrl *u, const char *command, const char *reply, char *msg, size_t cap);

/* Redis answers PING within wait_s seconds (at least one attempt, each
 * connect limited to 2 s): a worker started beside its Redis (compose,
 * systemd) may come up first, but one pointed at the wrong address must
 * not retry forever.  RL_EREDIS with the address and the last error. */
int redis_url_wait(const rlRedisUrl *u, int wait_s, rlError *err);

/* The AUTH and SELECT commands a fresh connection needs, as argv vectors:
 * fills up to two commands and returns how many (0..2).  The strings point
 * into u and buf (16 bytes for the db number). */
typedef struct rlRedisLogin {
    int argc[2];
    const char *argv[2][3];
} rlRedisLogin;
int redis_url_login(const rlRedisUrl *u, rlRedisLogin *l, char buf[16]);

#endif
