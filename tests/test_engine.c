/* test_engine.c: the engine API on a fixture model: streaming, abort,
 * deadlines, n > 1, usage and the counters the worker exports, also with
 * pipeline stages and steps in flight.
 *
 * Tokens are compared bit for bit across schedules (a prompt run whole and
 * again through a prefix hit, one stage against two with other requests
 * beside them, a seeded draw repeated on a cached prompt), so the engines
 * run batch-invariant: by default the rows beside a token move its logits'
 * last bits (OpenBLAS sums another way for another row count, and differs
 * by CPU), which may flip a greedy near-tie or a draw. */
#include <jansson.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "worker/engine/engine.h"
#include "worker/engine/output.h"

typedef struct seen {
    int chunks, done, errors;
    int32_t tokens[4][64];      /* everything delivered, per sample */
    int n_tokens[4];
    rlFinish finish[4];
    int cached[4];
    char error_code[64];
} seen;

static void collect(void *ctx, const rlOutput *o) {
    seen *s = ctx;
    if (o->kind == RL_OUT_ERROR) {
        s->errors++;
        snprintf(s->error_code, sizeof(s->error_code), "%s", o->error_code);
        return;
    }
    json_t *ev = output_event(o, 0);   /* every output must make a valid event */
    assert_non_null(ev);
    json_decref(ev);
    memcpy(s->tokens[o->index] + s->n_tokens[o->index], o->token_ids,
           (size_t)o->n_tokens * sizeof(int32_t));
    s->n_tokens[o->index] += o->n_tokens;
    if (o->kind == RL_OUT_CHUNK) {
        s->chunks++;
        return;
    }
    s->done++;
    s->finish[o->index] = o->finish;
    s->cached[o->index] = o->cached_tokens;
    assert_int_equal(o->completion_tokens, s->n_tokens[o->index]);
}

static rlEngine *open_engine_pp(int pp) {
    const char *dir = getenv("FIXTURES") ? getenv("FIXTURES") : "build/fixtures";
    static char path[1024];
    snprintf(path, sizeof(path), "%s/models/qwen2-tiny-gqa3", dir);
    rlEngineOptions o;
    engine_options_init(&o);
    o.model = path;
    o.threads = 2;
    o.kv_cache_memory = 4u << 20;
    o.pp = pp;
    o.batch_invariant = 1;
    rlError err;
    rlEngine *e = engine_open(&o, &err);
    if (!e) fail_msg("%s", err.msg);
    return e;
}

static rlEngine *open_engine(void) { return open_engine_pp(1); }

static rlRequest *request(const char *id, int n_prompt, int max_tokens, int stream) {
    rlRequest *r = malloc(sizeof(*r));
    request_init(r);
    r->id = strdup(id);
    r->prompt_ids = malloc((size_t)n_prompt * sizeof(int32_t));
    for (int i = 0; i < n_prompt; i++) r->prompt_ids[i] = 100 + i;
    r->n_prompt_ids = n_prompt;
    r->max_tokens = max_tokens;
    r->temperature = 0;
    r->ignore_eos = 1;
    r->stream = stream;
    return r;
}

static void run(rlEngine *e, rlOutputFn fn, void *ctx) {
    rlError err;
    for (int guard = 0; engine_has_work(e); guard++) {
        assert_true(guard < 10000);
        if (engine_step(e, fn, ctx, &err)) fail_msg("%s", err.msg);
    }
}

static void test_stream_equals_done(void **state) {
    (void)state;
    rlEngine *e = open_engine();
    seen a = {0}, b = {0};
    rlError err;
    assert_int_equal(engine_add(e, request("a", 40, 12, 1), &err), 0);
    run(e, collect, &a);
    assert_int_equal(engine_add(e, request("b", 40, 12, 0), &err), 0);
    run(e, collect, &b);
    assert_true(a.chunks >= 10);
    assert_int_equal(b.chunks, 0);
    assert_int_equal(a.done, 1);
    assert_int_equal(a.n_tokens[0], 12);
    assert_memory_equal(a.tokens[0], b.tokens[0], 12 * sizeof(int32_t));
    assert_int_equal(a.finish[0], RL_FINISH_LENGTH);
    assert_int_equal(b.cached[0], 32);   /* two full blocks of the same prompt */
    rlEngineStats st;
    engine_stats(e, &st);
    assert_int_equal(st.running + st.waiting, 0);
    assert_int_equal(st.kv_blocks_used, 0);
    assert_int_equal(st.prefix_hit_tokens, 32);
    assert_int_equal(st.generation_tokens, 24);
    engine_close(e);
}

static void test_abort_and_deadline(void **state) {
    (void)state;
    rlEngine *e = open_engine();
    seen s = {0};
    rlError err;
    assert_int_equal(engine_add(e, request("long", 20, 60, 1), &err), 0);
    assert_int_equal(engine_step(e, collect, &s, &err), 0);
    assert_int_equal(engine_abort(e, "long"), 0);
    assert_int_equal(engine_abort(e, "nobody"), -1);
    run(e, collect, &s);
    assert_int_equal(s.done, 1);
    assert_int_equal(s.finish[0], RL_FINISH_ABORT);
    assert_true(s.n_tokens[0] < 60);

    seen d = {0};
    rlRequest *r = request("late", 5, 4, 0);
    r->deadline_ms = 1;   /* long past */
    assert_int_equal(engine_add(e, r, &err), 0);
    run(e, collect, &d);
    assert_int_equal(d.errors, 1);
    assert_string_equal(d.error_code, "deadline_exceeded");
    engine_close(e);
}

