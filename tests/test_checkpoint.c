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
#include <ftw.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../worker/checkpoint.h"
#include "../worker/safetensors.h"

#define HD128 "qwen2-tiny-hd128"
#define GQA3 "qwen2-tiny-gqa3"
#define SHARD1 "model-00001-of-00002.safetensors"
#define SHARD2 "model-00002-of-00002.safetensors"

static char g_tmp[256];

static const char *fixture(const char *model) {
    static char path[4][1024];
    static int next;
    const char *root = getenv("FIXTURES");
    char *p = path[next++ % 4];
    snprintf(p, sizeof(path[0]), "%s/models/%s", root ? root : "tests/fixtures", model);
    return p;
}

static const char *tmp_path(const char *name) {
    static char path[4][1024];
    static int next;
    char *p = path[next++ % 4];
    snprintf(p, sizeof(path[0]), "%s/%s", g_tmp, name);
    return p;
}

static int rm_one(const char *path, const struct stat *sb, int flag, struct FTW *ftw) {
    (void)sb; (void)flag; (void)ftw;
    return remove(path);
}

static int setup_tmp(void **state) {
    (void)state;
    snprintf(g_tmp, sizeof(g_tmp), "/tmp/rl-test-ckpt-XXXXXX");
    return mkdtemp(g_tmp) ? 0 : -1;
}

static int teardown_tmp(void **state) {
    (void)state;
    return nftw(g_tmp, rm_one, 16, FTW_DEPTH | FTW_PHYS);
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

static void write_text(const char *dir, const char *name, const char *text) {
    char path[2048];
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    fputs(text, f);
    assert_int_equal(fclose(f), 0);
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
    if (c) checkpoint_close(c);
    assert_null(c);
    assert_int_equal(err.code, RL_EMODEL);
    if (!strstr(err.msg, phrase)) fail_msg("expected \"%s\" in: %s", phrase, err.msg);
}

static rlCheckpoint *open_ok(const char *dir, rlModelConfig *cfg) {
    rlError err = {0};
    rlCheckpoint *c = checkpoint_open(dir, cfg, &err);
    if (!c) fail_msg("%s: %s", dir, err.msg);
    return c;
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
    snprintf(path, sizeof(path), "%s/configs/qwen2.5-0.5b.json", root ? root : "tests/fixtures");
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

    if (checkpoint_read_config(fixture(GQA3), &cfg, &err)) fail_msg("%s", err.msg);
    assert_int_equal(cfg.num_heads, 6);
    assert_int_equal(cfg.eos_ids[0], 2002);
}

static void test_directory_missing(void **state) {
    (void)state;
    expect_open_error(tmp_path("no-such-model"), "does not exist");
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
    const char *dir = copy_model(HD128, "llama");
    write_text(dir, "config.json",
               "{\"model_type\": \"llama\", \"architectures\": [\"LlamaForCausalLM\"]}");
    expect_open_error(dir, "model_type \"llama\" is not supported");
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
    expect_open_error(dir, "is truncated: its header places tensor");
    assert_int_equal(truncate(path, 1000), 0);
    expect_open_error(dir, "ends inside its own header");
    assert_int_equal(truncate(path, 5), 0);
    expect_open_error(dir, "too short even for a safetensors header");
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
        cmocka_unit_test(test_shard_missing),
        cmocka_unit_test(test_truncated),
    };
    return cmocka_run_group_tests(tests, setup_tmp, teardown_tmp);
}
