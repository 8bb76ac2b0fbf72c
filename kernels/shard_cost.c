/* shard_cost.c: what one rank's shard costs in memory, and how even a whole
 * plan is; printed at start so an uneven TP layout says what it pays. */
#include "kernels/model.h"
#include "kernels/shard.h"

#include <math.h>

/* The weight bytes of shard s, its routed experts' counted at expert_share
 * of their whole (1: memory; the share a step touches: bytes read); with
 * linear_only, only the linear layers outside the experts (what a backend
 * with upload_quant holds quantized). */
static double shard_weight_bytes(const rlModelConfig *cfg, const rlShard *s, rlDtype dtype,
                                 double expert_share, int linear_only) {
    const rlQuant *q = &cfg->quant;
    size_t es = rl_dtype_size(dtype), bytes = 0, experts = 0;
    int64_t hidden = cfg->hidden_size;
    /* Linear layers as the format stores them (each tensor its own scales);
     * norms and biases dense.  Layers differ where some are MoE. */
    rlLayerTensor t[RL_MAX_LAYER_TENSORS];
    for (int l = s->layer0; l < s->layer0 + s->n_layers; l++) {
        int n = rl_layer_tensors(cfg, l, t);
        for (int i = 0; i < n; i++) {
            size_t elems = rl_layer_tensor_elems(cfg, s, &t[i]);
            if (t[i].cols == RL_DIM_NONE || !elems) {
                if (!linear_only) bytes += elems * es;
                continue;
            }
            if (linear_only && t[i].per_expert) continue;
            int64_t r0, nr, c0, nc;
            rl_dim_cut(cfg, s, t[i].rows, &r0, &nr);
            rl_dim_cut(cfg, s, t[i].cols, &c0, &nc);
            /* q|k|v and gate|up are one matrix on the device (model_weights.c) */
            int joined = (i > 0 && t[i - 1].slot == t[i].slot) ||
                         (i + 1 < n && t[i + 1].slot == t[i].slot);
            size_t b = rl_quant_linear_bytes(q, nr, nc, rl_dim_size(cfg, t[i].cols), es, joined);
            if (t[i].per_expert) experts += b * (size_t)cfg->num_experts;
            else bytes += b;
        }
    }
    if (linear_only) return (double)bytes;
    size_t table = (size_t)s->n_vocab * (size_t)hidden * es;
    int first = s->pp_rank == 0, last = s->pp_rank == s->pp_size - 1;
    if (first) bytes += table;
    if (last) bytes += (size_t)hidden * es + (cfg->tie_word_embeddings && first ? 0 : table);
    return (double)bytes + expert_share * (double)experts;
}

size_t rl_model_weight_bytes(const rlModelConfig *cfg, const rlShard *s, rlDtype dtype) {
    return (size_t)shard_weight_bytes(cfg, s, dtype, 1.0, 0);
}

size_t rl_model_linear_bytes(const rlModelConfig *cfg, const rlShard *s, rlDtype dtype) {
    return (size_t)shard_weight_bytes(cfg, s, dtype, 1.0, 1);
}

/* Each token picks k distinct experts of E; with routing spread evenly an
 * expert escapes one token with probability 1 - k/E, so n tokens touch
 * E (1 - (1 - k/E)^n) of them on average (Qwen3-30B-A3B: 8 of 128 at batch 1,
 * 126 at 64, all of them at prefill). */
double rl_moe_experts_touched(const rlModelConfig *cfg, double tokens) {
    if (!cfg->num_experts) return 0;
    double E = cfg->num_experts, k = cfg->num_experts_per_tok;
    return E * (1 - pow(1 - k / E, tokens));
}

size_t rl_model_read_bytes(const rlModelConfig *cfg, const rlShard *s, rlDtype dtype,
                           double tokens) {
    double share = cfg->num_experts ? rl_moe_experts_touched(cfg, tokens) / cfg->num_experts : 1;
    return (size_t)shard_weight_bytes(cfg, s, dtype, share, 0);
}

size_t rl_model_kv_bytes_per_token(const rlModelConfig *cfg, const rlShard *s, rlDtype dtype) {
    return 2 * (size_t)s->n_layers * (size_t)s->n_kv_heads * (size_t)cfg->head_dim *
           rl_dtype_size(dtype);
}

/* max / mean of n values (1.0 when all are zero). */
static double shard_ratio(const double *v, int n) {
    double max = 0, sum = 0;
    for (int i = 0; i < n; i++) {
        sum += v[i];
        if (v[i] > max) max = v[i];
    }
    return sum > 0 ? max / (sum / n) : 1.0;
}

void rl_shard_balance(const rlModelConfig *cfg, const rlShard *plan, int tp, int pp,
                      rlDtype weight_dtype, rlDtype kv_dtype, rlShardBalance *out) {
    int n = tp * pp;
    double w[n], kv[n], heads[tp], mlp[tp];
    out->max_weight_bytes = out->max_kv_bytes_per_token = 0;
    for (int i = 0; i < n; i++) {
        size_t wb = rl_model_weight_bytes(cfg, &plan[i], weight_dtype);
        size_t kb = rl_model_kv_bytes_per_token(cfg, &plan[i], kv_dtype);
        w[i] = (double)wb, kv[i] = (double)kb;
        if (wb > out->max_weight_bytes) out->max_weight_bytes = wb;
        if (kb > out->max_kv_bytes_per_token) out->max_kv_bytes_per_token = kb;
    }
    /* Heads and MLP columns are the same on every stage; in a mixture of
     * experts the experts' columns are most of the MLP. */
    for (int r = 0; r < tp; r++)
        heads[r] = plan[r].n_q_heads, mlp[r] = cfg->num_experts ? plan[r].n_moe : plan[r].n_mlp;
    out->weights = shard_ratio(w, n);
    out->kv = shard_ratio(kv, n);
    out->q_heads = shard_ratio(heads, tp);
    out->mlp = shard_ratio(mlp, tp);
}

