/* test_quant.c: quantized checkpoints made here, read back exactly.
 *
 * A small packer quantizes a dense fixture into each format with other
 * parameters than the models-quant fixtures (AWQ group 64 / 128, GPTQ 4-bit
 * act-order with a shuffled g_idx, 8-bit over one group (-1), asymmetric
 * gptq_v2 with zero points of 0, block FP8 with fp16 and bf16 scale_inv and
 * blocks that overhang the matrix, compressed-tensors FP8 per tensor with a
 * static input_scale and per channel in bf16), writes it as the tools do
 * (packing orders, z - 1 zeros, dtypes), opens it with the checkpoint
 * loader and checks every quantized layer's weight, whole and as a TP
 * block, equals the packer's own dequantized values bit for bit, both
 * dequantized and in the plain form the GPU path takes (kernels/quant.h).  The
 * packer decodes nothing through the code under test.  Then: config
 * refusals name their key and value, shard plans cut on group boundaries
 * or say why not, and the memory plan of Qwen2.5-72B-AWQ fits 6 x 24 GiB at
 * TP 3 x PP 2. */
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
#include <unistd.h>

#include "kernels/half.h"
#include "kernels/model.h"
#include "worker/model/checkpoint.h"
#include "worker/model/quant.h"
#include "worker/plan/plan.h"
#include "tests/fixture_paths.h"
#include "tests/safetensors_writer.h"
#include "tests/tmp_dir.h"

/* ---- the packer ---- */

typedef struct Variant {
    const char *name, *model;   /* model: a dense fixture */
    const char *qc;             /* quantization_config, JSON */
    rlQuantMethod method;
    int bits, group;            /* group 0: all of K */
    int act_order, asym_v2;
    int fp8_scale, block_n;     /* rlFp8Scale */
    const char *scale_dtype;    /* FP8: "F32", "F16", "BF16" */
    int ct;                     /* compressed-tensors names */
    int static_input;
} Variant;

/* Expected dense weights of every quantized layer, by name. */
typedef struct Expect {
    char name[160];
    int64_t n, k;
    float *w;
} Expect;

typedef struct Packed {
    WModel m;
    Expect e[64];
    int n_e;
} Packed;

static WTensor *add_tensor(WModel *m, const char *name, const char *dtype, int ndim, int64_t r,
                           int64_t c, size_t elem) {
    assert_true(m->n < 256);
    WTensor *t = &m->t[m->n++];
    snprintf(t->name, sizeof(t->name), "%s", name);
    snprintf(t->dtype, sizeof(t->dtype), "%s", dtype);
    t->ndim = ndim, t->shape[0] = r, t->shape[1] = c;
    t->nbytes = (size_t)(ndim == 0 ? 1 : r * (ndim == 2 ? c : 1)) * elem;
    t->data = calloc(1, t->nbytes);
    return t;
}

static float dense_value(const WTensor *t, size_t i) {
    if (!strcmp(t->dtype, "BF16")) return rl_bf16_to_f32(((const uint16_t *)t->data)[i]);
    if (!strcmp(t->dtype, "F16")) return rl_f16_to_f32(((const uint16_t *)t->data)[i]);
    return ((const float *)t->data)[i];
}

/* A scale as the checkpoint stores it (rounded to its dtype) and as a double. */
static double store_scale(void *data, const char *dtype, size_t i, double v) {
    if (!strcmp(dtype, "F16")) {
        uint16_t h = rl_f32_to_f16((float)v);
        ((uint16_t *)data)[i] = h;
        return rl_f16_to_f32(h);
    }
    if (!strcmp(dtype, "BF16")) {
        uint16_t h = rl_f32_to_bf16((float)v);
        ((uint16_t *)data)[i] = h;
        return rl_bf16_to_f32(h);
    }
    ((float *)data)[i] = (float)v;
    return (float)v;
}

/* float8_e4m3fn by its definition: (8 + m) 2^(e - 10), subnormals m 2^-9. */
static double e4m3_value(int b) {
    int e = (b >> 3) & 15, m = b & 7;
    double v = e ? (8 + m) * ldexp(1, e - 10) : m * ldexp(1, -9);
    return b & 0x80 ? -v : v;
}

/* The nearest value: positive codes 0 .. 0x7e grow with the code (0x7f is NaN). */
static int e4m3_encode(double x) {
    double a = fabs(x);
    int lo = 0, hi = 0x7e;
    while (lo < hi) {
        int mid = (lo + hi + 1) / 2;
        if (e4m3_value(mid) <= a) lo = mid;
        else hi = mid - 1;
    }
    int best = lo < 0x7e && e4m3_value(lo + 1) - a < a - e4m3_value(lo) ? lo + 1 : lo;
    return x < 0 && best ? best | 0x80 : best;
}

