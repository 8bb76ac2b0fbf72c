/* test_cuda_ops.c: every CUDA backend operation against a float64 reference
 * on fresh random inputs, in bf16 and fp16.
 *
 * Inputs are rounded to the device dtype on the host first, so the reference
 * and the GPU see the same numbers; the check is ||out - ref|| / ||ref||
 * (bf16 < 1e-2, fp16 < 1e-3), with outputs poisoned first so an unwritten
 * element fails.  Without a GPU it prints "skipped: no GPU" and exits 77
 * (tests/run counts it as skipped); RL_REQUIRE_GPU=1 (tests/gpu_kernels.sh)
 * makes that a failure.
 * RL_TEST_SEED=N repeats a run's inputs; `test_cuda_ops PATTERN` runs the
 * tests whose names match (cmocka's filter, e.g. test_attention).
 *
 * `test_cuda_ops bench`: prefill attention at the Qwen2.5-7B shape (8 x 2,048
 * and 1 x 30,000 tokens), ms and TFLOP/s. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "kernels/backend.h"
#include "kernels/half.h"
#include "kernels/rng.h"

static rlBackend *backends[2];   /* bf16, fp16 */
static uint64_t rng_state;

static double urand(void) {      /* [0, 1) */
    rng_state = rl_mix64(rng_state);
    return (double)(rng_state >> 11) * (1.0 / 9007199254740992.0);
}
static float srand_f(float scale) { return (float)((2 * urand() - 1) * scale); }

static float round_dt(float v, rlDtype t) {
    if (t == RL_F16) return (float)(_Float16)v;
    if (t == RL_BF16) {
        uint32_t u;
        memcpy(&u, &v, 4);
        u = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
        memcpy(&v, &u, 4);
    }
    return v;
}

static float *rand_vec(size_t n, float scale, rlDtype t) {
    float *v = malloc(n * sizeof *v);
    for (size_t i = 0; i < n; i++) v[i] = round_dt(srand_f(scale), t);
    return v;
}

static void *to_dev(rlBackend *be, const float *h, size_t n) {
    rlError err;
    void *d = be->ops->alloc(be, n * rl_dtype_size(be->act_dtype) + 16, &err);
    assert_non_null(d);
    assert_int_equal(be->ops->upload(be, d, be->act_dtype, h, RL_F32, n, &err), 0);
    return d;
}

/* A device buffer full of NaN (0xffff in both 16-bit types). */
static void *poisoned(rlBackend *be, size_t n) {
    size_t bytes = n * rl_dtype_size(be->act_dtype);
    unsigned char *h = malloc(bytes);
    memset(h, 0xff, bytes);
    rlError err;
    void *d = be->ops->alloc(be, bytes + 16, &err);
    assert_non_null(d);
    assert_int_equal(be->ops->upload(be, d, be->act_dtype, h, be->act_dtype, n, &err), 0);
    free(h);
    return d;
}

static float *from_dev(rlBackend *be, const void *d, size_t n) {
    rlError err;
    assert_int_equal(be->ops->sync(be, &err), 0);
    size_t es = rl_dtype_size(be->act_dtype);
    unsigned char *raw = malloc(n * es);
    assert_int_equal(be->ops->download(be, raw, d, n * es, &err), 0);
    float *f = malloc(n * sizeof *f);
    for (size_t i = 0; i < n; i++) {
        if (be->act_dtype == RL_F16) {
            _Float16 h;
            memcpy(&h, raw + 2 * i, 2);
            f[i] = (float)h;
        } else {
            uint32_t u = (uint32_t)(raw[2 * i] | raw[2 * i + 1] << 8) << 16;
            memcpy(&f[i], &u, 4);
        }
    }
    free(raw);
    return f;
}

static double tolerance(rlBackend *be) { return be->act_dtype == RL_F16 ? 1e-3 : 1e-2; }

static void check_close(rlBackend *be, const char *what, const float *out, const double *ref,
                        size_t n) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(out[i])) {
            fail_msg("%s (%s): element %zu is %f (unwritten or overflow)", what,
                     rl_dtype_name(be->act_dtype), i, out[i]);
        }
        num += (out[i] - ref[i]) * (out[i] - ref[i]);
        den += ref[i] * ref[i];
    }
    double rel = sqrt(num / (den > 0 ? den : 1));
    printf("  %-28s %-5s rel err %.2e\n", what, rl_dtype_name(be->act_dtype), rel);
    if (!(rel < tolerance(be)))
        fail_msg("%s (%s): relative error %.3e over %.0e", what, rl_dtype_name(be->act_dtype),
                 rel, tolerance(be));
}

/* A one-sequence batch of n <= 16 tokens (positions 0..n-1, KV block 0) for
 * row-wise ops; the backend needs a KV cache of 16-token blocks.  The batch
 * and its arrays stay valid until the next call: a backend may read them
 * until the step ends (the CPU backend reads them in sample). */
static void begin_rows_adj(rlBackend *be, int n, const int32_t *tokens, int n_rows,
                           const rlRowSpec *rows, int n_adjs, const rlLogitAdj *adjs,
                           int n_fills, const rlPenFill *fills) {
    static int32_t pos[64], slots[64], start[2], len[1], tab[1];
    static rlBatch b;
    assert_true(n <= 64);
    for (int i = 0; i < n; i++) pos[i] = i, slots[i] = i;
    start[0] = 0, start[1] = n, len[0] = n, tab[0] = 0;
    b = (rlBatch){1, n, tokens, pos, slots, start, len, tab, 1, n_rows, rows, n_adjs, adjs,
                  n_fills, fills};
    rlError err;
    assert_int_equal(be->ops->begin_step(be, &b, &err), 0);
}

static void begin_rows(rlBackend *be, int n, const int32_t *tokens, int n_rows,
                       const rlRowSpec *rows) {
    begin_rows_adj(be, n, tokens, n_rows, rows, 0, NULL, 0, NULL);
}

static void test_matmul(void **state) {
    (void)state;
    for (int d = 0; d < 2; d++) {
        rlBackend *be = backends[d];
        rlDtype t = be->act_dtype;
        /* 5 x 301 x 264: the matrix-vector path (rows <= 8) with bias and ragged columns;
         * the rest cuBLASLt at decode-batch row counts, ragged columns included */
        int shapes[6][3] = {{37, 96, 128}, {1, 512, 256}, {64, 200, 72},
                            {5, 301, 264}, {64, 200, 1024}, {12, 130, 640}};
        for (int si = 0; si < 6; si++) {
            int rows = shapes[si][0], n = shapes[si][1], k = shapes[si][2];
            float *x = rand_vec((size_t)rows * k, 1, t), *w = rand_vec((size_t)n * k, 0.1f, t);
            float *bias = rand_vec(n, 0.5f, t);
            void *dx = to_dev(be, x, (size_t)rows * k), *dw = to_dev(be, w, (size_t)n * k);
            void *db = to_dev(be, bias, n), *dout = poisoned(be, (size_t)rows * n);
            be->ops->matmul(be, dout, dx, dw, si == 1 ? NULL : db, rows, n, k);
            float *out = from_dev(be, dout, (size_t)rows * n);
            double *ref = malloc((size_t)rows * n * sizeof *ref);
            for (int r = 0; r < rows; r++)
                for (int j = 0; j < n; j++) {
                    double s = si == 1 ? 0 : bias[j];
                    for (int i = 0; i < k; i++) s += (double)x[r * k + i] * w[(size_t)j * k + i];
                    ref[r * n + j] = s;
                }
            char what[64];
            snprintf(what, sizeof what, "matmul %dx%dx%d%s", rows, n, k, si == 1 ? "" : " +bias");
            check_close(be, what, out, ref, (size_t)rows * n);
            /* The LM head's fp32-output variant. */
            rlError err;
            float *df = be->ops->alloc(be, (size_t)rows * n * 4, &err);
            be->ops->matmul_f32(be, df, dx, dw, rows, n, k);
            assert_int_equal(be->ops->sync(be, &err), 0);
            float *outf = malloc((size_t)rows * n * 4);
            assert_int_equal(be->ops->download(be, outf, df, (size_t)rows * n * 4, &err), 0);
            for (int r = 0; r < rows; r++)
                for (int j = 0; j < n; j++)
                    if (si != 1) ref[r * n + j] -= bias[j];
            snprintf(what, sizeof what, "matmul_f32 %dx%dx%d", rows, n, k);
            check_close(be, what, outf, ref, (size_t)rows * n);
            be->ops->free(be, df);
            be->ops->free(be, dx), be->ops->free(be, dw), be->ops->free(be, db);
            be->ops->free(be, dout);
            free(x), free(w), free(bias), free(out), free(outf), free(ref);
        }
    }
}

