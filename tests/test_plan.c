/* test_plan.c: the memory plan's arithmetic against numbers worked out by
 * hand, and every real Qwen2.5 shape on "6 x 24 GiB" and "1 x 141 GiB".
 *
 * The hand computations follow the model's own buffers (kernels/shard.c,
 * kernels/model_weights.c) and the constants in worker/plan/plan.c: the CUDA
 * context 500 MiB, cuBLASLt workspace 64 MiB, the backend's 2 GiB reserve
 * (sampling scratch + graph pools), NCCL 400 MiB per TP communicator. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/fixture_configs.h"
#include "sched/sched.h"
#include "worker/plan/plan.h"

#define GiB ((size_t)1 << 30)

static const rlPlanLayout *find_layout(const rlPlan *p, int instances, int tp, int pp) {
    for (int i = 0; i < p->n_layouts; i++)
        if (p->layouts[i].instances == instances && p->layouts[i].tp == tp &&
            p->layouts[i].pp == pp)
            return &p->layouts[i];
    fail_msg("no layout %d x TP%d PP%d in the plan", instances, tp, pp);
    return NULL;
}

/* Qwen2.5-0.5B on one 141 GiB GPU, TP 1, bf16, --max-model-len 4096,
 * --max-num-seqs 16, --max-num-batched-tokens 512, --block-size 16, 0.90.
 *
 * D 896, 24 layers, 14 heads / 2 KV heads of 64, MLP 4864, vocab 151936, tied.
 * weights, per layer: norms 2*896 = 1792; qkv rows (14 + 2*2) * 64 = 1152:
 *   wqkv 1152*896 = 1032192, bqkv 1152; wo 896*896 = 802816;
 *   gate/up/down 3*4864*896 = 13074432; sum 14912384, x24 = 357897216;
 *   embedding 151936*896 = 136134656 (tied: also the LM head); final norm 896;
 *   494032768 parameters x 2 bytes = 988065536.
 * activations, T = 512 tokens, 512 prompt-logprob rows + 16 sequences = 528
 * logit rows a step (sched_config_max_rows), of which the head holds R =
 * min(528, RL_HEAD_ROWS 256) = 256 at once:
 *   per token x/resid/delta 3*896 + qkv 1152 + att 896 + gu/mlp 3*4864 = 19328,
 *   x512 x2 bytes = 19791872; rows_x 256*896*2 = 458752;
 *   logits 256*151936*4 = 155582464; total 175833088.
 * workspace: 64 MiB + sampling scratch 1.25*155582464 = 194478080 -> 261586944.
 * graphs: 2 GiB - 194478080 = 1953005568.  NCCL 0.  runtime 524288000.
 * fixed 3902779136; budget 0.9 * 141 GiB = 136257837465 (truncated);
 * left 132355058329; KV per token 2*24*2*64*2 = 12288, per block 196608;
 * blocks 132355058329 / 196608 = 673192 -> 10771072 tokens;
 * sequences of 4096 tokens (256 blocks): 673192 / 256 = 2629. */
static void test_hand_05b_one_gpu(void **state) {
    (void)state;
    rlModelConfig cfg;
    fixture_config("configs/qwen2.5-0.5b.json", &cfg);
    rlPlanOptions o;
    plan_options_init(&o, 1, 141 * GiB);
    o.max_model_len = 4096, o.max_num_seqs = 16, o.max_num_batched_tokens = 512;
    rlPlan p;
    rlError err = {0};
    assert_int_equal(plan_compute(&cfg, &o, &p, &err), 0);
    assert_int_equal(p.n_layouts, 1);
    const rlPlanLayout *l = &p.layouts[0];
    const rlPlanRank *r = &l->ranks[0];
    assert_true(l->fits);
    assert_int_equal(r->weights, 988065536);
    assert_int_equal(r->activations, 175833088);
    assert_int_equal(r->workspace, 261586944);
    assert_int_equal(r->graphs, 1953005568);
    assert_int_equal(r->nccl, 0);
    assert_int_equal(r->runtime, 524288000);
    assert_int_equal(r->budget, 136257837465ULL);
    assert_int_equal(r->kv_bytes_per_block, 196608);
    assert_int_equal(l->kv_blocks[0], 673192);
    assert_int_equal(l->kv_tokens, 10771072);
    assert_int_equal(r->kv, 673192ULL * 196608);
    assert_int_equal(l->max_seqs, 2629);
    assert_int_equal(l->collectives, 0);
    assert_int_equal(p.throughput, 0);
    assert_int_equal(p.latency, 0);
    plan_free(&p);
}

