/* plan_report.c: a memory plan (plan.c) as a table for people or JSON for
 * scripts.  The table shows, per layout, the rank with the least room for
 * KV (the one that sets the layout's capacity); the JSON lists every rank. */
#include <jansson.h>
#include <string.h>

#include "kernels/model.h"
#include "worker/plan/plan.h"

static double gib(size_t b) { return (double)b / (double)((size_t)1 << 30); }

void plan_layout_name(const rlPlanLayout *l, char *buf, size_t n) {
    if (l->pp > 1) snprintf(buf, n, "%d x TP%d PP%d", l->instances, l->tp, l->pp);
    else snprintf(buf, n, "%d x TP%d", l->instances, l->tp);
}

static size_t plan_whole_weights(const rlPlan *p) {
    rlShard all;
    rl_shard_whole(&p->cfg, &all);
    return rl_model_weight_bytes(&p->cfg, &all, p->opt.dtype);
}

/* "bf16", or "awq int4 g128, the rest bf16": how the weights are counted. */
static const char *plan_weight_format(const rlPlan *p, char *buf, size_t n) {
    char q[64];
    if (!p->cfg.quant.method) return rl_dtype_name(p->opt.dtype);
    snprintf(buf, n, "%s, the rest %s", rl_quant_name(&p->cfg.quant, q, sizeof(q)),
             rl_dtype_name(p->opt.dtype));
    return buf;
}

static size_t plan_whole_kv(const rlPlan *p) {
    rlShard all = {.tp_size = 1, .pp_size = 1, .n_kv_heads = p->cfg.num_kv_heads,
                   .n_layers = p->cfg.num_layers};
    return rl_model_kv_bytes_per_token(&p->cfg, &all, p->opt.dtype);
}

static void plan_print_gpus(FILE *f, const rlPlan *p) {
    const rlPlanOptions *o = &p->opt;
    int same = 1;
    for (int i = 1; i < o->n_gpus; i++)
        if (o->gpu_total[i] != o->gpu_total[0] || o->gpu_used[i] != o->gpu_used[0]) same = 0;
    if (same && !o->gpu_used[0]) {
        fprintf(f, "GPUs:   %d x %.2f GiB, --gpu-memory-utilization %.2f: %.2f GiB budget each\n",
                o->n_gpus, gib(o->gpu_total[0]), o->gpu_memory_utilization,
                gib((size_t)(o->gpu_memory_utilization * (double)o->gpu_total[0])));
        return;
    }
    fprintf(f, "GPUs:   --gpu-memory-utilization %.2f of each GPU's total, which must be free\n",
            o->gpu_memory_utilization);
    for (int i = 0; i < o->n_gpus; i++)
        fprintf(f, "        GPU %d: %.2f GiB, %.2f GiB free, %.2f GiB held by other processes, "
                   "budget %.2f GiB\n",
                o->gpu_ordinal[i] >= 0 ? o->gpu_ordinal[i] : i, gib(o->gpu_total[i]),
                gib(o->gpu_free[i]), gib(o->gpu_used[i]),
                gib((size_t)(o->gpu_memory_utilization * (double)o->gpu_total[i])));
}

void plan_print_layout(FILE *f, const rlPlan *p, const rlPlanLayout *l) {
    const rlPlanRank *r = &l->ranks[l->tight];
    char name[48], rank[32], seqs[24], tokens[24];
    plan_layout_name(l, name, sizeof(name));
    snprintf(rank, sizeof(rank), "tp%d.pp%d", r->shard.tp_rank, r->shard.pp_rank);
    if (l->fits) {
        snprintf(tokens, sizeof(tokens), "%lld", l->kv_tokens);
        snprintf(seqs, sizeof(seqs), "%d", l->max_seqs);
    } else {
        snprintf(tokens, sizeof(tokens), "-");
        snprintf(seqs, sizeof(seqs), "no fit");
    }
    fprintf(f, "%-14s %2d/%-3d %-8s %7.2f %6.2f %6.2f %6.2f %5.2f %7.2f %7.2f %11s %8s %6.2f\n",
            name, l->instances * l->tp * l->pp, p->opt.n_gpus, rank, gib(r->weights),
            gib(r->activations), gib(r->workspace), gib(r->graphs), gib(r->nccl),
            gib(r->runtime), gib(r->kv), tokens, seqs, l->imbalance);
}

