/* test_variants.c: checkpoints of shapes, families and formats the fixtures
 * do not have, run through `redlm generate` and held to the fixtures' bar:
 * prompt logprobs within 1e-3, the first generated token's top-5 logprobs
 * within 1e-3, greedy tokens equal up to the first step whose margin is
 * under 1e-2, with all prompts in one batch and one at a time (and, for
 * some, on CPU ranks at an uneven TP).
 *
 * The oracle is qwen2_ref.h, a double-precision forward that is first
 * checked here against every fixture's reference.json (Hugging Face's
 * numbers: Qwen2, Qwen3, YaRN, Llama 3).  Each variant is random weights
 * rounded to its dtype, written as config.json + generation_config.json +
 * safetensors (one file, or shards with an index) in a temporary directory.
 * Between them they vary the family (Qwen2, Qwen3 with its q/k norms, Llama
 * with and without attention_bias / mlp_bias), head counts, head sizes (an
 * explicit head_dim unequal to hidden/heads too), GQA ratios from 1 to 8,
 * rope_theta, rope scaling (linear, YaRN with and without truncation, with
 * an mscale pair, llama3) over prompts longer than the original context,
 * rms_norm_eps, tied and untied LM heads, bf16 / fp16 / fp32 and one to four
 * files, and mixtures of experts (Qwen2-MoE and Qwen3-MoE: 3, 5 and 8
 * experts, top 1 to 3, renormalised or not, with and without the shared
 * expert, dense layers among them) at TP 1, 2, 3 and 3 x 2. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "worker/model/checkpoint.h"
#include "tests/fixture_paths.h"
#include "tests/qwen2_ref.h"
#include "tests/safetensors_writer.h"
#include "tests/tmp_dir.h"

#define N_GEN 24
#define TOL 1e-3
#define MARGIN 1e-2
#define ANCHOR_TOL 1e-5     /* the oracle against Hugging Face's float64 */
#define MAX_LEN 512

static int reliable_steps(const double *margin, double threshold) {
    int n = 0;
    while (n < N_GEN && margin[n] >= threshold) n++;
    return n;
}

static double kth_best(const double *lp, int n, int k) {
    double prev = INFINITY, best = -INFINITY;
    for (int j = 0; j <= k; j++, prev = best) {
        best = -INFINITY;
        for (int i = 0; i < n; i++)
            if (lp[i] > best && lp[i] < prev) best = lp[i];
    }
    return best;
}

/* The oracle on every fixture prompt of up to 64 tokens against
 * reference.json: prompt logprobs, the whole last log-softmax and greedy
 * tokens (up to a margin the oracle's rounding cannot flip). */
static void anchor_fixture(const char *model) {
    char dir[512], path[600];
    fixture_model_dir(dir, sizeof(dir), model);
    fixture_reference(path, sizeof(path), model);
    rlModelConfig cfg;
    rlError err = {0};
    rlCheckpoint *ck = checkpoint_open(dir, &cfg, &err);
    if (!ck) fail_msg("%s", err.msg);
    refModel m;
    if (ref_load(&m, &cfg, checkpoint_lookup, ck, MAX_LEN, &err)) fail_msg("%s", err.msg);
    json_error_t jerr;
    json_t *ref = json_load_file(path, 0, &jerr), *p;
    assert_non_null(ref);
    size_t k;
    double worst_plp = 0, worst_last = 0;
    int prompts = 0, steps = 0;
    json_array_foreach(json_object_get(ref, "prompts"), k, p) {
        json_t *ids = json_object_get(p, "ids");
        int n = (int)json_array_size(ids);
        if (n > 64) continue;
        int tokens[64];
        for (int i = 0; i < n; i++) tokens[i] = (int)json_integer_value(json_array_get(ids, (size_t)i));
        refResult r = {0};
        assert_int_equal(ref_run(&m, tokens, n, N_GEN, &r), 0);
        for (int i = 1; i < n; i++)
            worst_plp = fmax(worst_plp, fabs(r.prompt_lp[i] - json_number_value(json_array_get(
                                            json_object_get(p, "prompt_logprobs"), (size_t)i - 1))));
        double *hf = malloc((size_t)cfg.vocab_size * sizeof(double));
        for (int i = 0; i < cfg.vocab_size; i++)
            hf[i] = json_number_value(json_array_get(json_object_get(p, "last_logits"), (size_t)i));
        ref_log_softmax(hf, cfg.vocab_size);
        for (int i = 0; i < cfg.vocab_size; i++) worst_last = fmax(worst_last, fabs(hf[i] - r.last_lp[i]));
        free(hf);
        double margin[N_GEN];
        for (int i = 0; i < N_GEN; i++)
            margin[i] = json_number_value(json_array_get(json_object_get(p, "greedy_margin"), (size_t)i));
        int reliable = reliable_steps(margin, 1e-4);
        for (int i = 0; i < reliable; i++)
            if (r.greedy[i] != json_integer_value(json_array_get(json_object_get(p, "greedy"), (size_t)i)))
                fail_msg("%s %s: oracle greedy token %d differs from reference.json", model,
                         json_string_value(json_object_get(p, "name")), i);
        steps += reliable;
        prompts++;
        ref_result_free(&r);
    }
    printf("oracle vs %s reference.json: %d prompts, prompt logprobs within %.1e, last "
           "log-softmax within %.1e, %d greedy steps equal\n", model, prompts, worst_plp, worst_last,
           steps);
    if (worst_plp > ANCHOR_TOL || worst_last > ANCHOR_TOL)
        fail_msg("%s: the oracle is not Hugging Face's forward", model);
    json_decref(ref);
    ref_free(&m);
    checkpoint_close(ck);
}

