/* plan.c: the memory plan of every layout (see plan.h).
 *
 * The KV cache gets what is left of each GPU's budget after everything else,
 * as the CUDA backend does at start (kernels/cuda/memplan.cu): budget =
 * --gpu-memory-utilization x total memory, this instance's share whatever
 * other processes hold (vLLM's rule), and that share must be free.
 * Every rank of an instance holds the same number of KV blocks (a block is a
 * range of token positions; each rank stores its KV heads' share of it), so
 * the rank with the least room sets the instance's capacity. */
#include "worker/plan/plan.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/model.h"
#include "sched/sched.h"

#define MiB ((size_t)1 << 20)
#define GiB ((size_t)1 << 30)

/* The costs besides weights, activations and KV, per GPU, in one place.
 * They are estimates: tests/gpu_plan.sh compares the plan with what CUDA
 * reports on a real GPU; adjust them here when it disagrees.
 *
 * CUDA context with lazy module loading, cuBLAS and cuBLASLt handles and
 * redlm's kernel images: cudaMemGetInfo shows 0.4-0.6 GiB used on an idle
 * Hopper GPU after the first kernel with CUDA 12/13 drivers. */
static const size_t PLAN_RUNTIME = 500 * MiB;
/* cuBLASLt workspace: kernels/cuda/gemm.cu allocates 64 MiB per device. */
static const size_t PLAN_GEMM_WORKSPACE = 64 * MiB;
/* The CUDA backend holds back a flat 2 GiB (RL_CUDA_RESERVE in
 * kernels/cuda/memplan.cu) for attention split partials, sampling scratch and
 * CUDA graph pools; the plan counts the sampling scratch as workspace and the
 * rest of the reserve as graph pools, never less than PLAN_GRAPHS_MIN. */
static const size_t PLAN_CUDA_RESERVE = 2 * GiB;
static const size_t PLAN_GRAPHS_MIN = 256 * MiB;
/* The CUDA backend grows a scratch buffer to 1.25x what is asked
 * (kernels/cuda/backend_cuda.cu, cuda_grow): sample.cu's for the rows x
 * vocab fp32 logits it samples from (at most rl_model_head_rows at once),
 * moe.cu's for the largest step's expert pairs (rl_moe_scratch_bytes),
 * qlinear.cu's for quantized layers (rl_model_quant_scratch_bytes). */
static const double PLAN_SCRATCH_SLACK = 1.25;
/* NCCL, per tensor-parallel communicator: ring and tree connections over up
 * to 24 channels, each with a Simple buffer (NCCL_BUFFSIZE, 4 MiB), an
 * LL128 buffer (~4.6 MiB) and an LL buffer (~0.25 MiB): about 400 MiB.
 * NVLink SHARP (NCCL_NVLS_ENABLE) would add more; doctor warns when it is on. */
static const size_t PLAN_NCCL_TP = 400 * MiB;
/* NCCL, per pipeline neighbour: send/recv connections over a few channels. */
static const size_t PLAN_NCCL_PP = 64 * MiB;
/* A layout balances when its most loaded rank holds at most this much more
 * weight than the mean (weights set each rank's decode step time). */
static const double PLAN_BALANCED = 1.10;

static double gib(size_t b) { return (double)b / (double)GiB; }

void plan_options_init(rlPlanOptions *o, int n_gpus, size_t gpu_bytes) {
    memset(o, 0, sizeof(*o));
    o->dtype = RL_BF16;
    o->max_num_seqs = 256;
    o->max_num_batched_tokens = 2048;
    o->block_size = 16;
    o->gpu_memory_utilization = 0.90;
    o->n_gpus = n_gpus < RL_PLAN_MAX_GPUS ? n_gpus : RL_PLAN_MAX_GPUS;
    for (int i = 0; i < o->n_gpus; i++) {
        o->gpu_total[i] = o->gpu_free[i] = gpu_bytes;
        o->gpu_ordinal[i] = -1;
    }
}

