/* modelcfg.c: reading and checking a config.json of a supported family.
 *
 * The config decides every buffer size in the process, so each value is
 * checked here (type, range, consistency) and anything redlm does not
 * implement (another architecture, dynamic or other
 * rope scaling, sliding-window attention) is refused with a message, rather
 * than producing wrong numbers later.  FAMILIES below is the one place that
 * says which architectures run and how each one's keys set the per-layer
 * switches of rlModelConfig (biases, q/k norms); the kernels read only the
 * switches (kernels/model_tensors.c). */
#include "worker/model/modelcfg.h"

#include "worker/model/quant.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

/* Larger dimensions are a corrupt file, not a model, and would overflow
 * the size arithmetic downstream. */
#define RL_MAX_DIM (1 << 24)
/* The largest released models have under 200 layers and a few trillion
 * parameters; past these a config is damaged, and plans that walk every
 * layer (or count bytes in size_t) would run for minutes or wrap. */
#define RL_MAX_LAYERS 4096
#define RL_MAX_PARAMS 1e14

/* Loads a JSON object from path.  Returns NULL with *missing set when the
 * file does not exist, so optional files can be skipped. */
static json_t *modelcfg_read_json(const char *path, int *missing, rlError *err) {
    *missing = 0;
    FILE *f = fopen(path, "rb");
    if (!f) {
        if (errno == ENOENT) {
            *missing = 1;
            rl_error(err, RL_EMODEL, "%s does not exist", path);
        } else if (errno == EACCES) {
            rl_error(err, RL_EMODEL,
                     "%s cannot be read: permission denied. Make the file readable by the "
                     "user running redlm (chmod a+r).", path);
        } else {
            rl_error(err, RL_EMODEL, "%s cannot be opened: %s", path, strerror(errno));
        }
        return NULL;
    }
    json_error_t jerr;
    json_t *root = json_loadf(f, JSON_REJECT_DUPLICATES, &jerr);
    int read_failed = ferror(f);
    fclose(f);
    if (read_failed) {
        json_decref(root);
        rl_error(err, RL_EMODEL, "%s cannot be read: I/O error (is it a directory or on a "
                 "failing disk?)", path);
        return NULL;
    }
    if (!root) {
        rl_error(err, RL_EMODEL,
                 "%s is not valid JSON (line %d, column %d: %s). The file is damaged or "
                 "incomplete: download it again from the model's repository.",
                 path, jerr.line, jerr.column, jerr.text);
        return NULL;
    }
    if (!json_is_object(root)) {
        json_decref(root);
        rl_error(err, RL_EMODEL, "%s is valid JSON but not an object, so it is not a Hugging "
                 "Face config: download it again from the model's repository.", path);
        return NULL;
    }
    return root;
}

/* An integer key in [1, RL_MAX_DIM]; absent or null gives def, or an error
 * when def < 0 (the key is required). */
static int modelcfg_get_dim(json_t *root, const char *path, const char *key, int def,
                            int *out, rlError *err) {
    json_t *v = json_object_get(root, key);
    if (!v || json_is_null(v)) {
        if (def >= 0) { *out = def; return 0; }
        return rl_error(err, RL_EMODEL,
                        "%s has no \"%s\", which every config.json of these families sets. The file is "
                        "incomplete: download config.json again from the model's repository.",
                        path, key);
    }
    if (!json_is_integer(v) || json_integer_value(v) < 1 || json_integer_value(v) > RL_MAX_DIM)
        return rl_error(err, RL_EMODEL,
                        "%s: \"%s\" must be an integer between 1 and %d. The config is damaged "
                        "or edited by hand: restore it from the model's repository.",
                        path, key, RL_MAX_DIM);
    *out = (int)json_integer_value(v);
    return 0;
}

/* A positive finite number; absent or null gives def. */
static int modelcfg_get_real(json_t *root, const char *path, const char *key, double def,
                             double max, double *out, rlError *err) {
    json_t *v = json_object_get(root, key);
    if (!v || json_is_null(v)) { *out = def; return 0; }
    double x = json_is_number(v) ? json_number_value(v) : NAN;
    if (!(x > 0 && x < max))
        return rl_error(err, RL_EMODEL,
                        "%s: \"%s\" must be a positive number below %g. The config is damaged "
                        "or edited by hand: restore it from the model's repository.",
                        path, key, max);
    *out = x;
    return 0;
}

/* An EOS or BOS id past the vocabulary is never sampled: a model that
 * must stop on it would run to max_tokens every time.  Refused at load,
 * naming the file, the key and the id. */
static int modelcfg_check_token(const char *path, const char *key, json_int_t id,
                                const rlModelConfig *cfg, rlError *err) {
    if (id < cfg->vocab_size) return 0;
    return rl_error(err, RL_EMODEL, "%s: \"%s\" %lld is past the vocabulary (vocab_size %d, ids "
                    "0..%d), so the model could never produce it. The file does not belong to "
                    "this model or is damaged: restore it from the model's repository.", path, key,
                    (long long)id, cfg->vocab_size, cfg->vocab_size - 1);
}

