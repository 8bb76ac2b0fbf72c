/* serve.c: the worker's event loop (see serve.h).
 *
 * Reading is one state machine on the reader connection: when the engine has
 * credit, first (every SERVE_REAP_S) take the entries of consumers whose
 * heartbeat is gone (redlm_reap, atomic in Redis, so two workers never both
 * take one), then (every claim interval) entries other consumers left idle
 * too long (XPENDING IDLE, then redlm_claim's XCLAIM, which only succeeds if
 * the entry is still idle), then XREADGROUP for new ones, COUNT = credit.
 * XPENDING+XCLAIM is used rather than XAUTOCLAIM because XPENDING also gives
 * each entry's delivery count, the job's `attempt`, in the same round trip.
 *
 * A job read is not run until Redis has answered its start (redlm_start:
 * still ours, no other entry running its id); every write after that is
 * fenced the same way, and a job whose write is fenced out is aborted.
 * Entries of jobs this worker is running never look idle: their idle time
 * is reset every claim_idle/3 (redlm_refresh, which also reports the ones
 * lost meanwhile), however long the generation takes.  Reading waits for
 * the first heartbeat, so no live worker ever looks dead to the reapers. */
#include "worker/redis/serve.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "worker/redis/functions.h"
#include "worker/redis/instances.h"
#include "worker/redis/intake.h"
#include "worker/redis/metrics.h"
#include "worker/redis/rconn.h"
#include "worker/redis/runner.h"
#include "worker/redis/writer.h"

/* Cancels remembered for jobs not read yet (a cancel may overtake its job
 * in a long queue); the oldest are forgotten first. */
#define SERVE_CANCEL_RING 1024
/* How often the reader looks for consumers whose heartbeat is gone, and how
 * long after (re)connecting it waits before the first look: every live
 * worker rewrites its heartbeat within a second of Redis coming back. */
#define SERVE_REAP_S 0.5
#define SERVE_REAP_GRACE_S 3.0
#define SERVE_TRIM_S 5.0
/* Writes Redis refuses until someone acts (a key this worker's ACL user may
 * not write, a dead-letter key of another type) are tried again after a
 * wait that doubles from 1 s to 30 s: seen within seconds once fixed,
 * without a Redis call every few milliseconds meanwhile. */
#define SERVE_HOLD_MIN_S 1.0
#define SERVE_HOLD_MAX_S 30.0
/* Deleted entries whose refused dead letter the reap has logged: each is
 * logged once, though every reap tries it again. */
#define SERVE_HELD_SEEN 16

typedef struct rlServe {
    struct ev_loop *loop;
    rlServeOptions o;
    rlEngine *e;
    rlRunner *runner;
    rlWriter *writer;
    rlIntake intake;
    rlMetrics *metrics;
    rlConn *reader, *canceller, *wconn;
    int group_ready, reader_busy;
    int hb_ok;                      /* a heartbeat has been stored */
    int n_starting;                 /* jobs read, waiting for their start's answer */
    int own_taken;                  /* the first reap, which takes a previous process's entries under this name, is answered */
    int keys_ok;                    /* the keys' types were found right once: a later wrong one holds, not stops */
    double last_claim, last_reap, reader_up;
    char cancel_last[48];
    int cancel_busy;
    int cancel_failing;             /* reading the cancel stream fails (logged once) */
    ev_timer cancel_retry;
    char *cancelled[SERVE_CANCEL_RING];
    int cancel_next;
    rlJob *jobs;                    /* not yet acknowledged */
    int n_jobs;
    ev_async wake;
    ev_timer heartbeat, refresh, drain, trim;
    ev_signal sigterm, sigint;
    int draining, failed, stopping;
    /* Redis refuses every write of this worker (NOPERM: its user may not
     * write the job stream, the running hash or the dead-letter stream):
     * nothing is read, written or refreshed until a look finds the keys
     * writable again */
    int held;
    int hold_capped;                /* "still refused" said at the longest wait */
    int hold_probes;                /* answers still due naming the refused keys */
    double held_since, hold_backoff, hold_ended;
    int hold_quiet;                 /* held again for the reason already given: not said again */
    ev_timer hold;
    char hold_why[RL_ERROR_LEN], hold_keys[RL_ERROR_LEN];
    /* XACKs held for want of their dead letter (writer_held) */
    double resend_backoff;
    ev_timer resend;
    char held_seen[SERVE_HELD_SEEN][48];
    int held_seen_next;
    rlError err;
    uint64_t last_gen;
    double last_gen_t, tok_s;
    char hb_key[300];
    char started[24];
} rlServe;

void serve_options_init(rlServeOptions *o) {
    memset(o, 0, sizeof(*o));
    o->keys.stream = "redlm:jobs";
    o->keys.group = "redlm";
    o->keys.dead = "redlm:dead";
    o->keys.cancel = "redlm:cancel";
    o->keys.reply_prefix = "redlm:reply:";
    o->keys.reply_ttl = 86400;
    o->keys.dead_maxlen = 100000;
    o->claim_idle_ms = 30000;
    o->max_deliveries = 3;
    o->drain_timeout = 30;
    o->max_backlog = (size_t)256 << 20;
    o->block_ms = 1000;
    o->model = o->layout = o->devices = "";
}

static void serve_cycle(rlServe *s);
static void serve_hold(rlServe *s, const char *why);

static void serve_jobs_add(rlServe *s, rlJob *j) {
    j->prev = NULL;
    j->next = s->jobs;
    if (s->jobs) s->jobs->prev = j;
    s->jobs = j;
    s->n_jobs++;
}

static void serve_check_drained(rlServe *s) {
    if (s->draining && !s->n_jobs && !writer_pending(s->writer)) ev_break(s->loop, EVBREAK_ALL);
}

static void serve_jobs_remove(rlServe *s, rlJob *j) {
    if (j->prev) j->prev->next = j->next;
    else if (s->jobs == j) s->jobs = j->next;
    if (j->next) j->next->prev = j->prev;
    s->n_jobs--;
    job_free(j);
    serve_check_drained(s);
}

/* the writer confirmed a job's XACK */
static void serve_on_job_done(void *ctx, rlJob *j) {
    rlServe *s = ctx;
    if (j->held && !j->lost)
        fprintf(stderr, "redlm worker: job %s (entry %s): acknowledged now\n", j->id ? j->id : "(no id)",
                j->entry);
    if (!writer_held(s->writer)) s->resend_backoff = SERVE_HOLD_MIN_S;
    serve_jobs_remove(s, j);
}