/* Qwen2.5-7B on six 24 GiB GPUs as 2 instances of TP 3, bf16,
 * --max-model-len 8192, --max-num-seqs 16, defaults otherwise (2048 batched
 * tokens, block 16, 0.90).
 *
 * D 3584, 28 layers, 28 heads / 4 KV heads of 128 (7 per group), MLP 18944,
 * vocab 152064, untied.  TP 3 cuts the heads at 0, 9, 18, 28: rank 2 has
 * heads 18-27, reading KV heads 2-3 (2 stored); MLP in 128-column units,
 * 148 units cut at 0, 49, 98, 148: rank 2 has 50 units = 6400 columns;
 * vocabulary 152064 / 3 = 50688 rows each.  Rank 2 is the largest:
 * weights, per layer: norms 7168; qkv rows (10 + 2*2) * 128 = 1792:
 *   wqkv 1792*3584 = 6422528, bqkv 1792; wo 3584*1280 = 4587520;
 *   gate/up/down 3*6400*3584 = 68812800; sum 79831808, x28 = 2235290624;
 *   embedding and LM head rows 2 * 50688*3584 = 363331584; norm 3584;
 *   2598625792 x 2 bytes = 5197251584.
 * activations, T = 2048, R = min(2048 + 16, RL_HEAD_ROWS 256) = 256:
 *   per token 3*3584 + 1792 + 1280 + 3*6400 = 33024, x2048 x2 = 135266304;
 *   rows_x 256*3584*2 = 1835008; logits at TP 3: the padded slice
 *   256*50688 + all three slices 3*256*50688 + full rows 256*152064 =
 *   90832896 floats = 363331584; total 500432896.
 * workspace: 64 MiB + 1.25 * 256*152064*4 = 194641920 -> 261750784.
 * graphs: 2 GiB - 194641920 = 1952841728.  NCCL 400 MiB = 419430400.
 * runtime 524288000.  fixed 8855995392; budget 0.9 * 24 GiB = 23192823398;
 * left 14336828006; KV per token 2*28*2*128*2 = 28672, per block 458752;
 * blocks 14336828006 / 458752 = 31251 -> 500016 tokens per instance;
 * sequences of 8192 tokens (512 blocks): 31251 / 512 = 61.
 * Every rank stores 2 KV heads, so rank 2 (the most weights) sets it. */
static void test_hand_7b_two_tp3(void **state) {
    (void)state;
    rlModelConfig cfg;
    fixture_config("configs/qwen2.5-7b.json", &cfg);
    rlPlanOptions o;
    plan_options_init(&o, 6, 24 * GiB);
    o.max_model_len = 8192, o.max_num_seqs = 16;
    rlPlan p;
    rlError err = {0};
    assert_int_equal(plan_compute(&cfg, &o, &p, &err), 0);
    const rlPlanLayout *l = find_layout(&p, 2, 3, 1);
    assert_true(l->fits);
    assert_int_equal(l->tight, 2);
    const rlPlanRank *r = &l->ranks[2];
    assert_int_equal(r->shard.n_q_heads, 10);
    assert_int_equal(r->shard.n_kv_heads, 2);
    assert_int_equal(r->shard.n_mlp, 6400);
    assert_int_equal(r->weights, 5197251584ULL);
    assert_int_equal(r->activations, 500432896);
    assert_int_equal(r->workspace, 261750784);
    assert_int_equal(r->graphs, 1952841728);
    assert_int_equal(r->nccl, 419430400);
    assert_int_equal(r->runtime, 524288000);
    assert_int_equal(r->budget, 23192823398ULL);
    assert_int_equal(r->kv_bytes_per_block, 458752);
    assert_int_equal(l->kv_blocks[0], 31251);
    assert_int_equal(l->kv_blocks[1], 31251);
    assert_int_equal(l->kv_tokens, 500016);
    assert_int_equal(l->max_seqs, 61);
    plan_free(&p);
    /* --batch-invariant over 3 TP ranks: the all-reduce's gather buffer,
     * 3 x 2048 x 3584 x 2 = 44040192 bytes, counted as activations. */
    o.batch_invariant = 1;
    assert_int_equal(plan_compute(&cfg, &o, &p, &err), 0);
    l = find_layout(&p, 2, 3, 1);
    assert_int_equal(l->ranks[2].activations, 500432896 + 44040192);
    /* the second instance sits on GPUs 3-5 */
    assert_int_equal(l->ranks[3].gpu, 3);
    assert_int_equal(l->ranks[5].gpu, 5);
    /* 2 all-reduces per layer and the logits gather */
    assert_int_equal(l->collectives, 57);
    plan_free(&p);
}