/* A token id or a list of them (both forms occur on the hub). */
static int modelcfg_get_eos(json_t *v, const char *path, rlModelConfig *cfg, rlError *err) {
    json_t *one = v;
    size_t n = json_is_array(v) ? json_array_size(v) : 1;
    if (n > RL_MAX_EOS)
        return rl_error(err, RL_EMODEL, "%s: \"eos_token_id\" lists %zu ids; redlm supports at "
                        "most %d.", path, n, RL_MAX_EOS);
    cfg->n_eos = 0;
    for (size_t i = 0; i < n; i++) {
        if (json_is_array(v)) one = json_array_get(v, i);
        if (!json_is_integer(one) || json_integer_value(one) < 0 ||
            json_integer_value(one) > RL_MAX_DIM)
            return rl_error(err, RL_EMODEL, "%s: \"eos_token_id\" must be a token id or a list "
                            "of token ids. Restore the file from the model's repository.", path);
        if (modelcfg_check_token(path, "eos_token_id", json_integer_value(one), cfg, err)) return -1;
        cfg->eos_ids[cfg->n_eos++] = (int)json_integer_value(one);
    }
    return 0;
}

static int modelcfg_get_bos(json_t *root, const char *path, rlModelConfig *cfg, rlError *err) {
    json_t *v = json_object_get(root, "bos_token_id");
    if (!v || json_is_null(v)) return 0;
    if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > RL_MAX_DIM)
        return rl_error(err, RL_EMODEL, "%s: \"bos_token_id\" must be a token id. Restore the "
                        "file from the model's repository.", path);
    if (modelcfg_check_token(path, "bos_token_id", json_integer_value(v), cfg, err)) return -1;
    cfg->bos_id = (int)json_integer_value(v);
    return 0;
}

/* A per-layer switch: fixed (key NULL), or a boolean config key with the
 * default the family's transformers config class gives it. */
typedef struct modelcfgSwitch {
    const char *key;
    int value;
} modelcfgSwitch;

/* Every supported family, as its transformers modeling file builds a layer. */
static const struct modelcfgFamily {
    const char *model_type, *architecture;
    modelcfgSwitch qkv_bias, o_bias, mlp_bias;
    int qk_norm;
    /* Mixture of experts: 0 dense, else transformers' config defaults for
     * the MoE keys a config leaves out (shared expert width 0: none). */
    struct { int on, experts, top_k, width, shared_width; } moe;
} FAMILIES[] = {
    /* Qwen2Attention: q/k/v with bias, o_proj without; no MLP bias. */
    {"qwen2", "Qwen2ForCausalLM", {NULL, 1}, {NULL, 0}, {NULL, 0}, 0, {0}},
    /* Qwen3Attention: attention_bias on q/k/v/o, RMSNorm per q and k head. */
    {"qwen3", "Qwen3ForCausalLM", {"attention_bias", 0}, {"attention_bias", 0}, {NULL, 0}, 1,
     {0}},
    /* LlamaAttention / LlamaMLP: attention_bias and mlp_bias. */
    {"llama", "LlamaForCausalLM", {"attention_bias", 0}, {"attention_bias", 0},
     {"mlp_bias", 0}, 0, {0}},
    /* Qwen2MoeSparseMoeBlock: Qwen2's attention; routed experts plus a shared
     * expert scaled by sigmoid(shared_expert_gate(x)). */
    {"qwen2_moe", "Qwen2MoeForCausalLM", {NULL, 1}, {NULL, 0}, {NULL, 0}, 0,
     {1, 60, 4, 1408, 5632}},
    /* Qwen3MoeSparseMoeBlock: Qwen3's attention; routed experts only. */
    {"qwen3_moe", "Qwen3MoeForCausalLM", {"attention_bias", 0}, {"attention_bias", 0},
     {NULL, 0}, 1, {1, 128, 8, 768, 0}},
};
#define N_FAMILIES (sizeof(FAMILIES) / sizeof(FAMILIES[0]))

static const char *SUPPORTED = "Qwen2ForCausalLM (model_type \"qwen2\": Qwen2, Qwen2.5), "
                               "Qwen3ForCausalLM (\"qwen3\": Qwen3 dense), LlamaForCausalLM "
                               "(\"llama\": Llama 2 / 3), Qwen2MoeForCausalLM (\"qwen2_moe\") "
                               "and Qwen3MoeForCausalLM (\"qwen3_moe\")";

