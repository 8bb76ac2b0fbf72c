/* config.c: names for dtypes and a one-line account of a model's family,
 * for messages, plans and the doctor. */
#include "kernels/config.h"

#include <stdio.h>

const char *rl_dtype_name(rlDtype t) {
    switch (t) {
    case RL_F32: return "fp32";
    case RL_F16: return "fp16";
    case RL_BF16: return "bf16";
    case RL_I32: return "int32";
    case RL_F8_E4M3: return "float8_e4m3fn";
    }
    return "?";
}

void rl_config_describe(const rlModelConfig *c, char *buf, size_t n) {
    static const char *const rope[] = {"", "linear", "yarn", "llama3"};
    const rlRopeScaling *r = &c->rope_scaling;
    int len = snprintf(buf, n, "%s%s%s%s%s", c->architecture[0] ? c->architecture : "?",
                       c->qkv_bias ? ", q/k/v bias" : "", c->o_bias ? ", o_proj bias" : "",
                       c->mlp_bias ? ", MLP bias" : "", c->qk_norm ? ", q/k norms" : "");
    if (c->num_experts > 0 && len >= 0 && (size_t)len < n) {
        int moe = 0;
        for (int l = 0; l < c->num_layers; l++) moe += rl_layer_is_moe(c, l);
        len += snprintf(buf + len, n - (size_t)len, ", %d experts of %d (top %d%s)%s%.0d%s",
                        c->num_experts, c->moe_intermediate_size, c->num_experts_per_tok,
                        c->norm_topk_prob ? ", renormalised" : "",
                        c->shared_expert_size ? " + shared expert of " : "",
                        c->shared_expert_size, moe < c->num_layers ? " in some layers" : "");
    }
    if (r->type != RL_ROPE_DEFAULT && len >= 0 && (size_t)len < n)
        snprintf(buf + len, n - (size_t)len, ", rope %s x%g%s%.0f%s", rope[r->type], r->factor,
                 r->type == RL_ROPE_LINEAR ? "" : " over ",
                 r->type == RL_ROPE_LINEAR ? 0.0 : r->original_max_position,
                 r->type == RL_ROPE_LINEAR ? "" : " positions");
}
