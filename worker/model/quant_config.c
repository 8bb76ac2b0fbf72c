/* quant_config.c: config.json's quantization_config into an rlQuant.
 *
 * Each tool writes its own keys (AutoAWQ, AutoGPTQ / optimum / GPTQModel,
 * the block-FP8 configs of DeepSeek-V3 and Qwen3-FP8, compressed-tensors);
 * keys that only describe how the weights were made are ignored, every key
 * that changes how the tensors must be read is checked, and a value redlm
 * cannot read exactly is refused with the key, the value and what works. */
#define PCRE2_CODE_UNIT_WIDTH 8
#include "worker/model/quant.h"

#include <pcre2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define QUANT_SUPPORTED                                                                    \
    "redlm loads AutoAWQ GEMM (quant_method \"awq\", version \"gemm\", 4 bits, zero_point "  \
    "true), GPTQ (quant_method \"gptq\", 4 or 8 bits, checkpoint_format \"gptq\" or "        \
    "\"gptq_v2\"), block FP8 (quant_method \"fp8\" with weight_block_size) and "             \
    "compressed-tensors FP8 per channel or per tensor"

static const char *const quant_linears[] = {"self_attn.q_proj", "self_attn.k_proj",
                                            "self_attn.v_proj", "self_attn.o_proj",
                                            "mlp.gate_proj",    "mlp.up_proj",
                                            "mlp.down_proj"};
#define QUANT_N_LINEARS (sizeof(quant_linears) / sizeof(quant_linears[0]))

/* The value as compact JSON, for messages. */
static void quant_show(json_t *v, char *buf, size_t n) {
    char *s = v ? json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT) : NULL;
    snprintf(buf, n, "%s", s ? s : "absent");
    free(s);
}

static int quant_refuse(rlError *err, const char *path, const char *key, json_t *v,
                        const char *why) {
    char shown[160];
    quant_show(v, shown, sizeof(shown));
    return rl_error(err, RL_EMODEL,
                    "%s: quantization_config.%s = %s is not supported%s%s. " QUANT_SUPPORTED
                    ". Use one of those checkpoints, or the model's unquantized one.",
                    path, key, shown, why ? ": " : "", why ? why : "");
}

/* A string key: absent or null gives NULL; any other type is refused, so
 * that a value like "version": 2 is not read as the default. */
static int quant_str(json_t *o, const char *path, const char *key, const char **out,
                     rlError *err) {
    json_t *v = json_object_get(o, key);
    *out = json_string_value(v);
    if (v && !json_is_null(v) && !*out) return quant_refuse(err, path, key, v, "it must be a string");
    return 0;
}

/* Absent, null, true or false: what a boolean key may hold. */
static int quant_is_flag(json_t *v) { return !v || json_is_null(v) || json_is_boolean(v); }

/* A boolean key; absent or null gives def, and a string such as "false" is
 * refused rather than read as either. */
static int quant_bool(json_t *o, const char *path, const char *key, int def, int *out,
                      rlError *err) {
    json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v)) {
        *out = def;
        return 0;
    }
    if (!quant_is_flag(v)) return quant_refuse(err, path, key, v, "it must be true or false");
    *out = json_is_true(v);
    return 0;
}

/* An integer key; absent or null gives def. */
static int quant_int(json_t *o, const char *path, const char *key, json_int_t def,
                     json_int_t *out, rlError *err) {
    json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v)) {
        *out = def;
        return 0;
    }
    if (!json_is_integer(v)) return quant_refuse(err, path, key, v, "it must be an integer");
    *out = json_integer_value(v);
    return 0;
}

/* A layer linear's module name that `entry` names: AutoAWQ and GPTQ match
 * by substring, compressed-tensors by exact name or a "re:" regex. */
static int quant_names_linear(const char *entry, int regex, int num_layers) {
    pcre2_code *re = NULL;
    if (regex) {
        int ec;
        PCRE2_SIZE off;
        re = pcre2_compile((PCRE2_SPTR)entry, PCRE2_ZERO_TERMINATED, 0, &ec, &off, NULL);
        if (!re) return 1;  /* unreadable: assume it names a layer, so it is refused */
    }
    pcre2_match_data *md = re ? pcre2_match_data_create_from_pattern(re, NULL) : NULL;
    int hit = 0;
    for (int l = 0; l < num_layers && !hit; l++)
        for (size_t i = 0; i < QUANT_N_LINEARS && !hit; i++) {
            char name[128];
            snprintf(name, sizeof(name), "model.layers.%d.%s", l, quant_linears[i]);
            if (re) {
                int rc = pcre2_match(re, (PCRE2_SPTR)name, PCRE2_ZERO_TERMINATED, 0, 0, md, NULL);
                hit = rc >= 0 && pcre2_get_ovector_pointer(md)[0] == 0 &&
                      pcre2_get_ovector_pointer(md)[1] == strlen(name);
            } else {
                hit = regex < 0 ? strcmp(name, entry) == 0 || strcmp(quant_linears[i], entry) == 0
                                : strstr(name, entry) != NULL;
            }
        }
    pcre2_match_data_free(md);
    pcre2_code_free(re);
    return hit;
}