static void test_oracle_is_hf(void **state) {
    (void)state;
    for (int i = 0; i < FIXTURE_N_MODELS; i++) anchor_fixture(fixture_models[i]);
}

typedef enum vFamily { V_QWEN2, V_QWEN3, V_LLAMA, V_QWEN2_MOE, V_QWEN3_MOE } vFamily;

/* A mixture of experts as its config writes it (experts 0: dense). */
typedef struct vMoe {
    int experts, top_k, inter, shared, norm_topk, sparse_step;
    int dense_layer;                /* one layer listed in mlp_only_layers (-1: none) */
} vMoe;

/* Rope scaling as a config writes it (type NULL: none). */
typedef struct vRope {
    const char *type;
    double factor, original, beta_fast, beta_slow, mscale, mscale_all_dim, low, high;
    int no_truncate;
} vRope;

typedef struct variant {
    const char *name;
    int hidden, layers, heads, kv_heads, head_dim, explicit_head_dim, inter, vocab, tied;
    double theta, eps;
    rlDtype dtype;
    int files;
    vFamily family;
    int attention_bias, mlp_bias;   /* Qwen3 / Llama keys */
    vRope rope;
    const char *layout;             /* also run on CPU ranks: "--tp 3" ... (NULL: not) */
    vMoe moe;
} variant;

