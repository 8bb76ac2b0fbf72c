/* cmd_plan.c: `redlm plan`, the memory plan of a model on some GPUs before
 * anything is loaded (plan.c computes it, plan_report.c prints it).
 *
 * Exit status: 0 when some layout fits (or the one asked for with --tp/--pp
 * fits), RL_EMEMORY when none does, RL_EUSAGE / RL_EMODEL / RL_EDEVICE for
 * bad flags, an unusable config or unreadable GPUs. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/gpuinfo.h"

#include "worker/model/checkpoint.h"
#include "worker/commands.h"
#include "worker/engine/engine_flags.h"
#include "worker/engine/engine_plan.h"
#include "worker/engine/layout.h"
#include "worker/lib/flags.h"
#include "worker/model/modelcfg.h"
#include "worker/plan/plan.h"

typedef struct planArgs {
    const char *model, *dtype;
    int devices[RL_PLAN_MAX_GPUS], n_devices;
    size_t gpu_memory;
    int gpus, instances, tp, pp, json;
    int interconnect;       /* rlPlanLink, -1: by the GPUs' size */
    const char *topology;
    double bandwidth;       /* GB/s, 0: by the GPUs' size */
    int one;                /* --tp or --pp given: check that layout only */
    int tokens_given;       /* --max-num-batched-tokens given */
    int seqs_given;         /* --max-num-seqs given */
    rlPlanOptions opt;
} planArgs;

/* -1: go on; else the exit status (help printed, or a bad flag). */
static int plan_args(int argc, char **argv, planArgs *a) {
    memset(a, 0, sizeof(*a));
    plan_options_init(&a->opt, 1, 0);
    a->dtype = "bf16";
    a->gpus = a->instances = a->tp = a->pp = 1;
    a->gpu_memory = (size_t)80 << 30;
    a->interconnect = -1;
    rlPlanOptions *o = &a->opt;
    static const rlFlagChoice links[] = {{"nvlink", NULL, RL_PLAN_LINK_NVLINK},
                                         {"pcie", NULL, RL_PLAN_LINK_PCIE},
                                         {"host", NULL, RL_PLAN_LINK_HOST},
                                         {NULL, NULL, 0}};
    rlFlags fs;
    flags_init(&fs, "plan",
               "usage: redlm plan --model DIR|config.json [options]\n"
               "\n"
               "Where each GPU's memory goes for every layout (k instances of TP x PP ranks),\n"
               "which layouts fit, and the one to use for throughput and for latency.\n"
               "\n");
    flags_string(&fs, "--model", &a->model, "DIR",
                 "a model directory or its config.json")->required = 1;
    flags_int(&fs, "--gpus", &a->gpus, 1, RL_PLAN_MAX_GPUS, "N",
              "hypothetical GPUs (default 1) ...")
        ->refusal = "the memory of each is --gpu-memory (six 24 GiB cards: --gpus 6 "
                    "--gpu-memory 24GiB)";
    flags_size(&fs, "--gpu-memory", &a->gpu_memory, (size_t)1 << 30,
               "... of this much memory each (e.g. 24GiB, 141GB; default\n80GiB)");
    layout_flags_add_devices(&fs, a->devices, RL_PLAN_MAX_GPUS, &a->n_devices,
                             "real GPUs instead (e.g. 0-5): their memory, what other\n"
                             "processes hold and the links between them, from NVML");
    flags_enum_int(&fs, "--interconnect", &a->interconnect, links,
                   "how the hypothetical GPUs reach each other (default:\n"
                   "pcie under 40 GiB, else nvlink; host: across sockets or\n"
                   "without peer-to-peer)");
    flags_string(&fs, "--topology", &a->topology, "FILE",
                 "... or each pair's link, as `nvidia-smi topo -m` prints\n"
                 "them (optionally followed by `nvidia-smi topo -p2p r`)");
    flags_double(&fs, "--gpu-bandwidth", &a->bandwidth, 10, 0, 100000, "GB/s",
                 "their memory bandwidth (default 1000 under 40 GiB, else\n3350)");
    flags_enum(&fs, "--dtype", &a->dtype, engine_dtypes,
               "weights, activations and KV cache (default bf16;\n"
               "auto: the config's); also bfloat16, float16, half, float32");
    engine_flags_add_limits(&fs, &o->block_size, &o->gpu_memory_utilization, &o->max_num_seqs,
                            &o->max_num_batched_tokens, &o->max_model_len);
    flags_int(&fs, "--instances", &a->instances, 1, RL_PLAN_MAX_GPUS, "K",
              "with --tp / --pp: check this one layout only (exit 5\n"
              "when it does not fit; the one not given is 1)");
    layout_flags_add_shape(&fs, &a->tp, &a->pp);
    flags_bool(&fs, "--json", &a->json, "the whole plan as JSON, every rank of every layout");
    const char *kv_cache_dtype = "auto";   /* the only choice: nothing to keep */
    int trust_remote_code = 0;
    engine_flags_add_vllm(&fs, &kv_cache_dtype, &trust_remote_code);
    flags_conflict(&fs, "--devices", "--gpus");
    flags_conflict(&fs, "--devices", "--gpu-memory");
    flags_conflict(&fs, "--devices", "--interconnect");
    flags_conflict(&fs, "--devices", "--topology");
    flags_conflict(&fs, "--devices", "--gpu-bandwidth");
    flags_conflict(&fs, "--interconnect", "--topology");
    int rc = flags_main(&fs, argc, argv);
    /* One layout as generate and worker take it: the other dimension 1. */
    a->one = flags_given(&fs, "--tp") > 0 || flags_given(&fs, "--pp") > 0;
    a->tokens_given = flags_given(&fs, "--max-num-batched-tokens") > 0;
    a->seqs_given = flags_given(&fs, "--max-num-seqs") > 0;
    if (rc < 0 && flags_given(&fs, "--instances") > 0 && !a->one) {
        fprintf(stderr, "redlm plan: --instances only applies together with --tp or --pp\n");
        return RL_EUSAGE;
    }
    return rc;
}