/* A list of modules kept unquantized: fine while it names none of the layer
 * linears (lm_head, embeddings stay dense anyway); redlm quantizes every
 * projection alike, so a list naming one is refused.  exact: compressed-
 * tensors' rules (exact names, "re:" regexes), else substrings. */
static int quant_check_skip(json_t *qc, const char *path, const char *key, int exact,
                            int num_layers, rlError *err) {
    json_t *list = json_object_get(qc, key), *e;
    if (!list || json_is_null(list)) return 0;
    if (!json_is_array(list)) return quant_refuse(err, path, key, list, "it must be a list");
    size_t i;
    json_array_foreach(list, i, e) {
        const char *s = json_string_value(e);
        if (!s) return quant_refuse(err, path, key, list, "its entries must be strings");
        int regex = exact && strncmp(s, "re:", 3) == 0;
        if (quant_names_linear(regex ? s + 3 : s, regex ? 1 : exact ? -1 : 0, num_layers)) {
            char why[256];
            snprintf(why, sizeof(why), "\"%s\" keeps some of the layers' projections "
                     "unquantized, and redlm reads every projection in one format", s);
            return quant_refuse(err, path, key, list, why);
        }
    }
    return 0;
}

static int quant_awq(json_t *qc, const char *path, int num_layers, rlQuant *q, rlError *err) {
    json_int_t bits = 0, group = 0;
    const char *version;
    int zero_point = 1;
    if (quant_str(qc, path, "version", &version, err) ||
        quant_bool(qc, path, "zero_point", 1, &zero_point, err))
        return -1;
    if (version && strcasecmp(version, "gemm") != 0)
        return quant_refuse(err, path, "version", json_object_get(qc, "version"),
                            "GEMV and Marlin-packed AWQ store another layout; use the GEMM "
                            "export");
    if (!zero_point)
        return quant_refuse(err, path, "zero_point", json_object_get(qc, "zero_point"),
                            "redlm reads AWQ with zero points");
    if (quant_int(qc, path, "bits", 4, &bits, err) ||
        quant_int(qc, path, "group_size", 128, &group, err))
        return -1;
    if (bits != 4)
        return quant_refuse(err, path, "bits", json_object_get(qc, "bits"),
                            "AWQ GEMM packs 4-bit values");
    if (group < 1 || group > (1 << 20))
        return quant_refuse(err, path, "group_size", json_object_get(qc, "group_size"),
                            "AWQ needs a positive group size");
    *q = (rlQuant){.method = RL_QUANT_AWQ, .bits = 4, .group = (int)group};
    return quant_check_skip(qc, path, "modules_to_not_convert", 0, num_layers, err);
}

