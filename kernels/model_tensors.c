/* model_tensors.c: the tensors a checkpoint holds, by Hugging Face name, and
 * where each one goes on a rank.
 *
 * This is the one description of a model family's weights: the loader
 * checks every stored tensor against it (rl_model_expected_tensors), the
 * weight loader slices and uploads by it (model_weights.c), and the memory
 * plan counts bytes by it (shard_cost.c).  A family differs from Qwen2 by
 * the switches of rlModelConfig (biases, q/k norms, experts), which select
 * rows of the table below; a new kind of tensor is a new row here (and its
 * use in model.c), nothing more.  A mixture-of-experts layer swaps the dense
 * MLP rows for the router, the routed experts (stored one tensor per expert
 * on the hub, held as one buffer of every expert here) and, in Qwen2-MoE,
 * the shared expert in the MLP's buffers. */
#include "kernels/model.h"

#include <stddef.h>
#include <stdio.h>
#include <string.h>

#define SLOT(f) offsetof(rlLayer, f)

/* Every per-layer tensor any supported family has, in buffer order, with
 * the config switch that makes it present (0: always) and the layers that
 * hold it. */
static const struct {
    rlLayerTensor t;
    size_t when;            /* offsetof(rlModelConfig, switch), or 0 for always */
    rlLayerKind layers;
} LAYER_TENSORS[] = {
    {{"input_layernorm.weight", SLOT(ln1), RL_DIM_HIDDEN, RL_DIM_NONE, 0, 0, 0}, 0, RL_LAYER_ALL},
    {{"self_attn.q_proj.weight", SLOT(wqkv), RL_DIM_Q, RL_DIM_HIDDEN, 0, 0.02f, 0},
     0, RL_LAYER_ALL},
    {{"self_attn.k_proj.weight", SLOT(wqkv), RL_DIM_KV, RL_DIM_HIDDEN, 0, 0.02f, 0},
     0, RL_LAYER_ALL},
    {{"self_attn.v_proj.weight", SLOT(wqkv), RL_DIM_KV, RL_DIM_HIDDEN, 0, 0.02f, 0},
     0, RL_LAYER_ALL},
    {{"self_attn.q_proj.bias", SLOT(bqkv), RL_DIM_Q, RL_DIM_NONE, 0, 0.02f, 0},
     offsetof(rlModelConfig, qkv_bias), RL_LAYER_ALL},
    {{"self_attn.k_proj.bias", SLOT(bqkv), RL_DIM_KV, RL_DIM_NONE, 0, 0.02f, 0},
     offsetof(rlModelConfig, qkv_bias), RL_LAYER_ALL},
    {{"self_attn.v_proj.bias", SLOT(bqkv), RL_DIM_KV, RL_DIM_NONE, 0, 0.02f, 0},
     offsetof(rlModelConfig, qkv_bias), RL_LAYER_ALL},
    {{"self_attn.q_norm.weight", SLOT(q_norm), RL_DIM_HEAD, RL_DIM_NONE, 0, 0, 0},
     offsetof(rlModelConfig, qk_norm), RL_LAYER_ALL},
    {{"self_attn.k_norm.weight", SLOT(k_norm), RL_DIM_HEAD, RL_DIM_NONE, 0, 0, 0},
     offsetof(rlModelConfig, qk_norm), RL_LAYER_ALL},
    {{"self_attn.o_proj.weight", SLOT(wo), RL_DIM_HIDDEN, RL_DIM_Q, 0, 0.02f, 0}, 0, RL_LAYER_ALL},
    {{"self_attn.o_proj.bias", SLOT(bo), RL_DIM_HIDDEN, RL_DIM_NONE, 1, 0.02f, 0},
     offsetof(rlModelConfig, o_bias), RL_LAYER_ALL},
    {{"post_attention_layernorm.weight", SLOT(ln2), RL_DIM_HIDDEN, RL_DIM_NONE, 0, 0, 0},
     0, RL_LAYER_ALL},
    {{"mlp.gate_proj.weight", SLOT(wgu), RL_DIM_MLP, RL_DIM_HIDDEN, 0, 0.02f, 0},
     0, RL_LAYER_DENSE},
    {{"mlp.up_proj.weight", SLOT(wgu), RL_DIM_MLP, RL_DIM_HIDDEN, 0, 0.02f, 0}, 0, RL_LAYER_DENSE},
    {{"mlp.gate_proj.bias", SLOT(bgu), RL_DIM_MLP, RL_DIM_NONE, 0, 0.02f, 0},
     offsetof(rlModelConfig, mlp_bias), RL_LAYER_DENSE},
    {{"mlp.up_proj.bias", SLOT(bgu), RL_DIM_MLP, RL_DIM_NONE, 0, 0.02f, 0},
     offsetof(rlModelConfig, mlp_bias), RL_LAYER_DENSE},
    {{"mlp.down_proj.weight", SLOT(wdown), RL_DIM_HIDDEN, RL_DIM_MLP, 0, 0.02f, 0},
     0, RL_LAYER_DENSE},
    {{"mlp.down_proj.bias", SLOT(bdown), RL_DIM_HIDDEN, RL_DIM_NONE, 1, 0.02f, 0},
     offsetof(rlModelConfig, mlp_bias), RL_LAYER_DENSE},
    /* Qwen2-MoE's shared expert goes where a dense layer's MLP goes. */
    {{"mlp.shared_expert.gate_proj.weight", SLOT(wgu), RL_DIM_SHARED, RL_DIM_HIDDEN, 0, 0.02f, 0},
     offsetof(rlModelConfig, shared_expert_size), RL_LAYER_MOE},
    {{"mlp.shared_expert.up_proj.weight", SLOT(wgu), RL_DIM_SHARED, RL_DIM_HIDDEN, 0, 0.02f, 0},
     offsetof(rlModelConfig, shared_expert_size), RL_LAYER_MOE},
    {{"mlp.shared_expert.down_proj.weight", SLOT(wdown), RL_DIM_HIDDEN, RL_DIM_SHARED, 0, 0.02f, 0},
     offsetof(rlModelConfig, shared_expert_size), RL_LAYER_MOE},
    {{"mlp.shared_expert_gate.weight", SLOT(wsgate), RL_DIM_ONE, RL_DIM_HIDDEN, 0, 0.02f, 0},
     offsetof(rlModelConfig, shared_expert_size), RL_LAYER_MOE},
    {{"mlp.gate.weight", SLOT(router), RL_DIM_EXPERTS, RL_DIM_HIDDEN, 0, 0.02f, 0},
     0, RL_LAYER_MOE},
    {{"mlp.experts.%d.gate_proj.weight", SLOT(wgu_e), RL_DIM_MOE, RL_DIM_HIDDEN, 0, 0.02f, 1},
     0, RL_LAYER_MOE},
    {{"mlp.experts.%d.up_proj.weight", SLOT(wgu_e), RL_DIM_MOE, RL_DIM_HIDDEN, 0, 0.02f, 1},
     0, RL_LAYER_MOE},
    {{"mlp.experts.%d.down_proj.weight", SLOT(wdown_e), RL_DIM_HIDDEN, RL_DIM_MOE, 0, 0.02f, 1},
     0, RL_LAYER_MOE},
};