static int serve_was_cancelled(rlServe *s, const char *id) {
    for (int i = 0; i < SERVE_CANCEL_RING && s->cancelled[i]; i++)
        if (!strcmp(s->cancelled[i], id)) return 1;
    return 0;
}

static void serve_remember_cancel(rlServe *s, const char *id) {
    free(s->cancelled[s->cancel_next]);
    s->cancelled[s->cancel_next] = strdup(id);
    s->cancel_next = (s->cancel_next + 1) % SERVE_CANCEL_RING;
}

/* Hand items to the writer, noting the jobs whose XACK is among them. */
static void serve_push(rlServe *s, rlItemList *items) {
    for (rlItem *it = items->head; it; it = it->next)
        if (it->kind == RL_ITEM_ACK) it->job->acking = 1;
    writer_push(s->writer, items);
}

static void serve_entry(rlServe *s, const redisReply *entry, int attempt) {
    rlItemList items = {0};
    rlJob *job;
    rlRequest *req = intake_entry(&s->intake, entry, attempt, &job, &items);
    if (!job) return; /* out of memory: left pending, claimed again later */
    serve_jobs_add(s, job);
    if (req && serve_was_cancelled(s, req->id)) {
        if (items_abort(&items, job, req))
            fprintf(stderr, "redlm worker: out of memory answering cancelled job %s\n", req->id);
        request_free(req);
        free(req);
    } else if (req) {
        if (items_start(&items, job)) {
            fprintf(stderr, "redlm worker: out of memory starting job %s\n", req->id);
            request_free(req);
            free(req);
        } else {
            job->req = req;
            s->n_starting++;
        }
    }
    serve_push(s, &items);
}

/* writer hook: Redis answered a job's start */
static void serve_on_started(void *ctx, rlJob *job, const redisReply *r) {
    rlServe *s = ctx;
    rlItemList items = {0};
    s->n_starting--;
    if (s->stopping) return; /* job_free frees the request */
    rlRequest *req = job->req;
    job->req = NULL;
    if ((r->type == REDIS_REPLY_STATUS || r->type == REDIS_REPLY_STRING) && !strcmp(r->str, "OK")) {
        if (!serve_was_cancelled(s, req->id)) {
            runner_add(s->runner, req);
            return;
        }
        /* its cancel came while Redis was answering the start */
        if (items_abort(&items, job, req))
            fprintf(stderr, "redlm worker: out of memory answering cancelled job %s\n", req->id);
        request_free(req);
        free(req);
        serve_push(s, &items);
        return;
    }
    if (r->type == REDIS_REPLY_ERROR && strncmp(r->str, FUNCTIONS_LOST " ", 5)) {
        /* Redis refused the start itself (a running hash of another type,
         * an ACL that denies a command, the functions flushed): the job is
         * kept, its entry fresh, and started again once the worker resumes,
         * so its delivery count does not grow while nobody may run it */
        job->req = req;
        job->start_owed = 1;
        serve_hold(s, r->str);
        return;
    }
    request_free(req);
    free(req);
    if ((r->type == REDIS_REPLY_STATUS || r->type == REDIS_REPLY_STRING) && !strncmp(r->str, "DUPLICATE ", 10)) {
        char msg[RL_ERROR_LEN];
        snprintf(msg, sizeof(msg), "a job with id '%.300s' is already running (entry %s); this entry (%s) "
                 "is not run: give every job its own id", job->id, r->str + 10, job->entry);
        if (s->metrics) metrics_count_error(s->metrics, "duplicate_id");
        if (items_fail(&items, job, "duplicate_id", msg))
            fprintf(stderr, "redlm worker: out of memory answering job %s\n", job->id);
    } else {
        /* lost before it ran: not ours to answer; the fenced XACK writes
         * nothing and lets the job go */
        job->lost = 1;
        if (items_ack(&items, job)) {
            fprintf(stderr, "redlm worker: out of memory releasing job %s\n", job->id);
            return;
        }
    }
    serve_push(s, &items);
    serve_cycle(s);
}

/* writer hook, and refresh: the job's entry is no longer ours (or its reply
 * key was refused, its dead letter and XACK done in Redis): stop it, and
 * write nothing more (its remaining writes are fenced out in Redis). */
static void serve_on_lost(void *ctx, rlJob *job, const char *why) {
    rlServe *s = ctx;
    if (job->lost) return;
    job->lost = 1;
    fprintf(stderr, "redlm worker: job %s (entry %s, attempt %d): %s; stopping it\n",
            job->id ? job->id : "(no id)", job->entry, job->attempt, why);
    if (job->id && !job->acking && !job->req && s->runner) runner_abort(s->runner, job->id);
    if (functions_refused_for_all(why)) serve_hold(s, why); /* no more jobs to fail alike */
}

/* ---- writes refused until someone acts ---- */

static void serve_log_hold(rlServe *s) {
    if (s->hold_quiet) return;
    const char *user = s->o.url.user[0] ? s->o.url.user : "default";
    if (s->hold_keys[0])
        fprintf(stderr, "redlm worker: Redis refuses this worker's writes: user '%s' may not write %s (its ACL "
                "key patterns leave it out: %s).", user, s->hold_keys, s->hold_why);
    else
        fprintf(stderr, "redlm worker: Redis refuses this worker's writes (user '%s': %s).", user, s->hold_why);
    if (!strncmp(s->hold_why, FUNCTIONS_NOPERM " ", 7))
        fprintf(stderr, "  Until it may, it answers and acknowledges no job: the entries it holds stay pending (no "
                "longer kept fresh: other workers take them after --claim-idle-ms %d) and it reads no new ones; ",
                s->o.claim_idle_ms);
    else
        fprintf(stderr, "  Until then it answers and acknowledges no job: the entries it holds stay pending and kept "
                "fresh, their answers kept to be written, and it reads no new ones; ");
    fprintf(stderr, "looking again in %.0f s, then less and less often (every %.0f s at most)\n", s->hold_backoff,
            SERVE_HOLD_MAX_S);
}

/* one answer of FCALL redlm_keys 1 KEY, in the order sent: stream, running
 * hash, dead-letter stream */
static void serve_on_key_probe(redisAsyncContext *ac, void *reply, void *priv) {
    (void)ac;
    rlServe *s = priv;
    redisReply *r = reply;
    if (s->hold_probes <= 0) return;
    const char *keys[3] = {s->o.keys.stream, s->o.keys.running, s->o.keys.dead};
    int k = 3 - s->hold_probes--;
    if (!r) s->hold_probes = 0; /* connection lost: say what is known */
    else if (r->type == REDIS_REPLY_ERROR && !strncmp(r->str, FUNCTIONS_NOPERM " ", 7)) {
        size_t n = strlen(s->hold_keys);
        snprintf(s->hold_keys + n, sizeof(s->hold_keys) - n, "%s%s", n ? ", " : "", keys[k]);
    }
    if (!s->hold_probes) serve_log_hold(s);
}