static int modelcfg_get_switch(json_t *root, const char *path, modelcfgSwitch sw, int *out,
                               rlError *err) {
    json_t *v = sw.key ? json_object_get(root, sw.key) : NULL;
    *out = sw.value;
    if (!v || json_is_null(v)) return 0;
    if (!json_is_boolean(v))
        return rl_error(err, RL_EMODEL, "%s: \"%s\" must be true or false.", path, sw.key);
    *out = json_is_true(v);
    return 0;
}

/* The mixture-of-experts keys, as Qwen2MoeConfig / Qwen3MoeConfig read them
 * (the mask is made for every possible layer; modelcfg_parse checks the
 * layer count against it). */
static int modelcfg_get_moe(json_t *root, const char *path, const struct modelcfgFamily *f,
                            rlModelConfig *cfg, rlError *err) {
    int step = 1;
    modelcfgSwitch norm = {"norm_topk_prob", 0};
    if (modelcfg_get_dim(root, path, "num_experts", f->moe.experts, &cfg->num_experts, err) ||
        modelcfg_get_dim(root, path, "num_experts_per_tok", f->moe.top_k,
                         &cfg->num_experts_per_tok, err) ||
        modelcfg_get_dim(root, path, "moe_intermediate_size", f->moe.width,
                         &cfg->moe_intermediate_size, err) ||
        modelcfg_get_dim(root, path, "decoder_sparse_step", 1, &step, err) ||
        modelcfg_get_switch(root, path, norm, &cfg->norm_topk_prob, err))
        return -1;
    json_t *shared = json_object_get(root, "shared_expert_intermediate_size");
    if (f->moe.shared_width && !(json_is_integer(shared) && json_integer_value(shared) == 0) &&
        modelcfg_get_dim(root, path, "shared_expert_intermediate_size", f->moe.shared_width,
                         &cfg->shared_expert_size, err))
        return -1;
    if (cfg->num_experts_per_tok > cfg->num_experts)
        return rl_error(err, RL_EMODEL, "%s: num_experts_per_tok (%d) is more than num_experts "
                        "(%d): each token picks its experts among them. Restore config.json "
                        "from the model's repository.", path, cfg->num_experts_per_tok,
                        cfg->num_experts);
    for (int l = 0; l < RL_MAX_MOE_LAYERS; l++)
        if ((l + 1) % step == 0) cfg->moe_layers[l / 64] |= 1ull << (l % 64);
    json_t *dense = json_object_get(root, "mlp_only_layers"), *v;
    size_t i;
    if (dense && !json_is_null(dense) && !json_is_array(dense))
        return rl_error(err, RL_EMODEL, "%s: \"mlp_only_layers\" must be a list of layer "
                        "numbers. Restore config.json from the model's repository.", path);
    json_array_foreach(dense, i, v) {
        json_int_t l = json_is_integer(v) ? json_integer_value(v) : -1;
        if (l < 0 || l >= RL_MAX_MOE_LAYERS)
            return rl_error(err, RL_EMODEL, "%s: mlp_only_layers[%zu] must be a layer number "
                            "(0 to num_hidden_layers - 1). Restore config.json from the "
                            "model's repository.", path, i);
        cfg->moe_layers[l / 64] &= ~(1ull << (l % 64));
    }
    return 0;
}

/* The family of model_type / architectures, and its switches. */
static int modelcfg_get_family(json_t *root, const char *path, rlModelConfig *cfg,
                               rlError *err) {
    const char *type = json_string_value(json_object_get(root, "model_type"));
    json_t *archs = json_object_get(root, "architectures");
    const char *first = json_string_value(json_array_get(archs, 0));
    if (!type)
        return rl_error(err, RL_EMODEL,
                        "%s has no \"model_type\" string, so it is not a Hugging Face "
                        "transformers config. Point redlm at a model directory downloaded from "
                        "the Hugging Face hub of one of: %s.", path, SUPPORTED);
    const struct modelcfgFamily *f = NULL;
    for (size_t i = 0; i < N_FAMILIES; i++)
        if (!strcmp(type, FAMILIES[i].model_type)) f = &FAMILIES[i];
    if (!f)
        return rl_error(err, RL_EMODEL,
                        "%s: model_type \"%s\"%s%s%s is not supported: redlm runs %s. Use a "
                        "checkpoint of one of those families.", path, type,
                        first ? " (" : "", first ? first : "", first ? ")" : "", SUPPORTED);
    if (archs && !json_is_null(archs)) {
        size_t i;
        json_t *a;
        int found = 0;
        json_array_foreach(archs, i, a) {
            found |= json_is_string(a) && !strcmp(json_string_value(a), f->architecture);
        }
        for (size_t k = 0; !found && first && k < N_FAMILIES; k++)
            if (!strcmp(first, FAMILIES[k].architecture))
                return rl_error(err, RL_EMODEL,
                                "%s: architecture %s does not go with model_type \"%s\" (whose "
                                "architecture is %s): the config is inconsistent. Restore it "
                                "from the model's repository.", path, first, type,
                                f->architecture);
        if (!found)
            return rl_error(err, RL_EMODEL,
                            "%s: architecture %s is not supported: redlm runs %s (text "
                            "generation) only. Use the causal-LM checkpoint of the model.",
                            path, first ? first : "(not a list of names)", SUPPORTED);
    }
    snprintf(cfg->architecture, sizeof(cfg->architecture), "%s", f->architecture);
    cfg->qk_norm = f->qk_norm;
    return modelcfg_get_switch(root, path, f->qkv_bias, &cfg->qkv_bias, err) ||
           modelcfg_get_switch(root, path, f->o_bias, &cfg->o_bias, err) ||
           modelcfg_get_switch(root, path, f->mlp_bias, &cfg->mlp_bias, err) ||
           (f->moe.on && modelcfg_get_moe(root, path, f, cfg, err))
               ? -1 : 0;
}

