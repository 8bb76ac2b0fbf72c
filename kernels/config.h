/* config.h: the shape of a Qwen2-family model, as the kernels need it.
 *
 * Filled from a Hugging Face config.json (+ generation_config.json) by the
 * loader in worker/, or from a bare config.json for --load-format dummy.
 * Everything the forward pass, the KV cache and the memory planner size
 * themselves from lives here, so no layer re-reads JSON. */
#ifndef RL_CONFIG_H
#define RL_CONFIG_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/quant.h"

/* RL_I32 and RL_F8_E4M3 are storage types of quantized checkpoints only
 * (packed integers, float8 weights): no backend computes in them. */
typedef enum rlDtype { RL_F32 = 0, RL_F16 = 1, RL_BF16 = 2, RL_I32 = 3, RL_F8_E4M3 = 4 } rlDtype;

#define RL_MAX_EOS 16

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
    rlDtype torch_dtype;         /* the checkpoint's declared dtype */
    int eos_ids[RL_MAX_EOS];     /* generation_config.json, else config.json */
    int n_eos;
    int bos_id;                  /* -1 when absent */
    rlQuant quant;               /* how the linear layers are stored (quant.h) */
} rlModelConfig;

static inline size_t rl_dtype_size(rlDtype t) {
    return t == RL_F32 || t == RL_I32 ? 4 : t == RL_F8_E4M3 ? 1 : 2;
}
const char *rl_dtype_name(rlDtype t);

#endif
