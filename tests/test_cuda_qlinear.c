/* test_cuda_qlinear.c: the CUDA backend's quantized linear layers
 * (upload_quant / matmul_quant) against a float64 host reference.
 *
 * Random layers in the plain form of kernels/quant.h: int4 with zero points
 * (groups of 128 and of 32), int8, int4 with an act-order permutation, FP8
 * with 128 x 128 blocks, per channel, per tensor, per tensor with a static
 * input scale; a bias on some.  Each runs at 1, 7 and 64 rows (the weight-
 * only kernels, rl_wq_gemm up to rl_wq_max_rows, then dequantized to 16
 * bits; FP8 on sm_89+ at 1: W8A8 in the decode GEMV, rl_wq_gemm_a8) and
 * 300 and 1024 rows (1024: W8A8 through cuBLASLt for FP8 on sm_89+), in
 * bf16, with the worst error
 * relative to the output's largest value printed.  Weight-only products
 * differ from the reference by bf16 rounding of the inputs and output
 * (bound 2e-2); W8A8 also rounds the activations to e4m3 (3 mantissa bits,
 * up to 6 % each, averaging over k: bound 8e-2, which FP8 at 1 row gets on
 * every path).  At every row count,
 * swiglu_matmul_quant must give the same bytes as swiglu then matmul_quant
 * (W8A8 quantizes SwiGLU's output as it makes it; the other roads take the
 * two steps).  Without a GPU: skipped (77), unless RL_REQUIRE_GPU is set. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/backend.h"
#include "kernels/half.h"
#include "kernels/quant.h"
#include "kernels/rng.h"

static rlBackend *g_be;
static uint64_t g_key = 1;

static double uniform(void) { return (double)(rl_mix64(g_key++) >> 11) / 9007199254740992.0; }

typedef struct tLayer {
    const char *name;
    rlWqType type;
    int n, k, group_n, group_k, perm, bias;
    float input_scale;
} tLayer;

/* swiglu_matmul_quant(gate_up) against swiglu then matmul_quant: the same
 * bytes, every road.  gate_up holds rows of [gate | up], 2k each. */
static void check_swiglu(const tLayer *L, void *w, const void *gate_up, const void *bias, int m) {
    rlError err = {0};
    size_t midb = (size_t)m * L->k * 2, yb = (size_t)m * L->n * 2;
    void *mid = g_be->ops->alloc(g_be, midb, &err), *mid2 = g_be->ops->alloc(g_be, midb, &err);
    void *y1 = g_be->ops->alloc(g_be, yb, &err), *y2 = g_be->ops->alloc(g_be, yb, &err);
    uint16_t *h1 = malloc(yb), *h2 = malloc(yb);
    assert_true(mid && mid2 && y1 && y2 && h1 && h2);
    g_be->ops->swiglu(g_be, mid, gate_up, m, L->k);
    g_be->ops->matmul_quant(g_be, y1, mid, w, bias, m, L->n, L->k);
    g_be->ops->swiglu_matmul_quant(g_be, y2, mid2, gate_up, w, bias, m, L->n, L->k);
    if (g_be->ops->sync(g_be, &err)) fail_msg("%s, %d rows, swiglu: %s", L->name, m, err.msg);
    assert_int_equal(g_be->ops->download(g_be, h1, y1, yb, &err), 0);
    assert_int_equal(g_be->ops->download(g_be, h2, y2, yb, &err), 0);
    if (memcmp(h1, h2, yb))
        fail_msg("%s, %d rows: swiglu_matmul_quant differs from swiglu then matmul_quant",
                 L->name, m);
    g_be->ops->free(g_be, mid);
    g_be->ops->free(g_be, mid2);
    g_be->ops->free(g_be, y1);
    g_be->ops->free(g_be, y2);
    free(h1), free(h2);
}