static int clampi(long v, int lo, int hi) { return v < lo ? lo : v > hi ? hi : (int)v; }

/* One dense layer w [n, k] into v's stored parts under prefix (".../q_proj."). */
static void pack_layer(Packed *P, const Variant *v, const char *prefix, const WTensor *dense) {
    int64_t n = dense->shape[0], k = dense->shape[1];
    Expect *e = &P->e[P->n_e++];
    snprintf(e->name, sizeof(e->name), "%sweight", prefix);
    e->n = n, e->k = k;
    e->w = calloc((size_t)(n * k), sizeof(float));
    char name[160];
#define PART(s) (snprintf(name, sizeof(name), "%s%s", prefix, s), name)
    if (v->method == RL_QUANT_FP8) {
        WTensor *q = add_tensor(&P->m, PART("weight"), "F8_E4M3", 2, n, k, 1);
        int bn = v->fp8_scale == RL_FP8_BLOCK ? v->block_n : v->fp8_scale == RL_FP8_CHANNEL ? 1 : (int)n;
        int bk = v->fp8_scale == RL_FP8_BLOCK ? v->group : (int)k;
        int64_t sr = (n + bn - 1) / bn, sc = (k + bk - 1) / bk;
        size_t es = strcmp(v->scale_dtype, "F32") ? 2 : 4;
        const char *sname = v->ct ? "weight_scale" : "weight_scale_inv";
        WTensor *s = v->fp8_scale == RL_FP8_TENSOR
                         ? add_tensor(&P->m, PART(sname), v->scale_dtype, 1, 1, 0, es)
                         : add_tensor(&P->m, PART(sname), v->scale_dtype, 2, sr, sc, es);
        for (int64_t br = 0; br < sr; br++)
            for (int64_t bc = 0; bc < sc; bc++) {
                double amax = 0;
                for (int64_t r = br * bn; r < (br + 1) * bn && r < n; r++)
                    for (int64_t c = bc * bk; c < (bc + 1) * bk && c < k; c++)
                        amax = fmax(amax, fabs(dense_value(dense, (size_t)(r * k + c))));
                double scale = store_scale(s->data, v->scale_dtype, (size_t)(br * sc + bc),
                                           amax > 0 ? amax / 448 : 1);
                for (int64_t r = br * bn; r < (br + 1) * bn && r < n; r++)
                    for (int64_t c = bc * bk; c < (bc + 1) * bk && c < k; c++) {
                        int b = e4m3_encode(dense_value(dense, (size_t)(r * k + c)) / scale);
                        q->data[r * k + c] = (unsigned char)b;
                        e->w[r * k + c] = (float)(e4m3_value(b) * scale);
                    }
            }
        if (v->static_input) {
            WTensor *is = add_tensor(&P->m, PART("input_scale"), "F32", 1, 1, 0, 4);
            ((float *)is->data)[0] = 0.05f;
        }
        return;
    }
    /* AWQ / GPTQ: group of each input row, scales and zeros per (group, column). */
    int bits = v->bits, pack = 32 / bits, maxq = (1 << bits) - 1, G = v->group ? v->group : (int)k;
    int64_t groups = (k + G - 1) / G;
    int32_t *gidx = malloc((size_t)k * sizeof(int32_t));
    for (int64_t c = 0; c < k; c++) gidx[c] = (int32_t)(c / G);
    if (v->act_order)  /* a shuffled assignment, as desc_act's permutation gives */
        for (int64_t c = k - 1; c > 0; c--) {
            int64_t j = (int64_t)((c * 2654435761u + 7) % (uint64_t)(c + 1));
            int32_t t = gidx[c];
            gidx[c] = gidx[j], gidx[j] = t;
        }
    int awq = v->method == RL_QUANT_AWQ, sym = v->method == RL_QUANT_GPTQ && !v->asym_v2;
    WTensor *qw = awq ? add_tensor(&P->m, PART("qweight"), "I32", 2, k, n / 8, 4)
                      : add_tensor(&P->m, PART("qweight"), "I32", 2, k / pack, n, 4);
    WTensor *qz = add_tensor(&P->m, PART("qzeros"), "I32", 2, groups, n / pack, 4);
    WTensor *sc = add_tensor(&P->m, PART("scales"), "F16", 2, groups, n, 2);
    uint32_t *W = (uint32_t *)qw->data, *Z = (uint32_t *)qz->data;
    static const int order[8] = {0, 2, 4, 6, 1, 3, 5, 7};
    for (int64_t g = 0; g < groups; g++)
        for (int64_t j = 0; j < n; j++) {
            double lo = 0, hi = 0;
            for (int64_t c = 0; c < k; c++)
                if (gidx[c] == g) {
                    double w = dense_value(dense, (size_t)(j * k + c));
                    lo = fmin(lo, w), hi = fmax(hi, w);
                }
            double s = sym ? fmax(fabs(lo), hi) / (maxq / 2) : (hi - lo) / maxq;
            s = store_scale(sc->data, "F16", (size_t)(g * n + j), s > 0 ? s : 1e-3);
            int z = sym ? (maxq + 1) / 2 : clampi(lround(-lo / s), 0, maxq);
            if (v->asym_v2 && j % 16 == 0) z = 0;  /* what v1 cannot store */
            int stored = v->method == RL_QUANT_GPTQ && !v->asym_v2 ? z - 1 : z;
            if (awq) {
                int slot = 0;
                while (order[slot] != j % 8) slot++;
                Z[g * (n / 8) + j / 8] |= (uint32_t)stored << (4 * slot);
            } else {
                Z[g * (n / pack) + j / pack] |= (uint32_t)(stored & maxq) << (bits * (j % pack));
            }
            for (int64_t c = 0; c < k; c++) {
                if (gidx[c] != g) continue;
                double w = dense_value(dense, (size_t)(j * k + c));
                int q = clampi(lround(w / s) + z, 0, maxq);
                if (awq) {
                    int slot = 0;
                    while (order[slot] != j % 8) slot++;
                    W[c * (n / 8) + j / 8] |= (uint32_t)q << (4 * slot);
                } else {
                    W[(c / pack) * n + j] |= (uint32_t)q << (bits * (c % pack));
                }
                e->w[j * k + c] = (float)((q - z) * s);
            }
        }
    if (v->method == RL_QUANT_GPTQ) {
        WTensor *gi = add_tensor(&P->m, PART("g_idx"), "I32", 1, k, 0, 4);
        memcpy(gi->data, gidx, (size_t)k * sizeof(int32_t));
    }
    free(gidx);
#undef PART
}

