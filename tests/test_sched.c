/* test_sched.c: the scheduler alone, driven by a fake model.
 *
 * The fake model keeps a KV "cache" of (token, position) per slot: each step
 * writes the planned tokens into their slots, then checks that every planned
 * sequence reads back exactly its own tokens through its block table.  A
 * wrong block table, a bad prefix-cache hit, a block freed while still in
 * use or a fork that shares too much all show up as a mismatch.  Its next
 * token is a hash of the sequence read back, the sample and the step, so any
 * correct schedule gives every request the same output. */
#include <jansson.h>
#include <malloc.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "sched/sched.h"

#define VOCAB 64
#define EOS 0

/* ASan's allocator leaves glibc's counters (mallinfo2) untouched. */
#if defined(__SANITIZE_ADDRESS__)
#define ASAN_ALLOCATOR 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define ASAN_ALLOCATOR 1
#endif
#endif

typedef struct fakeKV {
    int bs, n_slots;
    int32_t *tok, *pos;
} fakeKV;

static void kv_init(fakeKV *kv, const rlSchedConfig *c) {
    kv->bs = c->block_size;
    kv->n_slots = c->n_blocks * c->block_size;
    kv->tok = malloc((size_t)kv->n_slots * sizeof(int32_t));
    kv->pos = malloc((size_t)kv->n_slots * sizeof(int32_t));
    for (int i = 0; i < kv->n_slots; i++) kv->tok[i] = kv->pos[i] = -1;
}

static void kv_free(fakeKV *kv) {
    free(kv->tok);
    free(kv->pos);
}

static uint64_t mix(uint64_t h, uint64_t v) {
    h ^= v + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2);
    h *= 0xff51afd7ed558ccdULL;
    return h ^ (h >> 33);
}

/* The first half of a step on the fake model: write its tokens' KV. */
static void kv_write(fakeKV *kv, const rlStep *p) {
    for (int t = 0; t < p->n_tokens; t++) {
        assert_true(p->slots[t] >= 0 && p->slots[t] < kv->n_slots);
        kv->tok[p->slots[t]] = p->tokens[t];
        kv->pos[p->slots[t]] = p->positions[t];
    }
}

/* The second half: verify every planned sequence reads back its own tokens,
 * and return each row's token.  A step in flight writes when it goes out
 * and reads when it lands, so any step in between that reuses its blocks
 * shows up here. */
static void kv_read(fakeKV *kv, const rlStep *p, int32_t *row_tokens) {
    uint64_t *hash_at = malloc((size_t)(p->n_tokens + 1) * sizeof(uint64_t));
    for (int i = 0; i < p->n_seqs; i++) {
        const rlSchedSeq *q = &p->seq_req[i]->seqs[p->seq_index[i]];
        const int32_t *table = p->block_tables + (size_t)i * (size_t)p->max_blocks;
        int first = p->positions[p->seq_start[i]];
        assert_int_equal(p->seq_len[i], first + p->seq_start[i + 1] - p->seq_start[i]);
        uint64_t h = 0;
        for (int pos = 0; pos < p->seq_len[i]; pos++) {
            int slot = table[pos / kv->bs] * kv->bs + pos % kv->bs;
            assert_int_equal(kv->pos[slot], pos);
            assert_int_equal(kv->tok[slot], q->tokens[pos]);
            h = mix(h, (uint64_t)kv->tok[slot]);
            if (pos >= first) hash_at[p->seq_start[i] + pos - first] = h;
        }
    }
    for (int r = 0; r < p->n_rows; r++) {
        const rlSchedRow *row = &p->rows[r];
        if (row->kind == RL_ROW_PROMPT) {
            assert_int_equal(row->target, row->req->seqs[0].tokens[row->position + 1]);
            row_tokens[r] = -1;
            continue;
        }
        uint64_t h = mix(mix(hash_at[row->token], (uint64_t)row->seq), (uint64_t)row->step);
        row_tokens[r] = (int32_t)(h % VOCAB);
    }
    free(hash_at);
}

static void kv_forward(fakeKV *kv, const rlStep *p, int32_t *row_tokens) {
    kv_write(kv, p);
    kv_read(kv, p, row_tokens);
}

/* What the fake model generates for sample k of a prompt, no scheduler
 * involved: kv_read's hash of everything before each token. */
static void fake_stream(const int32_t *prompt, int n_prompt, int k, int n, int32_t *out) {
    uint64_t h = 0;
    for (int i = 0; i < n_prompt; i++) h = mix(h, (uint64_t)prompt[i]);
    for (int step = 0; step < n; step++) {
        out[step] = (int32_t)(mix(mix(h, (uint64_t)k), (uint64_t)step) % VOCAB);
        h = mix(h, (uint64_t)out[step]);
    }
}

typedef struct simReq {
    rlSchedReq *h;
    int n, max_tokens, abort_at;    /* abort after this many of its steps, -1 never */
    int ignore_eos;
    int steps, done;
    int32_t out[4][64];
    int n_out[4];
    int finished[4];
    int cached;
    int prompt_rows;                /* PROMPT rows seen: one per position 0 .. n_prompt - 2 */
} simReq;