/* A device buffer's bytes, on the host. */
static unsigned char *raw_from_dev(rlBackend *be, const void *d, size_t bytes) {
    rlError err;
    assert_int_equal(be->ops->sync(be, &err), 0);
    unsigned char *h = malloc(bytes);
    assert_int_equal(be->ops->download(be, h, d, bytes, &err), 0);
    return h;
}

/* --batch-invariant's GEMM (kernels/cuda/cuda_tile_gemm.cuh): close to a
 * float64 reference, and every row bit-identical whether it is computed in
 * a call of 1, 7, 64 or 300 rows and wherever it sits in the call's tiles;
 * for matmul with and without bias and for matmul_f32, on ragged shapes
 * (n not a multiple of 64, k a multiple of 8 but not of 32). */
static void test_matmul_invariant(void **state) {
    (void)state;
    for (int d = 0; d < 2; d++) {
        rlError err;
        rlBackendOptions o = {.dtype = d ? RL_F16 : RL_BF16, .batch_invariant = 1};
        rlBackend *be = rl_backend_cuda_create(&o, &err);
        assert_non_null(be);
        rlDtype t = be->act_dtype;
        size_t es = rl_dtype_size(t);
        int shapes[3][2] = {{301, 264}, {130, 1024}, {64, 72}};
        for (int si = 0; si < 3; si++) {
            const int R = 300, n = shapes[si][0], k = shapes[si][1];
            float *x = rand_vec((size_t)R * k, 1, t), *w = rand_vec((size_t)n * k, 0.1f, t);
            float *bias = rand_vec(n, 0.5f, t);
            void *dx = to_dev(be, x, (size_t)R * k), *dw = to_dev(be, w, (size_t)n * k);
            void *db = to_dev(be, bias, n);
            for (int f32 = 0; f32 < 2; f32++)
                for (int with_bias = 0; with_bias < 2 - f32; with_bias++) {
                    size_t ob = f32 ? 4 : es, row_bytes = (size_t)n * ob;
                    void *dout = poisoned(be, (size_t)R * n * (f32 ? 2 : 1));
                    const void *b = with_bias ? db : NULL;
                    if (f32) be->ops->matmul_f32(be, dout, dx, dw, R, n, k);
                    else be->ops->matmul(be, dout, dx, dw, b, R, n, k);
                    unsigned char *all = raw_from_dev(be, dout, R * row_bytes);
                    /* Against float64 (the whole 300-row call). */
                    float *got = f32 ? (float *)all : from_dev(be, dout, (size_t)R * n);
                    double *ref = malloc((size_t)R * n * sizeof *ref);
                    for (int r = 0; r < R; r++)
                        for (int j = 0; j < n; j++) {
                            double acc = with_bias ? bias[j] : 0;
                            for (int i = 0; i < k; i++)
                                acc += (double)x[(size_t)r * k + i] * w[(size_t)j * k + i];
                            ref[(size_t)r * n + j] = acc;
                        }
                    char what[80];
                    snprintf(what, sizeof what, "invariant %s %dx%dx%d%s",
                             f32 ? "matmul_f32" : "matmul", R, n, k, with_bias ? " +bias" : "");
                    check_close(be, what, got, ref, (size_t)R * n);
                    /* The same rows in calls of 1, 7 and 64 rows, starting
                     * off tile boundaries, must equal the 300-row call. */
                    int calls[][2] = {{0, 1}, {203, 1}, {299, 1}, {3, 7}, {121, 7}, {70, 64},
                                      {236, 64}, {0, 64}};
                    for (size_t ci = 0; ci < sizeof calls / sizeof calls[0]; ci++) {
                        int r0 = calls[ci][0], nr = calls[ci][1];
                        void *dsub = poisoned(be, (size_t)nr * n * (f32 ? 2 : 1));
                        const char *xin = (const char *)dx + (size_t)r0 * k * es;
                        if (f32) be->ops->matmul_f32(be, dsub, xin, dw, nr, n, k);
                        else be->ops->matmul(be, dsub, xin, dw, b, nr, n, k);
                        unsigned char *sub = raw_from_dev(be, dsub, nr * row_bytes);
                        if (memcmp(sub, all + (size_t)r0 * row_bytes, nr * row_bytes))
                            fail_msg("%s: rows %d..%d computed in a call of %d rows differ from "
                                     "the 300-row call", what, r0, r0 + nr - 1, nr);
                        free(sub);
                        be->ops->free(be, dsub);
                    }
                    printf("  %-40s rows bit-identical in calls of 1, 7, 64 and 300 rows\n",
                           what);
                    if (!f32) free(got);
                    free(all), free(ref);
                    be->ops->free(be, dout);
                }
            be->ops->free(be, dx), be->ops->free(be, dw), be->ops->free(be, db);
            free(x), free(w), free(bias);
        }
        be->ops->destroy(be);
    }
}

static void test_norms(void **state) {
    (void)state;
    for (int d = 0; d < 2; d++) {
        rlBackend *be = backends[d];
        rlDtype t = be->act_dtype;
        int rows = 7, dim = 384;
        size_t n = (size_t)rows * dim;
        float eps = 1e-6f;
        float *x = rand_vec(n, 2, t), *res = rand_vec(n, 2, t), *w = rand_vec(dim, 1, t);
        void *dx = to_dev(be, x, n), *dres = to_dev(be, res, n), *dw = to_dev(be, w, dim);
        void *dout = poisoned(be, n);
        double *ref = malloc(n * sizeof *ref), *rres = malloc(n * sizeof *rres);
        be->ops->rmsnorm(be, dout, dx, dw, rows, dim, eps);
        float *out = from_dev(be, dout, n);
        for (int r = 0; r < rows; r++) {
            double ss = 0;
            for (int j = 0; j < dim; j++) ss += (double)x[r * dim + j] * x[r * dim + j];
            double rs = 1 / sqrt(ss / dim + eps);
            for (int j = 0; j < dim; j++) ref[r * dim + j] = x[r * dim + j] * rs * w[j];
        }
        check_close(be, "rmsnorm", out, ref, n);
        free(out);
        be->ops->add_rmsnorm(be, dres, dx, dout, dw, rows, dim, eps);
        out = from_dev(be, dout, n);
        float *newres = from_dev(be, dres, n);
        for (int r = 0; r < rows; r++) {
            double ss = 0;
            for (int j = 0; j < dim; j++) {
                rres[r * dim + j] = (double)res[r * dim + j] + x[r * dim + j];
                ss += rres[r * dim + j] * rres[r * dim + j];
            }
            double rs = 1 / sqrt(ss / dim + eps);
            for (int j = 0; j < dim; j++) ref[r * dim + j] = rres[r * dim + j] * rs * w[j];
        }
        check_close(be, "add_rmsnorm (residual)", newres, rres, n);
        check_close(be, "add_rmsnorm (output)", out, ref, n);
        be->ops->free(be, dx), be->ops->free(be, dres), be->ops->free(be, dw);
        be->ops->free(be, dout);
        free(x), free(res), free(w), free(ref), free(rres), free(out), free(newres);
    }
}