/* A rope parameter: a positive finite number; absent or null gives def, or
 * an error when def < 0 (required for this rope type). */
static int modelcfg_get_rope_real(json_t *rs, const char *path, const char *what,
                                  const char *type, const char *key, double def, double *out,
                                  rlError *err) {
    json_t *v = json_object_get(rs, key);
    if (!v || json_is_null(v)) {
        if (def >= 0) { *out = def; return 0; }
        return rl_error(err, RL_EMODEL, "%s: %s of type \"%s\" has no \"%s\", which that "
                        "type needs. Restore config.json from the model's repository (or copy "
                        "the rope_scaling block its README gives).", path, what, type, key);
    }
    double x = json_is_number(v) ? json_number_value(v) : NAN;
    if (!(x > 0 && x < 1e12))
        return rl_error(err, RL_EMODEL, "%s: %s.%s must be a positive number. Restore "
                        "config.json from the model's repository.", path, what, key);
    *out = x;
    return 0;
}

/* YaRN's attention factor when the config gives none (get_mscale). */
static double modelcfg_yarn_mscale(double factor, double mscale) {
    return factor <= 1 ? 1.0 : 0.1 * mscale * log(factor) + 1.0;
}

/* rope_scaling (transformers 4) or rope_parameters (5), as Hugging Face's
 * modeling_rope_utils reads them: "rope_type" or the older "type"; the
 * top-level original_max_position_embeddings wins over the block's, which
 * defaults to max_position_embeddings.  The usable context of a scaled
 * model is extended as vLLM does (YaRN: original x factor, linear:
 * max_position_embeddings x factor), so a Qwen2.5 config with the YaRN block
 * its README gives runs past 32K. */