static const variant VARIANTS[] = {
    {"mha-fp32", 64, 2, 4, 4, 16, 0, 160, 512, 0, 1e4, 1e-5, RL_F32, 1, .family = V_QWEN2},
    {"gqa7-hd64-bf16-tied", 896, 2, 14, 2, 64, 0, 384, 600, 1, 1e6, 1e-6, RL_BF16, 3,
     .family = V_QWEN2},
    {"hd80-fp16", 480, 3, 6, 3, 80, 0, 256, 512, 0, 5e5, 1e-5, RL_F16, 2, .family = V_QWEN2},
    {"gqa8-fp32-tied", 128, 4, 8, 1, 16, 0, 96, 1000, 1, 1e4, 1e-6, RL_F32, 4,
     .family = V_QWEN2},
    {"head-dim-key-bf16", 128, 1, 4, 2, 64, 1, 256, 512, 0, 2.5e4, 1e-5, RL_BF16, 1,
     .family = V_QWEN2},
    /* Qwen3: head_dim 128 over hidden 256 / 8 heads, tied, then with attention_bias
     * and YaRN (factor 8 over 48 positions, beta 16 / 2). */
    {"qwen3-hd128-bf16-tied", 256, 2, 8, 4, 128, 1, 384, 512, 1, 1e6, 1e-6, RL_BF16, 1,
     .family = V_QWEN3, .layout = "--tp 3 --pp 2"},
    {"qwen3-bias-yarn-fp16", 192, 2, 6, 2, 64, 1, 256, 512, 0, 1e6, 1e-6, RL_F16, 2,
     .family = V_QWEN3, .attention_bias = 1,
     .rope = {.type = "yarn", .factor = 8, .original = 48, .beta_fast = 16, .beta_slow = 2},
     .layout = "--tp 4"},
    /* Llama: llama3 scaling over a 40-position original context; then every bias
     * (o_proj and down_proj ones on TP rank 0 only) with linear scaling. */
    {"llama3-gqa4-fp32", 128, 2, 8, 2, 16, 0, 192, 512, 0, 5e5, 1e-5, RL_F32, 1,
     .family = V_LLAMA,
     .rope = {.type = "llama3", .factor = 16, .original = 40, .low = 1, .high = 4}},
    {"llama-biases-linear-bf16", 160, 2, 5, 5, 32, 0, 224, 512, 0, 1e4, 1e-5, RL_BF16, 1,
     .family = V_LLAMA, .attention_bias = 1, .mlp_bias = 1,
     .rope = {.type = "linear", .factor = 2.5}, .layout = "--tp 3"},
    /* Qwen2 with YaRN untruncated and an mscale pair (attention factor
     * get_mscale(4, 1) / get_mscale(4, 0.5)). */
    {"qwen2-yarn-mscale-fp32", 96, 2, 6, 3, 16, 0, 128, 512, 0, 1e4, 1e-6, RL_F32, 1,
     .family = V_QWEN2,
     .rope = {.type = "yarn", .factor = 4, .original = 32, .mscale = 1, .mscale_all_dim = 0.5,
              .no_truncate = 1}},
    /* Mixtures of experts: expert counts, top-k, renormalised or not, with and
     * without Qwen2-MoE's shared expert, dense layers among the sparse ones
     * (mlp_only_layers, decoder_sparse_step), expert widths TP 2 and 3 cut
     * unevenly (48 in units of 16 over 2 ranks, 80 over 3). */
    {"qwen3-moe-e5-top3-renorm-bf16", 128, 3, 4, 2, 32, 1, 192, 512, 0, 1e6, 1e-6, RL_BF16, 2,
     .family = V_QWEN3_MOE, .layout = "--tp 2",
     .moe = {5, 3, 48, 0, 1, 1, .dense_layer = 1}},
    {"qwen2-moe-e3-top1-shared-fp32", 96, 2, 6, 2, 16, 0, 160, 512, 0, 1e4, 1e-6, RL_F32, 1,
     .family = V_QWEN2_MOE, .layout = "--tp 3",
     .moe = {3, 1, 80, 96, 0, 1, .dense_layer = -1}},
    {"qwen2-moe-e8-top2-renorm-step2-fp16", 128, 4, 4, 4, 32, 0, 256, 512, 1, 1e6, 1e-6, RL_F16,
     2, .family = V_QWEN2_MOE, .layout = "--tp 3 --pp 2",
     .moe = {8, 2, 80, 64, 1, 2, .dense_layer = -1}},
    {"qwen3-moe-e8-top2-fp32", 64, 2, 4, 4, 16, 1, 128, 512, 0, 1e6, 1e-6, RL_F32, 1,
     .family = V_QWEN3_MOE, .moe = {8, 2, 32, 0, 0, 1, .dense_layer = 0}},
    /* Every expert chosen (top 6 of 6), experts 40 wide over 5 ranks; Qwen2-MoE
     * renormalised with its shared expert, 7 experts over 4 ranks. */
    {"qwen3-moe-e6-top6-tp5-fp32", 80, 2, 5, 5, 16, 0, 96, 512, 0, 1e6, 1e-6, RL_F32, 1,
     .family = V_QWEN3_MOE, .layout = "--tp 5", .moe = {6, 6, 40, 0, 1, 1, .dense_layer = -1}},
    {"qwen2-moe-e7-top4-renorm-shared-bf16", 96, 2, 6, 3, 16, 0, 128, 512, 0, 1e4, 1e-6,
     RL_BF16, 1, .family = V_QWEN2_MOE, .layout = "--tp 4",
     .moe = {7, 4, 24, 40, 1, 1, .dense_layer = -1}},
};

/* The config switches a family and its keys set, as worker/model/modelcfg.c
 * should read them (written out here so a wrong reading shows). */
