/* redis_url.c: parsing Redis URLs and logging in (see redis_url.h). */
#include "worker/lib/redis_url.h"
#include "worker/lib/now.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Copy [s, s+n) into dst, undoing %XX escapes (passwords often need them). */
static int redis_url_unescape(const char *s, size_t n, char *dst, size_t cap) {
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (c == '%' && i + 2 < n && isxdigit((unsigned char)s[i + 1]) &&
            isxdigit((unsigned char)s[i + 2])) {
            char hex[3] = {s[i + 1], s[i + 2], 0};
            c = (char)strtol(hex, NULL, 16);
            i += 2;
        }
        if (o + 1 >= cap) return -1;
        dst[o++] = c;
    }
    dst[o] = 0;
    return 0;
}

int redis_url_parse(const char *url, rlRedisUrl *u, rlError *err) {
    memset(u, 0, sizeof(*u));
    u->port = 6379;
    const char *p = url;
    if (!strncmp(p, "redis://", 8)) p += 8;
    else if (strstr(p, "://"))
        return rl_error(err, RL_EUSAGE,
                        "Redis URL '%s' has an unsupported scheme; use redis://[user:pass@]host:port[/db]", url);
    const char *at = strrchr(p, '@');
    if (at) {
        const char *colon = memchr(p, ':', (size_t)(at - p));
        const char *pass = colon ? colon + 1 : p;
        if (colon && redis_url_unescape(p, (size_t)(colon - p), u->user, sizeof(u->user)))
            return rl_error(err, RL_EUSAGE, "Redis URL '%s': user name too long", url);
        if (redis_url_unescape(pass, (size_t)(at - pass), u->pass, sizeof(u->pass)))
            return rl_error(err, RL_EUSAGE, "Redis URL '%s': password too long", url);
        p = at + 1;
    }
    size_t hl = strcspn(p, ":/");
    if (hl >= sizeof(u->host))
        return rl_error(err, RL_EUSAGE, "Redis URL '%s': host name too long", url);
    memcpy(u->host, hl ? p : "127.0.0.1", hl ? hl : 9);
    u->host[hl ? hl : 9] = 0;
    p += hl;
    if (*p == ':') {
        char *end;
        long port = strtol(p + 1, &end, 10);
        if (end == p + 1 || port < 1 || port > 65535 || (*end && *end != '/'))
            return rl_error(err, RL_EUSAGE, "Redis URL '%s': port must be a number from 1 to 65535", url);
        u->port = (int)port;
        p = end;
    }
    if (*p == '/' && p[1]) {
        char *end;
        long db = strtol(p + 1, &end, 10);
        if (end == p + 1 || *end || db < 0 || db > 1000000)
            return rl_error(err, RL_EUSAGE, "Redis URL '%s': database must be a number after the last '/'", url);
        u->db = (int)db;
    } else if (*p && strcmp(p, "/"))
        return rl_error(err, RL_EUSAGE, "Redis URL '%s': unexpected '%s'; use redis://[user:pass@]host:port[/db]",
                        url, p);
    return 0;
}

int redis_url_login(const rlRedisUrl *u, rlRedisLogin *l, char buf[16]) {
    int n = 0;
    if (u->pass[0]) {
        int k = 0;
        l->argv[n][k++] = "AUTH";
        if (u->user[0]) l->argv[n][k++] = u->user;
        l->argv[n][k++] = u->pass;
        l->argc[n++] = k;
    }
    if (u->db) {
        snprintf(buf, 16, "%d", u->db);
        l->argv[n][0] = "SELECT";
        l->argv[n][1] = buf;
        l->argc[n++] = 2;
    }
    return n;
}

void redis_url_refused(const rlRedisUrl *u, const char *command, const char *reply, char *msg, size_t cap) {
    if (!strcmp(command, "AUTH"))
        snprintf(msg, cap, "Redis at %s:%d refused the login of user '%s': %s; put the user's current "
                 "password in the URL (redis://%s:PASSWORD@%s:%d, %%-escaped; a rotated password "
                 "needs the new one) or fix the user's ACL", u->host, u->port,
                 u->user[0] ? u->user : "default", reply, u->user[0] ? u->user : "default", u->host, u->port);
    else
        snprintf(msg, cap, "Redis at %s:%d refused %s: %s; check the database number in the URL", u->host,
                 u->port, command, reply);
}

redisContext *redis_url_connect(const rlRedisUrl *u, struct timeval timeout, rlError *err) {
    redisContext *c = redisConnectWithTimeout(u->host, u->port, timeout);
    if (!c || c->err) {
        rl_error(err, RL_EREDIS, "cannot connect to Redis at %s:%d: %s; is redis-server running there?",
                 u->host, u->port, c ? c->errstr : "out of memory");
        if (c) redisFree(c);
        return NULL;
    }
    redisSetTimeout(c, timeout);
    rlRedisLogin l;
    char buf[16];
    int n = redis_url_login(u, &l, buf);
    for (int i = 0; i < n; i++) {
        redisReply *r = redisCommandArgv(c, l.argc[i], l.argv[i], NULL);
        if (!r || r->type == REDIS_REPLY_ERROR) {
            char msg[RL_ERROR_LEN];
            if (r) redis_url_refused(u, l.argv[i][0], r->str, msg, sizeof(msg));
            else snprintf(msg, sizeof(msg), "Redis at %s:%d: %s", u->host, u->port, c->errstr);
            rl_error(err, RL_EREDIS, "%s", msg);
            if (r) freeReplyObject(r);
            redisFree(c);
            return NULL;
        }
        freeReplyObject(r);
    }
    return c;
}

int redis_url_wait(const rlRedisUrl *u, int wait_s, rlError *err) {
    double end = now_s() + wait_s;
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
        if (now_s() >= end) break;
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
