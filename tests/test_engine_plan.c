/* test_engine_plan.c: the default --max-num-seqs and --max-num-batched-tokens
 * (engine_plan.c), vLLM's rule on hypothetical GPUs: 1024 sequences and
 * 16384 tokens offline / 8192 serving on GPUs of 70 GiB or more that are not
 * A100s, 256 and 8192 / 2048 otherwise, the step halved while its
 * activations would take more than an eighth of what the weights leave;
 * the CPU backend keeps 256 and 2048. */
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
    const char *rule;
    po.max_num_seqs = engine_max_num_seqs_vllm(&po, name, &rule);
    int t = engine_batched_tokens_for(&cfg, &o, &po, name, why, 400);
    print_message("%s on %d x %zu GiB %s, %s: %d sequences (%s), %d tokens (%s)\n", config,
                  gpus, mem / GiB, name, offline ? "offline" : "server", po.max_num_seqs, rule, t,
                  why);
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

static void test_vllm_max_num_seqs(void **state) {
    (void)state;
    static const struct {
        size_t mem;
        const char *name;
        int seqs;
    } cases[] = {{141 * GiB, "NVIDIA H200", 1024},
                 {80 * GiB, "NVIDIA H100 80GB HBM3", 1024},
                 {80 * GiB, "NVIDIA A100-SXM4-80GB", 256},
                 {48 * GiB, "NVIDIA L40S", 256},
                 {24 * GiB, "NVIDIA GeForce RTX 4090", 256}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        rlPlanOptions po;
        plan_options_init(&po, 1, cases[i].mem);
        const char *rule;
        assert_int_equal(engine_max_num_seqs_vllm(&po, cases[i].name, &rule), cases[i].seqs);
        assert_non_null(strstr(rule, cases[i].seqs == 1024 ? "1024" : "256"));
    }
    /* the smallest GPU decides: an 80 GiB card beside a 24 GiB one */
    rlPlanOptions po;
    plan_options_init(&po, 2, 80 * GiB);
    po.gpu_total[1] = 24 * GiB;
    const char *rule;
    assert_int_equal(engine_max_num_seqs_vllm(&po, "NVIDIA H100 80GB HBM3", &rule), 256);
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
    rlError err = {0};
    char log[512] = "";
    FILE *f = fmemopen(log, sizeof log, "w");
    assert_non_null(f);
    assert_int_equal(engine_default_batch(&cfg, &o, f, &err), 0);
    fclose(f);
    assert_int_equal(o.max_num_seqs, 256);
    assert_int_equal(o.max_num_batched_tokens, 2048);
    assert_non_null(strstr(log, "CPU"));
    /* what was given stays */
    engine_options_init(&o);
    o.max_num_seqs = 7, o.max_num_batched_tokens = 300;
    f = fmemopen(log, sizeof log, "w");
    assert_int_equal(engine_default_batch(&cfg, &o, f, &err), 0);
    fclose(f);
    assert_int_equal(o.max_num_seqs, 7);
    assert_int_equal(o.max_num_batched_tokens, 300);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_vllm_defaults),
        cmocka_unit_test(test_vllm_max_num_seqs),
        cmocka_unit_test(test_bounded_by_activations),
        cmocka_unit_test(test_cpu),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