static int is_linear(const char *name) {
    return strstr(name, "_proj.weight") != NULL;
}

/* The dense fixture packed as v into tmp/v->name; P keeps the expectations. */
static const char *pack_model(const Variant *v, Packed *P) {
    static char dir[512];
    char src[512], path[1024];
    snprintf(dir, sizeof(dir), "%s/%s", g_tmp, v->name);
    assert_int_equal(mkdir(dir, 0755), 0);
    fixture_model_dir(src, sizeof(src), v->model);
    WModel dense = {0};
    const char *files[] = {"model.safetensors", "model-00001-of-00002.safetensors",
                           "model-00002-of-00002.safetensors"};
    for (int i = 0; i < 3; i++) {
        snprintf(path, sizeof(path), "%s/%s", src, files[i]);
        if (access(path, R_OK) == 0) read_tensors(path, &dense);
    }
    memset(P, 0, sizeof(*P));
    for (int i = 0; i < dense.n; i++) {
        WTensor *t = &dense.t[i];
        if (!is_linear(t->name)) {
            P->m.t[P->m.n] = *t;
            P->m.t[P->m.n].data = malloc(t->nbytes);
            memcpy(P->m.t[P->m.n++].data, t->data, t->nbytes);
            continue;
        }
        char prefix[96];
        snprintf(prefix, sizeof(prefix), "%.*s", (int)(strlen(t->name) - strlen("weight")), t->name);
        pack_layer(P, v, prefix, t);
    }
    free_tensors(&dense);
    snprintf(path, sizeof(path), "%s/model.safetensors", dir);
    write_tensors(path, &P->m, 0, P->m.n);
    json_error_t jerr;
    snprintf(path, sizeof(path), "%s/config.json", src);
    json_t *cfg = json_load_file(path, 0, &jerr), *qc = json_loads(v->qc, 0, &jerr);
    assert_non_null(cfg);
    if (!qc) fail_msg("%s: %s", v->qc, jerr.text);
    json_object_set_new(cfg, "quantization_config", qc);
    snprintf(path, sizeof(path), "%s/config.json", dir);
    assert_int_equal(json_dump_file(cfg, path, JSON_INDENT(2)), 0);
    json_decref(cfg);
    return dir;
}

