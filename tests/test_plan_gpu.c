/* test_plan_gpu.c: the memory plan against what the CUDA backend really
 * allocates, for Qwen2.5-7B and 14B shapes (dummy weights) at two settings
 * each, on GPU 0.
 *
 * Two comparisons per case, each within 5 %:
 *  - what the plan says a start holds before its KV cache (weights,
 *    activations, cuBLASLt workspace, CUDA context) against the device
 *    memory NVML reports used once the model is loaded, less what was used
 *    before this process touched the GPU;
 *  - the plan's KV blocks against the backend's own kv_capacity, which
 *    measures free memory with cudaMemGetInfo after loading.
 * Without a GPU it prints "skipped" and passes (RL_REQUIRE_GPU=1 makes that
 * a failure, for tests/gpu_plan.sh). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "../kernels/backend.h"
#include "../kernels/gpuinfo.h"
#include "../kernels/model.h"
#include "../worker/checkpoint.h"
#include "../worker/engine.h"
#include "../worker/plan.h"

#define GIB (1024.0 * 1024.0 * 1024.0)

static unsigned long long g_used_before; /* GPU 0, before this process's context */

static unsigned long long gpu0_used(void) {
    rlGpuHost host;
    char why[256];
    if (rl_gpu_probe(&host, why, sizeof(why)) || host.count < 1) fail_msg("NVML: %s", why);
    return host.gpus[0].used;
}

static void check_case(const char *config, int batched, int seqs, double util) {
    const char *root = getenv("FIXTURES");
    char path[1024];
    snprintf(path, sizeof(path), "%s/configs/%s", root ? root : "tests/fixtures", config);
    rlModelConfig cfg;
    rlError err = {0};
    if (checkpoint_read_config(path, &cfg, &err)) fail_msg("%s", err.msg);

    rlGpuHost host;
    char why[256];
    assert_int_equal(rl_gpu_probe(&host, why, sizeof(why)), 0);
    rlPlanOptions o;
    plan_options_init(&o, 1, (size_t)host.gpus[0].total);
    o.gpu_used[0] = (size_t)g_used_before;
    o.gpu_ordinal[0] = 0;
    o.max_model_len = 8192, o.max_num_batched_tokens = batched, o.max_num_seqs = seqs;
    o.gpu_memory_utilization = util;
    rlPlan p;
    if (plan_layout(&cfg, &o, 1, 1, 1, &p, &err)) fail_msg("%s: %s", config, err.msg);
    const rlPlanRank *r = &p.layouts[0].ranks[0];

    rlBackendOptions bo = {.device = 0, .dtype = RL_BF16};
    rlBackend *be = rl_backend_cuda_create(&bo, &err);
    if (!be) fail_msg("CUDA backend: %s", err.msg);
    rlModel m;
    if (rl_model_init(&m, &cfg, &r->shard, be, NULL, NULL, NULL, NULL, 1, batched,
                      rl_engine_max_rows(batched, seqs), &err) ||
        be->ops->sync(be, &err))
        fail_msg("%s: loading dummy weights: %s", config, err.msg);
    double actual = (double)(gpu0_used() - g_used_before);
    /* The cuBLASLt workspace is allocated at create; the sampling scratch
     * only when a step samples, out of the reserve. */
    double scratch = (double)(r->workspace - ((size_t)64 << 20));
    double predicted = (double)(r->weights + r->activations + r->workspace + r->runtime) - scratch;
    int blocks = 0;
    if (be->ops->kv_capacity(be, r->kv_bytes_per_block, o.block_size, 1, util, &blocks, &err))
        fail_msg("%s: kv_capacity: %s", config, err.msg);
    long long planned = p.layouts[0].kv_blocks[0];
    printf("%s, %d tokens, %d seqs, utilization %.2f:\n"
           "  before KV: plan %.3f GiB (weights %.3f, activations %.3f, runtime %.3f), "
           "CUDA %.3f GiB (%+.1f %%)\n"
           "  KV blocks: plan %lld, CUDA %d (%+.1f %%)\n",
           config, batched, seqs, util, predicted / GIB, r->weights / GIB, r->activations / GIB,
           r->runtime / GIB, actual / GIB, 100 * (actual - predicted) / predicted, planned, blocks,
           100.0 * (blocks - planned) / (double)planned);
    assert_true(fabs(actual - predicted) <= 0.05 * predicted);
    assert_true(fabs((double)blocks - (double)planned) <= 0.05 * (double)planned);
    rl_model_free(&m);
    be->ops->destroy(be);
    plan_free(&p);
}

static void test_7b(void **state) {
    (void)state;
    check_case("qwen2.5-7b.json", 2048, 256, 0.90);
    check_case("qwen2.5-7b.json", 8192, 64, 0.50);
}

static void test_14b(void **state) {
    (void)state;
    check_case("qwen2.5-14b.json", 2048, 256, 0.90);
    check_case("qwen2.5-14b.json", 512, 32, 0.60);
}

int main(void) {
    rlGpuHost host;
    char why[256];
    if (rl_gpu_probe(&host, why, sizeof(why))) host.count = 0;
    else if (host.count < 1) snprintf(why, sizeof(why), "none visible");
    if (host.count < 1) {
        if (getenv("RL_REQUIRE_GPU")) {
            fprintf(stderr, "test_plan_gpu: no usable GPU: %s\n", why);
            return 1;
        }
        printf("skipped: no GPU (%s)\n", why);
        return 0;
    }
    g_used_before = host.gpus[0].used;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_7b),
        cmocka_unit_test(test_14b),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
