/* engine_plan.c: the engine's options as the planner's (see engine_plan.h). */
#include "worker/engine/engine_plan.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kernels/gpuinfo.h"
#include "kernels/model.h"
#include "kernels/shard.h"
#include "worker/plan/plan.h"

/* The planner's options for o's layout on its devices, as they are now. */
static int engine_plan_options(const rlEngineOptions *o, rlPlanOptions *po, int *dev,
                               rlError *err) {
    int tp = o->tp > 0 ? o->tp : 1, pp = o->pp > 0 ? o->pp : 1;
    int n = o->devices ? o->n_devices : tp * pp;
    if (n > RL_PLAN_MAX_GPUS || n < 1)
        return rl_error(err, RL_EUSAGE, "%d devices: give between 1 and %d", n, RL_PLAN_MAX_GPUS);
    if (plan_check_gpu_count(1, tp, pp, n, 0, err)) return -1;
    for (int i = 0; i < n; i++) dev[i] = o->devices ? o->devices[i] : i;
    plan_options_init(po, 0, 0);
    po->dtype = !strcmp(o->dtype, "fp16") ? RL_F16 : !strcmp(o->dtype, "fp32") ? RL_F32 : RL_BF16;
    po->max_model_len = o->max_model_len;
    po->max_num_seqs = o->max_num_seqs;
    po->max_num_batched_tokens = o->max_num_batched_tokens;
    po->block_size = o->block_size;
    po->gpu_memory_utilization = o->gpu_memory_utilization;
    po->batch_invariant = o->batch_invariant;
    return plan_read_devices(dev, n, po, err);
}

int engine_check_plan(const rlModelConfig *cfg, const rlEngineOptions *o, FILE *log,
                       long long *kv_blocks, rlError *err) {
    int tp = o->tp > 0 ? o->tp : 1, pp = o->pp > 0 ? o->pp : 1;
    int dev[RL_PLAN_MAX_GPUS];
    rlPlanOptions po;
    if (engine_plan_options(o, &po, dev, err)) return -1;
    rlPlan p;
    int rc = plan_layout(cfg, &po, 1, tp, pp, &p, err);
    if (p.n_layouts) plan_print(log, &p);
    if (!rc) *kv_blocks = p.layouts[0].kv_blocks[0];
    plan_free(&p);
    return rc;
}

/* The most any rank's activations take of what its weights leave of its
 * share, in eighths (9: more than the share). */
static int plan_act_eighths(const rlPlan *p, double *act, double *room) {
    int worst = 0;
    const rlPlanLayout *l = &p->layouts[0];
    for (int i = 0; i < l->instances * l->tp * l->pp; i++) {
        const rlPlanRank *r = &l->ranks[i];
        size_t left = r->budget > r->weights ? r->budget - r->weights : 0;
        int e = left ? (int)(8.0 * (double)r->activations / (double)left) : 9;
        if (e >= worst) worst = e, *act = (double)r->activations, *room = (double)left;
    }
    return worst;
}

/* The smallest GPU's memory: the defaults go by it. */
static size_t least_gpu(const rlPlanOptions *devices) {
    size_t least = 0;
    for (int i = 0; i < devices->n_gpus; i++)
        if (!least || devices->gpu_total[i] < least) least = devices->gpu_total[i];
    return least;
}

/* vLLM's larger defaults: GPUs of 70 GiB or more that are not A100s (its
 * EngineArgs keeps the A100 on the smaller ones, which serve it better). */
static int vllm_big_gpu(const rlPlanOptions *devices, const char *gpu_name) {
    return least_gpu(devices) >= (size_t)70 << 30 && !strstr(gpu_name, "A100");
}

int engine_batched_tokens_vllm(const rlPlanOptions *devices, const char *gpu_name, int offline,
                               const char **rule) {
    int big = vllm_big_gpu(devices, gpu_name);
    *rule = big ? "70 GiB or more, not an A100: 16384 offline, 8192 serving"
                : "under 70 GiB or an A100: 8192 offline, 2048 serving";
    return big ? (offline ? 16384 : 8192) : (offline ? 8192 : 2048);
}

int engine_max_num_seqs_vllm(const rlPlanOptions *devices, const char *gpu_name,
                             const char **rule) {
    int big = vllm_big_gpu(devices, gpu_name);
    *rule = big ? "70 GiB or more, not an A100: 1024" : "under 70 GiB or an A100: 256";
    return big ? 1024 : 256;
}

int engine_batched_tokens_for(const rlModelConfig *cfg, const rlEngineOptions *o,
                              const rlPlanOptions *devices, const char *gpu_name, char *why,
                              size_t why_len) {
    int tp = o->tp > 0 ? o->tp : 1, pp = o->pp > 0 ? o->pp : 1;
    rlPlanOptions po = *devices;
    const char *rule;
    int T = engine_batched_tokens_vllm(devices, gpu_name, o->offline, &rule), first = T;
    double act = 0, room = 0;
    for (;;) {
        po.max_num_batched_tokens = T;
        rlPlan p;
        rlError perr = {0};
        int rc = plan_layout(cfg, &po, 1, tp, pp, &p, &perr);
        int eighths = rc || !p.n_layouts ? 0 : plan_act_eighths(&p, &act, &room);
        plan_free(&p);
        if (rc || T <= 2048 || eighths < 1) break;   /* a plan that fails is reported at start */
        T /= 2;
    }
    snprintf(why, why_len, "vLLM's %s default for %s, %.0f GiB (%s)%s; the step's activations "
             "take %.1f of the %.0f GiB the weights leave (at most an eighth)",
             o->offline ? "offline" : "server", gpu_name,
             (double)least_gpu(devices) / (1 << 30), rule, T < first ? ", halved to fit" : "",
             act / (1 << 30), room / (1 << 30));
    return T;
}

