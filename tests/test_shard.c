/* test_shard.c: the TP x PP shard plan for every config in fixtures/configs
 * and both fixture models, TP 1..8 x PP 1..4 (where the layers allow).
 *
 * Every query head, MLP column, vocabulary row and layer is owned exactly
 * once per stage; a KV head is stored by exactly the ranks whose query heads
 * read it; heads and MLP columns are as even as the model allows; weight
 * bytes at TP 1 x PP 1 equal the checkpoint's tensors.  The balance of each
 * TP size is printed, which is what `redlm` reports at start.  What the
 * loader makes of the plan, element by element, is tests/test_shard_weights.c. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/model.h"
#include "kernels/shard.h"
#include "tests/fixture_configs.h"

#define MAX_TP 8
#define MAX_PP 4

static int sum_tensor(void *ctx, const char *name, int ndim, const int64_t *shape) {
    (void)name;
    *(int64_t *)ctx += ndim == 1 ? shape[0] : shape[0] * shape[1];
    return 0;
}

/* Every ownership rule of one plan. */
static void check_plan(const char *what, const rlModelConfig *c, const rlShard *plan, int tp,
                       int pp) {
    int group = c->num_heads / c->num_kv_heads;
    int next_layer = 0;
    for (int s = 0; s < pp; s++) {
        const rlShard *st = &plan[s * tp];
        assert_int_equal(st->layer0, next_layer);
        assert_true(st->n_layers >= 1);
        next_layer += st->n_layers;
        int next_q = 0, next_mlp = 0, next_vocab = 0;
        int min_q = c->num_heads, max_q = 0, min_m = c->intermediate_size, max_m = 0;
        for (int r = 0; r < tp; r++) {
            const rlShard *sh = &plan[s * tp + r];
            assert_int_equal(sh->tp_rank, r);
            assert_int_equal(sh->pp_rank, s);
            assert_int_equal(sh->layer0, st->layer0);
            assert_int_equal(sh->n_layers, st->n_layers);
            /* contiguous ranges that tile the whole */
            assert_int_equal(sh->q_head0, next_q);
            assert_int_equal(sh->mlp0, next_mlp);
            assert_int_equal(sh->vocab0, next_vocab);
            next_q += sh->n_q_heads, next_mlp += sh->n_mlp, next_vocab += sh->n_vocab;
            if (sh->n_q_heads < min_q) min_q = sh->n_q_heads;
            if (sh->n_q_heads > max_q) max_q = sh->n_q_heads;
            if (sh->n_mlp < min_m) min_m = sh->n_mlp;
            if (sh->n_mlp > max_m) max_m = sh->n_mlp;
            /* KV head k is stored iff one of the rank's query heads reads it */
            for (int k = 0; k < c->num_kv_heads; k++) {
                int reads = 0;
                for (int h = sh->q_head0; h < sh->q_head0 + sh->n_q_heads; h++)
                    reads |= h / group == k;
                int stored = k >= sh->kv_head0 && k < sh->kv_head0 + sh->n_kv_heads;
                if (reads != stored)
                    fail_msg("%s TP%d PP%d rank %d: KV head %d read %d stored %d", what, tp, pp,
                             r, k, reads, stored);
            }
            /* 128-column MLP units wherever the width allows them */
            if (c->intermediate_size % 128 == 0 && c->intermediate_size / 128 >= tp)
                assert_int_equal(sh->n_mlp % 128, 0);
        }
        assert_int_equal(next_q, c->num_heads);
        assert_int_equal(next_mlp, c->intermediate_size);
        assert_int_equal(next_vocab, c->vocab_size);
        assert_true(max_q - min_q <= 1);
        if (c->intermediate_size % 128 == 0 && c->intermediate_size / 128 >= tp)
            assert_true(max_m - min_m <= 128);
    }
    assert_int_equal(next_layer, c->num_layers);
}