/* Apply one step's rows to the requests (stop on EOS or max_tokens). */
static void sim_apply(rlSched *s, const rlStep *p, const int32_t *row_tokens) {
    for (int r = 0; r < p->n_rows; r++) {
        const rlSchedRow *row = &p->rows[r];
        simReq *u = row->req->user;
        if (row->kind == RL_ROW_PROMPT) {
            u->prompt_rows++;
            continue;
        }
        assert_int_equal(row->step, u->n_out[row->seq]);
        u->out[row->seq][u->n_out[row->seq]++] = row_tokens[r];
        assert_int_equal(sched_append(s, row->req, row->seq, row_tokens[r]), 0);
        if ((row_tokens[r] == EOS && !u->ignore_eos) || u->n_out[row->seq] == u->max_tokens) {
            u->finished[row->seq] = 1;
            sched_finish_seq(s, row->req, row->seq);
        }
    }
    rlSchedReq *done[p->n_seqs > 0 ? p->n_seqs : 1];
    int n_done = 0;
    for (int i = 0; i < p->n_seqs; i++) {
        rlSchedReq *h = p->seq_req[i];
        simReq *u = h->user;
        if (u->done) continue;
        if (u->max_tokens == 0 && h->seqs[p->seq_index[i]].n_computed == h->n_prompt)
            for (int k = 0; k < u->n; k++) {
                u->finished[k] = 1;
                sched_finish_seq(s, h, k);
            }
        int all = 1;
        for (int k = 0; k < u->n; k++) all &= u->finished[k];
        if (all) {
            u->done = 1;
            u->cached = h->cached_tokens;
            if (h->prompt_logprobs) assert_int_equal(u->prompt_rows, h->n_prompt - 1);
            done[n_done++] = h;
        }
    }
    for (int i = 0; i < n_done; i++) sched_remove(s, done[i]);
}

static rlSchedReq *add_plp(rlSched *s, const int32_t *prompt, int n_prompt, int n,
                           int max_tokens, int plp, void *user) {
    rlSchedParams p = {.prompt = prompt, .n_prompt = n_prompt, .n = n, .max_tokens = max_tokens,
                       .prompt_logprobs = plp, .user = user};
    rlSchedReq *r;
    assert_int_equal(sched_add(s, &p, &r), RL_SCHED_OK);
    return r;
}

static rlSchedReq *add(rlSched *s, const int32_t *prompt, int n_prompt, int n, int max_tokens,
                       void *user) {
    return add_plp(s, prompt, n_prompt, n, max_tokens, 0, user);
}

/* Up to depth steps in flight on the fake model, landing oldest first, as
 * the engine keeps them for a pipeline. */
#define MAX_DEPTH 4
typedef struct fakePipe {
    rlSchedConfig c;
    int depth, oldest, n, most;     /* most: the most steps in flight at once */
    rlStep *plans[MAX_DEPTH];
    int32_t *row_tokens;
} fakePipe;

static void pipe_init(fakePipe *f, rlSched *s, const rlSchedConfig *c) {
    memset(f, 0, sizeof(*f));
    int depth = c->pipeline_depth > 1 ? c->pipeline_depth : 1;
    assert_true(depth <= MAX_DEPTH);
    f->c = *c;
    f->depth = depth;
    for (int i = 0; i < depth; i++) assert_non_null(f->plans[i] = sched_step_create(s));
    assert_non_null(f->row_tokens = malloc((size_t)sched_max_rows(s) * sizeof(int32_t)));
}

static void pipe_free(fakePipe *f) {
    for (int i = 0; i < f->depth; i++) sched_step_free(f->plans[i]);
    free(f->row_tokens);
}

static int pipe_seqs_in_flight(const fakePipe *f) {
    int n = 0;
    for (int k = 0; k < f->n; k++) n += f->plans[(f->oldest + k) % f->depth]->n_seqs;
    return n;
}

/* Plan the next step within the budgets; it goes out (KV written, requests
 * in flight) when it holds anything.  It must hold no request already in
 * flight, and all steps in flight no more sequences than max_num_seqs. */
static rlStep *pipe_submit(fakePipe *f, rlSched *s, fakeKV *kv) {
    rlStep *p = f->plans[(f->oldest + f->n) % f->depth];
    assert_int_equal(sched_step(s, 0, p), 0);
    assert_true(p->n_tokens <= f->c.max_num_batched_tokens);
    assert_true(p->n_seqs + pipe_seqs_in_flight(f) <= f->c.max_num_seqs);
    assert_true(p->n_rows <= sched_max_rows(s));
    int n_prompt_rows = 0;
    for (int i = 0; i < p->n_rows; i++) n_prompt_rows += p->rows[i].kind == RL_ROW_PROMPT;
    if (f->c.max_prompt_rows) assert_true(n_prompt_rows <= f->c.max_prompt_rows);
    for (int i = 0; i < p->n_seqs; i++) assert_false(p->seq_req[i]->in_flight);
    if (p->n_seqs > 0) {
        kv_write(kv, p);
        sched_in_flight(s, p);
        if (++f->n > f->most) f->most = f->n;
    }
    return p;
}

/* Land the oldest step: its requests are still running with the blocks it
 * planned them with, and read back their own tokens; then its rows apply. */
static void pipe_land(fakePipe *f, rlSched *s, fakeKV *kv) {
    rlStep *p = f->plans[f->oldest];
    f->oldest = (f->oldest + 1) % f->depth;
    f->n--;
    for (int i = 0; i < p->n_seqs; i++) {
        const rlSchedReq *r = p->seq_req[i];
        const rlSchedSeq *q = &r->seqs[p->seq_index[i]];
        int need = (p->seq_len[i] + kv->bs - 1) / kv->bs;
        assert_true(r->in_flight && r->state == RL_REQ_RUNNING && q->state != RL_SEQ_FINISHED);
        assert_true(q->n_blocks >= need);
        assert_memory_equal(q->blocks, p->block_tables + (size_t)i * (size_t)p->max_blocks,
                            (size_t)need * sizeof(int32_t));
    }
    sched_landed(s, p);
    kv_read(kv, p, f->row_tokens);
    sim_apply(s, p, f->row_tokens);
}

/* A step goes out when submit says so and there is room (always when none
 * is in flight); the oldest lands when the pipeline is full or nothing went
 * out.  0 when neither happened: nothing could run. */
static int pipe_next(fakePipe *f, rlSched *s, fakeKV *kv, int submit) {
    const rlStep *p = (submit || f->n == 0) && f->n < f->depth ? pipe_submit(f, s, kv) : NULL;
    int went_out = p && p->n_seqs > 0;
    if (f->n > 0 && (f->n == f->depth || !went_out)) {
        pipe_land(f, s, kv);
        return 1;
    }
    return went_out;
}

