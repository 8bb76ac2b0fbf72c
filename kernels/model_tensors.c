/* model_tensors.c: the tensors a checkpoint holds, by Hugging Face name, and
 * where each one goes on a rank.
 *
 * This is the one description of a model family's weights: the loader
 * checks every stored tensor against it (rl_model_expected_tensors), the
 * weight loader slices and uploads by it (model_weights.c), and the memory
 * plan counts bytes by it (shard_cost.c).  A family differs from Qwen2 by
 * the switches of rlModelConfig (biases, q/k norms), which select rows of
 * the table below; a new kind of tensor is a new row here (and its use in
 * model.c), nothing more. */
#include "kernels/model.h"

#include <stddef.h>
#include <stdio.h>

#define SLOT(f) offsetof(rlLayer, f)

/* Every per-layer tensor any supported family has, in buffer order, with
 * the config switch that makes it present (NULL: always). */
static const struct {
    rlLayerTensor t;
    size_t when;            /* offsetof(rlModelConfig, switch), or 0 for always */
} LAYER_TENSORS[] = {
    {{"input_layernorm.weight", SLOT(ln1), RL_DIM_HIDDEN, RL_DIM_NONE, 0, 0}, 0},
    {{"self_attn.q_proj.weight", SLOT(wqkv), RL_DIM_Q, RL_DIM_HIDDEN, 0, 0.02f}, 0},
    {{"self_attn.k_proj.weight", SLOT(wqkv), RL_DIM_KV, RL_DIM_HIDDEN, 0, 0.02f}, 0},
    {{"self_attn.v_proj.weight", SLOT(wqkv), RL_DIM_KV, RL_DIM_HIDDEN, 0, 0.02f}, 0},
    {{"self_attn.q_proj.bias", SLOT(bqkv), RL_DIM_Q, RL_DIM_NONE, 0, 0.02f},
     offsetof(rlModelConfig, qkv_bias)},
    {{"self_attn.k_proj.bias", SLOT(bqkv), RL_DIM_KV, RL_DIM_NONE, 0, 0.02f},
     offsetof(rlModelConfig, qkv_bias)},
    {{"self_attn.v_proj.bias", SLOT(bqkv), RL_DIM_KV, RL_DIM_NONE, 0, 0.02f},
     offsetof(rlModelConfig, qkv_bias)},
    {{"self_attn.q_norm.weight", SLOT(q_norm), RL_DIM_HEAD, RL_DIM_NONE, 0, 0},
     offsetof(rlModelConfig, qk_norm)},
    {{"self_attn.k_norm.weight", SLOT(k_norm), RL_DIM_HEAD, RL_DIM_NONE, 0, 0},
     offsetof(rlModelConfig, qk_norm)},
    {{"self_attn.o_proj.weight", SLOT(wo), RL_DIM_HIDDEN, RL_DIM_Q, 0, 0.02f}, 0},
    {{"self_attn.o_proj.bias", SLOT(bo), RL_DIM_HIDDEN, RL_DIM_NONE, 1, 0.02f},
     offsetof(rlModelConfig, o_bias)},
    {{"post_attention_layernorm.weight", SLOT(ln2), RL_DIM_HIDDEN, RL_DIM_NONE, 0, 0}, 0},
    {{"mlp.gate_proj.weight", SLOT(wgu), RL_DIM_MLP, RL_DIM_HIDDEN, 0, 0.02f}, 0},
    {{"mlp.up_proj.weight", SLOT(wgu), RL_DIM_MLP, RL_DIM_HIDDEN, 0, 0.02f}, 0},
    {{"mlp.gate_proj.bias", SLOT(bgu), RL_DIM_MLP, RL_DIM_NONE, 0, 0.02f},
     offsetof(rlModelConfig, mlp_bias)},
    {{"mlp.up_proj.bias", SLOT(bgu), RL_DIM_MLP, RL_DIM_NONE, 0, 0.02f},
     offsetof(rlModelConfig, mlp_bias)},
    {{"mlp.down_proj.weight", SLOT(wdown), RL_DIM_HIDDEN, RL_DIM_MLP, 0, 0.02f}, 0},
    {{"mlp.down_proj.bias", SLOT(bdown), RL_DIM_HIDDEN, RL_DIM_NONE, 1, 0.02f},
     offsetof(rlModelConfig, mlp_bias)},
};

int rl_layer_tensors(const rlModelConfig *cfg, rlLayerTensor *out) {
    int n = 0;
    for (size_t i = 0; i < sizeof(LAYER_TENSORS) / sizeof(LAYER_TENSORS[0]); i++) {
        size_t when = LAYER_TENSORS[i].when;
        if (when && !*(const int *)((const char *)cfg + when)) continue;
        out[n++] = LAYER_TENSORS[i].t;
    }
    return n;
}

int64_t rl_dim_size(const rlModelConfig *cfg, rlDim d) {
    switch (d) {
    case RL_DIM_NONE: return 0;
    case RL_DIM_HIDDEN: return cfg->hidden_size;
    case RL_DIM_HEAD: return cfg->head_dim;
    case RL_DIM_Q: return (int64_t)cfg->num_heads * cfg->head_dim;
    case RL_DIM_KV: return (int64_t)cfg->num_kv_heads * cfg->head_dim;
    case RL_DIM_MLP: return cfg->intermediate_size;
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
}

size_t rl_layer_tensor_elems(const rlModelConfig *cfg, const rlShard *s, const rlLayerTensor *t) {
    if (t->rank0_only && s->tp_rank != 0) return 0;
    int64_t r0, nr, c0, nc = 1;
    rl_dim_cut(cfg, s, t->rows, &r0, &nr);
    if (t->cols != RL_DIM_NONE) rl_dim_cut(cfg, s, t->cols, &c0, &nc);
    return (size_t)nr * (size_t)nc;
}

/* Visits one tensor; cols == 0 means a vector of rows entries. */
static int visit(rlTensorVisit fn, void *ctx, const char *name, int64_t rows, int64_t cols) {
    int64_t shape[2] = {rows, cols};
    return fn(ctx, name, cols ? 2 : 1, shape);
}

int rl_model_expected_tensors(const rlModelConfig *cfg, rlTensorVisit fn, void *ctx) {
    int64_t hidden = cfg->hidden_size, vocab = cfg->vocab_size;
    rlLayerTensor t[RL_MAX_LAYER_TENSORS];
    int n = rl_layer_tensors(cfg, t), rc;

    if ((rc = visit(fn, ctx, "model.embed_tokens.weight", vocab, hidden))) return rc;
    for (int l = 0; l < cfg->num_layers; l++) {
        for (int i = 0; i < n; i++) {
            char name[128];
            snprintf(name, sizeof(name), "model.layers.%d.%s", l, t[i].name);
            if ((rc = visit(fn, ctx, name, rl_dim_size(cfg, t[i].rows),
                            rl_dim_size(cfg, t[i].cols))))
                return rc;
        }
    }
    if ((rc = visit(fn, ctx, "model.norm.weight", hidden, 0))) return rc;
    if (!cfg->tie_word_embeddings && (rc = visit(fn, ctx, "lm_head.weight", vocab, hidden)))
        return rc;
    return 0;
}