/* FCALL redlm_keys over the stream, running hash and dead-letter stream
 * with the types each must have: OK, NOPERM (a key the user may not
 * write) or WRONGTYPE (naming a key of another type). */
static void serve_keys_look(rlServe *s, redisAsyncContext *ac, redisCallbackFn *fn) {
    const char *argv[] = {"FCALL", FUNCTIONS_FN("redlm_keys"), "3", s->o.keys.stream, s->o.keys.running,
                          s->o.keys.dead, FUNCTIONS_KEY_TYPES};
    redisAsyncCommandArgv(ac, fn, s, 9, argv, NULL);
}

/* the answer of serve_keys_look in a hold for another reason than NOPERM:
 * the key it names, if any, is the reason to give */
static void serve_on_type_probe(redisAsyncContext *ac, void *reply, void *priv) {
    (void)ac;
    rlServe *s = priv;
    redisReply *r = reply;
    if (r && r->type == REDIS_REPLY_ERROR && !strncmp(r->str, FUNCTIONS_WRONGTYPE " ", 10))
        snprintf(s->hold_why, sizeof(s->hold_why), "%s", r->str);
    serve_log_hold(s);
}

/* Redis refused a whole call for want of permission, or a job's start or
 * acknowledgement as it would every job's (why: its answer): hold
 * everything, say which keys, and look again after a wait. */
static void serve_hold(rlServe *s, const char *why) {
    if (s->held) return; /* the next look decides */
    s->held = 1;
    s->hold_capped = 0;
    s->held_since = ev_now(s->loop);
    /* Held again soon after a look found the keys fine (a refusal no look
     * sees, such as an ACL that denies HGET): the wait grows on from the
     * last, and the same reason is not said again. */
    int again = s->hold_ended > 0 && s->held_since - s->hold_ended < 2 * SERVE_HOLD_MAX_S;
    s->hold_quiet = again && !strcmp(s->hold_why, why);
    s->hold_backoff = !again ? SERVE_HOLD_MIN_S
                      : s->hold_backoff * 2 > SERVE_HOLD_MAX_S ? SERVE_HOLD_MAX_S : s->hold_backoff * 2;
    snprintf(s->hold_why, sizeof(s->hold_why), "%s", why);
    s->hold_keys[0] = 0;
    writer_connected(s->writer, NULL); /* its runs would be refused alike */
    redisAsyncContext *ac = rconn_ctx(s->wconn);
    if (!ac) ac = rconn_ctx(s->reader);
    if (ac && strncmp(why, FUNCTIONS_NOPERM " ", 7)) {
        serve_keys_look(s, ac, serve_on_type_probe);
    } else if (ac) {
        const char *keys[3] = {s->o.keys.stream, s->o.keys.running, s->o.keys.dead};
        s->hold_probes = 3;
        for (int k = 0; k < 3; k++) {
            const char *argv[] = {"FCALL", FUNCTIONS_FN("redlm_keys"), "1", keys[k]};
            redisAsyncCommandArgv(ac, serve_on_key_probe, s, 4, argv, NULL);
        }
    } else {
        serve_log_hold(s);
    }
    ev_timer_set(&s->hold, s->hold_backoff, 0.);
    ev_timer_start(s->loop, &s->hold);
}

static void serve_writer_refused(void *ctx, const char *why) { serve_hold(ctx, why); }

static void serve_on_hold_look(redisAsyncContext *ac, void *reply, void *priv) {
    rlServe *s = priv;
    redisReply *r = reply;
    if (!s->held || s->stopping) return;
    if (!r || r->type == REDIS_REPLY_ERROR) {
        if (r) {
            if (!strncmp(r->str, FUNCTIONS_WRONGTYPE " ", 10)) snprintf(s->hold_why, sizeof(s->hold_why), "%s", r->str);
            /* neither a key nor a permission: the functions may be gone
             * (FUNCTION FLUSH), loaded again before the next look */
            else if (strncmp(r->str, FUNCTIONS_NOPERM " ", 7)) functions_load(ac, NULL, NULL);
            s->hold_backoff = s->hold_backoff * 2 > SERVE_HOLD_MAX_S ? SERVE_HOLD_MAX_S : s->hold_backoff * 2;
            if (s->hold_backoff >= SERVE_HOLD_MAX_S && !s->hold_capped++)
                fprintf(stderr, "redlm worker: Redis still refuses this worker's writes (%s); looking every "
                        "%.0f s\n", r->str, SERVE_HOLD_MAX_S);
        }
        ev_timer_set(&s->hold, s->hold_backoff, 0.);
        ev_timer_start(s->loop, &s->hold);
        return;
    }
    /* every answer this connection owed before the look has come (and been
     * dropped): the writer may send on it again */
    s->held = 0;
    s->hold_ended = ev_now(s->loop);
    if (!s->hold_quiet)
        fprintf(stderr, "redlm worker: Redis accepts this worker's writes again (refused for %.0f s); resuming\n",
                ev_now(s->loop) - s->held_since);
    writer_connected(s->writer, ac);
    rlItemList items = {0};
    for (rlJob *j = s->jobs; j; j = j->next) {
        if (!j->start_owed || j->lost) continue;
        if (items_start(&items, j)) break; /* out of memory: still owed, sent at the next resume */
        j->start_owed = 0;
        s->n_starting++;
    }
    serve_push(s, &items);
    serve_cycle(s);
}

static void serve_on_hold_timer(struct ev_loop *loop, ev_timer *w, int revents) {
    (void)loop, (void)revents;
    rlServe *s = w->data;
    redisAsyncContext *ac = rconn_ctx(s->wconn);
    if (!ac) { /* looked at again once the writer's connection is back */
        ev_timer_set(&s->hold, s->hold_backoff, 0.);
        ev_timer_start(s->loop, &s->hold);
        return;
    }
    serve_keys_look(s, ac, serve_on_hold_look);
}

/* writer hook: a job's XACK held for want of its dead letter, or refused
 * as every job's would be (functions_refused_for_all: the worker holds,
 * the entry kept fresh); otherwise the entry stays pending, no longer kept
 * fresh, so another worker may take it (then the XACK sent again is fenced
 * out) */
