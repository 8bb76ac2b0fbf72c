/* item.c: jobs and the Redis writes they owe (see item.h). */
#include "worker/redis/item.h"

#include <jansson.h>

#include "worker/engine/output.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

rlJob *job_create(const char *entry, const char *id, size_t id_len, const char *reply_to,
                  rlEncoding enc, const char *payload, size_t payload_len, int attempt) {
    rlJob *j = calloc(1, sizeof(*j));
    if (!j) return NULL;
    snprintf(j->entry, sizeof(j->entry), "%s", entry);
    j->enc = enc;
    j->attempt = attempt;
    if (payload) {
        j->payload = malloc(payload_len + 1);
        if (!j->payload) {
            free(j);
            return NULL;
        }
        memcpy(j->payload, payload, payload_len);
        j->payload_len = payload_len;
    }
    if (id) {
        j->id = strndup(id, id_len);
        if (reply_to) j->reply_to = strdup(reply_to);
        else if (j->id && (j->reply_to = malloc(id_len + 14)))
            snprintf(j->reply_to, id_len + 14, "redlm:reply:%s", j->id);
        if (!j->id || !j->reply_to) {
            job_free(j);
            return NULL;
        }
    }
    return j;
}

void job_free(rlJob *j) {
    if (!j) return;
    free(j->id);
    free(j->reply_to);
    free(j->payload);
    if (j->pending)
        for (int i = 0; i < j->n_samples; i++) json_decref(j->pending[i]);
    free(j->pending);
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

int items_event(rlItemList *out, rlJob *job, const json_t *event) {
    char *buf;
    size_t len;
    if (!job->reply_to || codec_encode(job->enc, event, &buf, &len, NULL)) return -1;
    const char *field = codec_field_name(job->enc);
    const char *argv[5] = {"XADD", job->reply_to, "*", field, buf};
    size_t lens[5] = {4, strlen(job->reply_to), 1, strlen(field), len};
    rlItem *it = item_create(RL_ITEM_REPLY, job, 5, argv, lens);
    free(buf);
    if (!it) return -1;
    items_push(out, it);
    return 0;
}

int items_ack(rlItemList *out, const rlKeys *k, rlJob *job) {
    const char *argv[4] = {"XACK", k->stream, k->group, job->entry};
    size_t lens[4] = {4, strlen(k->stream), strlen(k->group), strlen(job->entry)};
    rlItem *it = item_create(RL_ITEM_ACK, job, 4, argv, lens);
    if (!it) return -1;
    items_push(out, it);
    return 0;
}

int items_abort(rlItemList *out, const rlKeys *k, rlJob *job, const rlRequest *req) {
    for (int i = 0; i < (req->n > 0 ? req->n : 1); i++) {
        rlOutput o = {.kind = RL_OUT_DONE, .req = req, .index = i, .text = "", .finish = RL_FINISH_ABORT,
                      .prompt_tokens = req->n_prompt_ids};
        json_t *ev = output_event(&o, job->seq++);
        int bad = !ev || items_event(out, job, ev);
        json_decref(ev);
        if (bad) return -1;
    }
    return items_ack(out, k, job);
}

int items_fail(rlItemList *out, const rlKeys *k, rlJob *job, int n_fields, const char *const *fields,
               const size_t *field_lens, const char *code, const char *message) {
    json_t *err = json_pack("{s:s, s:s}", "code", code, "message", message);
    if (!err) return -1;
    if (job->id) {
        rlRequest req = {.id = job->id, .attempt = job->attempt};
        rlOutput o = {.kind = RL_OUT_ERROR, .req = &req, .error_code = code, .error_message = message};
        json_t *ev = output_event(&o, job->seq);
        int bad = !ev || items_event(out, job, ev);
        json_decref(ev);
        if (bad) {
            json_decref(err);
            return -1;
        }
    }
    char *err_s = json_dumps(err, JSON_COMPACT);
    json_decref(err);
    char attempt[16];
    snprintf(attempt, sizeof(attempt), "%d", job->attempt);
    /* the entry's fields, then what went wrong and where */
    int argc = 3 + n_fields + 10;
    const char **argv = malloc((size_t)argc * sizeof(*argv));
    size_t *lens = malloc((size_t)argc * sizeof(*lens));
    rlItem *it = NULL;
    if (err_s && argv && lens) {
        int a = 0;
#define ARG(s, n) (argv[a] = (s), lens[a++] = (n))
        ARG("XADD", 4);
        ARG(k->dead, strlen(k->dead));
        ARG("*", 1);
        for (int i = 0; i < n_fields; i++) ARG(fields[i], field_lens[i]);
        ARG("error", 5);
        ARG(err_s, strlen(err_s));
        ARG("stream", 6);
        ARG(k->stream, strlen(k->stream));
        ARG("entry", 5);
        ARG(job->entry, strlen(job->entry));
        ARG("consumer", 8);
        ARG(k->consumer, strlen(k->consumer));
        ARG("attempt", 7);
        ARG(attempt, strlen(attempt));
#undef ARG
        it = item_create(RL_ITEM_DEAD, job, a, argv, lens);
    }
    free(argv);
    free(lens);
    free(err_s);
    if (!it) return -1;
    items_push(out, it);
    return items_ack(out, k, job);
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
