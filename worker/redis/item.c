/* item.c: jobs and the Redis writes they owe (see item.h). */
#include "worker/redis/item.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/error.h"
#include "worker/engine/output.h"
#include "worker/request/request.h"

int keys_reply_to(const rlKeys *k, const char *id, const char *reply_to, char **key, char *why) {
    size_t pl = strlen(k->reply_prefix);
    *key = NULL;
    if (reply_to) {
        if (strncmp(reply_to, k->reply_prefix, pl) || !reply_to[pl]) {
            snprintf(why, RL_ERROR_LEN, "reply_to '%.200s' is %s the reply prefix '%s' (--reply-prefix); "
                     "name a stream such as '%sclient-1', or leave reply_to out for '%s<id>'",
                     reply_to, strncmp(reply_to, k->reply_prefix, pl) ? "not under" : "only", k->reply_prefix,
                     k->reply_prefix, k->reply_prefix);
            return -1;
        }
        if (!(*key = strdup(reply_to))) goto oom;
    } else {
        size_t n = pl + strlen(id) + 1;
        if (!(*key = malloc(n))) goto oom;
        snprintf(*key, n, "%s%s", k->reply_prefix, id);
    }
    const char *own[] = {k->stream, k->dead, k->cancel, k->running};
    for (size_t i = 0; i < sizeof(own) / sizeof(own[0]); i++)
        if (own[i] && !strcmp(*key, own[i])) {
            snprintf(why, RL_ERROR_LEN, "reply stream '%.200s' is one of the worker's own streams; "
                     "reply_to must name a stream of its own", *key);
            free(*key);
            *key = NULL;
            return -1;
        }
    return 0;
oom:
    snprintf(why, RL_ERROR_LEN, "out of memory");
    return -1;
}

rlJob *job_create(const char *entry, const char *id, size_t id_len, const char *reply_to,
                  rlEncoding enc, int attempt) {
    rlJob *j = calloc(1, sizeof(*j));
    if (!j) return NULL;
    snprintf(j->entry, sizeof(j->entry), "%s", entry);
    j->enc = enc;
    j->attempt = attempt;
    if ((id && !(j->id = strndup(id, id_len))) || (reply_to && !(j->reply_to = strdup(reply_to)))) {
        job_free(j);
        return NULL;
    }
    return j;
}

void job_free(rlJob *j) {
    if (!j) return;
    free(j->id);
    free(j->reply_to);
    if (j->req) {
        request_free(j->req);
        free(j->req);
    }
    free(j);
}

rlItem *item_create(rlItemKind kind, rlJob *job, int argc, const char *const *argv,
                    const size_t *argvlen) {
    size_t bytes = sizeof(rlItem) + (size_t)argc * (sizeof(char *) + sizeof(size_t));
    for (int i = 0; i < argc; i++) bytes += argvlen[i] + 1;
    rlItem *it = malloc(bytes);
    if (!it) return NULL;
    it->next = NULL;
    it->kind = kind;
    it->job = job;
    it->argc = argc;
    it->argv = (char **)(it + 1);
    it->argvlen = (size_t *)(it->argv + argc);
    char *p = (char *)(it->argvlen + argc);
    for (int i = 0; i < argc; i++) {
        memcpy(p, argv[i], argvlen[i]);
        p[argvlen[i]] = 0;
        it->argv[i] = p;
        it->argvlen[i] = argvlen[i];
        p += argvlen[i] + 1;
    }
    return it;
}

void item_free(rlItem *it) { free(it); }

size_t item_bytes(const rlItem *it) {
    size_t b = sizeof(*it);
    for (int i = 0; i < it->argc; i++) b += it->argvlen[i] + 1 + sizeof(char *) + sizeof(size_t);
    return b;
}

/* <op> <entry> <attempt> <job id> <extra...>: one operation of
 * functions.c's redlm_batch, which the writer sends in runs. */
