/* test_ranks.c: every TP x PP layout of CPU ranks against the reference.
 *
 * For every fixture model (tests/fixture_paths.h: Qwen2 at two shapes,
 * Qwen3, YaRN, Llama 3, and each quantized format, whose shards cut on group
 * boundaries) and the layouts 1x1, 2x1, 3x1, 4x1, 6x1, 1x2, 1x3, 3x2, 2x3
 * (TP 4 and 6 leave ranks with no query heads on most of them; TP 3 cuts
 * Qwen3's 4 heads and Llama's 8 unevenly): the prompts prefill together in
 * one step (so the pipeline cuts
 * it into micro-batches), then decode 24 greedy tokens in two halves whose
 * steps are in flight at once (ranks_submit / ranks_wait).  Prompt logprobs
 * must be within 1e-3 of reference.json, greedy tokens equal to the
 * reference up to its first margin under 1e-2, and equal to the 1x1 run's
 * up to the first margin under 1e-3.  Models of two layers must refuse the
 * three-stage layouts with a reason instead.  1x1 runs a second time as
 * `--collectives always` does, on a rank thread with communicators of one
 * rank (NCCL on GPUs), under the same checks, and 3x1 again with
 * --batch-invariant (its all-reduces an all-gather and a sum in rank
 * order).  The prompts are those of up
 * to 100 tokens; RL_TEST_FULL=1 takes all of them. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/gpuinfo.h"
#include "worker/model/checkpoint.h"
#include "worker/engine/ranks.h"
#include "tests/fixture_paths.h"

#define N_GEN 24
#define BLOCK 16
#define MAX_SEQS 32
#define MAX_TOKENS 8192
#define MAX_BLOCKS 128
/* CPU fp32 tolerances; RL_TEST_BACKEND=cuda (tests/gpu_ranks.sh) widens
 * them to 16-bit ones, as tests/test_forward.c does. */
static double TOL = 1e-3, MARGIN = 1e-2, SAME = 1e-3;
/* FP8 on CUDA (W8A8 at prefill): tests/test_forward.c says why. */
#define FP8_TOL 1.0
static double TOL16 = 5e-2, MARGIN16 = 0.1, SAME16 = 0.1;
static const char *BACKEND = "cpu";
static rlDtype DTYPE = RL_F32;
static int GPUS = 64;           /* layouts with more ranks are skipped on GPUs */

typedef struct tSeq {
    json_t *ref;
    int ids[2048 + N_GEN];
    int n_prompt, n_ids;
    int32_t blocks[MAX_BLOCKS];
    float prompt_lp[2048];
    int gen[N_GEN];
} tSeq;

typedef struct tFix {
    const char *name;
    rlCheckpoint *ck;
    rlModelConfig cfg;
    json_t *ref;
    int n;
    tSeq seqs[MAX_SEQS];
    int n_blocks;
    int base_gen[MAX_SEQS][N_GEN]; /* the 1x1 run */
    int have_base;
} tFix;

static double json_num(json_t *a, size_t i) { return json_number_value(json_array_get(a, i)); }

static int fix_setup(void **state, const char *name) {
    tFix *f = calloc(1, sizeof(*f));
    char dir[512], ref[600];
    fixture_model_dir(dir, sizeof(dir), name);
    fixture_reference(ref, sizeof(ref), name);
    rlError err;
    f->name = name;
    f->ck = checkpoint_open(dir, &f->cfg, &err);
    if (!f->ck) fail_msg("%s", err.msg);
    if (!strcmp(BACKEND, "cuda")) {
        int fp8 = f->cfg.quant.method == RL_QUANT_FP8;
        TOL = fp8 ? FP8_TOL : TOL16, MARGIN = fp8 ? FP8_TOL : MARGIN16, SAME = fp8 ? FP8_TOL : SAME16;
        if (!fp8 && f->cfg.quant.method && DTYPE == RL_BF16) TOL = 0.1;  /* test_forward.c: why */
        if (!fp8 && fixture_bf16_tolerance(name) > TOL) {   /* MoE routing near ties: why there */
            TOL = SAME = fixture_bf16_tolerance(name);
            MARGIN = fmax(MARGIN, TOL);
        }
    }
    json_error_t jerr;
    f->ref = json_load_file(ref, 0, &jerr);
    if (!f->ref) fail_msg("%s: %s", ref, jerr.text);
    int full = getenv("RL_TEST_FULL") != NULL, next_block = 0;
    json_t *prompts = json_object_get(f->ref, "prompts"), *p;
    size_t i;
    json_array_foreach(prompts, i, p) {
        json_t *ids = json_object_get(p, "ids");
        int n = (int)json_array_size(ids);
        if ((!full && n > 100) || f->n == MAX_SEQS) continue;
        tSeq *s = &f->seqs[f->n++];
        s->ref = p;
        s->n_prompt = n;
        for (int j = 0; j < n; j++) s->ids[j] = (int)json_integer_value(json_array_get(ids, (size_t)j));
        for (int b = 0; b * BLOCK < n + N_GEN; b++) s->blocks[b] = next_block++;
    }
    f->n_blocks = next_block;
    *state = f;
    return 0;
}

