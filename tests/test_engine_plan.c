/* test_engine_plan.c: the default --max-num-batched-tokens (engine_plan.c),
 * vLLM's rule on hypothetical GPUs: 16384 offline and 8192 serving on GPUs
 * of 70 GiB or more that are not A100s, 8192 and 2048 otherwise, halved
 * while a step's activations would take more than an eighth of what the
 * weights leave; the CPU backend keeps 2048. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <string.h>

#include "tests/fixture_configs.h"
#include "worker/engine/engine_plan.h"

#define GiB ((size_t)1 << 30)

/* The default for model cfg on gpus GPUs of mem bytes named name. */
static int pick(const char *config, int gpus, size_t mem, const char *name, int offline, int tp,
                char *why) {
    rlModelConfig cfg;
    fixture_config(config, &cfg);
    rlEngineOptions o;
    engine_options_init(&o);
    o.backend = "cuda", o.offline = offline, o.tp = tp, o.max_model_len = 8192;
    rlPlanOptions po;
    plan_options_init(&po, gpus, mem);
    po.max_model_len = o.max_model_len;
    po.max_num_seqs = o.max_num_seqs;
    int t = engine_batched_tokens_for(&cfg, &o, &po, name, why, 400);
    print_message("%s on %d x %zu GiB %s, %s: %d (%s)\n", config, gpus, mem / GiB, name,
                  offline ? "offline" : "server", t, why);
    return t;
}

static void test_vllm_defaults(void **state) {
    (void)state;
    char why[400];
    assert_int_equal(pick("configs/qwen2.5-7b.json", 1, 141 * GiB, "NVIDIA H200", 1, 1, why), 16384);
    assert_non_null(strstr(why, "offline"));
    assert_int_equal(pick("configs/qwen2.5-7b.json", 1, 141 * GiB, "NVIDIA H200", 0, 1, why), 8192);
    assert_int_equal(pick("configs/qwen2.5-7b.json", 1, 80 * GiB, "NVIDIA H100 80GB HBM3", 1, 1, why),
                     16384);
    /* vLLM keeps the A100 on the smaller defaults (larger ones cost it throughput) */
    assert_int_equal(pick("configs/qwen2.5-7b.json", 1, 80 * GiB, "NVIDIA A100-SXM4-80GB", 1, 1, why),
                     8192);
    assert_int_equal(pick("configs/qwen2.5-7b.json", 1, 80 * GiB, "NVIDIA A100-SXM4-80GB", 0, 1, why),
                     2048);
    assert_int_equal(pick("configs/qwen2.5-0.5b.json", 1, 48 * GiB, "NVIDIA L40S", 1, 1, why), 8192);
}

static void test_bounded_by_activations(void **state) {
    (void)state;
    char why[400];
    /* 7B on a 24 GiB card: the weights leave ~6 GiB, and 8192 tokens'
     * activations would take more than an eighth of it */
    int t = pick("configs/qwen2.5-7b.json", 1, 24 * GiB, "NVIDIA GeForce RTX 4090", 1, 1, why);
    assert_true(t >= 2048 && t < 8192);
    assert_non_null(strstr(why, "halved"));
    /* never under 2048, even where that is tight */
    assert_int_equal(pick("configs/qwen2.5-14b.json", 1, 40 * GiB, "NVIDIA A100-PCIE-40GB", 0, 1, why),
                     2048);
}

static void test_cpu(void **state) {
    (void)state;
    rlModelConfig cfg;
    fixture_config("configs/qwen2.5-7b.json", &cfg);
    rlEngineOptions o;
    engine_options_init(&o);
    char why[400];
    rlError err = {0};
    assert_int_equal(engine_default_batched_tokens(&cfg, &o, why, sizeof why, &err), 2048);
    assert_non_null(strstr(why, "CPU"));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_vllm_defaults),
        cmocka_unit_test(test_bounded_by_activations),
        cmocka_unit_test(test_cpu),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
