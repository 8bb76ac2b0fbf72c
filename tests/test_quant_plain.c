/* test_quant_plain.c: the path quantized layers take to a GPU, run on the
 * CPU.
 *
 * A backend with upload_quant is handed each linear layer in the plain
 * quantized form (kernels/quant.h), q|k|v and gate|up joined by the model
 * loader.  Here the CPU backend gets such an upload_quant that expands the
 * plain form back to dense fp32 itself (through rl_wq_host_weight and the
 * act-order permutation), so every fixture of models-quant/ runs the
 * loader's plain decoding and joining end to end without a GPU; its prompt
 * logprobs and top-5 must equal those of the CPU's own dequantizing path.
 * The dummy source's shards (--load-format dummy on a GPU) are loaded and
 * run the same way. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/model.h"
#include "worker/model/checkpoint.h"
#include "worker/model/quant.h"
#include "tests/fixture_paths.h"

#define T 12
#define BLOCK 16

static rlBackendOps g_ops;        /* the CPU's, with the three quantized ones */
static const rlBackendOps *g_cpu;
static size_t g_uploaded;         /* plain layers handed over */

static void *plain_upload(rlBackend *be, const rlWqHost *h, float input_scale, size_t *bytes,
                          rlError *err) {
    (void)input_scale;
    size_t n = (size_t)h->n * (size_t)h->k;
    float *dense = malloc(n * sizeof(float));
    if (!dense) return NULL;
    for (int64_t r = 0; r < h->n; r++)
        for (int64_t j = 0; j < h->k; j++)
            dense[r * h->k + (h->perm ? h->perm[j] : j)] = rl_wq_host_weight(h, r, j);
    void *p = g_cpu->alloc(be, n * sizeof(float), err);
    if (p && g_cpu->upload(be, p, RL_F32, dense, RL_F32, n, err)) {
        g_cpu->free(be, p);
        p = NULL;
    }
    free(dense);
    *bytes = n;
    g_uploaded++;
    return p;
}

static void plain_matmul(rlBackend *be, void *out, const void *in, const void *w,
                         const void *bias, int rows, int n, int k) {
    g_cpu->matmul(be, out, in, w, bias, rows, n, k);
}

static void plain_free(rlBackend *be, void *w) { g_cpu->free(be, w); }

static rlBackend *backend(int plain) {
    rlError err = {0};
    rlBackendOptions opt = {.threads = 2};
    rlBackend *be = rl_backend_cpu_create(&opt, &err);
    if (!be) fail_msg("%s", err.msg);
    if (plain) {
        g_cpu = be->ops;
        g_ops = *be->ops;
        g_ops.upload_quant = plain_upload;
        g_ops.matmul_quant = plain_matmul;
        g_ops.free_quant = plain_free;
        be->ops = &g_ops;
    }
    return be;
}

/* One prompt of T tokens, every position scored against the next. */
static void run(const rlModelConfig *cfg, rlTensorLookup src, void *ctx, int plain,
                rlRowResult *out) {
    rlError err = {0};
    rlBackend *be = backend(plain);
    rlShard shard;
    rlModel m;
    if (rl_shard_plan(cfg, 1, 1, NULL, &shard, &err) ||
        rl_model_init(&m, cfg, &shard, be, NULL, NULL, src, ctx, 7, T, T, &err) ||
        be->ops->kv_init(be, shard.n_layers, 2, BLOCK, shard.n_kv_heads, cfg->head_dim, &err))
        fail_msg("%s", err.msg);
    if (plain) assert_true(m.quant_bytes > 0);
    int32_t tokens[T], pos[T], slots[T], start[2] = {0, T}, len[1] = {T}, table[2] = {0, 1};
    rlRowSpec rows[T];
    for (int t = 0; t < T; t++) {
        tokens[t] = (t * 37 + 11) % cfg->vocab_size, pos[t] = t, slots[t] = t;
        rows[t] = (rlRowSpec){.token = t, .target = ((t + 1) * 37 + 11) % cfg->vocab_size,
                              .n_top = 5, .top_p = 1, .repetition = 1};
    }
    rlBatch b = {.n_seqs = 1, .n_tokens = T, .tokens = tokens, .positions = pos,
                 .slots = slots, .seq_start = start, .seq_len = len, .block_tables = table,
                 .max_blocks = 2, .n_rows = T, .rows = rows};
    if (rl_model_forward(&m, &b, out, &err)) fail_msg("%s", err.msg);
    rl_model_free(&m);
    be->ops->destroy(be);
}

static void compare(const char *name, const rlRowResult *a, const rlRowResult *b) {
    double worst = 0;
    for (int t = 0; t < T; t++) {
        worst = fmax(worst, fabs(a[t].target_logprob - b[t].target_logprob));
        for (int i = 0; i < 5; i++) {
            assert_int_equal(a[t].top_ids[i], b[t].top_ids[i]);
            worst = fmax(worst, fabs(a[t].top_logprobs[i] - b[t].top_logprobs[i]));
        }
    }
    print_message("%s: %d positions, plain path within %.1e of the dequantizing one\n", name, T,
                  worst);
    assert_true(worst <= 1e-5);
}

static void test_fixtures(void **state) {
    (void)state;
    for (int i = 0; i < FIXTURE_N_MODELS; i++) {
        if (!strstr(fixture_models[i], "quant")) continue;
        char dir[512];
        rlModelConfig cfg;
        rlError err = {0};
        fixture_model_dir(dir, sizeof(dir), fixture_models[i]);
        rlCheckpoint *c = checkpoint_open(dir, &cfg, &err);
        if (!c) fail_msg("%s", err.msg);
        rlRowResult dense[T], plain[T];
        g_uploaded = 0;
        run(&cfg, checkpoint_lookup, c, 0, dense);
        run(&cfg, checkpoint_lookup, c, 1, plain);
        assert_int_equal(g_uploaded, (size_t)cfg.num_layers * 4);   /* qkv, o, gate|up, down */
        compare(fixture_models[i], dense, plain);
        checkpoint_close(c);
    }
}

/* --load-format dummy --quantization X as a GPU loads it: every layer's
 * linear layers served as plain shards (one per shape, shared), loaded and
 * run. */
static void test_dummy(void **state) {
    (void)state;
    static const char *const methods[] = {"awq", "gptq", "fp8"};
    for (int i = 0; i < 3; i++) {
        char dir[512];
        rlModelConfig cfg;
        rlError err = {0};
        fixture_model_dir(dir, sizeof(dir), "models/qwen2-tiny-hd128");
        if (checkpoint_read_config(dir, &cfg, &err) || quant_apply_flag(&cfg, methods[i], 1, &err))
            fail_msg("%s", err.msg);
        rlQuantDummy d;
        quant_dummy_init(&d, &cfg, 3);
        rlRowResult plain[T];
        g_uploaded = 0;
        run(&cfg, quant_dummy_lookup, &d, 1, plain);
        assert_int_equal(g_uploaded, (size_t)cfg.num_layers * 4);
        for (int t = 0; t < T; t++) assert_true(isfinite(plain[t].target_logprob));
        quant_dummy_free(&d);
        print_message("dummy %s: %d layers loaded quantized and ran\n", methods[i], cfg.num_layers);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fixtures),
        cmocka_unit_test(test_dummy),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