static void variant_config(const variant *v, rlModelConfig *cfg) {
    *cfg = (rlModelConfig){.hidden_size = v->hidden, .num_layers = v->layers,
                           .num_heads = v->heads, .num_kv_heads = v->kv_heads,
                           .head_dim = v->head_dim, .intermediate_size = v->inter,
                           .vocab_size = v->vocab, .max_position_embeddings = MAX_LEN,
                           .rope_theta = v->theta, .rms_norm_eps = v->eps,
                           .tie_word_embeddings = v->tied, .torch_dtype = v->dtype, .bos_id = -1};
    int qwen2 = v->family == V_QWEN2 || v->family == V_QWEN2_MOE;
    cfg->qkv_bias = qwen2 || v->attention_bias;
    cfg->o_bias = !qwen2 && v->attention_bias;
    cfg->mlp_bias = v->family == V_LLAMA && v->mlp_bias;
    cfg->qk_norm = v->family == V_QWEN3 || v->family == V_QWEN3_MOE;
    const vMoe *e = &v->moe;
    if (e->experts) {
        cfg->num_experts = e->experts, cfg->num_experts_per_tok = e->top_k;
        cfg->moe_intermediate_size = e->inter, cfg->shared_expert_size = e->shared;
        cfg->norm_topk_prob = e->norm_topk;
        for (int l = 0; l < v->layers; l++)
            if ((l + 1) % e->sparse_step == 0 && l != e->dense_layer)
                cfg->moe_layers[l / 64] |= 1ull << (l % 64);
    }
    const vRope *r = &v->rope;
    rlRopeScaling *s = &cfg->rope_scaling;
    if (!r->type) return;
    s->type = !strcmp(r->type, "linear") ? RL_ROPE_LINEAR
              : !strcmp(r->type, "yarn") ? RL_ROPE_YARN : RL_ROPE_LLAMA3;
    s->factor = r->factor;
    s->original_max_position = r->original;
    s->beta_fast = r->beta_fast ? r->beta_fast : 32;
    s->beta_slow = r->beta_slow ? r->beta_slow : 1;
    s->truncate = !r->no_truncate;
    s->low_freq_factor = r->low, s->high_freq_factor = r->high;
    double m = r->mscale ? 0.1 * r->mscale * log(r->factor) + 1 : 0;
    double all = r->mscale_all_dim ? 0.1 * r->mscale_all_dim * log(r->factor) + 1 : 0;
    s->attention_factor = m && all ? m / all : 0.1 * log(r->factor) + 1;
}

static const int PROMPT_LENS[] = {1, 5, 16, 17, 40, 97};
#define N_PROMPTS ((int)(sizeof(PROMPT_LENS) / sizeof(PROMPT_LENS[0])))

static uint64_t next_random(uint64_t *s) {
    *s ^= *s << 13, *s ^= *s >> 7, *s ^= *s << 17;
    return *s;
}

static double uniform(uint64_t *s) {   /* [-1, 1) */
    return (double)(next_random(s) >> 11) / (double)(1ull << 52) - 1;
}

/* A tensor of rows x cols (cols 0: a vector) drawn as base + amp * U(-1, 1). */
static void add_tensor(WModel *m, const variant *v, const char *name, int64_t rows, int64_t cols,
                       double base, double amp, uint64_t *rng) {
    WTensor *t = &m->t[m->n++];
    snprintf(t->name, sizeof(t->name), "%s", name);
    snprintf(t->dtype, sizeof(t->dtype), "%s", dtype_tag(v->dtype));
    t->ndim = cols ? 2 : 1;
    t->shape[0] = rows, t->shape[1] = cols;
    size_t n = (size_t)rows * (size_t)(cols ? cols : 1), size = rl_dtype_size(v->dtype);
    t->nbytes = n * size;
    t->data = malloc(t->nbytes);
    for (size_t i = 0; i < n; i++) {
        float f = (float)(base + amp * uniform(rng));
        uint16_t h = v->dtype == RL_BF16 ? rl_f32_to_bf16(f) : rl_f32_to_f16(f);
        memcpy(t->data + i * size, v->dtype == RL_F32 ? (void *)&f : (void *)&h, size);
    }
}

/* Random weights the size Hugging Face's initialisation gives, norms
 * around 1 and biases large enough to matter. */