/* Every fixture config, on both machines: no crash, every layout either fits
 * with a KV cache for at least one full sequence or says why not, and the
 * recommendations are layouts that fit. */
static void check_machine(const rlModelConfig *cfg, const char *name, int gpus, size_t mem) {
    rlPlanOptions o;
    plan_options_init(&o, gpus, mem);
    o.max_model_len = 8192, o.max_num_seqs = 16;
    rlPlan p;
    rlError err = {0};
    if (plan_compute(cfg, &o, &p, &err)) fail_msg("%s: %s", name, err.msg);
    int n_fit = 0;
    for (int i = 0; i < p.n_layouts; i++) {
        const rlPlanLayout *l = &p.layouts[i];
        assert_true(l->instances * l->tp * l->pp <= gpus);
        assert_true(l->instances >= 1);
        if (l->fits) {
            n_fit++;
            assert_true(l->kv_tokens >= 8192);
            assert_true(l->max_seqs >= 1);
            assert_int_equal(l->why[0], 0);
            for (int k = 0; k < l->instances * l->tp * l->pp; k++) {
                const rlPlanRank *r = &l->ranks[k];
                assert_true(r->weights + r->activations + r->workspace + r->graphs + r->nccl +
                                r->runtime + r->kv <= r->budget);
            }
        } else {
            assert_true(strlen(l->why) > 40);
            assert_non_null(strstr(l->why, "--"));  /* names a flag to change */
        }
    }
    if (n_fit) {
        assert_true(p.throughput >= 0 && p.layouts[p.throughput].fits);
        assert_true(p.latency >= 0 && p.layouts[p.latency].fits);
        assert_true(strlen(p.throughput_why) > 20 && strlen(p.latency_why) > 20);
    } else {
        assert_int_equal(p.throughput, -1);
        assert_int_equal(p.latency, -1);
    }
    /* JSON and the table never fail on a plan */
    FILE *devnull = fopen("/dev/null", "w");
    assert_non_null(devnull);
    assert_int_equal(plan_print_json(devnull, &p, &err), 0);
    plan_print(devnull, &p);
    fclose(devnull);
    plan_free(&p);
}

static void each_config(const char *name, rlModelConfig *cfg, void *ctx) {
    (void)ctx;
    check_machine(cfg, name, 6, 24 * GiB);
    check_machine(cfg, name, 1, 141 * GiB);
}

/* Qwen3-30B-A3B, the two machines.  Six 24 GiB cards: every expert
 * cut by columns, 768 / 6 = 128 on each rank.  TP 6, rank 0 by hand: 5 query
 * heads (32 cut 0,5,10,16,21,26,32) reading 1 KV head; per layer norms
 * 2*2048 + q/k norms 2*128, wqkv (5 + 2) * 128 * 2048 = 1835008, wo 2048 *
 * 640 = 1310720, router 128 * 2048 = 262144, experts 128 * 3 * 128 * 2048 =
 * 100663296: 104075520 x 48 layers; vocabulary rows 151936 / 6 -> 25322, the
 * embedding and the (untied) LM head 2 * 25322 * 2048 = 103718912, final
 * norm 2048: 5099345920 parameters x 2 bytes = 10198691840.  One card alone
 * cannot hold the 61 GB; one 80 GiB card holds it at TP 1. */
/* The scratch quantized layers take (kernels/cuda/qlinear.cu), worked by
 * hand.  7B FP8 at 16,384 rows, the larger of gate|up dequantized
 * (37,888 x 3,584 x 2 = 271,581,184) and W8A8's operands: gate|up's e4m3
 * values (x 1), the down projection's input in e4m3 (16,384 x 18,944) and
 * its 1x128 scales (148 x 16,384 x 4); below 1,024 rows and for AWQ only
 * the dequantized layer.  72B AWQ on one GPU: gate|up, 59,392 x 8,192 x 2 (the
 * AWQ checkpoint pads its MLP to 29,696 columns). */
