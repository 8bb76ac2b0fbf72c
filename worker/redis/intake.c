/* intake.c: validating stream entries (see intake.h). */
#include "worker/redis/intake.h"
#include "worker/lib/now.h"
#include "worker/request/request_decode.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void intake_fail(const rlIntake *in, rlJob *job, const redisReply *fields, rlItemList *items,
                        const char *code, const char *message) {
    size_t n = fields && fields->type == REDIS_REPLY_ARRAY ? fields->elements : 0;
    const char **fv = malloc((n + 1) * sizeof(*fv));
    size_t *fl = malloc((n + 1) * sizeof(*fl));
    if (fv && fl)
        for (size_t i = 0; i < n; i++) {
            const redisReply *e = fields->element[i];
            fv[i] = e->type == REDIS_REPLY_STRING ? e->str : "";
            fl[i] = e->type == REDIS_REPLY_STRING ? (size_t)e->len : 0;
        }
    if (in->metrics) metrics_count_error(in->metrics, code);
    if (!fv || !fl || items_fail(items, in->keys, job, fv && fl ? (int)n : 0, fv, fl, code, message))
        fprintf(stderr, "redlm worker: out of memory answering entry %s\n", job->entry);
    free(fv);
    free(fl);
}

rlRequest *intake_entry(const rlIntake *in, const redisReply *entry, int attempt, rlJob **jobp,
                        rlItemList *items) {
    *jobp = NULL;
    if (entry->type != REDIS_REPLY_ARRAY || entry->elements != 2 ||
        entry->element[0]->type != REDIS_REPLY_STRING)
        return NULL;
    const char *entry_id = entry->element[0]->str;
    const redisReply *fields = entry->element[1];
    int nf = fields->type == REDIS_REPLY_ARRAY ? (int)fields->elements : 0;

    /* exactly one json or msgpack field */
    const redisReply *payload = NULL;
    rlEncoding enc = RL_ENC_JSON;
    int n_payloads = 0;
    for (int i = 0; i + 1 < nf; i += 2) {
        const redisReply *f = fields->element[i];
        rlEncoding e;
        if (f->type == REDIS_REPLY_STRING && !codec_field_encoding(f->str, (size_t)f->len, &e) &&
            fields->element[i + 1]->type == REDIS_REPLY_STRING) {
            n_payloads++;
            payload = fields->element[i + 1];
            enc = e;
        }
    }
    if (fields->type != REDIS_REPLY_ARRAY) {
        /* deleted from the stream while pending: nothing to run or answer */
        rlJob *job = job_create(entry_id, NULL, 0, NULL, enc, NULL, 0, attempt);
        if (job) items_ack(items, in->keys, job);
        *jobp = job;
        return NULL;
    }
    char msg[RL_ERROR_LEN];
    rlDecoded d = {0};
    rlRequest *req = NULL;
    const char *code = NULL;
    if (n_payloads != 1) {
        code = "invalid_request";
        snprintf(msg, sizeof(msg), "entry %s has %d json/msgpack fields; a job entry has exactly one "
                 "(XADD %s '*' json '{...}')", entry_id, n_payloads, in->keys->stream);
    } else if (!(req = request_decode(enc, payload->str, (size_t)payload->len, &d))) {
        code = d.code;
        snprintf(msg, sizeof(msg), "%s", d.err.msg);
    } else if (attempt > in->max_deliveries) {
        code = "too_many_deliveries";
        snprintf(msg, sizeof(msg), "delivered %d times, more than --max-deliveries %d: the workers "
                 "that took it stopped before answering; it is not retried again", attempt, in->max_deliveries);
    } else if (req->deadline_ms && now_wall_ms() > req->deadline_ms) {
        code = "deadline_exceeded";
        snprintf(msg, sizeof(msg), "deadline_ms %lld passed %lld ms before the job was read",
                 (long long)req->deadline_ms, (long long)(now_wall_ms() - req->deadline_ms));
    }
    rlJob *job = job_create(entry_id, d.id, d.id ? strlen(d.id) : 0, d.reply_to, enc,
                            payload ? payload->str : NULL, payload ? (size_t)payload->len : 0, attempt);
    request_decoded_free(&d);
    *jobp = job;
    if (req && (code || !job)) {
        request_free(req);
        free(req);
        req = NULL;
    }
    if (!job) return NULL;
    if (code) {
        intake_fail(in, job, fields, items, code, msg);
        return NULL;
    }
    req->attempt = attempt;
    req->arrival_ms = now_wall_ms();
    req->user = job;
    return req;
}
