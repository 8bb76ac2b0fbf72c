/* test_writer.c: the reply writer against a real redis-server: every
 * item stored in order, the events/s it reaches (each event an FCALL of the
 * fenced redlm_reply), nothing lost when the connection is killed
 * mid-flight, nothing written for a job whose entry another consumer took,
 * and a reply key of another type never given a TTL but answered with a dead
 * letter, an XACK and a counted error; a dead letter refused (its key
 * holds a string) acknowledges nothing, and is sent again; a command
 * failing inside a job operation answered with its error code once; an
 * entry deleted under a dead consumer dead-lettered by the reap, once its
 * dead letter can be written.  RL_BENCH_EVENTS=N sets the
 * event count (scripts/bench-redis uses it). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <ev.h>
#include <jansson.h>

#include "worker/redis/functions.h"
#include "worker/redis/rconn.h"
#include "worker/redis/writer.h"
#include "tests/redis_server.h"

static rlRedisServer server;

static const rlKeys keys = {.stream = "redlm:jobs", .group = "redlm", .consumer = "w", .dead = "redlm:dead",
                            .cancel = "redlm:cancel", .reply_prefix = "redlm:reply:",
                            .running = "redlm:jobs:running", .reply_ttl = 60, .dead_maxlen = 1000};

typedef struct harness {
    struct ev_loop *loop;
    rlConn *conn;
    rlWriter *w;
    int acked, lost, held;
    int kill_after;          /* kill the connection once this many are acked */
    redisContext *admin;
} harness;

static void on_done(void *ctx, rlJob *job) {
    harness *h = ctx;
    h->acked++;
    job_free(job);
    if (h->kill_after && h->acked == h->kill_after) {
        freeReplyObject(redisCommand(h->admin, "CLIENT KILL TYPE normal SKIPME yes"));
        h->kill_after = 0;
    }
}
static void on_lost(void *ctx, rlJob *job, const char *why) {
    (void)job, (void)why;
    ((harness *)ctx)->lost++;
}
static void on_held(void *ctx, rlJob *job, const char *why) {
    (void)job;
    assert_true(!strncmp(why, FUNCTIONS_HELD " ", 5));
    ((harness *)ctx)->held++;
}
static void on_ready(rlConn *c, void *ctx) {
    functions_load(rconn_ctx(c), NULL, NULL);
    writer_connected(((harness *)ctx)->w, rconn_ctx(c));
}
static void on_conn_lost(rlConn *c, void *ctx) {
    (void)c;
    writer_connected(((harness *)ctx)->w, NULL);
}
static void on_tick(struct ev_loop *loop, ev_timer *t, int revents) {
    (void)revents;
    harness *h = t->data;
    if (writer_pending(h->w) == writer_held(h->w)) ev_break(loop, EVBREAK_ALL);
}

/* A job entry read by consumer `who` (its first delivery): the job. */
static rlJob *job_read(harness *h, int s, const char *who) {
    redisReply *r = redisCommand(h->admin, "XADD redlm:jobs * json {\"id\":\"t%d\"}", s);
    redisReply *g = redisCommand(h->admin, "XREADGROUP GROUP redlm %s COUNT 1 STREAMS redlm:jobs >", who);
    assert_int_equal(g->type, REDIS_REPLY_ARRAY);
    char id[16], reply[64];
    snprintf(id, sizeof(id), "t%d", s);
    snprintf(reply, sizeof(reply), "redlm:reply:t%d", s);
    rlJob *j = job_create(r->str, id, strlen(id), reply, RL_ENC_JSON, 1);
    freeReplyObject(r);
    freeReplyObject(g);
    return j;
}

static double run_items(harness *h, rlItemList *items) {
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    writer_push(h->w, items);
    ev_timer tick;
    ev_timer_init(&tick, on_tick, 0.001, 0.001);
    tick.data = h;
    ev_timer_start(h->loop, &tick);
    ev_run(h->loop, 0);
    ev_timer_stop(h->loop, &tick);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    return (t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) * 1e-9;
}

