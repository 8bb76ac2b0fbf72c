/* rconn.c: a self-reconnecting hiredis async connection on libev (rconn.h).
 *
 * The backoff is reset only once a login has succeeded: a connection that
 * Redis accepts and then refuses (a rotated password) keeps doubling its
 * wait instead of retrying many times a second. */
#include "worker/redis/rconn.h"

#include <hiredis/adapters/libev.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/error.h"

/* Backoff starts short so a restarted redis-server is picked up within a
 * fraction of a second, and stops at 2 s so a long outage costs little. */
#define RCONN_BACKOFF_MIN 0.05
#define RCONN_BACKOFF_MAX 2.0
/* A graceful close waits this long for the replies still due (a stopping
 * worker's hand-back): a frozen or unreachable Redis must not keep a
 * stopping worker alive past its --drain-timeout for ever. */
#define RCONN_CLOSE_S 5.0

struct rlConn {
    struct ev_loop *loop;
    rlRedisUrl url;
    char name[32];
    rlConnHooks h;
    redisAsyncContext *ac;   /* connecting or connected */
    int up;                  /* connected and logged in */
    int logins;              /* login answers still to come */
    int closing;
    double backoff;
    double refused_since;    /* first refused login of the current run, 0: none */
    ev_timer retry;
    ev_timer close_wait;     /* a graceful close's bound */
    int lost_logged;
    int waiting_logged;      /* "does not serve yet" was said for this wait */
    int hold_backoff;        /* the next login keeps the backoff (rconn_retry) */
};

static void rconn_connect(rlConn *c);

static void rconn_schedule(rlConn *c) {
    if (c->closing) {
        ev_timer_stop(c->loop, &c->close_wait);
        free(c);
        return;
    }
    ev_timer_set(&c->retry, c->backoff, 0.);
    ev_timer_start(c->loop, &c->retry);
    c->backoff = c->backoff * 2 > RCONN_BACKOFF_MAX ? RCONN_BACKOFF_MAX : c->backoff * 2;
}

static void rconn_on_retry(struct ev_loop *loop, ev_timer *w, int revents) {
    (void)loop, (void)revents;
    rconn_connect(w->data);
}

static void rconn_on_close_wait(struct ev_loop *loop, ev_timer *w, int revents) {
    (void)loop, (void)revents;
    rlConn *c = w->data;
    fprintf(stderr, "redlm worker: Redis at %s:%d did not answer the %s connection's last commands "
            "within %.0f s; closing it without them\n", c->url.host, c->url.port, c->name, RCONN_CLOSE_S);
    redisAsyncFree(c->ac); /* the disconnect callback frees c */
}

static void rconn_up(rlConn *c) {
    if (c->lost_logged)
        fprintf(stderr, "redlm worker: Redis at %s:%d is back (%s connection)\n", c->url.host, c->url.port,
                c->name);
    c->lost_logged = 0;
    if (!c->hold_backoff) c->backoff = RCONN_BACKOFF_MIN;
    c->hold_backoff = 0;
    c->refused_since = 0;
    c->up = 1;
    c->h.ready(c, c->h.ctx);
}

/* Redis answers before it serves: while it loads its data set after a
 * restart (or waits for its master), every command is refused.  A
 * connection is up only once a PING is answered; until then it is closed
 * and retried with the backoff, so no write is refused for it. */
int rconn_transient(const redisReply *r) {
    static const char *const words[] = {"LOADING", "OOM", "BUSY", "TRYAGAIN", "MASTERDOWN", "READONLY", NULL};
    for (const char *const *w = words; r && r->type == REDIS_REPLY_ERROR && *w; w++) {
        size_t n = strlen(*w);
        if (!strncmp(r->str, *w, n) && (r->str[n] == ' ' || !r->str[n])) return 1;
    }
    return 0;
}

static void rconn_on_ping(redisAsyncContext *ac, void *r, void *priv) {
    rlConn *c = priv;
    redisReply *reply = r;
    if (!reply || c->closing) return;
    if (rconn_transient(reply)) {
        if (!c->waiting_logged)
            fprintf(stderr, "redlm worker: Redis at %s:%d does not serve yet (%s); waiting\n", c->url.host,
                    c->url.port, reply->str);
        c->waiting_logged = 1;
        redisAsyncDisconnect(ac);
        return;
    }
    c->waiting_logged = 0;
    rconn_up(c);
}

static void rconn_ping(rlConn *c) { redisAsyncCommand(c->ac, rconn_on_ping, c, "PING"); }