static int quant_gptq(json_t *qc, const char *path, int num_layers, rlQuant *q, rlError *err) {
    json_int_t bits = 0, group = 0;
    if (quant_int(qc, path, "bits", 4, &bits, err) ||
        quant_int(qc, path, "group_size", 128, &group, err))
        return -1;
    if (bits != 4 && bits != 8)
        return quant_refuse(err, path, "bits", json_object_get(qc, "bits"),
                            "GPTQ is read with 4 or 8 bits (3- and 2-bit packing are not)");
    if (group != -1 && (group < 1 || group > (1 << 20)))
        return quant_refuse(err, path, "group_size", json_object_get(qc, "group_size"),
                            "give a positive group size, or -1 for one group over all inputs");
    const char *fmt_key = json_object_get(qc, "checkpoint_format") ? "checkpoint_format" : "format";
    const char *fmt;
    int marlin = 0, lm_head = 0, desc_act = 0, sym = 1;
    if (quant_str(qc, path, fmt_key, &fmt, err) ||
        quant_bool(qc, path, "is_marlin_format", 0, &marlin, err) ||
        quant_bool(qc, path, "lm_head", 0, &lm_head, err) ||
        quant_bool(qc, path, "desc_act", 0, &desc_act, err) ||
        quant_bool(qc, path, "sym", 1, &sym, err))
        return -1;
    if (fmt && strcmp(fmt, "gptq") && strcmp(fmt, "gptq_v2"))
        return quant_refuse(err, path, fmt_key, json_object_get(qc, fmt_key),
                            "other formats (Marlin, BitBLAS, ...) repack the weights");
    if (marlin)
        return quant_refuse(err, path, "is_marlin_format", json_object_get(qc, "is_marlin_format"),
                            "Marlin-packed GPTQ stores another layout; use the GPTQ export");
    if (lm_head)
        return quant_refuse(err, path, "lm_head", json_object_get(qc, "lm_head"),
                            "redlm keeps lm_head unquantized");
    json_t *dyn = json_object_get(qc, "dynamic");
    if (dyn && !json_is_null(dyn) && !(json_is_object(dyn) && json_object_size(dyn) == 0))
        return quant_refuse(err, path, "dynamic", dyn,
                            "per-module overrides give layers different formats");
    *q = (rlQuant){.method = RL_QUANT_GPTQ, .bits = (int)bits, .group = group > 0 ? (int)group : 0,
                   .act_order = desc_act, .sym = sym, .zeros_v2 = fmt && !strcmp(fmt, "gptq_v2")};
    /* optimum: the linears of a block that are quantized, as groups of names. */
    json_t *inblock = json_object_get(qc, "modules_in_block_to_quantize");
    if (inblock && !json_is_null(inblock)) {
        unsigned covered = 0;  /* one bit per linear, so a name listed twice counts once */
        size_t i, j;
        json_t *grp, *m;
        json_array_foreach(inblock, i, grp) json_array_foreach(grp, j, m) {
            for (size_t k = 0; k < QUANT_N_LINEARS; k++)
                if (json_is_string(m) && !strcmp(json_string_value(m), quant_linears[k]))
                    covered |= 1u << k;
        }
        if (covered != (1u << QUANT_N_LINEARS) - 1)
            return quant_refuse(err, path, "modules_in_block_to_quantize", inblock,
                                "it leaves some projections unquantized");
    }
    return quant_check_skip(qc, path, "modules_to_not_convert", 0, num_layers, err);
}

/* A scale block's [rows, columns]: two integers in [1, 2^20], so that they
 * fit the int fields and every division by them is safe.  Returns -1 if not. */
static int quant_block_shape(json_t *bs, int *rows, int *cols) {
    json_t *r = json_array_get(bs, 0), *c = json_array_get(bs, 1);
    if (json_array_size(bs) != 2 || !json_is_integer(r) || !json_is_integer(c) ||
        json_integer_value(r) < 1 || json_integer_value(r) > (1 << 20) ||
        json_integer_value(c) < 1 || json_integer_value(c) > (1 << 20))
        return -1;
    *rows = (int)json_integer_value(r);
    *cols = (int)json_integer_value(c);
    return 0;
}

static int quant_fp8_block(json_t *qc, const char *path, int num_layers, rlQuant *q,
                           rlError *err) {
    json_t *bs = json_object_get(qc, "weight_block_size");
    const char *fmt = NULL, *act = NULL;
    if (quant_str(qc, path, "fmt", &fmt, err) ||
        quant_str(qc, path, "activation_scheme", &act, err))
        return -1;
    if (fmt && strcmp(fmt, "e4m3"))
        return quant_refuse(err, path, "fmt", json_object_get(qc, "fmt"),
                            "redlm reads float8_e4m3fn weights");
    int rows, cols;
    if (quant_block_shape(bs, &rows, &cols))
        return quant_refuse(err, path, "weight_block_size", bs,
                            "give [rows, columns] of one scale block, e.g. [128, 128] (FP8 "
                            "without blocks is read in the compressed-tensors format)");
    if (act && strcmp(act, "dynamic"))
        return quant_refuse(err, path, "activation_scheme", json_object_get(qc, "activation_scheme"),
                            "block FP8 takes its activation scales at run time (\"dynamic\")");
    *q = (rlQuant){.method = RL_QUANT_FP8, .bits = 8, .fp8_scale = RL_FP8_BLOCK,
                   .block_n = rows, .group = cols, .act_dynamic = 1};
    if (quant_check_skip(qc, path, "modules_to_not_convert", 0, num_layers, err)) return -1;
    return quant_check_skip(qc, path, "ignored_layers", 0, num_layers, err);
}