/* n events over `streams` jobs (one reply stream each), then each job's ACK. */
static double run_writer(harness *h, int n, int streams) {
    rlItemList items = {0};
    rlJob **jobs = calloc((size_t)streams, sizeof(*jobs));
    for (int s = 0; s < streams; s++) jobs[s] = job_read(h, s, "w");
    for (int i = 0; i < n; i++) {
        int s = i % streams;
        json_t *ev = json_pack("{s:s, s:s, s:i, s:i, s:i, s:[iiiiiiii], s:s}", "id", jobs[s]->id, "event",
                               "chunk", "seq", i / streams, "attempt", 1, "index", 0, "token_ids", 1, 2, 3,
                               4, 5, 6, 7, 8, "text", "abcdefgh");
        assert_int_equal(items_event(&items, jobs[s], ev), 0);
        json_decref(ev);
    }
    for (int s = 0; s < streams; s++) assert_int_equal(items_ack(&items, jobs[s]), 0);
    free(jobs);
    return run_items(h, &items);
}

static void harness_open(harness *h) {
    memset(h, 0, sizeof(*h));
    h->loop = ev_loop_new(EVFLAG_AUTO);
    rlWriterHooks wh = {.lost = on_lost, .done = on_done, .held = on_held, .ctx = h};
    h->w = writer_create(&keys, &wh);
    rlRedisUrl url;
    rlError err;
    char s[64];
    snprintf(s, sizeof(s), "redis://127.0.0.1:%d", server.port);
    assert_int_equal(redis_url_parse(s, &url, &err), 0);
    h->admin = redis_server_connect(&server);
    freeReplyObject(redisCommand(h->admin, "FLUSHALL"));
    freeReplyObject(redisCommand(h->admin, "XGROUP CREATE redlm:jobs redlm 0 MKSTREAM"));
    rlConnHooks ch = {.ready = on_ready, .lost = on_conn_lost, .ctx = h};
    h->conn = rconn_create(h->loop, &url, "writer", &ch);
}

static void harness_close(harness *h) {
    rconn_close(h->conn, 0);
    ev_run(h->loop, EVRUN_NOWAIT);
    writer_free(h->w);
    ev_loop_destroy(h->loop);
    redisFree(h->admin);
}

static long long command_int(redisContext *c, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    redisReply *r = redisvCommand(c, fmt, ap);
    va_end(ap);
    long long n = r->type == REDIS_REPLY_INTEGER ? r->integer : -99;
    freeReplyObject(r);
    return n;
}

static long long pending(redisContext *c) {
    redisReply *r = redisCommand(c, "XPENDING redlm:jobs redlm");
    long long n = r->element[0]->integer;
    freeReplyObject(r);
    return n;
}

static void test_writer_throughput(void **state) {
    (void)state;
    harness h;
    harness_open(&h);
    const char *env = getenv("RL_BENCH_EVENTS");
    int n = env ? atoi(env) : 50000, streams = 100;
    double secs = run_writer(&h, n, streams);
    printf("reply writer: %d events in %.3f s = %.0f events/s\n", n, secs, n / secs);
    assert_int_equal(h.acked, streams);
    assert_int_equal(h.lost, 0);
    assert_int_equal(writer_errors(h.w), 0);
    long long total = 0;
    for (int s = 0; s < streams; s++) total += command_int(h.admin, "XLEN redlm:reply:t%d", s);
    assert_int_equal(total, n);
    assert_int_equal(pending(h.admin), 0);
    long long ttl = command_int(h.admin, "TTL redlm:reply:t7");
    assert_true(ttl > 0 && ttl <= 60);
    /* in order: the seq of stream 3's entries counts up */
    redisReply *r = redisCommand(h.admin, "XRANGE redlm:reply:t3 - +");
    for (size_t i = 0; i < r->elements; i++) {
        char want[32];
        snprintf(want, sizeof(want), "\"seq\":%zu,", i);
        assert_non_null(strstr(r->element[i]->element[1]->element[1]->str, want));
    }
    freeReplyObject(r);
    harness_close(&h);
}