static int modelcfg_get_rope(json_t *root, const char *path, rlModelConfig *cfg, rlError *err) {
    rlRopeScaling *r = &cfg->rope_scaling;
    memset(r, 0, sizeof(*r));
    const char *keys[] = {"rope_scaling", "rope_parameters"}, *what = NULL;
    json_t *rs = NULL;
    for (int k = 0; k < 2 && !what; k++) {
        json_t *v = json_object_get(root, keys[k]);
        if (!v || json_is_null(v)) continue;
        if (!json_is_object(v))
            return rl_error(err, RL_EMODEL, "%s: \"%s\" must be an object or null. Restore "
                            "config.json from the model's repository.", path, keys[k]);
        rs = v, what = keys[k];
    }
    double partial = 1;
    json_t *pr = json_object_get(root, "partial_rotary_factor");
    if (rs && !pr) pr = json_object_get(rs, "partial_rotary_factor");
    if (pr && !json_is_null(pr) && (!json_is_number(pr) || (partial = json_number_value(pr)) != 1))
        return rl_error(err, RL_EMODEL, "%s: partial_rotary_factor %g is unsupported: redlm "
                        "rotates whole heads (factor 1) only.", path, partial);
    if (!rs) return 0;
    json_t *tv = json_object_get(rs, "rope_type");
    if (!tv || json_is_null(tv)) tv = json_object_get(rs, "type");
    if (tv && !json_is_null(tv) && !json_is_string(tv))
        return rl_error(err, RL_EMODEL, "%s: %s.rope_type must be a string such as \"yarn\" or "
                        "\"llama3\". Restore config.json from the model's repository.", path,
                        what);
    const char *type = json_string_value(tv);
    if (!type || !strcmp(type, "default")) return 0;

    double orig = cfg->max_position_embeddings;
    json_t *top = json_object_get(root, "original_max_position_embeddings");
    int have_orig = top && !json_is_null(top);
    if (have_orig ? modelcfg_get_real(root, path, "original_max_position_embeddings", 0, 1e12,
                                      &orig, err)
                  : modelcfg_get_rope_real(rs, path, what, type,
                                           "original_max_position_embeddings", orig, &orig, err))
        return -1;
    json_t *block_orig = json_object_get(rs, "original_max_position_embeddings");
    have_orig |= block_orig && !json_is_null(block_orig);  /* null is absent, as above */
    r->original_max_position = orig;
    if (modelcfg_get_rope_real(rs, path, what, type, "factor", -1, &r->factor, err)) return -1;
    double context = cfg->max_position_embeddings;

    if (!strcmp(type, "linear")) {
        r->type = RL_ROPE_LINEAR;
        context *= r->factor;
    } else if (!strcmp(type, "yarn")) {
        r->type = RL_ROPE_YARN;
        json_t *beta_fast = json_object_get(rs, "beta_fast"), *beta_slow = json_object_get(rs, "beta_slow");
        /* Hugging Face reads them with `or`: a missing, null or zero value
         * takes the paper's 32 and 1; anything but a number fails there. */
        if ((beta_fast && !json_is_null(beta_fast) && !json_is_number(beta_fast)) ||
            (beta_slow && !json_is_null(beta_slow) && !json_is_number(beta_slow)))
            return rl_error(err, RL_EMODEL, "%s: %s.beta_fast and beta_slow must be numbers. "
                            "Restore config.json from the model's repository.", path, what);
        r->beta_fast = json_is_number(beta_fast) && json_number_value(beta_fast) ? json_number_value(beta_fast) : 32;
        r->beta_slow = json_is_number(beta_slow) && json_number_value(beta_slow) ? json_number_value(beta_slow) : 1;
        json_t *trunc = json_object_get(rs, "truncate");
        if (trunc && !json_is_null(trunc) && !json_is_boolean(trunc))
            return rl_error(err, RL_EMODEL, "%s: %s.truncate must be true or false.", path, what);
        r->truncate = !json_is_false(trunc);
        double mscale = 0, mscale_all = 0;
        if (modelcfg_get_rope_real(rs, path, what, type, "attention_factor", 0,
                                   &r->attention_factor, err) ||
            modelcfg_get_rope_real(rs, path, what, type, "mscale", 0, &mscale, err) ||
            modelcfg_get_rope_real(rs, path, what, type, "mscale_all_dim", 0, &mscale_all, err))
            return -1;
        if (r->attention_factor == 0)
            r->attention_factor = mscale && mscale_all
                                      ? modelcfg_yarn_mscale(r->factor, mscale) /
                                            modelcfg_yarn_mscale(r->factor, mscale_all)
                                      : modelcfg_yarn_mscale(r->factor, 1);
        context = (have_orig ? orig : context) * r->factor;
    } else if (!strcmp(type, "llama3")) {
        r->type = RL_ROPE_LLAMA3;
        if (modelcfg_get_rope_real(rs, path, what, type, "low_freq_factor", -1,
                                   &r->low_freq_factor, err) ||
            modelcfg_get_rope_real(rs, path, what, type, "high_freq_factor", -1,
                                   &r->high_freq_factor, err))
            return -1;
        if (r->high_freq_factor <= r->low_freq_factor)
            return rl_error(err, RL_EMODEL, "%s: %s high_freq_factor (%g) must be above "
                            "low_freq_factor (%g). Restore config.json from the model's "
                            "repository.", path, what, r->high_freq_factor, r->low_freq_factor);
        /* Required, as Hugging Face and vLLM read it: max_position_embeddings
         * (131072 on Llama 3.1) in its place would move every frequency. */
        if (!have_orig)
            return rl_error(err, RL_EMODEL, "%s: %s of type \"llama3\" has no "
                            "\"original_max_position_embeddings\" (the context the model was "
                            "trained at, 8192 for Llama 3.1), which that type needs. Restore "
                            "config.json from the model's repository.", path, what);
    } else {
        return rl_error(err, RL_EMODEL,
                        "%s: %s of type \"%s\" is unsupported: redlm implements the default, "
                        "\"linear\", \"yarn\" and \"llama3\" rotary embeddings (\"dynamic\" "
                        "NTK rescales with the sequence length, which a paged cache of rotated "
                        "keys cannot follow). Use one of those types, or set \"%s\" to null to "
                        "run the model at its native context length (max_position_embeddings).",
                        path, what, type, what);
    }
    if (context > cfg->max_position_embeddings)
        cfg->max_position_embeddings = context < RL_MAX_DIM ? (int)context : RL_MAX_DIM;
    return 0;
}