/* One compressed-tensors scheme's "weights" and "input_activations". */
static int quant_ct_scheme(json_t *grp, const char *path, rlQuant *q, rlError *err) {
    json_t *w = json_object_get(grp, "weights"), *a = json_object_get(grp, "input_activations");
    json_t *o = json_object_get(grp, "output_activations");
    if (!json_is_object(w))
        return quant_refuse(err, path, "config_groups.*.weights", w, "each group needs weights");
    const char *type = json_string_value(json_object_get(w, "type"));
    const char *strat = json_string_value(json_object_get(w, "strategy"));
    json_t *nb = json_object_get(w, "num_bits");
    if (!type || strcmp(type, "float") || !json_is_integer(nb) || json_integer_value(nb) != 8)
        return quant_refuse(err, path, "config_groups.*.weights", w,
                            "redlm reads 8-bit float weights from compressed-tensors");
    json_t *sym = json_object_get(w, "symmetric"), *dyn = json_object_get(w, "dynamic");
    if (!quant_is_flag(sym) || !quant_is_flag(dyn))
        return quant_refuse(err, path, "config_groups.*.weights", w,
                            "symmetric and dynamic must be true or false");
    if (json_is_false(sym) || json_is_true(dyn))
        return quant_refuse(err, path, "config_groups.*.weights", w,
                            "weights must be symmetric with stored scales");
    rlQuant s = {.method = RL_QUANT_FP8, .bits = 8, .scale_named = 1};
    if (strat && !strcmp(strat, "channel")) s.fp8_scale = RL_FP8_CHANNEL;
    else if (strat && !strcmp(strat, "tensor")) s.fp8_scale = RL_FP8_TENSOR;
    else if (strat && !strcmp(strat, "block")) {
        json_t *bs = json_object_get(w, "block_structure");
        if (quant_block_shape(bs, &s.block_n, &s.group))
            return quant_refuse(err, path, "config_groups.*.weights.block_structure", bs,
                                "give [rows, columns] of one scale block");
        s.fp8_scale = RL_FP8_BLOCK;
    } else
        return quant_refuse(err, path, "config_groups.*.weights.strategy",
                            json_object_get(w, "strategy"),
                            "FP8 scales are read per channel, per tensor or per block");
    if (o && !json_is_null(o))
        return quant_refuse(err, path, "config_groups.*.output_activations", o,
                            "output activations are not quantized");
    if (a && !json_is_null(a)) {
        json_t *at = json_object_get(a, "type"), *as = json_object_get(a, "strategy");
        json_t *anb = json_object_get(a, "num_bits"), *adyn = json_object_get(a, "dynamic");
        const char *ats = json_string_value(at), *ass = json_string_value(as);
        const int dynamic = json_is_true(adyn);
        if (!quant_is_flag(adyn))
            return quant_refuse(err, path, "config_groups.*.input_activations.dynamic", adyn,
                                "it must be true or false");
        if (!ats || strcmp(ats, "float"))
            return quant_refuse(err, path, "config_groups.*.input_activations.type", at,
                                "activations are quantized to FP8 (\"float\")");
        if (!json_is_integer(anb) || json_integer_value(anb) != 8)
            return quant_refuse(err, path, "config_groups.*.input_activations.num_bits", anb,
                                "FP8 activations have 8 bits");
        if (!ass || (dynamic ? strcmp(ass, "token") && strcmp(ass, "group")
                             : strcmp(ass, "tensor")))
            return quant_refuse(err, path, "config_groups.*.input_activations.strategy", as,
                                dynamic ? "dynamic activations are scaled per token or per "
                                          "group at run time"
                                        : "static activations (dynamic false) take one stored "
                                          "scale per layer, strategy \"tensor\"");
        s.act_dynamic = dynamic, s.act_static = !dynamic;
    }
    *q = s;
    return 0;
}

