/* plan_cost.c: how fast a layout decodes, from what its GPUs read and what
 * its links carry, so `redlm plan` ranks layouts by the hardware they run
 * on: over PCIe a TP group's two all-reduces per layer cost more than the
 * split saves, over NVLink they are cheap (kernels/COSTMODEL.md has the
 * derivation and the tables for six GPUs).
 *
 * One decode step of a stage with b running sequences costs
 *   weights read once (of a mixture of experts, the experts b tokens touch)
 *   + b sequences' KV (at HBM_EFFICIENCY of the memory's
 *   bandwidth) + its collectives + the hand-off to the next stage,
 * and with p stages the engine keeps p steps of S/p sequences in flight, so
 * an instance gives S/p tokens per slowest-stage step.  Not modelled:
 * launch gaps, sampling, the scheduler, prefill. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "kernels/gpuinfo.h"
#include "kernels/model.h"
#include "worker/plan/plan.h"

/* The measured share of copy bandwidth a decode step's GEMVs reach
 * (kernels/PERF.md: 91-92 % of the floor at batch 1 on the H200). */
static const double HBM_EFFICIENCY = 0.8;
/* Tokens of context per running sequence: bench's 512 in + 256 out. */
static const int PLAN_CONTEXT = 640;
/* Per collective, whatever the link: comm_nccl.c syncs the backend's stream
 * before and its own after every call (~15 us, measured on one H200 through
 * NCCL with one rank) and NCCL's launch (~5 us). */
static const double COLL_FIXED_S = 20e-6;

/* Per link: the bus bandwidth a ring all-reduce reaches per GPU, and the
 * latency each of its 2 (n-1) steps adds. */
static const struct {
    const char *name;
    double bus_bytes_s, hop_s;
    const char *source;
} link_cost[] = {
    [RL_PLAN_LINK_NVLINK] = {"nvlink", 360e9, 0.6e-6,
                             "NVLink 4: 450 GB/s per direction per GPU, ~80 % in NCCL rings "
                             "without NVLS; hop: NCCL's tuning model (graph/tuning.cc, ring LL)"},
    [RL_PLAN_LINK_PCIE] = {"pcie", 24e9, 1.0e-6,
                           "PCIe 4.0 x16: NCCL's topology model gives 12 GB/s per Gen3 x16 link "
                           "(graph/topo.h PCI_BW), doubled for Gen4; hop: NCCL's tuning model"},
    [RL_PLAN_LINK_HOST] = {"host", 10e9, 5.0e-6,
                           "across sockets or without peer-to-peer: NCCL's model of the socket "
                           "interconnect (topo.h SKL_QPI_BW, 10 GB/s); hop: a copy through host "
                           "memory, estimated"},
};

/* Hypothetical GPUs: the memory bandwidth of their class, by size
 * (device.md's vendor figures): under 40 GiB the RTX 3090 / 4090 class
 * (936 / 1,008 GB/s), above the H100 SXM (3,350 GB/s). */
static double plan_gpu_bandwidth(const rlPlanOptions *o, int gpu) {
    if (o->gpu_bandwidth[gpu] > 0) return o->gpu_bandwidth[gpu];
    return o->gpu_total[gpu] < ((size_t)40 << 30) ? 1.0e12 : 3.35e12;
}

const char *plan_link_name(rlPlanLink link) { return link_cost[link].name; }

const char *plan_link_source(rlPlanLink link) { return link_cost[link].source; }

double plan_link_bandwidth(rlPlanLink link) { return link_cost[link].bus_bytes_s; }

void plan_default_links(rlPlanOptions *o) {
    if (o->links_from) return;
    int small = o->n_gpus > 0 && o->gpu_total[0] < ((size_t)40 << 30);
    plan_set_links(o, small ? RL_PLAN_LINK_PCIE : RL_PLAN_LINK_NVLINK,
                   small ? "assumed: cards under 40 GiB on PCIe (--interconnect to change)"
                         : "assumed: NVLink (--interconnect to change)");
}

void plan_set_links(rlPlanOptions *o, rlPlanLink link, const char *from) {
    for (int i = 0; i < RL_PLAN_MAX_GPUS; i++)
        for (int j = 0; j < RL_PLAN_MAX_GPUS; j++) o->link[i][j] = (unsigned char)link;
    o->links_from = from;
}

void plan_set_topology(rlPlanOptions *o, const struct rlGpuTopology *t, const char *from) {
    for (int i = 0; i < t->n && i < RL_PLAN_MAX_GPUS; i++)
        for (int j = 0; j < t->n && j < RL_PLAN_MAX_GPUS; j++) {
            rlGpuLink l = t->link[i][j];
            o->link[i][j] = l.kind == RL_LINK_SELF || l.kind == RL_LINK_NVLINK ? RL_PLAN_LINK_NVLINK
                          : l.p2p == 0 || l.kind == RL_LINK_SYS ? RL_PLAN_LINK_HOST
                          : l.kind == RL_LINK_UNKNOWN ? o->link[i][j]
                                                      : RL_PLAN_LINK_PCIE;
        }
    o->links_from = from;
}

/* A collective of `hops` ring steps moving `bytes` through each GPU. */
static double coll_s(rlPlanLink link, int hops, double bytes) {
    return COLL_FIXED_S + hops * link_cost[link].hop_s + bytes / link_cost[link].bus_bytes_s;
}

typedef struct {
    double read_s, comm_s;   /* at b sequences */
} stageCost;

