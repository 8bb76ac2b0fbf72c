/* runner.c: the engine thread (see runner.h).
 *
 * Locking: one mutex guards the inbox, the outbox, the credit and the
 * stats; it is never held during engine_add/engine_step, so the loop thread
 * waits at most for a list splice.  Credit is recomputed after each step as
 * engine_free_slots() minus what still sits in the inbox, so the loop's view
 * can only be stale towards "fewer", never towards over-reading. */
#include "worker/redis/runner.h"

#include <jansson.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "worker/engine/output.h"


typedef struct rlInbox {
    struct rlInbox *next;
    rlRequest *req;             /* add, or NULL for an abort */
    char *abort_id;
} rlInbox;

struct rlRunner {
    rlEngine *e;
    rlRunnerOptions o;
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    rlInbox *in_head, *in_tail;
    int in_adds;
    rlItemList out;
    int credit;
    rlEngineStats st;
    int stop, failed;
    rlError err;
    rlItemList produced;        /* engine thread only: items of the current step */
};

static void runner_fail_job(rlRunner *r, rlJob *job, const char *code, const char *message) {
    if (r->o.metrics) metrics_count_error(r->o.metrics, code);
    if (items_fail(&r->produced, job, code, message))
        fprintf(stderr, "redlm worker: out of memory answering job %s\n", job->id);
}

/* The engine has grouped tokens into chunks of --stream-interval and folds
 * everything into the done event of a job that asked stream=false: each
 * output is one event, numbered here. */
static void runner_on_output(void *ctx, const rlOutput *out) {
    rlRunner *r = ctx;
    rlJob *job = out->req->user;
    if (job->samples_left <= 0) return; /* already answered (error) */
    if (out->kind == RL_OUT_ERROR) {
        runner_fail_job(r, job, out->error_code ? out->error_code : "internal",
                        out->error_message ? out->error_message : "");
        job->samples_left = 0;
        return;
    }
    json_t *ev = output_event(out, job->seq++);
    if (!ev || items_event(&r->produced, job, ev)) {
        json_decref(ev);
        runner_fail_job(r, job, "internal", "cannot build a reply event (out of memory)");
        job->samples_left = 0;
        return;
    }
    json_decref(ev);
    if (out->kind != RL_OUT_DONE) return;
    if (r->o.metrics) {
        double tpot = out->completion_tokens > 1
                          ? (out->total_ms - out->first_token_ms) / 1000.0 / (out->completion_tokens - 1)
                          : -1;
        metrics_observe_done(r->o.metrics, out->finish,
                             out->completion_tokens > 0 ? out->first_token_ms / 1000.0 : -1, tpot,
                             out->total_ms / 1000.0);
    }
    if (--job->samples_left == 0) items_ack(&r->produced, job);
}

static void runner_add_one(rlRunner *r, rlRequest *req) {
    rlJob *job = req->user;
    job->samples_left = req->n > 0 ? req->n : 1;
    rlError err;
    if (engine_add(r->e, req, &err)) {
        runner_fail_job(r, job, "internal", err.msg);
        job->samples_left = 0;
    }
}

static void *runner_main(void *arg) {
    rlRunner *r = arg;
    for (;;) {
        pthread_mutex_lock(&r->mu);
        while (!r->stop && !r->in_head && !engine_has_work(r->e)) pthread_cond_wait(&r->cv, &r->mu);
        rlInbox *in = r->in_head;
        r->in_head = r->in_tail = NULL;
        r->in_adds = 0;
        int stop = r->stop;
        pthread_mutex_unlock(&r->mu);
        if (stop) break;
        while (in) {
            rlInbox *nx = in->next;
            if (in->req) runner_add_one(r, in->req);
            else engine_abort(r->e, in->abort_id);
            free(in->abort_id);
            free(in);
            in = nx;
        }
        /* Redis away long enough to fill the backlog: hold the engine rather
         * than let memory grow without bound. */
        if (atomic_load(r->o.backlog) > r->o.max_backlog) {
            struct timespec ts = {0, 10 * 1000 * 1000};
            nanosleep(&ts, NULL);
        } else if (engine_has_work(r->e)) {
            rlError err;
            if (engine_step(r->e, runner_on_output, r, &err)) {
                pthread_mutex_lock(&r->mu);
                r->failed = 1;
                r->err = err;
                pthread_mutex_unlock(&r->mu);
                ev_async_send(r->o.loop, r->o.wake);
                break;
            }
        }
        rlEngineStats st;
        engine_stats(r->e, &st);
        if (r->o.metrics) metrics_set_engine(r->o.metrics, &st);
        int free_slots = engine_free_slots(r->e);
        pthread_mutex_lock(&r->mu);
        items_append(&r->out, &r->produced);
        r->credit = free_slots - r->in_adds;
        r->st = st;
        pthread_mutex_unlock(&r->mu);
        ev_async_send(r->o.loop, r->o.wake);
    }
    return NULL;
}