static const char *g_model;     /* the fixture the group being run sets up */
static int setup_model(void **state) { return fix_setup(state, g_model); }

static int fix_teardown(void **state) {
    tFix *f = *state;
    if (!f) return 0;       /* the setup failed and said why */
    checkpoint_close(f->ck);
    json_decref(f->ref);
    free(f);
    return 0;
}

/* One step's arrays, kept alive while the step is in flight. */
typedef struct tStep {
    int32_t tokens[MAX_TOKENS], pos[MAX_TOKENS], slots[MAX_TOKENS];
    int32_t seq_start[MAX_SEQS + 1], seq_len[MAX_SEQS], tables[MAX_SEQS * MAX_BLOCKS];
    rlRowSpec rows[MAX_TOKENS];
    rlRowResult res[MAX_TOKENS];
    int row_seq[MAX_TOKENS], row_pos[MAX_TOKENS];
    rlBatch b;
} tStep;

/* Build a step over seqs[which[0..n)]: new tokens from each one's cached
 * length (n_ids - new) to n_ids. */
static void step_build(tStep *st, tSeq **which, const int *cached, int n) {
    int nt = 0, nr = 0;
    for (int i = 0; i < n; i++) {
        tSeq *s = which[i];
        st->seq_start[i] = nt;
        st->seq_len[i] = s->n_ids;
        memcpy(st->tables + i * MAX_BLOCKS, s->blocks, sizeof(s->blocks));
        for (int p = cached[i]; p < s->n_ids; p++) {
            st->tokens[nt] = s->ids[p];
            st->pos[nt] = p;
            st->slots[nt] = s->blocks[p / BLOCK] * BLOCK + p % BLOCK;
            rlRowSpec r = {.token = nt, .target = -1, .top_p = 1};
            if (p < s->n_prompt - 1) r.target = s->ids[p + 1];
            else if (p == s->n_ids - 1) r.sample = 1;
            if (r.target >= 0 || r.sample) {
                st->row_seq[nr] = i, st->row_pos[nr] = p;
                st->rows[nr++] = r;
            }
            nt++;
        }
    }
    st->seq_start[n] = nt;
    st->b = (rlBatch){.n_seqs = n, .n_tokens = nt, .tokens = st->tokens, .positions = st->pos,
                      .slots = st->slots, .seq_start = st->seq_start, .seq_len = st->seq_len,
                      .block_tables = st->tables, .max_blocks = MAX_BLOCKS, .n_rows = nr,
                      .rows = st->rows};
}

static void step_take(tStep *st, tSeq **which) {
    for (int r = 0; r < st->b.n_rows; r++) {
        tSeq *s = which[st->row_seq[r]];
        if (!st->rows[r].sample) {
            s->prompt_lp[st->row_pos[r] + 1] = st->res[r].target_logprob;
        } else {
            int g = s->n_ids - s->n_prompt;
            s->gen[g] = st->res[r].token;
            s->ids[s->n_ids++] = st->res[r].token;
        }
    }
}

/* Steps before the first whose reference margin is under m. */
static int steps_above(json_t *ref, double m) {
    json_t *margin = json_object_get(ref, "greedy_margin");
    int n = 0;
    while (n < N_GEN && json_num(margin, (size_t)n) >= m) n++;
    return n;
}

