/* plan.h: where every byte of GPU memory goes, for every way to lay a model
 * out over some GPUs, computed before anything is allocated.
 *
 * A layout is k instances of TP x PP ranks (k * TP * PP GPUs).  For each rank
 * the plan counts the shard's weights (rl_shard_plan + rl_model_weight_bytes,
 * the numbers the model loader will allocate), its activation buffers, the
 * CUDA backend's workspace and graph reserve, NCCL buffers and the CUDA
 * context; what is left of the GPU's budget becomes KV blocks.  `redlm plan`
 * prints it; the worker runs the same functions at start and stops before
 * loading weights when its layout does not fit.  Computing and printing are
 * separate (plan_report.c) so callers take the numbers as a struct. */
#ifndef RL_PLAN_H
#define RL_PLAN_H

#include <stddef.h>
#include <stdio.h>

#include "kernels/config.h"
#include "kernels/error.h"
#include "kernels/shard.h"

#define RL_PLAN_MAX_GPUS 64

/* How two GPUs exchange a collective's bytes, fastest first; the cost of
 * each is in plan_cost.c (with its source). */
typedef enum rlPlanLink {
    RL_PLAN_LINK_NVLINK,        /* NVLink */
    RL_PLAN_LINK_PCIE,          /* PCIe peer-to-peer (a switch, a host bridge) */
    RL_PLAN_LINK_HOST           /* between sockets, or no peer-to-peer: through host memory */
} rlPlanLink;

typedef struct rlPlanOptions {
    rlDtype dtype;                 /* weights, activations and KV cache on the device */
    int max_model_len;             /* 0: the model's max_position_embeddings */
    int max_num_seqs;              /* default 256 (the engine's on the CPU) */
    const char *seqs_from;         /* why that value, printed beside it, or NULL */
    int max_num_batched_tokens;    /* default 2048 */
    const char *batched_tokens_from; /* why that value, printed beside it, or NULL */
    int block_size;                /* default 16 */
    double gpu_memory_utilization; /* this instance's share of each GPU's total memory */
    int batch_invariant;           /* --batch-invariant: its all-reduce buffer counted */
    int n_gpus;
    size_t gpu_total[RL_PLAN_MAX_GPUS]; /* each GPU's memory */
    size_t gpu_used[RL_PLAN_MAX_GPUS];  /* held by other processes */
    size_t gpu_free[RL_PLAN_MAX_GPUS];  /* free now (the driver's reservation and others out) */
    int gpu_ordinal[RL_PLAN_MAX_GPUS];  /* CUDA ordinal, or -1 for a hypothetical GPU */
    double gpu_bandwidth[RL_PLAN_MAX_GPUS]; /* memory bytes/s (the cost model) */
    unsigned char link[RL_PLAN_MAX_GPUS][RL_PLAN_MAX_GPUS]; /* rlPlanLink between GPUs */
    const char *links_from;     /* where link came from: "--interconnect pcie", "NVML" ... */
} rlPlanOptions;

/* The engine's defaults; n_gpus idle GPUs of gpu_bytes each. */
void plan_options_init(rlPlanOptions *o, int n_gpus, size_t gpu_bytes);

/* One rank's memory on its GPU, in bytes. */
typedef struct rlPlanRank {
    rlShard shard;
    int gpu;                 /* index into the options' GPU arrays */
    size_t budget;           /* utilization x total: this instance's share */
    size_t weights;
    size_t activations;      /* model buffers, logits included */
    size_t workspace;        /* GEMM workspace and sampling scratch */
    size_t graphs;           /* CUDA graph pools and the rest of the backend's reserve */
    size_t nccl;             /* communicator buffers */
    size_t runtime;          /* CUDA context, cuBLAS handles, module images */
    size_t kv;               /* the KV blocks' share on this rank */
    size_t kv_bytes_per_block;
} rlPlanRank;

/* The cost model's prediction for a layout (plan_cost.c, COSTMODEL.md). */
typedef struct rlPlanCost {
    int seqs;                /* running sequences per instance it assumes */
    double tok_s;            /* decode output tokens/s, every instance together */
    double step_ms;          /* the slowest stage's step at that load */
    double comm_ms;          /* of which collectives and pipeline hand-offs */
    double token_ms;         /* one sequence alone: ms per output token */
    rlPlanLink link;         /* the slowest link inside a TP group */
} rlPlanCost;