void rl_shard_print(FILE *f, const rlModelConfig *cfg, const rlShard *plan, int tp, int pp,
                    rlDtype weight_dtype, rlDtype kv_dtype) {
    fprintf(f, "%-8s %-11s %-9s %-19s %-21s %-11s %10s %10s\n", "rank", "q heads", "kv heads",
            "mlp cols", "vocab rows", "layers", "weight MiB", "KV B/token");
    for (int i = 0; i < tp * pp; i++) {
        const rlShard *s = &plan[i];
        char rank[24], q[32], kv[32], mlp[40], voc[40], lay[32];
        snprintf(rank, sizeof(rank), "tp%d.pp%d", s->tp_rank, s->pp_rank);
        snprintf(q, sizeof(q), "%d [%d,%d)", s->n_q_heads, s->q_head0, s->q_head0 + s->n_q_heads);
        snprintf(kv, sizeof(kv), "%d [%d,%d)", s->n_kv_heads, s->kv_head0,
                 s->kv_head0 + s->n_kv_heads);
        if (cfg->num_experts)   /* each expert's columns */
            snprintf(mlp, sizeof(mlp), "%d [%d,%d) x%d", s->n_moe, s->moe0, s->moe0 + s->n_moe,
                     cfg->num_experts);
        else
            snprintf(mlp, sizeof(mlp), "%d [%d,%d)", s->n_mlp, s->mlp0, s->mlp0 + s->n_mlp);
        snprintf(voc, sizeof(voc), "%d [%d,%d)", s->n_vocab, s->vocab0,
                 s->vocab0 + s->n_vocab);
        snprintf(lay, sizeof(lay), "%d [%d,%d)", s->n_layers, s->layer0,
                 s->layer0 + s->n_layers);
        fprintf(f, "%-8s %-11s %-9s %-19s %-21s %-11s %10.1f %10zu\n", rank, q, kv, mlp, voc, lay,
                (double)rl_model_weight_bytes(cfg, s, weight_dtype) / (1 << 20),
                rl_model_kv_bytes_per_token(cfg, s, kv_dtype));
    }
    rlShardBalance b;
    rl_shard_balance(cfg, plan, tp, pp, weight_dtype, kv_dtype, &b);
    fprintf(f, "imbalance (max/mean): weights %.3f, query heads %.3f, MLP %.3f, KV %.3f\n",
            b.weights, b.q_heads, b.mlp, b.kv);
}

size_t rl_model_quant_scratch_bytes(const rlModelConfig *cfg, const rlShard *s, int max_tokens) {
    if (cfg->quant.method == RL_QUANT_NONE) return 0;
    size_t D = (size_t)cfg->hidden_size, q = (size_t)s->n_q_heads * (size_t)cfg->head_dim;
    size_t qkv = q + 2 * (size_t)s->n_kv_heads * (size_t)cfg->head_dim, mlp = (size_t)s->n_mlp;
    size_t nk[4] = {qkv * D, D * q, 2 * mlp * D, D * mlp}, max_nk = 0;   /* q|k|v, o, gate|up, down */
    for (int i = 0; i < 4; i++)
        if (nk[i] > max_nk) max_nk = nk[i];
    size_t max_k = D > q ? D : q;
    if (mlp > max_k) max_k = mlp;
    return rl_quant_scratch_bytes(max_nk, (int)max_k, cfg->quant.method == RL_QUANT_FP8, max_tokens);
}

size_t rl_model_invariant_reduce_bytes(const rlModelConfig *cfg, const rlShard *s,
                                       rlDtype act_dtype, int max_tokens) {
    if (s->tp_size <= 2) return 0;
    return (size_t)s->tp_size * (size_t)max_tokens * (size_t)cfg->hidden_size *
           rl_dtype_size(act_dtype);
}

/* Mirrors the buffers of rl_model_init (model_weights.c): keep the two in step. */
size_t rl_model_activation_bytes(const rlModelConfig *cfg, const rlShard *s, rlDtype act_dtype,
                                 int max_tokens, int max_rows) {
    size_t T = (size_t)max_tokens, R = (size_t)rl_model_head_rows(max_rows);
    size_t D = (size_t)cfg->hidden_size;
    size_t hd = (size_t)cfg->head_dim, nq = (size_t)s->n_q_heads, nkv = (size_t)s->n_kv_heads;
    size_t mlp = (size_t)(s->n_shared > s->n_mlp ? s->n_shared : s->n_mlp);
    size_t act = T * (3 * D                    /* x, resid, delta */
                      + (nq + 2 * nkv) * hd    /* qkv */
                      + nq * hd                /* att */
                      + 3 * mlp);              /* gu, mlp */
    size_t bytes = act * rl_dtype_size(act_dtype);
    if (cfg->num_experts)   /* router logits, the chosen experts' weights and ids */
        bytes += T * ((size_t)cfg->num_experts + 2 * (size_t)cfg->num_experts_per_tok) * 4;
    if (s->pp_rank == s->pp_size - 1) {
        bytes += R * D * rl_dtype_size(act_dtype); /* rows_x */
        if (s->tp_size == 1) {
            bytes += R * (size_t)s->n_vocab * sizeof(float);
        } else {
            /* the padded local slice, every rank's slice gathered, the full rows */
            size_t V = (size_t)cfg->vocab_size, tp = (size_t)s->tp_size;
            size_t pad = (V + tp - 1) / tp;
            bytes += (R * pad + tp * R * pad + R * V) * sizeof(float);
        }
    }
    return bytes;
}