static void serve_on_held(void *ctx, rlJob *job, const char *why) {
    rlServe *s = ctx;
    int ack_refused = strncmp(why, FUNCTIONS_HELD " ", 5), for_all = functions_refused_for_all(why);
    if (!job->held)
        fprintf(stderr, "redlm worker: job %s (entry %s, attempt %d): %s%s; sending it again in %.0f s, then less "
                "and less often%s\n", job->id ? job->id : "(no id)", job->entry, job->attempt,
                ack_refused ? "Redis refused its acknowledgement: " : "",
                ack_refused ? why : why + strlen(FUNCTIONS_HELD " "), s->resend_backoff,
                for_all ? "" : " (other workers may take it after --claim-idle-ms)");
    job->held = for_all ? 2 : 1;
    if (for_all) serve_hold(s, why); /* every job's start, XACK or failure would be refused alike */
    if (!ev_is_active(&s->resend)) {
        ev_timer_set(&s->resend, s->resend_backoff, 0.);
        ev_timer_start(s->loop, &s->resend);
    }
}

static void serve_on_resend(struct ev_loop *loop, ev_timer *w, int revents) {
    (void)loop, (void)revents;
    rlServe *s = w->data;
    s->resend_backoff = s->resend_backoff * 2 > SERVE_HOLD_MAX_S ? SERVE_HOLD_MAX_S : s->resend_backoff * 2;
    writer_resend_held(s->writer);
}

static int serve_reply_error(rlServe *s, const redisReply *r, const char *what) {
    if (!r) return 1; /* connection lost: on_lost resets the state */
    if (r->type != REDIS_REPLY_ERROR) return 0;
    fprintf(stderr, "redlm worker: %s failed: %s\n", what, r->str);
    /* the stream or group deleted (NOGROUP, or Redis restarted empty),
     * Redis out of memory, the key of another type ...: read again on a
     * new connection, after a growing backoff, not in a tight loop */
    s->group_ready = 0;
    rconn_retry(s->reader);
    return 1;
}

static void serve_on_read(redisAsyncContext *ac, void *reply, void *priv) {
    (void)ac;
    rlServe *s = priv;
    redisReply *r = reply;
    if (!r) return;
    s->reader_busy = 0;
    if (!serve_reply_error(s, r, "XREADGROUP") && r->type == REDIS_REPLY_ARRAY)
        for (size_t i = 0; i < r->elements; i++) {
            const redisReply *st = r->element[i];
            if (st->type != REDIS_REPLY_ARRAY || st->elements != 2) continue;
            for (size_t k = 0; k < st->element[1]->elements; k++) serve_entry(s, st->element[1]->element[k], 1);
        }
    serve_cycle(s);
}

typedef struct rlClaim {
    rlServe *s;
    size_t n;
    char (*ids)[48];
    int *deliveries;
} rlClaim;

static void serve_on_claim(redisAsyncContext *ac, void *reply, void *priv) {
    (void)ac;
    rlClaim *c = priv;
    rlServe *s = c->s;
    redisReply *r = reply;
    if (r && !serve_reply_error(s, r, "claiming idle entries") && r->type == REDIS_REPLY_ARRAY)
        for (size_t i = 0; i < r->elements; i++) {
            const redisReply *en = r->element[i];
            if (en->type != REDIS_REPLY_ARRAY || en->elements < 1 || en->element[0]->type != REDIS_REPLY_STRING)
                continue;
            int attempt = 2;
            for (size_t k = 0; k < c->n; k++)
                if (!strcmp(c->ids[k], en->element[0]->str)) attempt = c->deliveries[k] + 1;
            fprintf(stderr, "redlm worker: claimed entry %s (attempt %d)\n", en->element[0]->str, attempt);
            serve_entry(s, en, attempt);
        }
    free(c->ids);
    free(c->deliveries);
    free(c);
    if (!r) return;
    s->reader_busy = 0;
    serve_cycle(s);
}

static int serve_is_ours(rlServe *s, const char *entry) {
    for (rlJob *j = s->jobs; j; j = j->next)
        if (!strcmp(j->entry, entry)) return 1;
    return 0;
}

static void serve_on_pending(redisAsyncContext *ac, void *reply, void *priv) {
    rlServe *s = priv;
    redisReply *r = reply;
    if (!r) return;
    s->reader_busy = 0;
    if (serve_reply_error(s, r, "XPENDING") || r->type != REDIS_REPLY_ARRAY || !r->elements) {
        serve_cycle(s);
        return;
    }
    rlClaim *c = calloc(1, sizeof(*c));
    const char **argv = calloc(r->elements + 7, sizeof(*argv));
    if (c) c->ids = calloc(r->elements, sizeof(*c->ids)), c->deliveries = calloc(r->elements, sizeof(int));
    if (!c || !argv || !c->ids || !c->deliveries) {
        if (c) free(c->ids), free(c->deliveries);
        free(c), free(argv);
        serve_cycle(s);
        return;
    }
    char idle[24];
    snprintf(idle, sizeof(idle), "%d", s->o.claim_idle_ms);
    int argc = 0;
    argv[argc++] = "FCALL";
    argv[argc++] = FUNCTIONS_FN("redlm_claim");
    argv[argc++] = "1";
    argv[argc++] = s->o.keys.stream;
    argv[argc++] = s->o.keys.group;
    argv[argc++] = s->o.keys.consumer;
    argv[argc++] = idle;
    c->s = s;
    for (size_t i = 0; i < r->elements; i++) {
        const redisReply *p = r->element[i]; /* [id, consumer, idle, deliveries] */
        if (p->type != REDIS_REPLY_ARRAY || p->elements != 4 || p->element[0]->type != REDIS_REPLY_STRING ||
            p->element[0]->len >= 48 || serve_is_ours(s, p->element[0]->str))
            continue;
        memcpy(c->ids[c->n], p->element[0]->str, (size_t)p->element[0]->len + 1);
        c->deliveries[c->n] = (int)p->element[3]->integer;
        argv[argc++] = c->ids[c->n++];
    }
    if (!c->n) {
        free(c->ids), free(c->deliveries), free(c), free(argv);
        serve_cycle(s);
        return;
    }
    s->reader_busy = 1;
    redisAsyncCommandArgv(ac, serve_on_claim, c, argc, argv, NULL);
    free(argv);
}

/* [[id, fields, attempt], ...]: entries of consumers whose heartbeat is gone;
 * [id, message]: one deleted from the stream meanwhile, answered in Redis
 * with a dead letter and its XACK */