static void test_writer_survives_killed_connection(void **state) {
    (void)state;
    harness h;
    harness_open(&h);
    h.kill_after = 3; /* after the first ACKs: the rest is mid-flight */
    int n = 20000, streams = 10;
    run_writer(&h, n, streams);
    assert_int_equal(h.acked, streams);
    assert_int_equal(pending(h.admin), 0);
    /* every seq of every stream present at least once (repeats allowed) */
    for (int s = 0; s < streams; s++) {
        redisReply *r = redisCommand(h.admin, "XRANGE redlm:reply:t%d - +", s);
        char *seen = calloc((size_t)(n / streams), 1);
        for (size_t i = 0; i < r->elements; i++) {
            const char *p = strstr(r->element[i]->element[1]->element[1]->str, "\"seq\":");
            seen[atoi(p + 6)] = 1;
        }
        for (int q = 0; q < n / streams; q++) assert_int_equal(seen[q], 1);
        free(seen);
        freeReplyObject(r);
    }
    harness_close(&h);
}

/* Another consumer claimed the entry: none of the job's writes lands, the
 * XACK included (the entry stays pending, now the other's). */
static void test_writer_fenced(void **state) {
    (void)state;
    harness h;
    harness_open(&h);
    rlJob *job = job_read(&h, 1, "w");
    freeReplyObject(redisCommand(h.admin, "XCLAIM redlm:jobs redlm other 0 %s", job->entry));
    rlItemList items = {0};
    json_t *ev = json_pack("{s:s, s:s, s:i, s:i}", "id", "t1", "event", "chunk", "seq", 0, "attempt", 1);
    items_event(&items, job, ev);
    json_decref(ev);
    items_fail(&items, job, "internal", "test");
    run_items(&h, &items);
    assert_int_equal(h.acked, 1);
    assert_int_equal(h.lost, 3); /* event, error event, dead letter + XACK */
    assert_int_equal(writer_errors(h.w), 0);
    assert_int_equal(command_int(h.admin, "EXISTS redlm:reply:t1"), 0);
    assert_int_equal(command_int(h.admin, "EXISTS redlm:dead"), 0);
    assert_int_equal(pending(h.admin), 1);
    harness_close(&h);
}

/* A reply key holding a string: no XADD, no TTL on it, one counted error,
 * a dead letter with the entry's own fields, and the entry acknowledged. */
static void test_writer_refused_reply_key(void **state) {
    (void)state;
    harness h;
    harness_open(&h);
    freeReplyObject(redisCommand(h.admin, "SET redlm:reply:t2 victim"));
    rlJob *job = job_read(&h, 2, "w");
    rlItemList items = {0};
    for (int i = 0; i < 3; i++) {
        json_t *ev = json_pack("{s:s, s:s, s:i, s:i}", "id", "t2", "event", "chunk", "seq", i, "attempt", 1);
        items_event(&items, job, ev);
        json_decref(ev);
    }
    items_ack(&items, job);
    run_items(&h, &items);
    assert_int_equal(h.acked, 1);
    assert_int_equal(writer_errors(h.w), 1);
    assert_int_equal(command_int(h.admin, "TTL redlm:reply:t2"), -1);
    assert_int_equal(pending(h.admin), 0);
    redisReply *r = redisCommand(h.admin, "XRANGE redlm:dead - +");
    assert_int_equal(r->elements, 1);
    const redisReply *f = r->element[0]->element[1];
    assert_string_equal(f->element[0]->str, "json");
    assert_string_equal(f->element[1]->str, "{\"id\":\"t2\"}");
    assert_string_equal(f->element[2]->str, "error");
    assert_non_null(strstr(f->element[3]->str, "reply_refused"));
    freeReplyObject(r);
    harness_close(&h);
}

/* The dead-letter stream refuses the dead letter (its key holds a string):
 * the failed job's XACK is held, the entry left pending, until it is sent
 * again once the key is a stream; then dead letter and XACK land. */
static void test_writer_dead_letter_refused(void **state) {
    (void)state;
    harness h;
    harness_open(&h);
    freeReplyObject(redisCommand(h.admin, "SET redlm:dead not-a-stream"));
    rlJob *job = job_read(&h, 3, "w");
    rlItemList items = {0};
    assert_int_equal(items_fail(&items, job, "invalid_request", "test"), 0);
    run_items(&h, &items);
    assert_int_equal(h.held, 1);
    assert_int_equal(h.acked, 0);
    assert_int_equal(writer_held(h.w), 1);
    assert_int_equal(pending(h.admin), 1);
    assert_int_equal(command_int(h.admin, "XLEN redlm:reply:t3"), 1); /* the error event */
    freeReplyObject(redisCommand(h.admin, "DEL redlm:dead"));
    writer_resend_held(h.w);
    run_items(&h, &(rlItemList){0});
    assert_int_equal(h.held, 1);
    assert_int_equal(h.acked, 1);
    assert_int_equal(writer_pending(h.w), 0);
    assert_int_equal(pending(h.admin), 0);
    assert_int_equal(command_int(h.admin, "XLEN redlm:dead"), 1);
    harness_close(&h);
}