static void run_layout(tFix *f, int tp, int pp, int collectives, int invariant) {
    rlRanksOptions o = {
        .cfg = f->cfg, .backend = BACKEND, .dtype = DTYPE, .threads = 2, .tp = tp, .pp = pp,
        .collectives = collectives, .batch_invariant = invariant,
        .src = checkpoint_lookup, .src_ctx = f->ck, .block_size = BLOCK,
        .n_blocks = f->n_blocks, .max_tokens = MAX_TOKENS, .max_rows = MAX_TOKENS, .quiet = 1,
    };
    /* GPU ranks size their KV cache from what their devices have left. */
    if (!strcmp(BACKEND, "cuda")) o.n_blocks = 0, o.gpu_memory_utilization = 0.3;
    rlError err = {0};
    if (tp * pp > GPUS) {
        print_message("%s %dx%d: skipped, %d GPU%s here\n", f->name, tp, pp, GPUS,
                      GPUS == 1 ? "" : "s");
        return;
    }
    rlRanks *r = ranks_open(&o, &err);
    if (pp > f->cfg.num_layers) {
        /* More stages than layers (hd128 has 2): refused with a reason. */
        assert_null(r);
        assert_int_equal(err.code, RL_EUSAGE);
        return;
    }
    if (!r) fail_msg("%s %dx%d: %s", f->name, tp, pp, err.msg);
    if (ranks_n_blocks(r) < f->n_blocks)
        fail_msg("%s %dx%d: %d KV blocks, the test needs %d", f->name, tp, pp, ranks_n_blocks(r),
                 f->n_blocks);
    tStep *a = calloc(1, sizeof(*a)), *b = calloc(1, sizeof(*b));
    tSeq *which[MAX_SEQS];
    int cached[MAX_SEQS];
    for (int i = 0; i < f->n; i++) {
        which[i] = &f->seqs[i];
        cached[i] = 0;
        f->seqs[i].n_ids = f->seqs[i].n_prompt;
    }
    /* Every prompt in one step. */
    step_build(a, which, cached, f->n);
    if (ranks_forward(r, &a->b, a->res, &err)) fail_msg("%s %dx%d: %s", f->name, tp, pp, err.msg);
    step_take(a, which);
    /* Decode in two halves, both steps in flight before waiting. */
    int h = f->n / 2;
    for (int g = 1; g < N_GEN; g++) {
        for (int i = 0; i < f->n; i++) cached[i] = f->seqs[i].n_ids - 1;
        step_build(a, which, cached, h);
        step_build(b, which + h, cached + h, f->n - h);
        uint64_t ta, tb;
        if (ranks_submit(r, &a->b, a->res, &ta, &err) || ranks_submit(r, &b->b, b->res, &tb, &err) ||
            ranks_wait(r, tb, &err))
            fail_msg("%s %dx%d decode: %s", f->name, tp, pp, err.msg);
        step_take(a, which);
        step_take(b, which + h);
    }
    ranks_close(r);
    free(a);
    free(b);

    for (int i = 0; i < f->n; i++) {
        tSeq *s = &f->seqs[i];
        const char *name = json_string_value(json_object_get(s->ref, "name"));
        json_t *plp = json_object_get(s->ref, "prompt_logprobs");
        for (int p = 1; p < s->n_prompt; p++)
            if (fabs(s->prompt_lp[p] - json_num(plp, (size_t)p - 1)) > TOL)
                fail_msg("%s %dx%d %s: prompt logprob %d is %g, reference %g", f->name, tp, pp,
                         name, p, s->prompt_lp[p], json_num(plp, (size_t)p - 1));
        json_t *greedy = json_object_get(s->ref, "greedy");
        for (int g = 0; g < steps_above(s->ref, MARGIN); g++)
            if (s->gen[g] != (int)json_integer_value(json_array_get(greedy, (size_t)g)))
                fail_msg("%s %dx%d %s: greedy token %d is %d, reference %d", f->name, tp, pp,
                         name, g, s->gen[g],
                         (int)json_integer_value(json_array_get(greedy, (size_t)g)));
        if (!f->have_base) {
            memcpy(f->base_gen[i], s->gen, sizeof(s->gen));
            continue;
        }
        for (int g = 0; g < steps_above(s->ref, SAME); g++)
            if (s->gen[g] != f->base_gen[i][g])
                fail_msg("%s %dx%d %s: greedy token %d is %d, 1x1 gave %d", f->name, tp, pp,
                         name, g, s->gen[g], f->base_gen[i][g]);
    }
    f->have_base = 1;
}

#define LAYOUT(tp, pp)                                                  \
    static void test_##tp##x##pp(void **state) { run_layout(*state, tp, pp, 0, 0); }
LAYOUT(1, 1)
LAYOUT(2, 1)
LAYOUT(3, 1)
LAYOUT(4, 1)
LAYOUT(6, 1)
LAYOUT(1, 2)
LAYOUT(1, 3)
LAYOUT(3, 2)
LAYOUT(2, 3)

static void test_1x1_collectives(void **state) { run_layout(*state, 1, 1, 1, 0); }
/* --batch-invariant over 3 TP ranks: the all-reduces as an all-gather and a
 * sum in rank order (rl_model_invariant_reduce), within the reference's
 * bounds and the 1x1 run's greedy tokens like any layout. */
static void test_3x1_invariant(void **state) { run_layout(*state, 3, 1, 0, 1); }