/* How a run to the end went: the most steps in flight at once, the ticks
 * it took (pipe_next calls: each puts a step out, lands one or both) and
 * the tick by which every sample of the watched requests had drawn two
 * tokens, i.e. had run a step of its own after the prompt's. */
typedef struct pipeRun {
    int most, ticks, all_running;
} pipeRun;

static int all_drew_two(const simReq *u, int n_u) {
    for (int i = 0; i < n_u; i++)
        for (int k = 0; k < u[i].n; k++)
            if (u[i].n_out[k] < 2 && !u[i].finished[k]) return 0;
    return 1;
}

/* Every request to the end with up to c->pipeline_depth steps in flight
 * (the scheduler's config), watching u[0 .. n_u). */
static pipeRun run_watched(rlSched *s, fakeKV *kv, const rlSchedConfig *c, const simReq *u,
                           int n_u) {
    fakePipe f;
    pipe_init(&f, s, c);
    pipeRun run = {0};
    while (sched_has_work(s)) {
        assert_true(run.ticks < 100000);
        assert_true(pipe_next(&f, s, kv, 1));
        run.ticks++;
        if (!run.all_running && all_drew_two(u, n_u)) run.all_running = run.ticks;
        assert_int_equal(sched_check(s), 0);
    }
    assert_int_equal(f.n, 0);
    pipe_free(&f);
    run.most = f.most;
    return run;
}

/* run_watched watching nothing; returns the most steps in flight at once. */
static int run_to_end(rlSched *s, fakeKV *kv, const rlSchedConfig *c) {
    return run_watched(s, kv, c, NULL, 0).most;
}

static rlSchedConfig config(int n_blocks, int max_seqs, int max_tokens, int caching) {
    return (rlSchedConfig){.block_size = 16, .n_blocks = n_blocks, .max_num_seqs = max_seqs,
                           .max_num_batched_tokens = max_tokens, .max_model_len = 4096,
                           .prefix_caching = caching};
}

static void test_decode_after_prefill(void **state) {
    (void)state;
    rlSchedConfig c = config(64, 4, 256, 1);
    rlSched *s = sched_create(&c);
    int32_t prompt[40];
    for (int i = 0; i < 40; i++) prompt[i] = i + 1;
    simReq u = {.n = 1, .max_tokens = 3};
    u.h = add(s, prompt, 40, 1, 3, &u);
    rlStep *p = sched_step_create(s);
    assert_int_equal(sched_step(s, 0, p), 0);
    assert_int_equal(p->n_seqs, 1);
    assert_int_equal(p->n_tokens, 40);
    assert_int_equal(p->n_rows, 1);
    assert_int_equal(p->rows[0].token, 39);
    assert_int_equal(p->positions[39], 39);
    assert_int_equal(p->slots[39], p->block_tables[2] * 16 + 7);
    assert_int_equal(sched_append(s, u.h, 0, 5), 0);
    assert_int_equal(sched_step(s, 0, p), 0);
    assert_int_equal(p->n_tokens, 1);
    assert_int_equal(p->tokens[0], 5);
    assert_int_equal(p->positions[0], 40);
    assert_int_equal(p->seq_len[0], 41);
    assert_int_equal(p->rows[0].step, 1);
    sched_remove(s, u.h);
    rlSchedStats st;
    sched_stats(s, &st);
    assert_int_equal(st.blocks.used, 0);
    assert_int_equal(st.blocks.cached, 2);   /* the prompt's two full blocks */
    assert_int_equal(sched_check(s), 0);
    sched_step_free(p);
    sched_free(s);
}

/* Decodes come first; a long prompt takes what the token budget leaves. */
static void test_chunked_prefill(void **state) {
    (void)state;
    rlSchedConfig c = config(64, 4, 32, 1);
    rlSched *s = sched_create(&c);
    fakeKV kv;
    kv_init(&kv, &c);
    int32_t a[8] = {1, 2, 3, 4, 5, 6, 7, 8}, b[100];
    for (int i = 0; i < 100; i++) b[i] = 9 + i % 50;
    simReq ua = {.n = 1, .max_tokens = 30}, ub = {.n = 1, .max_tokens = 2};
    ua.h = add(s, a, 8, 1, 30, &ua);
    int32_t rt[64];
    rlStep *p = sched_step_create(s);
    assert_int_equal(sched_step(s, 0, p), 0);
    kv_forward(&kv, p, rt);
    sim_apply(s, p, rt);
    ub.h = add(s, b, 100, 1, 2, &ub);
    int chunks = 0;
    while (!ub.done && !ua.done) {
        assert_int_equal(sched_step(s, 0, p), 0);
        assert_true(p->n_tokens <= 32);
        assert_ptr_equal(p->seq_req[0], ua.h);        /* the decode leads */
        assert_int_equal(p->seq_start[1], 1);
        if (p->n_seqs == 2 && ub.h->seqs[0].n_computed < 100 + 1) chunks++;
        kv_forward(&kv, p, rt);
        sim_apply(s, p, rt);
        if (ub.n_out[0] > 0) break;
    }
    assert_true(chunks >= 3);   /* 100 tokens in chunks of at most 31 */
    run_to_end(s, &kv, &c);
    assert_int_equal(sched_check(s), 0);
    kv_free(&kv);
    sched_step_free(p);
    sched_free(s);
}