static void packed_free(Packed *P) {
    free_tensors(&P->m);
    for (int i = 0; i < P->n_e; i++) free(P->e[i].w);
}

/* The layer (or the block at r0, c0 of it) in the plain form the GPU path
 * takes equals the packer's dense values bit for bit, through its groups,
 * zero points and act-order permutation. */
static void check_plain(const Variant *v, rlCheckpoint *c, const Expect *e, int64_t r0,
                        int64_t nr, int64_t c0, int64_t nc) {
    rlError err = {0};
    rlTensorView p = {.r0 = r0, .nr = nr, .c0 = c0, .nc = nc, .want_quant = 1};
    if (checkpoint_lookup(c, e->name, &p, &err)) {
        /* an act-order shard may hold uneven parts of groups: said, not run */
        if (v->act_order && nc < e->k && strstr(err.msg, "unequal parts")) return;
        fail_msg("%s %s plain [%lld+%lld, %lld+%lld]: %s", v->name, e->name, (long long)r0,
                 (long long)nr, (long long)c0, (long long)nc, err.msg);
    }
    assert_true(p.quantized);
    assert_int_equal(p.wq.n, nr);
    assert_int_equal(p.wq.k, nc);
    for (int64_t r = 0; r < nr; r++)
        for (int64_t j = 0; j < nc; j++) {
            float got = rl_wq_host_weight(&p.wq, r, j);
            float want = e->w[(r0 + r) * e->k + c0 + (p.wq.perm ? p.wq.perm[j] : j)];
            if (memcmp(&got, &want, sizeof got))
                fail_msg("%s %s plain [%lld, %lld] (block at %lld, %lld): %.9g, packed %.9g",
                         v->name, e->name, (long long)r, (long long)j, (long long)r0,
                         (long long)c0, got, want);
        }
    free(p.owned);
}

/* Every layer whole, and one TP-like block of it, bit for bit (dequantized
 * and in the plain form). */
static void check_variant(const Variant *v) {
    Packed *P = calloc(1, sizeof(*P));
    const char *dir = pack_model(v, P);
    rlModelConfig cfg;
    rlError err = {0};
    rlCheckpoint *c = checkpoint_open(dir, &cfg, &err);
    if (!c) fail_msg("%s: %s", v->name, err.msg);
    assert_int_equal(cfg.quant.method, v->method);
    size_t worst = 0;
    for (int i = 0; i < P->n_e; i++) {
        const Expect *e = &P->e[i];
        rlTensorView t = {0};
        if (checkpoint_lookup(c, e->name, &t, &err)) fail_msg("%s %s: %s", v->name, e->name, err.msg);
        assert_int_equal(t.dtype, RL_F32);
        assert_int_equal(t.shape[0], e->n);
        assert_int_equal(t.shape[1], e->k);
        for (int64_t j = 0; j < e->n * e->k; j++)
            if (memcmp(&((const float *)t.data)[j], &e->w[j], sizeof(float)))
                fail_msg("%s %s [%lld, %lld]: loaded %.9g, packed %.9g", v->name, e->name,
                         (long long)(j / e->k), (long long)(j % e->k),
                         ((const float *)t.data)[j], e->w[j]);
        free(t.owned);
        /* The last third of the rows and the middle columns: a rank's share. */
        rlTensorView b = {.r0 = e->n / 3, .nr = e->n - e->n / 3, .c0 = e->k / 4, .nc = e->k / 2};
        if (checkpoint_lookup(c, e->name, &b, &err)) fail_msg("%s %s: %s", v->name, e->name, err.msg);
        assert_non_null(b.owned);
        for (int64_t r = 0; r < b.nr; r++)
            assert_memory_equal((const float *)b.data + r * b.nc,
                                e->w + (b.r0 + r) * e->k + b.c0, (size_t)b.nc * sizeof(float));
        free(b.owned);
        /* The plain form: whole, and a block cut on the format's units. */
        check_plain(v, c, e, 0, e->n, 0, e->k);
        int64_t nu = rl_quant_n_unit(&cfg.quant), ku = rl_quant_k_unit(&cfg.quant);
        int64_t pr0 = e->n / 3 / nu * nu, pc0 = e->k / 4 / ku * ku;
        int64_t pnc = (e->k / 2 + ku - 1) / ku * ku;
        if (pc0 + pnc > e->k) pnc = e->k - pc0;
        check_plain(v, c, e, pr0, e->n - pr0, pc0, pnc);
        worst += (size_t)(e->n * e->k);
    }
    print_message("%s: %d layers, %zu weights equal the packer's\n", v->name, P->n_e, worst);
    checkpoint_close(c);
    packed_free(P);
    free(P);
}