static void test_elementwise(void **state) {
    (void)state;
    for (int d = 0; d < 2; d++) {
        rlBackend *be = backends[d];
        rlDtype t = be->act_dtype;
        int rows = 9, m = 304, vocab = 50, dim = 64, vocab0 = 10;   /* m % 8 == 0: the 16-byte path */
        rlError kerr;
        assert_int_equal(be->ops->kv_init(be, 1, 1, 16, 1, 64, &kerr), 0);
        /* swiglu */
        float *gu = rand_vec((size_t)rows * 2 * m, 4, t);
        void *dgu = to_dev(be, gu, (size_t)rows * 2 * m), *dout = poisoned(be, (size_t)rows * m);
        double *ref = malloc((size_t)rows * 2 * m * sizeof *ref);
        begin_rows(be, rows, (int32_t[9]){0}, 0, NULL);
        be->ops->swiglu(be, dout, dgu, rows, m);
        float *out = from_dev(be, dout, (size_t)rows * m);
        for (int r = 0; r < rows; r++)
            for (int j = 0; j < m; j++) {
                double g = gu[r * 2 * m + j], u = gu[r * 2 * m + m + j];
                ref[r * m + j] = g / (1 + exp(-g)) * u;
            }
        check_close(be, "swiglu", out, ref, (size_t)rows * m);
        free(out);
        /* add */
        float *a = rand_vec((size_t)rows * m, 1, t), *b = rand_vec((size_t)rows * m, 1, t);
        void *da = to_dev(be, a, (size_t)rows * m), *dbb = to_dev(be, b, (size_t)rows * m);
        be->ops->add(be, da, dbb, (size_t)rows * m);
        out = from_dev(be, da, (size_t)rows * m);
        for (int i = 0; i < rows * m; i++) ref[i] = (double)a[i] + b[i];
        check_close(be, "add", out, ref, (size_t)rows * m);
        free(out);
        /* embed: ids outside this shard's [vocab0, vocab0 + vocab) give zeros */
        int32_t tokens[9] = {10, 59, 12, 5, 60, 33, 10, 47, 1000};
        float *table = rand_vec((size_t)vocab * dim, 1, t);
        void *dtab = to_dev(be, table, (size_t)vocab * dim), *demb = poisoned(be, (size_t)rows * dim);
        rlRowSpec specs[3] = {{.token = 4}, {.token = 0}, {.token = 7}};
        begin_rows(be, rows, tokens, 3, specs);
        be->ops->embed(be, demb, dtab, vocab0, vocab, dim);
        out = from_dev(be, demb, (size_t)rows * dim);
        double *eref = calloc((size_t)rows * dim, sizeof *eref);
        for (int r = 0; r < rows; r++) {
            int id = tokens[r] - vocab0;
            for (int j = 0; j < dim; j++)
                eref[r * dim + j] = id >= 0 && id < vocab ? table[id * dim + j] : 0;
        }
        check_close(be, "embed", out, eref, (size_t)rows * dim);
        for (int r = 0; r < rows; r++)
            if (tokens[r] - vocab0 < 0 || tokens[r] - vocab0 >= vocab)
                for (int j = 0; j < dim; j++) assert_true(out[r * dim + j] == 0.0f);
        free(out);
        /* gather_rows: the rows' tokens 4, 0, 7 */
        void *dg = poisoned(be, 3 * (size_t)dim);
        be->ops->gather_rows(be, dg, demb, dim, 0, 3);
        out = from_dev(be, dg, 3 * (size_t)dim);
        double gref[3 * 64];
        for (int r = 0; r < 3; r++)
            for (int j = 0; j < dim; j++) gref[r * dim + j] = eref[specs[r].token * dim + j];
        check_close(be, "gather_rows", out, gref, 3 * (size_t)dim);
        free(out);
        /* rows 1 and 2 alone (a slice of the step's rows, as the head takes them) */
        be->ops->gather_rows(be, dg, demb, dim, 1, 2);
        out = from_dev(be, dg, 2 * (size_t)dim);
        check_close(be, "gather_rows (rows 1-2)", out, gref + dim, 2 * (size_t)dim);
        free(out);
        /* fill_random: deterministic, in range, not constant */
        rlError err;
        void *dr = be->ops->alloc(be, 4096 * 2, &err);
        assert_int_equal(be->ops->fill_random(be, dr, t, 4096, 42, 0.5f, &err), 0);
        float *r1 = from_dev(be, dr, 4096);
        assert_int_equal(be->ops->fill_random(be, dr, t, 4096, 42, 0.5f, &err), 0);
        float *r2 = from_dev(be, dr, 4096);
        double mean = 0;
        for (int i = 0; i < 4096; i++) {
            assert_true(r1[i] == r2[i]);
            assert_true(r1[i] >= -0.5f && r1[i] <= 0.5f);
            mean += r1[i] / 4096;
        }
        assert_true(fabs(mean) < 0.05 && r1[0] != r1[1]);
        free(r1), free(r2), free(eref), free(table), free(gu), free(a), free(b), free(ref);
        be->ops->free(be, dr), be->ops->free(be, dg), be->ops->free(be, dtab);
        be->ops->free(be, demb), be->ops->free(be, da), be->ops->free(be, dbb);
        be->ops->free(be, dgu), be->ops->free(be, dout);
    }
}

/* ---- attention: several sequences at mixed positions over shuffled blocks ---- */

typedef struct AttCase {
    int n_q, n_kv, q_head0, kv_head0, group, head_dim;
} AttCase;

/* A rotary table as kernels/rope.c gives rope_init: theta 1e6; scaled, the
 * lower-frequency half divided by 4 and cos/sin times 1.1386 (YaRN's shape). */
static void rope_table(double *inv, int D, int scaled, double *scale) {
    for (int i = 0; i < D / 2; i++) {
        inv[i] = pow(1e6, -2.0 * i / D);
        if (scaled && i >= D / 4) inv[i] /= 4;
    }
    *scale = scaled ? 1.1386 : 1.0;
}

/* Qwen3's head norm in 16 bits: normalised value rounded, then the weight. */
static void head_norm_ref(float *x, const float *w, int D, rlDtype t) {
    double ss = 0;
    for (int i = 0; i < D; i++) ss += (double)x[i] * x[i];
    float rstd = (float)(1 / sqrt(ss / D + 1e-6));
    for (int i = 0; i < D; i++) x[i] = round_dt(w[i] * round_dt(x[i] * rstd, t), t);
}

/* HF rotate-half RoPE with fp32 angles from an fp32 table, cos/sin scaled
 * and rounded to the dtype. */
static void rope_ref(float *x, int D, int pos, const double *table, double scale, rlDtype t) {
    int half = D / 2;
    for (int i = 0; i < half; i++) {
        float ang = (float)pos * (float)table[i];
        double c = round_dt((float)(cosf(ang) * scale), t);
        double s = round_dt((float)(sinf(ang) * scale), t);
        double x1 = x[i], x2 = x[i + half];
        x[i] = round_dt((float)(x1 * c - x2 * s), t);
        x[i + half] = round_dt((float)(x2 * c + x1 * s), t);
    }
}

/* decode 1: every sequence has one new token (the backend's decode-only
 * path); 2: the first two have one, the others a chunk (a step of chunked
 * prefill beside running sequences, which the scheduler orders decodes
 * first); 0: chunks, the last sequence one token.  cached: each sequence's
 * cached prefix. */