/* A prompt ahead in order (a lower priority value) never holds decodes back. */
static void test_decodes_before_prompts(void **state) {
    (void)state;
    rlSchedConfig c = config(64, 4, 24, 1);
    rlSched *s = sched_create(&c);
    fakeKV kv;
    kv_init(&kv, &c);
    int32_t a[300], b[4] = {1, 2, 3, 4}, rt[64];
    for (int i = 0; i < 300; i++) a[i] = 5 + i % 50;
    simReq ua = {.n = 1, .max_tokens = 2}, ub = {.n = 1, .max_tokens = 30};
    ub.h = add(s, b, 4, 1, 30, &ub);
    rlStep *p = sched_step_create(s);
    assert_int_equal(sched_step(s, 0, p), 0);   /* b's prompt */
    kv_forward(&kv, p, rt);
    sim_apply(s, p, rt);
    rlSchedParams pa = {.prompt = a, .n_prompt = 300, .n = 1, .max_tokens = 2, .priority = -5,
                        .user = &ua};
    assert_int_equal(sched_add(s, &pa, &ua.h), RL_SCHED_OK);
    int steps = 0;
    while (!ua.done && !ub.done) {
        assert_int_equal(sched_step(s, 0, p), 0);
        int has_b = 0;
        for (int i = 0; i < p->n_seqs; i++) has_b |= p->seq_req[i] == ub.h;
        assert_true(has_b);
        assert_true(p->n_tokens <= 24);
        steps++;
        kv_forward(&kv, p, rt);
        sim_apply(s, p, rt);
    }
    assert_true(steps > 10);   /* a's prompt took many chunks, b decoded in each */
    run_to_end(s, &kv, &c);
    kv_free(&kv);
    sched_step_free(p);
    sched_free(s);
}

static void test_refusals(void **state) {
    (void)state;
    rlSchedConfig c = config(6, 2, 64, 1);
    c.max_model_len = 100;
    rlSched *s = sched_create(&c);
    int32_t prompt[90] = {0};
    rlSchedParams p = {.prompt = prompt, .n_prompt = 90, .n = 1, .max_tokens = 11};
    rlSchedReq *r;
    assert_int_equal(sched_add(s, &p, &r), RL_SCHED_TOO_LONG);
    p.max_tokens = 10;
    assert_int_equal(sched_add(s, &p, &r), RL_SCHED_TOO_BIG);  /* 7 blocks of 6 */
    p.n_prompt = 60;
    p.max_tokens = 20;                                         /* 5 blocks */
    assert_int_equal(sched_add(s, &p, &r), RL_SCHED_OK);
    sched_remove(s, r);
    p.n = 3;
    assert_int_equal(sched_add(s, &p, &r), RL_SCHED_TOO_WIDE);
    p.n = 1;
    p.n_prompt = 0;
    assert_int_equal(sched_add(s, &p, &r), RL_SCHED_EMPTY);
    sched_free(s);
}

/* sched_max_tokens: the largest max_tokens sched_add takes, bound by the
 * pool (blocks of 16) or by the context (max_model_len 100). */
static void test_max_tokens(void **state) {
    (void)state;
    int32_t prompt[100] = {0};
    static const struct { int n_blocks, n_prompt, n, want; } cases[] = {
        {6, 90, 1, 6},   /* 5 full prompt blocks + 1 with 10 of its 16 used */
        {6, 60, 2, 4},   /* 3 shared blocks, one each for 2 samples with 12 used */
        {6, 20, 1, 76},  /* 1 shared block + 5 of its own, 4 of them used by the prompt */
        {6, 5, 1, 91},
        {8, 5, 1, 95},   /* 128 tokens of pool: the context binds */
        {8, 40, 2, 40},  /* 2 shared blocks, 3 each for 2 samples, the prompt tail in 8 */
        {8, 100, 1, 0},  /* no room at all */
        {6, 96, 2, 0},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        rlSchedConfig c = config(cases[i].n_blocks, 2, 64, 1);
        c.max_model_len = 100;
        rlSched *s = sched_create(&c);
        int m = sched_max_tokens(s, cases[i].n_prompt, cases[i].n);
        assert_int_equal(m, cases[i].want);
        rlSchedParams p = {.prompt = prompt, .n_prompt = cases[i].n_prompt, .n = cases[i].n, .max_tokens = m};
        rlSchedReq *r;
        if (m > 0) {
            assert_int_equal(sched_add(s, &p, &r), RL_SCHED_OK);
            sched_remove(s, r);
        }
        p.max_tokens = m + 1;
        assert_true(sched_add(s, &p, &r) < 0);
        sched_free(s);
    }
}

/* Thousands queued, each with max_tokens the whole rest of a 4,096 context
 * (a chat request without max_tokens): a queued request holds what its
 * prompt needs, not its largest sizes (some 17 KB here). */
static void test_queued_memory(void **state) {
    (void)state;
#ifdef ASAN_ALLOCATOR
    print_message("ASan's allocator: mallinfo2 counts nothing, skipped\n");
    skip();
#endif
    enum { N = 5000, PROMPT = 50 };
    rlSchedConfig c = config(256, 8, 256, 1);
    rlSched *s = sched_create(&c);
    assert_non_null(s);
    int32_t prompt[PROMPT];
    for (int i = 0; i < PROMPT; i++) prompt[i] = 1 + i;
    rlSchedParams p = {.prompt = prompt, .n_prompt = PROMPT, .n = 1,
                       .max_tokens = sched_max_tokens(s, PROMPT, 1)};
    assert_int_equal(p.max_tokens, 4096 - PROMPT);
    size_t before = mallinfo2().uordblks;
    for (int i = 0; i < N; i++) {
        rlSchedReq *r;
        assert_int_equal(sched_add(s, &p, &r), RL_SCHED_OK);
    }
    size_t after = mallinfo2().uordblks;
    sched_free(s);
    if (after <= before) {
        print_message("mallinfo2 counts nothing under this allocator, skipped\n");
        skip();
    }
    size_t per = (after - before) / N;
    print_message("%zu bytes per queued request\n", per);
    assert_true(per < 1024);
}