static void make_weights(const variant *v, const rlModelConfig *c, WModel *m, uint64_t seed) {
    uint64_t rng = seed;
    int64_t H = v->hidden, I = v->inter, Q = (int64_t)v->heads * v->head_dim;
    int64_t KV = (int64_t)v->kv_heads * v->head_dim, D = v->head_dim;
    double in_h = sqrt(3.0 / (double)H), in_q = sqrt(3.0 / (double)Q), in_i = sqrt(3.0 / (double)I);
    add_tensor(m, v, "model.embed_tokens.weight", v->vocab, H, 0, 0.2, &rng);
    for (int l = 0; l < v->layers; l++) {
        int moe = rl_layer_is_moe(c, l), dense = !moe, shared = moe && c->shared_expert_size;
        int64_t MI = moe ? c->shared_expert_size : I, E = c->num_experts;
        int64_t EI = c->moe_intermediate_size;
        double in_mi = sqrt(3.0 / (double)(MI ? MI : 1)), in_e = sqrt(3.0 / (double)(EI ? EI : 1));
        struct { const char *name; int64_t rows, cols; double base, amp; int present; } w[] = {
            {"input_layernorm.weight", H, 0, 1, 0.35, 1},
            {"self_attn.q_proj.weight", Q, H, 0, in_h, 1},
            {"self_attn.q_proj.bias", Q, 0, 0, 0.8, c->qkv_bias},
            {"self_attn.k_proj.weight", KV, H, 0, in_h, 1},
            {"self_attn.k_proj.bias", KV, 0, 0, 0.8, c->qkv_bias},
            {"self_attn.v_proj.weight", KV, H, 0, in_h, 1},
            {"self_attn.v_proj.bias", KV, 0, 0, 0.8, c->qkv_bias},
            {"self_attn.q_norm.weight", D, 0, 1, 0.35, c->qk_norm},
            {"self_attn.k_norm.weight", D, 0, 1, 0.35, c->qk_norm},
            {"self_attn.o_proj.weight", H, Q, 0, in_q, 1},
            {"self_attn.o_proj.bias", H, 0, 0, 0.3, c->o_bias},
            {"post_attention_layernorm.weight", H, 0, 1, 0.35, 1},
            {"mlp.gate_proj.weight", I, H, 0, in_h, dense},
            {"mlp.gate_proj.bias", I, 0, 0, 0.3, dense && c->mlp_bias},
            {"mlp.up_proj.weight", I, H, 0, in_h, dense},
            {"mlp.up_proj.bias", I, 0, 0, 0.3, dense && c->mlp_bias},
            {"mlp.down_proj.weight", H, I, 0, in_i, dense},
            {"mlp.down_proj.bias", H, 0, 0, 0.3, dense && c->mlp_bias},
            /* The router wide enough that the top k are seldom near a tie. */
            {"mlp.gate.weight", E, H, 0, 4 * in_h, moe},
            {"mlp.shared_expert.gate_proj.weight", MI, H, 0, in_h, shared},
            {"mlp.shared_expert.up_proj.weight", MI, H, 0, in_h, shared},
            {"mlp.shared_expert.down_proj.weight", H, MI, 0, in_mi, shared},
            {"mlp.shared_expert_gate.weight", 1, H, 0, 2 * in_h, shared},
        };
        for (size_t i = 0; i < sizeof(w) / sizeof(w[0]); i++) {
            if (!w[i].present) continue;
            char name[128];
            snprintf(name, sizeof(name), "model.layers.%d.%s", l, w[i].name);
            add_tensor(m, v, name, w[i].rows, w[i].cols, w[i].base, w[i].amp, &rng);
        }
        for (int64_t e = 0; moe && e < E; e++) {
            const char *part[] = {"gate_proj", "up_proj", "down_proj"};
            for (int i = 0; i < 3; i++) {
                char name[128];
                snprintf(name, sizeof(name), "model.layers.%d.mlp.experts.%lld.%s.weight", l,
                         (long long)e, part[i]);
                add_tensor(m, v, name, i < 2 ? EI : H, i < 2 ? H : EI, 0, i < 2 ? in_h : in_e,
                           &rng);
            }
        }
    }
    add_tensor(m, v, "model.norm.weight", H, 0, 1, 0.35, &rng);
    if (!v->tied) add_tensor(m, v, "lm_head.weight", v->vocab, H, 0, 2 * in_h, &rng);
}

