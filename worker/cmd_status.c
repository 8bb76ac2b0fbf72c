/* cmd_status.c: `redlm status --redis URL`: what an operator asks first:
 * how long is the queue, is the group keeping up, which instances are alive
 * and how busy they are, and which stopped beating (a crash leaves no other
 * trace).  Read-only; safe to run against production. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "worker/commands.h"
#include "worker/lib/flags.h"
#include "worker/lib/redis_url.h"
#include "worker/redis/instances.h"

/* Field `name` of a flat [k, v, k, v ...] reply, or NULL. */
static const redisReply *status_field(const redisReply *r, const char *name) {
    if (!r || r->type != REDIS_REPLY_ARRAY) return NULL;
    for (size_t i = 0; i + 1 < r->elements; i += 2)
        if (r->element[i]->type == REDIS_REPLY_STRING && !strcmp(r->element[i]->str, name))
            return r->element[i + 1];
    return NULL;
}

/* Text read from Redis, in a column of width w, at most max bytes of it:
 * a control character (an ESC or a newline in a broken or hostile
 * heartbeat would repaint the terminal or forge a row) shows as '?'. */
static void status_cell(const char *s, int w, size_t max) {
    char buf[256];
    size_t n = 0;
    if (max > sizeof(buf) - 1) max = sizeof(buf) - 1;
    for (; s[n] && n < max; n++)
        buf[n] = (unsigned char)s[n] < 0x20 || s[n] == 0x7f ? '?' : s[n];
    if (s[n])   /* cut: not inside a UTF-8 sequence */
        while (n > 0 && ((unsigned char)s[n] & 0xc0) == 0x80) n--;
    buf[n] = 0;
    printf("%-*s", w, buf);
}

static void status_print_value(const redisReply *v) {
    if (!v || v->type == REDIS_REPLY_NIL) printf("%-10s", "-");
    else if (v->type == REDIS_REPLY_INTEGER) printf("%-10lld", v->integer);
    else status_cell(v->str ? v->str : "?", 10, 24);
}

static int status_by_name(const void *a, const void *b) {
    return strcmp(((const rlInstance *)a)->consumer, ((const rlInstance *)b)->consumer);
}

int cmd_status(int argc, char **argv) {
    const char *url_s = NULL, *stream = "redlm:jobs", *group = "redlm";
    rlFlags fs;
    flags_init(&fs, "status", "usage: redlm status --redis URL [options]\n");
    flags_string(&fs, "--redis", &url_s, "URL", "redis://[user:pass@]host:port[/db]")->required = 1;
    flags_string(&fs, "--stream", &stream, "KEY", "job stream (default redlm:jobs)");
    flags_string(&fs, "--group", &group, "NAME", "consumer group (default redlm)");
    int rc = flags_main(&fs, argc, argv);
    if (rc >= 0) return rc;
    rlRedisUrl url;
    rlError err;
    redisContext *c;
    struct timeval tv = {5, 0};
    if (redis_url_parse(url_s, &url, &err) || !(c = redis_url_connect(&url, tv, &err))) {
        fprintf(stderr, "redlm status: %s\n", err.msg);
        return err.code;
    }
    redisReply *r = redisCommand(c, "XLEN %s", stream);
    if (r && r->type == REDIS_REPLY_ERROR && !strncmp(r->str, "WRONGTYPE", 9)) {
        fprintf(stderr, "redlm status: %s is not a stream (its key holds another type); give --stream "
                "the job stream's key\n", stream);
        freeReplyObject(r);
        redisFree(c);
        return RL_EUSAGE;
    }
    if (!r || r->type != REDIS_REPLY_INTEGER) {
        fprintf(stderr, "redlm status: XLEN %s failed: %s\n", stream, r ? r->str : c->errstr);
        if (r) freeReplyObject(r);
        redisFree(c);
        return RL_EREDIS;
    }
    printf("stream %s: %lld entr%s\n", stream, r->integer, r->integer == 1 ? "y" : "ies");
    freeReplyObject(r);

    r = redisCommand(c, "XINFO GROUPS %s", stream);
    int found = 0;
    if (r && r->type == REDIS_REPLY_ARRAY)
        for (size_t i = 0; i < r->elements; i++) {
            const redisReply *name = status_field(r->element[i], "name");
            if (!name || strcmp(name->str, group)) continue;
            found = 1;
            printf("group %s: pending ", group);
            status_print_value(status_field(r->element[i], "pending"));
            printf(" lag ");
            status_print_value(status_field(r->element[i], "lag"));
            printf(" consumers ");
            status_print_value(status_field(r->element[i], "consumers"));
            printf("\n");
        }
    if (!found) printf("group %s: not created yet (no worker has started on %s)\n", group, stream);
    if (r) freeReplyObject(r);

    rlInstance *v;
    int n;
    if (instances_read(c, stream, &v, &n, &err)) {
        fprintf(stderr, "redlm status: %s\n", err.msg);
        redisFree(c);
        return err.code;
    }
    int live = 0;
    for (int i = 0; i < n; i++) live += v[i].live;
    if (n) qsort(v, (size_t)n, sizeof(*v), status_by_name);
    printf("\nlive instances on %s: %d\n", stream, live);
    if (live)
        printf("%-28s %-10s %-10s %-10s %-10s %-10s %-16s %s\n", "instance", "state", "running", "waiting",
               "tokens/s", "layout", "quantization", "model");
    for (int i = 0; i < n; i++) {
        if (!v[i].live) continue;
        status_cell(v[i].consumer, 28, 64);
        static const char *const cols[] = {"state", "running", "waiting", "tokens_per_s", "layout"};
        for (int k = 0; k < 5; k++) {
            const char *x = instances_field(&v[i], cols[k]);
            printf(" ");
            status_cell(x ? x : "-", 10, 24);
        }
        const char *q = instances_field(&v[i], "quantization");
        printf(" ");
        status_cell(q ? q : "-", 16, 32);
        const char *m = instances_field(&v[i], "served_model_name");
        if (!m) m = instances_field(&v[i], "model");
        printf(" ");
        status_cell(m ? m : "-", 0, 200);
        printf("\n");
    }
    for (int i = 0; i < n; i++) {
        const char *why = instances_field(&v[i], "held");
        if (!v[i].live || !why || !why[0]) continue;
        printf("  ");
        status_cell(v[i].consumer, 0, 64);
        printf(" holds: Redis refuses its writes (");
        status_cell(why, 0, 400);
        printf("); it answers and acknowledges no job until they are allowed\n");
    }
    if (n > live) {
        printf("\ndead instances (no heartbeat for over %.0f s; listed until %d s after the last):\n",
               INSTANCES_LIVE_S, INSTANCES_TTL_S);
        for (int i = 0; i < n; i++) {
            if (v[i].live) continue;
            const char *pid = instances_field(&v[i], "pid");
            status_cell(v[i].consumer, 28, 64);
            printf(" last heartbeat %.0f s ago (pid ", v[i].age_s);
            status_cell(pid ? pid : "-", 0, 24);
            printf(")\n");
        }
    }
    instances_free(v, n);
    redisFree(c);
    return 0;
}