/* n > 1: the samples share the prompt's full blocks, each owns its tail. */
static void test_fork_shares_blocks(void **state) {
    (void)state;
    rlSchedConfig c = config(64, 8, 256, 0);
    rlSched *s = sched_create(&c);
    fakeKV kv;
    kv_init(&kv, &c);
    int32_t prompt[37];
    for (int i = 0; i < 37; i++) prompt[i] = 1 + i % 60;
    simReq u = {.n = 4, .max_tokens = 5, .abort_at = -1};
    u.h = add(s, prompt, 37, 4, 5, &u);
    int32_t rt[64];
    rlStep *p = sched_step_create(s);
    assert_int_equal(sched_step(s, 0, p), 0);
    assert_int_equal(p->n_rows, 4);
    kv_forward(&kv, p, rt);
    for (int k = 0; k < 4; k++) {
        assert_int_equal(p->rows[k].seq, k);
        assert_int_equal(sched_append(s, u.h, k, (int32_t)(1 + k)), 0);
        u.out[k][u.n_out[k]++] = 1 + k;
    }
    for (int k = 1; k < 4; k++) {
        assert_int_equal(u.h->seqs[k].blocks[0], u.h->seqs[0].blocks[0]);
        assert_int_equal(u.h->seqs[k].blocks[1], u.h->seqs[0].blocks[1]);
        assert_int_equal(u.h->seqs[k].n_computed, 32);
    }
    assert_int_equal(sched_check(s), 0);
    assert_int_equal(sched_step(s, 0, p), 0);
    assert_int_equal(p->n_seqs, 4);
    assert_int_equal(p->n_tokens, 1 + 3 * 6);   /* samples 1..3 recompute the 5-token tail */
    kv_forward(&kv, p, rt);
    sched_remove(s, u.h);
    assert_int_equal(sched_check(s), 0);
    kv_free(&kv);
    sched_step_free(p);
    sched_free(s);
}

/* Fixture prompts in order, one at a time: only full shared blocks are hits,
 * and the last prompt token is always computed. */
static void test_prefix_fixture(void **state) {
    (void)state;
    const char *dir = getenv("FIXTURES") ? getenv("FIXTURES") : "build/fixtures";
    char path[1024];
    snprintf(path, sizeof(path), "%s/models/qwen2-tiny-gqa3/reference.json", dir);
    json_error_t jerr;
    json_t *ref = json_load_file(path, 0, &jerr);
    assert_non_null(ref);
    const char *names[] = {"prefix-base", "prefix-half", "prefix+1", "prefix+10", "prefix+40"};
    const int expect[] = {0, 96, 192, 192, 192};
    rlSchedConfig c = config(256, 1, 2048, 1);
    rlSched *s = sched_create(&c);
    fakeKV kv;
    kv_init(&kv, &c);
    for (int i = 0; i < 5; i++) {
        json_t *ids = NULL, *pr;
        size_t k;
        json_array_foreach(json_object_get(ref, "prompts"), k, pr)
            if (!strcmp(json_string_value(json_object_get(pr, "name")), names[i]))
                ids = json_object_get(pr, "ids");
        assert_non_null(ids);
        int n = (int)json_array_size(ids);
        int32_t *prompt = malloc((size_t)n * sizeof(int32_t));
        for (int j = 0; j < n; j++) prompt[j] = (int32_t)json_integer_value(json_array_get(ids, j));
        simReq u = {.n = 1, .max_tokens = 4};
        u.h = add(s, prompt, n, 1, 4, &u);
        run_to_end(s, &kv, &c);
        assert_int_equal(u.cached, expect[i]);
        free(prompt);
    }
    rlSchedStats st;
    sched_stats(s, &st);
    assert_int_equal(st.prefix_hit_tokens, 96 + 3 * 192);
    assert_int_equal(st.prefix_query_tokens, 200 + 100 + 201 + 210 + 240);
    json_decref(ref);
    kv_free(&kv);
    sched_free(s);
}

/* A pool too small for both: the younger is preempted, recomputed, and both
 * produce what they produce alone; also with steps in flight, where only a
 * request that has landed may be preempted (pipe_land checks that one in
 * flight kept its blocks). */
static void test_preemption(void **state) {
    (void)state;
    int32_t a[20], b[20];
    for (int i = 0; i < 20; i++) a[i] = 1 + i, b[i] = 30 + i;
    simReq alone[2] = {{.n = 1, .max_tokens = 40}, {.n = 1, .max_tokens = 40}};
    for (int i = 0; i < 2; i++) {
        rlSchedConfig c = config(8, 4, 256, 0);
        rlSched *s = sched_create(&c);
        fakeKV kv;
        kv_init(&kv, &c);
        alone[i].h = add(s, i ? b : a, 20, 1, 40, &alone[i]);
        run_to_end(s, &kv, &c);
        kv_free(&kv);
        sched_free(s);
    }
    for (int depth = 1; depth <= 3; depth++) {
        rlSchedConfig c = config(5, 4, 256, 0);
        c.pipeline_depth = depth;
        rlSched *s = sched_create(&c);
        fakeKV kv;
        kv_init(&kv, &c);
        simReq both[2] = {{.n = 1, .max_tokens = 40}, {.n = 1, .max_tokens = 40}};
        both[0].h = add(s, a, 20, 1, 40, &both[0]);
        both[1].h = add(s, b, 20, 1, 40, &both[1]);
        int most = run_to_end(s, &kv, &c);
        assert_int_equal(most, depth > 1 ? 2 : 1);   /* one step per request */
        rlSchedStats st;
        sched_stats(s, &st);
        assert_true(st.preemptions >= 1);
        for (int i = 0; i < 2; i++) {
            assert_int_equal(both[i].n_out[0], alone[i].n_out[0]);
            assert_memory_equal(both[i].out[0], alone[i].out[0], (size_t)alone[i].n_out[0] * 4);
        }
        kv_free(&kv);
        sched_free(s);
    }
}