#define HD128 "models/qwen2-tiny-hd128"
#define GQA3 "models/qwen2-tiny-gqa3"

static void test_awq(void **state) {
    (void)state;
    Variant g64 = {"awq-g64", HD128, "{\"quant_method\":\"awq\",\"bits\":4,\"group_size\":64,"
                   "\"version\":\"gemm\",\"zero_point\":true,\"modules_to_not_convert\":[\"lm_head\"]}",
                   RL_QUANT_AWQ, 4, 64, .act_order = 0};
    Variant g128 = {"awq-g128", HD128, "{\"quant_method\":\"awq\",\"bits\":4,\"group_size\":128,"
                    "\"version\":\"GEMM\",\"zero_point\":true}", RL_QUANT_AWQ, 4, 128, .act_order = 0};
    check_variant(&g64);
    check_variant(&g128);
}

static void test_gptq(void **state) {
    (void)state;
    Variant act = {"gptq4-g128-act", HD128,
                   "{\"quant_method\":\"gptq\",\"bits\":4,\"group_size\":128,\"desc_act\":true,"
                   "\"sym\":true,\"damp_percent\":0.01,\"true_sequential\":true,\"use_exllama\":"
                   "false,\"model_seqlen\":2048,\"block_name_to_quantize\":\"model.layers\"}",
                   RL_QUANT_GPTQ, 4, 128, .act_order = 1};
    Variant one = {"gptq8-one-group", GQA3,
                   "{\"quant_method\":\"gptq\",\"bits\":8,\"group_size\":-1,\"desc_act\":false,"
                   "\"sym\":true,\"checkpoint_format\":\"gptq\"}", RL_QUANT_GPTQ, 8, 0, .act_order = 0};
    Variant v2 = {"gptq4-v2-asym", HD128,
                  "{\"quant_method\":\"gptq\",\"bits\":4,\"group_size\":64,\"desc_act\":false,"
                  "\"sym\":false,\"checkpoint_format\":\"gptq_v2\"}", RL_QUANT_GPTQ, 4, 64,
                  .asym_v2 = 1};
    check_variant(&act);
    check_variant(&one);
    check_variant(&v2);
}

static void test_fp8(void **state) {
    (void)state;
    Variant bf16 = {"fp8-block-bf16", HD128,
                    "{\"quant_method\":\"fp8\",\"fmt\":\"e4m3\",\"activation_scheme\":\"dynamic\","
                    "\"weight_block_size\":[128,128]}", RL_QUANT_FP8, 8, 128,
                    .fp8_scale = RL_FP8_BLOCK, .block_n = 128, .scale_dtype = "BF16"};
    /* 64 x 128 blocks over gqa3's 352-wide MLP: the last blocks overhang. */
    Variant f16 = {"fp8-block-f16", GQA3,
                   "{\"quant_method\":\"fp8\",\"activation_scheme\":\"dynamic\","
                   "\"weight_block_size\":[64,128]}", RL_QUANT_FP8, 8, 128,
                   .fp8_scale = RL_FP8_BLOCK, .block_n = 64, .scale_dtype = "F16"};
    Variant tensor = {"fp8-tensor-static", GQA3,
                      "{\"quant_method\":\"compressed-tensors\",\"format\":\"float-quantized\","
                      "\"quantization_status\":\"compressed\",\"ignore\":[\"lm_head\"],"
                      "\"config_groups\":{\"group_0\":{\"targets\":[\"Linear\"],\"weights\":{"
                      "\"num_bits\":8,\"type\":\"float\",\"strategy\":\"tensor\",\"symmetric\":true,"
                      "\"dynamic\":false},\"input_activations\":{\"num_bits\":8,\"type\":\"float\","
                      "\"strategy\":\"tensor\",\"symmetric\":true,\"dynamic\":false}}}}",
                      RL_QUANT_FP8, 8, 0, .fp8_scale = RL_FP8_TENSOR, .scale_dtype = "F32",
                      .ct = 1, .static_input = 1};
    Variant channel = {"fp8-channel-bf16", HD128,
                       "{\"quant_method\":\"compressed-tensors\",\"format\":\"float-quantized\","
                       "\"ignore\":[\"re:.*lm_head\"],\"config_groups\":{\"g\":{\"targets\":"
                       "[\"Linear\"],\"weights\":{\"num_bits\":8,\"type\":\"float\",\"strategy\":"
                       "\"channel\",\"symmetric\":true,\"dynamic\":false},\"input_activations\":{"
                       "\"num_bits\":8,\"type\":\"float\",\"strategy\":\"token\",\"dynamic\":true}}}}",
                       RL_QUANT_FP8, 8, 0, .fp8_scale = RL_FP8_CHANNEL, .scale_dtype = "BF16",
                       .ct = 1};
    check_variant(&bf16);
    check_variant(&f16);
    check_variant(&tensor);
    check_variant(&channel);
    /* float8_e4m3fn's landmarks, against the loader's decoder. */
    assert_true(rl_fp8_e4m3(0x7e) == 448.0f && rl_fp8_e4m3(0xfe) == -448.0f);
    assert_true(rl_fp8_e4m3(0x08) == ldexpf(1, -6) && rl_fp8_e4m3(0x01) == ldexpf(1, -9));
    assert_true(isnan(rl_fp8_e4m3(0x7f)) && isnan(rl_fp8_e4m3(0xff)));
    for (int b = 0; b < 256; b++)
        if ((b & 0x7f) != 0x7f) assert_true(rl_fp8_e4m3((uint8_t)b) == (float)e4m3_value(b));
}