static int plan_check_options(const rlModelConfig *cfg, rlPlanOptions *o, rlError *err) {
    if (o->n_gpus < 1 || o->n_gpus > RL_PLAN_MAX_GPUS)
        return rl_error(err, RL_EUSAGE, "%d GPUs: give between 1 and %d (--gpus or --devices)",
                        o->n_gpus, RL_PLAN_MAX_GPUS);
    if (!(o->gpu_memory_utilization > 0 && o->gpu_memory_utilization <= 1))
        return rl_error(err, RL_EUSAGE,
                        "--gpu-memory-utilization %g: give a share of each GPU in (0, 1], "
                        "e.g. 0.90", o->gpu_memory_utilization);
    if (o->block_size < 1 || o->block_size > 1024 || o->max_num_seqs < 1 ||
        o->max_num_batched_tokens < 1)
        return rl_error(err, RL_EUSAGE,
                        "--block-size %d, --max-num-seqs %d, --max-num-batched-tokens %d: each "
                        "must be positive (block size at most 1024)",
                        o->block_size, o->max_num_seqs, o->max_num_batched_tokens);
    if (o->max_model_len > cfg->max_position_embeddings)
        return rl_error(err, RL_EUSAGE,
                        "--max-model-len %d is over the model's max_position_embeddings (%d); "
                        "give at most %d", o->max_model_len, cfg->max_position_embeddings,
                        cfg->max_position_embeddings);
    if (o->max_model_len < 0)
        return rl_error(err, RL_EUSAGE, "--max-model-len %d: give a positive length",
                        o->max_model_len);
    if (o->max_model_len == 0) o->max_model_len = cfg->max_position_embeddings;
    for (int i = 0; i < o->n_gpus; i++)
        if (o->gpu_total[i] == 0)
            return rl_error(err, RL_EUSAGE, "GPU %d has no memory: give --gpu-memory", i);
    plan_default_links(o);
    return 0;
}

/* The logit rows the engine sizes its logits for (the scheduler's rule). */
static int plan_max_rows(const rlPlanOptions *o) {
    rlSchedConfig c = {.max_num_seqs = o->max_num_seqs,
                       .max_num_batched_tokens = o->max_num_batched_tokens};
    return sched_config_max_rows(&c);
}

/* Everything but the KV cache for one rank. */
static void plan_rank_costs(const rlModelConfig *cfg, const rlPlanOptions *o, rlPlanRank *r) {
    const rlShard *s = &r->shard;
    int rows = plan_max_rows(o);
    r->budget = (size_t)(o->gpu_memory_utilization * (double)o->gpu_total[r->gpu]);
    r->weights = rl_model_weight_bytes(cfg, s, o->dtype);
    r->activations =
        rl_model_activation_bytes(cfg, s, o->dtype, o->max_num_batched_tokens, rows);
    if (o->batch_invariant)
        r->activations += rl_model_invariant_reduce_bytes(cfg, s, o->dtype,
                                                          o->max_num_batched_tokens);
    size_t scratch = 0;
    if (s->pp_rank == s->pp_size - 1)
        scratch = (size_t)(PLAN_SCRATCH_SLACK * (double)rl_model_head_rows(rows) *
                           (double)cfg->vocab_size * sizeof(float));
    r->workspace = PLAN_GEMM_WORKSPACE + scratch;
    r->workspace += (size_t)(PLAN_SCRATCH_SLACK *
                             (double)rl_model_quant_scratch_bytes(cfg, s, o->max_num_batched_tokens));
    if (cfg->num_experts && s->n_moe)
        r->workspace += (size_t)(PLAN_SCRATCH_SLACK *
                                 (double)rl_moe_scratch_bytes((size_t)o->max_num_batched_tokens,
                                                              cfg->hidden_size, s->n_moe,
                                                              cfg->num_experts,
                                                              cfg->num_experts_per_tok,
                                                              rl_dtype_size(o->dtype)));
    r->graphs = PLAN_CUDA_RESERVE > scratch + PLAN_GRAPHS_MIN ? PLAN_CUDA_RESERVE - scratch
                                                              : PLAN_GRAPHS_MIN;
    r->nccl = (s->tp_size > 1 ? PLAN_NCCL_TP : 0) +
              PLAN_NCCL_PP * (size_t)((s->pp_rank > 0) + (s->pp_rank < s->pp_size - 1));
    r->runtime = PLAN_RUNTIME;
    r->kv_bytes_per_block = rl_model_kv_bytes_per_token(cfg, s, o->dtype) * (size_t)o->block_size;
    r->kv = 0;
}

static size_t plan_fixed(const rlPlanRank *r) {
    return r->weights + r->activations + r->workspace + r->graphs + r->nccl + r->runtime;
}