/* The layouts that fit, fastest first by the cost model. */
static void plan_print_costs(FILE *f, const rlPlan *p) {
    int order[p->n_layouts ? p->n_layouts : 1], n = 0;
    for (int i = 0; i < p->n_layouts; i++) {
        if (!p->layouts[i].fits) continue;
        int j = n++;
        while (j > 0 && p->layouts[order[j - 1]].cost.tok_s < p->layouts[i].cost.tok_s) {
            order[j] = order[j - 1];
            j--;
        }
        order[j] = i;
    }
    if (!n) return;
    fprintf(f, "\nPredicted decode speed (cost model, kernels/COSTMODEL.md), links %s:\n",
            p->opt.links_from);
    int used[3] = {0, 0, 0};
    for (int i = 0; i < p->opt.n_gpus; i++)
        for (int j = 0; j < p->opt.n_gpus; j++) used[p->opt.link[i][j]] = 1;
    for (int k = 0; k < 3; k++)
        if (used[k])
            fprintf(f, "  %s: %.0f GB/s per GPU in an all-reduce (%s)%s\n",
                    plan_link_name((rlPlanLink)k), plan_link_bandwidth((rlPlanLink)k) / 1e9,
                    plan_link_source((rlPlanLink)k),
                    k == RL_PLAN_LINK_NVLINK ? "" : "; not yet measured on PCIe hardware");
    fprintf(f, "%-14s %6s %10s %9s %14s %12s  %s\n", "layout", "seqs", "tok/s", "step ms",
            "collectives ms", "ms/token", "TP link");
    for (int k = 0; k < n; k++) {
        const rlPlanLayout *l = &p->layouts[order[k]];
        char name[48];
        plan_layout_name(l, name, sizeof(name));
        fprintf(f, "%-14s %6d %10.0f %9.2f %14.2f %12.2f  %s\n", name, l->cost.seqs,
                l->cost.tok_s, l->cost.step_ms, l->cost.comm_ms, l->cost.token_ms,
                l->tp > 1 ? plan_link_name(l->cost.link) : "-");
    }
    fprintf(f, "(seqs: running per instance, ~640 tokens each, as many as the KV cache holds up "
               "to --max-num-seqs; step: the slowest stage; ms/token: one sequence alone)\n");
}