void engine_gpu_name(const int *dev, int n, char *name, size_t len) {
    /* The A100 test reads every device's name; the name is the last one's,
     * or an A100's where there is one. */
    rlGpuHost host;
    char no[256];
    snprintf(name, len, "GPU");
    if (rl_gpu_probe(&host, no, sizeof no)) return;
    for (int i = 0; i < n; i++) {
        if (dev[i] < 0 || dev[i] >= host.count) continue;
        if (strstr(host.gpus[dev[i]].name, "A100") || !strstr(name, "A100"))
            snprintf(name, len, "%s", host.gpus[dev[i]].name);
    }
}

int engine_default_batch(const rlModelConfig *cfg, rlEngineOptions *o, FILE *log, rlError *err) {
    if (!strcmp(o->backend, "cpu")) {
        if (!o->max_num_seqs) o->max_num_seqs = 256;
        if (!o->max_num_batched_tokens) {
            o->max_num_batched_tokens = 2048;
            fprintf(log, "redlm: --max-num-batched-tokens 2048: the CPU backend's default; "
                    "--max-num-batched-tokens N sets it\n");
        }
        return 0;
    }
    int dev[RL_PLAN_MAX_GPUS];
    rlPlanOptions po;
    if (engine_plan_options(o, &po, dev, err)) return -1;
    char name[96];
    engine_gpu_name(dev, po.n_gpus, name, sizeof name);
    if (!o->max_num_seqs) {
        const char *rule;
        po.max_num_seqs = o->max_num_seqs = engine_max_num_seqs_vllm(&po, name, &rule);
        fprintf(log, "redlm: --max-num-seqs %d: vLLM's default for %s, %.0f GiB (%s); "
                "--max-num-seqs N sets it\n", o->max_num_seqs, name,
                (double)least_gpu(&po) / (1 << 30), rule);
    }
    if (!o->max_num_batched_tokens) {
        char why[400];
        o->max_num_batched_tokens = engine_batched_tokens_for(cfg, o, &po, name, why, sizeof why);
        fprintf(log, "redlm: --max-num-batched-tokens %d: %s; --max-num-batched-tokens N "
                "sets it\n", o->max_num_batched_tokens, why);
    }
    return 0;
}

/* One number from a file ("max" or absent: none). */
static size_t host_file_bytes(const char *path) {
    FILE *f = fopen(path, "r");
    unsigned long long v = 0;
    if (!f) return 0;
    if (fscanf(f, "%llu", &v) != 1) v = 0;
    fclose(f);
    return (size_t)v;
}

/* What this process may still take: MemAvailable, lowered to what is left
 * of a cgroup's memory limit (v2, then v1), as a container sees it. */
static size_t host_available_bytes(void) {
    size_t avail = 0;
    FILE *f = fopen("/proc/meminfo", "r");
    char line[256];
    unsigned long long kb;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "MemAvailable: %llu kB", &kb) == 1) avail = (size_t)kb << 10;
    if (f) fclose(f);
    if (!avail) {
        long pages = sysconf(_SC_AVPHYS_PAGES), page = sysconf(_SC_PAGESIZE);
        if (pages > 0 && page > 0) avail = (size_t)pages * (size_t)page;
    }
    static const char *limits[][2] = {
        {"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current"},
        {"/sys/fs/cgroup/memory/memory.limit_in_bytes", "/sys/fs/cgroup/memory/memory.usage_in_bytes"}};
    for (int i = 0; i < 2; i++) {
        size_t max = host_file_bytes(limits[i][0]), used = host_file_bytes(limits[i][1]);
        if (max && max < ((size_t)1 << 60)) {
            size_t left = max > used ? max - used : 0;
            if (!avail || left < avail) avail = left;
            break;
        }
    }
    return avail;
}

int engine_check_host_memory(const rlModelConfig *cfg, int tp, int pp, const int *partition,
                             size_t kv_bytes, rlError *err) {
    rlModelConfig dense = *cfg;
    memset(&dense.quant, 0, sizeof(dense.quant));   /* dequantized at load */
    rlShard *plan = calloc((size_t)tp * pp, sizeof(*plan));
    if (!plan) return rl_error(err, RL_EMEMORY, "out of memory");
    int rc = rl_shard_plan(&dense, tp, pp, partition, plan, err);
    double weights = 0;
    for (int i = 0; !rc && i < tp * pp; i++)
        weights += (double)rl_model_weight_bytes(&dense, &plan[i], RL_F32);
    free(plan);
    if (rc) return -1;
    size_t avail = host_available_bytes();
    const double gib = 1 << 30;
    if (!avail || weights + (double)kv_bytes <= (double)avail) return 0;
    if (weights > (double)avail)
        return rl_error(err, RL_EMEMORY,
                        "the CPU backend holds the weights as fp32: %.2f GiB for this model, "
                        "and this machine has %.2f GiB of memory available; run it on GPUs "
                        "(--backend cuda), or a smaller model on the CPU",
                        weights / gib, (double)avail / gib);
    return rl_error(err, RL_EMEMORY,
                    "the CPU backend's fp32 weights (%.2f GiB) and KV cache (%.2f GiB) are "
                    "more than the %.2f GiB of memory this machine has available; give a "
                    "smaller --kv-cache-memory (e.g. %.0fMiB)",
                    weights / gib, (double)kv_bytes / gib, (double)avail / gib,
                    ((double)avail - weights) / 2 / (1 << 20));
}
