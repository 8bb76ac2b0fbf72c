/* cmd_plan.c: `redlm plan`, the memory plan of a model on some GPUs before
 * anything is loaded (plan.c computes it, plan_report.c prints it).
 *
 * Exit status: 0 when some layout fits (or the one asked for with --tp/--pp
 * fits), RL_EMEMORY when none does, RL_EUSAGE / RL_EMODEL / RL_EDEVICE for
 * bad flags, an unusable config or unreadable GPUs. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "worker/model/checkpoint.h"
#include "worker/commands.h"
#include "worker/engine/layout.h"
#include "worker/plan/plan.h"

static const char plan_help[] =
    "usage: redlm plan --model DIR|config.json [options]\n"
    "\n"
    "Where each GPU's memory goes for every layout (k instances of TP x PP ranks),\n"
    "which layouts fit, and the one to use for throughput and for latency.\n"
    "\n"
    "  --gpus N                      hypothetical GPUs (default 1) ...\n"
    "  --gpu-memory SIZE             ... of this much memory each (e.g. 24GiB, 141GB; default 80GiB)\n"
    "  --devices LIST                real GPUs instead (e.g. 0-5): their memory and what other\n"
    "                                processes hold, read through NVML\n"
    "  --dtype bf16|fp16|fp32        weights, activations and KV cache (default bf16)\n"
    "  --max-model-len N             longest sequence (default: the model's maximum)\n"
    "  --max-num-seqs N              sequences per instance at once (default 256)\n"
    "  --max-num-batched-tokens N    new tokens per step (default 2048)\n"
    "  --block-size N                KV block size in tokens (default 16)\n"
    "  --gpu-memory-utilization F    share of each GPU redlm may use (default 0.90)\n"
    "  --instances K --tp T --pp P   check this one layout only (exit 5 when it does not fit)\n"
    "  --json                        the whole plan as JSON, every rank of every layout\n";

static int plan_int(const char *flag, const char *v, int lo, int hi, int *out, rlError *err) {
    char *end;
    long x = strtol(v, &end, 10);
    if (end == v || *end || x < lo || x > hi)
        return rl_error(err, RL_EUSAGE, "%s '%s': give a whole number from %d to %d", flag, v, lo,
                        hi);
    *out = (int)x;
    return 0;
}

static int plan_dtype(const char *v, rlDtype *out, rlError *err) {
    if (!strcmp(v, "bf16") || !strcmp(v, "bfloat16")) *out = RL_BF16;
    else if (!strcmp(v, "fp16") || !strcmp(v, "float16")) *out = RL_F16;
    else if (!strcmp(v, "fp32") || !strcmp(v, "float32")) *out = RL_F32;
    else return rl_error(err, RL_EUSAGE, "--dtype '%s': give bf16, fp16 or fp32", v);
    return 0;
}

typedef struct planArgs {
    const char *model, *devices, *gpu_memory;
    int gpus, instances, tp, pp, json;
    rlPlanOptions opt;
} planArgs;

static int plan_args(int argc, char **argv, planArgs *a, rlError *err) {
    memset(a, 0, sizeof(*a));
    plan_options_init(&a->opt, 1, 0);
    for (int i = 1; i < argc; i++) {
        const char *f = argv[i];
        if (!strcmp(f, "--json")) {
            a->json = 1;
            continue;
        }
        if (i + 1 >= argc || strncmp(f, "--", 2))
            return rl_error(err, RL_EUSAGE, "unexpected argument '%s' (redlm plan --help)", f);
        const char *v = argv[++i];
        rlPlanOptions *o = &a->opt;
        int rc = 0;
        if (!strcmp(f, "--model")) a->model = v;
        else if (!strcmp(f, "--devices")) a->devices = v;
        else if (!strcmp(f, "--gpu-memory")) a->gpu_memory = v;
        else if (!strcmp(f, "--gpus")) rc = plan_int(f, v, 1, RL_PLAN_MAX_GPUS, &a->gpus, err);
        else if (!strcmp(f, "--instances")) rc = plan_int(f, v, 1, RL_PLAN_MAX_GPUS, &a->instances, err);
        else if (!strcmp(f, "--tp")) rc = plan_int(f, v, 1, RL_PLAN_MAX_GPUS, &a->tp, err);
        else if (!strcmp(f, "--pp")) rc = plan_int(f, v, 1, RL_PLAN_MAX_GPUS, &a->pp, err);
        else if (!strcmp(f, "--dtype")) rc = plan_dtype(v, &o->dtype, err);
        else if (!strcmp(f, "--max-model-len")) rc = plan_int(f, v, 1, 1 << 24, &o->max_model_len, err);
        else if (!strcmp(f, "--max-num-seqs")) rc = plan_int(f, v, 1, 1 << 16, &o->max_num_seqs, err);
        else if (!strcmp(f, "--max-num-batched-tokens"))
            rc = plan_int(f, v, 1, 1 << 20, &o->max_num_batched_tokens, err);
        else if (!strcmp(f, "--block-size")) rc = plan_int(f, v, 1, 1024, &o->block_size, err);
        else if (!strcmp(f, "--gpu-memory-utilization")) {
            char *end;
            o->gpu_memory_utilization = strtod(v, &end);
            if (end == v || *end || !(o->gpu_memory_utilization > 0) ||
                o->gpu_memory_utilization > 1)
                rc = rl_error(err, RL_EUSAGE,
                              "--gpu-memory-utilization '%s': give a share in (0, 1], e.g. 0.90", v);
        } else return rl_error(err, RL_EUSAGE, "unknown flag '%s' (redlm plan --help)", f);
        if (rc) return -1;
    }
    if (!a->model)
        return rl_error(err, RL_EUSAGE,
                        "no model: pass --model with a model directory or a config.json");
    if (a->devices && (a->gpus || a->gpu_memory))
        return rl_error(err, RL_EUSAGE,
                        "--devices reads the GPUs' real memory: leave out --gpus and --gpu-memory, "
                        "or leave out --devices to plan for hypothetical GPUs");
    if ((a->tp || a->pp || a->instances) && !(a->tp && a->pp))
        return rl_error(err, RL_EUSAGE,
                        "to check one layout give both --tp and --pp (and --instances, default 1)");
    return 0;
}

static int plan_gpus(planArgs *a, rlError *err) {
    rlPlanOptions *o = &a->opt;
    if (a->devices) {
        int dev[RL_PLAN_MAX_GPUS], n;
        if (layout_parse_list(a->devices, dev, RL_PLAN_MAX_GPUS, &n, "--devices", err)) return -1;
        return plan_read_devices(dev, n, o, err);
    }
    size_t bytes = (size_t)80 << 30;
    if (a->gpu_memory && plan_parse_size(a->gpu_memory, &bytes, err)) return -1;
    int n = a->gpus ? a->gpus : 1;
    o->n_gpus = n;
    for (int i = 0; i < n; i++) {
        o->gpu_total[i] = bytes;
        o->gpu_used[i] = 0;
        o->gpu_ordinal[i] = -1;
    }
    return 0;
}

int cmd_plan(int argc, char **argv) {
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            fputs(plan_help, stdout);
            return 0;
        }
    rlError err = {0};
    planArgs a;
    rlModelConfig cfg;
    rlPlan plan;
    if (plan_args(argc, argv, &a, &err) || checkpoint_read_config(a.model, &cfg, &err) ||
        plan_gpus(&a, &err))
        goto fail;
    int rc;
    if (a.tp) rc = plan_layout(&cfg, &a.opt, a.instances ? a.instances : 1, a.tp, a.pp, &plan, &err);
    else rc = plan_compute(&cfg, &a.opt, &plan, &err);
    /* A layout that does not fit is printed too: its numbers are the evidence. */
    if (rc && !plan.n_layouts) goto fail;
    rlError perr = {0};
    if (a.json ? plan_print_json(stdout, &plan, &perr) : (plan_print(stdout, &plan), 0)) {
        plan_free(&plan);
        err = perr;
        goto fail;
    }
    int fits = 0;
    for (int i = 0; i < plan.n_layouts; i++) fits |= plan.layouts[i].fits;
    plan_free(&plan);
    if (rc) goto fail;
    if (!fits) {
        fflush(stdout);
        fprintf(stderr, "redlm plan: no layout of this model fits on these GPUs: see the "
                        "reasons above\n");
        return RL_EMEMORY;
    }
    return 0;
fail:
    fprintf(stderr, "redlm plan: %s\n", err.msg);
    return err.code ? (int)err.code : 1;
}
