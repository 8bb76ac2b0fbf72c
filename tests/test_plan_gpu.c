/* test_plan_gpu.c: the memory plan against what the CUDA backend really
 * allocates, for Qwen2.5-7B and 14B shapes (dummy weights) at two settings
 * each, on GPU 0.
 *
 * Two comparisons per case, each within 5 %:
 *  - what the plan says a start holds before its KV cache (weights,
 *    activations, cuBLASLt workspace, CUDA context) against the device
 *    memory NVML reports used once the model is loaded, less what was used
 *    before the case's process touched the GPU;
 *  - the plan's KV blocks against the backend's own kv_capacity, which
 *    measures free memory with cudaMemGetInfo after loading.
 * Each case runs in a process of its own (this program again, exec'd with
 * --case N), as each worker start is: no case sees memory an earlier one left
 * to its context, nor NVML state from before a fork.  Without a GPU it
 * prints "skipped" and exits 77, counted as skipped by tests/run
 * (RL_REQUIRE_GPU=1 makes that a failure, for tests/gpu_plan.sh). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "kernels/backend.h"
#include "kernels/gpuinfo.h"
#include "kernels/model.h"
#include "worker/model/checkpoint.h"
#include "sched/sched.h"
#include "worker/plan/plan.h"

#define GIB (1024.0 * 1024.0 * 1024.0)

static const char *g_self;    /* this program, for the cases' processes */

typedef struct PlanCase {
    const char *config;
    int batched, seqs;
    double util;
} PlanCase;

static const PlanCase g_cases[] = {
    {"qwen2.5-7b.json", 2048, 256, 0.90},
    {"qwen2.5-7b.json", 8192, 64, 0.50},
    {"qwen2.5-14b.json", 2048, 256, 0.90},
    {"qwen2.5-14b.json", 512, 32, 0.60},
};

/* One case, in its own process; returns 0 when both comparisons hold. */
static int case_run(const PlanCase *c) {
    const char *root = getenv("FIXTURES");
    char path[1024];
    snprintf(path, sizeof(path), "%s/configs/%s", root ? root : "build/fixtures", c->config);
    rlModelConfig cfg;
    rlError err = {0};
    if (checkpoint_read_config(path, &cfg, &err)) return fprintf(stderr, "%s\n", err.msg), 1;

    rlGpuHost host;
    char why[256];
    if (rl_gpu_probe(&host, why, sizeof(why)) || host.count < 1)
        return fprintf(stderr, "NVML: %s\n", why), 1;
    unsigned long long used_before = host.gpus[0].used;
    rlPlanOptions o;
    plan_options_init(&o, 1, (size_t)host.gpus[0].total);
    o.gpu_used[0] = (size_t)host.gpus[0].others;
    o.gpu_free[0] = (size_t)host.gpus[0].free;
    o.gpu_ordinal[0] = 0;
    o.max_model_len = 8192, o.max_num_batched_tokens = c->batched, o.max_num_seqs = c->seqs;
    o.gpu_memory_utilization = c->util;
    rlPlan p;
    if (plan_layout(&cfg, &o, 1, 1, 1, &p, &err))
        return fprintf(stderr, "%s: %s\n", c->config, err.msg), 1;
    const rlPlanRank *r = &p.layouts[0].ranks[0];

    rlBackendOptions bo = {.device = 0, .dtype = RL_BF16};
    rlBackend *be = rl_backend_cuda_create(&bo, &err);
    if (!be) return fprintf(stderr, "CUDA backend: %s\n", err.msg), 1;
    rlModel m;
    if (rl_model_init(&m, &cfg, &r->shard, be, NULL, NULL, NULL, NULL, 1, c->batched,
                      sched_config_max_rows(&(rlSchedConfig){.max_num_seqs = c->seqs, .max_num_batched_tokens = c->batched}), &err) ||
        be->ops->sync(be, &err))
        return fprintf(stderr, "%s: loading dummy weights: %s\n", c->config, err.msg), 1;
    if (rl_gpu_probe(&host, why, sizeof(why)) || host.count < 1)
        return fprintf(stderr, "NVML: %s\n", why), 1;
    double actual = (double)(host.gpus[0].used - used_before);
    /* The cuBLASLt workspace is allocated at create; the sampling scratch
     * only when a step samples, out of the reserve. */
    double scratch = (double)(r->workspace - ((size_t)64 << 20));
    double predicted = (double)(r->weights + r->activations + r->workspace + r->runtime) - scratch;
    int blocks = 0;
    if (be->ops->kv_capacity(be, r->kv_bytes_per_block, o.block_size, 1, c->util, &blocks, &err))
        return fprintf(stderr, "%s: kv_capacity: %s\n", c->config, err.msg), 1;
    long long planned = p.layouts[0].kv_blocks[0];
    printf("%s, %d tokens, %d seqs, utilization %.2f:\n"
           "  before KV: plan %.3f GiB (weights %.3f, activations %.3f, workspace %.3f, "
           "runtime %.3f), CUDA %.3f GiB (%+.1f %%)\n"
           "  KV blocks: plan %lld, CUDA %d (%+.1f %%)\n",
           c->config, c->batched, c->seqs, c->util, predicted / GIB, r->weights / GIB,
           r->activations / GIB, r->workspace / GIB, r->runtime / GIB, actual / GIB,
           100 * (actual - predicted) / predicted, planned, blocks,
           100.0 * (blocks - planned) / (double)planned);
    fflush(stdout);
    int bad = fabs(actual - predicted) > 0.05 * predicted ||
              fabs((double)blocks - (double)planned) > 0.05 * (double)planned;
    rl_model_free(&m);
    be->ops->destroy(be);
    plan_free(&p);
    return bad;
}

static void check_case(int i) {
    const PlanCase *c = &g_cases[i];
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        char arg[16];
        snprintf(arg, sizeof(arg), "%d", i);
        execl(g_self, g_self, "--case", arg, (char *)NULL);
        _exit(127);
    }
    assert_true(pid > 0);
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    if (!WIFEXITED(status) || WEXITSTATUS(status))
        fail_msg("%s, %d tokens, %d seqs, utilization %.2f: outside 5 %% (see above)", c->config,
                 c->batched, c->seqs, c->util);
}

static void test_7b(void **state) {
    (void)state;
    check_case(0);
    check_case(1);
}

static void test_14b(void **state) {
    (void)state;
    check_case(2);
    check_case(3);
}

int main(int argc, char **argv) {
    if (argc == 3 && !strcmp(argv[1], "--case")) {
        int i = atoi(argv[2]);
        if (i < 0 || i >= (int)(sizeof(g_cases) / sizeof(g_cases[0]))) return 2;
        return case_run(&g_cases[i]);
    }
    g_self = argv[0];
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
        return 77;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_7b),
        cmocka_unit_test(test_14b),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