/* ---- refusals ---- */

static void expect_refused(const char *qc, const char *phrase1, const char *phrase2) {
    json_error_t jerr;
    json_t *root = json_pack("{s:o}", "quantization_config", json_loads(qc, 0, &jerr));
    assert_non_null(root);
    rlQuant q;
    rlError err = {0};
    int rc = quant_config_parse(root, "config.json", 24, &q, &err);
    json_decref(root);
    if (rc == 0) fail_msg("accepted: %s", qc);
    assert_int_equal(err.code, RL_EMODEL);
    if (!strstr(err.msg, phrase1) || !strstr(err.msg, phrase2))
        fail_msg("expected \"%s\" and \"%s\" in: %s", phrase1, phrase2, err.msg);
    assert_non_null(strstr(err.msg, "redlm loads AutoAWQ GEMM"));
}

static void test_refusals(void **state) {
    (void)state;
    expect_refused("{\"quant_method\":\"bitsandbytes\"}", "quant_method", "\"bitsandbytes\"");
    expect_refused("{\"quant_method\":\"awq\",\"version\":\"gemv\"}", "version", "\"gemv\"");
    expect_refused("{\"quant_method\":\"awq\",\"version\":\"marlin\"}", "version", "Marlin");
    expect_refused("{\"quant_method\":\"awq\",\"zero_point\":false}", "zero_point", "false");
    expect_refused("{\"quant_method\":\"awq\",\"bits\":8}", "bits", "8");
    expect_refused("{\"quant_method\":\"awq\",\"modules_to_not_convert\":[\"mlp.down_proj\"]}",
                   "modules_to_not_convert", "\"mlp.down_proj\"");
    expect_refused("{\"quant_method\":\"gptq\",\"bits\":3}", "bits", "3");
    expect_refused("{\"quant_method\":\"gptq\",\"bits\":4,\"checkpoint_format\":\"marlin\"}",
                   "checkpoint_format", "\"marlin\"");
    /* AutoGPTQ's older spelling of a Marlin-packed checkpoint */
    expect_refused("{\"quant_method\":\"gptq\",\"bits\":4,\"is_marlin_format\":true}",
                   "is_marlin_format", "Marlin");
    expect_refused("{\"quant_method\":\"gptq\",\"lm_head\":true}", "lm_head", "true");
    expect_refused("{\"quant_method\":\"gptq\",\"dynamic\":{\"-:.*down\":{}}}", "dynamic", "down");
    expect_refused("{\"quant_method\":\"fp8\",\"fmt\":\"e5m2\",\"weight_block_size\":[128,128]}",
                   "fmt", "e5m2");
    expect_refused("{\"quant_method\":\"fp8\"}", "weight_block_size", "absent");
    expect_refused("{\"quant_method\":\"fp8\",\"weight_block_size\":[128,128],"
                   "\"activation_scheme\":\"static\"}", "activation_scheme", "static");
    expect_refused("{\"quant_method\":\"compressed-tensors\",\"format\":\"pack-quantized\"}",
                   "format", "pack-quantized");
    expect_refused("{\"quant_method\":\"compressed-tensors\",\"format\":\"float-quantized\","
                   "\"kv_cache_scheme\":{\"num_bits\":8},\"config_groups\":{}}",
                   "kv_cache_scheme", "num_bits");
    expect_refused("{\"quant_method\":\"compressed-tensors\",\"format\":\"float-quantized\","
                   "\"config_groups\":{\"g\":{\"weights\":{\"num_bits\":4,\"type\":\"int\","
                   "\"strategy\":\"group\"}}}}", "weights", "\"int\"");
    expect_refused("{\"quant_method\":\"compressed-tensors\",\"format\":\"float-quantized\","
                   "\"ignore\":[\"re:.*mlp.*\"],\"config_groups\":{\"g\":{\"weights\":{"
                   "\"num_bits\":8,\"type\":\"float\",\"strategy\":\"channel\"}}}}",
                   "ignore", "re:.*mlp.*");
    /* one projection named seven times is not all seven */
    expect_refused("{\"quant_method\":\"gptq\",\"modules_in_block_to_quantize\":[[\"mlp.up_proj\","
                   "\"mlp.up_proj\",\"mlp.up_proj\",\"mlp.up_proj\",\"mlp.up_proj\",\"mlp.up_proj\","
                   "\"mlp.up_proj\"]]}", "modules_in_block_to_quantize", "leaves some projections");
    /* block sizes past int (2^32 would wrap to 0, a division by zero) */
    expect_refused("{\"quant_method\":\"compressed-tensors\",\"format\":\"float-quantized\","
                   "\"config_groups\":{\"g\":{\"weights\":{\"num_bits\":8,\"type\":\"float\","
                   "\"strategy\":\"block\",\"block_structure\":[4294967296,128]}}}}",
                   "block_structure", "4294967296");
    expect_refused("{\"quant_method\":\"fp8\",\"weight_block_size\":[128,2147483648]}",
                   "weight_block_size", "2147483648");
    /* the activations' field that is wrong is named */
    expect_refused("{\"quant_method\":\"compressed-tensors\",\"format\":\"float-quantized\","
                   "\"config_groups\":{\"g\":{\"weights\":{\"num_bits\":8,\"type\":\"float\","
                   "\"strategy\":\"channel\"},\"input_activations\":{\"num_bits\":8,\"type\":"
                   "\"float\",\"strategy\":\"token\",\"dynamic\":false}}}}",
                   "input_activations.strategy = \"token\"", "strategy \"tensor\"");
    expect_refused("{\"quant_method\":\"compressed-tensors\",\"format\":\"float-quantized\","
                   "\"config_groups\":{\"g\":{\"weights\":{\"num_bits\":8,\"type\":\"float\","
                   "\"strategy\":\"channel\"},\"input_activations\":{\"num_bits\":4,\"type\":"
                   "\"float\",\"strategy\":\"token\",\"dynamic\":true}}}}",
                   "input_activations.num_bits = 4", "8 bits");
    expect_refused("{\"quant_method\":\"compressed-tensors\",\"format\":\"float-quantized\","
                   "\"config_groups\":{\"g\":{\"weights\":{\"num_bits\":8,\"type\":\"float\","
                   "\"strategy\":\"channel\"},\"input_activations\":{\"num_bits\":8,\"type\":"
                   "\"int\",\"strategy\":\"token\",\"dynamic\":true}}}}",
                   "input_activations.type = \"int\"", "FP8");
    /* values of the wrong type are refused, not read as a default */
    expect_refused("{\"quant_method\":\"awq\",\"version\":2}", "version", "must be a string");
    expect_refused("{\"quant_method\":\"gptq\",\"sym\":\"false\"}", "sym", "true or false");
    expect_refused("{\"quant_method\":\"gptq\",\"desc_act\":\"true\"}", "desc_act",
                   "true or false");
    expect_refused("{\"quant_method\":\"compressed-tensors\",\"format\":\"float-quantized\","
                   "\"config_groups\":{\"g\":{\"weights\":{\"num_bits\":8,\"type\":\"float\","
                   "\"strategy\":\"channel\",\"symmetric\":\"false\"}}}}", "weights",
                   "true or false");
}

