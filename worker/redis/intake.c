/* intake.c: validating stream entries (see intake.h). */
#include "worker/redis/intake.h"
#include "worker/lib/now.h"
#include "worker/request/request_decode.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void intake_fail(const rlIntake *in, rlJob *job, rlItemList *items, const char *code,
                        const char *message) {
    if (in->metrics) metrics_count_error(in->metrics, code);
    if (items_fail(items, job, code, message))
        fprintf(stderr, "redlm worker: out of memory answering entry %s\n", job->entry);
}

rlRequest *intake_entry(const rlIntake *in, const redisReply *entry, int attempt, rlJob **jobp,
                        rlItemList *items) {
    *jobp = NULL;
    if (entry->type != REDIS_REPLY_ARRAY || entry->elements < 2 ||
        entry->element[0]->type != REDIS_REPLY_STRING)
        return NULL;
    const char *entry_id = entry->element[0]->str;
    const redisReply *fields = entry->element[1];
    if (fields->type != REDIS_REPLY_ARRAY) {
        /* deleted from the stream while pending: nothing to run or answer */
        rlJob *job = job_create(entry_id, NULL, 0, NULL, RL_ENC_JSON, attempt);
        if (job) items_ack(items, job);
        *jobp = job;
        return NULL;
    }
    int nf = (int)fields->elements;

    /* exactly one json or msgpack field */
    const redisReply *payload = NULL;
    rlEncoding enc = RL_ENC_JSON;
    int n_payloads = 0;
    for (int i = 0; i + 1 < nf; i += 2) {
        const redisReply *f = fields->element[i];
        rlEncoding e;
        if (f->type == REDIS_REPLY_STRING && !codec_field_encoding(f->str, (size_t)f->len, &e) &&
            fields->element[i + 1]->type == REDIS_REPLY_STRING && !n_payloads++) {
            payload = fields->element[i + 1];
            enc = e;
        }
    }
    char msg[RL_ERROR_LEN];
    rlDecoded d = {0};
    rlRequest *req = NULL;
    const char *code = NULL;
    if (n_payloads != 1) {
        code = "invalid_request";
        snprintf(msg, sizeof(msg), "entry %s has %d json/msgpack fields; a job entry has exactly one "
                 "(XADD %s '*' json '{...}')", entry_id, n_payloads, in->keys->stream);
        /* answered under the first id any of them gives */
        for (int i = 0; i + 1 < nf && !d.id; i += 2) {
            const redisReply *f = fields->element[i], *v = fields->element[i + 1];
            rlEncoding e;
            if (f->type != REDIS_REPLY_STRING || v->type != REDIS_REPLY_STRING ||
                codec_field_encoding(f->str, (size_t)f->len, &e))
                continue;
            request_decoded_free(&d);
            rlRequest *r = request_decode(e, v->str, (size_t)v->len, &d);
            if (r) request_free(r), free(r);
            enc = e;
        }
    } else if (!(req = request_decode(enc, payload->str, (size_t)payload->len, &d))) {
        code = d.code;
        snprintf(msg, sizeof(msg), "%s", d.err.msg);
    }
    /* the reply stream: reply_to under --reply-prefix, else the default one
     * (a refused reply_to is answered there) */
    char *reply_key = NULL, why[RL_ERROR_LEN];
    if (d.id && keys_reply_to(in->keys, d.id, d.reply_to, &reply_key, why)) {
        if (!code) {
            code = "invalid_request";
            snprintf(msg, sizeof(msg), "%s", why);
        }
        keys_reply_to(in->keys, d.id, NULL, &reply_key, why);
    }
    if (!code && attempt > in->max_deliveries) {
        code = "too_many_deliveries";
        snprintf(msg, sizeof(msg), "delivered %d times, more than --max-deliveries %d: the workers "
                 "that took it stopped before answering; it is not retried again", attempt, in->max_deliveries);
    } else if (!code && req->deadline_ms && now_wall_ms() > req->deadline_ms) {
        code = "deadline_exceeded";
        snprintf(msg, sizeof(msg), "deadline_ms %lld passed %lld ms before the job was read",
                 (long long)req->deadline_ms, (long long)(now_wall_ms() - req->deadline_ms));
    }
    rlJob *job = job_create(entry_id, d.id, d.id ? strlen(d.id) : 0, reply_key, enc, attempt);
    free(reply_key);
    request_decoded_free(&d);
    *jobp = job;
    if (req && (code || !job)) {
        request_free(req);
        free(req);
        req = NULL;
    }
    if (!job) return NULL;
    if (code) {
        intake_fail(in, job, items, code, msg);
        return NULL;
    }
    req->attempt = attempt;
    req->arrival_ms = now_wall_ms();
    req->user = job;
    return req;
}
