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
    if (r->type != RL_ROPE_DEFAULT && len >= 0 && (size_t)len < n)
        snprintf(buf + len, n - (size_t)len, ", rope %s x%g%s%.0f%s", rope[r->type], r->factor,
                 r->type == RL_ROPE_LINEAR ? "" : " over ",
                 r->type == RL_ROPE_LINEAR ? 0.0 : r->original_max_position,
                 r->type == RL_ROPE_LINEAR ? "" : " positions");
}