int rl_layer_tensors(const rlModelConfig *cfg, int layer, rlLayerTensor *out) {
    rlLayerKind kind = rl_layer_is_moe(cfg, layer) ? RL_LAYER_MOE : RL_LAYER_DENSE;
    int n = 0;
    for (size_t i = 0; i < sizeof(LAYER_TENSORS) / sizeof(LAYER_TENSORS[0]); i++) {
        size_t when = LAYER_TENSORS[i].when;
        if (when && !*(const int *)((const char *)cfg + when)) continue;
        if (LAYER_TENSORS[i].layers != RL_LAYER_ALL && LAYER_TENSORS[i].layers != kind) continue;
        out[n++] = LAYER_TENSORS[i].t;
    }
    return n;
}

void rl_layer_tensor_name(const rlLayerTensor *t, int layer, int e, char *out, size_t n) {
    int len = snprintf(out, n, "model.layers.%d.", layer);
    if (len < 0 || (size_t)len >= n) return;
    if (t->per_expert) {
        const char *at = strstr(t->name, "%d");
        snprintf(out + len, n - (size_t)len, "%.*s%d%s", (int)(at - t->name), t->name, e, at + 2);
    } else {
        snprintf(out + len, n - (size_t)len, "%s", t->name);
    }
}

int64_t rl_dim_size(const rlModelConfig *cfg, rlDim d) {
    switch (d) {
    case RL_DIM_NONE: return 0;
    case RL_DIM_HIDDEN: return cfg->hidden_size;
    case RL_DIM_HEAD: return cfg->head_dim;
    case RL_DIM_Q: return (int64_t)cfg->num_heads * cfg->head_dim;
    case RL_DIM_KV: return (int64_t)cfg->num_kv_heads * cfg->head_dim;
    case RL_DIM_MLP: return cfg->intermediate_size;
    case RL_DIM_EXPERTS: return cfg->num_experts;
    case RL_DIM_MOE: return cfg->moe_intermediate_size;
    case RL_DIM_SHARED: return cfg->shared_expert_size;
    case RL_DIM_ONE: return 1;
    }
    return 0;
}