static int quant_compressed(json_t *qc, const char *path, int num_layers, rlQuant *q,
                            rlError *err) {
    const char *fmt = json_string_value(json_object_get(qc, "format")), *status;
    if (quant_str(qc, path, "quantization_status", &status, err)) return -1;
    json_t *groups = json_object_get(qc, "config_groups"), *kv = json_object_get(qc, "kv_cache_scheme");
    if (!fmt || strcmp(fmt, "float-quantized"))
        return quant_refuse(err, path, "format", json_object_get(qc, "format"),
                            "compressed-tensors is read as \"float-quantized\" (FP8)");
    if (status && strcmp(status, "compressed"))
        return quant_refuse(err, path, "quantization_status",
                            json_object_get(qc, "quantization_status"),
                            "the weights must be stored compressed");
    if (kv && !json_is_null(kv))
        return quant_refuse(err, path, "kv_cache_scheme", kv, "the KV cache is not quantized");
    if (!json_is_object(groups) || json_object_size(groups) == 0)
        return quant_refuse(err, path, "config_groups", groups, "it must name the schemes");
    const char *key;
    json_t *grp;
    int first = 1;
    json_object_foreach(groups, key, grp) {
        rlQuant s;
        if (quant_ct_scheme(grp, path, &s, err)) return -1;
        if (!first && memcmp(&s, q, sizeof(s)))
            return quant_refuse(err, path, "config_groups", groups,
                                "its groups quantize layers differently");
        *q = s, first = 0;
    }
    return quant_check_skip(qc, path, "ignore", 1, num_layers, err);
}

int quant_config_parse(json_t *root, const char *path, int num_layers, rlQuant *q,
                       rlError *err) {
    memset(q, 0, sizeof(*q));
    json_t *qc = json_object_get(root, "quantization_config");
    if (!qc || json_is_null(qc)) return 0;
    if (!json_is_object(qc))
        return quant_refuse(err, path, "(the whole value)", qc, "it must be an object");
    json_t *mv = json_object_get(qc, "quant_method");
    const char *m = json_string_value(mv);
    if (m && !strcmp(m, "awq")) return quant_awq(qc, path, num_layers, q, err);
    if (m && !strcmp(m, "gptq")) return quant_gptq(qc, path, num_layers, q, err);
    if (m && !strcmp(m, "fp8")) return quant_fp8_block(qc, path, num_layers, q, err);
    if (m && !strcmp(m, "compressed-tensors")) return quant_compressed(qc, path, num_layers, q, err);
    return quant_refuse(err, path, "quant_method", mv, NULL);
}

int quant_apply_flag(rlModelConfig *cfg, const char *flag, int dummy, rlError *err) {
    if (!flag) return 0;
    rlQuant q;
    if (!strcmp(flag, "awq")) q = (rlQuant){.method = RL_QUANT_AWQ, .bits = 4, .group = 128};
    else if (!strcmp(flag, "gptq"))
        q = (rlQuant){.method = RL_QUANT_GPTQ, .bits = 4, .group = 128, .sym = 1};
    else if (!strcmp(flag, "fp8"))
        q = (rlQuant){.method = RL_QUANT_FP8, .bits = 8, .fp8_scale = RL_FP8_BLOCK,
                      .block_n = 128, .group = 128, .act_dynamic = 1};
    else
        return rl_error(err, RL_EUSAGE, "--quantization %s: expected awq, gptq or fp8", flag);
    char have[64];
    if (cfg->quant.method && cfg->quant.method != q.method)
        return rl_error(err, RL_EUSAGE,
                        "--quantization %s, but the model's quantization_config says %s: drop "
                        "the flag (the config decides) or give --quantization %s", flag,
                        rl_quant_name(&cfg->quant, have, sizeof(have)),
                        rl_quant_method_name(cfg->quant.method));
    if (!cfg->quant.method && !dummy)
        return rl_error(err, RL_EUSAGE,
                        "--quantization %s, but the checkpoint has no quantization_config: redlm "
                        "reads quantized checkpoints, it does not quantize; the flag picks a "
                        "format for --load-format dummy only", flag);
    if (!cfg->quant.method) cfg->quant = q;
    return quant_check_moe(cfg, "--quantization", err);
}

int quant_check_moe(const rlModelConfig *cfg, const char *where, rlError *err) {
    if (!cfg->num_experts || !cfg->quant.method) return 0;
    int flag = !strcmp(where, "--quantization");
    return rl_error(err, flag ? RL_EUSAGE : RL_EMODEL, "%s: a quantized mixture of experts; redlm runs MoE models "
                    "from their bf16 / fp16 / fp32 weights only in this version. Use the "
                    "model's unquantized checkpoint%s.", where,
                    flag ? " (drop --quantization)" : "");
}

int quant_is_linear(const rlQuant *q, const char *name) {
    if (!q->method || strncmp(name, "model.layers.", 13)) return 0;
    const char *dot = strchr(name + 13, '.');
    if (!dot) return 0;
    for (size_t i = 0; i < QUANT_N_LINEARS; i++) {
        size_t n = strlen(quant_linears[i]);
        if (!strncmp(dot + 1, quant_linears[i], n) && !strcmp(dot + 1 + n, ".weight")) return 1;
    }
    return 0;
}
