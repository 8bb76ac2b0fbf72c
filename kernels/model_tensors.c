/* model_tensors.c: the tensors a Qwen2 checkpoint holds, by Hugging Face name.
 *
 * One list serves the loader (which checks every stored tensor against it
 * before anything is used) and anyone who needs the model's shapes, so the
 * naming scheme of Qwen2ForCausalLM is written down exactly once. */
#include "kernels/model.h"

#include <stdio.h>

/* Visits one tensor; rows == 0 means a vector of cols entries. */
static int visit(rlTensorVisit fn, void *ctx, const char *name, int64_t rows, int64_t cols) {
    int64_t shape[2] = {rows, cols};
    if (rows == 0) return fn(ctx, name, 1, &shape[1]);
    return fn(ctx, name, 2, shape);
}

int rl_model_expected_tensors(const rlModelConfig *cfg, rlTensorVisit fn, void *ctx) {
    int64_t hidden = cfg->hidden_size, vocab = cfg->vocab_size, mlp = cfg->intermediate_size;
    int64_t q = (int64_t)cfg->num_heads * cfg->head_dim;
    int64_t kv = (int64_t)cfg->num_kv_heads * cfg->head_dim;
    int rc;

    if ((rc = visit(fn, ctx, "model.embed_tokens.weight", vocab, hidden))) return rc;
    for (int l = 0; l < cfg->num_layers; l++) {
        const struct { const char *suffix; int64_t rows, cols; } t[] = {
            {"input_layernorm.weight", 0, hidden},
            {"self_attn.q_proj.weight", q, hidden},
            {"self_attn.q_proj.bias", 0, q},
            {"self_attn.k_proj.weight", kv, hidden},
            {"self_attn.k_proj.bias", 0, kv},
            {"self_attn.v_proj.weight", kv, hidden},
            {"self_attn.v_proj.bias", 0, kv},
            {"self_attn.o_proj.weight", hidden, q},
            {"post_attention_layernorm.weight", 0, hidden},
            {"mlp.gate_proj.weight", mlp, hidden},
            {"mlp.up_proj.weight", mlp, hidden},
            {"mlp.down_proj.weight", hidden, mlp},
        };
        for (size_t i = 0; i < sizeof(t) / sizeof(t[0]); i++) {
            char name[128];
            snprintf(name, sizeof(name), "model.layers.%d.%s", l, t[i].suffix);
            if ((rc = visit(fn, ctx, name, t[i].rows, t[i].cols))) return rc;
        }
    }
    if ((rc = visit(fn, ctx, "model.norm.weight", 0, hidden))) return rc;
    if (!cfg->tie_word_embeddings && (rc = visit(fn, ctx, "lm_head.weight", vocab, hidden)))
        return rc;
    return 0;
}