static int wmodel_lookup(void *ctx, const char *name, rlTensorView *out, rlError *err) {
    const WModel *m = ctx;
    for (int i = 0; i < m->n; i++) {
        const WTensor *t = &m->t[i];
        if (strcmp(t->name, name) != 0) continue;
        out->dtype = !strcmp(t->dtype, "BF16") ? RL_BF16 : !strcmp(t->dtype, "F16") ? RL_F16 : RL_F32;
        out->ndim = t->ndim;
        memcpy(out->shape, t->shape, sizeof(out->shape));
        out->data = t->data;
        return 0;
    }
    snprintf(err->msg, sizeof(err->msg), "no tensor %s", name);
    return -1;
}

static void write_json(const char *dir, const char *file, json_t *root) {
    char path[1024];
    snprintf(path, sizeof(path), "%s/%s", dir, file);
    assert_int_equal(json_dump_file(root, path, JSON_INDENT(2)), 0);
    json_decref(root);
}

/* The checkpoint directory Hugging Face's save_pretrained would write. */
static void write_checkpoint(const char *dir, const variant *v, const WModel *m) {
    assert_int_equal(mkdir(dir, 0755), 0);
    const char *dtype = v->dtype == RL_BF16 ? "bfloat16" : v->dtype == RL_F16 ? "float16" : "float32";
    static const char *const arch[] = {"Qwen2ForCausalLM", "Qwen3ForCausalLM", "LlamaForCausalLM",
                                       "Qwen2MoeForCausalLM", "Qwen3MoeForCausalLM"};
    static const char *const type[] = {"qwen2", "qwen3", "llama", "qwen2_moe", "qwen3_moe"};
    json_t *cfg = json_pack(
        "{s:[s], s:s, s:s, s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:f, s:f, s:b, s:s, s:i, s:i, s:b}",
        "architectures", arch[v->family], "model_type", type[v->family], "hidden_act", "silu",
        "hidden_size", v->hidden, "intermediate_size", v->inter, "num_hidden_layers", v->layers,
        "num_attention_heads", v->heads, "num_key_value_heads", v->kv_heads, "vocab_size", v->vocab,
        "max_position_embeddings", MAX_LEN, "rope_theta", v->theta, "rms_norm_eps", v->eps,
        "tie_word_embeddings", v->tied, "torch_dtype", dtype, "bos_token_id", v->vocab - 2,
        "eos_token_id", v->vocab - 1, "use_sliding_window", 0);
    if (v->explicit_head_dim) json_object_set_new(cfg, "head_dim", json_integer(v->head_dim));
    if (v->family == V_QWEN3 || v->family == V_QWEN3_MOE || v->family == V_LLAMA)
        json_object_set_new(cfg, "attention_bias", json_boolean(v->attention_bias));
    const vMoe *e = &v->moe;
    if (e->experts) {
        json_t *dense = json_array();
        if (e->dense_layer >= 0) json_array_append_new(dense, json_integer(e->dense_layer));
        json_t *keys = json_pack("{s:i, s:i, s:i, s:b, s:i, s:o}", "num_experts", e->experts,
                                 "num_experts_per_tok", e->top_k, "moe_intermediate_size",
                                 e->inter, "norm_topk_prob", e->norm_topk,
                                 "decoder_sparse_step", e->sparse_step, "mlp_only_layers", dense);
        json_object_update(cfg, keys);
        json_decref(keys);
        if (v->family == V_QWEN2_MOE)
            json_object_set_new(cfg, "shared_expert_intermediate_size", json_integer(e->shared));
    }
    if (v->family == V_LLAMA) json_object_set_new(cfg, "mlp_bias", json_boolean(v->mlp_bias));
    const vRope *r = &v->rope;
    if (r->type) {
        /* The hub's spellings: Qwen2.5's README writes "type", Llama 3.1 "rope_type". */
        json_t *rs = json_pack("{s:s, s:f}", v->family == V_LLAMA ? "rope_type" : "type", r->type,
                               "factor", r->factor);
        if (r->original)
            json_object_set_new(rs, "original_max_position_embeddings", json_integer((int)r->original));
        if (r->beta_fast) json_object_set_new(rs, "beta_fast", json_real(r->beta_fast));
        if (r->beta_slow) json_object_set_new(rs, "beta_slow", json_real(r->beta_slow));
        if (r->mscale) json_object_set_new(rs, "mscale", json_real(r->mscale));
        if (r->mscale_all_dim) json_object_set_new(rs, "mscale_all_dim", json_real(r->mscale_all_dim));
        if (r->no_truncate) json_object_set_new(rs, "truncate", json_false());
        if (r->low) json_object_set_new(rs, "low_freq_factor", json_real(r->low));
        if (r->high) json_object_set_new(rs, "high_freq_factor", json_real(r->high));
        json_object_set_new(cfg, "rope_scaling", rs);
    }
    write_json(dir, "config.json", cfg);
    write_json(dir, "generation_config.json", json_pack("{s:i}", "eos_token_id", v->vocab - 1));
    if (v->files > 1) {
        write_shards(dir, m, v->files);
        return;
    }
    char path[1024];
    snprintf(path, sizeof(path), "%s/model.safetensors", dir);
    write_tensors(path, m, 0, m->n);
}