/* Long generations in a pool too small for both requests: every sample's
 * tokens and block table grow far past what sched_add gave them (a
 * 10-token prompt: room for 26 tokens and 3 blocks of 4; each sample ends
 * at 74 and 19), through prefix hits (b shares a's first 8 tokens), forks
 * (n = 2), preemption and re-admission (whose lookup hits the blocks it
 * had computed), with one step at a time and with two in flight.  Every
 * sample gets exactly the tokens the fake model gives it alone. */
static void test_long_generation(void **state) {
    (void)state;
    enum { PROMPT = 10, GEN = 64 };
    int32_t prompts[2][PROMPT], want[2][GEN];
    for (int i = 0; i < PROMPT; i++) prompts[0][i] = prompts[1][i] = 1 + i;
    prompts[1][8] = prompts[1][9] = 40;
    for (int depth = 1; depth <= 2; depth++) {
        rlSchedConfig c = config(44, 8, 64, 1);
        c.block_size = 4;
        c.pipeline_depth = depth;
        rlSched *s = sched_create(&c);
        fakeKV kv;
        kv_init(&kv, &c);
        simReq u[2];
        for (int i = 0; i < 2; i++) {
            u[i] = (simReq){.n = 2, .max_tokens = GEN, .abort_at = -1, .ignore_eos = 1};
            u[i].h = add(s, prompts[i], PROMPT, 2, GEN, &u[i]);
            assert_int_equal(u[i].h->seqs[1].cap_tokens, PROMPT + 16);
            assert_int_equal(u[i].h->seqs[1].cap_blocks, 3);
        }
        run_to_end(s, &kv, &c);
        rlSchedStats st;
        sched_stats(s, &st);
        assert_true(st.preemptions >= 1);
        assert_true(st.prefix_hit_tokens > 8);   /* b on a's blocks, re-admissions on their own */
        for (int i = 0; i < 2; i++)
            for (int k = 0; k < 2; k++) {
                fake_stream(prompts[i], PROMPT, k, GEN, want[k]);
                assert_int_equal(u[i].n_out[k], GEN);
                assert_memory_equal(u[i].out[k], want[k], sizeof(want[k]));
            }
        kv_free(&kv);
        sched_free(s);
    }
}

/* Steps in flight hold disjoint requests.  An idle pipeline starts a lone
 * request at once; with more, each step takes its share (1/depth of those
 * that want to run); a request in flight is in no later plan, and once
 * every request is in flight a step finds nothing; a plan in flight keeps
 * its arrays while others are built; once it lands its requests run
 * again; and the outputs are those of one step at a time.  Prompts 0 and 3
 * share a block, so 3 hits it while 0's step, which computes it, is in flight. */
static void test_in_flight(void **state) {
    (void)state;
    enum { N = 5 };
    int32_t prompts[N][20];
    simReq serial[N], u[N];
    for (int i = 0; i < N; i++) {
        for (int j = 0; j < 20; j++) prompts[i][j] = 1 + (i * 20 + j) % 60;
        serial[i] = u[i] = (simReq){.n = 1, .max_tokens = 6, .abort_at = -1};
    }
    rlSchedConfig c = config(64, 8, 256, 1);
    rlSched *s = sched_create(&c);
    fakeKV kv;
    kv_init(&kv, &c);
    for (int i = 0; i < N; i++) serial[i].h = add(s, prompts[i], 20, 1, 6, &serial[i]);
    run_to_end(s, &kv, &c);
    kv_free(&kv);
    sched_free(s);

    c.pipeline_depth = 2;
    s = sched_create(&c);
    kv_init(&kv, &c);
    /* The pipe holds more steps than the scheduler shares for, to see a step
     * find nothing once every request is in flight. */
    rlSchedConfig roomy = c;
    roomy.pipeline_depth = MAX_DEPTH;
    fakePipe f;
    pipe_init(&f, s, &roomy);
    u[0].h = add(s, prompts[0], 20, 1, 6, &u[0]);
    const rlStep *a = pipe_submit(&f, s, &kv);
    assert_int_equal(a->n_seqs, 1);
    assert_ptr_equal(a->seq_req[0], u[0].h);
    assert_true(u[0].h->in_flight);
    int32_t a_tokens[20], a_slots[20], a_tables[2];
    memcpy(a_tokens, a->tokens, sizeof(a_tokens));
    memcpy(a_slots, a->slots, sizeof(a_slots));
    memcpy(a_tables, a->block_tables, sizeof(a_tables));
    for (int i = 1; i < N; i++) u[i].h = add(s, prompts[i], 20, 1, 6, &u[i]);
    /* Five want to run: shares of three (the first step's one included). */
    const rlStep *b = pipe_submit(&f, s, &kv);
    assert_int_equal(b->n_seqs, 3);
    for (int i = 0; i < 3; i++) assert_ptr_equal(b->seq_req[i], u[1 + i].h);
    assert_int_equal(u[3].h->cached_tokens, 16);
    assert_int_equal(f.n, 2);
    const rlStep *d = pipe_submit(&f, s, &kv);
    assert_int_equal(d->n_seqs, 1);
    assert_ptr_equal(d->seq_req[0], u[4].h);
    assert_int_equal(pipe_submit(&f, s, &kv)->n_seqs, 0);
    assert_int_equal(f.n, 3);
    assert_int_equal(sched_check(s), 0);
    assert_memory_equal(a->tokens, a_tokens, sizeof(a_tokens));
    assert_memory_equal(a->slots, a_slots, sizeof(a_slots));
    assert_memory_equal(a->block_tables, a_tables, sizeof(a_tables));
    pipe_land(&f, s, &kv);
    assert_false(u[0].h->in_flight);
    assert_int_equal(u[0].n_out[0], 1);
    const rlStep *e = pipe_submit(&f, s, &kv);
    assert_int_equal(e->n_seqs, 1);
    assert_ptr_equal(e->seq_req[0], u[0].h);
    while (sched_has_work(s)) {
        assert_true(pipe_next(&f, s, &kv, 1));
        assert_int_equal(sched_check(s), 0);
    }
    for (int i = 0; i < N; i++) {
        assert_int_equal(u[i].n_out[0], serial[i].n_out[0]);
        assert_memory_equal(u[i].out[0], serial[i].out[0], (size_t)serial[i].n_out[0] * 4);
    }
    rlSchedStats st;
    sched_stats(s, &st);
    assert_int_equal(st.blocks.used, 0);
    pipe_free(&f);
    kv_free(&kv);
    sched_free(s);
}