/* Stage s of instance k at b running sequences. */
static stageCost plan_stage(const rlModelConfig *cfg, const rlPlanOptions *o, const rlPlanLayout *l,
                            int k, int s, double b, rlPlanLink *slowest) {
    int tp = l->tp, n = l->tp * l->pp, base = k * n + s * tp;
    size_t weights = 0, kv_token = 0;
    double bw = 0;
    rlPlanLink link = RL_PLAN_LINK_NVLINK;
    for (int t = 0; t < tp; t++) {
        const rlPlanRank *r = &l->ranks[base + t];
        size_t read = rl_model_read_bytes(cfg, &r->shard, o->dtype, b);
        if (read > weights) weights = read;
        size_t kv = r->kv_bytes_per_block / (size_t)o->block_size;
        if (kv > kv_token) kv_token = kv;
        double g = plan_gpu_bandwidth(o, r->gpu);
        if (bw == 0 || g < bw) bw = g;
        for (int u = t + 1; u < tp; u++) {
            rlPlanLink x = (rlPlanLink)o->link[r->gpu][l->ranks[base + u].gpu];
            if (x > link) link = x;
        }
    }
    if (link > *slowest) *slowest = link;
    int ctx = o->max_model_len < PLAN_CONTEXT ? o->max_model_len : PLAN_CONTEXT;
    stageCost c;
    c.read_s = ((double)weights + b * ctx * (double)kv_token) / (HBM_EFFICIENCY * bw);
    c.comm_s = 0;
    double act = b * cfg->hidden_size * (o->dtype == RL_F32 ? 4.0 : 2.0);
    const rlShard *sh = &l->ranks[base].shard;
    if (tp > 1) {
        /* An all-reduce after o_proj and after down_proj in every layer, one
         * after the embedding; the last stage gathers the fp32 logits. */
        int n_ar = 2 * sh->n_layers + (s == 0);
        c.comm_s += n_ar * coll_s(link, 2 * (tp - 1), 2.0 * (tp - 1) / tp * act);
        if (s == l->pp - 1)
            c.comm_s += coll_s(link, tp - 1, (double)(tp - 1) / tp * b * cfg->vocab_size * 4.0);
    }
    if (s < l->pp - 1) {
        rlPlanLink hop = (rlPlanLink)o->link[l->ranks[base].gpu][l->ranks[base + tp].gpu];
        c.comm_s += coll_s(hop, 1, act);
    }
    return c;
}

void plan_cost(const rlModelConfig *cfg, const rlPlanOptions *o, rlPlanLayout *l) {
    rlPlanCost *c = &l->cost;
    memset(c, 0, sizeof(*c));
    if (!l->fits) return;
    int ctx = o->max_model_len < PLAN_CONTEXT ? o->max_model_len : PLAN_CONTEXT;
    long long fit = l->kv_tokens / ctx;
    c->seqs = (int)(fit < o->max_num_seqs ? fit : o->max_num_seqs);
    if (c->seqs < 1) c->seqs = 1;
    rlPlanLink slowest = RL_PLAN_LINK_NVLINK;
    for (int k = 0; k < l->instances; k++) {
        /* g groups in flight, b sequences each: the pipeline full when g = pp. */
        int g = c->seqs < l->pp ? c->seqs : l->pp;
        double b = (double)c->seqs / g, worst = 0, worst_comm = 0, round = 0, alone = 0;
        for (int s = 0; s < l->pp; s++) {
            stageCost sc = plan_stage(cfg, o, l, k, s, b, &slowest);
            double t = sc.read_s + sc.comm_s;
            if (t > worst) worst = t, worst_comm = sc.comm_s;
            round += t;
            stageCost one = plan_stage(cfg, o, l, k, s, 1, &slowest);
            alone += one.read_s + one.comm_s;
        }
        c->tok_s += g == l->pp ? b / worst : c->seqs / round;
        if (k == 0) {
            c->step_ms = 1e3 * worst;
            c->comm_ms = 1e3 * worst_comm;
            c->token_ms = 1e3 * alone;
        }
    }
    c->link = slowest;
}

/* "TP6 over pcie (24 GB/s, ...)" or "no TP" for a layout's collectives. */
static void plan_cost_links(const rlPlanLayout *l, char *out, size_t n) {
    rlPlanLink k = l->cost.link;
    if (l->tp == 1)
        snprintf(out, n, "%s", l->pp > 1 ? "pipeline hand-offs only" : "no collectives");
    else
        snprintf(out, n, "TP%d over %s, %.0f GB/s%s", l->tp, plan_link_name(k),
                 link_cost[k].bus_bytes_s / 1e9,
                 k == RL_PLAN_LINK_NVLINK ? "" : ", not yet measured on PCIe hardware");
}

void plan_cost_compare(const rlPlanLayout *a, const rlPlanLayout *b, char *out, size_t n) {
    char an[48], bn[48], al[128], bl[128];
    plan_layout_name(a, an, sizeof(an));
    plan_layout_name(b, bn, sizeof(bn));
    plan_cost_links(a, al, sizeof(al));
    plan_cost_links(b, bl, sizeof(bl));
    snprintf(out, n,
             "%s (%.0f tok/s) ranks above %s (%.0f tok/s): a step of %s takes %.1f ms of which "
             "%.1f in collectives (%s) for %d sequences, of %s %.1f ms with %.1f (%s) for %d%s",
             an, a->cost.tok_s, bn, b->cost.tok_s, bn, b->cost.step_ms, b->cost.comm_ms, bl,
             b->cost.seqs / b->pp, an, a->cost.step_ms, a->cost.comm_ms, al, a->cost.seqs / a->pp,
             a->pp > 1 ? ", one per stage at a time, the stages overlapping" : "");
}