/* `redlm generate` on dir (layout: more flags, e.g. "--tp 3", or NULL);
 * output to out, its stderr to out.err. */
static void run_generate(const char *dir, const char *in, const char *out, int max_num_seqs,
                         const char *layout) {
    const char *redlm = getenv("REDLM") ? getenv("REDLM") : "build/redlm";
    char errpath[1100];
    snprintf(errpath, sizeof(errpath), "%s.err", out);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        if (!freopen(errpath, "w", stderr)) _exit(126);
        char seqs[16];
        snprintf(seqs, sizeof(seqs), "%d", max_num_seqs);
        const char *argv[32] = {redlm, "generate", "--model", dir, "--threads", "2", "--input",
                                in, "--output", out, "--max-num-seqs", seqs};
        int argc = 12;
        char flags[64];
        snprintf(flags, sizeof(flags), "%s", layout ? layout : "");
        for (char *f = strtok(flags, " "); f && argc < 30; f = strtok(NULL, " ")) argv[argc++] = f;
        if (layout) argv[argc++] = "--kv-cache-memory", argv[argc++] = "16MiB";
        execv(redlm, (char *const *)argv);
        _exit(127);
    }
    int status;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        char line[512];
        FILE *f = fopen(errpath, "r");
        while (f && fgets(line, sizeof(line), f)) fputs(line, stderr);
        if (f) fclose(f);
        fail_msg("redlm generate --model %s --max-num-seqs %d %s failed", dir, max_num_seqs,
                 layout ? layout : "");
    }
}

typedef struct worst {
    double plp, top;
    int steps;
} worst;

/* Every result line of out against the oracle's results. */
static void check_results(const char *name, const char *how, const char *out, const int *lens,
                          const refResult *want, int vocab, worst *w) {
    FILE *f = fopen(out, "r");
    assert_non_null(f);
    char *line = NULL;
    size_t cap = 0;
    int seen = 0;
    while (getline(&line, &cap, f) > 0) {
        json_error_t jerr;
        json_t *res = json_loads(line, 0, &jerr);
        if (!res) fail_msg("%s %s: result is not JSON: %s", name, how, line);
        const char *id = json_string_value(json_object_get(res, "id"));
        int k = -1;
        if (!id || sscanf(id, "p%d", &k) != 1 || k < 0 || k >= N_PROMPTS)
            fail_msg("%s %s: unexpected result %s", name, how, line);
        const refResult *r = &want[k];
        json_t *plp = json_object_get(res, "prompt_logprobs");
        assert_int_equal(json_array_size(plp), lens[k]);
        for (int i = 1; i < lens[k]; i++) {
            double d = fabs(json_number_value(json_object_get(json_array_get(plp, (size_t)i), "logprob")) -
                            r->prompt_lp[i]);
            if (d > TOL) fail_msg("%s %s p%d: prompt logprob %d off by %g", name, how, k, i, d);
            w->plp = fmax(w->plp, d);
        }
        json_t *top = json_object_get(json_array_get(json_object_get(res, "logprobs"), 0), "top");
        assert_int_equal(json_array_size(top), 5);
        for (int j = 0; j < 5; j++) {
            json_t *pair = json_array_get(top, (size_t)j);
            int id = (int)json_integer_value(json_array_get(pair, 0));
            double lp = json_number_value(json_array_get(pair, 1));
            assert_true(id >= 0 && id < vocab);
            double d = fmax(fabs(lp - r->last_lp[id]), fabs(lp - kth_best(r->last_lp, vocab, j)));
            if (d > TOL) fail_msg("%s %s p%d: top-%d logprob off by %g", name, how, k, j + 1, d);
            w->top = fmax(w->top, d);
        }
        json_t *ids = json_object_get(res, "token_ids");
        assert_int_equal(json_array_size(ids), N_GEN);
        int n = reliable_steps(r->margin, MARGIN);
        for (int i = 0; i < n; i++)
            if (json_integer_value(json_array_get(ids, (size_t)i)) != r->greedy[i])
                fail_msg("%s %s p%d: greedy token %d is %lld, the oracle's %d", name, how, k, i,
                         (long long)json_integer_value(json_array_get(ids, (size_t)i)), r->greedy[i]);
        w->steps += n;
        seen++;
        json_decref(res);
    }
    free(line);
    fclose(f);
    assert_int_equal(seen, N_PROMPTS);
}