/* Refuses the features that change the math redlm implements. */
static int modelcfg_check_features(json_t *root, const char *path, int num_layers, rlError *err) {
    const char *act = json_string_value(json_object_get(root, "hidden_act"));
    json_t *actv = json_object_get(root, "hidden_act");
    if (actv && !json_is_null(actv) && (!act || strcmp(act, "silu") != 0))
        return rl_error(err, RL_EMODEL, "%s: hidden_act \"%s\" is unsupported: redlm implements "
                        "the SiLU MLP (\"silu\") only.", path, act ? act : "?");

    /* HF applies the window only to layers from max_window_layers on. */
    json_t *use = json_object_get(root, "use_sliding_window");
    json_t *win = json_object_get(root, "sliding_window");
    json_t *mwl = json_object_get(root, "max_window_layers");
    int sliding = json_is_true(use) && win && !json_is_null(win) &&
                  !(json_is_integer(mwl) && json_integer_value(mwl) >= num_layers);
    json_t *types = json_object_get(root, "layer_types");
    if (types && !json_is_null(types) && !json_is_array(types))
        return rl_error(err, RL_EMODEL, "%s: \"layer_types\" must be a list of attention kinds, "
                        "one per layer. Restore config.json from the model's repository.", path);
    size_t i;
    json_t *t;
    json_array_foreach(types, i, t) {
        if (!json_is_string(t) || strcmp(json_string_value(t), "full_attention") != 0)
            sliding = 1;
    }
    if (sliding)
        return rl_error(err, RL_EMODEL,
                        "%s: sliding-window attention is enabled (use_sliding_window / "
                        "layer_types) and redlm implements full causal attention only. Set "
                        "\"use_sliding_window\": false in config.json (the released Qwen2.5 "
                        "models ship it off).", path);
    return 0;
}

static int modelcfg_get_dtype(json_t *root, const char *path, rlDtype *out, rlError *err) {
    /* transformers 5 writes "dtype", older versions "torch_dtype". */
    json_t *v = json_object_get(root, "torch_dtype");
    if (!v || json_is_null(v)) v = json_object_get(root, "dtype");
    if (!v || json_is_null(v)) { *out = RL_F32; return 0; }  /* transformers' default */
    const char *s = json_string_value(v);
    if (s && strcmp(s, "bfloat16") == 0) *out = RL_BF16;
    else if (s && (strcmp(s, "float16") == 0 || strcmp(s, "half") == 0)) *out = RL_F16;
    else if (s && (strcmp(s, "float32") == 0 || strcmp(s, "float") == 0)) *out = RL_F32;
    else
        return rl_error(err, RL_EMODEL, "%s: torch_dtype \"%s\" is unsupported: redlm reads "
                        "bfloat16, float16 and float32 checkpoints.", path, s ? s : "?");
    return 0;
}