/* A reply key and the dead-letter stream both refused: nothing is
 * acknowledged, not even by the job's own XACK sent after the refused
 * event; the entry stays pending, its delivery count raised past the
 * attempt's. */
static void test_writer_reply_and_dead_letter_refused(void **state) {
    (void)state;
    harness h;
    harness_open(&h);
    freeReplyObject(redisCommand(h.admin, "SET redlm:reply:t4 victim"));
    freeReplyObject(redisCommand(h.admin, "SET redlm:dead not-a-stream"));
    rlJob *job = job_read(&h, 4, "w");
    rlItemList items = {0};
    json_t *ev = json_pack("{s:s, s:s, s:i, s:i}", "id", "t4", "event", "chunk", "seq", 0, "attempt", 1);
    items_event(&items, job, ev);
    json_decref(ev);
    items_ack(&items, job);
    run_items(&h, &items);
    assert_int_equal(h.acked, 1); /* the job's XACK answered (fenced out): the job is over here */
    assert_int_equal(h.lost, 2); /* the event (HELD), the XACK (LOST) */
    assert_int_equal(pending(h.admin), 1);
    redisReply *r = redisCommand(h.admin, "XPENDING redlm:jobs redlm - + 1");
    assert_string_equal(r->element[0]->element[1]->str, "w");
    assert_int_equal(r->element[0]->element[3]->integer, 2);
    freeReplyObject(r);
    r = redisCommand(h.admin, "GET redlm:reply:t4");
    assert_string_equal(r->str, "victim");
    freeReplyObject(r);
    harness_close(&h);
}

/* One start answered through redlm_batch by a user (NULL: the admin). */
static redisReply *start_as(const char *user, const char *entry) {
    redisContext *c = redis_server_connect(&server);
    assert_non_null(c);
    if (user) freeReplyObject(redisCommand(c, "AUTH %s pw", user));
    redisReply *r = redisCommand(c, "FCALL " FUNCTIONS_FN("redlm_batch") " 3 redlm:jobs redlm:jobs:running redlm:dead redlm w 0 1000 "
                                    "start %s 1 t1", entry);
    redisFree(c);
    assert_non_null(r);
    assert_int_equal(r->type, REDIS_REPLY_ARRAY);
    assert_int_equal(r->elements, 1);
    return r;
}

/* Workers of another version on the same Redis (a rolling upgrade): their
 * library, loaded again (REPLACE) after ours as a reconnecting worker of
 * that version does, leaves ours and its functions in place, and ours
 * leaves theirs. */
static void test_functions_versions_coexist(void **state) {
    (void)state;
    redisContext *admin = redis_server_connect(&server);
    freeReplyObject(redisCommand(admin, "FLUSHALL"));
    freeReplyObject(redisCommand(admin, "FUNCTION FLUSH"));
    static const char other[] =
        "#!lua name=redlm\n"
        "redis.register_function('redlm_batch', function(keys, a) return 'other' end)\n";
    const char *load_other[] = {"FUNCTION", "LOAD", "REPLACE", other};
    const char *load[] = {"FUNCTION", "LOAD", "REPLACE", functions_library};
    redisReply *r = redisCommandArgv(admin, 4, load_other, NULL);
    assert_int_equal(r->type, REDIS_REPLY_STRING);
    freeReplyObject(r);
    r = redisCommandArgv(admin, 4, load, NULL);
    assert_int_equal(r->type, REDIS_REPLY_STRING);
    assert_string_equal(r->str, FUNCTIONS_LIBRARY);
    freeReplyObject(r);
    freeReplyObject(redisCommandArgv(admin, 4, load_other, NULL));
    freeReplyObject(redisCommand(admin, "XGROUP CREATE redlm:jobs redlm 0 MKSTREAM"));
    redisReply *e = redisCommand(admin, "XADD redlm:jobs * json {\"id\":\"t1\"}");
    freeReplyObject(redisCommand(admin, "XREADGROUP GROUP redlm w COUNT 1 STREAMS redlm:jobs >"));
    r = start_as(NULL, e->str);   /* this version's redlm_batch answers */
    assert_int_not_equal(r->element[0]->type, REDIS_REPLY_ERROR);
    freeReplyObject(r);
    r = redisCommand(admin, "FCALL redlm_batch 0");
    assert_int_equal(r->type, REDIS_REPLY_STRING);
    assert_string_equal(r->str, "other");
    freeReplyObject(r);
    r = redisCommand(admin, "FUNCTION LIST LIBRARYNAME redlm*");
    assert_int_equal(r->type, REDIS_REPLY_ARRAY);
    assert_int_equal(r->elements, 2);   /* redlm and redlm_v<N> */
    freeReplyObject(r);
    freeReplyObject(e);
    redisFree(admin);
}