typedef struct rlPlanLayout {
    int instances, tp, pp;
    int fits;
    char why[768];           /* fits == 0: why not, and what to change */
    rlPlanRank *ranks;       /* [instance][pp_rank * tp + tp_rank] */
    long long *kv_blocks;    /* [instance] blocks every rank of it holds */
    long long kv_tokens;     /* per instance (the smallest when they differ) */
    int max_seqs;            /* sequences of max_model_len that fit at once, per instance */
    int collectives;         /* TP all-reduces and gathers plus PP hand-offs per step */
    double imbalance;        /* weight bytes max / mean over one instance's ranks */
    int tight;               /* index into ranks of the rank with the least KV room */
    rlPlanCost cost;         /* the cost model's prediction, fits == 1 only */
} rlPlanLayout;

typedef struct rlPlan {
    rlModelConfig cfg;
    rlPlanOptions opt;       /* with defaults filled in */
    rlPlanLayout *layouts;
    int n_layouts;
    int throughput, latency; /* recommended layouts (index), -1 when nothing fits */
    char throughput_why[768], latency_why[512];
    char links_why[768];     /* what changes with the other kind of link (empty: nothing) */
} rlPlan;

/* Every layout of cfg over the options' GPUs, each checked and costed, and
 * the two recommendations.  Fails only on bad options (RL_EUSAGE). */
int plan_compute(const rlModelConfig *cfg, const rlPlanOptions *o, rlPlan *p, rlError *err);

/* One layout on the GPUs the options list in order (the worker's start):
 * p holds just that layout.  RL_EDEVICE when it needs more GPUs than listed
 * (p empty); RL_EMEMORY with the plan's numbers and the flags to change when
 * it does not fit (p holds the layout, for printing the evidence). */
int plan_layout(const rlModelConfig *cfg, const rlPlanOptions *o, int instances, int tp, int pp,
                rlPlan *p, rlError *err);

/* plan_devices.c: fill o's GPU arrays from real devices (CUDA ordinals):
 * total and free memory and what other processes hold.  RL_EDEVICE when
 * they cannot be read. */
int plan_read_devices(const int *devices, int n, rlPlanOptions *o, rlError *err);

/* RL_EDEVICE, saying which flags to change, when the layout needs more
 * GPUs than n_gpus (hypothetical: `redlm plan --gpus`' GPUs, not devices). */
int plan_check_gpu_count(int instances, int tp, int pp, int n_gpus, int hypothetical,
                         rlError *err);

void plan_layout_free(rlPlanLayout *l);
void plan_free(rlPlan *p);

/* plan_cost.c: every pair of GPUs joined by `link`, and each GPU's memory
 * bandwidth (bytes/s; 0: by its size, see plan_cost.c). */
void plan_set_links(rlPlanOptions *o, rlPlanLink link, const char *from);
/* The links of a topology (kernels/gpuinfo.h) between GPUs 0..n. */
struct rlGpuTopology;
void plan_set_topology(rlPlanOptions *o, const struct rlGpuTopology *t, const char *from);
/* Links by the GPUs' size when nothing set them (o->links_from NULL). */
void plan_default_links(rlPlanOptions *o);
/* "nvlink", "pcie", "host"; the bus bandwidth assumed and its source. */
const char *plan_link_name(rlPlanLink link);
double plan_link_bandwidth(rlPlanLink link);
const char *plan_link_source(rlPlanLink link);
/* Fill l->cost; called by plan_compute and plan_layout for layouts that fit. */
void plan_cost(const rlModelConfig *cfg, const rlPlanOptions *o, rlPlanLayout *l);
/* One line: why layout a ranks above b, in their costs. */
void plan_cost_compare(const rlPlanLayout *a, const rlPlanLayout *b, char *out, size_t n);

/* plan_report.c: the plan as a table for a terminal, or as JSON. */
void plan_print(FILE *f, const rlPlan *p);
void plan_print_layout(FILE *f, const rlPlan *p, const rlPlanLayout *l);
/* "2 x TP3", "1 x TP3 PP2". */
void plan_layout_name(const rlPlanLayout *l, char *buf, size_t n);
int plan_print_json(FILE *f, const rlPlan *p, rlError *err);

#endif