static void plan_rank_name(const rlPlanOptions *o, const rlPlanRank *r, char *buf, size_t n) {
    if (o->gpu_ordinal[r->gpu] >= 0)
        snprintf(buf, n, "rank tp%d.pp%d on GPU %d", r->shard.tp_rank, r->shard.pp_rank,
                 o->gpu_ordinal[r->gpu]);
    else
        snprintf(buf, n, "rank tp%d.pp%d", r->shard.tp_rank, r->shard.pp_rank);
}

/* What makes a layout fit when memory is short, for its failure message. */
#define PLAN_MORE_GPUS "spread the model over more GPUs per instance (--tp / --pp) or use GPUs " \
                       "with more memory"

/* KV blocks of one instance (its ranks r[0 .. n)), or fills why and
 * returns -1 when it cannot fit; *tight gets the limiting rank. */
static long long plan_instance(const rlPlanOptions *o, rlPlanRank *r, int n, int *tight,
                               char *why, size_t why_len) {
    char name[64];
    for (int i = 0; i < n; i++) {
        size_t total = o->gpu_total[r[i].gpu], free = o->gpu_free[r[i].gpu];
        if (r[i].budget > free) {
            *tight = i;
            plan_rank_name(o, &r[i], name, sizeof(name));
            snprintf(why, why_len,
                     "--gpu-memory-utilization %.2f asks for %.2f GiB (%.2f x %.2f GiB) on %s but "
                     "only %.2f GiB is free: other processes hold %.2f GiB (`redlm doctor` names "
                     "them); lower --gpu-memory-utilization to %.2f or less, or free the GPU",
                     o->gpu_memory_utilization, gib(r[i].budget), o->gpu_memory_utilization,
                     gib(total), name, gib(free), gib(o->gpu_used[r[i].gpu]),
                     (double)free / (double)total - 0.005);
            return -1;
        }
    }
    for (int i = 0; i < n; i++) {
        if (r[i].weights > r[i].budget) {
            *tight = i;
            plan_rank_name(o, &r[i], name, sizeof(name));
            snprintf(why, why_len,
                     "weights alone need %.2f GiB on %s, more than its %.2f GiB budget "
                     "(%.2f GiB x %.2f utilization); %s",
                     gib(r[i].weights), name, gib(r[i].budget), gib(o->gpu_total[r[i].gpu]),
                     o->gpu_memory_utilization, PLAN_MORE_GPUS);
            return -1;
        }
    }
    for (int i = 0; i < n; i++) {
        if (plan_fixed(&r[i]) >= r[i].budget) {
            *tight = i;
            plan_rank_name(o, &r[i], name, sizeof(name));
            snprintf(why, why_len,
                     "no room left for the KV cache on %s: weights %.2f + activations %.2f + "
                     "workspace %.2f + graphs %.2f + NCCL %.2f + runtime %.2f = %.2f GiB of its "
                     "%.2f GiB budget; lower --max-num-batched-tokens or --max-num-seqs "
                     "(activations and logits), or %s",
                     name, gib(r[i].weights), gib(r[i].activations), gib(r[i].workspace),
                     gib(r[i].graphs), gib(r[i].nccl), gib(r[i].runtime), gib(plan_fixed(&r[i])),
                     gib(r[i].budget), PLAN_MORE_GPUS);
            return -1;
        }
    }
    long long blocks = -1;
    for (int i = 0; i < n; i++) {
        if (!r[i].kv_bytes_per_block) continue; /* a rank without heads stores no KV */
        long long b = (long long)((r[i].budget - plan_fixed(&r[i])) / r[i].kv_bytes_per_block);
        if (blocks < 0 || b < blocks) blocks = b, *tight = i;
    }
    if (blocks < 0) blocks = 0;
    for (int i = 0; i < n; i++) r[i].kv = (size_t)blocks * r[i].kv_bytes_per_block;
    long long need = (o->max_model_len + o->block_size - 1) / o->block_size;
    if (blocks < need) {
        const rlPlanRank *t = &r[*tight];
        plan_rank_name(o, t, name, sizeof(name));
        snprintf(why, why_len,
                 "the KV cache holds %lld tokens, less than one --max-model-len %d sequence: "
                 "on %s %.2f GiB is left after weights %.2f and activations %.2f GiB, and one "
                 "sequence needs %.2f GiB there; lower --max-model-len or "
                 "--max-num-batched-tokens, or %s",
                 blocks * o->block_size, o->max_model_len, name, gib(t->budget - plan_fixed(t)),
                 gib(t->weights), gib(t->activations),
                 gib((size_t)need * t->kv_bytes_per_block), PLAN_MORE_GPUS);
        return -1;
    }
    return blocks;
}