static void serve_on_reap(redisAsyncContext *ac, void *reply, void *priv) {
    (void)ac;
    rlServe *s = priv;
    redisReply *r = reply;
    if (!r) return;
    s->reader_busy = 0;
    if (r->type == REDIS_REPLY_ERROR && !strncmp(r->str, FUNCTIONS_NOPERM " ", 7)) {
        serve_hold(s, r->str);
        return;
    }
    s->own_taken = 1; /* from now on, entries under this name are this process's */
    if (!serve_reply_error(s, r, "reaping dead consumers") && r->type == REDIS_REPLY_ARRAY)
        for (size_t i = 0; i < r->elements; i++) {
            const redisReply *en = r->element[i];
            if (en->type == REDIS_REPLY_ARRAY && en->elements == 2 && en->element[0]->type == REDIS_REPLY_STRING &&
                en->element[1]->type == REDIS_REPLY_STRING) {
                const char *msg = en->element[1]->str;
                if (strncmp(msg, FUNCTIONS_HELD " ", 5)) {
                    fprintf(stderr, "redlm worker: %s; dead letter entry_deleted written to %s, entry acknowledged\n",
                            msg, s->o.keys.dead);
                    if (s->metrics) metrics_count_error(s->metrics, "entry_deleted");
                    continue;
                }
                /* tried again at every reap, said once */
                int seen = 0;
                for (int k = 0; k < SERVE_HELD_SEEN; k++) seen |= !strcmp(s->held_seen[k], en->element[0]->str);
                if (!seen && en->element[0]->len < 48) {
                    fprintf(stderr, "redlm worker: %s (tried again at every look for dead consumers)\n", msg + 5);
                    memcpy(s->held_seen[s->held_seen_next], en->element[0]->str, (size_t)en->element[0]->len + 1);
                    s->held_seen_next = (s->held_seen_next + 1) % SERVE_HELD_SEEN;
                }
                continue;
            }
            if (en->type != REDIS_REPLY_ARRAY || en->elements != 3 || en->element[0]->type != REDIS_REPLY_STRING ||
                en->element[2]->type != REDIS_REPLY_INTEGER)
                continue;
            int attempt = (int)en->element[2]->integer;
            fprintf(stderr, "redlm worker: took entry %s from a consumer whose heartbeat is gone, or this name's "
                    "previous process (attempt %d)\n",
                    en->element[0]->str, attempt);
            serve_entry(s, en, attempt);
        }
    serve_cycle(s);
}

static void serve_cycle(rlServe *s) {
    redisAsyncContext *ac = rconn_ctx(s->reader);
    if (!ac || !s->group_ready || !s->hb_ok || s->reader_busy || s->draining || s->failed || s->held) return;
    int credit = runner_credit(s->runner) - s->n_starting;
    if (credit <= 0) return; /* the runner's wake-up calls again when slots free up */
    char count[16];
    snprintf(count, sizeof(count), "%d", credit);
    double now = ev_now(s->loop);
    s->reader_busy = 1;
    /* before its first read, a worker takes what a previous process left
     * under its name (nothing here is running yet): at once, not after
     * claim-idle */
    if (!s->own_taken || (now - s->last_reap >= SERVE_REAP_S && now - s->reader_up >= SERVE_REAP_GRACE_S)) {
        s->last_reap = now;
        char cap[24];
        snprintf(cap, sizeof(cap), "%ld", s->o.keys.dead_maxlen);
        const char *argv[] = {"FCALL", FUNCTIONS_FN("redlm_reap"), "3", s->o.keys.stream, s->o.keys.running, s->o.keys.dead,
                              s->o.keys.group, s->o.keys.consumer, KEYS_HEARTBEAT_PREFIX, count,
                              s->own_taken ? "0" : "1", cap};
        redisAsyncCommandArgv(ac, serve_on_reap, s, (int)(sizeof(argv) / sizeof(argv[0])), argv, NULL);
        return;
    }
    if (now - s->last_claim >= s->o.claim_idle_ms / 2000.0) {
        s->last_claim = now;
        char idle[24];
        snprintf(idle, sizeof(idle), "%d", s->o.claim_idle_ms);
        const char *argv[] = {"XPENDING", s->o.keys.stream, s->o.keys.group, "IDLE", idle, "-", "+", count};
        redisAsyncCommandArgv(ac, serve_on_pending, s, 8, argv, NULL);
        return;
    }
    char block[16];
    snprintf(block, sizeof(block), "%d", s->o.block_ms);
    const char *argv[] = {"XREADGROUP", "GROUP", s->o.keys.group, s->o.keys.consumer, "COUNT", count,
                          "BLOCK", block, "STREAMS", s->o.keys.stream, ">"};
    redisAsyncCommandArgv(ac, serve_on_read, s, 11, argv, NULL);
}

static void serve_on_group(redisAsyncContext *ac, void *reply, void *priv) {
    (void)ac;
    rlServe *s = priv;
    redisReply *r = reply;
    if (!r || s->failed) return;
    s->reader_busy = 0;
    if (r->type == REDIS_REPLY_ERROR && strncmp(r->str, "BUSYGROUP", 9)) {
        fprintf(stderr, "redlm worker: cannot create group %s on %s: %s; trying again\n", s->o.keys.group,
                s->o.keys.stream, r->str);
        rconn_retry(s->reader); /* it stopped reading for good */
        return;
    }
    s->group_ready = 1;
    serve_cycle(s);
}

static void serve_fail(rlServe *s, const char *msg) {
    if (s->failed) return;
    s->failed = 1;
    rl_error(&s->err, RL_EREDIS, "%s", msg);
    ev_break(s->loop, EVBREAK_ALL);
}

static void serve_on_load(redisAsyncContext *ac, void *reply, void *priv) {
    rlServe *s = priv;
    redisReply *r = reply;
    if (!r || r->type != REDIS_REPLY_ERROR) return;
    if (rconn_transient(r)) { /* loading, out of memory ...: again on a new connection */
        rconn_retry(ac == rconn_ctx(s->reader) ? s->reader : s->wconn);
        return;
    }
    char msg[RL_ERROR_LEN];
    snprintf(msg, sizeof(msg), "Redis at %s:%d refused the worker's functions (FUNCTION LOAD; Redis 7.0 or "
             "later is needed, and a user allowed to run FUNCTION and FCALL): %s", s->o.url.host, s->o.url.port,
             r->str);
    serve_fail(s, msg);
}

/* the keys' types, looked at on every connection of the reader: wrong at
 * the start, the worker stops saying which key; later, it holds */
