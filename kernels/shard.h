/* shard.h: which part of the model one rank of a TP x PP layout owns.
 *
 * Tensor parallelism here never needs the head counts or the MLP width to
 * divide by the TP size (Qwen2.5-7B: 28 heads / 4 KV heads / 18944 MLP on TP 3
 * or 6).  Each rank takes a contiguous range of query heads, as even as
 * possible, and stores every KV head its query heads read, so a KV head
 * shared by two ranks is replicated on both.  The MLP is split in units that
 * keep GEMMs efficient, the vocabulary in near-equal row ranges.  Pipeline
 * stages take contiguous layer ranges.  A rank may own zero query heads
 * (TP larger than the head count): it then only computes its MLP share.
 * Mixture-of-experts layers cut every expert the same way as the MLP (a
 * column range of each, kernels/COSTMODEL.md says why not whole experts per
 * rank), and the shared expert like the MLP; the router is replicated. */
#ifndef RL_SHARD_H
#define RL_SHARD_H

#include <stdio.h>

#include "kernels/config.h"
#include "kernels/error.h"

typedef struct rlShard {
    int tp_rank, tp_size;
    int pp_rank, pp_size;
    int q_head0, n_q_heads;     /* query heads [q_head0, q_head0 + n_q_heads) */
    int kv_head0, n_kv_heads;   /* KV heads stored: those the query heads read */
    int mlp0, n_mlp;            /* intermediate columns [mlp0, mlp0 + n_mlp) */
    int moe0, n_moe;            /* columns [moe0, moe0 + n_moe) of every routed expert */
    int shared0, n_shared;      /* columns of the shared expert (Qwen2-MoE) */
    int vocab0, n_vocab;        /* embedding / LM-head rows [vocab0, vocab0 + n_vocab) */
    int layer0, n_layers;       /* this pipeline stage's layers */
} rlShard;

/* Plan every rank of a tp x pp layout into out[pp_rank * tp + tp_rank].
 * partition: layers per stage (pp entries summing to num_layers) or NULL for
 * a balanced split.  Fails when a layout cannot work (more stages than
 * layers, a partition that does not add up). */
int rl_shard_plan(const rlModelConfig *cfg, int tp, int pp, const int *partition,
                  rlShard *out, rlError *err);

/* The whole model as one rank holds it (TP 1, PP 1). */
void rl_shard_whole(const rlModelConfig *cfg, rlShard *out);

/* How even a plan is: max / mean over ranks (1.0 = perfectly even).
 * Weight bytes set a decode step's time on each rank (every weight is read
 * once per step), so their imbalance is the one that costs throughput. */
typedef struct rlShardBalance {
    double weights;             /* weight bytes over all tp x pp ranks */
    double q_heads;             /* query heads over the TP ranks of a stage */
    double mlp;                 /* MLP columns over the TP ranks of a stage */
    double kv;                  /* KV bytes per token over all ranks */
    size_t max_weight_bytes, max_kv_bytes_per_token;
} rlShardBalance;

void rl_shard_balance(const rlModelConfig *cfg, const rlShard *plan, int tp, int pp,
                      rlDtype weight_dtype, rlDtype kv_dtype, rlShardBalance *out);

/* Print the plan, one line per rank (heads, KV heads, MLP columns, vocab
 * rows, layers, weight bytes, KV bytes per token), then the imbalance. */
void rl_shard_print(FILE *f, const rlModelConfig *cfg, const rlShard *plan, int tp, int pp,
                    rlDtype weight_dtype, rlDtype kv_dtype);

#endif
