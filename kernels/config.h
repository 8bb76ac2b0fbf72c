/* config.h: the shape of a model, as the kernels need it.
 *
 * Filled from a Hugging Face config.json (+ generation_config.json) by the
 * loader in worker/ (worker/model/modelcfg.c, where each family's row says
 * how its config keys become the switches below), or from a bare config.json
 * for --load-format dummy.  Everything the forward pass, the KV cache and the
 * memory planner size themselves from lives here, so no layer re-reads JSON
 * and no layer asks which family a model is: it asks for the switch. */
#ifndef RL_CONFIG_H
#define RL_CONFIG_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/quant.h"

/* RL_I32 and RL_F8_E4M3 are storage types of quantized checkpoints only
 * (packed integers, float8 weights): no backend computes in them. */
typedef enum rlDtype { RL_F32 = 0, RL_F16 = 1, RL_BF16 = 2, RL_I32 = 3, RL_F8_E4M3 = 4 } rlDtype;

#define RL_MAX_EOS 16
/* The most layers a mixture-of-experts config may have (the per-layer MoE
 * mask below is a fixed bitmap; Qwen3-235B-A22B has 94). */
#define RL_MAX_MOE_LAYERS 512

/* Rotary scaling as Hugging Face's modeling_rope_utils computes it
 * (kernels/rope.c turns it into per-dimension inverse frequencies). */
typedef enum rlRopeType {
    RL_ROPE_DEFAULT = 0,
    RL_ROPE_LINEAR,             /* inverse frequencies / factor */
    RL_ROPE_YARN,               /* NTK-by-parts ramp, cos/sin times attention_factor */
    RL_ROPE_LLAMA3,             /* low frequencies / factor, a smooth band between */
} rlRopeType;

typedef struct rlRopeScaling {
    rlRopeType type;
    double factor;                      /* linear, yarn, llama3 */
    double original_max_position;       /* yarn, llama3: the pre-training context */
    double beta_fast, beta_slow;        /* yarn (32, 1 when unset) */
    int truncate;                       /* yarn: floor/ceil the correction range (default 1) */
    double attention_factor;            /* yarn: resolved at load (mscale rules) */
    double low_freq_factor, high_freq_factor;   /* llama3 */
} rlRopeScaling;

typedef struct rlModelConfig {
    int hidden_size;             /* model width */
    int num_layers;              /* num_hidden_layers */
    int num_heads;               /* query heads */
    int num_kv_heads;            /* key/value heads (GQA groups) */
    int head_dim;                /* "head_dim", else hidden_size / num_heads */
    int intermediate_size;       /* MLP width */
    int vocab_size;
    int max_position_embeddings;
    double rope_theta;
    double rms_norm_eps;
    int tie_word_embeddings;     /* LM head shares the embedding table */
    /* Per-layer switches (worker/model/modelcfg.c's family table sets them). */
    char architecture[48];       /* "Qwen2ForCausalLM", for messages and plans */
    int qkv_bias;                /* q/k/v projections have biases (Qwen2; attention_bias) */
    int o_bias;                  /* o_proj has a bias (attention_bias of Qwen3 / Llama) */
    int mlp_bias;                /* gate/up/down have biases (Llama's mlp_bias) */
    int qk_norm;                 /* RMSNorm over each q and k head before RoPE (Qwen3) */
    rlRopeScaling rope_scaling;
    rlDtype torch_dtype;         /* the checkpoint's declared dtype */
    int eos_ids[RL_MAX_EOS];     /* generation_config.json, else config.json */
    int n_eos;
    int bos_id;                  /* -1 when absent */
    rlQuant quant;               /* how the linear layers are stored (quant.h) */
    /* Mixture of experts (Qwen2-MoE, Qwen3-MoE); num_experts 0: a dense model. */
    int num_experts;             /* routed experts of an MoE layer */
    int num_experts_per_tok;     /* top-k experts each token goes to */
    int moe_intermediate_size;   /* each routed expert's MLP width */
    int shared_expert_size;      /* shared_expert_intermediate_size (Qwen2-MoE); 0: none */
    int norm_topk_prob;          /* renormalise the top-k routing weights to sum 1 */
    /* Bit l set: layer l is MoE ((l + 1) % decoder_sparse_step == 0 and l not
     * in mlp_only_layers); the others keep the dense intermediate_size MLP. */
    uint64_t moe_layers[RL_MAX_MOE_LAYERS / 64];
} rlModelConfig;

/* Whether layer l's MLP is a mixture of experts. */
static inline int rl_layer_is_moe(const rlModelConfig *c, int l) {
    return c->num_experts > 0 && l >= 0 && l < RL_MAX_MOE_LAYERS &&
           (c->moe_layers[l / 64] >> (l % 64) & 1);
}

static inline size_t rl_dtype_size(rlDtype t) {
    return t == RL_F32 || t == RL_I32 ? 4 : t == RL_F8_E4M3 ? 1 : 2;
}
const char *rl_dtype_name(rlDtype t);
/* "Qwen3ForCausalLM, q/k norms" or "LlamaForCausalLM, rope llama3 x8 over
 * 8192 positions": the family and its switches in one line. */
void rl_config_describe(const rlModelConfig *c, char *buf, size_t n);

#endif