static void serve_on_keys_checked(redisAsyncContext *ac, void *reply, void *priv) {
    (void)ac;
    rlServe *s = priv;
    redisReply *r = reply;
    if (!r) return;
    if (r->type != REDIS_REPLY_ERROR) {
        s->keys_ok = 1;
    } else if (!strncmp(r->str, FUNCTIONS_WRONGTYPE " ", 10)) {
        if (s->keys_ok) {
            serve_hold(s, r->str);
        } else {
            char msg[RL_ERROR_LEN];
            snprintf(msg, sizeof(msg), "Redis at %s:%d: %s", s->o.url.host, s->o.url.port,
                     r->str + strlen(FUNCTIONS_WRONGTYPE " "));
            serve_fail(s, msg);
        }
    }
}

static void serve_reader_ready(rlConn *c, void *ctx) {
    rlServe *s = ctx;
    functions_load(rconn_ctx(c), serve_on_load, s);
    serve_keys_look(s, rconn_ctx(c), serve_on_keys_checked);
    /* From 0, not $: jobs queued before the first worker ever started are
     * jobs too.  An existing group is left as it is (BUSYGROUP). */
    const char *argv[] = {"XGROUP", "CREATE", s->o.keys.stream, s->o.keys.group, "0", "MKSTREAM"};
    s->reader_busy = 1;
    s->reader_up = ev_now(s->loop);
    redisAsyncCommandArgv(rconn_ctx(c), serve_on_group, s, 6, argv, NULL);
}

static void serve_reader_lost(rlConn *c, void *ctx) {
    (void)c;
    rlServe *s = ctx;
    s->group_ready = 0;
    s->reader_busy = 0;
}

/* cancel stream: every worker reads all of it (XREAD, not a group) */
static void serve_cancel_read(rlServe *s);

static void serve_on_cancel(redisAsyncContext *ac, void *reply, void *priv) {
    (void)ac;
    rlServe *s = priv;
    redisReply *r = reply;
    if (!r) return;
    s->cancel_busy = 0;
    if (r->type == REDIS_REPLY_ARRAY)
        for (size_t i = 0; i < r->elements; i++) {
            const redisReply *st = r->element[i];
            if (st->type != REDIS_REPLY_ARRAY || st->elements != 2) continue;
            for (size_t k = 0; k < st->element[1]->elements; k++) {
                const redisReply *en = st->element[1]->element[k];
                if (en->elements != 2 || en->element[0]->len >= 48) continue;
                memcpy(s->cancel_last, en->element[0]->str, (size_t)en->element[0]->len + 1);
                const redisReply *f = en->element[1];
                for (size_t j = 0; f->type == REDIS_REPLY_ARRAY && j + 1 < f->elements; j += 2)
                    if (!strcmp(f->element[j]->str, "id")) {
                        runner_abort(s->runner, f->element[j + 1]->str);
                        serve_remember_cancel(s, f->element[j + 1]->str);
                    }
            }
        }
    else if (r->type == REDIS_REPLY_ERROR) {
        /* a key of another type (or a refused read): cancels go unseen until
         * it reads again, so keep trying, not just once */
        if (!s->cancel_failing++)
            fprintf(stderr, "redlm worker: reading %s failed: %s; cancels are not seen until it is a stream "
                    "(or deleted); retrying every second\n", s->o.keys.cancel, r->str);
        ev_timer_set(&s->cancel_retry, 1., 0.);
        ev_timer_start(s->loop, &s->cancel_retry);
        return;
    }
    if (s->cancel_failing) fprintf(stderr, "redlm worker: reading %s again\n", s->o.keys.cancel);
    s->cancel_failing = 0;
    serve_cancel_read(s);
}

static void serve_on_cancel_start(redisAsyncContext *ac, void *reply, void *priv) {
    (void)ac;
    rlServe *s = priv;
    redisReply *r = reply;
    if (!r) return;
    s->cancel_busy = 0;
    /* start after the newest entry: old cancels were for earlier runs */
    snprintf(s->cancel_last, sizeof(s->cancel_last), "0-0");
    if (r->type == REDIS_REPLY_ARRAY && r->elements == 1 && r->element[0]->elements == 2 &&
        r->element[0]->element[0]->len < 48)
        memcpy(s->cancel_last, r->element[0]->element[0]->str, (size_t)r->element[0]->element[0]->len + 1);
    serve_cancel_read(s);
}

static void serve_cancel_read(rlServe *s) {
    redisAsyncContext *ac = rconn_ctx(s->canceller);
    if (!ac || s->cancel_busy) return;
    s->cancel_busy = 1;
    if (!s->cancel_last[0]) {
        const char *argv[] = {"XREVRANGE", s->o.keys.cancel, "+", "-", "COUNT", "1"};
        redisAsyncCommandArgv(ac, serve_on_cancel_start, s, 6, argv, NULL);
        return;
    }
    const char *argv[] = {"XREAD", "BLOCK", "5000", "STREAMS", s->o.keys.cancel, s->cancel_last};
    redisAsyncCommandArgv(ac, serve_on_cancel, s, 6, argv, NULL);
}

static void serve_on_cancel_retry(struct ev_loop *loop, ev_timer *w, int revents) {
    (void)loop, (void)revents;
    serve_cancel_read(w->data);
}

static void serve_cancel_ready(rlConn *c, void *ctx) {
    (void)c;
    serve_cancel_read(ctx);
}
static void serve_cancel_lost(rlConn *c, void *ctx) {
    (void)c;
    ((rlServe *)ctx)->cancel_busy = 0;
}

static void serve_writer_ready(rlConn *c, void *ctx) {
    rlServe *s = ctx;
    functions_load(rconn_ctx(c), serve_on_load, s); /* before the writer's first FCALL */
    if (!s->held) writer_connected(s->writer, rconn_ctx(c)); /* else once a look finds the keys writable */
}

static void serve_refused(rlConn *c, void *ctx, const char *msg) {
    (void)c;
    rlServe *s = ctx;
    char m[RL_ERROR_LEN];
    snprintf(m, sizeof(m), "%.900s (for %d s, --redis-wait); stopping", msg, (int)s->o.redis_wait);
    serve_fail(s, m);
}
static void serve_writer_retry(void *ctx) { rconn_retry(((rlServe *)ctx)->wconn); }

static void serve_writer_lost(rlConn *c, void *ctx) {
    (void)c;
    writer_connected(((rlServe *)ctx)->writer, NULL);
}

static void serve_on_wake(struct ev_loop *loop, ev_async *w, int revents) {
    (void)loop, (void)revents;
    rlServe *s = w->data;
    rlItemList items = {0};
    runner_take(s->runner, &items);
    serve_push(s, &items);
    if (!s->failed && runner_failed(s->runner, &s->err)) {
        s->failed = 1;
        fprintf(stderr, "redlm worker: the engine failed: %s; stopping (unfinished jobs stay pending "
                        "for other workers)\n", s->err.msg);
        ev_break(s->loop, EVBREAK_ALL);
        return;
    }
    serve_cycle(s);
}

