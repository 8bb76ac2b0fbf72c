/* test_checkpoint.c: loading the fixture checkpoints, and one clear error
 * for each way a model directory can be broken.
 *
 * Each failure case makes a broken copy of a good fixture in a fresh
 * temporary directory and checks the error's code and a phrase that only
 * that error uses. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <dirent.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "worker/model/checkpoint.h"
#include "tests/safetensors_writer.h"
#include "tests/tmp_dir.h"

#define HD128 "qwen2-tiny-hd128"
#define GQA3 "qwen2-tiny-gqa3"
#define SHARD1 "model-00001-of-00002.safetensors"
#define SHARD2 "model-00002-of-00002.safetensors"

static const char *fixture(const char *model) {
    static char path[4][1024];
    static int next;
    const char *root = getenv("FIXTURES");
    char *p = path[next++ % 4];
    snprintf(p, sizeof(path[0]), "%s/models/%s", root ? root : "build/fixtures", model);
    return p;
}

static const char *tmp_path(const char *name) {
    static char path[4][1024];
    static int next;
    char *p = path[next++ % 4];
    snprintf(p, sizeof(path[0]), "%s/%s", g_tmp, name);
    return p;
}

static void copy_file(const char *src, const char *dst) {
    FILE *in = fopen(src, "rb"), *out = fopen(dst, "wb");
    assert_non_null(in);
    assert_non_null(out);
    char buf[65536];
    size_t n;
    while ((n = fread(buf, 1, sizeof(buf), in)) > 0) assert_int_equal(fwrite(buf, 1, n, out), n);
    fclose(in);
    assert_int_equal(fclose(out), 0);
}

/* Copies the fixture's files into tmp/name; returns that path. */
static const char *copy_model(const char *model, const char *name) {
    const char *dst = tmp_path(name);
    assert_int_equal(mkdir(dst, 0755), 0);
    DIR *d = opendir(fixture(model));
    assert_non_null(d);
    struct dirent *de;
    while ((de = readdir(d))) {
        if (de->d_name[0] == '.' || strcmp(de->d_name, "reference.json") == 0) continue;
        char s[2048], t[2048];
        snprintf(s, sizeof(s), "%s/%s", fixture(model), de->d_name);
        snprintf(t, sizeof(t), "%s/%s", dst, de->d_name);
        copy_file(s, t);
    }
    closedir(d);
    return dst;
}

static void write_bytes(const char *dir, const char *name, const void *data, size_t n) {
    char path[2048];
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(data, 1, n, f), n);
    assert_int_equal(fclose(f), 0);
}

static void write_text(const char *dir, const char *name, const char *text) {
    write_bytes(dir, name, text, strlen(text));
}

static void remove_file(const char *dir, const char *name) {
    char path[2048];
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    assert_int_equal(unlink(path), 0);
}

/* Opening dir must fail with RL_EMODEL and a message containing phrase. */
static void expect_open_error(const char *dir, const char *phrase) {
    rlError err = {0};
    rlModelConfig cfg;
    rlCheckpoint *c = checkpoint_open(dir, &cfg, &err);
    if (c) {
        checkpoint_close(c);
        fail_msg("%s opened, but \"%s\" was expected", dir, phrase);
    }
    assert_int_equal(err.code, RL_EMODEL);
    if (!strstr(err.msg, phrase)) fail_msg("expected \"%s\" in: %s", phrase, err.msg);
}

static rlCheckpoint *open_ok(const char *dir, rlModelConfig *cfg) {
    rlError err = {0};
    rlCheckpoint *c = checkpoint_open(dir, cfg, &err);
    if (!c) fail_msg("%s: %s", dir, err.msg);
    return c;
}

/* Copies the hd128 fixture to tmp/name with its weights replaced by m. */
static const char *write_model(const char *name, const WModel *m) {
    const char *dir = copy_model(HD128, name);
    char path[2048];
    snprintf(path, sizeof(path), "%s/model.safetensors", dir);
    write_tensors(path, m, 0, m->n);
    return dir;
}

static void read_fixture(const char *model, const char *file, WModel *m) {
    char path[2048];
    snprintf(path, sizeof(path), "%s/%s", fixture(model), file);
    read_tensors(path, m);
}

/* Sets (or with value NULL deletes) one key of a JSON file in dir. */
static void edit_json(const char *dir, const char *file, const char *key, json_t *value) {
    char path[2048];
    snprintf(path, sizeof(path), "%s/%s", dir, file);
    json_error_t jerr;
    json_t *root = json_load_file(path, 0, &jerr);
    assert_non_null(root);
    if (value) json_object_set_new(root, key, value);
    else json_object_del(root, key);
    assert_int_equal(json_dump_file(root, path, JSON_INDENT(2)), 0);
    json_decref(root);
}

/* A copy of hd128 whose config.json has key set to value (NULL: removed). */
static void expect_config_error(const char *name, const char *key, json_t *value,
                                const char *phrase) {
    const char *dir = copy_model(HD128, name);
    edit_json(dir, "config.json", key, value);
    expect_open_error(dir, phrase);
    rlModelConfig cfg;
    rlError err = {0};
    char path[2048];
    snprintf(path, sizeof(path), "%s/config.json", dir);
    assert_int_equal(checkpoint_read_config(path, &cfg, &err), -1);
    if (!strstr(err.msg, phrase)) fail_msg("expected \"%s\" in: %s", phrase, err.msg);
}