static void run_attention_case(rlBackend *be, const AttCase *ac, int decode, const int cached[4]) {
    rlDtype t = be->act_dtype;
    const int bs = 16, n_blocks = 160, layers = 2, layer = 1, D = ac->head_dim;
    const int n_seqs = 4;
    static const int fresh_of[3][4] = {{13, 5, 150, 1}, {1, 1, 1, 1}, {1, 1, 150, 13}};
    const int *fresh = fresh_of[decode];
    rlError err;
    assert_int_equal(be->ops->kv_init(be, layers, n_blocks, bs, ac->n_kv, D, &err), 0);
    int perm[160];
    for (int i = 0; i < n_blocks; i++) perm[i] = i;
    for (int i = n_blocks - 1; i > 0; i--) {
        int j = (int)(urand() * (i + 1)), x = perm[i];
        perm[i] = perm[j], perm[j] = x;
    }
    int max_blocks = 0, used = 0, tab[4][100];
    for (int s = 0; s < n_seqs; s++) {
        int nb = (cached[s] + fresh[s] + bs - 1) / bs;
        if (nb > max_blocks) max_blocks = nb;
        for (int b = 0; b < nb; b++) tab[s][b] = perm[used++];
    }
    assert_true(used <= n_blocks);
    int32_t *btab = calloc((size_t)n_seqs * max_blocks, 4);
    for (int s = 0; s < n_seqs; s++)
        for (int b = 0; b < (cached[s] + fresh[s] + bs - 1) / bs; b++) btab[s * max_blocks + b] = tab[s][b];
    const int W = (ac->n_q + 2 * ac->n_kv) * D;
    /* Decode runs also take Qwen3's q/k head norms and a scaled table. */
    double table[128], scale;
    rope_table(table, D, decode, &scale);
    assert_int_equal(be->ops->rope_init(be, table, D / 2, scale, &err), 0);
    float *qn = rand_vec((size_t)D, 1, t), *kn = rand_vec((size_t)D, 1, t);
    for (int i = 0; i < D; i++) qn[i] = round_dt(qn[i] + 1, t), kn[i] = round_dt(kn[i] + 1, t);
    void *dqn = to_dev(be, qn, (size_t)D), *dkn = to_dev(be, kn, (size_t)D);
    /* Host copies of every token's rotated q, k and v, by sequence and position. */
    int total = 0;
    for (int s = 0; s < n_seqs; s++) total += cached[s] + fresh[s];
    float *all = rand_vec((size_t)total * W, 1, t);
    float *rot = malloc((size_t)total * W * sizeof *rot);
    memcpy(rot, all, (size_t)total * W * sizeof *rot);
    int base[4];
    for (int s = 0, o = 0; s < n_seqs; s++) {
        base[s] = o;
        for (int p = 0; p < cached[s] + fresh[s]; p++)
            for (int h = 0; h < ac->n_q + ac->n_kv; h++) {
                float *x = rot + (size_t)(o + p) * W + h * D;
                if (decode) head_norm_ref(x, h < ac->n_q ? qn : kn, D, t);
                rope_ref(x, D, p, table, scale, t);
            }
        o += cached[s] + fresh[s];
    }
    rlAttnShape sh = {ac->n_q, ac->n_kv, ac->q_head0, ac->kv_head0, ac->group, D};
    /* Two steps: first the cached prefixes, then the new tokens. */
    for (int step = 0; step < 2; step++) {
        int32_t tokens[2300], pos[2300], slots[2300], start[5], len[4];
        int n = 0;
        for (int s = 0; s < n_seqs; s++) {
            start[s] = n;
            int p0 = step ? cached[s] : 0, p1 = step ? cached[s] + fresh[s] : cached[s];
            for (int p = p0; p < p1; p++, n++) {
                tokens[n] = 0, pos[n] = p;
                slots[n] = tab[s][p / bs] * bs + p % bs;
            }
            len[s] = p1;
        }
        start[n_seqs] = n;
        float *in = malloc((size_t)n * W * sizeof *in);
        for (int s = 0; s < n_seqs; s++)
            for (int i = start[s]; i < start[s + 1]; i++)
                memcpy(in + (size_t)i * W, all + (size_t)(base[s] + pos[i]) * W, W * sizeof *in);
        rlBatch b = {n_seqs, n, tokens, pos, slots, start, len, btab, max_blocks, 0, NULL, 0, NULL, 0, NULL};
        assert_int_equal(be->ops->begin_step(be, &b, &err), 0);
        void *dqkv = to_dev(be, in, (size_t)n * W);
        be->ops->rope_kv_store(be, dqkv, decode ? dqn : NULL, decode ? dkn : NULL, 1e-6f, layer,
                               &sh);
        if (step == 1) {
            float *q = from_dev(be, dqkv, (size_t)n * W);
            double *qref = malloc((size_t)n * W * sizeof *qref);
            for (int s = 0; s < n_seqs; s++)
                for (int i = start[s]; i < start[s + 1]; i++)
                    for (int j = 0; j < W; j++)
                        qref[(size_t)i * W + j] = rot[(size_t)(base[s] + pos[i]) * W + j];
            check_close(be, "rope_kv_store (q, k, v)", q, qref, (size_t)n * W);
            free(q), free(qref);
            void *dout = poisoned(be, (size_t)n * ac->n_q * D);
            be->ops->attention(be, dout, dqkv, layer, &sh);
            float *out = from_dev(be, dout, (size_t)n * ac->n_q * D);
            double *ref = calloc((size_t)n * ac->n_q * D, sizeof *ref);
            double *sc = malloc(2300 * sizeof *sc);
            for (int s = 0; s < n_seqs; s++)
                for (int i = start[s]; i < start[s + 1]; i++)
                    for (int h = 0; h < ac->n_q; h++) {
                        int kvh = (ac->q_head0 + h) / ac->group - ac->kv_head0;
                        const float *qv = rot + (size_t)(base[s] + pos[i]) * W + h * D;
                        double mx = -INFINITY, z = 0;
                        for (int p = 0; p <= pos[i]; p++) {
                            const float *kv = rot + (size_t)(base[s] + p) * W + (ac->n_q + kvh) * D;
                            double d = 0;
                            for (int e = 0; e < D; e++) d += (double)qv[e] * kv[e];
                            sc[p] = d / sqrt((double)D);
                            if (sc[p] > mx) mx = sc[p];
                        }
                        for (int p = 0; p <= pos[i]; p++) z += sc[p] = exp(sc[p] - mx);
                        double *o = ref + ((size_t)i * ac->n_q + h) * D;
                        for (int p = 0; p <= pos[i]; p++) {
                            const float *vv = all + (size_t)(base[s] + p) * W +
                                              (ac->n_q + ac->n_kv + kvh) * D;
                            for (int e = 0; e < D; e++) o[e] += sc[p] / z * vv[e];
                        }
                    }
            char what[64];
            snprintf(what, sizeof what, "attention%s hd%d q%d/kv%d@%d",
                     decode == 2 ? " mixed" : decode ? " decode" : "",
                     D, ac->n_q, ac->n_kv, ac->q_head0);
            check_close(be, what, out, ref, (size_t)n * ac->n_q * D);
            free(out), free(ref), free(sc);
            be->ops->free(be, dout);
        }
        be->ops->free(be, dqkv);
        free(in);
    }
    free(all), free(rot), free(btab), free(qn), free(kn);
    be->ops->free(be, dqn), be->ops->free(be, dkn);
}

static void test_attention(void **state) {
    (void)state;
    /* Prefill, then decode. */
    const AttCase cases[] = {
        {6, 2, 0, 0, 3, 64},     /* GQA 3 */
        {7, 1, 0, 0, 7, 128},    /* Qwen2.5-7B's group of 7 */
        {4, 2, 2, 0, 3, 128},    /* a TP shard: KV head 0 serves one of its query heads */
        {4, 4, 0, 0, 1, 32},     /* MHA at the tiny fixtures' head dim */
        {2, 1, 0, 0, 2, 96},     /* an untuned head dim */
        {3, 1, 0, 0, 3, 34},     /* one that takes the 4-byte load path */
    };
    /* Cached prefixes, then the new tokens: a prompt, a chunk after a cached
     * prefix, a long chunk after a long prefix (several query tiles, the
     * diagonal across key tiles), a long decode.  Decode again over at most
     * 701 keys: few enough splits to merge over a cluster on Hopper (the
     * longer ones merge through memory), an empty split included.  Then a
     * mixed step: two decode rows ahead of two chunks. */
    const int cached[4] = {0, 20, 700, 1500}, cached_short[4] = {0, 20, 300, 700};
    const int cached_mixed[4] = {1500, 40, 0, 300};
    for (int d = 0; d < 2; d++)
        for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
            for (int decode = 0; decode < 2; decode++)
                run_attention_case(backends[d], &cases[i], decode, cached);
            run_attention_case(backends[d], &cases[i], 2, cached_mixed);
            run_attention_case(backends[d], &cases[i], 1, cached_short);
        }
}

/* --batch-invariant's attention (kernels/cuda/README.md): one sequence of
 * 300 tokens whose output rows must be the same bits however its queries
 * come: the whole prompt in one step; 37-token chunks with a second
 * sequence's chunks in every step; a 295-token chunk, then one token a step
 * beside the other sequence's decode rows (the decode steps).  A step's
 * batch is one to two sequences, each on its own blocks. */
typedef struct AttInv {
    rlBackend *be;
    int n_q, n_kv, D, W;
    float *qkv[2];          /* every token's q | k | v, by sequence */
    int32_t tab[2][20];     /* block tables */
    unsigned char *rows;    /* sequence 0's output rows, by position */
} AttInv;