void plan_print(FILE *f, const rlPlan *p) {
    const rlModelConfig *c = &p->cfg;
    const rlPlanOptions *o = &p->opt;
    char family[160];
    rl_config_describe(c, family, sizeof(family));
    fprintf(f, "model:  %s\n        %d layers, hidden %d, %d heads / %d KV heads of %d, MLP %d, "
               "vocab %d%s\n", family, c->num_layers, c->hidden_size, c->num_heads, c->num_kv_heads, c->head_dim,
            c->intermediate_size, c->vocab_size, c->tie_word_embeddings ? ", tied embeddings" : "");
    char fmt[96];
    fprintf(f, "        %s: %.2f GiB of weights, %.1f KiB of KV cache per token (%s)\n",
            plan_weight_format(p, fmt, sizeof(fmt)), gib(plan_whole_weights(p)),
            plan_whole_kv(p) / 1024.0, rl_dtype_name(o->dtype));
    if (c->num_experts) {
        /* Memory holds every expert; a step reads the ones its tokens chose. */
        rlShard all;
        rl_shard_whole(c, &all);
        size_t whole = plan_whole_weights(p);
        fprintf(f, "        experts: %.2f GiB of those, cut by columns over TP ranks (every "
                   "rank holds a slice of all %d); a decode step reads %.2f GiB at batch 1, "
                   "%.2f GiB at 64\n",
                gib(whole - rl_model_read_bytes(c, &all, o->dtype, 0)), c->num_experts,
                gib(rl_model_read_bytes(c, &all, o->dtype, 1)),
                gib(rl_model_read_bytes(c, &all, o->dtype, 64)));
    }
    plan_print_gpus(f, p);
    fprintf(f, "engine: --max-model-len %d, --max-num-seqs %d, --max-num-batched-tokens %d, "
               "--block-size %d\n",
            o->max_model_len, o->max_num_seqs, o->max_num_batched_tokens, o->block_size);
    if (o->seqs_from) fprintf(f, "        --max-num-seqs %d: %s\n", o->max_num_seqs, o->seqs_from);
    if (o->batched_tokens_from)
        fprintf(f, "        --max-num-batched-tokens %d: %s\n", o->max_num_batched_tokens,
                o->batched_tokens_from);
    fputc('\n', f);
    fprintf(f, "Per GPU in GiB, for the rank of each layout with the least room for KV:\n");
    fprintf(f, "%-14s %-6s %-8s %7s %6s %6s %6s %5s %7s %7s %11s %8s %6s\n", "layout", "GPUs",
            "rank", "weights", "activ", "work", "graphs", "NCCL", "runtime", "KV",
            "KV tokens", "seqs", "imbal");
    char tok_hdr[64];
    snprintf(tok_hdr, sizeof(tok_hdr), "(per instance; seqs: of %d tokens at once)",
             o->max_model_len);
    for (int i = 0; i < p->n_layouts; i++) plan_print_layout(f, p, &p->layouts[i]);
    fprintf(f, "%s\n", tok_hdr);

    int misfits = 0;
    for (int i = 0; i < p->n_layouts; i++) misfits += !p->layouts[i].fits;
    if (misfits) {
        fprintf(f, "\nDoes not fit:\n");
        for (int i = 0; i < p->n_layouts; i++) {
            if (p->layouts[i].fits) continue;
            char name[48];
            plan_layout_name(&p->layouts[i], name, sizeof(name));
            fprintf(f, "  %-14s %s\n", name, p->layouts[i].why);
        }
    }
    if (misfits == p->n_layouts) {
        size_t all = 0;
        for (int i = 0; i < p->opt.n_gpus; i++)
            all += (size_t)(p->opt.gpu_memory_utilization * (double)p->opt.gpu_total[i]);
        char whose[48] = "the GPU's", fmt[96];
        if (p->opt.n_gpus > 1) snprintf(whose, sizeof(whose), "the %d GPUs'", p->opt.n_gpus);
        if (plan_whole_weights(p) > all)
            fprintf(f, "\nNothing fits: the weights alone (%.2f GiB in %s) are more than %s "
                       "%.2f GiB budget%s; use more GPUs or GPUs with more memory.\n",
                    gib(plan_whole_weights(p)), plan_weight_format(p, fmt, sizeof(fmt)), whose,
                    gib(all),
                    p->opt.n_gpus > 1 ? " together" : "");
        else
            fprintf(f, "\nNothing fits on these GPUs: see the reasons above.\n");
        return;
    }
    plan_print_costs(f, p);
    if (p->throughput < 0) return; /* one layout asked for: no choice to recommend */
    fprintf(f, "\n");
    char name[48];
    plan_layout_name(&p->layouts[p->throughput], name, sizeof(name));
    fprintf(f, "For throughput: %s: %s.\n", name, p->throughput_why);
    if (p->latency >= 0) {
        plan_layout_name(&p->layouts[p->latency], name, sizeof(name));
        fprintf(f, "For latency:    %s: %s.\n", name, p->latency_why);
    }
    if (p->links_why[0]) fprintf(f, "%s\n", p->links_why);
}

static json_t *plan_json_rank(const rlPlanRank *r, int instance, const rlPlanOptions *o) {
    return json_pack("{s:i, s:i, s:i, s:i, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, "
                     "s:i, s:i, s:i, s:i, s:i}",
                     "instance", instance, "tp_rank", r->shard.tp_rank, "pp_rank",
                     r->shard.pp_rank, "gpu",
                     o->gpu_ordinal[r->gpu] >= 0 ? o->gpu_ordinal[r->gpu] : r->gpu, "budget",
                     (json_int_t)r->budget, "weights", (json_int_t)r->weights, "activations",
                     (json_int_t)r->activations, "workspace", (json_int_t)r->workspace, "graphs",
                     (json_int_t)r->graphs, "nccl", (json_int_t)r->nccl, "runtime",
                     (json_int_t)r->runtime, "kv", (json_int_t)r->kv, "kv_bytes_per_block",
                     (json_int_t)r->kv_bytes_per_block, "q_heads", r->shard.n_q_heads,
                     "kv_heads", r->shard.n_kv_heads, "mlp_columns", r->shard.n_mlp,
                     "vocab_rows", r->shard.n_vocab, "layers", r->shard.n_layers);
}