/* Fills cfg from a parsed config.json; path is only for messages. */
static int modelcfg_parse(json_t *root, const char *path, rlModelConfig *cfg, rlError *err) {
    memset(cfg, 0, sizeof(*cfg));
    cfg->bos_id = -1;
    if (modelcfg_get_family(root, path, cfg, err)) return -1;
    if (modelcfg_get_dim(root, path, "hidden_size", -1, &cfg->hidden_size, err) ||
        modelcfg_get_dim(root, path, "num_hidden_layers", -1, &cfg->num_layers, err) ||
        modelcfg_get_dim(root, path, "num_attention_heads", -1, &cfg->num_heads, err) ||
        modelcfg_get_dim(root, path, "num_key_value_heads", cfg->num_heads,
                         &cfg->num_kv_heads, err) ||
        modelcfg_get_dim(root, path, "intermediate_size", -1, &cfg->intermediate_size, err) ||
        modelcfg_get_dim(root, path, "vocab_size", -1, &cfg->vocab_size, err) ||
        modelcfg_get_dim(root, path, "max_position_embeddings", 32768,
                         &cfg->max_position_embeddings, err))
        return -1;
    if (cfg->num_layers > RL_MAX_LAYERS)
        return rl_error(err, RL_EMODEL, "%s: num_hidden_layers %d is more than the %d layers "
                        "redlm runs (released models have under 200): the config is damaged. "
                        "Restore it from the model's repository.", path, cfg->num_layers,
                        RL_MAX_LAYERS);
    if (cfg->num_experts > 0 && cfg->num_layers > RL_MAX_MOE_LAYERS)
        return rl_error(err, RL_EMODEL, "%s: %d layers of a mixture of experts; redlm runs "
                        "MoE models of up to %d layers.", path, cfg->num_layers,
                        RL_MAX_MOE_LAYERS);
    if (cfg->num_heads % cfg->num_kv_heads != 0)
        return rl_error(err, RL_EMODEL, "%s: num_attention_heads (%d) is not a multiple of "
                        "num_key_value_heads (%d), so query heads cannot share KV heads evenly. "
                        "The config is damaged: restore it from the model's repository.",
                        path, cfg->num_heads, cfg->num_kv_heads);
    json_t *hd = json_object_get(root, "head_dim");
    if ((!hd || json_is_null(hd)) && cfg->hidden_size % cfg->num_heads != 0)
        return rl_error(err, RL_EMODEL, "%s: hidden_size (%d) is not a multiple of "
                        "num_attention_heads (%d) and there is no \"head_dim\" key to say "
                        "the head size. Restore config.json from the model's repository.",
                        path, cfg->hidden_size, cfg->num_heads);
    if (modelcfg_get_dim(root, path, "head_dim", cfg->hidden_size / cfg->num_heads,
                         &cfg->head_dim, err))
        return -1;
    if (cfg->head_dim % 2 != 0 || (int64_t)cfg->head_dim * cfg->num_heads > RL_MAX_DIM)
        return rl_error(err, RL_EMODEL, "%s: head_dim %d with %d heads is not a usable shape "
                        "(rotary embeddings need an even head size). Restore config.json from "
                        "the model's repository.", path, cfg->head_dim, cfg->num_heads);
    double h = cfg->hidden_size;
    double attn = (double)cfg->head_dim * (cfg->num_heads * 2.0 + cfg->num_kv_heads * 2.0);
    double mlp = 3.0 * cfg->intermediate_size +
                 3.0 * ((double)cfg->num_experts * cfg->moe_intermediate_size +
                        cfg->shared_expert_size);
    double n_params = (double)cfg->num_layers * h * (attn + mlp) + 2.0 * cfg->vocab_size * h;
    if (n_params > RL_MAX_PARAMS)
        return rl_error(err, RL_EMODEL, "%s: these sizes (hidden_size %d, num_hidden_layers %d, "
                        "intermediate_size %d, vocab_size %d%s) make %.3g parameters, more than "
                        "any model redlm can hold: the config is damaged. Restore it from the "
                        "model's repository.", path, cfg->hidden_size, cfg->num_layers,
                        cfg->intermediate_size, cfg->vocab_size,
                        cfg->num_experts ? ", the experts'" : "", n_params);
    if (modelcfg_get_real(root, path, "rope_theta", 10000.0, 1e12, &cfg->rope_theta, err) ||
        modelcfg_get_real(root, path, "rms_norm_eps", 1e-6, 1.0, &cfg->rms_norm_eps, err))
        return -1;
    json_t *params = json_object_get(root, "rope_parameters");
    if (json_is_object(params) &&
        modelcfg_get_real(params, path, "rope_theta", cfg->rope_theta, 1e12,
                          &cfg->rope_theta, err))
        return -1;
    json_t *tie = json_object_get(root, "tie_word_embeddings");
    if (tie && !json_is_null(tie) && !json_is_boolean(tie))
        return rl_error(err, RL_EMODEL, "%s: \"tie_word_embeddings\" must be true or false.",
                        path);
    cfg->tie_word_embeddings = json_is_true(tie);
    if (modelcfg_get_rope(root, path, cfg, err) ||
        modelcfg_get_dtype(root, path, &cfg->torch_dtype, err) ||
        modelcfg_check_features(root, path, cfg->num_layers, err) ||
        modelcfg_get_bos(root, path, cfg, err) ||
        quant_config_parse(root, path, cfg->num_layers, &cfg->quant, err))
        return -1;
    if (quant_check_moe(cfg, path, err)) return -1;
    json_t *eos = json_object_get(root, "eos_token_id");
    if (eos && !json_is_null(eos) && modelcfg_get_eos(eos, path, cfg, err)) return -1;
    return 0;
}

/* generation_config.json overrides the config's EOS and BOS ids. */
static int modelcfg_apply_generation(const char *path, rlModelConfig *cfg, rlError *err) {
    int missing;
    json_t *gen = modelcfg_read_json(path, &missing, err);
    if (!gen) return missing ? 0 : -1;
    int rc = 0;
    json_t *eos = json_object_get(gen, "eos_token_id");
    if (eos && !json_is_null(eos)) rc = modelcfg_get_eos(eos, path, cfg, err);
    if (rc == 0) rc = modelcfg_get_bos(gen, path, cfg, err);
    json_decref(gen);
    return rc;
}

/* The config file and the generation_config.json (or "") a model path
 * names; buffers of 4096 bytes.  Returns whether path is a directory, or -1. */
static int modelcfg_paths(const char *path, char *cfg_path, char *gen_path, rlError *err) {
    struct stat st;
    int is_dir = stat(path, &st) == 0 && S_ISDIR(st.st_mode);
    size_t plen = strlen(path);
    if (plen + 32 > 4096)
        return rl_error(err, RL_EMODEL, "model path is too long (%zu bytes)", plen);
    if (is_dir) {
        snprintf(cfg_path, 4096, "%s/config.json", path);
        snprintf(gen_path, 4096, "%s/generation_config.json", path);
    } else {
        snprintf(cfg_path, 4096, "%s", path);
        const char *slash = strrchr(path, '/');
        const char *base = slash ? slash + 1 : path;
        if (strcmp(base, "config.json") == 0)
            snprintf(gen_path, 4096, "%.*sgeneration_config.json",
                     (int)(base - path), path);
        else
            gen_path[0] = '\0';
    }
    return is_dir;
}

/* One sampling default: a number in [lo, hi] (lo itself excluded when
 * lo_open), or absent / null. */