/* One step: sequence 0's positions [a0, a1) and sequence 1's [b0, b1). */
static void att_inv_step(AttInv *v, int a0, int a1, int b0, int b1) {
    rlError err;
    const int bs = 16, span[2][2] = {{a0, a1}, {b0, b1}};
    int32_t tokens[512], pos[512], slots[512], start[3], len[2], btab[2 * 20];
    int n = 0, ns = 0;
    float *in = malloc(512 * (size_t)v->W * sizeof *in);
    for (int s = 0; s < 2; s++) {
        if (span[s][1] <= span[s][0]) continue;
        start[ns] = n, len[ns] = span[s][1];
        memcpy(btab + ns * 20, v->tab[s], sizeof v->tab[s]);
        for (int p = span[s][0]; p < span[s][1]; p++, n++) {
            tokens[n] = 0, pos[n] = p, slots[n] = v->tab[s][p / bs] * bs + p % bs;
            memcpy(in + (size_t)n * v->W, v->qkv[s] + (size_t)p * v->W, v->W * sizeof *in);
        }
        ns++;
    }
    start[ns] = n;
    rlBatch b = {ns, n, tokens, pos, slots, start, len, btab, 20, 0, NULL, 0, NULL, 0, NULL};
    rlBackend *be = v->be;
    assert_int_equal(be->ops->begin_step(be, &b, &err), 0);
    void *dqkv = to_dev(be, in, (size_t)n * v->W);
    rlAttnShape sh = {v->n_q, v->n_kv, 0, 0, v->n_q / v->n_kv, v->D};
    be->ops->rope_kv_store(be, dqkv, NULL, NULL, 1e-6f, 0, &sh);
    size_t row = (size_t)v->n_q * v->D * rl_dtype_size(be->act_dtype);
    void *dout = poisoned(be, (size_t)n * v->n_q * v->D);
    be->ops->attention(be, dout, dqkv, 0, &sh);
    unsigned char *out = raw_from_dev(be, dout, n * row);
    memcpy(v->rows + (size_t)a0 * row, out, (size_t)(a1 - a0) * row);   /* sequence 0 first */
    free(out), free(in);
    be->ops->free(be, dqkv), be->ops->free(be, dout);
}

static void attention_invariant_case(rlBackend *be, int n_q, int n_kv, int D) {
    enum { L = 300, L1 = 120 };
    rlError err;
    AttInv v = {.be = be, .n_q = n_q, .n_kv = n_kv, .D = D, .W = (n_q + 2 * n_kv) * D};
    assert_int_equal(be->ops->kv_init(be, 1, 40, 16, n_kv, D, &err), 0);
    double table[128], scale;
    rope_table(table, D, 0, &scale);
    assert_int_equal(be->ops->rope_init(be, table, D / 2, scale, &err), 0);
    v.qkv[0] = rand_vec((size_t)L * v.W, 1, be->act_dtype);
    v.qkv[1] = rand_vec((size_t)L1 * v.W, 1, be->act_dtype);
    for (int b = 0; b < 20; b++) v.tab[0][b] = 39 - b, v.tab[1][b] = b;   /* disjoint blocks */
    size_t row = (size_t)n_q * D * rl_dtype_size(be->act_dtype);
    unsigned char *ways[3];
    for (int w = 0; w < 3; w++) {
        v.rows = ways[w] = malloc(L * row);
        if (w == 0) {
            att_inv_step(&v, 0, L, 0, 0);
        } else if (w == 1) {
            for (int p = 0, q = 0; p < L; p += 37, q += 23)
                att_inv_step(&v, p, p + 37 < L ? p + 37 : L, q < L1 ? q : 0,
                             q + 23 < L1 ? q + 23 : q < L1 ? L1 : 0);
        } else {
            att_inv_step(&v, 0, L - 5, 0, L1 - 5);
            for (int p = L - 5; p < L; p++) att_inv_step(&v, p, p + 1, p - L + L1, p - L + L1 + 1);
        }
    }
    /* Every row of the one-step run written and finite (the poison is NaN):
     * ways that agree on rows left unwritten would prove nothing. */
    for (size_t i = 0; i < (size_t)L * n_q * D; i++) {
        uint16_t u;
        memcpy(&u, ways[0] + 2 * i, 2);
        if (be->act_dtype == RL_F16 ? (u & 0x7c00) == 0x7c00 : (u & 0x7f80) == 0x7f80)
            fail_msg("invariant attention hd%d q%d/kv%d (%s): position %zu's output is not "
                     "finite (unwritten?)", D, n_q, n_kv, rl_dtype_name(be->act_dtype),
                     i / ((size_t)n_q * D));
    }
    for (int w = 1; w < 3; w++) {
        /* Say how much differs and how: one last-bit value or many rows of
         * garbage point at different causes. */
        int rows_differ = 0, first = -1;
        for (int p = 0; p < L; p++)
            if (memcmp(ways[0] + (size_t)p * row, ways[w] + (size_t)p * row, row))
                rows_differ++, first = first < 0 ? p : first;
        if (!rows_differ) continue;
        const uint16_t *a = (const uint16_t *)(ways[0] + (size_t)first * row);
        const uint16_t *b = (const uint16_t *)(ways[w] + (size_t)first * row);
        int e = 0, elems = 0;
        while (a[e] == b[e]) e++;
        for (int i = 0; i < n_q * D; i++) elems += a[i] != b[i];
        float (*to_f32)(uint16_t) = be->act_dtype == RL_F16 ? rl_f16_to_f32 : rl_bf16_to_f32;
        fail_msg("invariant attention hd%d q%d/kv%d (%s): %d of %d positions differ between the "
                 "whole prompt and %s; the first, %d, in %d of its %d values, first at head %d "
                 "dim %d: %.9g against %.9g (bits %04x, %04x)",
                 D, n_q, n_kv, rl_dtype_name(be->act_dtype), rows_differ, L,
                 w == 1 ? "37-token chunks beside another sequence"
                        : "decode steps beside another sequence",
                 first, elems, n_q * D, e / D, e % D, to_f32(a[e]), to_f32(b[e]), a[e], b[e]);
    }
    printf("  invariant attention hd%d q%d/kv%d %-4s 300 rows bit-identical: one step, 37-token "
           "chunks, decode steps\n", D, n_q, n_kv, rl_dtype_name(be->act_dtype));
    for (int w = 0; w < 3; w++) free(ways[w]);
    free(v.qkv[0]), free(v.qkv[1]);
}

static void test_attention_invariant(void **state) {
    (void)state;
    /* the prefill kernel (64, 128) and the tiled kernel unsplit (32, 96) */
    const int cases[4][3] = {{6, 2, 64}, {7, 1, 128}, {4, 4, 32}, {2, 1, 96}};
    for (int d = 0; d < 2; d++) {
        rlError err;
        rlBackendOptions o = {.dtype = d ? RL_F16 : RL_BF16, .batch_invariant = 1};
        rlBackend *be = rl_backend_cuda_create(&o, &err);
        assert_non_null(be);
        for (int i = 0; i < 4; i++) attention_invariant_case(be, cases[i][0], cases[i][1], cases[i][2]);
        be->ops->destroy(be);
    }
}

/* ---- sampling: equal to the CPU backend's sampler on the same logits ---- */

/* The rows below on the GPU and on the CPU backend, with adjs (NULL:
 * none) as the step's logit adjustments and fills as the counts their
 * penalty tables start from, for `steps` steps over the same logits (the
 * tables filled at the first, counting every drawn token after; the GPU
 * sampling rows 0-2 and 3-7 in two calls): identical tokens, logprobs and
 * alternatives at every step. */
