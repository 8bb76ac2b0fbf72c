/* test_writer.c: the reply writer against a real redis-server: every
 * item stored in order, the events/s it reaches, and nothing lost when the
 * connection is killed mid-flight.  RL_BENCH_EVENTS=N sets the event count
 * (scripts/bench-redis uses it). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <ev.h>

#include "worker/redis/rconn.h"
#include "worker/redis/writer.h"
#include "tests/redis_server.h"

static rlRedisServer server;

typedef struct harness {
    struct ev_loop *loop;
    rlConn *conn;
    rlWriter *w;
    int acked;
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
static void on_ready(rlConn *c, void *ctx) { writer_connected(((harness *)ctx)->w, rconn_ctx(c)); }
static void on_lost(rlConn *c, void *ctx) {
    (void)c;
    writer_connected(((harness *)ctx)->w, NULL);
}
static void on_tick(struct ev_loop *loop, ev_timer *t, int revents) {
    (void)revents;
    harness *h = t->data;
    if (!writer_pending(h->w)) ev_break(loop, EVBREAK_ALL);
}

/* n events over `streams` reply streams, then each stream's ACK (an XACK of
 * an unknown entry: Redis answers 0, which is all the writer needs). */
static double run_writer(harness *h, int n, int streams) {
    rlItemList items = {0};
    char key[64], ev[200];
    for (int i = 0; i < n + streams; i++) {
        int s = i % streams;
        int kl = snprintf(key, sizeof(key), "redlm:reply:t%d", s);
        if (i >= n) {
            const char *argv[4] = {"XACK", "redlm:jobs", "redlm", "1-1"};
            size_t len[4] = {4, 10, 5, 3};
            items_push(&items, item_create(RL_ITEM_ACK, job_create("1-1", NULL, 0, NULL, RL_ENC_JSON, NULL, 0, 1),
                                           4, argv, len));
            continue;
        }
        int el = snprintf(ev, sizeof(ev),
                          "{\"id\":\"t%d\",\"event\":\"chunk\",\"seq\":%d,\"attempt\":1,\"index\":0,"
                          "\"token_ids\":[1,2,3,4,5,6,7,8],\"text\":\"abcdefgh\"}", s, i / streams);
        const char *argv[5] = {"XADD", key, "*", "json", ev};
        size_t len[5] = {4, (size_t)kl, 1, 4, (size_t)el};
        items_push(&items, item_create(RL_ITEM_REPLY, NULL, 5, argv, len));
    }
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    writer_push(h->w, &items);
    ev_timer tick;
    ev_timer_init(&tick, on_tick, 0.001, 0.001);
    tick.data = h;
    ev_timer_start(h->loop, &tick);
    ev_run(h->loop, 0);
    ev_timer_stop(h->loop, &tick);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    return (t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) * 1e-9;
}

static void harness_open(harness *h) {
    memset(h, 0, sizeof(*h));
    h->loop = ev_loop_new(EVFLAG_AUTO);
    h->w = writer_create(60, on_done, h);
    rlRedisUrl url;
    rlError err;
    char s[64];
    snprintf(s, sizeof(s), "redis://127.0.0.1:%d", server.port);
    assert_int_equal(redis_url_parse(s, &url, &err), 0);
    h->conn = rconn_create(h->loop, &url, "writer", on_ready, on_lost, h);
    h->admin = redis_server_connect(&server);
    freeReplyObject(redisCommand(h->admin, "FLUSHALL"));
}

static void harness_close(harness *h) {
    rconn_close(h->conn, 0);
    ev_run(h->loop, EVRUN_NOWAIT);
    writer_free(h->w);
    ev_loop_destroy(h->loop);
    redisFree(h->admin);
}

static long long xlen(redisContext *c, int s) {
    redisReply *r = redisCommand(c, "XLEN redlm:reply:t%d", s);
    long long n = r->integer;
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
    long long total = 0;
    for (int s = 0; s < streams; s++) total += xlen(h.admin, s);
    assert_int_equal(total, n);
    redisReply *r = redisCommand(h.admin, "TTL redlm:reply:t7");
    assert_true(r->integer > 0 && r->integer <= 60);
    freeReplyObject(r);
    /* in order: the seq of stream 3's entries counts up */
    r = redisCommand(h.admin, "XRANGE redlm:reply:t3 - +");
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
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