/* A fresh Redis with this version's functions and one job entry, read by
 * consumer (its XADD answer: the entry's id in ->str). */
static redisReply *one_job(redisContext *admin, const char *id, const char *consumer) {
    freeReplyObject(redisCommand(admin, "FLUSHALL"));
    const char *load[] = {"FUNCTION", "LOAD", "REPLACE", functions_library};
    freeReplyObject(redisCommandArgv(admin, 4, load, NULL));
    freeReplyObject(redisCommand(admin, "XGROUP CREATE redlm:jobs redlm 0 MKSTREAM"));
    redisReply *e = redisCommand(admin, "XADD redlm:jobs * json {\"id\":\"%s\"}", id);
    freeReplyObject(redisCommand(admin, "XREADGROUP GROUP redlm %s COUNT 1 STREAMS redlm:jobs >", consumer));
    return e;
}

/* A command that fails inside a job operation is answered in Redis's own
 * words, its code once: "WRONGTYPE ...", "ERR The user ...", never
 * "ERR ERR The user ..." (the text the worker logs). */
static void test_functions_error_read_once(void **state) {
    (void)state;
    redisContext *admin = redis_server_connect(&server);
    redisReply *e = one_job(admin, "t1", "w");
    freeReplyObject(redisCommand(admin, "SET redlm:jobs:running not-a-hash"));
    redisReply *r = start_as(NULL, e->str);
    assert_int_equal(r->element[0]->type, REDIS_REPLY_ERROR);
    assert_true(!strncmp(r->element[0]->str, "WRONGTYPE ", 10));
    freeReplyObject(r);
    freeReplyObject(redisCommand(admin, "DEL redlm:jobs:running"));
    freeReplyObject(redisCommand(admin, "ACL SETUSER nohget on >pw ~* +@all -hget"));
    r = start_as("nohget", e->str);
    assert_int_equal(r->element[0]->type, REDIS_REPLY_ERROR);
    printf("a refused HGET inside redlm_batch: %s\n", r->element[0]->str);
    assert_true(!strncmp(r->element[0]->str, "ERR The user executing the script", 33));
    freeReplyObject(r);
    freeReplyObject(redisCommand(admin, "ACL DELUSER nohget"));
    freeReplyObject(e);
    redisFree(admin);
}

/* A running hash of another type: redlm_keys names it, and a job's XACK
 * is refused before anything is written (no job acknowledged unanswered). */