static void sample_case(const rlRowSpec *rows0, int n_adjs, const rlLogitAdj *adjs, int n_fills,
                        const rlPenFill *fills, int steps) {
    rlBackend *be = backends[0];
    const int V = 151936, n_rows = 8;
    float *logits = malloc((size_t)V * n_rows * sizeof *logits);
    for (int r = 0; r < n_rows; r++)
        for (int i = 0; i < V; i++) {
            float x = srand_f(6);
            /* rows 5 and 7: coarse values, so many logits tie */
            if (r == 5 || r == 7) x = floorf(x);
            logits[(size_t)r * V + i] = x;
        }
    rlError err;
    int32_t tok[8] = {0};
    rlBackendOptions co = {1, 0, RL_F32, 0, 0, 0};
    rlBackend *cpu = rl_backend_cpu_create(&co, &err);
    assert_non_null(cpu);
    assert_int_equal(cpu->ops->kv_init(cpu, 1, 1, 16, 1, 64, &err), 0);
    assert_int_equal(be->ops->kv_init(be, 1, 1, 16, 1, 64, &err), 0);
    rlRowResult *got = calloc((size_t)steps * n_rows, sizeof *got);
    rlRowResult *want = calloc((size_t)steps * n_rows, sizeof *want);
    int moved = 0;
    for (int k = 0; k < 2; k++) {
        rlBackend *b = k ? cpu : be;
        float *dl = b->ops->alloc(b, (size_t)V * n_rows * 4, &err);
        assert_non_null(dl);
        assert_int_equal(b->ops->upload(b, dl, RL_F32, logits, RL_F32, (size_t)V * n_rows, &err), 0);
        for (int st = 0; st < steps; st++) {
            rlRowSpec rows[8];
            memcpy(rows, rows0, sizeof rows);
            for (int r = 0; r < n_rows; r++) {
                rows[r].step += (uint32_t)st;
                if (st > 0) rows[r].pen_fill = 0;
            }
            begin_rows_adj(b, n_rows, tok, n_rows, rows, n_adjs, adjs, n_fills, fills);
            rlRowResult *res = (k ? want : got) + (size_t)st * n_rows;
            if (k) {
                assert_int_equal(b->ops->sample(b, dl, V, 0, n_rows, res, &err), 0);
            } else {   /* the GPU takes the rows in two slices, as the head gives them */
                assert_int_equal(b->ops->sample(b, dl, V, 0, 3, res, &err), 0);
                assert_int_equal(b->ops->sample(b, dl + (size_t)3 * V, V, 3, n_rows - 3, res + 3,
                                                &err), 0);
            }
        }
        b->ops->free(b, dl);
    }
    for (int st = 0; st < steps; st++)
        for (int r = 0; r < n_rows; r++) {
            const rlRowResult *g = &got[st * n_rows + r], *w = &want[st * n_rows + r];
            if (steps == 1 || st == steps - 1 || g->token != w->token)
                printf("  sample row %d%s, step %d: token %d (cpu %d) logprob %.5f (cpu %.5f)\n",
                       r, adjs || fills ? " (adjusted)" : "", st, g->token, w->token,
                       g->token_logprob, w->token_logprob);
            moved += st > 0 && w->token != want[r].token;
            assert_int_equal(g->token, w->token);
            assert_true(fabsf(g->token_logprob - w->token_logprob) < 1e-4f);
            assert_true(fabsf(g->target_logprob - w->target_logprob) < 1e-4f);
            assert_int_equal(g->n_top, w->n_top);
            for (int a = 0; a < w->n_top; a++) {
                assert_int_equal(g->top_ids[a], w->top_ids[a]);
                assert_true(fabsf(g->top_logprobs[a] - w->top_logprobs[a]) < 1e-4f);
            }
        }
    if (steps > 1) printf("  %d later draws differ from the first step's token\n", moved);
    free(got);
    free(want);
    cpu->ops->destroy(cpu);
    free(logits);
}

static rlRowSpec sample_rows[8] = {
    {.token = 0, .target = 17, .n_top = 5, .sample = 1, .temperature = 0, .top_p = 1},
    {.token = 1, .target = -1, .n_top = 20, .sample = 0, .top_p = 1},
    {.token = 2, .target = 3, .sample = 1, .temperature = 1, .top_p = 1, .seed = 7},
    {.token = 3, .target = -1, .n_top = 2, .sample = 1, .temperature = 0.7f, .top_k = 40,
     .top_p = 0.9f, .seed = 11, .step = 3},
    {.token = 4, .target = -1, .sample = 1, .temperature = 1.3f, .top_p = 0.5f,
     .min_p = 0.02f, .seed = 99, .sample_index = 2, .step = 9},
    {.token = 5, .target = -1, .n_top = 3, .sample = 1, .temperature = 0, .top_p = 1},
    {.token = 6, .target = -1, .sample = 1, .temperature = 0.5f, .top_k = 1000, .top_p = 1,
     .min_p = 0.1f, .seed = 5},
    {.token = 7, .target = -1, .n_top = 4, .sample = 1, .temperature = 1, .top_k = 7,
     .top_p = 1, .seed = 123456789},
};

static void test_sample(void **state) {
    (void)state;
    sample_case(sample_rows, 0, NULL, 0, NULL, 1);
}

/* Penalties, logit_bias and bans on the sampling rows, over 12 steps:
 * each row's penalty table filled at the first step with 600 counts (the
 * ids spread over the vocabulary and packed where the largest of srand_f's
 * values fall: every id below 2000), prompt flags, and then counting what
 * each backend draws; 60 entries a row of biases of both signs and -inf.
 * The GPU applies them in its own kernels; the tokens must be the CPU's
 * exactly, at every step. */
static void test_sample_penalties(void **state) {
    (void)state;
    enum { PER_ROW = 600, STEPS = 12 };
    rlRowSpec rows[8];
    rlLogitAdj *adjs = calloc(8 * PER_ROW, sizeof *adjs);
    rlPenFill *fills = calloc(8 * PER_ROW, sizeof *fills);
    const float reps[8] = {1.3f, 1, 0.8f, 1.1f, 2, 1.05f, 1, 1.5f};
    int n = 0, nf = 0;
    for (int r = 0; r < 8; r++) {
        rows[r] = sample_rows[r];
        if (!rows[r].sample) continue;
        rows[r].adj0 = n, rows[r].fill0 = nf;
        rows[r].pen = r + 1, rows[r].pen_fill = 1;
        rows[r].repetition = reps[r];
        rows[r].frequency = 0.25f * (float)(r % 3) + 0.5f;
        rows[r].presence = r & 1 ? 1.5f : -0.5f;
        for (int i = 0; i < PER_ROW; i++) {
            int id = i < 400 ? i * 5 + r % 5 : 2000 + (i - 400) * 700;
            fills[nf++] = (rlPenFill){.id = id, .count = i % 4 == 0 ? 0 : i % 7,
                                      .in_prompt = i % 3 == 0};
            float bias = i % 50 == 7 ? -INFINITY : i % 11 == 0 ? 3.5f : i % 13 == 0 ? -20.0f : 0;
            if (bias != 0) adjs[n++] = (rlLogitAdj){.id = id, .bias = bias};
        }
        rows[r].n_adj = n - rows[r].adj0;
        rows[r].n_fill = nf - rows[r].fill0;
    }
    sample_case(rows, n, adjs, nf, fills, STEPS);
    /* Tables alone (no entries), started over: the same rows again. */
    for (int r = 0; r < 8; r++) rows[r].n_adj = 0;
    sample_case(rows, n, adjs, nf, fills, STEPS);
    free(adjs);
    free(fills);
}

/* Mixture of experts: routing (ids equal to the float64 reference's, weights
 * close), the experts on both paths (a few pairs: GEMV; many: the grouped
 * GEMMs, with experts of one and of several 64-row tiles) onto out (added
 * to it, or written over a poisoned buffer), and the shared expert's gate.
 * Each case runs the experts twice: both runs against float64, and the
 * second bit-identical to the first. */
typedef struct tMoeShape {
    int rows, k, renorm, E, D, M, accumulate;
} tMoeShape;

#define MOE_GEMV_PAIRS 32   /* moe.cu's: up to this many (token, expert) pairs take the GEMVs */