/* ---- layouts and the memory plan ---- */

static rlModelConfig config_72b_awq(void) {
    rlModelConfig c = {.hidden_size = 8192, .num_layers = 80, .num_heads = 64, .num_kv_heads = 8,
                       .head_dim = 128, .intermediate_size = 29696, .vocab_size = 152064,
                       .max_position_embeddings = 32768, .rope_theta = 1e6, .rms_norm_eps = 1e-6,
                       .torch_dtype = RL_F16, .architecture = "Qwen2ForCausalLM",
                       .qkv_bias = 1};
    c.quant = (rlQuant){.method = RL_QUANT_AWQ, .bits = 4, .group = 128};
    return c;
}

static void test_shard_cuts(void **state) {
    (void)state;
    rlModelConfig c = config_72b_awq();
    rlError err = {0};
    for (int tp = 1; tp <= 8; tp++) {
        rlShard plan[8];
        if (rl_shard_plan(&c, tp, 1, NULL, plan, &err)) fail_msg("TP %d: %s", tp, err.msg);
        for (int r = 0; r < tp; r++) {
            assert_int_equal(plan[r].mlp0 % 128, 0);                 /* down_proj: whole groups */
            assert_int_equal(plan[r].q_head0 * c.head_dim % 128, 0); /* o_proj: whole groups */
        }
    }
    /* Heads of 64 columns, groups of 128: heads go in pairs... */
    c.head_dim = 64, c.num_heads = 14, c.num_kv_heads = 2;
    rlShard plan[8];
    if (rl_shard_plan(&c, 3, 1, NULL, plan, &err)) fail_msg("%s", err.msg);
    for (int r = 0; r < 3; r++) assert_int_equal(plan[r].q_head0 % 2, 0);
    /* ...and with an odd number of them some TP sizes cannot cut. */
    c.num_heads = 7, c.num_kv_heads = 7;
    assert_int_equal(rl_shard_plan(&c, 2, 1, NULL, plan, &err), -1);
    assert_int_equal(err.code, RL_EUSAGE);
    if (!strstr(err.msg, "cannot split") || !strstr(err.msg, "awq int4 g128") ||
        !strstr(err.msg, "multiple of 128"))
        fail_msg("unexpected: %s", err.msg);
    print_message("refused: %s\n", err.msg);
    /* Block FP8 cuts the MLP's 128-wide blocks whole. */
    c = config_72b_awq();
    c.quant = (rlQuant){.method = RL_QUANT_FP8, .bits = 8, .fp8_scale = RL_FP8_BLOCK,
                        .block_n = 128, .group = 128};
    if (rl_shard_plan(&c, 6, 1, NULL, plan, &err)) fail_msg("%s", err.msg);
    for (int r = 0; r < 6; r++) assert_int_equal(plan[r].mlp0 % 128, 0);
}