static void test_samples_and_stops(void **state) {
    (void)state;
    rlEngine *e = open_engine();
    seen s = {0};
    rlError err;
    rlRequest *r = request("n3", 21, 10, 0);
    r->n = 3;
    r->temperature = 1.0f;
    r->has_seed = 1;
    r->seed = 3;
    assert_int_equal(engine_add(e, r, &err), 0);
    run(e, collect, &s);
    assert_int_equal(s.done, 3);
    for (int i = 0; i < 3; i++) assert_int_equal(s.n_tokens[i], 10);
    assert_true(memcmp(s.tokens[0], s.tokens[1], 10 * sizeof(int32_t)) ||
                memcmp(s.tokens[1], s.tokens[2], 10 * sizeof(int32_t)));

    /* A stop token ends the sample at it, reason "stop". */
    seen t = {0};
    r = request("stop", 21, 10, 0);
    r->n = 1;
    r->stop_token_ids = malloc(sizeof(int32_t));
    r->stop_token_ids[0] = s.tokens[0][0];
    r->n_stop_token_ids = 1;
    r->temperature = 1.0f;
    r->has_seed = 1;
    r->seed = 3;
    assert_int_equal(engine_add(e, r, &err), 0);
    run(e, collect, &t);
    assert_int_equal(t.n_tokens[0], 1);
    assert_int_equal(t.finish[0], RL_FINISH_STOP);

    /* Refusals arrive as one error each. */
    seen u = {0};
    r = request("wide", 4, 4, 0);
    r->n = 1000;
    assert_int_equal(engine_add(e, r, &err), 0);
    run(e, collect, &u);
    assert_int_equal(u.errors, 1);
    assert_string_equal(u.error_code, "invalid_request");
    engine_close(e);
}

/* Outputs of requests "r0" .. "r9" (n = 1), each into its own seen. */
static void collect_by_id(void *ctx, const rlOutput *o) {
    seen *all = ctx;
    collect(&all[o->req->id[1] - '0'], o);
}

static void add_numbered(rlEngine *e, int i, int max_tokens) {
    char id[8];
    snprintf(id, sizeof(id), "r%d", i);
    rlError err;
    rlRequest *r = request(id, 18 + i, max_tokens, 1);
    for (int k = 0; k < r->n_prompt_ids; k++) r->prompt_ids[k] += 37 * i;
    assert_int_equal(engine_add(e, r, &err), 0);
}

/* Two stages: each step takes half of four requests, the second goes out
 * before the first is applied, so two are in flight.  An abort of a
 * request in flight takes effect once its step is back (its token from that
 * step is still delivered), a passed deadline still expires, the others
 * give what one step at a time gives, and closing with steps in flight
 * finishes them first. */
static void test_pipeline_in_flight(void **state) {
    (void)state;
    seen serial[5] = {0}, piped[5] = {0};
    rlError err;
    rlEngine *e = open_engine();
    for (int i = 0; i < 3; i++) add_numbered(e, i, 20);
    run(e, collect_by_id, serial);
    engine_close(e);

    e = open_engine_pp(2);
    for (int i = 0; i < 4; i++) add_numbered(e, i, 20);
    assert_int_equal(engine_step(e, collect_by_id, piped, &err), 0);
    rlEngineStats st;
    engine_stats(e, &st);
    assert_int_equal(st.max_steps_in_flight, 2);
    assert_int_equal(st.steps_in_flight, 1);           /* r2 and r3's prompts */
    assert_int_equal(piped[0].n_tokens[0] + piped[1].n_tokens[0], 2);
    assert_int_equal(piped[3].n_tokens[0], 0);
    assert_int_equal(engine_abort(e, "r3"), 0);
    rlRequest *late = request("r4", 5, 4, 0);
    late->deadline_ms = 1;
    assert_int_equal(engine_add(e, late, &err), 0);
    run(e, collect_by_id, piped);
    assert_int_equal(piped[3].done, 1);
    assert_int_equal(piped[3].finish[0], RL_FINISH_ABORT);
    assert_int_equal(piped[3].n_tokens[0], 1);
    assert_int_equal(piped[4].errors, 1);
    assert_string_equal(piped[4].error_code, "deadline_exceeded");
    for (int i = 0; i < 3; i++) {
        assert_int_equal(piped[i].finish[0], RL_FINISH_LENGTH);
        assert_int_equal(piped[i].n_tokens[0], 20);
        assert_memory_equal(piped[i].tokens[0], serial[i].tokens[0], 20 * sizeof(int32_t));
    }
    engine_stats(e, &st);
    assert_int_equal(st.steps_in_flight, 0);
    assert_int_equal(st.running + st.waiting, 0);
    assert_int_equal(st.kv_blocks_used, 0);
    assert_int_equal(st.generation_tokens, 3 * 20 + 1);

    seen unfinished[4] = {0};
    for (int i = 0; i < 4; i++) add_numbered(e, i, 20);
    assert_int_equal(engine_step(e, collect_by_id, unfinished, &err), 0);
    engine_stats(e, &st);
    assert_int_equal(st.steps_in_flight, 1);
    engine_close(e);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_stream_equals_done),
        cmocka_unit_test(test_abort_and_deadline),
        cmocka_unit_test(test_samples_and_stops),
        cmocka_unit_test(test_pipeline_in_flight),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