static void test_quant_scratch(void **state) {
    (void)state;
    assert_int_equal(rl_quant_scratch_bytes(37888ULL * 3584, 18944, 1, 16384), 455868416ULL);
    assert_int_equal(rl_quant_scratch_bytes(37888ULL * 3584, 18944, 1, 1000), 271581184ULL);
    assert_int_equal(rl_quant_scratch_bytes(37888ULL * 3584, 18944, 0, 16384), 271581184ULL);
    rlModelConfig cfg;
    fixture_config("configs/qwen2.5-72b-awq.json", &cfg);
    rlPlanOptions o;
    plan_options_init(&o, 1, 80 * GiB);
    rlPlan p;
    rlError err = {0};
    assert_int_equal(plan_compute(&cfg, &o, &p, &err), 0);
    const rlPlanRank *r = &find_layout(&p, 1, 1, 1)->ranks[0];
    assert_int_equal(rl_model_quant_scratch_bytes(&cfg, &r->shard, 2048), 973078528ULL);
    assert_true(r->workspace >= 64ULL * 1048576 + (size_t)(1.25 * 973078528.0));
    plan_free(&p);
}

static void test_moe_30b(void **state) {
    (void)state;
    rlModelConfig cfg;
    fixture_config("configs/qwen3-30b-a3b.json", &cfg);
    rlPlanOptions o;
    plan_options_init(&o, 6, 24 * GiB);
    rlPlan p;
    rlError err = {0};
    assert_int_equal(plan_compute(&cfg, &o, &p, &err), 0);
    assert_false(find_layout(&p, 6, 1, 1)->fits);
    const rlPlanLayout *l = find_layout(&p, 1, 6, 1);
    assert_true(l->fits);
    for (int r = 0; r < 6; r++) assert_int_equal(l->ranks[r].shard.n_moe, 128);
    assert_int_equal(l->ranks[0].shard.n_q_heads, 5);
    assert_int_equal(l->ranks[0].weights, 10198691840ULL);
    plan_free(&p);
    plan_options_init(&o, 1, 80 * GiB);
    assert_int_equal(plan_compute(&cfg, &o, &p, &err), 0);
    const rlPlanRank *one = &find_layout(&p, 1, 1, 1)->ranks[0];
    assert_true(find_layout(&p, 1, 1, 1)->fits);
    assert_int_equal(one->shard.n_moe, 768);
    /* The experts' scratch for a 2,048-token step, top 8 of 128: 16,384
     * pairs in 384 tiles (137,232 bytes of lists, 137,472 aligned), SwiGLU
     * outputs 16,384 x 768 x 2, fp32 down projections 16,384 x 2,048 x 4:
     * 159,521,024 bytes, grown to 1.25x; with the cuBLASLt workspace and the
     * sampling scratch (rows x vocab fp32 at 1.25x) it is the workspace. */
    assert_int_equal(rl_moe_scratch_bytes(2048, 2048, 768, 128, 8, 2), 159521024ULL);
    size_t rows = (size_t)rl_model_head_rows(sched_config_max_rows(
        &(rlSchedConfig){.max_num_seqs = o.max_num_seqs,
                         .max_num_batched_tokens = o.max_num_batched_tokens}));
    assert_int_equal(one->workspace, 64ULL * 1048576 + (size_t)(1.25 * (double)(rows * 151936 * 4)) +
                                         (size_t)(1.25 * 159521024.0));
    plan_free(&p);
}

static void test_every_config(void **state) {
    (void)state;
    fixture_each_config(each_config, NULL);
}

static int fits_anywhere(const rlPlan *p) {
    for (int i = 0; i < p->n_layouts; i++)
        if (p->layouts[i].fits) return 1;
    return 0;
}