void rl_dim_cut(const rlModelConfig *cfg, const rlShard *s, rlDim d, int64_t *start,
                int64_t *n) {
    int64_t hd = cfg->head_dim;
    *start = 0, *n = rl_dim_size(cfg, d);
    if (d == RL_DIM_Q) *start = s->q_head0 * hd, *n = s->n_q_heads * hd;
    else if (d == RL_DIM_KV) *start = s->kv_head0 * hd, *n = s->n_kv_heads * hd;
    else if (d == RL_DIM_MLP) *start = s->mlp0, *n = s->n_mlp;
    else if (d == RL_DIM_MOE) *start = s->moe0, *n = s->n_moe;
    else if (d == RL_DIM_SHARED) *start = s->shared0, *n = s->n_shared;
}

size_t rl_layer_tensor_elems(const rlModelConfig *cfg, const rlShard *s, const rlLayerTensor *t) {
    if (t->rank0_only && s->tp_rank != 0) return 0;
    int64_t r0, nr, c0, nc = 1;
    rl_dim_cut(cfg, s, t->rows, &r0, &nr);
    if (t->cols != RL_DIM_NONE) rl_dim_cut(cfg, s, t->cols, &c0, &nc);
    return (size_t)nr * (size_t)nc * (size_t)(t->per_expert ? cfg->num_experts : 1);
}

/* Visits one tensor; cols == 0 means a vector of rows entries. */
static int visit(rlTensorVisit fn, void *ctx, const char *name, int64_t rows, int64_t cols) {
    int64_t shape[2] = {rows, cols};
    return fn(ctx, name, cols ? 2 : 1, shape);
}

int rl_model_expected_tensors(const rlModelConfig *cfg, rlTensorVisit fn, void *ctx) {
    int64_t hidden = cfg->hidden_size, vocab = cfg->vocab_size;
    rlLayerTensor t[RL_MAX_LAYER_TENSORS];
    int rc;

    if ((rc = visit(fn, ctx, "model.embed_tokens.weight", vocab, hidden))) return rc;
    for (int l = 0; l < cfg->num_layers; l++) {
        int n = rl_layer_tensors(cfg, l, t);
        for (int i = 0; i < n; i++) {
            for (int e = 0; e < (t[i].per_expert ? cfg->num_experts : 1); e++) {
                char name[160];
                rl_layer_tensor_name(&t[i], l, e, name, sizeof(name));
                if ((rc = visit(fn, ctx, name, rl_dim_size(cfg, t[i].rows),
                                rl_dim_size(cfg, t[i].cols))))
                    return rc;
            }
        }
    }
    if ((rc = visit(fn, ctx, "model.norm.weight", hidden, 0))) return rc;
    if (!cfg->tie_word_embeddings && (rc = visit(fn, ctx, "lm_head.weight", vocab, hidden)))
        return rc;
    return 0;
}