static int items_op(rlItemList *out, rlItemKind kind, rlJob *job, const char *op, int n_extra,
                    const char *const *extra, const size_t *extra_len) {
    enum { MAX = 8 };
    const char *argv[MAX];
    size_t len[MAX];
    char attempt[16];
    snprintf(attempt, sizeof(attempt), "%d", job->attempt);
    int a = 0;
#define ARG(s) (argv[a] = (s), len[a++] = strlen(s))
    ARG(op);
    ARG(job->entry);
    ARG(attempt);
    ARG(job->id ? job->id : "");
#undef ARG
    for (int i = 0; i < n_extra && a < MAX; i++, a++) argv[a] = extra[i], len[a] = extra_len[i];
    rlItem *it = item_create(kind, job, a, argv, len);
    if (!it) return -1;
    items_push(out, it);
    return 0;
}

int items_start(rlItemList *out, rlJob *job) {
    return items_op(out, RL_ITEM_START, job, "start", 0, NULL, NULL);
}

int items_event(rlItemList *out, rlJob *job, const json_t *event) {
    char *buf;
    size_t len;
    if (!job->reply_to || codec_encode(job->enc, event, &buf, &len, NULL)) return -1;
    const char *field = codec_field_name(job->enc);
    const char *extra[3] = {job->reply_to, field, buf};
    size_t lens[3] = {strlen(job->reply_to), strlen(field), len};
    int rc = items_op(out, RL_ITEM_REPLY, job, "reply", 3, extra, lens);
    free(buf);
    return rc;
}

int items_ack(rlItemList *out, rlJob *job) {
    return items_op(out, RL_ITEM_ACK, job, "ack", 0, NULL, NULL);
}

int items_abort(rlItemList *out, rlJob *job, const rlRequest *req) {
    for (int i = 0; i < (req->n > 0 ? req->n : 1); i++) {
        rlOutput o = {.kind = RL_OUT_DONE, .req = req, .index = i, .text = "", .finish = RL_FINISH_ABORT,
                      .prompt_tokens = req->n_prompt_ids};
        json_t *ev = output_event(&o, job->seq++);
        int bad = !ev || items_event(out, job, ev);
        json_decref(ev);
        if (bad) return -1;
    }
    return items_ack(out, job);
}

int items_fail(rlItemList *out, rlJob *job, const char *code, const char *message) {
    if (job->reply_to) {
        rlRequest req = {.id = job->id, .attempt = job->attempt};
        rlOutput o = {.kind = RL_OUT_ERROR, .req = &req, .error_code = code, .error_message = message};
        json_t *ev = output_event(&o, job->seq);
        int bad = !ev || items_event(out, job, ev);
        json_decref(ev);
        if (bad) return -1;
    }
    json_t *err = json_pack("{s:s, s:s}", "code", code, "message", message);
    char *err_s = err ? json_dumps(err, JSON_COMPACT) : NULL;
    json_decref(err);
    if (!err_s) return -1;
    const char *extra[1] = {err_s};
    size_t len[1] = {strlen(err_s)};
    int rc = items_op(out, RL_ITEM_ACK, job, "fail", 1, extra, len);
    free(err_s);
    return rc;
}

void items_push(rlItemList *l, rlItem *it) {
    it->next = NULL;
    if (l->tail) l->tail->next = it;
    else l->head = it;
    l->tail = it;
    l->n++;
}

void items_append(rlItemList *l, rlItemList *from) {
    if (!from->head) return;
    if (l->tail) l->tail->next = from->head;
    else l->head = from->head;
    l->tail = from->tail;
    l->n += from->n;
    from->head = from->tail = NULL;
    from->n = 0;
}

rlItem *items_pop(rlItemList *l) {
    rlItem *it = l->head;
    if (!it) return NULL;
    l->head = it->next;
    if (!l->head) l->tail = NULL;
    l->n--;
    it->next = NULL;
    return it;
}