static void test_functions_wrong_key_type(void **state) {
    (void)state;
    redisContext *admin = redis_server_connect(&server);
    redisReply *e = one_job(admin, "t1", "w");
    const char *look = "FCALL " FUNCTIONS_FN("redlm_keys") " 3 redlm:jobs redlm:jobs:running redlm:dead stream hash stream";
    redisReply *r = redisCommand(admin, look);
    assert_int_equal(r->type, REDIS_REPLY_STRING);
    freeReplyObject(r);
    freeReplyObject(redisCommand(admin, "SET redlm:jobs:running not-a-hash"));
    r = redisCommand(admin, look);
    assert_int_equal(r->type, REDIS_REPLY_ERROR);
    assert_true(!strncmp(r->str, FUNCTIONS_WRONGTYPE " redlm:jobs:running holds a string where this pool keeps a hash",
                         strlen(FUNCTIONS_WRONGTYPE " redlm:jobs:running holds a string where this pool keeps a hash")));
    freeReplyObject(r);
    r = redisCommand(admin, "FCALL " FUNCTIONS_FN("redlm_batch") " 3 redlm:jobs redlm:jobs:running redlm:dead redlm w 0 1000 "
                            "ack %s 1 t1", e->str);
    assert_int_equal(r->type, REDIS_REPLY_ARRAY);
    assert_int_equal(r->element[0]->type, REDIS_REPLY_ERROR);
    assert_true(!strncmp(r->element[0]->str, FUNCTIONS_WRONGTYPE " ", 10));
    freeReplyObject(r);
    assert_int_equal(pending(admin), 1);
    freeReplyObject(redisCommand(admin, "DEL redlm:jobs:running"));
    r = redisCommand(admin, "FCALL " FUNCTIONS_FN("redlm_batch") " 3 redlm:jobs redlm:jobs:running redlm:dead redlm w 0 1000 "
                            "ack %s 1 t1", e->str);
    assert_int_equal(r->element[0]->type, REDIS_REPLY_INTEGER);
    freeReplyObject(r);
    assert_int_equal(pending(admin), 0);
    freeReplyObject(e);
    redisFree(admin);
}

/* An entry deleted from the stream while a consumer now without a heartbeat
 * held it: redlm_reap answers it with a dead letter entry_deleted and its
 * XACK, but while the dead letter is refused it leaves it pending. */
static void test_functions_reap_deleted(void **state) {
    (void)state;
    redisContext *admin = redis_server_connect(&server);
    redisReply *e = one_job(admin, "d1", "gone");
    freeReplyObject(redisCommand(admin, "HSET redlm:jobs:running d1 %s", e->str));
    freeReplyObject(redisCommand(admin, "XDEL redlm:jobs %s", e->str));
    freeReplyObject(redisCommand(admin, "SET redlm:dead not-a-stream"));
    const char *reap = "FCALL " FUNCTIONS_FN("redlm_reap") " 3 redlm:jobs redlm:jobs:running redlm:dead redlm w redlm:instances: 8 0 1000";
    for (int fixed = 0; fixed < 2; fixed++) {
        redisReply *r = redisCommand(admin, reap);
        assert_int_equal(r->type, REDIS_REPLY_ARRAY);
        assert_int_equal(r->elements, 1);
        assert_int_equal(r->element[0]->elements, 2);
        assert_string_equal(r->element[0]->element[0]->str, e->str);
        const char *msg = r->element[0]->element[1]->str;
        assert_int_equal(!strncmp(msg, FUNCTIONS_HELD " ", 5), !fixed);
        assert_non_null(strstr(msg, "consumer gone"));
        assert_non_null(strstr(msg, "it ran job 'd1'"));
        assert_int_equal(pending(admin), !fixed);
        freeReplyObject(r);
        if (!fixed) freeReplyObject(redisCommand(admin, "DEL redlm:dead"));
    }
    assert_int_equal(command_int(admin, "HEXISTS redlm:jobs:running d1"), 0);
    redisReply *r = redisCommand(admin, "XRANGE redlm:dead - +");
    assert_int_equal(r->elements, 1);
    const redisReply *f = r->element[0]->element[1];
    assert_string_equal(f->element[0]->str, "error");
    assert_non_null(strstr(f->element[1]->str, "\"code\":\"entry_deleted\""));
    assert_string_equal(f->element[5]->str, e->str);
    freeReplyObject(r);
    freeReplyObject(e);
    redisFree(admin);
}

static int setup(void **state) {
    (void)state;
    signal(SIGPIPE, SIG_IGN);
    return redis_server_start(&server);
}
static int teardown(void **state) {
    (void)state;
    redis_server_stop(&server);
    return 0;
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_writer_throughput),
        cmocka_unit_test(test_writer_survives_killed_connection),
        cmocka_unit_test(test_writer_fenced),
        cmocka_unit_test(test_writer_refused_reply_key),
        cmocka_unit_test(test_functions_error_read_once),
        cmocka_unit_test(test_writer_dead_letter_refused),
        cmocka_unit_test(test_writer_reply_and_dead_letter_refused),
        cmocka_unit_test(test_functions_reap_deleted),
        cmocka_unit_test(test_functions_wrong_key_type),
        cmocka_unit_test(test_functions_versions_coexist),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