rlRunner *runner_start(rlEngine *e, const rlRunnerOptions *o, rlError *err) {
    rlRunner *r = calloc(1, sizeof(*r));
    if (!r) {
        rl_error(err, RL_EMEMORY, "out of memory starting the engine thread");
        return NULL;
    }
    r->e = e;
    r->o = *o;
    pthread_mutex_init(&r->mu, NULL);
    pthread_cond_init(&r->cv, NULL);
    r->credit = engine_free_slots(e);
    /* the pool's size is known before the first step: a dashboard must not
     * read 0 KV blocks until the first job */
    engine_stats(e, &r->st);
    if (o->metrics) metrics_set_engine(o->metrics, &r->st);
    if (pthread_create(&r->thread, NULL, runner_main, r)) {
        pthread_mutex_destroy(&r->mu);
        pthread_cond_destroy(&r->cv);
        free(r);
        rl_error(err, RL_EINTERNAL, "cannot start the engine thread");
        return NULL;
    }
    return r;
}

void runner_stop(rlRunner *r) {
    if (!r) return;
    pthread_mutex_lock(&r->mu);
    r->stop = 1;
    pthread_cond_signal(&r->cv);
    pthread_mutex_unlock(&r->mu);
    pthread_join(r->thread, NULL);
    while (r->in_head) {
        rlInbox *nx = r->in_head->next;
        if (r->in_head->req) {
            request_free(r->in_head->req);
            free(r->in_head->req);
        }
        free(r->in_head->abort_id);
        free(r->in_head);
        r->in_head = nx;
    }
    for (rlItem *it; (it = items_pop(&r->out));) item_free(it);
    for (rlItem *it; (it = items_pop(&r->produced));) item_free(it);
    pthread_mutex_destroy(&r->mu);
    pthread_cond_destroy(&r->cv);
    free(r);
}

static void runner_push(rlRunner *r, rlInbox *in) {
    pthread_mutex_lock(&r->mu);
    if (r->in_tail) r->in_tail->next = in;
    else r->in_head = in;
    r->in_tail = in;
    if (in->req) {
        r->in_adds++;
        r->credit--;
    }
    pthread_cond_signal(&r->cv);
    pthread_mutex_unlock(&r->mu);
}

void runner_add(rlRunner *r, rlRequest *req) {
    rlInbox *in = calloc(1, sizeof(*in));
    if (!in) abort(); /* a few bytes; nothing sensible remains to be done */
    in->req = req;
    runner_push(r, in);
}

void runner_abort(rlRunner *r, const char *id) {
    rlInbox *in = calloc(1, sizeof(*in));
    if (!in || !(in->abort_id = strdup(id))) abort();
    runner_push(r, in);
}

int runner_credit(rlRunner *r) {
    pthread_mutex_lock(&r->mu);
    int c = r->credit;
    pthread_mutex_unlock(&r->mu);
    return c;
}

void runner_take(rlRunner *r, rlItemList *out) {
    pthread_mutex_lock(&r->mu);
    items_append(out, &r->out);
    pthread_mutex_unlock(&r->mu);
}

void runner_stats(rlRunner *r, rlEngineStats *st) {
    pthread_mutex_lock(&r->mu);
    *st = r->st;
    pthread_mutex_unlock(&r->mu);
}

int runner_failed(rlRunner *r, rlError *err) {
    pthread_mutex_lock(&r->mu);
    int f = r->failed;
    if (f && err) *err = r->err;
    pthread_mutex_unlock(&r->mu);
    return f;
}