static int modelcfg_gen_number(json_t *gen, const char *path, const char *key, double lo,
                               int lo_open, double hi, unsigned bit, double *out,
                               unsigned *set, rlError *err) {
    json_t *v = json_object_get(gen, key);
    if (!v || json_is_null(v)) return 0;
    double x = json_number_value(v);
    if (!json_is_number(v) || x < lo || (lo_open && x == lo) || x > hi)
        return rl_error(err, RL_EMODEL, "%s: \"%s\" must be a number in %c%g, %g]; fix the "
                        "file, or start with --generation-config vllm to ignore it", path, key,
                        lo_open ? '(' : '[', lo, hi);
    *out = x;
    *set |= bit;
    return 0;
}

int modelcfg_sampling_defaults(const char *path, rlSamplingDefaults *d, rlError *err) {
    memset(d, 0, sizeof(*d));
    char cfg_path[4096], gen_path[4096];
    if (modelcfg_paths(path, cfg_path, gen_path, err) < 0) return -1;
    if (!gen_path[0]) return 0;
    int missing;
    json_t *gen = modelcfg_read_json(gen_path, &missing, err);
    if (!gen) return missing ? 0 : -1;
    double top_k = 0, max_new = 0;
    int rc = modelcfg_gen_number(gen, gen_path, "temperature", 0, 0, 1e6, RL_DEFAULT_TEMPERATURE,
                                 &d->temperature, &d->set, err) ||
             modelcfg_gen_number(gen, gen_path, "top_p", 0, 1, 1, RL_DEFAULT_TOP_P, &d->top_p,
                                 &d->set, err) ||
             modelcfg_gen_number(gen, gen_path, "top_k", -1, 0, 1 << 30, RL_DEFAULT_TOP_K, &top_k,
                                 &d->set, err) ||
             modelcfg_gen_number(gen, gen_path, "min_p", 0, 0, 1, RL_DEFAULT_MIN_P, &d->min_p,
                                 &d->set, err) ||
             modelcfg_gen_number(gen, gen_path, "repetition_penalty", 0, 1, 1e6,
                                 RL_DEFAULT_REPETITION_PENALTY, &d->repetition_penalty, &d->set,
                                 err) ||
             modelcfg_gen_number(gen, gen_path, "max_new_tokens", 1, 0, 1e9,
                                 RL_DEFAULT_MAX_TOKENS, &max_new, &d->set, err);
    json_decref(gen);
    if (rc) return -1;
    const char *whole = top_k != (int)top_k ? "top_k" : max_new != (int)max_new ? "max_new_tokens" : NULL;
    if (whole)
        return rl_error(err, RL_EMODEL, "%s: \"%s\" must be a whole number; fix the file, or start "
                        "with --generation-config vllm to ignore it", gen_path, whole);
    d->max_tokens = (int)max_new;
    d->top_k = top_k > 0 ? (int)top_k : 0; /* -1 and 0 are off, as in vLLM */
    return 0;
}

int modelcfg_load(const char *path, rlModelConfig *cfg, rlError *err) {
    char cfg_path[4096], gen_path[4096];
    int is_dir = modelcfg_paths(path, cfg_path, gen_path, err);
    if (is_dir < 0) return -1;
    int missing;
    json_t *root = modelcfg_read_json(cfg_path, &missing, err);
    if (!root) {
        if (missing && is_dir)
            return rl_error(err, RL_EMODEL,
                            "%s has no config.json, so it is not a Hugging Face model "
                            "directory. Download the whole model repository (config.json, "
                            "generation_config.json, *.safetensors), e.g. `huggingface-cli "
                            "download Qwen/Qwen2.5-0.5B-Instruct --local-dir DIR`.", path);
        if (missing)
            return rl_error(err, RL_EMODEL,
                            "%s does not exist. Pass a model directory, or a config.json for "
                            "--load-format dummy (e.g. tests/fixtures/configs/qwen2.5-0.5b.json).",
                            path);
        return -1;
    }
    int rc = modelcfg_parse(root, cfg_path, cfg, err);
    json_decref(root);
    if (rc == 0 && gen_path[0]) rc = modelcfg_apply_generation(gen_path, cfg, err);
    return rc;
}

int modelcfg_dtype(const rlModelConfig *cfg, const char *name, rlDtype *out, rlError *err) {
    if (!name || !strcmp(name, "auto")) *out = cfg->torch_dtype == RL_F32 ? RL_BF16 : cfg->torch_dtype;
    else if (!strcmp(name, "bf16")) *out = RL_BF16;
    else if (!strcmp(name, "fp16")) *out = RL_F16;
    else if (!strcmp(name, "fp32")) *out = RL_F32;
    else return rl_error(err, RL_EUSAGE, "--dtype %s: expected auto, bf16, fp16 or fp32", name);
    return 0;
}