static void run_layer(const tLayer *L) {
    rlError err = {0};
    rlWqHost h;
    void *owned = NULL;
    int zeros = L->type != RL_WQ_FP8;
    if (rl_wq_host_alloc(&h, L->type, L->n, L->k, L->group_n, L->group_k, zeros, L->perm, &owned,
                         L->name, &err))
        fail_msg("%s", err.msg);
    size_t groups = (size_t)((L->k + L->group_k - 1) / L->group_k);
    size_t srows = (size_t)((L->n + L->group_n - 1) / L->group_n);
    for (size_t i = 0; i < (size_t)L->n * L->k; i++) {
        uint8_t v = (uint8_t)(rl_mix64(g_key++) >> 32);
        ((uint8_t *)h.q)[i] = L->type == RL_WQ_INT4 ? v & 15 : L->type == RL_WQ_FP8 ? v & 0xbf : v;
    }
    double qspan = L->type == RL_WQ_INT4 ? 8 : L->type == RL_WQ_INT8 ? 128 : 2;
    for (size_t i = 0; i < srows * groups; i++)
        ((float *)h.scale)[i] = (float)((0.5 + uniform()) * 0.05 / qspan);
    for (size_t i = 0; zeros && i < (size_t)L->n * groups; i++)
        ((float *)h.zero)[i] = (float)(int)(uniform() * (L->type == RL_WQ_INT4 ? 16 : 256));
    if (L->perm) {   /* a shuffled column order, as act-order makes */
        int32_t *p = (int32_t *)h.perm;
        for (int j = 0; j < L->k; j++) p[j] = j;
        for (int j = L->k - 1; j > 0; j--) {
            int r = (int)(uniform() * (j + 1));
            int32_t t = p[j];
            p[j] = p[r], p[r] = t;
        }
    }
    size_t held = 0;
    void *w = g_be->ops->upload_quant(g_be, &h, L->input_scale, &held, &err);
    if (!w) fail_msg("%s: %s", L->name, err.msg);
    /* The dense weight the reference multiplies: column perm[j] holds stored column j. */
    double *dense = malloc((size_t)L->n * L->k * sizeof(double));
    for (int r = 0; r < L->n; r++)
        for (int j = 0; j < L->k; j++)
            dense[(size_t)r * L->k + (L->perm ? h.perm[j] : j)] = rl_wq_host_weight(&h, r, j);
    int rows_list[] = {1, 7, 64, 300, 1024};
    int max_rows = 1024;
    size_t xb = (size_t)max_rows * L->k * 2, yb = (size_t)max_rows * L->n * 2;
    uint16_t *x = malloc(xb), *y = malloc(yb), *bias = malloc((size_t)L->n * 2);
    for (size_t i = 0; i < (size_t)max_rows * L->k; i++)
        x[i] = rl_f32_to_bf16((float)(uniform() * 2 - 1) * (L->input_scale > 0 ? 20.0f : 1.0f));
    for (int i = 0; i < L->n; i++) bias[i] = rl_f32_to_bf16((float)(uniform() - 0.5));
    uint16_t *gu = malloc(2 * xb);
    for (size_t i = 0; i < 2 * (size_t)max_rows * L->k; i++)
        gu[i] = rl_f32_to_bf16((float)(uniform() * 6 - 3));
    void *dx = g_be->ops->alloc(g_be, xb, &err), *dy = g_be->ops->alloc(g_be, yb, &err),
         *db = g_be->ops->alloc(g_be, (size_t)L->n * 2, &err),
         *dgu = g_be->ops->alloc(g_be, 2 * xb, &err);
    assert_non_null(dgu);
    assert_int_equal(
        g_be->ops->upload(g_be, dgu, RL_BF16, gu, RL_BF16, 2 * (size_t)max_rows * L->k, &err), 0);
    assert_non_null(dx);
    assert_non_null(dy);
    assert_non_null(db);
    assert_int_equal(g_be->ops->upload(g_be, dx, RL_BF16, x, RL_BF16, (size_t)max_rows * L->k, &err), 0);
    assert_int_equal(g_be->ops->upload(g_be, db, RL_BF16, bias, RL_BF16, (size_t)L->n, &err), 0);
    for (size_t ri = 0; ri < sizeof(rows_list) / sizeof(rows_list[0]); ri++) {
        int m = rows_list[ri];
        g_be->ops->matmul_quant(g_be, dy, dx, w, L->bias ? db : NULL, m, L->n, L->k);
        if (g_be->ops->sync(g_be, &err)) fail_msg("%s, %d rows: %s", L->name, m, err.msg);
        assert_int_equal(g_be->ops->download(g_be, y, dy, (size_t)m * L->n * 2, &err), 0);
        double worst = 0, big = 0;
        for (int i = 0; i < m; i++)
            for (int r = 0; r < L->n; r++) {
                double ref = L->bias ? rl_bf16_to_f32(bias[r]) : 0;
                for (int kk = 0; kk < L->k; kk++)
                    ref += rl_bf16_to_f32(x[(size_t)i * L->k + kk]) * dense[(size_t)r * L->k + kk];
                worst = fmax(worst, fabs(ref - rl_bf16_to_f32(y[(size_t)i * L->n + r])));
                big = fmax(big, fabs(ref));
            }
        double rel = worst / big, bound = L->type == RL_WQ_FP8 && (m >= 1024 || m == 1) ? 8e-2 : 2e-2;
        print_message("%-28s %3d rows: worst error %.2e of the largest output (bound %.0e)\n",
                      L->name, m, rel, bound);
        if (!(rel <= bound)) fail_msg("%s, %d rows: error %.3e over %.0e", L->name, m, rel, bound);
        check_swiglu(L, w, dgu, L->bias ? db : NULL, m);
    }
    print_message("%-28s holds %zu bytes on the device\n", L->name, held);
    g_be->ops->free_quant(g_be, w);
    g_be->ops->free(g_be, dx);
    g_be->ops->free(g_be, dy);
    g_be->ops->free(g_be, db);
    g_be->ops->free(g_be, dgu);
    free(x), free(y), free(bias), free(gu), free(dense), free(owned);
}