/* A layout the model cannot take fails cleanly at open. */
static void test_bad_layout(void **state) {
    tFix *f = *state;
    int partition[2] = {1, 5};
    rlRanksOptions o = {.cfg = f->cfg, .backend = "cpu", .threads = 1, .tp = 1, .pp = 2,
                        .pp_partition = partition, .src = checkpoint_lookup, .src_ctx = f->ck,
                        .block_size = BLOCK, .n_blocks = 4, .max_tokens = 64, .max_rows = 64,
                        .quiet = 1};
    rlError err = {0};
    assert_null(ranks_open(&o, &err));
    assert_int_equal(err.code, RL_EUSAGE);
    o.pp = 4;
    o.pp_partition = NULL;
    assert_null(ranks_open(&o, &err));
    assert_non_null(strstr(err.msg, "stages"));
    /* CPU ranks cannot size the KV cache from free memory: they are told. */
    o.pp = 2;
    o.tp = 2;
    o.n_blocks = 0;
    assert_null(ranks_open(&o, &err));
    assert_int_equal(err.code, RL_EUSAGE);
    assert_non_null(strstr(err.msg, "KV"));
}

/* GPU ranks on a machine without a GPU: one clear device error from
 * ranks_open, no rank left waiting in NCCL for the others. */
static void test_no_gpu(void **state) {
    tFix *f = *state;
    rlGpuHost host;
    char why[256];
    if (rl_gpu_probe(&host, why, sizeof(why)) == 0 && host.count > 0) {
        print_message("skipped: this machine has GPUs\n");
        return;
    }
    rlRanksOptions o = {.cfg = f->cfg, .backend = "cuda", .dtype = RL_BF16, .tp = 2, .pp = 1,
                        .src = checkpoint_lookup, .src_ctx = f->ck, .block_size = BLOCK,
                        .n_blocks = 4, .max_tokens = 64, .max_rows = 64, .quiet = 1,
                        .nccl_timeout_s = 5};
    rlError err = {0};
    assert_null(ranks_open(&o, &err));
    assert_int_equal(err.code, RL_EDEVICE);
}

/* A step with a token outside the vocabulary is refused before any rank
 * runs it, and the layout keeps working. */
static void test_bad_token(void **state) {
    tFix *f = *state;
    rlRanksOptions o = {.cfg = f->cfg, .backend = "cpu", .dtype = RL_F32, .threads = 1, .tp = 2,
                        .pp = 2, .src = checkpoint_lookup, .src_ctx = f->ck, .block_size = BLOCK,
                        .n_blocks = 4, .max_tokens = 64, .max_rows = 64, .quiet = 1};
    rlError err = {0};
    rlRanks *r = ranks_open(&o, &err);
    if (!r) fail_msg("%s", err.msg);
    int32_t tokens[2] = {5, f->cfg.vocab_size}, pos[2] = {0, 1}, slots[2] = {0, 1};
    int32_t start[2] = {0, 2}, len[1] = {2}, table[1] = {0};
    rlRowSpec row = {.token = 1, .target = -1, .sample = 1, .top_p = 1};
    rlRowResult res;
    rlBatch b = {.n_seqs = 1, .n_tokens = 2, .tokens = tokens, .positions = pos, .slots = slots,
                 .seq_start = start, .seq_len = len, .block_tables = table, .max_blocks = 1,
                 .n_rows = 1, .rows = &row};
    assert_int_equal(ranks_forward(r, &b, &res, &err), -1);
    assert_int_equal(err.code, RL_EINPUT);
    tokens[1] = 7;
    if (ranks_forward(r, &b, &res, &err)) fail_msg("after a refused step: %s", err.msg);
    assert_true(res.token >= 0 && res.token < f->cfg.vocab_size);
    ranks_close(r);
}

int main(void) {
    const char *backend = getenv("RL_TEST_BACKEND"), *dtype = getenv("RL_TEST_DTYPE");
    if (backend && !strcmp(backend, "cuda")) {
        rlGpuHost host;
        char why[256];
        BACKEND = "cuda";
        DTYPE = dtype && !strcmp(dtype, "fp16") ? RL_F16 : RL_BF16;
        TOL = TOL16, MARGIN = MARGIN16, SAME = SAME16;
        GPUS = rl_gpu_probe(&host, why, sizeof(why)) == 0 ? host.count : 1;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_1x1), cmocka_unit_test(test_2x1), cmocka_unit_test(test_3x1),
        cmocka_unit_test(test_4x1), cmocka_unit_test(test_6x1), cmocka_unit_test(test_1x2),
        cmocka_unit_test(test_1x3), cmocka_unit_test(test_3x2), cmocka_unit_test(test_2x3),
        cmocka_unit_test(test_1x1_collectives), cmocka_unit_test(test_3x1_invariant),
        cmocka_unit_test(test_bad_layout), cmocka_unit_test(test_bad_token),
        cmocka_unit_test(test_no_gpu),
    };
    int failed = 0;
    for (int i = 0; i < FIXTURE_N_MODELS; i++) {
        g_model = fixture_models[i];
        const char *only = getenv("RL_TEST_ONLY");
        if (only && !strstr(g_model, only)) continue;
        failed += cmocka_run_group_tests_name(g_model, tests, setup_model, fix_teardown);
    }
    return failed ? 1 : 0;
}