/* The cases a deployment asks about, with their expected answers. */
static void test_known_answers(void **state) {
    (void)state;
    rlModelConfig cfg;
    rlPlanOptions o;
    rlPlan p;
    rlError err = {0};

    /* 72B on 6 x 24 GiB: 135 GiB of bf16 weights against 129.6 GiB of budget. */
    fixture_config("configs/qwen2.5-72b.json", &cfg);
    plan_options_init(&o, 6, 24 * GiB);
    o.max_model_len = 8192;
    assert_int_equal(plan_compute(&cfg, &o, &p, &err), 0);
    assert_false(fits_anywhere(&p));
    for (int i = 0; i < p.n_layouts; i++)
        assert_non_null(strstr(p.layouts[i].why, "weights alone need"));
    plan_free(&p);

    /* 72B on one 141 GiB GPU: the weights are over 0.90 of it. */
    plan_options_init(&o, 1, 141 * GiB);
    assert_int_equal(plan_compute(&cfg, &o, &p, &err), 0);
    assert_false(fits_anywhere(&p));
    plan_free(&p);

    /* 7B on one 141 GiB GPU: fits, with room for many full-length sequences. */
    fixture_config("configs/qwen2.5-7b.json", &cfg);
    plan_options_init(&o, 1, 141 * GiB);
    assert_int_equal(plan_compute(&cfg, &o, &p, &err), 0);
    assert_true(p.layouts[0].fits);
    assert_true(p.layouts[0].max_seqs >= 16);
    plan_free(&p);

    /* 7B on 6 x 24 GiB with 16 sequences each: every GPU holds a copy, so
     * six instances win throughput; latency takes the largest even TP. */
    plan_options_init(&o, 6, 24 * GiB);
    o.max_model_len = 8192, o.max_num_seqs = 16;
    assert_int_equal(plan_compute(&cfg, &o, &p, &err), 0);
    assert_int_equal(p.layouts[p.throughput].instances, 6);
    assert_int_equal(p.layouts[p.throughput].tp, 1);
    assert_int_equal(p.layouts[p.latency].pp, 1);
    assert_true(p.layouts[p.latency].tp >= 4);
    plan_free(&p);

    /* The cost model: 14B on six 24 GiB cards.  Over PCIe, TP6's 97
     * collectives a step cost more than its split saves, so TP3 x PP2 ranks
     * above it; over NVLink TP6 comes first, and each plan says what the
     * other links would change. */
    fixture_config("configs/qwen2.5-14b.json", &cfg);
    for (int nv = 0; nv < 2; nv++) {
        plan_options_init(&o, 6, 24 * GiB);
        plan_set_links(&o, nv ? RL_PLAN_LINK_NVLINK : RL_PLAN_LINK_PCIE, "test");
        assert_int_equal(plan_compute(&cfg, &o, &p, &err), 0);
        const rlPlanLayout *tp6 = NULL, *tp3pp2 = NULL;
        for (int i = 0; i < p.n_layouts; i++) {
            const rlPlanLayout *l = &p.layouts[i];
            if (l->instances == 1 && l->tp == 6 && l->pp == 1) tp6 = l;
            if (l->instances == 1 && l->tp == 3 && l->pp == 2) tp3pp2 = l;
        }
        assert_true(tp6 && tp3pp2 && tp6->fits && tp3pp2->fits);
        printf("14B, 6 x 24 GiB over %s: TP3 x PP2 %.0f tok/s, TP6 %.0f (%.1f of %.1f ms in "
               "collectives)\n", nv ? "NVLink" : "PCIe", tp3pp2->cost.tok_s, tp6->cost.tok_s,
               tp6->cost.comm_ms, tp6->cost.step_ms);
        if (nv) {
            assert_true(tp6->cost.tok_s > tp3pp2->cost.tok_s);
            assert_ptr_equal(&p.layouts[p.throughput], tp6);
            assert_non_null(strstr(p.links_why, "Over PCIe between every GPU the order changes"));
        } else {
            assert_true(tp3pp2->cost.tok_s > tp6->cost.tok_s);
            assert_true(tp6->cost.comm_ms > 0.5 * tp6->cost.step_ms);
            assert_non_null(strstr(p.throughput_why, "ranks above 1 x TP6"));
            assert_non_null(strstr(p.throughput_why, "not yet measured on PCIe hardware"));
            assert_non_null(strstr(p.links_why, "Over NVLink between every GPU the order changes: "
                                                 "1 x TP6 first"));
        }
        plan_free(&p);
    }

    /* A max-model-len whose one sequence cannot fit: the reason says so. */
    fixture_config("configs/qwen2.5-14b.json", &cfg);
    plan_options_init(&o, 2, 21 * GiB);
    o.max_model_len = 32768;
    assert_int_equal(plan_compute(&cfg, &o, &p, &err), 0);
    const rlPlanLayout *l = find_layout(&p, 1, 2, 1);
    assert_false(l->fits);
    assert_non_null(strstr(l->why, "less than one --max-model-len 32768 sequence"));
    plan_free(&p);
    o.max_model_len = 4096;
    assert_int_equal(plan_compute(&cfg, &o, &p, &err), 0);
    assert_true(find_layout(&p, 1, 2, 1)->fits);
    plan_free(&p);
}

