/* cmd_status.c: `redlm status --redis URL`: what an operator asks first:
 * how long is the queue, is the group keeping up, which instances are alive
 * and how busy they are.  Read-only; safe to run against production. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "worker/commands.h"
#include "worker/lib/flags.h"
#include "worker/lib/redis_url.h"

/* Field `name` of a flat [k, v, k, v ...] reply, or NULL. */
static const redisReply *status_field(const redisReply *r, const char *name) {
    if (!r || r->type != REDIS_REPLY_ARRAY) return NULL;
    for (size_t i = 0; i + 1 < r->elements; i += 2)
        if (r->element[i]->type == REDIS_REPLY_STRING && !strcmp(r->element[i]->str, name))
            return r->element[i + 1];
    return NULL;
}

static void status_print_value(const redisReply *v) {
    if (!v || v->type == REDIS_REPLY_NIL) printf("%-10s", "-");
    else if (v->type == REDIS_REPLY_INTEGER) printf("%-10lld", v->integer);
    else printf("%-10s", v->str);
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
    if (!r || r->type != REDIS_REPLY_INTEGER) {
        fprintf(stderr, "redlm status: XLEN %s failed: %s\n", stream, r ? r->str : c->errstr);
        if (r) freeReplyObject(r);
        redisFree(c);
        return RL_EREDIS;
    }
    printf("stream %s: %lld entries\n", stream, r->integer);
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

    printf("\n%-28s %-10s %-10s %-10s %-10s %-16s %s\n", "instance", "running", "waiting",
           "tokens/s", "layout", "quantization", "model");
    unsigned long long cursor = 0;
    int rows = 0;
    do {
        r = redisCommand(c, "SCAN %llu MATCH redlm:instances:* COUNT 1000", cursor);
        if (!r || r->type != REDIS_REPLY_ARRAY || r->elements != 2) break;
        cursor = strtoull(r->element[0]->str, NULL, 10);
        for (size_t i = 0; i < r->element[1]->elements; i++) {
            const char *key = r->element[1]->element[i]->str;
            redisReply *h = redisCommand(c, "HGETALL %s", key);
            if (h && h->type == REDIS_REPLY_ARRAY) {
                printf("%-28s ", key + strlen("redlm:instances:"));
                status_print_value(status_field(h, "running"));
                printf(" ");
                status_print_value(status_field(h, "waiting"));
                printf(" ");
                status_print_value(status_field(h, "tokens_per_s"));
                printf(" ");
                status_print_value(status_field(h, "layout"));
                const redisReply *q = status_field(h, "quantization");
                printf(" %-16s", q ? q->str : "-");
                const redisReply *m = status_field(h, "served_model_name");
                if (!m) m = status_field(h, "model");
                printf(" %s\n", m ? m->str : "-");
                rows++;
            }
            if (h) freeReplyObject(h);
        }
        freeReplyObject(r);
        r = NULL;
    } while (cursor);
    if (r) freeReplyObject(r);
    if (!rows) printf("(no live instances)\n");
    redisFree(c);
    return 0;
}