/* --topology FILE: the links between the hypothetical GPUs, as NVML would
 * give them (kernels/gpuinfo.h parses it). */
static int plan_read_topology(const char *path, int n, rlPlanOptions *o, rlError *err) {
    FILE *f = fopen(path, "r");
    if (!f)
        return rl_error(err, RL_EUSAGE, "--topology %s: cannot open it: %s", path,
                        strerror(errno));
    char text[65536];
    size_t len = fread(text, 1, sizeof(text) - 1, f);
    text[len] = 0;
    fclose(f);
    rlGpuTopology t;
    char why[256];
    if (rl_gpu_topology_parse(text, &t, why, sizeof(why)))
        return rl_error(err, RL_EUSAGE, "--topology %s: %s; give the output of `nvidia-smi topo "
                        "-m` (and optionally `nvidia-smi topo -p2p r`)", path, why);
    if (t.n != n)
        return rl_error(err, RL_EUSAGE, "--topology %s describes %d GPUs but --gpus is %d", path,
                        t.n, n);
    plan_set_links(o, RL_PLAN_LINK_NVLINK, NULL);
    plan_set_topology(o, &t, "from --topology");
    return 0;
}

static int plan_gpus(planArgs *a, rlError *err) {
    rlPlanOptions *o = &a->opt;
    if (a->n_devices) return plan_read_devices(a->devices, a->n_devices, o, err);
    o->n_gpus = a->gpus;
    for (int i = 0; i < a->gpus; i++) {
        o->gpu_total[i] = o->gpu_free[i] = a->gpu_memory;
        o->gpu_used[i] = 0;
        o->gpu_ordinal[i] = -1;
        o->gpu_bandwidth[i] = a->bandwidth * 1e9;
    }
    if (a->interconnect >= 0) {
        static const char *from[] = {"--interconnect nvlink", "--interconnect pcie",
                                     "--interconnect host"};
        plan_set_links(o, (rlPlanLink)a->interconnect, from[a->interconnect]);
    }
    return a->topology ? plan_read_topology(a->topology, a->gpus, o, err) : 0;
}

/* Without --max-num-seqs / --max-num-batched-tokens the plan counts what a
 * `redlm worker` on these GPUs would start with (engine_plan.h), so its KV
 * figures are the ones the worker prints at start.  For one layout that is
 * the worker's exact step; over all layouts, vLLM's before the halving a
 * start does where a step's activations would crowd a rank.  why, seqs_why:
 * the reasons, printed beside the values. */
static void plan_defaults(planArgs *a, const rlModelConfig *cfg, char *why, size_t len,
                          char *seqs_why, size_t seqs_len) {
    char name[96] = "a GPU";
    const char *rule;
    if (a->n_devices) engine_gpu_name(a->devices, a->n_devices, name, sizeof name);
    if (!a->seqs_given) {
        a->opt.max_num_seqs = engine_max_num_seqs_vllm(&a->opt, name, &rule);
        snprintf(seqs_why, seqs_len, "as `redlm worker` would start: vLLM's default (%s)", rule);
        a->opt.seqs_from = seqs_why;
    }
    if (a->tokens_given) return;
    if (a->one) {
        rlEngineOptions eo;
        engine_options_init(&eo);
        eo.tp = a->tp, eo.pp = a->pp;
        char how[400];
        a->opt.max_num_batched_tokens =
            engine_batched_tokens_for(cfg, &eo, &a->opt, name, how, sizeof how);
        snprintf(why, len, "as `redlm worker` would start: %s", how);
    } else {
        a->opt.max_num_batched_tokens = engine_batched_tokens_vllm(&a->opt, name, 0, &rule);
        snprintf(why, len, "as `redlm worker` would start: vLLM's server default (%s), halved "
                 "where a layout's step would take over an eighth of what its weights leave",
                 rule);
    }
    a->opt.batched_tokens_from = why;
}

int cmd_plan(int argc, char **argv) {
    rlError err = {0};
    planArgs a;
    rlModelConfig cfg;
    rlPlan plan;
    int rc = plan_args(argc, argv, &a);
    if (rc >= 0) return rc;
    if (checkpoint_read_config(a.model, &cfg, &err) ||
        modelcfg_dtype(&cfg, a.dtype, &a.opt.dtype, &err) || plan_gpus(&a, &err))
        goto fail;
    char why[512], seqs_why[160];
    plan_defaults(&a, &cfg, why, sizeof why, seqs_why, sizeof seqs_why);
    if (a.one) rc = plan_layout(&cfg, &a.opt, a.instances, a.tp, a.pp, &plan, &err);
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