/* The worker's start: one layout, its errors and codes. */
static void test_one_layout(void **state) {
    (void)state;
    rlModelConfig cfg;
    fixture_config("configs/qwen2.5-14b.json", &cfg);
    rlPlanOptions o;
    rlPlan p;
    rlError err = {0};

    plan_options_init(&o, 2, 24 * GiB);
    assert_int_equal(plan_layout(&cfg, &o, 1, 3, 1, &p, &err), -1);
    assert_int_equal(err.code, RL_EDEVICE);
    assert_non_null(strstr(err.msg, "needs 3 GPUs but 2 are given"));
    assert_int_equal(p.n_layouts, 0);

    assert_int_equal(plan_layout(&cfg, &o, 1, 1, 1, &p, &err), -1);
    assert_int_equal(err.code, RL_EMEMORY);
    assert_non_null(strstr(err.msg, "weights alone need"));
    assert_int_equal(p.n_layouts, 1);   /* kept for printing the evidence */
    plan_free(&p);

    plan_options_init(&o, 1, 141 * GiB);
    o.max_num_batched_tokens = 1 << 20;  /* a million-token step: activations eat the GPU */
    assert_int_equal(plan_layout(&cfg, &o, 1, 1, 1, &p, &err), -1);
    assert_int_equal(err.code, RL_EMEMORY);
    assert_non_null(strstr(err.msg, "--max-num-batched-tokens"));
    plan_free(&p);

    plan_options_init(&o, 1, 141 * GiB);
    o.max_model_len = 1 << 20;
    assert_int_equal(plan_layout(&cfg, &o, 1, 1, 1, &p, &err), -1);
    assert_int_equal(err.code, RL_EUSAGE);
    assert_non_null(strstr(err.msg, "max_position_embeddings"));

    plan_options_init(&o, 1, 141 * GiB);
    assert_int_equal(plan_layout(&cfg, &o, 1, 1, 1, &p, &err), 0);
    assert_true(p.layouts[0].fits);
    plan_free(&p);

    /* --gpu-memory-utilization is this instance's share, which must be
     * free: 0.90 of a GPU where another process holds 60 of 80 GiB is not */
    plan_options_init(&o, 1, 80 * GiB);
    o.gpu_used[0] = 60 * GiB;
    o.gpu_free[0] = 20 * GiB;
    assert_int_equal(plan_layout(&cfg, &o, 1, 1, 1, &p, &err), -1);
    assert_int_equal(err.code, RL_EMEMORY);
    assert_non_null(strstr(err.msg, "only 20.00 GiB is free"));
    assert_non_null(strstr(err.msg, "lower --gpu-memory-utilization to 0.24"));
    plan_free(&p);

    /* vLLM's rule: two instances at 0.45 share a 141 GiB GPU, in either
     * order, each with the same budget; a third finds its share taken */
    size_t share = (size_t)(0.45 * (double)(141 * GiB)), reserved = GiB / 2;
    for (int held = 0; held < 3; held++) {
        plan_options_init(&o, 1, 141 * GiB);
        o.gpu_memory_utilization = 0.45;
        o.gpu_used[0] = (size_t)held * share;
        o.gpu_free[0] = 141 * GiB - reserved - (size_t)held * share;
        int rc = plan_layout(&cfg, &o, 1, 1, 1, &p, &err);
        if (held < 2) {
            assert_int_equal(rc, 0);
            assert_int_equal(p.layouts[0].ranks[0].budget, share);
        } else {
            assert_int_equal(rc, -1);
            assert_int_equal(err.code, RL_EMEMORY);
            assert_non_null(strstr(err.msg, "other processes hold 126.90 GiB"));
        }
        plan_free(&p);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hand_05b_one_gpu),
        cmocka_unit_test(test_hand_7b_two_tp3),
        cmocka_unit_test(test_every_config),
        cmocka_unit_test(test_moe_30b),
        cmocka_unit_test(test_quant_scratch),
        cmocka_unit_test(test_known_answers),
        cmocka_unit_test(test_one_layout),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