static float bf16_value(const void *data, size_t i) {
    uint16_t h;
    memcpy(&h, (const char *)data + 2 * i, 2);
    uint32_t bits = (uint32_t)h << 16;
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

static void test_load_tied_bf16(void **state) {
    (void)state;
    rlModelConfig cfg;
    rlCheckpoint *c = open_ok(fixture(HD128), &cfg);
    assert_int_equal(cfg.hidden_size, 256);
    assert_int_equal(cfg.num_layers, 2);
    assert_int_equal(cfg.num_heads, 2);
    assert_int_equal(cfg.num_kv_heads, 1);
    assert_int_equal(cfg.head_dim, 128);
    assert_int_equal(cfg.intermediate_size, 512);
    assert_int_equal(cfg.vocab_size, 2048);
    assert_int_equal(cfg.max_position_embeddings, 4096);
    assert_true(cfg.rope_theta == 1e6);
    assert_true(cfg.rms_norm_eps == 1e-6);
    assert_int_equal(cfg.tie_word_embeddings, 1);
    assert_int_equal(cfg.torch_dtype, RL_BF16);
    assert_int_equal(cfg.n_eos, 1);
    assert_int_equal(cfg.eos_ids[0], 2002);
    assert_int_equal(cfg.bos_id, 2000);

    rlTensorView v;
    rlError err = {0};
    assert_int_equal(checkpoint_lookup(c, "model.embed_tokens.weight", &v, &err), 0);
    assert_int_equal(v.dtype, RL_BF16);
    assert_int_equal(v.ndim, 2);
    assert_int_equal(v.shape[0], 2048);
    assert_int_equal(v.shape[1], 256);
    assert_true(bf16_value(v.data, 0) == -0.01165771484375f);
    assert_true(bf16_value(v.data, 1) == 0.08056640625f);
    assert_int_equal(checkpoint_lookup(c, "model.norm.weight", &v, &err), 0);
    assert_int_equal(v.ndim, 1);
    assert_int_equal(v.shape[0], 256);
    assert_true(bf16_value(v.data, 0) == 0.99609375f);
    assert_true(bf16_value(v.data, 3) == 0.80078125f);
    assert_int_equal(checkpoint_lookup(c, "model.layers.1.self_attn.k_proj.bias", &v, &err), 0);
    assert_int_equal(v.shape[0], 128);
    /* Tied: the LM head is the embedding, nothing is stored under its name. */
    assert_int_equal(checkpoint_lookup(c, "lm_head.weight", &v, &err), -1);
    assert_int_equal(err.code, RL_EMODEL);
    checkpoint_close(c);
}

static void test_load_sharded_fp16(void **state) {
    (void)state;
    rlModelConfig cfg;
    rlCheckpoint *c = open_ok(fixture(GQA3), &cfg);
    assert_int_equal(cfg.hidden_size, 192);
    assert_int_equal(cfg.num_layers, 3);
    assert_int_equal(cfg.num_heads, 6);
    assert_int_equal(cfg.num_kv_heads, 2);
    assert_int_equal(cfg.head_dim, 32);
    assert_int_equal(cfg.intermediate_size, 352);
    assert_int_equal(cfg.tie_word_embeddings, 0);
    assert_int_equal(cfg.torch_dtype, RL_F16);

    rlTensorView v;
    rlError err = {0};
    assert_int_equal(checkpoint_lookup(c, "model.layers.2.self_attn.q_proj.bias", &v, &err), 0);
    assert_int_equal(v.dtype, RL_F16);
    assert_int_equal(v.shape[0], 192);
    uint16_t h[4];
    memcpy(h, v.data, sizeof(h));
    assert_int_equal(h[0], 0xb238);  /* -0.1943359375 */
    assert_int_equal(h[3], 0xb7f3);
    assert_int_equal(checkpoint_lookup(c, "lm_head.weight", &v, &err), 0);
    assert_int_equal(v.shape[0], 2048);
    assert_int_equal(v.shape[1], 192);
    assert_int_equal(checkpoint_lookup(c, "model.layers.1.self_attn.k_proj.weight", &v, &err), 0);
    assert_int_equal(v.shape[0], 64);
    assert_int_equal(v.shape[1], 192);
    checkpoint_close(c);
}

static void test_read_config_file(void **state) {
    (void)state;
    const char *root = getenv("FIXTURES");
    char path[1024];
    snprintf(path, sizeof(path), "%s/configs/qwen2.5-0.5b.json", root ? root : "build/fixtures");
    rlModelConfig cfg;
    rlError err = {0};
    if (checkpoint_read_config(path, &cfg, &err)) fail_msg("%s", err.msg);
    assert_int_equal(cfg.hidden_size, 896);
    assert_int_equal(cfg.num_layers, 24);
    assert_int_equal(cfg.num_heads, 14);
    assert_int_equal(cfg.num_kv_heads, 2);
    assert_int_equal(cfg.head_dim, 64);
    assert_int_equal(cfg.intermediate_size, 4864);
    assert_int_equal(cfg.vocab_size, 151936);
    assert_int_equal(cfg.max_position_embeddings, 32768);
    assert_int_equal(cfg.tie_word_embeddings, 1);
    assert_int_equal(cfg.n_eos, 1);
    assert_int_equal(cfg.eos_ids[0], 151645);
    assert_int_equal(cfg.bos_id, 151643);

    /* Every real Qwen2.5 shape reads, with the head size HF derives; the
     * Qwen3 ones with their own head_dim of 128, q/k norms and no biases. */
    snprintf(path, sizeof(path), "%s/configs", root ? root : "build/fixtures");
    DIR *d = opendir(path);
    assert_non_null(d);
    struct dirent *de;
    int n = 0;
    while ((de = readdir(d))) {
        if (de->d_name[0] == '.') continue;
        char file[2048];
        snprintf(file, sizeof(file), "%s/%s", path, de->d_name);
        if (checkpoint_read_config(file, &cfg, &err)) fail_msg("%s", err.msg);
        int qwen3 = !strncmp(de->d_name, "qwen3-", 6);
        if (qwen3) assert_int_equal(cfg.head_dim, 128);
        else assert_int_equal(cfg.head_dim * cfg.num_heads, cfg.hidden_size);
        assert_int_equal(cfg.qk_norm, qwen3);
        assert_int_equal(cfg.qkv_bias, !qwen3);
        assert_int_equal(cfg.o_bias + cfg.mlp_bias, 0);
        assert_int_equal(cfg.num_experts, !strcmp(de->d_name, "qwen3-30b-a3b.json")    ? 128
                                          : !strcmp(de->d_name, "qwen2-57b-a14b.json") ? 64
                                                                                       : 0);
        /* AutoAWQ exports in fp16 */
        assert_int_equal(cfg.torch_dtype, cfg.quant.method ? RL_F16 : RL_BF16);
        n++;
    }
    closedir(d);
    assert_int_equal(n, 13);

    if (checkpoint_read_config(fixture(GQA3), &cfg, &err)) fail_msg("%s", err.msg);
    assert_int_equal(cfg.num_heads, 6);
    assert_int_equal(cfg.eos_ids[0], 2002);
}

static void test_directory_missing(void **state) {
    (void)state;
    expect_open_error(tmp_path("no-such-model"), "model directory");
    expect_open_error(tmp_path("no-such-model"), "does not exist");
    rlModelConfig cfg;
    rlError err = {0};
    assert_int_equal(checkpoint_read_config(tmp_path("no-such-model"), &cfg, &err), -1);
    assert_non_null(strstr(err.msg, "model directory"));
    assert_int_equal(checkpoint_read_config(tmp_path("no-such.json"), &cfg, &err), -1);
    assert_int_equal(err.code, RL_EMODEL);
    assert_non_null(strstr(err.msg, "no-such.json does not exist. Pass a model directory"));
}

static void test_config_missing(void **state) {
    (void)state;
    const char *dir = copy_model(HD128, "no-config");
    remove_file(dir, "config.json");
    expect_open_error(dir, "has no config.json");
}

static void test_config_invalid_json(void **state) {
    (void)state;
    const char *dir = copy_model(HD128, "bad-json");
    write_text(dir, "config.json", "{\"model_type\": \"qwen2\", \"hidden_size\": 256,");
    expect_open_error(dir, "is not valid JSON");
}

static void test_config_not_qwen2(void **state) {
    (void)state;
    const char *dir = copy_model(HD128, "gemma");
    write_text(dir, "config.json",
               "{\"model_type\": \"gemma2\", \"architectures\": [\"Gemma2ForCausalLM\"]}");
    expect_open_error(dir, "model_type \"gemma2\" (Gemma2ForCausalLM) is not supported: "
                           "redlm runs Qwen2ForCausalLM");
}

/* The mixtures of experts: their keys read as transformers reads them, bad
 * ones refused naming the key, and the per-expert tensors checked like any
 * other (a wrong expert width names the tensor). */
static void test_config_moe(void **state) {
    (void)state;
    rlModelConfig cfg;
    rlCheckpoint *ck = open_ok(fixture("qwen2-moe-tiny"), &cfg);
    checkpoint_close(ck);
    assert_int_equal(cfg.num_experts, 4);
    assert_int_equal(cfg.num_experts_per_tok, 2);
    assert_int_equal(cfg.moe_intermediate_size, 96);
    assert_int_equal(cfg.shared_expert_size, 256);
    assert_int_equal(cfg.norm_topk_prob, 0);
    assert_int_equal(cfg.qkv_bias, 1);
    assert_true(rl_layer_is_moe(&cfg, 0) && rl_layer_is_moe(&cfg, 1));
    ck = open_ok(fixture("qwen3-moe-tiny"), &cfg);
    checkpoint_close(ck);
    assert_int_equal(cfg.num_experts, 8);
    assert_int_equal(cfg.norm_topk_prob, 1);
    assert_int_equal(cfg.shared_expert_size, 0);
    assert_int_equal(cfg.qk_norm, 1);

    const struct { const char *name, *key; json_t *value; const char *phrase; } bad[] = {
        {"moe-topk", "num_experts_per_tok", json_integer(9),
         "num_experts_per_tok (9) is more than num_experts (8)"},
        {"moe-dense-list", "mlp_only_layers", json_string("0"),
         "\"mlp_only_layers\" must be a list of layer numbers"},
        {"moe-dense-neg", "mlp_only_layers", json_pack("[i]", -1),
         "mlp_only_layers[0] must be a layer number"},
        {"moe-step", "decoder_sparse_step", json_integer(0),
         "\"decoder_sparse_step\" must be an integer"},
        {"moe-width", "moe_intermediate_size", json_integer(64),
         "model.layers.0.mlp.experts.0.gate_proj.weight"},
        {"moe-experts", "num_experts", json_integer(9),
         "\"model.layers.0.mlp.gate.weight\" in"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        const char *dir = copy_model("qwen3-moe-tiny", bad[i].name);
        edit_json(dir, "config.json", bad[i].key, bad[i].value);
        expect_open_error(dir, bad[i].phrase);
    }
    /* A layer listed in mlp_only_layers is dense: it wants mlp.gate_proj. */
    const char *dir = copy_model("qwen3-moe-tiny", "moe-dense");
    edit_json(dir, "config.json", "mlp_only_layers", json_pack("[i]", 1));
    expect_open_error(dir, "\"model.layers.1.mlp.gate_proj.weight\" is missing from the weights "
                           "in");
    expect_open_error(dir, "not a Qwen3MoeForCausalLM checkpoint of this config.json");
    /* Without a shared expert, Qwen2-MoE's shared-expert tensors are extra:
     * the message names the family config.json describes. */
    dir = copy_model("qwen2-moe-tiny", "moe-no-shared");
    edit_json(dir, "config.json", "shared_expert_intermediate_size", json_integer(0));
    expect_open_error(dir, "which a Qwen2MoeForCausalLM model with this config.json does not "
                           "have");
}

/* The families' configs and rope scalings, read as Hugging Face reads them. */
static void test_config_families(void **state) {
    (void)state;
    rlModelConfig cfg;
    rlError err = {0};
    if (checkpoint_read_config(fixture("qwen3-tiny"), &cfg, &err)) fail_msg("%s", err.msg);
    assert_string_equal(cfg.architecture, "Qwen3ForCausalLM");
    assert_int_equal(cfg.head_dim, 96);     /* not 256 / 4 */
    assert_true(cfg.qk_norm && !cfg.qkv_bias && !cfg.o_bias && !cfg.mlp_bias);
    assert_int_equal(cfg.rope_scaling.type, RL_ROPE_DEFAULT);

    if (checkpoint_read_config(fixture("qwen2-tiny-yarn"), &cfg, &err)) fail_msg("%s", err.msg);
    const rlRopeScaling *r = &cfg.rope_scaling;
    assert_int_equal(r->type, RL_ROPE_YARN);
    assert_true(r->factor == 4 && r->original_max_position == 512 && r->beta_fast == 32 &&
                r->beta_slow == 1 && r->truncate);
    assert_true(fabs(r->attention_factor - (0.1 * log(4) + 1)) < 1e-15);
    assert_int_equal(cfg.max_position_embeddings, 2048);
    assert_true(cfg.qkv_bias && !cfg.qk_norm);

    if (checkpoint_read_config(fixture("llama-tiny"), &cfg, &err)) fail_msg("%s", err.msg);
    assert_string_equal(cfg.architecture, "LlamaForCausalLM");
    assert_int_equal(r->type, RL_ROPE_LLAMA3);
    assert_true(r->factor == 8 && r->low_freq_factor == 1 && r->high_freq_factor == 4 &&
                r->original_max_position == 512);
    assert_true(!cfg.qkv_bias && !cfg.o_bias && !cfg.mlp_bias && !cfg.qk_norm);
    assert_int_equal(cfg.max_position_embeddings, 4096);

    /* Qwen2.5's README block: YaRN over max_position_embeddings 32768 opens
     * 4 x 32768 positions; a linear factor multiplies the native context. */
    const char *dir = copy_model("qwen2-tiny-yarn", "qwen25-yarn");
    edit_json(dir, "config.json", "max_position_embeddings", json_integer(32768));
    edit_json(dir, "config.json", "rope_scaling",
              json_pack("{s:f, s:i, s:s}", "factor", 4.0, "original_max_position_embeddings",
                        32768, "type", "yarn"));
    if (checkpoint_read_config(dir, &cfg, &err)) fail_msg("%s", err.msg);
    assert_int_equal(cfg.max_position_embeddings, 131072);
    assert_true(r->original_max_position == 32768);
    /* transformers 5's rope_parameters, an explicit attention factor, an mscale pair. */
    edit_json(dir, "config.json", "rope_scaling", NULL);
    edit_json(dir, "config.json", "rope_parameters",
              json_pack("{s:s, s:f, s:f, s:f, s:f, s:b}", "rope_type", "yarn", "factor", 8.0,
                        "rope_theta", 5e5, "attention_factor", 1.5, "beta_fast", 0.0,
                        "truncate", 0));
    if (checkpoint_read_config(dir, &cfg, &err)) fail_msg("%s", err.msg);
    assert_true(cfg.rope_theta == 5e5 && r->factor == 8 && r->attention_factor == 1.5 &&
                r->beta_fast == 32 && !r->truncate && r->original_max_position == 32768);
    edit_json(dir, "config.json", "rope_parameters",
              json_pack("{s:s, s:f, s:f, s:f}", "rope_type", "yarn", "factor", 40.0, "mscale",
                        0.707, "mscale_all_dim", 1.0));
    if (checkpoint_read_config(dir, &cfg, &err)) fail_msg("%s", err.msg);
    assert_true(fabs(r->attention_factor - (0.1 * 0.707 * log(40) + 1) / (0.1 * log(40) + 1)) <
                1e-15);
    edit_json(dir, "config.json", "rope_parameters",
              json_pack("{s:s, s:f}", "type", "linear", "factor", 2.0));
    if (checkpoint_read_config(dir, &cfg, &err)) fail_msg("%s", err.msg);
    assert_int_equal(r->type, RL_ROPE_LINEAR);
    assert_int_equal(cfg.max_position_embeddings, 65536);

    /* attention_bias / mlp_bias switch Llama's biases on (Qwen2 ignores them). */
    dir = copy_model("llama-tiny", "llama-bias");
    edit_json(dir, "config.json", "attention_bias", json_true());
    edit_json(dir, "config.json", "mlp_bias", json_true());
    if (checkpoint_read_config(dir, &cfg, &err)) fail_msg("%s", err.msg);
    assert_true(cfg.qkv_bias && cfg.o_bias && cfg.mlp_bias);
    expect_open_error(dir, "self_attn.q_proj.bias");   /* the checkpoint has no biases */
}

static void test_shard_missing(void **state) {
    (void)state;
    const char *dir = copy_model(GQA3, "shard-missing");
    remove_file(dir, SHARD2);
    expect_open_error(dir, "shard " SHARD2 ", named by model.safetensors.index.json, is missing");
}

static void test_truncated(void **state) {
    (void)state;
    const char *dir = copy_model(HD128, "truncated");
    char path[2048];
    snprintf(path, sizeof(path), "%s/model.safetensors", dir);
    assert_int_equal(truncate(path, 2000000), 0);
    expect_open_error(dir, "is truncated: it is 2000000 bytes long but its header describes 3415256");
    assert_int_equal(truncate(path, 1000), 0);
    expect_open_error(dir, "ends inside its own header");
    assert_int_equal(truncate(path, 5), 0);
    expect_open_error(dir, "too short even for a safetensors header");
}

/* rlTensorVisit: the tensor is byte-identical in both checkpoints. */
typedef struct SamePair { rlCheckpoint *a, *b; } SamePair;
static int same_tensor(void *ctx, const char *name, int ndim, const int64_t *shape) {
    SamePair *p = ctx;
    rlTensorView x, y;
    rlError err = {0};
    if (checkpoint_lookup(p->a, name, &x, &err) || checkpoint_lookup(p->b, name, &y, &err))
        fail_msg("%s", err.msg);
    assert_int_equal(x.ndim, ndim);
    assert_int_equal(y.ndim, ndim);
    size_t n = rl_dtype_size(x.dtype);
    for (int i = 0; i < ndim; i++) {
        assert_int_equal(x.shape[i], shape[i]);
        assert_int_equal(y.shape[i], shape[i]);
        n *= (size_t)shape[i];
    }
    assert_int_equal(x.dtype, y.dtype);
    assert_memory_equal(x.data, y.data, n);
    return 0;
}

static void expect_same_weights(const char *dir_a, const char *dir_b) {
    rlModelConfig ca, cb;
    SamePair p = {open_ok(dir_a, &ca), open_ok(dir_b, &cb)};
    assert_memory_equal(&ca, &cb, sizeof(ca));
    assert_int_equal(rl_model_expected_tensors(&ca, same_tensor, &p), 0);
    checkpoint_close(p.a);
    checkpoint_close(p.b);
}

static void test_one_file_vs_sharded(void **state) {
    (void)state;
    /* The sharded fixture merged into one file. */
    WModel *m = calloc(1, sizeof(*m));
    read_fixture(GQA3, SHARD1, m);
    read_fixture(GQA3, SHARD2, m);
    const char *merged = copy_model(GQA3, "merged");
    remove_file(merged, SHARD1);
    remove_file(merged, SHARD2);
    remove_file(merged, "model.safetensors.index.json");
    char path[2048];
    snprintf(path, sizeof(path), "%s/model.safetensors", merged);
    write_tensors(path, m, 0, m->n);
    expect_same_weights(fixture(GQA3), merged);
    free_tensors(m);

    /* The one-file fixture split into three shards with an index. */
    read_fixture(HD128, "model.safetensors", m);
    const char *split = copy_model(HD128, "split");
    remove_file(split, "model.safetensors");
    write_shards(split, m, 3);
    expect_same_weights(fixture(HD128), split);
    free_tensors(m);
    free(m);
}

static void test_fp32_checkpoint(void **state) {
    (void)state;
    WModel *m = calloc(1, sizeof(*m));
    read_fixture(HD128, "model.safetensors", m);
    for (int i = 0; i < m->n; i++) {
        WTensor *t = &m->t[i];
        size_t n = t->nbytes / 2;
        unsigned char *f = malloc(n * 4);
        for (size_t j = 0; j < n; j++) {
            float x = bf16_value(t->data, j);
            memcpy(f + 4 * j, &x, 4);
        }
        free(t->data);
        t->data = f;
        t->nbytes = n * 4;
        snprintf(t->dtype, sizeof(t->dtype), "F32");
    }
    const char *dir = write_model("fp32", m);
    free_tensors(m);
    free(m);

    rlModelConfig cfg;
    rlCheckpoint *c = open_ok(dir, &cfg);
    assert_int_equal(cfg.torch_dtype, RL_F32);  /* what is stored, not what config.json says */
    rlTensorView v;
    rlError err = {0};
    assert_int_equal(checkpoint_lookup(c, "model.norm.weight", &v, &err), 0);
    assert_int_equal(v.dtype, RL_F32);
    float x[4];
    memcpy(x, v.data, sizeof(x));
    assert_true(x[0] == 0.99609375f);
    assert_true(x[1] == 1.3046875f);
    checkpoint_close(c);
}

static void test_tied_with_stored_head(void **state) {
    (void)state;
    WModel *m = calloc(1, sizeof(*m));
    read_fixture(HD128, "model.safetensors", m);
    WTensor *e = find_tensor(m, "model.embed_tokens.weight");
    WTensor *h = &m->t[m->n++];
    *h = *e;
    snprintf(h->name, sizeof(h->name), "lm_head.weight");
    h->data = malloc(e->nbytes);
    memcpy(h->data, e->data, e->nbytes);
    const char *dir = write_model("tied-head", m);
    free_tensors(m);
    free(m);
    rlModelConfig cfg;
    checkpoint_close(open_ok(dir, &cfg));
}

/* hd128 with one tensor edited by fn, expected to fail with phrase. */
static void expect_tensor_error(const char *name, void (*fn)(WModel *), const char *phrase) {
    WModel *m = calloc(1, sizeof(*m));
    read_fixture(HD128, "model.safetensors", m);
    fn(m);
    const char *dir = write_model(name, m);
    free_tensors(m);
    free(m);
    expect_open_error(dir, phrase);
}

static void rename_norm(WModel *m) {
    snprintf(find_tensor(m, "model.norm.weight")->name, 128, "model.final_norm.weight");
}
static void transpose_k(WModel *m) {
    WTensor *t = find_tensor(m, "model.layers.0.self_attn.k_proj.weight");
    int64_t r = t->shape[0];
    t->shape[0] = t->shape[1];
    t->shape[1] = r;
}
static void add_layer_tensor(WModel *m) {
    WTensor *t = &m->t[m->n++];
    *t = *find_tensor(m, "model.norm.weight");
    snprintf(t->name, sizeof(t->name), "model.layers.2.input_layernorm.weight");
    t->data = malloc(t->nbytes);
    memset(t->data, 0, t->nbytes);
}
static void norm_to_fp32(WModel *m) {
    WTensor *t = find_tensor(m, "model.norm.weight");
    unsigned char *f = calloc(t->nbytes / 2, 4);
    free(t->data);
    t->data = f;
    t->nbytes *= 2;
    snprintf(t->dtype, sizeof(t->dtype), "F32");
}
static void norm_to_i16(WModel *m) {
    snprintf(find_tensor(m, "model.norm.weight")->dtype, 8, "I16");
}

static void test_tensor_renamed(void **state) {
    (void)state;
    expect_tensor_error("renamed", rename_norm, "tensor \"model.norm.weight\" is missing");
}

static void test_tensor_wrong_shape(void **state) {
    (void)state;
    expect_tensor_error("shape", transpose_k,
                        "has shape [256, 128], but config.json implies [128, 256]");
}

static void test_tensor_extra(void **state) {
    (void)state;
    expect_tensor_error("extra", add_layer_tensor,
                        "holds tensor \"model.layers.2.input_layernorm.weight\", which a "
                        "Qwen2ForCausalLM model with this config.json does not have");
}

static void test_mixed_dtypes(void **state) {
    (void)state;
    expect_tensor_error("mixed", norm_to_fp32, "mix dtypes");
}

static void test_unsupported_dtype(void **state) {
    (void)state;
    expect_tensor_error("i16", norm_to_i16,
                        "tensor \"model.norm.weight\" has unsupported dtype I16");
}

/* ---- quantized checkpoints: one broken copy per error ---- */

#define AWQ "../models-quant/qwen2-tiny-gqa3-awq"
#define GPTQ8 "../models-quant/qwen2-tiny-gqa3-gptq8"
#define FP8CH "../models-quant/qwen2-tiny-gqa3-fp8ch"

/* A copy of a models-quant fixture with its tensors edited by edit (may be
 * NULL) and, when key is set, quantization_config.key set to value. */
static const char *quant_copy(const char *model, const char *name, void (*edit)(WModel *),
                              const char *key, json_t *value) {
    const char *dir = copy_model(model, name);
    if (edit) {
        WModel *m = calloc(1, sizeof(*m));
        read_fixture(model, "model.safetensors", m);
        edit(m);
        char path[2048];
        snprintf(path, sizeof(path), "%s/model.safetensors", dir);
        write_tensors(path, m, 0, m->n);
        free_tensors(m);
        free(m);
    }
    if (key) {
        char path[2048];
        snprintf(path, sizeof(path), "%s/config.json", dir);
        json_error_t jerr;
        json_t *root = json_load_file(path, 0, &jerr);
        assert_non_null(root);
        json_object_set_new(json_object_get(root, "quantization_config"), key, value);
        assert_int_equal(json_dump_file(root, path, JSON_INDENT(2)), 0);
        json_decref(root);
    }
    return dir;
}

static void rename_qzeros(WModel *m) {
    snprintf(find_tensor(m, "model.layers.1.mlp.up_proj.qzeros")->name, 128,
             "model.layers.1.mlp.up_proj.qzeroz");
}
static void transpose_scales(WModel *m) {
    WTensor *t = find_tensor(m, "model.layers.0.self_attn.q_proj.scales");
    int64_t r = t->shape[0];
    t->shape[0] = t->shape[1], t->shape[1] = r;
}
static void qweight_as_f32(WModel *m) {
    snprintf(find_tensor(m, "model.layers.2.mlp.down_proj.qweight")->dtype, 8, "F32");
}
static void g_idx_out_of_range(WModel *m) {
    ((int32_t *)find_tensor(m, "model.layers.0.self_attn.q_proj.g_idx")->data)[5] = 99;
}
static void g_idx_shuffled(WModel *m) {
    int32_t *g = (int32_t *)find_tensor(m, "model.layers.0.mlp.up_proj.g_idx")->data;
    int32_t t = g[0];
    g[0] = g[100], g[100] = t;
}
static void zero_point_zero(WModel *m) {
    /* 8-bit v1 zeros hold z - 1: a byte 0xff is z = 0, wrapped. */
    ((uint32_t *)find_tensor(m, "model.layers.1.self_attn.o_proj.qzeros")->data)[3] |= 0xff00;
}
static void fp8_nan(WModel *m) {
    find_tensor(m, "model.layers.2.mlp.gate_proj.weight")->data[77] = 0x7f;
}

static void test_quant_broken(void **state) {
    (void)state;
    rlModelConfig cfg;
    rlCheckpoint *c = open_ok(quant_copy(AWQ, "awq-good", NULL, NULL, NULL), &cfg);
    assert_int_equal(cfg.quant.method, RL_QUANT_AWQ);
    assert_int_equal(cfg.quant.group, 32);
    assert_int_equal(cfg.torch_dtype, RL_F16);
    checkpoint_close(c);
    expect_open_error(quant_copy(AWQ, "awq-missing", rename_qzeros, NULL, NULL),
                      "tensor \"model.layers.1.mlp.up_proj.qzeros\" is missing from the weights");
    expect_open_error(quant_copy(AWQ, "awq-shape", transpose_scales, NULL, NULL),
                      "has shape [192, 6], but config.json (awq int4 g32, layer [192, 192]) "
                      "implies [6, 192]");
    expect_open_error(quant_copy(AWQ, "awq-dtype", qweight_as_f32, NULL, NULL),
                      "is fp32, which a awq int4 g32 checkpoint does not store there (int32 "
                      "expected)");
    expect_open_error(quant_copy(AWQ, "awq-group", NULL, "group_size", json_integer(64)),
                      "its input size (352) is not a multiple of 64");
    expect_open_error(quant_copy(AWQ, "awq-method", NULL, "quant_method", json_string("hqq")),
                      "quantization_config.quant_method = \"hqq\" is not supported");
    expect_open_error(quant_copy(GPTQ8, "gptq-g-idx", g_idx_out_of_range, NULL, NULL),
                      "g_idx[5] = 99 is not a group of this layer");
    expect_open_error(quant_copy(GPTQ8, "gptq-desc-act", g_idx_shuffled, NULL, NULL),
                      "desc_act is false");
    /* Symmetric zeros are never 0; an asymmetric v1 checkpoint's may be. */
    expect_open_error(quant_copy(GPTQ8, "gptq-zero", zero_point_zero, "sym", json_false()),
                      "a zero point of 0 (group 0, column 13) cannot be stored in the GPTQ v1 "
                      "format");
    const char *plain = quant_copy(FP8CH, "fp8-plain", NULL, NULL, NULL);
    edit_json(plain, "config.json", "quantization_config", NULL);
    expect_open_error(plain, "is float8_e4m3fn, quantized data, but config.json's "
                             "quantization_config is absent");
    /* A NaN float8 weight is found when the layer is read. */
    c = open_ok(quant_copy(FP8CH, "fp8-nan", fp8_nan, NULL, NULL), &cfg);
    rlTensorView v = {0};
    rlError err = {0};
    assert_int_equal(checkpoint_lookup(c, "model.layers.2.mlp.gate_proj.weight", &v, &err), -1);
    assert_int_equal(err.code, RL_EMODEL);
    if (!strstr(err.msg, "the float8 weight at [0, 77] is NaN")) fail_msg("%s", err.msg);
    checkpoint_close(c);
}

/* hd128 with model.safetensors replaced by a raw header and zero data. */
static void expect_raw_error(const char *name, const char *header, size_t data_len,
                             const char *phrase) {
    const char *dir = copy_model(HD128, name);
    char path[2048];
    snprintf(path, sizeof(path), "%s/model.safetensors", dir);
    write_raw(path, header, data_len);
    expect_open_error(dir, phrase);
}

static void test_corrupt_header(void **state) {
    (void)state;
    expect_raw_error("not-json", "{\"a\": [1, 2", 16, "corrupt safetensors header: the header is "
                     "not valid JSON");
    expect_raw_error("not-object", "[1, 2]", 16, "corrupt safetensors header: the header is "
                     "not a JSON object");
    expect_raw_error("bad-entry", "{\"x\": {\"dtype\": \"F32\", \"shape\": \"4\", "
                     "\"data_offsets\": [0, 16]}}", 16, "lacks a string \"dtype\"");
    expect_raw_error("bad-span", "{\"x\": {\"dtype\": \"F32\", \"shape\": [3], "
                     "\"data_offsets\": [0, 16]}}", 16, "does not match its shape and dtype");
    expect_raw_error("overlap", "{\"x\": {\"dtype\": \"F32\", \"shape\": [4], "
                     "\"data_offsets\": [0, 16]}, \"y\": {\"dtype\": \"F32\", \"shape\": [4], "
                     "\"data_offsets\": [8, 24]}}", 24, "byte ranges overlap");
    /* an empty tensor at another's start, as writers place one, shares no
     * bytes (the file is read, then found to lack the model's tensors)... */
    expect_raw_error("empty-tensor", "{\"x\": {\"dtype\": \"F32\", \"shape\": [4], "
                     "\"data_offsets\": [0, 16]}, \"y\": {\"dtype\": \"F32\", \"shape\": [0], "
                     "\"data_offsets\": [0, 0]}}", 16, "is missing from the weights");
    /* ...nor hides an overlap of the tensors around it */
    expect_raw_error("overlap-past-empty", "{\"x\": {\"dtype\": \"F32\", \"shape\": [4], "
                     "\"data_offsets\": [0, 16]}, \"y\": {\"dtype\": \"F32\", \"shape\": [0], "
                     "\"data_offsets\": [8, 8]}, \"z\": {\"dtype\": \"F32\", \"shape\": [4], "
                     "\"data_offsets\": [12, 28]}}", 28, "byte ranges overlap");
    expect_raw_error("misaligned", "{\"x\": {\"dtype\": \"F32\", \"shape\": [1], "
                     "\"data_offsets\": [2, 6]}}", 8, "is not aligned to its 4-byte elements");
    expect_raw_error("dup", "{\"x\": {\"dtype\": \"F32\", \"shape\": [1], "
                     "\"data_offsets\": [0, 4]}, \"x\": {\"dtype\": \"F32\", \"shape\": [1], "
                     "\"data_offsets\": [4, 8]}}", 8, "not valid JSON");

    const char *dir = copy_model(HD128, "huge-length");
    char path[2048];
    snprintf(path, sizeof(path), "%s/model.safetensors", dir);
    FILE *f = fopen(path, "r+b");
    assert_non_null(f);
    fwrite("\xff\xff\xff\xff\xff\xff\xff\x7f", 1, 8, f);
    assert_int_equal(fclose(f), 0);
    expect_open_error(dir, "header length field is not plausible");
}

static void test_gguf_given(void **state) {
    (void)state;
    static const char gguf[] = "GGUF\x03\x00\x00\x00 not really a model";
    /* In place of model.safetensors. */
    const char *dir = copy_model(HD128, "gguf-inside");
    write_bytes(dir, "model.safetensors", gguf, sizeof(gguf));
    expect_open_error(dir, "model.safetensors is a GGUF file");
    /* Beside the config, with no safetensors. */
    dir = copy_model(HD128, "gguf-only");
    remove_file(dir, "model.safetensors");
    write_bytes(dir, "qwen2.5-0.5b-instruct-q4_k_m.gguf", gguf, sizeof(gguf));
    expect_open_error(dir, "holds a GGUF file (qwen2.5-0.5b-instruct-q4_k_m.gguf)");
    /* As the model path itself. */
    char path[2048];
    snprintf(path, sizeof(path), "%s/qwen2.5-0.5b-instruct-q4_k_m.gguf", dir);
    expect_open_error(path, "is a GGUF file (llama.cpp's format), not a Hugging Face model");
    rlModelConfig cfg;
    rlError err = {0};
    assert_int_equal(checkpoint_read_config(path, &cfg, &err), -1);
    assert_non_null(strstr(err.msg, "GGUF"));
}

static void test_pytorch_given(void **state) {
    (void)state;
    const char *dir = copy_model(HD128, "torch-only");
    remove_file(dir, "model.safetensors");
    write_text(dir, "pytorch_model.bin", "PK\x03\x04 archive");
    expect_open_error(dir, "holds PyTorch weights (pytorch_model.bin)");
    dir = copy_model(HD128, "torch-inside");
    write_text(dir, "model.safetensors", "PK\x03\x04 archive");
    expect_open_error(dir, "is a PyTorch checkpoint (torch.save zip archive)");
}

static void test_no_weights(void **state) {
    (void)state;
    const char *dir = copy_model(HD128, "no-weights");
    remove_file(dir, "model.safetensors");
    expect_open_error(dir, "has a config.json but no weights");
    dir = copy_model(GQA3, "no-index");
    remove_file(dir, "model.safetensors.index.json");
    expect_open_error(dir, "no model.safetensors.index.json");
}

static void test_index_mismatch(void **state) {
    (void)state;
    const char *dir = copy_model(GQA3, "index-wrong");
    char path[2048];
    snprintf(path, sizeof(path), "%s/model.safetensors.index.json", dir);
    json_error_t jerr;
    json_t *root = json_load_file(path, 0, &jerr);
    assert_non_null(root);
    json_object_set_new(json_object_get(root, "weight_map"), "model.norm.weight",
                        json_string(SHARD1));
    assert_int_equal(json_dump_file(root, path, 0), 0);
    json_decref(root);
    expect_open_error(dir, "places tensor \"model.norm.weight\" in " SHARD1
                      ", but another shard holds it");
    /* a shard name outside the directory, or not a string: the message
     * names the tensor, read from the index while it is still held */
    json_object_set_new(json_object_get(root = json_load_file(path, 0, &jerr), "weight_map"),
                        "model.norm.weight", json_string("../" SHARD2));
    assert_int_equal(json_dump_file(root, path, 0), 0);
    expect_open_error(dir, "tensor \"model.norm.weight\" maps to a bad shard name");
    json_object_set_new(json_object_get(root, "weight_map"), "model.norm.weight",
                        json_integer(2));
    assert_int_equal(json_dump_file(root, path, 0), 0);
    json_decref(root);
    expect_open_error(dir, "tensor \"model.norm.weight\" maps to a bad shard name");
}

static void test_not_a_directory(void **state) {
    (void)state;
    char path[2048];
    snprintf(path, sizeof(path), "%s/model.safetensors", fixture(HD128));
    expect_open_error(path, "is a file, not a model directory");
}

/* Runs as nobody in a child (tests run as root, who may read anything). */
static void expect_error_as_nobody(const char *dir, const char *phrase) {
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        if (setgid(65534) || setuid(65534)) _exit(2);
        rlError err = {0};
        rlModelConfig cfg;
        rlCheckpoint *c = checkpoint_open(dir, &cfg, &err);
        if (c) _exit(3);
        if (err.code != RL_EMODEL || !strstr(err.msg, phrase)) {
            fprintf(stderr, "expected \"%s\" in: %s\n", phrase, err.msg);
            _exit(4);
        }
        _exit(0);
    }
    int status;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
}

static void test_unreadable(void **state) {
    (void)state;
    if (getuid() != 0) skip();  /* setuid needs root */
    assert_int_equal(chmod(g_tmp, 0755), 0);
    const char *dir = copy_model(HD128, "unreadable-dir");
    assert_int_equal(chmod(dir, 0700), 0);
    expect_error_as_nobody(dir, "cannot be read: permission denied");
    assert_int_equal(chmod(g_tmp, 0700), 0);
    expect_error_as_nobody(dir, "cannot be reached: permission denied");
    assert_int_equal(chmod(g_tmp, 0755), 0);
    dir = copy_model(HD128, "unreadable-file");
    char path[2048];
    snprintf(path, sizeof(path), "%s/model.safetensors", dir);
    assert_int_equal(chmod(path, 0600), 0);
    expect_error_as_nobody(dir, "model.safetensors cannot be read: permission denied");
    snprintf(path, sizeof(path), "%s/config.json", dir);
    assert_int_equal(chmod(path, 0600), 0);
    expect_error_as_nobody(dir, "config.json cannot be read: permission denied");
}

static void test_config_values(void **state) {
    (void)state;
    expect_config_error("no-hidden", "hidden_size", NULL, "has no \"hidden_size\"");
    expect_config_error("zero-layers", "num_hidden_layers", json_integer(0),
                        "\"num_hidden_layers\" must be an integer between 1");
    expect_config_error("str-heads", "num_attention_heads", json_string("2"),
                        "\"num_attention_heads\" must be an integer");
    expect_config_error("kv3", "num_key_value_heads", json_integer(3),
                        "is not a multiple of num_key_value_heads");
    expect_config_error("odd-hd", "head_dim", json_integer(127), "rotary embeddings need");
    expect_config_error("eps", "rms_norm_eps", json_real(-1), "\"rms_norm_eps\" must be a "
                        "positive number");
    expect_config_error("gelu", "hidden_act", json_string("gelu"), "hidden_act \"gelu\" is "
                        "unsupported");
    expect_config_error("dynamic", "rope_scaling",
                        json_pack("{s:s, s:f}", "type", "dynamic", "factor", 4.0),
                        "rope_scaling of type \"dynamic\" is unsupported: redlm implements the "
                        "default, \"linear\", \"yarn\" and \"llama3\"");
    expect_config_error("longrope", "rope_parameters",
                        json_pack("{s:s, s:f}", "rope_type", "longrope", "factor", 4.0),
                        "rope_parameters of type \"longrope\" is unsupported");
    expect_config_error("yarn-no-factor", "rope_scaling", json_pack("{s:s}", "type", "yarn"),
                        "rope_scaling of type \"yarn\" has no \"factor\"");
    expect_config_error("llama3-no-low", "rope_scaling",
                        json_pack("{s:s, s:f, s:f}", "rope_type", "llama3", "factor", 8.0,
                                  "high_freq_factor", 4.0),
                        "has no \"low_freq_factor\"");
    expect_config_error("llama3-no-original", "rope_scaling",
                        json_pack("{s:s, s:f, s:f, s:f}", "rope_type", "llama3", "factor", 8.0,
                                  "low_freq_factor", 1.0, "high_freq_factor", 4.0),
                        "of type \"llama3\" has no \"original_max_position_embeddings\"");
    expect_config_error("llama3-null-original", "rope_scaling",
                        json_pack("{s:s, s:f, s:f, s:f, s:n}", "rope_type", "llama3", "factor", 8.0,
                                  "low_freq_factor", 1.0, "high_freq_factor", 4.0,
                                  "original_max_position_embeddings"),
                        "of type \"llama3\" has no \"original_max_position_embeddings\"");
    expect_config_error("llama3-order", "rope_scaling",
                        json_pack("{s:s, s:f, s:f, s:f}", "rope_type", "llama3", "factor", 8.0,
                                  "low_freq_factor", 4.0, "high_freq_factor", 1.0),
                        "high_freq_factor (1) must be above low_freq_factor (4)");
    expect_config_error("rope-type-number", "rope_scaling",
                        json_pack("{s:i, s:f}", "rope_type", 5, "factor", 2.0),
                        "rope_scaling.rope_type must be a string");
    expect_config_error("linear-neg", "rope_scaling",
                        json_pack("{s:s, s:f}", "type", "linear", "factor", -2.0),
                        "rope_scaling.factor must be a positive number");
    /* Sizes no model has: refused before a plan walks 16M layers or wraps size_t. */
    expect_config_error("layers-absurd", "num_hidden_layers", json_integer(1 << 24),
                        "num_hidden_layers 16777216 is more than the 4096 layers");
    expect_config_error("params-absurd", "hidden_size", json_integer(1 << 24),
                        "parameters, more than any model redlm can hold");
    expect_config_error("partial", "partial_rotary_factor", json_real(0.5),
                        "partial_rotary_factor 0.5 is unsupported");
    const char *dir = copy_model(HD128, "sliding");
    edit_json(dir, "config.json", "sliding_window", json_integer(1024));
    edit_json(dir, "config.json", "max_window_layers", json_integer(1));
    edit_json(dir, "config.json", "use_sliding_window", json_true());
    expect_open_error(dir, "sliding-window attention is enabled");
    expect_config_error("layer-types", "layer_types",
                        json_pack("[s, s]", "full_attention", "sliding_attention"),
                        "sliding-window attention is enabled");
    expect_config_error("layer-types-string", "layer_types", json_string("full_attention"),
                        "\"layer_types\" must be a list");
    expect_config_error("yarn-beta", "rope_scaling",
                        json_pack("{s:s, s:f, s:s}", "rope_type", "yarn", "factor", 4.0,
                                  "beta_fast", "32"),
                        "rope_scaling.beta_fast and beta_slow must be numbers");
    expect_config_error("tie", "tie_word_embeddings", json_string("yes"),
                        "\"tie_word_embeddings\" must be true or false");
    expect_config_error("int8", "torch_dtype", json_string("int8"),
                        "torch_dtype \"int8\" is unsupported");
    expect_config_error("arch", "architectures", json_pack("[s]", "Qwen2ForSequenceClassification"),
                        "architecture Qwen2ForSequenceClassification is not supported");
    expect_config_error("no-type", "model_type", NULL, "has no \"model_type\" string");
    expect_config_error("moe", "model_type", json_string("qwen2_moe"),
                        "architecture Qwen2ForCausalLM does not go with model_type \"qwen2_moe\"");
    expect_config_error("arch-family", "model_type", json_string("qwen3"),
                        "architecture Qwen2ForCausalLM does not go with model_type \"qwen3\"");
}

static void test_config_variants(void **state) {
    (void)state;
    /* Defaults, an explicit head_dim, EOS lists, a sliding window that no layer uses. */
    const char *dir = copy_model(HD128, "variants");
    edit_json(dir, "config.json", "rope_theta", NULL);
    edit_json(dir, "config.json", "rms_norm_eps", NULL);
    edit_json(dir, "config.json", "tie_word_embeddings", NULL);
    edit_json(dir, "config.json", "head_dim", json_integer(64));
    edit_json(dir, "config.json", "sliding_window", json_integer(4096));
    edit_json(dir, "config.json", "use_sliding_window", json_true());
    edit_json(dir, "config.json", "max_window_layers", json_integer(2));
    edit_json(dir, "generation_config.json", "eos_token_id", json_pack("[i, i]", 2002, 2000));
    rlModelConfig cfg;
    rlError err = {0};
    if (checkpoint_read_config(dir, &cfg, &err)) fail_msg("%s", err.msg);
    assert_true(cfg.rope_theta == 10000.0);
    assert_true(cfg.rms_norm_eps == 1e-6);
    assert_int_equal(cfg.tie_word_embeddings, 0);
    assert_int_equal(cfg.head_dim, 64);
    assert_int_equal(cfg.n_eos, 2);
    assert_int_equal(cfg.eos_ids[1], 2000);

    /* transformers 5 spells the rope and dtype keys differently. */
    edit_json(dir, "config.json", "rope_parameters",
              json_pack("{s:s, s:f}", "rope_type", "default", "rope_theta", 500000.0));
    edit_json(dir, "config.json", "torch_dtype", NULL);
    edit_json(dir, "config.json", "dtype", json_string("float16"));
    if (checkpoint_read_config(dir, &cfg, &err)) fail_msg("%s", err.msg);
    assert_true(cfg.rope_theta == 500000.0);
    assert_int_equal(cfg.torch_dtype, RL_F16);

    /* Without generation_config.json the config's own EOS id is used. */
    remove_file(dir, "generation_config.json");
    edit_json(dir, "config.json", "eos_token_id", json_integer(7));
    edit_json(dir, "config.json", "bos_token_id", json_null());
    if (checkpoint_read_config(dir, &cfg, &err)) fail_msg("%s", err.msg);
    assert_int_equal(cfg.n_eos, 1);
    assert_int_equal(cfg.eos_ids[0], 7);
    assert_int_equal(cfg.bos_id, -1);

    /* A damaged generation_config.json is reported, not skipped. */
    write_text(dir, "generation_config.json", "{\"eos_token_id\": [");
    assert_int_equal(checkpoint_read_config(dir, &cfg, &err), -1);
    assert_non_null(strstr(err.msg, "generation_config.json is not valid JSON"));

    /* An EOS or BOS id past the vocabulary (2048 ids) could never be
     * sampled: refused, naming the file, the key and the id. */
    static const struct { const char *file, *key, *json, *want; } past[] = {
        {"generation_config.json", "eos_token_id", "[2002, 2048]",
         "generation_config.json: \"eos_token_id\" 2048 is past the vocabulary (vocab_size 2048"},
        {"generation_config.json", "bos_token_id", "151643",
         "generation_config.json: \"bos_token_id\" 151643 is past the vocabulary"},
        {"config.json", "eos_token_id", "4096", "config.json: \"eos_token_id\" 4096 is past the vocabulary"},
        {"config.json", "bos_token_id", "2049", "config.json: \"bos_token_id\" 2049 is past the vocabulary"},
    };
    for (size_t i = 0; i < sizeof(past) / sizeof(past[0]); i++) {
        write_text(dir, "generation_config.json", "{}");
        edit_json(dir, "config.json", "eos_token_id", json_integer(7));
        edit_json(dir, "config.json", "bos_token_id", json_null());
        edit_json(dir, past[i].file, past[i].key, json_loads(past[i].json, JSON_DECODE_ANY, NULL));
        assert_int_equal(checkpoint_read_config(dir, &cfg, &err), -1);
        assert_int_equal(err.code, RL_EMODEL);
        if (!strstr(err.msg, past[i].want)) fail_msg("expected \"%s\" in: %s", past[i].want, err.msg);
    }
    /* The last id of the vocabulary is one. */
    edit_json(dir, "config.json", "bos_token_id", json_integer(2047));
    edit_json(dir, "config.json", "eos_token_id", json_integer(2047));
    if (checkpoint_read_config(dir, &cfg, &err)) fail_msg("%s", err.msg);
    assert_int_equal(cfg.eos_ids[0], 2047);
}

/* Random damage to a small file's header and length field: every open
 * either succeeds or fails with RL_EMODEL, never reads out of bounds (run
 * under ASan by `make test-asan`). */
static void test_header_mutations(void **state) {
    (void)state;
    WModel *m = calloc(1, sizeof(*m));
    read_fixture(GQA3, SHARD2, m);
    WModel *small = calloc(1, sizeof(*small));
    for (int i = 0; i < m->n && small->n < 6; i++)
        if (m->t[i].ndim == 1) small->t[small->n++] = m->t[i];
    char path[2048];
    snprintf(path, sizeof(path), "%s/mutant.safetensors", g_tmp);
    write_tensors(path, small, 0, small->n);
    free(small);
    free_tensors(m);
    free(m);

    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    static unsigned char good[16384], bad[16384];
    size_t len = fread(good, 1, sizeof(good), f);
    fclose(f);
    assert_true(len > 64 && len < sizeof(good));
    size_t hlen = good[0] | (size_t)good[1] << 8;

    uint64_t x = 0x9e3779b97f4a7c15u;
    int opened = 0;
    for (int iter = 0; iter < 1500; iter++) {
        memcpy(bad, good, len);
        size_t n = len;
        int edits = 1 + iter % 4;
        for (int e = 0; e < edits; e++) {
            x ^= x << 13, x ^= x >> 7, x ^= x << 17;
            size_t at = iter % 10 == 0 ? x % 8 : 8 + (x >> 8) % hlen;
            bad[at] = (unsigned char)(x >> 40);
        }
        if (iter % 7 == 0) n = 8 + (x >> 20) % (len - 8);  /* also cut it short */
        FILE *o = fopen(path, "wb");
        assert_non_null(o);
        assert_int_equal(fwrite(bad, 1, n, o), n);
        assert_int_equal(fclose(o), 0);
        rlSafetensors st;
        rlError err = {0};
        if (safetensors_open(&st, path, &err) == 0) {
            for (int i = 0; i < st.n_tensors; i++) {
                const unsigned char *p = st.tensors[i].data;
                assert_true(p >= (const unsigned char *)st.map);
                assert_true(p + st.tensors[i].nbytes <= (const unsigned char *)st.map + n);
            }
            safetensors_close(&st);
            opened++;
        } else {
            assert_int_equal(err.code, RL_EMODEL);
        }
    }
    assert_true(opened < 1500);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_load_tied_bf16),
        cmocka_unit_test(test_load_sharded_fp16),
        cmocka_unit_test(test_read_config_file),
        cmocka_unit_test(test_directory_missing),
        cmocka_unit_test(test_config_missing),
        cmocka_unit_test(test_config_invalid_json),
        cmocka_unit_test(test_config_not_qwen2),
        cmocka_unit_test(test_config_families),
        cmocka_unit_test(test_config_moe),
        cmocka_unit_test(test_shard_missing),
        cmocka_unit_test(test_truncated),
        cmocka_unit_test(test_one_file_vs_sharded),
        cmocka_unit_test(test_fp32_checkpoint),
        cmocka_unit_test(test_tied_with_stored_head),
        cmocka_unit_test(test_tensor_renamed),
        cmocka_unit_test(test_tensor_wrong_shape),
        cmocka_unit_test(test_tensor_extra),
        cmocka_unit_test(test_mixed_dtypes),
        cmocka_unit_test(test_unsupported_dtype),
        cmocka_unit_test(test_quant_broken),
        cmocka_unit_test(test_corrupt_header),
        cmocka_unit_test(test_header_mutations),
        cmocka_unit_test(test_gguf_given),
        cmocka_unit_test(test_pytorch_given),
        cmocka_unit_test(test_no_weights),
        cmocka_unit_test(test_index_mismatch),
        cmocka_unit_test(test_not_a_directory),
        cmocka_unit_test(test_unreadable),
        cmocka_unit_test(test_config_values),
        cmocka_unit_test(test_config_variants),
    };
    return cmocka_run_group_tests(tests, tmp_dir_setup, tmp_dir_teardown);
}