static json_t *plan_json_layout(const rlPlan *p, const rlPlanLayout *l) {
    char name[48];
    plan_layout_name(l, name, sizeof(name));
    json_t *ranks = json_array(), *blocks = json_array();
    int n = l->tp * l->pp;
    for (int k = 0; k < l->instances; k++) {
        json_array_append_new(blocks, json_integer(l->kv_blocks[k]));
        for (int i = 0; i < n; i++)
            json_array_append_new(ranks, plan_json_rank(&l->ranks[k * n + i], k, &p->opt));
    }
    json_t *j = json_pack("{s:s, s:i, s:i, s:i, s:i, s:b, s:I, s:i, s:i, s:f, s:o, s:o}", "name",
                          name, "instances", l->instances, "tp", l->tp, "pp", l->pp, "gpus",
                          l->instances * n, "fits", l->fits, "kv_tokens_per_instance",
                          (json_int_t)l->kv_tokens, "max_seqs_at_max_model_len", l->max_seqs,
                          "collectives_per_step", l->collectives, "weight_imbalance",
                          l->imbalance, "kv_blocks", blocks, "ranks", ranks);
    if (j && !l->fits) json_object_set_new(j, "why", json_string(l->why));
    if (j && l->fits)
        json_object_set_new(j, "predicted",
                            json_pack("{s:i, s:f, s:f, s:f, s:f, s:s}", "seqs_per_instance",
                                      l->cost.seqs, "decode_tok_s", l->cost.tok_s, "step_ms",
                                      l->cost.step_ms, "collectives_ms", l->cost.comm_ms,
                                      "ms_per_token_alone", l->cost.token_ms, "tp_link",
                                      plan_link_name(l->cost.link)));
    return j;
}

static json_t *plan_json_pick(const rlPlan *p, int i, const char *why) {
    if (i < 0) return json_null();
    const rlPlanLayout *l = &p->layouts[i];
    char name[48];
    plan_layout_name(l, name, sizeof(name));
    return json_pack("{s:s, s:i, s:i, s:i, s:s}", "layout", name, "instances", l->instances,
                     "tp", l->tp, "pp", l->pp, "why", why);
}

int plan_print_json(FILE *f, const rlPlan *p, rlError *err) {
    const rlModelConfig *c = &p->cfg;
    const rlPlanOptions *o = &p->opt;
    json_t *gpus = json_array(), *layouts = json_array();
    char q[64];
    for (int i = 0; i < o->n_gpus; i++)
        json_array_append_new(gpus, json_pack("{s:i, s:I, s:I, s:I}", "gpu",
                                              o->gpu_ordinal[i] >= 0 ? o->gpu_ordinal[i] : i,
                                              "total", (json_int_t)o->gpu_total[i], "used",
                                              (json_int_t)o->gpu_used[i], "free",
                                              (json_int_t)o->gpu_free[i]));
    for (int i = 0; i < p->n_layouts; i++)
        json_array_append_new(layouts, plan_json_layout(p, &p->layouts[i]));
    json_t *root = json_pack(
        "{s:{s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:b, s:s, s:I, s:I}, "
        "s:{s:s, s:i, s:i, s:i, s:i, s:f}, s:o, s:o, s:o, s:o}",
        "model", "layers", c->num_layers, "hidden_size", c->hidden_size, "heads", c->num_heads,
        "kv_heads", c->num_kv_heads, "head_dim", c->head_dim, "intermediate_size",
        c->intermediate_size, "vocab_size", c->vocab_size, "tied_embeddings",
        c->tie_word_embeddings, "quantization", rl_quant_name(&c->quant, q, sizeof(q)),
        "weight_bytes", (json_int_t)plan_whole_weights(p),
        "kv_bytes_per_token", (json_int_t)plan_whole_kv(p), "options", "dtype",
        rl_dtype_name(o->dtype), "max_model_len", o->max_model_len, "max_num_seqs",
        o->max_num_seqs, "max_num_batched_tokens", o->max_num_batched_tokens, "block_size",
        o->block_size, "gpu_memory_utilization", o->gpu_memory_utilization, "gpus", gpus,
        "layouts", layouts, "throughput", plan_json_pick(p, p->throughput, p->throughput_why),
        "latency", plan_json_pick(p, p->latency, p->latency_why));
    if (!root) return rl_error(err, RL_EINTERNAL, "building the plan's JSON failed");
    int rc = json_dumpf(root, f, JSON_INDENT(2)) == 0 ? 0 : -1;
    json_decref(root);
    fputc('\n', f);
    if (rc) return rl_error(err, RL_EIO, "writing the plan's JSON failed");
    return 0;
}