/* Under a pipeline, a request's samples run together: requests of n
 * samples take about the ticks the same requests take with one sample (the
 * forks' prompt tails ride along with their leader's first decode), and
 * every sample is running within a few ticks of the start, not once the
 * samples before it finish.  Shapes: two n = 2 requests, admitted into one
 * step as their leaders' prompts, whose leaders' decodes alone then filled
 * the share of two sequences; three n = 4, where one request's four decodes
 * and the others' leaders filled the share of six; four n = 4.  Outputs are
 * the fake model's streams. */
static void test_pipeline_samples_together(void **state) {
    (void)state;
    enum { PROMPT = 20, GEN = 24, SLACK = 2 };
    static const struct { int n_reqs, n; } shapes[] = {{2, 2}, {3, 4}, {4, 4}};
    for (size_t sh = 0; sh < sizeof(shapes) / sizeof(shapes[0]); sh++) {
        int n_reqs = shapes[sh].n_reqs, n = shapes[sh].n;
        int32_t prompts[4][PROMPT], want[GEN];
        for (int i = 0; i < n_reqs; i++)
            for (int j = 0; j < PROMPT; j++) prompts[i][j] = 1 + (i * 7 + j * 3) % 60;
        pipeRun runs[2];   /* n samples each, then one */
        for (int v = 0; v < 2; v++) {
            int each = v ? 1 : n;
            rlSchedConfig c = config(256, 16, 256, 1);
            c.pipeline_depth = 2;
            rlSched *s = sched_create(&c);
            fakeKV kv;
            kv_init(&kv, &c);
            simReq u[4];
            for (int i = 0; i < n_reqs; i++) {
                u[i] = (simReq){.n = each, .max_tokens = GEN, .abort_at = -1, .ignore_eos = 1};
                u[i].h = add(s, prompts[i], PROMPT, each, GEN, &u[i]);
            }
            runs[v] = run_watched(s, &kv, &c, u, n_reqs);
            assert_int_equal(runs[v].most, 2);
            for (int i = 0; i < n_reqs; i++)
                for (int k = 0; k < each; k++) {
                    fake_stream(prompts[i], PROMPT, k, GEN, want);
                    assert_int_equal(u[i].n_out[k], GEN);
                    assert_memory_equal(u[i].out[k], want, sizeof(want));
                }
            kv_free(&kv);
            sched_free(s);
        }
        print_message("%d requests of n = %d at depth 2: %d ticks (n = 1: %d), every sample "
                      "running by tick %d (n = 1: %d)\n", n_reqs, n, runs[0].ticks,
                      runs[1].ticks, runs[0].all_running, runs[1].all_running);
        assert_true(runs[0].ticks <= runs[1].ticks + SLACK);
        assert_true(runs[0].all_running <= runs[1].all_running + SLACK);
    }
}

/* Lower priority value first (vLLM's order), then arrival; a passed deadline expires the
 * request. */
static void test_priority_and_deadline(void **state) {
    (void)state;
    rlSchedConfig c = config(64, 1, 256, 1);
    rlSched *s = sched_create(&c);
    int32_t prompt[4] = {1, 2, 3, 4};
    rlSchedParams p = {.prompt = prompt, .n_prompt = 4, .n = 1, .max_tokens = 1};
    rlSchedReq *low, *high, *late;
    assert_int_equal(sched_add(s, &p, &low), RL_SCHED_OK);
    p.deadline_ms = 1000;
    assert_int_equal(sched_add(s, &p, &late), RL_SCHED_OK);
    p.deadline_ms = 0;
    p.priority = -5;
    assert_int_equal(sched_add(s, &p, &high), RL_SCHED_OK);
    rlStep *pl = sched_step_create(s);
    assert_int_equal(sched_step(s, 2000, pl), 0);
    assert_int_equal(pl->n_seqs, 1);
    assert_ptr_equal(pl->seq_req[0], high);
    assert_int_equal(pl->n_expired, 0);
    sched_finish_seq(s, high, 0);
    sched_remove(s, high);
    assert_int_equal(sched_step(s, 2000, pl), 0);
    assert_ptr_equal(pl->seq_req[0], low);
    assert_int_equal(pl->n_expired, 1);   /* checked as soon as it is first in line */
    assert_ptr_equal(pl->expired[0], late);
    sched_remove(s, late);
    sched_remove(s, low);
    assert_false(sched_has_work(s));
    assert_int_equal(sched_check(s), 0);
    sched_step_free(pl);
    sched_free(s);
}

/* Unreferenced cached blocks are evicted oldest first. */
static void test_lru_eviction(void **state) {
    (void)state;
    rlBlockPool *p = block_pool_create(3, 2);
    int32_t t[3][2] = {{1, 2}, {3, 4}, {5, 6}};
    int b[3];
    for (int i = 0; i < 3; i++) {
        b[i] = block_alloc(p);
        block_register(p, b[i], -1, t[i]);
    }
    assert_int_equal(block_alloc(p), -1);
    for (int i = 0; i < 3; i++) block_unref(p, b[i]);
    assert_int_equal(block_lookup(p, -1, t[0]), b[0]);   /* 0 is used again: 1 is now oldest */
    block_unref(p, b[0]);
    assert_int_equal(block_alloc(p), b[1]);
    assert_int_equal(block_lookup(p, -1, t[1]), -1);
    assert_int_equal(block_lookup(p, -1, t[2]), b[2]);
    int32_t other[2] = {1, 2};
    assert_int_equal(block_lookup(p, b[2], other), -1);  /* same tokens, other parent */
    block_pool_free(p);
}