static void rconn_on_login(redisAsyncContext *ac, void *r, void *priv) {
    rlConn *c = priv;
    redisReply *reply = r;
    if (!reply || c->closing) return;
    if (reply->type == REDIS_REPLY_ERROR) {
        char msg[RL_ERROR_LEN];
        /* answers come in order: AUTH first when there is a password */
        int first = c->logins == (c->url.pass[0] ? 1 : 0) + (c->url.db ? 1 : 0);
        const char *cmd = first && c->url.pass[0] ? "AUTH" : "SELECT";
        redis_url_refused(&c->url, cmd, reply->str, msg, sizeof(msg));
        double now = ev_now(c->loop);
        if (!c->refused_since) {
            c->refused_since = now;
            fprintf(stderr, "redlm worker: %s connection: %s\n", c->name, msg);
        }
        c->logins = -1; /* the answers still to come change nothing */
        if (c->h.refused && now - c->refused_since >= c->h.give_up_s) c->h.refused(c, c->h.ctx, msg);
        else redisAsyncDisconnect(ac);
        return;
    }
    if (c->logins > 0 && --c->logins == 0) rconn_ping(c);
}

static void rconn_on_connect(const redisAsyncContext *ac, int status) {
    rlConn *c = ac->data;
    if (status != REDIS_OK) {
        if (!c->lost_logged)
            fprintf(stderr, "redlm worker: cannot reach Redis at %s:%d (%s); retrying\n", c->url.host,
                    c->url.port, ac->errstr);
        c->lost_logged = 1;
        c->ac = NULL; /* hiredis frees it after this callback */
        rconn_schedule(c);
        return;
    }
    redisEnableKeepAlive((redisContext *)&ac->c);
    rlRedisLogin l;
    char buf[16];
    int n = redis_url_login(&c->url, &l, buf);
    c->logins = n;
    for (int i = 0; i < n; i++)
        redisAsyncCommandArgv(c->ac, rconn_on_login, c, l.argc[i], l.argv[i], NULL);
    if (!n) rconn_ping(c);
}

static void rconn_on_disconnect(const redisAsyncContext *ac, int status) {
    rlConn *c = ac->data;
    int was_up = c->up;
    c->ac = NULL;
    c->up = 0;
    if (!c->closing && status != REDIS_OK && !c->lost_logged) {
        fprintf(stderr, "redlm worker: lost the %s connection to Redis at %s:%d (%s); reconnecting\n",
                c->name, c->url.host, c->url.port, ac->errstr);
        c->lost_logged = 1;
    }
    if (was_up && !c->closing) c->h.lost(c, c->h.ctx);
    rconn_schedule(c);
}

static void rconn_connect(rlConn *c) {
    redisAsyncContext *ac = redisAsyncConnect(c->url.host, c->url.port);
    if (!ac || ac->err) {
        if (!c->lost_logged)
            fprintf(stderr, "redlm worker: cannot connect to Redis at %s:%d (%s); retrying\n", c->url.host,
                    c->url.port, ac ? ac->errstr : "out of memory");
        c->lost_logged = 1;
        if (ac) redisAsyncFree(ac);
        rconn_schedule(c);
        return;
    }
    ac->data = c;
    c->ac = ac;
    redisLibevAttach(c->loop, ac);
    redisAsyncSetConnectCallback(ac, rconn_on_connect);
    redisAsyncSetDisconnectCallback(ac, rconn_on_disconnect);
}

rlConn *rconn_create(struct ev_loop *loop, const rlRedisUrl *url, const char *name, const rlConnHooks *hooks) {
    rlConn *c = calloc(1, sizeof(*c));
    if (!c) return NULL;
    c->loop = loop;
    c->url = *url;
    snprintf(c->name, sizeof(c->name), "%s", name);
    c->h = *hooks;
    c->backoff = RCONN_BACKOFF_MIN;
    ev_timer_init(&c->retry, rconn_on_retry, 0., 0.);
    c->retry.data = c;
    ev_timer_init(&c->close_wait, rconn_on_close_wait, RCONN_CLOSE_S, 0.);
    c->close_wait.data = c;
    rconn_connect(c);
    return c;
}

redisAsyncContext *rconn_ctx(rlConn *c) { return c->up ? c->ac : NULL; }

void rconn_reset(rlConn *c) {
    if (c->ac) redisAsyncDisconnect(c->ac);
}

void rconn_retry(rlConn *c) {
    c->hold_backoff = 1;
    rconn_reset(c);
}

void rconn_close(rlConn *c, int now) {
    c->closing = 1;
    ev_timer_stop(c->loop, &c->retry);
    if (!c->ac) free(c);
    else if (!(c->ac->c.flags & REDIS_CONNECTED))
        redisAsyncFree(c->ac), free(c); /* still connecting: no callback will come */
    else if (now) redisAsyncFree(c->ac); /* the disconnect callback frees c */
    else {
        ev_timer_start(c->loop, &c->close_wait);
        redisAsyncDisconnect(c->ac);
    }
}