static void moe_case(rlBackend *be, tMoeShape s) {
    const int rows = s.rows, k = s.k, E = s.E, D = s.D, M = s.M;
    rlError err;
    size_t nl = (size_t)rows * E, np = (size_t)rows * k, no = (size_t)rows * D;
    float *logits = malloc(nl * sizeof(float));
    for (size_t i = 0; i < nl; i++) logits[i] = srand_f(2);
    float *x = rand_vec((size_t)rows * D, 1, be->act_dtype);
    float *wgu = rand_vec((size_t)E * 2 * M * D, 0.2f, be->act_dtype);
    float *wdn = rand_vec((size_t)E * D * M, 0.2f, be->act_dtype);
    float *out0 = rand_vec(no, 1, be->act_dtype);
    float *d_logits = be->ops->alloc(be, nl * 4, &err);
    int *d_ids = be->ops->alloc(be, np * 4, &err);
    float *d_w = be->ops->alloc(be, np * 4, &err);
    assert_int_equal(be->ops->upload(be, d_logits, RL_F32, logits, RL_F32, nl, &err), 0);
    void *d_x = to_dev(be, x, (size_t)rows * D), *d_gu = to_dev(be, wgu, (size_t)E * 2 * M * D);
    void *d_dn = to_dev(be, wdn, (size_t)E * D * M);
    be->ops->moe_route(be, d_ids, d_w, d_logits, rows, E, k, s.renorm);
    int *ids = malloc(np * 4);
    float *w = malloc(np * 4);
    assert_int_equal(be->ops->sync(be, &err), 0);
    assert_int_equal(be->ops->download(be, ids, d_ids, np * 4, &err), 0);
    assert_int_equal(be->ops->download(be, w, d_w, np * 4, &err), 0);
    double *ref = malloc(no * sizeof(double)), *h = malloc((size_t)M * sizeof(double));
    double *p = malloc((size_t)E * sizeof(double));
    for (int t = 0; t < rows; t++) {
        const float *l = logits + (size_t)t * E;
        double sum = 0, chosen = 0;
        for (int e = 0; e < E; e++) sum += p[e] = exp(l[e]);
        int pick[32];
        for (int j = 0; j < k; j++) {
            int best = -1;
            for (int e = 0; e < E; e++) {
                int taken = 0;
                for (int i = 0; i < j; i++) taken |= pick[i] == e;
                if (!taken && (best < 0 || p[e] > p[best])) best = e;
            }
            pick[j] = best, chosen += p[best] / sum;
        }
        for (int i = 0; i < D; i++)
            ref[(size_t)t * D + i] = s.accumulate ? out0[(size_t)t * D + i] : 0;
        for (int j = 0; j < k; j++) {
            int e = pick[j];
            double pw = p[e] / sum / (s.renorm ? chosen : 1);
            if (ids[t * k + j] != e)
                fail_msg("moe_route (%s) token %d choice %d: expert %d, reference %d",
                         rl_dtype_name(be->act_dtype), t, j, ids[t * k + j], e);
            if (fabs(w[t * k + j] - pw) > 1e-5)
                fail_msg("moe_route: weight %g, reference %g", w[t * k + j], pw);
            const float *xt = x + (size_t)t * D;
            for (int c = 0; c < M; c++) {
                const float *gr = wgu + ((size_t)e * 2 * M + c) * D, *ur = gr + (size_t)M * D;
                double g = 0, u = 0;
                for (int i = 0; i < D; i++) g += (double)gr[i] * xt[i], u += (double)ur[i] * xt[i];
                h[c] = g / (1 + exp(-g)) * u;
            }
            for (int i = 0; i < D; i++) {
                const float *dr = wdn + ((size_t)e * D + i) * M;
                double y = 0;
                for (int c = 0; c < M; c++) y += (double)dr[c] * h[c];
                ref[(size_t)t * D + i] += pw * y;
            }
        }
    }
    float *out[2];
    void *d_out = s.accumulate ? to_dev(be, out0, no) : poisoned(be, no);
    for (int run = 0; run < 2; run++) {
        if (s.accumulate)
            assert_int_equal(be->ops->upload(be, d_out, be->act_dtype, out0, RL_F32, no, &err), 0);
        else
            be->ops->free(be, d_out), d_out = poisoned(be, no);
        be->ops->moe_experts(be, d_out, d_x, d_gu, d_dn, d_ids, d_w, rows, D, M, E, k,
                             s.accumulate);
        out[run] = from_dev(be, d_out, no);
    }
    char what[96];
    snprintf(what, sizeof(what), "moe %s %d tok top %d/%d %dx%d%s%s",
             np <= MOE_GEMV_PAIRS ? "gemv" : "grouped", rows, k, E, D, M,
             s.renorm ? " renorm" : "", s.accumulate ? " +=" : "");
    check_close(be, what, out[0], ref, no);
    if (memcmp(out[0], out[1], no * sizeof(float)))
        fail_msg("%s (%s): two runs differ", what, rl_dtype_name(be->act_dtype));
    /* The shared expert's gate: out *= sigmoid(x . w). */
    float *gw = rand_vec(D, 0.3f, be->act_dtype);
    void *d_gw = to_dev(be, gw, D);
    be->ops->shared_gate(be, d_out, d_x, d_gw, rows, D);
    float *gated = from_dev(be, d_out, no);
    for (int t = 0; t < rows; t++) {
        double g = 0;
        for (int i = 0; i < D; i++) g += (double)x[(size_t)t * D + i] * gw[i];
        for (int i = 0; i < D; i++)
            ref[(size_t)t * D + i] = out[1][(size_t)t * D + i] / (1 + exp(-g));
    }
    check_close(be, "shared_gate", gated, ref, no);
    void *bufs[] = {d_logits, d_ids, d_w, d_x, d_gu, d_dn, d_out, d_gw};
    for (size_t i = 0; i < sizeof(bufs) / sizeof(bufs[0]); i++) be->ops->free(be, bufs[i]);
    free(out[0]), free(out[1]);
    free(logits), free(x), free(wgu), free(wdn), free(out0), free(ids), free(w), free(ref);
    free(h), free(p), free(gw), free(gated);
}

/* The router and the routing in one op (moe_gate) give the same logits, ids
 * and weights, bit for bit, as matmul_f32 then moe_route on the same input,
 * twice in a row (the fused kernel's block counter starts over). */
static void moe_gate_case(rlBackend *be, int rows, int E, int D, int k, int renorm) {
    rlError err;
    size_t nl = (size_t)rows * E, np = (size_t)rows * k;
    float *x = rand_vec((size_t)rows * D, 1, be->act_dtype);
    float *router = rand_vec((size_t)E * D, 0.1f, be->act_dtype);
    void *d_x = to_dev(be, x, (size_t)rows * D), *d_r = to_dev(be, router, (size_t)E * D);
    float *d_l[2];
    int *d_ids[2];
    float *d_w[2];
    for (int i = 0; i < 2; i++) {
        d_l[i] = be->ops->alloc(be, nl * 4, &err);
        d_ids[i] = be->ops->alloc(be, np * 4, &err);
        d_w[i] = be->ops->alloc(be, np * 4, &err);
    }
    be->ops->matmul_f32(be, d_l[0], d_x, d_r, rows, E, D);
    be->ops->moe_route(be, d_ids[0], d_w[0], d_l[0], rows, E, k, renorm);
    float *l[2] = {malloc(nl * 4), malloc(nl * 4)}, *w[2] = {malloc(np * 4), malloc(np * 4)};
    int *ids[2] = {malloc(np * 4), malloc(np * 4)};
    for (int rep = 0; rep < 2; rep++) {
        be->ops->moe_gate(be, d_ids[1], d_w[1], d_l[1], d_x, d_r, rows, E, D, k, renorm);
        assert_int_equal(be->ops->sync(be, &err), 0);
        for (int i = 0; i < 2; i++) {
            assert_int_equal(be->ops->download(be, l[i], d_l[i], nl * 4, &err), 0);
            assert_int_equal(be->ops->download(be, ids[i], d_ids[i], np * 4, &err), 0);
            assert_int_equal(be->ops->download(be, w[i], d_w[i], np * 4, &err), 0);
        }
        if (memcmp(l[0], l[1], nl * 4) || memcmp(ids[0], ids[1], np * 4) ||
            memcmp(w[0], w[1], np * 4))
            fail_msg("moe_gate (%s, %d rows, %d experts, top %d, call %d): logits, ids or "
                     "weights differ from matmul_f32 + moe_route (first id %d against %d)",
                     rl_dtype_name(be->act_dtype), rows, E, k, rep + 1, ids[1][0], ids[0][0]);
        /* Spoil the fused results, so the second call must write them again. */
        for (size_t i = 0; i < np; i++) w[1][i] = -1;
        assert_int_equal(be->ops->upload(be, d_ids[1], RL_F32, w[1], RL_F32, np, &err), 0);
        assert_int_equal(be->ops->upload(be, d_w[1], RL_F32, w[1], RL_F32, np, &err), 0);
    }
    void *bufs[] = {d_x, d_r, d_l[0], d_l[1], d_ids[0], d_ids[1], d_w[0], d_w[1]};
    for (size_t i = 0; i < sizeof(bufs) / sizeof(bufs[0]); i++) be->ops->free(be, bufs[i]);
    for (int i = 0; i < 2; i++) free(l[i]), free(w[i]), free(ids[i]);
    free(x), free(router);
}