static void test_plan_72b_awq(void **state) {
    (void)state;
    rlModelConfig c = config_72b_awq();
    rlPlanOptions o;
    plan_options_init(&o, 6, (size_t)24 << 30);
    rlPlan p;
    rlError err = {0};
    if (plan_layout(&c, &o, 1, 3, 2, &p, &err)) fail_msg("TP3 x PP2: %s", err.msg);
    const rlPlanLayout *l = &p.layouts[0];
    assert_true(l->fits);
    /* int4 + an fp32 scale and a uint8 zero point per 128 inputs, as the GPU
     * kernels hold them: 4.31 bits a weight. */
    rlShard all = {.tp_size = 1, .pp_size = 1, .n_q_heads = 64, .n_kv_heads = 8, .n_mlp = 29696,
                   .n_vocab = 152064, .n_layers = 80};
    size_t whole = rl_model_weight_bytes(&c, &all, RL_BF16);
    double linear = 80.0 * (8192.0 * (8192 + 2 * 1024) + 8192.0 * 8192 + 3 * 8192.0 * 29696);
    double expect = linear * (0.5 + 5.0 / 128) + 2 * 152064.0 * 8192 * 2 +
                    80 * (2 * 8192 + 10240) * 2.0 + 8192 * 2;
    assert_true(fabs((double)whole - expect) < 1.0);
    print_message("72B AWQ: %.2f GiB of weights; TP3 x PP2 on 6 x 24 GiB: %lld KV tokens, %d "
                  "sequences of %d\n", whole / 1073741824.0, l->kv_tokens, l->max_seqs,
                  p.opt.max_model_len);
    assert_true(l->max_seqs >= 1);
    plan_free(&p);
    c.quant.method = RL_QUANT_NONE;  /* bf16: the same layout does not fit */
    assert_int_equal(plan_layout(&c, &o, 1, 3, 2, &p, &err), -1);
    plan_free(&p);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_awq),        cmocka_unit_test(test_gptq),
        cmocka_unit_test(test_fp8),        cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_shard_cuts), cmocka_unit_test(test_plan_72b_awq),
    };
    return cmocka_run_group_tests(tests, tmp_dir_setup, tmp_dir_teardown);
}