static void serve_on_heartbeat_stored(redisAsyncContext *ac, void *reply, void *priv) {
    (void)ac;
    rlServe *s = priv;
    redisReply *r = reply;
    if (!r || r->type == REDIS_REPLY_ERROR || s->hb_ok) return;
    s->hb_ok = 1; /* from now on the reapers see this worker alive: read */
    serve_cycle(s);
}

static void serve_on_heartbeat(struct ev_loop *loop, ev_timer *w, int revents) {
    (void)revents;
    rlServe *s = w->data;
    rlEngineStats st;
    runner_stats(s->runner, &st);
    double now = ev_now(loop);
    if (now > s->last_gen_t) {
        double rate = (double)(st.generation_tokens - s->last_gen) / (now - s->last_gen_t);
        s->tok_s = s->last_gen_t > 0 ? rate : 0;
    }
    s->last_gen = st.generation_tokens;
    s->last_gen_t = now;
    if (s->metrics) {
        metrics_set_writer(s->metrics, atomic_load(writer_bytes(s->writer)), writer_pending(s->writer),
                           writer_errors(s->writer));
        metrics_set_held(s->metrics, s->held);
    }
    redisAsyncContext *ac = rconn_ctx(s->wconn);
    if (!ac) return;
    char running[16], waiting[16], tps[32], jobs[16], pid[16], held[2 * RL_ERROR_LEN + 16] = "";
    if (s->held && s->hold_keys[0])
        snprintf(held, sizeof(held), "may not write %s: %s", s->hold_keys, s->hold_why);
    else if (s->held)
        snprintf(held, sizeof(held), "%s", s->hold_why);
    snprintf(running, sizeof(running), "%d", st.running);
    snprintf(waiting, sizeof(waiting), "%d", st.waiting);
    snprintf(tps, sizeof(tps), "%.1f", s->tok_s);
    snprintf(jobs, sizeof(jobs), "%d", s->n_jobs);
    snprintf(pid, sizeof(pid), "%d", (int)getpid());
    const char *argv[] = {"HSET", s->hb_key, "model", s->o.model, "served_model_name",
                          s->o.served_model_name ? s->o.served_model_name : s->o.model,
                          "layout", s->o.layout, "devices", s->o.devices, "quantization",
                          engine_quantization(s->e), "sampling_defaults",
                          engine_sampling_defaults(s->e), "running", running, "waiting", waiting,
                          "tokens_per_s", tps,
                          "jobs", jobs, "pid", pid, "started", s->started, "state",
                          s->draining ? "draining" : s->held ? "held" : "serving", "held", held,
                          "stream", s->o.keys.stream,
                          "group", s->o.keys.group, "reply_prefix", s->o.keys.reply_prefix};
    redisAsyncCommandArgv(ac, NULL, NULL, (int)(sizeof(argv) / sizeof(argv[0])), argv, NULL);
    char ttl[16];
    snprintf(ttl, sizeof(ttl), "%d", INSTANCES_TTL_S);
    const char *ex[] = {"EXPIRE", s->hb_key, ttl};
    redisAsyncCommandArgv(ac, serve_on_heartbeat_stored, s, 3, ex, NULL);
}

/* the entries redlm_refresh found no longer ours */
static void serve_on_refreshed(redisAsyncContext *ac, void *reply, void *priv) {
    (void)ac;
    rlServe *s = priv;
    redisReply *r = reply;
    if (!r) return;
    if (r->type == REDIS_REPLY_ERROR) {
        fprintf(stderr, "redlm worker: refreshing the jobs' idle time failed: %s\n", r->str);
        return;
    }
    for (size_t i = 0; r->type == REDIS_REPLY_ARRAY && i < r->elements; i++)
        for (rlJob *j = s->jobs; j; j = j->next)
            if (r->element[i]->type == REDIS_REPLY_STRING && !strcmp(j->entry, r->element[i]->str))
                serve_on_lost(s, j, "its entry is no longer held by this worker (claimed by another, or "
                                    "acknowledged)");
}

static void serve_on_refresh(struct ev_loop *loop, ev_timer *w, int revents) {
    (void)loop, (void)revents;
    rlServe *s = w->data;
    redisAsyncContext *ac = rconn_ctx(s->wconn);
    /* while its user may not write the stream, what it holds is left to go
     * idle, for other workers to take; a hold for a key of another type
     * keeps it fresh (answers stored, or kept to be written) */
    if (!ac || !s->jobs || (s->held && !strncmp(s->hold_why, FUNCTIONS_NOPERM " ", 7))) return;
    enum { CHUNK = 256 };
    const char *argv[2 * CHUNK + 6] = {"FCALL", FUNCTIONS_FN("redlm_refresh"), "1", s->o.keys.stream, s->o.keys.group,
                                       s->o.keys.consumer};
    char attempts[CHUNK][16];
    int argc = 6, n = 0;
    for (rlJob *j = s->jobs; j; j = j->next) {
        if (!j->lost && j->held != 1) {
            snprintf(attempts[n], sizeof(attempts[n]), "%d", j->attempt);
            argv[argc++] = j->entry;
            argv[argc++] = attempts[n++];
        }
        if (n && (n == CHUNK || !j->next)) {
            redisAsyncCommandArgv(ac, serve_on_refreshed, s, argc, argv, NULL);
            argc = 6, n = 0;
        }
    }
}

static void serve_on_trim(struct ev_loop *loop, ev_timer *w, int revents) {
    (void)loop, (void)revents;
    rlServe *s = w->data;
    redisAsyncContext *ac = rconn_ctx(s->wconn);
    if (!ac) return;
    char maxlen[24];
    snprintf(maxlen, sizeof(maxlen), "%ld", s->o.jobs_maxlen);
    const char *argv[] = {"FCALL", FUNCTIONS_FN("redlm_trim"), "1", s->o.keys.stream, maxlen};
    redisAsyncCommandArgv(ac, NULL, NULL, 5, argv, NULL);
}

static void serve_on_drain_timeout(struct ev_loop *loop, ev_timer *w, int revents) {
    (void)revents;
    rlServe *s = w->data;
    fprintf(stderr, "redlm worker: drain timeout: %d jobs left pending for other workers\n", s->n_jobs);
    ev_break(loop, EVBREAK_ALL);
}