static void test_moe(void **state) {
    (void)state;
    for (int d = 0; d < 2; d++) {
        /* rows, top k, renormalised, experts, hidden, expert width, += */
        static const tMoeShape shapes[] = {
            {3, 2, 1, 6, 320, 48, 1},       /* 6 pairs: GEMV; hidden not a multiple of 256 */
            {1, 3, 0, 6, 320, 48, 0},
            {1, 8, 1, 128, 2048, 128, 0},   /* Qwen3-30B-A3B batch 1, 6 ranks' 128 columns */
            {1, 8, 1, 16, 2048, 768, 1},    /* its whole expert width (16 of its experts) */
            {4, 8, 1, 16, 2048, 768, 0},    /* 32 pairs, the GEMVs' most */
            {2, 8, 0, 8, 3584, 1280, 1},    /* Qwen2-57B-A14B, 2 ranks' columns, 8 experts */
            {8, 2, 1, 8, 256, 128, 0},      /* qwen3-moe-tiny */
            {8, 2, 0, 4, 192, 96, 1},       /* qwen2-moe-tiny */
            {8, 4, 0, 60, 320, 48, 1},      /* Qwen1.5-MoE's 60 experts, 32 pairs */
            {5, 6, 1, 6, 320, 16, 0},       /* every expert; rows of 2 chunks */
            {40, 2, 0, 6, 320, 48, 1},      /* 80 pairs: permutation + grouped GEMMs */
            {97, 3, 1, 6, 320, 48, 0},
            {200, 2, 1, 6, 320, 48, 1},     /* experts of more than one 64-row tile */
            {8, 8, 1, 16, 2048, 768, 1},    /* Qwen3-30B-A3B batch 8: 64 pairs, grouped */
        };
        for (size_t i = 0; i < sizeof(shapes) / sizeof(shapes[0]); i++)
            moe_case(backends[d], shapes[i]);
        moe_gate_case(backends[d], 1, 128, 2048, 8, 1);    /* Qwen3-30B-A3B at batch 1 */
        moe_gate_case(backends[d], 3, 60, 320, 4, 0);      /* Qwen2-MoE's 60, rows of 4 */
        moe_gate_case(backends[d], 8, 6, 64, 2, 1);
        moe_gate_case(backends[d], 9, 6, 64, 2, 1);        /* past the fused kernel's rows */
    }
}

static void test_errors(void **state) {
    (void)state;
    rlError err;
    rlBackendOptions bad = {0, 4096, RL_BF16, 0, 0, 0};
    assert_null(rl_backend_cuda_create(&bad, &err));
    assert_int_equal(err.code, RL_EDEVICE);
    printf("  device out of range: %s\n", err.msg);
    rlBackendOptions f32 = {0, 0, RL_F32, 0, 0, 0};
    assert_null(rl_backend_cuda_create(&f32, &err));
    printf("  fp32: %s\n", err.msg);
    rlBackend *be = backends[0];
    /* An impossible allocation is a clear error, not a crash. */
    assert_null(be->ops->alloc(be, (size_t)1 << 50, &err));
    assert_int_equal(err.code, RL_EMEMORY);
    printf("  huge alloc: %s\n", err.msg);
    int n_blocks = 0;
    assert_int_equal(be->ops->kv_capacity(be, (size_t)1 << 40, 16, 10, 0.9, &n_blocks, &err), -1);
    assert_int_equal(err.code, RL_EMEMORY);
    printf("  kv plan: %s\n", err.msg);
    assert_int_equal(be->ops->kv_capacity(be, (size_t)1 << 20, 16, 10, 0.9, &n_blocks, &err), 0);
    assert_true(n_blocks > 10);
}

/* ---- `test_cuda_ops bench`: prefill attention at the Qwen2.5-7B shape ---- */

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

/* One prefill step of n_seqs prompts of len tokens from position 0 (28
 * query heads, 4 KV heads, head dim 128, bf16): ms per attention call and
 * TFLOP/s of the causal FLOPs, 4 * heads * head_dim * len^2 / 2 a prompt. */
static int bench_attention(rlBackend *be, int n_seqs, int len) {
    const int n_q = 28, n_kv = 4, D = 128, bs = 16, W = (n_q + 2 * n_kv) * D;
    const int nb = (len + bs - 1) / bs, n = n_seqs * len;
    rlError err;
    if (be->ops->kv_init(be, 1, n_seqs * nb, bs, n_kv, D, &err)) {
        fprintf(stderr, "bench: %s\n", err.msg);
        return 1;
    }
    double table[64], scale;
    rope_table(table, D, 0, &scale);
    int32_t *tokens = calloc((size_t)n, 4), *pos = malloc((size_t)n * 4);
    int32_t *slots = malloc((size_t)n * 4), *start = malloc((size_t)(n_seqs + 1) * 4);
    int32_t *lens = malloc((size_t)n_seqs * 4), *btab = malloc((size_t)n_seqs * nb * 4);
    for (int s = 0; s < n_seqs; s++) {
        start[s] = s * len, lens[s] = len;
        for (int b = 0; b < nb; b++) btab[s * nb + b] = s * nb + b;
        for (int p = 0; p < len; p++) pos[s * len + p] = p, slots[s * len + p] = s * nb * bs + p;
    }
    start[n_seqs] = n;
    rlBatch b = {n_seqs, n, tokens, pos, slots, start, lens, btab, nb, 0, NULL, 0, NULL, 0, NULL};
    void *qkv = be->ops->alloc(be, (size_t)n * W * 2, &err);
    void *out = qkv ? be->ops->alloc(be, (size_t)n * n_q * D * 2, &err) : NULL;
    rlAttnShape sh = {n_q, n_kv, 0, 0, n_q / n_kv, D};
    int rc = 1;
    if (out && !be->ops->rope_init(be, table, D / 2, scale, &err) &&
        !be->ops->begin_step(be, &b, &err) &&
        !be->ops->fill_random(be, qkv, RL_BF16, (size_t)n * W, 7, 1.0f, &err)) {
        be->ops->rope_kv_store(be, qkv, NULL, NULL, 1e-6f, 0, &sh);
        be->ops->attention(be, out, qkv, 0, &sh);
        if (!be->ops->sync(be, &err)) {
            const int reps = len > 4096 ? 5 : 20;
            double t0 = now_s();
            for (int i = 0; i < reps; i++) be->ops->attention(be, out, qkv, 0, &sh);
            if (!be->ops->sync(be, &err)) {
                double ms = (now_s() - t0) * 1e3 / reps;
                double flop = 4.0 * n_q * D * (double)len * len / 2 * n_seqs;
                printf("attention prefill %d x %d: %.3f ms, %.1f TFLOP/s (28 q / 4 kv heads, "
                       "head dim 128, bf16)\n", n_seqs, len, ms, flop / ms * 1e-9);
                rc = 0;
            }
        }
    }
    if (rc) fprintf(stderr, "bench: %s\n", err.msg);
    be->ops->free(be, qkv), be->ops->free(be, out);
    free(tokens), free(pos), free(slots), free(start), free(lens), free(btab);
    return rc;
}

int main(int argc, char **argv) {
    rlError err;
    rlBackendOptions o = {0, 0, RL_BF16, 0, 0, 0};
    if (!(backends[0] = rl_backend_cuda_create(&o, &err))) {
        if (getenv("RL_REQUIRE_GPU")) {
            fprintf(stderr, "test_cuda_ops: no usable GPU: %s\n", err.msg);
            return 1;
        }
        printf("skipped: no GPU (%s)\n", err.msg);
        return 77;
    }
    if (argc > 1 && !strcmp(argv[1], "bench")) {
        int rc = bench_attention(backends[0], 8, 2048) || bench_attention(backends[0], 1, 30000);
        backends[0]->ops->destroy(backends[0]);
        return rc;
    }
    o.dtype = RL_F16;
    if (!(backends[1] = rl_backend_cuda_create(&o, &err))) {
        fprintf(stderr, "test_cuda_ops: fp16 backend: %s\n", err.msg);
        return 1;
    }
    const char *seed = getenv("RL_TEST_SEED");
    rng_state = seed ? strtoull(seed, NULL, 10) : (uint64_t)time(NULL);
    printf("test_cuda_ops: RL_TEST_SEED=%llu\n", (unsigned long long)rng_state);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_matmul),     cmocka_unit_test(test_matmul_invariant),
        cmocka_unit_test(test_norms),       cmocka_unit_test(test_attention_invariant),
        cmocka_unit_test(test_elementwise), cmocka_unit_test(test_attention),
        cmocka_unit_test(test_sample),     cmocka_unit_test(test_sample_penalties),
        cmocka_unit_test(test_moe),        cmocka_unit_test(test_errors),
    };
    if (argc > 1) cmocka_set_test_filter(argv[1]);
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    backends[0]->ops->destroy(backends[0]);
    backends[1]->ops->destroy(backends[1]);
    return rc;
}