/* Plans `instances` instances of tp x pp over the options' GPUs in order. */
static int plan_fill(const rlModelConfig *cfg, const rlPlanOptions *o, int instances, int tp,
                     int pp, rlPlanLayout *l, rlError *err) {
    memset(l, 0, sizeof(*l));
    l->instances = instances, l->tp = tp, l->pp = pp, l->tight = 0;
    int n = tp * pp;
    rlShard shards[n];
    if (rl_shard_plan(cfg, tp, pp, NULL, shards, err)) return -1;
    l->ranks = calloc((size_t)(instances * n), sizeof(rlPlanRank));
    l->kv_blocks = calloc((size_t)instances, sizeof(long long));
    if (!l->ranks || !l->kv_blocks) {
        plan_layout_free(l);
        return rl_error(err, RL_EINTERNAL, "out of host memory planning TP %d x PP %d", tp, pp);
    }
    rlShardBalance bal;
    rl_shard_balance(cfg, shards, tp, pp, o->dtype, o->dtype, &bal);
    l->imbalance = bal.weights;
    l->collectives = (tp > 1 ? 2 * cfg->num_layers + 1 : 0) + (pp - 1);
    l->fits = 1;
    l->kv_tokens = -1;
    long long need = (o->max_model_len + o->block_size - 1) / o->block_size;
    for (int k = 0; k < instances; k++) {
        rlPlanRank *r = &l->ranks[k * n];
        for (int i = 0; i < n; i++) {
            r[i].shard = shards[i];
            r[i].gpu = k * n + i;
            plan_rank_costs(cfg, o, &r[i]);
        }
        int tight = 0;
        char why[700];
        long long blocks = plan_instance(o, r, n, &tight, why, sizeof(why));
        if (blocks < 0) {
            if (l->fits) {
                l->fits = 0;
                l->tight = k * n + tight;
                if (k > 0) snprintf(l->why, sizeof(l->why), "instance %d: %s", k, why);
                else snprintf(l->why, sizeof(l->why), "%s", why);
            }
            blocks = 0;
        }
        l->kv_blocks[k] = blocks;
        long long tokens = blocks * o->block_size;
        if (l->kv_tokens < 0 || tokens < l->kv_tokens) {
            l->kv_tokens = tokens;
            if (l->fits) l->tight = k * n + tight;
        }
    }
    l->max_seqs = l->fits ? (int)(l->kv_tokens / o->block_size / need) : 0;
    plan_cost(cfg, o, l);
    return 0;
}

int plan_check_gpu_count(int instances, int tp, int pp, int n_gpus, int hypothetical,
                         rlError *err) {
    int need = instances * tp * pp;
    if (need <= n_gpus) return 0;
    /* Hypothetical GPUs are counted by --gpus: --devices names real ones. */
    char more[64];
    snprintf(more, sizeof more, hypothetical ? "give --gpus %d" : "list as many devices (--devices)",
             need);
    return rl_error(err, RL_EDEVICE,
                    "%d instance%s of TP %d x PP %d need%s %d GPUs but %d %s given: %s, or lower "
                    "%s--tp / --pp",
                    instances, instances > 1 ? "s" : "", tp, pp, instances > 1 ? "" : "s", need,
                    n_gpus, n_gpus == 1 ? "is" : "are", more, instances > 1 ? "--instances / " : "");
}

int plan_layout(const rlModelConfig *cfg, const rlPlanOptions *o, int instances, int tp, int pp,
                rlPlan *p, rlError *err) {
    memset(p, 0, sizeof(*p));
    p->cfg = *cfg;
    p->opt = *o;
    p->throughput = p->latency = -1;
    if (plan_check_options(cfg, &p->opt, err)) return -1;
    if (instances < 1 || tp < 1 || pp < 1)
        return rl_error(err, RL_EUSAGE,
                        "%d instances of TP %d x PP %d: every count must be at least 1",
                        instances, tp, pp);
    if (plan_check_gpu_count(instances, tp, pp, p->opt.n_gpus, p->opt.gpu_ordinal[0] < 0, err))
        return -1;
    if (!(p->layouts = calloc(1, sizeof(rlPlanLayout))))
        return rl_error(err, RL_EINTERNAL, "out of host memory for a layout");
    if (plan_fill(cfg, &p->opt, instances, tp, pp, &p->layouts[0], err)) {
        plan_free(p);
        return -1;
    }
    p->n_layouts = 1;
    if (!p->layouts[0].fits)
        return rl_error(err, RL_EMEMORY, "TP %d x PP %d does not fit: %s", tp, pp,
                        p->layouts[0].why);
    return 0;
}