static void run_variant(const variant *v, uint64_t seed) {
    WModel *m = calloc(1, sizeof(*m));
    rlModelConfig cfg;
    variant_config(v, &cfg);
    make_weights(v, &cfg, m, seed);
    char dir[512], in[600], out[600];
    snprintf(dir, sizeof(dir), "%s/%s", g_tmp, v->name);
    write_checkpoint(dir, v, m);

    refModel ref;
    rlError err = {0};
    if (ref_load(&ref, &cfg, wmodel_lookup, m, MAX_LEN, &err)) fail_msg("%s", err.msg);

    snprintf(in, sizeof(in), "%s/requests.jsonl", dir);
    FILE *f = fopen(in, "w");
    assert_non_null(f);
    refResult want[N_PROMPTS];
    uint64_t rng = seed ^ 0x5bd1e995;
    for (int k = 0; k < N_PROMPTS; k++) {
        int ids[128];
        fprintf(f, "{\"id\":\"p%d\",\"prompt_ids\":[", k);
        for (int i = 0; i < PROMPT_LENS[k]; i++) {
            ids[i] = (int)(next_random(&rng) % (uint64_t)(v->vocab - 2));
            fprintf(f, "%s%d", i ? "," : "", ids[i]);
        }
        fprintf(f, "],\"max_tokens\":%d,\"temperature\":0,\"ignore_eos\":true,\"logprobs\":5,"
                   "\"prompt_logprobs\":1}\n", N_GEN);
        memset(&want[k], 0, sizeof(want[k]));
        assert_int_equal(ref_run(&ref, ids, PROMPT_LENS[k], N_GEN, &want[k]), 0);
    }
    assert_int_equal(fclose(f), 0);

    worst w = {0};
    snprintf(out, sizeof(out), "%s/batch.jsonl", dir);
    run_generate(dir, in, out, N_PROMPTS, NULL);
    check_results(v->name, "in one batch", out, PROMPT_LENS, want, v->vocab, &w);
    snprintf(out, sizeof(out), "%s/alone.jsonl", dir);
    run_generate(dir, in, out, 1, NULL);
    check_results(v->name, "one at a time", out, PROMPT_LENS, want, v->vocab, &w);
    int runs = 2;
    if (v->layout) {
        snprintf(out, sizeof(out), "%s/ranks.jsonl", dir);
        run_generate(dir, in, out, N_PROMPTS, v->layout);
        check_results(v->name, v->layout, out, PROMPT_LENS, want, v->vocab, &w);
        runs++;
    }
    printf("%-36s prompt logprobs within %.1e, top-5 within %.1e, %d of %d greedy steps "
           "compared%s%s\n", v->name, w.plp, w.top, w.steps, runs * N_PROMPTS * N_GEN,
           v->layout ? ", also at " : "", v->layout ? v->layout : "");
    /* Most steps must be decisive, or the greedy comparison proves little. */
    assert_true(w.steps >= runs * N_PROMPTS * N_GEN / 2);

    for (int k = 0; k < N_PROMPTS; k++) ref_result_free(&want[k]);
    ref_free(&ref);
    free_tensors(m);
    free(m);
}

static void test_variants(void **state) {
    (void)state;
    for (size_t i = 0; i < sizeof(VARIANTS) / sizeof(VARIANTS[0]); i++)
        run_variant(&VARIANTS[i], 0x9e3779b97f4a7c15ull + i);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_oracle_is_hf),
        cmocka_unit_test(test_variants),
    };
    return cmocka_run_group_tests(tests, tmp_dir_setup, tmp_dir_teardown);
}