static void check_config(const char *what, const rlModelConfig *c) {
    rlError err = {0};
    rlShard plan[MAX_TP * MAX_PP];
    for (int pp = 1; pp <= MAX_PP && pp <= c->num_layers; pp++)
        for (int tp = 1; tp <= MAX_TP; tp++) {
            if (rl_shard_plan(c, tp, pp, NULL, plan, &err) != 0)
                fail_msg("%s TP%d PP%d: %s", what, tp, pp, err.msg);
            check_plan(what, c, plan, tp, pp);
        }

    /* At 1 x 1 the plan's weight bytes are exactly the checkpoint's (a
     * quantized one's: under its dense size; tests/test_quant.c counts them). */
    int64_t elems = 0;
    rl_model_expected_tensors(c, sum_tensor, &elems);
    assert_int_equal(rl_shard_plan(c, 1, 1, NULL, plan, &err), 0);
    if (c->quant.method) assert_true(rl_model_weight_bytes(c, &plan[0], RL_BF16) < (size_t)elems * 2);
    else assert_int_equal(rl_model_weight_bytes(c, &plan[0], RL_BF16), (size_t)elems * 2);

    printf("%-28s %2d heads %2d KV %6d MLP: weight imbalance (max/mean) by TP:", what,
           c->num_heads, c->num_kv_heads, c->intermediate_size);
    for (int tp = 1; tp <= MAX_TP; tp++) {
        rlShardBalance b;
        rl_shard_plan(c, tp, 1, NULL, plan, &err);
        rl_shard_balance(c, plan, tp, 1, RL_BF16, RL_BF16, &b);
        printf(" %.3f", b.weights);
    }
    printf("\n");
}

static void each_config(const char *name, rlModelConfig *c, void *ctx) {
    (void)ctx;
    check_config(name, c);
}

static void test_configs(void **state) {
    (void)state;
    fixture_each_config(each_config, NULL);
}

static void test_models(void **state) {
    (void)state;
    fixture_each_model(each_config, NULL);
}

/* Qwen2.5-7B at TP 3: 28 heads / 4 KV heads / 18944 MLP, which vLLM refuses. */
static void test_7b_tp3(void **state) {
    (void)state;
    rlModelConfig c;
    fixture_config("configs/qwen2.5-7b.json", &c);
    rlError err = {0};
    rlShard p[6];
    assert_int_equal(rl_shard_plan(&c, 3, 2, NULL, p, &err), 0);
    /* heads 0-8 | 9-17 | 18-27 over KV groups of 7: ranks read KV 0-1, 1-2, 2-3 */
    assert_int_equal(p[0].n_q_heads, 9);
    assert_int_equal(p[2].n_q_heads, 10);
    assert_int_equal(p[1].kv_head0, 1);
    assert_int_equal(p[1].n_kv_heads, 2);
    assert_int_equal(p[0].n_mlp + p[1].n_mlp + p[2].n_mlp, 18944);
    assert_int_equal(p[3].layer0, 14);
    rl_shard_print(stdout, &c, p, 3, 2, RL_BF16, RL_BF16);
}

static void test_errors(void **state) {
    (void)state;
    rlModelConfig c;
    fixture_config("models/qwen2-tiny-gqa3", &c);
    rlError err = {0};
    rlShard p[32];
    assert_int_equal(rl_shard_plan(&c, 1, 4, NULL, p, &err), -1);   /* 3 layers */
    assert_non_null(strstr(err.msg, "3 layers"));
    assert_int_equal(rl_shard_plan(&c, 0, 1, NULL, p, &err), -1);
    int bad_sum[] = {1, 1};
    assert_int_equal(rl_shard_plan(&c, 1, 2, bad_sum, p, &err), -1);
    assert_non_null(strstr(err.msg, "adds up to 2"));
    int empty[] = {3, 0};
    assert_int_equal(rl_shard_plan(&c, 1, 2, empty, p, &err), -1);
    int good[] = {1, 2};
    assert_int_equal(rl_shard_plan(&c, 2, 2, good, p, &err), 0);
    assert_int_equal(p[2].layer0, 1);
    assert_int_equal(p[3].n_layers, 2);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_configs),
        cmocka_unit_test(test_models),
        cmocka_unit_test(test_7b_tp3),
        cmocka_unit_test(test_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