/* The fitting layout the cost model predicts the most decode tokens/s for,
 * over layouts whose costs are in cost[] (-1 when none fits). */
static int plan_fastest(const rlPlan *p, const rlPlanCost *cost) {
    int pick = -1;
    for (int i = 0; i < p->n_layouts; i++) {
        const rlPlanLayout *l = &p->layouts[i];
        if (!l->fits) continue;
        if (pick < 0 || cost[i].tok_s > cost[pick].tok_s ||
            (cost[i].tok_s == cost[pick].tok_s && l->instances > p->layouts[pick].instances))
            pick = i;
    }
    return pick;
}

/* The layout to set the pick beside: one instance over every GPU with the
 * largest TP (what a user reaches for first), else the runner-up. */
static int plan_rival(const rlPlan *p, int pick) {
    int rival = -1;
    for (int i = 0; i < p->n_layouts; i++) {
        const rlPlanLayout *l = &p->layouts[i];
        if (i == pick || !l->fits) continue;
        if (l->instances == 1 && l->pp == 1 && l->tp == p->opt.n_gpus) return i;
        if (rival < 0 || l->cost.tok_s > p->layouts[rival].cost.tok_s) rival = i;
    }
    return rival;
}

/* Throughput: the most decode tokens/s the cost model predicts (plan_cost.c:
 * weights and KV read per step, collectives over the links, as many
 * sequences as the KV cache holds at ~640 tokens, up to --max-num-seqs per
 * instance), said beside the all-TP layout, and what other links change. */
static void plan_pick_throughput(rlPlan *p) {
    rlPlanCost cost[p->n_layouts ? p->n_layouts : 1];
    for (int i = 0; i < p->n_layouts; i++) cost[i] = p->layouts[i].cost;
    int pick = plan_fastest(p, cost);
    p->throughput = pick;
    if (pick < 0) return;
    const rlPlanLayout *l = &p->layouts[pick];
    char name[48];
    plan_layout_name(l, name, sizeof(name));
    int n = snprintf(p->throughput_why, sizeof(p->throughput_why),
                     "the most decode throughput predicted: %.0f tok/s with %d sequences per "
                     "instance (%lld KV tokens each), links %s",
                     l->cost.tok_s, l->cost.seqs, l->kv_tokens, p->opt.links_from);
    int rival = plan_rival(p, pick);
    if (rival >= 0 && n > 0 && (size_t)n < sizeof(p->throughput_why)) {
        char cmp[400];
        plan_cost_compare(l, &p->layouts[rival], cmp, sizeof(cmp));
        snprintf(p->throughput_why + n, sizeof(p->throughput_why) - (size_t)n, "; %s", cmp);
    }

    /* The same layouts over the other kind of link (memory is the same). */
    int nvlink = 1;
    for (int i = 0; i < p->opt.n_gpus; i++)
        for (int j = 0; j < p->opt.n_gpus; j++) nvlink &= p->opt.link[i][j] == RL_PLAN_LINK_NVLINK;
    rlPlanOptions alt = p->opt;
    plan_set_links(&alt, nvlink ? RL_PLAN_LINK_PCIE : RL_PLAN_LINK_NVLINK, "");
    rlPlanLayout *alts = calloc((size_t)p->n_layouts, sizeof(rlPlanLayout));
    if (!alts) return;
    for (int i = 0; i < p->n_layouts; i++) {
        alts[i] = p->layouts[i];
        plan_cost(&p->cfg, &alt, &alts[i]);
        cost[i] = alts[i].cost;
    }
    int best = plan_fastest(p, cost);
    const char *other = nvlink ? "PCIe" : "NVLink";
    char bn[48];
    plan_layout_name(&alts[best], bn, sizeof(bn));
    if (best == pick) {
        snprintf(p->links_why, sizeof(p->links_why),
                 "Over %s between every GPU %s would still rank first (%.0f tok/s predicted).",
                 other, name, alts[best].cost.tok_s);
    } else {
        char cmp[400];
        plan_cost_compare(&alts[best], &alts[pick], cmp, sizeof(cmp));
        snprintf(p->links_why, sizeof(p->links_why),
                 "Over %s between every GPU the order changes: %s first: %s.", other, bn, cmp);
    }
    free(alts);
}