static void serve_on_signal(struct ev_loop *loop, ev_signal *w, int revents) {
    (void)revents;
    rlServe *s = w->data;
    if (s->draining) {
        fprintf(stderr, "redlm worker: second signal: stopping now, %d jobs left pending\n", s->n_jobs);
        ev_break(loop, EVBREAK_ALL);
        return;
    }
    s->draining = 1;
    fprintf(stderr, "redlm worker: %s: no new jobs; finishing %d running jobs (up to %.0f s)\n",
            w->signum == SIGTERM ? "SIGTERM" : "SIGINT", s->n_jobs, s->o.drain_timeout);
    ev_timer_set(&s->drain, s->o.drain_timeout, 0.);
    ev_timer_start(loop, &s->drain);
    serve_check_drained(s);
}

int serve_run(rlEngine *e, const rlServeOptions *o, rlError *err) {
    rlServe *s = calloc(1, sizeof(*s));
    if (!s) return rl_error(err, RL_EMEMORY, "out of memory starting the worker");
    s->o = *o;
    s->e = e;
    s->loop = ev_default_loop(0);
    signal(SIGPIPE, SIG_IGN);
    snprintf(s->hb_key, sizeof(s->hb_key), KEYS_HEARTBEAT_PREFIX "%s", o->keys.consumer);
    snprintf(s->started, sizeof(s->started), "%lld", (long long)time(NULL));
    int rc = 0;
    s->metrics = o->metrics;
    rlWriterHooks wh = {.started = serve_on_started, .lost = serve_on_lost, .done = serve_on_job_done,
                        .retry = serve_writer_retry, .held = serve_on_held, .refused = serve_writer_refused,
                        .ctx = s};
    s->writer = writer_create(&s->o.keys, &wh);
    s->intake = (rlIntake){.keys = &s->o.keys, .max_deliveries = o->max_deliveries, .metrics = s->metrics};
    ev_async_init(&s->wake, serve_on_wake);
    s->wake.data = s;
    ev_async_start(s->loop, &s->wake);
    rlRunnerOptions ro = {.max_backlog = o->max_backlog,
                          .metrics = s->metrics, .backlog = writer_bytes(s->writer),
                          .loop = s->loop, .wake = &s->wake};
    if (!s->writer || !(s->runner = runner_start(e, &ro, err))) {
        rc = -1;
        goto done;
    }
    rlConnHooks rh = {serve_reader_ready, serve_reader_lost, serve_refused, s, o->redis_wait};
    rlConnHooks ch = {serve_cancel_ready, serve_cancel_lost, serve_refused, s, o->redis_wait};
    rlConnHooks wch = {serve_writer_ready, serve_writer_lost, serve_refused, s, o->redis_wait};
    s->reader = rconn_create(s->loop, &o->url, "jobs", &rh);
    s->canceller = rconn_create(s->loop, &o->url, "cancel", &ch);
    s->wconn = rconn_create(s->loop, &o->url, "writer", &wch);
    ev_timer_init(&s->heartbeat, serve_on_heartbeat, 0., INSTANCES_BEAT_S);
    s->heartbeat.data = s;
    ev_timer_start(s->loop, &s->heartbeat);
    double refresh = o->claim_idle_ms / 3000.0;
    ev_timer_init(&s->refresh, serve_on_refresh, refresh, refresh);
    s->refresh.data = s;
    ev_timer_start(s->loop, &s->refresh);
    ev_timer_init(&s->trim, serve_on_trim, SERVE_TRIM_S, SERVE_TRIM_S);
    s->trim.data = s;
    ev_timer_start(s->loop, &s->trim);
    ev_timer_init(&s->drain, serve_on_drain_timeout, 0., 0.);
    s->drain.data = s;
    ev_timer_init(&s->cancel_retry, serve_on_cancel_retry, 1., 0.);
    s->cancel_retry.data = s;
    ev_timer_init(&s->hold, serve_on_hold_timer, SERVE_HOLD_MIN_S, 0.);
    s->hold.data = s;
    ev_timer_init(&s->resend, serve_on_resend, SERVE_HOLD_MIN_S, 0.);
    s->resend.data = s;
    s->resend_backoff = SERVE_HOLD_MIN_S;
    ev_signal_init(&s->sigterm, serve_on_signal, SIGTERM);
    ev_signal_init(&s->sigint, serve_on_signal, SIGINT);
    s->sigterm.data = s->sigint.data = s;
    ev_signal_start(s->loop, &s->sigterm);
    ev_signal_start(s->loop, &s->sigint);
    fprintf(stderr, "redlm worker: consumer %s serving %s (group %s) from %s:%d\n", o->keys.consumer,
            o->keys.stream, o->keys.group, o->url.host, o->url.port);

    ev_run(s->loop, 0);

    s->stopping = 1; /* answers still coming start nothing */
    runner_stop(s->runner);
    s->runner = NULL;
    if (s->failed) rc = rl_error(err, s->err.code ? s->err.code : RL_EINTERNAL, "%s", s->err.msg);
    ev_timer_stop(s->loop, &s->heartbeat);
    ev_timer_stop(s->loop, &s->refresh);
    ev_timer_stop(s->loop, &s->trim);
    ev_timer_stop(s->loop, &s->drain);
    ev_timer_stop(s->loop, &s->cancel_retry);
    ev_timer_stop(s->loop, &s->hold);
    ev_timer_stop(s->loop, &s->resend);
    ev_signal_stop(s->loop, &s->sigterm);
    ev_signal_stop(s->loop, &s->sigint);
    /* Hand-back: without its heartbeat, whatever this worker still holds
     * is taken by the others' next reap, within a second or two. */
    if (rconn_ctx(s->wconn)) {
        if (s->n_jobs) fprintf(stderr, "redlm worker: handing %d unfinished jobs back\n", s->n_jobs);
        const char *argv[] = {"FCALL", FUNCTIONS_FN("redlm_release"), "1", s->o.keys.stream, s->o.keys.group,
                              s->o.keys.consumer, s->hb_key};
        redisAsyncCommandArgv(rconn_ctx(s->wconn), NULL, NULL, 7, argv, NULL);
    }
    rconn_close(s->reader, 1);
    rconn_close(s->canceller, 1);
    rconn_close(s->wconn, 0);
    /* let the closes (and the release) go out; a blocked XREAD is cut short by
     * the disconnect */
    ev_async_stop(s->loop, &s->wake);
    ev_run(s->loop, 0);
done:
    runner_stop(s->runner);
    while (s->jobs) {
        rlJob *j = s->jobs;
        s->jobs = j->next;
        job_free(j);
    }
    writer_free(s->writer);
    for (int i = 0; i < SERVE_CANCEL_RING; i++) free(s->cancelled[i]);
    free(s);
    return rc;
}