static void test_int(void **state) {
    (void)state;
    tLayer L[] = {
        {"int4 g128 zeros, bias", RL_WQ_INT4, 512, 1024, 1, 128, 0, 1, 0},
        {"int4 g32 zeros", RL_WQ_INT4, 200, 384, 1, 32, 0, 0, 0},
        {"int8 g64", RL_WQ_INT8, 256, 512, 1, 64, 0, 0, 0},
        {"int4 g128 act-order", RL_WQ_INT4, 256, 768, 1, 128, 1, 0, 0},
    };
    for (size_t i = 0; i < sizeof(L) / sizeof(L[0]); i++) run_layer(&L[i]);
}

static void test_fp8(void **state) {
    (void)state;
    tLayer L[] = {
        {"fp8 block 128x128, bias", RL_WQ_FP8, 512, 1024, 128, 128, 0, 1, 0},
        {"fp8 per channel", RL_WQ_FP8, 320, 192, 1, 192, 0, 0, 0},
        {"fp8 per tensor", RL_WQ_FP8, 256, 512, 256, 512, 0, 0, 0},
        {"fp8 per tensor, input_scale", RL_WQ_FP8, 256, 512, 256, 512, 0, 0, 0.05f},
        {"fp8 1x128 (joined blocks)", RL_WQ_FP8, 384, 512, 1, 128, 0, 0, 0},
    };
    for (size_t i = 0; i < sizeof(L) / sizeof(L[0]); i++) run_layer(&L[i]);
}

int main(void) {
    rlError err;
    rlBackendOptions o = {.dtype = RL_BF16};
    if (!(g_be = rl_backend_cuda_create(&o, &err))) {
        if (getenv("RL_REQUIRE_GPU")) {
            fprintf(stderr, "test_cuda_qlinear: no usable GPU: %s\n", err.msg);
            return 1;
        }
        printf("skipped: no GPU (%s)\n", err.msg);
        return 77;
    }
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_int), cmocka_unit_test(test_fp8)};
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    g_be->ops->destroy(g_be);
    return rc;
}