/* Latency: one instance with the largest TP whose weights balance, since a
 * decode step reads every weight once and TP splits that read over GPUs;
 * pipeline stages add no speed to one sequence, so PP only when TP alone
 * cannot fit. */
static void plan_pick_latency(rlPlan *p) {
    int pick = -1, uneven = -1;
    for (int i = 0; i < p->n_layouts; i++) {
        const rlPlanLayout *l = &p->layouts[i];
        if (!l->fits) continue;
        const rlPlanLayout *b = pick >= 0 ? &p->layouts[pick] : NULL;
        if (l->imbalance > PLAN_BALANCED && l->tp > 1) {
            if (uneven < 0 || l->tp > p->layouts[uneven].tp) uneven = i;
            continue;
        }
        if (!b || l->pp < b->pp || (l->pp == b->pp && l->tp > b->tp)) pick = i;
    }
    p->latency = pick;
    if (pick < 0) return;
    const rlPlanLayout *l = &p->layouts[pick];
    const rlPlanRank *r = &l->ranks[l->tight];
    rlShard all;
    rl_shard_whole(&p->cfg, &all);
    size_t whole = rl_model_read_bytes(&p->cfg, &all, p->opt.dtype, 1);
    size_t mine = rl_model_read_bytes(&p->cfg, &r->shard, p->opt.dtype, 1);
    char more[200] = "";
    if (uneven >= 0 && p->layouts[uneven].tp > l->tp && p->layouts[uneven].pp == 1)
        snprintf(more, sizeof(more), "; TP %d would be less even (imbalance %.2f)",
                 p->layouts[uneven].tp, p->layouts[uneven].imbalance);
    else if (l->tp * l->pp < p->opt.n_gpus && l->pp == 1)
        snprintf(more, sizeof(more), "; no larger TP balances and fits");
    if (l->tp == 1 && l->pp == 1)
        snprintf(p->latency_why, sizeof(p->latency_why),
                 "the whole model on one GPU (%.2f GiB of weights read per token) with no "
                 "collective to wait for%s", gib(whole), more);
    else
        snprintf(p->latency_why, sizeof(p->latency_why),
                 "each GPU reads %.2f GiB of weights per token instead of %.2f GiB, imbalance "
                 "%.2f, at the price of %d collectives per step%s%s",
                 gib(mine), gib(whole), l->imbalance, l->collectives,
                 l->pp > 1 ? "; pipeline stages because no TP alone fits" : "", more);
}

int plan_compute(const rlModelConfig *cfg, const rlPlanOptions *o, rlPlan *p, rlError *err) {
    memset(p, 0, sizeof(*p));
    p->cfg = *cfg;
    p->opt = *o;
    p->throughput = p->latency = -1;
    if (plan_check_options(cfg, &p->opt, err)) return -1;
    int n = p->opt.n_gpus, cap = 0;
    for (int tp = 1; tp <= n; tp++)
        for (int pp = 1; tp * pp <= n && pp <= cfg->num_layers; pp++) cap++;
    if (!(p->layouts = calloc((size_t)cap, sizeof(rlPlanLayout))))
        return rl_error(err, RL_EINTERNAL, "out of host memory for %d layouts", cap);
    for (int tp = 1; tp <= n; tp++)
        for (int pp = 1; tp * pp <= n && pp <= cfg->num_layers; pp++) {
            if (plan_fill(cfg, &p->opt, n / (tp * pp), tp, pp, &p->layouts[p->n_layouts], err)) {
                plan_free(p);
                return -1;
            }
            p->n_layouts++;
        }
    plan_pick_throughput(p);
    plan_pick_latency(p);
    return 0;
}

void plan_layout_free(rlPlanLayout *l) {
    free(l->ranks);
    free(l->kv_blocks);
    l->ranks = NULL;
    l->kv_blocks = NULL;
}

void plan_free(rlPlan *p) {
    for (int i = 0; i < p->n_layouts; i++) plan_layout_free(&p->layouts[i]);
    free(p->layouts);
    p->layouts = NULL;
    p->n_layouts = 0;
}