/* Thousands of random requests: shared prefixes, n > 1, aborts, a tiny pool.
 * Outputs must equal those of a roomy run without prefix caching, and at the
 * end every block is free or cached.  With depth > 1 up to depth steps are
 * in flight, going out and landing at random (pipe_submit and pipe_land
 * check that no step holds a request in flight and that one in flight
 * keeps its blocks); an abort of a request in flight waits for its step. */
typedef struct randomRun {
    int blocks, seqs, budget, caching, prompt_rows, depth;
} randomRun;

static void run_random(uint64_t seed, int n_reqs, randomRun run, simReq *reqs, rlSchedStats *st) {
    rlSchedConfig c = config(run.blocks, run.seqs, run.budget, run.caching);
    c.max_model_len = 512;
    c.max_prompt_rows = run.prompt_rows;
    c.pipeline_depth = run.depth;
    rlSched *s = sched_create(&c);
    assert_non_null(s);
    fakeKV kv;
    kv_init(&kv, &c);
    fakePipe pipe;
    pipe_init(&pipe, s, &c);
    int32_t bases[4][200];
    uint64_t h = seed, coin = seed;
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 200; j++) bases[i][j] = 1 + (int32_t)((h = mix(h, 7)) % (VOCAB - 1));
    int32_t prompt[300];
    int added = 0;
    while (added < n_reqs || sched_has_work(s)) {
        for (int k = 0; k < 3 && added < n_reqs; k++, added++) {
            uint64_t r = mix(seed, (uint64_t)added);
            simReq *u = &reqs[added];
            int shared = (int)(r % 5) < 4 ? (int)((r >> 8) % 200) : 0;
            int own = 1 + (int)((r >> 16) % 60);
            memcpy(prompt, bases[(r >> 24) % 4], (size_t)shared * sizeof(int32_t));
            for (int j = 0; j < own; j++) prompt[shared + j] = 1 + (int32_t)(mix(r, (uint64_t)j) % (VOCAB - 1));
            memset(u, 0, sizeof(*u));
            u->n = 1 + (int)((r >> 32) % 7 == 0 ? (r >> 36) % 4 : 0);
            u->max_tokens = (int)((r >> 40) % 48);
            u->abort_at = (r >> 48) % 10 == 0 ? (int)((r >> 52) % 8) : -1;
            u->h = add_plp(s, prompt, shared + own, u->n, u->max_tokens, (r >> 56) % 9 == 0, u);
        }
        /* One time in four the oldest step lands before the pipeline is full. */
        if (!pipe_next(&pipe, s, &kv, (coin = mix(coin, 3)) % 4 != 0))
            assert_true(!sched_has_work(s) || added < n_reqs);
        /* Aborts: a request dies after being scheduled abort_at times. */
        for (int i = 0; i < added; i++) {
            simReq *u = &reqs[i];
            if (u->done || u->abort_at < 0 || u->h->in_flight) continue;
            if (u->h->state == RL_REQ_RUNNING && u->steps++ >= u->abort_at) {
                u->done = 2;
                sched_remove(s, u->h);
            }
        }
        assert_int_equal(sched_check(s), 0);
    }
    assert_int_equal(pipe.n, 0);
    if (run.depth > 1) assert_int_equal(pipe.most, run.depth);
    sched_stats(s, st);
    assert_int_equal(st->blocks.used, 0);
    assert_int_equal(st->blocks.free + st->blocks.cached, run.blocks);
    assert_int_equal(st->running + st->waiting, 0);
    pipe_free(&pipe);
    kv_free(&kv);
    sched_free(s);
}

static void test_random_property(void **state) {
    (void)state;
    enum { N = 3000 };
    simReq *ref = calloc(N, sizeof(simReq)), *got = calloc(N, sizeof(simReq));
    rlSchedStats st_ref, st;
    run_random(42, N, (randomRun){4096, 64, 2048, 0, 0, 1}, ref, &st_ref);
    const randomRun runs[] = {
        {64, 16, 64, 1, 0, 1},  {40, 8, 256, 0, 5, 1},  {2048, 4, 512, 1, 0, 1},
        {128, 32, 48, 1, 1, 1}, {64, 16, 64, 1, 0, 2},  {40, 8, 256, 0, 5, 3},
        {2048, 16, 512, 1, 0, 2}, {128, 32, 48, 1, 1, 4}};
    for (size_t k = 0; k < sizeof(runs) / sizeof(runs[0]); k++) {
        run_random(42, N, runs[k], got, &st);
        if (runs[k].blocks <= 64) assert_true(st.preemptions > 10);
        if (runs[k].caching) assert_true(st.prefix_hit_tokens > 0);
        for (int i = 0; i < N; i++) {
            if (ref[i].done != 1 || got[i].done != 1) continue;
            for (int j = 0; j < ref[i].n; j++) {
                assert_int_equal(got[i].n_out[j], ref[i].n_out[j]);
                assert_memory_equal(got[i].out[j], ref[i].out[j], (size_t)ref[i].n_out[j] * 4);
            }
        }
    }
    free(ref);
    free(got);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_decode_after_prefill),
        cmocka_unit_test(test_chunked_prefill),
        cmocka_unit_test(test_decodes_before_prompts),
        cmocka_unit_test(test_refusals), cmocka_unit_test(test_max_tokens),
        cmocka_unit_test(test_queued_memory),
        cmocka_unit_test(test_fork_shares_blocks),
        cmocka_unit_test(test_prefix_fixture),
        cmocka_unit_test(test_preemption),
        cmocka_unit_test(test_long_generation),
        cmocka_unit_test(test_in_flight),
        cmocka_unit_test(test_pipeline_samples_together),
        cmocka_unit_test(test_priority_and_deadline),
        cmocka_unit_test(test_lru_eviction),
        cmocka_unit_test(test_random_property),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
