/* test_cuda_wq.c: the quantized-weight kernels (kernels/cuda/wq.cu) against
 * a float64 reference on random layers, and their microbenchmark.
 *
 * Each case is a random layer of one format (int4 / int8 with groups of
 * 32 / 64 / 128 / all of k, act-order, fp8 with block, channel and tensor
 * scales, odd n and k), multiplied by bf16- or fp16-rounded activations at
 * m = 1 .. 128 rows: the mma kernel at every m, the decode GEMV at 1 to 8
 * and the tile kernel at every m on the layers it takes (with a workspace,
 * so narrow layers split K over blocks, and without), each forced
 * (wq_decode_kernel_force), and which one rl_wq_gemm picks (wq_kernel).
 * The tile kernel rounds the scale to the activations' type inside its
 * fragments (Marlin's numerics): its error is larger, within the same
 * bound.  The reference is float64 over the weights
 * the CPU backend dequantizes ((float)(s * (q - z)),
 * worker/model/quant.c's e4m3 decoder); the check is the largest |y - ref| over the row's sum of
 * |x| |w| (fp32 sums and one rounding of y: bf16 about 2e-3, bound 1e-2),
 * printed.  y is poisoned first and its padding must stay so.
 * rl_wq_dequant must equal the CPU's values rounded to bf16 / fp16 exactly.
 * On FP8 layers where the GPU's code has the e4m3 mma, rl_wq_gemm_a8 (W8A8
 * in the decode GEMV) at 1 .. rl_wq_a8_rows rows, with dynamic scales and
 * a static one, against a reference over x rounded to e4m3 on the host the
 * way the GPU rounds it (run_a8), under the same bound.
 * Without a GPU too: the packed layout read back value by value, and shapes
 * it cannot hold refused with a message.
 *
 * Without a GPU the GPU cases print "skipped: no GPU" and the program
 * exits 77 (RL_REQUIRE_GPU=1: a failure).  RL_TEST_SEED=N repeats a run.
 *
 * `test_cuda_wq bench [int4|int8|fp8]...`: the Qwen2.5-7B layer shapes,
 * time per launch (CUDA graphs over copies that do not fit L2), GB/s of the
 * bytes the layout holds and % of the copy bandwidth measured in the same
 * run, and at 1-64 rows the ratio to the CUDA backend's bf16 matmul; every
 * kernel that can take the rows (the table has the one rl_wq_gemm picks),
 * so the choice can be measured again. */
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

#ifdef RL_HAVE_CUDA
#include "kernels/backend.h"
#include "kernels/cuda/wq_internal.h"
#include "kernels/half.h"
#include "kernels/rng.h"
#include "worker/model/quant.h"

static uint64_t rng_state;
static cudaStream_t stream;
/* rl_wq_gemm's launches with PDL where the backend's would be. */
static int pdl;

static uint32_t rnd32(void) {
    rng_state = rl_mix64(rng_state);
    return (uint32_t)(rng_state >> 32);
}
static double urand(void) { return (rnd32() >> 8) * (1.0 / 16777216.0); }

static uint16_t to_half(float v, rlDtype dt) {
    return dt == RL_F16 ? rl_f32_to_f16(v) : rl_f32_to_bf16(v);
}
static float from_half(uint16_t h, rlDtype dt) {
    return dt == RL_F16 ? rl_f16_to_f32(h) : rl_bf16_to_f32(h);
}

typedef struct Layer {
    rlWqHost h;
    uint8_t *q;
    float *scale, *zero;
    int32_t *perm;
} Layer;

/* A random layer: values over the type's whole range, fp8 without NaN. */
static void layer_make(Layer *l, rlWqType type, int n, int k, int gk, int gn, int act_order) {
    memset(l, 0, sizeof(*l));
    int groups = (k + gk - 1) / gk, srows = (n + gn - 1) / gn;
    l->q = malloc((size_t)n * k);
    for (size_t i = 0; i < (size_t)n * k; i++) {
        uint32_t r = rnd32();
        l->q[i] = type == RL_WQ_INT4 ? r & 15 : type == RL_WQ_INT8 ? r & 255
                  : (r & 0x7f) == 0x7f ? (uint8_t)(r & 0x80) : (uint8_t)r;
    }
    l->scale = malloc((size_t)srows * groups * sizeof(float));
    for (int i = 0; i < srows * groups; i++)
        l->scale[i] = (float)((0.5 + urand()) * (type == RL_WQ_FP8 ? 1e-3 : 1e-2));
    if (type != RL_WQ_FP8) {
        l->zero = malloc((size_t)n * groups * sizeof(float));
        for (int i = 0; i < n * groups; i++)
            l->zero[i] = (float)(rnd32() % (type == RL_WQ_INT4 ? 16 : 256));
    }
    if (act_order) {
        l->perm = malloc((size_t)k * sizeof(int32_t));
        for (int j = 0; j < k; j++) l->perm[j] = j;
        for (int j = k - 1; j > 0; j--) {
            int i = (int)(rnd32() % (uint32_t)(j + 1));
            int32_t t = l->perm[i];
            l->perm[i] = l->perm[j];
            l->perm[j] = t;
        }
    }
    l->h = (rlWqHost){type, n, k, gk, gn, l->q, l->scale, l->zero, l->perm};
}

static void layer_free(Layer *l) {
    free(l->q);
    free(l->scale);
    free(l->zero);
    free(l->perm);
}

/* The CPU backend's dequantized value of q's [r][j]. */
static float layer_w(const Layer *l, int r, int j) {
    const rlWqHost *h = &l->h;
    int groups = (h->k + h->group_k - 1) / h->group_k, g = j / h->group_k;
    double s = h->scale[(size_t)(r / h->group_n) * groups + g];
    uint8_t q = h->q[(size_t)r * h->k + j];
    if (h->type == RL_WQ_FP8) return (float)(rl_fp8_e4m3(q) * s);
    return (float)(s * (q - h->zero[(size_t)r * groups + g]));
}

typedef struct Case {
    const char *name;
    rlWqType type;
    int n, k, gk, gn, act_order;
} Case;

/* n needs nothing (padded to 8), k a multiple of 8, groups multiples of 32
 * or all of k (wq_internal.h). */
static const Case cases[] = {
    {"int4 g32", RL_WQ_INT4, 136, 512, 32, 1, 0},
    {"int4 g64 (k 448)", RL_WQ_INT4, 72, 448, 64, 1, 0},
    {"int4 g128", RL_WQ_INT4, 264, 1024, 128, 1, 0},
    {"int4 g=k (n 75, k 200)", RL_WQ_INT4, 75, 200, 200, 1, 0},
    {"int4 g128 act-order", RL_WQ_INT4, 96, 768, 128, 1, 1},
    {"int4 g128 k 3584", RL_WQ_INT4, 40, 3584, 128, 1, 0},
    {"int4 g384 (3 chunks a group)", RL_WQ_INT4, 48, 1152, 384, 1, 0},
    {"int4 g128 n 20000 (tiles > a wave)", RL_WQ_INT4, 20000, 256, 128, 1, 0},
    /* More strips than two waves of the GEMV's 4-warp blocks on 132-148
     * SMs, and 8 chunks: with RL_WQ_COUNTER=1 (gpu_wq.sh's second run) its
     * blocks take strips from the counter. */
    {"int4 g128 n 40000 k 1024 (the GEMV's strip counter)", RL_WQ_INT4, 40000, 1024, 128, 1, 0},
    {"int4 g96 (groups straddle chunks)", RL_WQ_INT4, 56, 480, 96, 1, 0},
    {"int8 g32", RL_WQ_INT8, 80, 320, 32, 1, 0},
    {"int8 g64 (n 33)", RL_WQ_INT8, 33, 384, 64, 1, 0},
    {"int8 g128", RL_WQ_INT8, 128, 640, 128, 1, 0},
    {"int8 g=k (n 41, k 136)", RL_WQ_INT8, 41, 136, 136, 1, 0},
    {"int8 g32 act-order", RL_WQ_INT8, 64, 256, 32, 1, 1},
    {"int8 g96 (groups straddle chunks)", RL_WQ_INT8, 48, 288, 96, 1, 0},
    {"int8 g128 n 20000 (tiles > a wave)", RL_WQ_INT8, 20000, 256, 128, 1, 0},
    {"fp8 block 128x128 (n 300)", RL_WQ_FP8, 300, 640, 128, 128, 0},
    {"fp8 block 128x128 n 20000", RL_WQ_FP8, 20000, 256, 128, 128, 0},
    {"fp8 channel (n 77, k 264)", RL_WQ_FP8, 77, 264, 264, 1, 0},
    {"fp8 tensor", RL_WQ_FP8, 64, 512, 512, 64, 0},
};
/* ------------------------------------------------------------ the layout */

/* wq_pack's output read back through wq_internal.h's lane helpers (the
 * kernels' index math), independently of the kernels: every value of every
 * lane's 16 bytes, the zero padding, every scale and zero. */
static void test_layout(void **state) {
    (void)state;
    for (size_t ci = 0; ci < sizeof(cases) / sizeof(cases[0]); ci++) {
        const Case *c = &cases[ci];
        Layer l;
        layer_make(&l, c->type, c->n, c->k, c->gk, c->gn, c->act_order);
        rlWq w;
        char msg[256];
        uint8_t *qw, *zero;
        float *scale;
        assert_int_equal(wq_layout(&l.h, &w, msg, sizeof(msg)), 0);
        if (wq_pack(&l.h, &w, &qw, &scale, &zero, msg, sizeof(msg))) fail_msg("%s: %s", c->name, msg);
        int npad = w.ntiles * WQ_TILE_N, groups = w.ngroups, int4 = c->type == RL_WQ_INT4;
        for (int t = 0; t < w.ntiles; t++)
            for (int ch = 0; ch < w.nchunks; ch++)
                for (int lane = 0; lane < 32; lane++) {
                    uint32_t words[4];
                    memcpy(words, qw + wq_lane_offset(w.nchunks, t, ch, lane), 16);
                    int r = wq_lane_row(t, lane);
                    for (int e = 0; e < 8 * w.chunk_units; e++) {
                        int j = wq_lane_col(w.chunk_units, ch, lane, e);
                        unsigned v = wq_lane_value(words, int4, e);
                        unsigned want = r < c->n && j < c->k ? l.q[(size_t)r * c->k + j] : 0;
                        if (v != want)
                            fail_msg("%s: tile %d chunk %d lane %d value %d ([%d][%d]) = %u, not %u",
                                     c->name, t, ch, lane, e, r, j, v, want);
                    }
                }
        for (int g = 0; g < groups; g++)
            for (int r = 0; r < c->n; r++) {
                float s = scale[(size_t)g * w.scale_rows + (r >> w.gshift)];
                if (s != l.scale[(size_t)(r / c->gn) * groups + g])
                    fail_msg("%s: scale of row %d group %d misplaced", c->name, r, g);
                if (zero && zero[(size_t)g * npad + r] != l.zero[(size_t)r * groups + g])
                    fail_msg("%s: zero of row %d group %d misplaced", c->name, r, g);
            }
        free(qw);
        free(scale);
        free(zero);
        layer_free(&l);
    }
    printf("  %zu layouts read back\n", sizeof(cases) / sizeof(cases[0]));
}

/* ------------------------------------------------------------ refusals */

static void expect_refused(const rlWqHost *h, const char *needle) {
    char msg[512] = "";
    rlWq *w = (rlWq *)1;
    size_t bytes = 0;
    assert_int_not_equal(rl_wq_upload(h, 0, &w, &bytes, msg, sizeof(msg)), 0);
    assert_null(w);
    printf("  refused: %s\n", msg);
    if (!strstr(msg, needle)) fail_msg("message lacks \"%s\": %s", needle, msg);
}

static void test_refusals(void **state) {
    (void)state;
    Layer l;
    layer_make(&l, RL_WQ_INT4, 16, 128, 32, 1, 0);
    rlWqHost h = l.h;
    h.k = 100, h.group_k = 100;
    expect_refused(&h, "multiple of 8");
    h = l.h;
    h.group_k = 48;
    expect_refused(&h, "multiples of 32");
    h = l.h;
    h.group_n = 2;
    expect_refused(&h, "scale per row");
    l.q[5] = 16;
    expect_refused(&l.h, "not in 0..15");
    l.q[5] = 3;
    l.zero[2] = 2.5f;
    expect_refused(&l.h, "not an integer");
    l.zero[2] = 2;
    int32_t perm[128];
    for (int j = 0; j < 128; j++) perm[j] = j;
    perm[7] = 3;
    h = l.h;
    h.perm = perm;
    expect_refused(&h, "repeated");
    layer_free(&l);
    layer_make(&l, RL_WQ_FP8, 48, 128, 128, 3, 0);
    expect_refused(&l.h, "power of two");
    l.q[9] = 0xff;
    l.h.group_n = 16;
    expect_refused(&l.h, "NaN");
    layer_free(&l);
}

/* ------------------------------------------------------------ on the GPU */

static int gpu_ok;

static const int ms[] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 16, 24, 32, 33, 64, 100, 128};
static const char *kernel_name[] = {"mma", "gemv", "tile", "tile, K unsplit"};
#define WS_BYTES (64u << 20)   /* every split the tile kernel wants */
#define MAX_M WQ_MAX_ROWS

static void *dev_alloc(size_t bytes) {
    void *p = NULL;
    assert_int_equal(cudaMalloc(&p, bytes), cudaSuccess);
    return p;
}

/* y (MAX_M x ldy on the device) against ref + bias for m rows: the largest
 * error over the row's |x||w| sum (mag); what lies outside the m x n
 * output must still be the 0xff poison. */
static double check_y(const Case *c, rlDtype dt, const char *what, int m, const uint16_t *yh, int ldy,
                      const double *ref, const double *mag, const double *bd) {
    const int n = c->n;
    double err = 0;
    for (int r = 0; r < MAX_M; r++)
        for (int o = 0; o < ldy; o++) {
            uint16_t b = yh[(size_t)r * ldy + o];
            if (r >= m || o >= n) {
                if (b != 0xffff)
                    fail_msg("%s %s m=%d: y[%d][%d] outside the output was written", c->name, what, m, r, o);
                continue;
            }
            float v = from_half(b, dt);
            if (!isfinite(v)) fail_msg("%s %s m=%d: y[%d][%d] = %f (unwritten?)", c->name, what, m, r, o, v);
            const double bo = bd ? bd[o] : 0, want = ref[(size_t)r * n + o] + bo;
            const double scale = mag[(size_t)r * n + o] + fabs(bo);
            double e = fabs(v - want) / (scale > 0 ? scale : 1);
            if (e > err) err = e;
        }
    if (!(err < 1e-2))
        fail_msg("%s %s %s m=%d: error %.3e of the row's |x||w| sum, over 1e-2", c->name,
                 rl_dtype_name(dt), what, m, err);
    return err;
}

/* float8_e4m3fn nearest to v (ties to even), saturating at +-448: what the
 * GPU's cvt.rn.satfinite makes of it. */
static double e4m3_round(float v) {
    double a = fabs((double)v);
    if (a >= 448) return copysign(448, v);
    int e;
    frexp(a, &e);
    int ex = e - 1 < -6 ? -6 : e - 1;   /* 3 mantissa bits; subnormals step 2^-9 */
    return copysign(ldexp(nearbyint(ldexp(a, 3 - ex)), ex - 3), v);
}

/* rl_wq_gemm_a8 on an FP8 layer at 1 .. its rows, dynamic scales and a
 * static one (0.002: x in [-1, 1) saturates past 0.896): the reference
 * multiplies x rounded as the host rounds it here, per row and 128
 * columns, as qlinear.cu's quantizer does, so it checks the kernel's
 * rounding and fragments exactly up to fp32 sums and y's rounding. */
static void run_a8(const Case *c, rlDtype dt, const rlWq *w, const double *xd, const double *wd,
                   void *xdv, int ldx, void *ydv, int ldy, void *bdv, const double *bd, uint16_t *yh,
                   double *worst) {
    const int n = c->n, k = c->k, rows = rl_wq_a8_rows(w);
    double *ref = malloc((size_t)MAX_M * n * sizeof(double)), *mag = malloc((size_t)MAX_M * n * sizeof(double));
    double *xq = malloc((size_t)k * sizeof(double));
    float *sdv = dev_alloc(sizeof(float));
    for (int st = 0; st < 2; st++) {
        const float in_scale = st ? 0.002f : 0.0f;
        assert_int_equal(cudaMemcpy(sdv, &in_scale, sizeof in_scale, cudaMemcpyHostToDevice), cudaSuccess);
        for (int r = 0; r < rows; r++) {
            for (int g0 = 0; g0 < k; g0 += 128) {
                float amax = 0;
                for (int j = g0; j < g0 + 128 && j < k; j++) amax = fmaxf(amax, fabsf((float)xd[(size_t)r * k + j]));
                const float inv = st ? 1.0f / in_scale : amax > 0 ? 448.0f / amax : 1.0f;
                const float sc = st ? in_scale : amax > 0 ? amax / 448.0f : 1.0f;
                for (int j = g0; j < g0 + 128 && j < k; j++)
                    xq[j] = e4m3_round((float)xd[(size_t)r * k + j] * inv) * sc;
            }
            for (int o = 0; o < n; o++) {
                double sum = 0, a = 0;
                for (int j = 0; j < k; j++) sum += xq[j] * wd[(size_t)o * k + j], a += fabs(xq[j] * wd[(size_t)o * k + j]);
                ref[(size_t)r * n + o] = sum, mag[(size_t)r * n + o] = a;
            }
        }
        for (int m = 1; m <= rows; m++) {
            const int bias = m % 2;
            assert_int_equal(cudaMemsetAsync(ydv, 0xff, (size_t)MAX_M * ldy * 2, stream), cudaSuccess);
            assert_int_equal(rl_wq_gemm_a8(w, dt, xdv, ldx, ydv, ldy, bias ? bdv : NULL, m, st ? sdv : NULL,
                                           pdl, stream), 0);
            assert_int_equal(cudaStreamSynchronize(stream), cudaSuccess);
            assert_int_equal(cudaMemcpy(yh, ydv, (size_t)MAX_M * ldy * 2, cudaMemcpyDeviceToHost), cudaSuccess);
            double e = check_y(c, dt, st ? "a8 static" : "a8", m, yh, ldy, ref, mag, bias ? bd : NULL);
            if (e > *worst) *worst = e;
        }
    }
    /* Past its rows it refuses, as rl_wq_gemm does past its own. */
    assert_int_equal(rl_wq_gemm_a8(w, dt, xdv, ldx, ydv, ldy, NULL, rows + 1, NULL, pdl, stream), RL_EINPUT);
    cudaFree(sdv);
    free(ref), free(mag), free(xq);
}

static void run_case(const Case *c, rlDtype dt, double *worst) {
    Layer l;
    layer_make(&l, c->type, c->n, c->k, c->gk, c->gn, c->act_order);
    char msg[512] = "";
    rlWq *w = NULL;
    size_t bytes = 0;
    if (rl_wq_upload(&l.h, stream, &w, &bytes, msg, sizeof(msg))) fail_msg("upload: %s", msg);

    int n = c->n, k = c->k, ldx = k + 8, ldy = n + 3;
    /* Activations in [-1, 1), rounded to dt: what the GPU sees. */
    uint16_t *xh = malloc((size_t)MAX_M * ldx * 2);
    double *xd = malloc((size_t)MAX_M * k * sizeof(double));
    for (int r = 0; r < MAX_M; r++)
        for (int j = 0; j < ldx; j++) {
            uint16_t b = to_half((float)(2 * urand() - 1), dt);
            xh[(size_t)r * ldx + j] = b;
            if (j < k) xd[(size_t)r * k + j] = from_half(b, dt);
        }
    /* Reference over the first MAX_M rows; smaller m reuse its rows. */
    double *wd = malloc((size_t)n * k * sizeof(double));
    for (int r = 0; r < n; r++)
        for (int j = 0; j < k; j++) wd[(size_t)r * k + j] = layer_w(&l, r, j);
    double *ref = malloc((size_t)MAX_M * n * sizeof(double)), *mag = malloc((size_t)MAX_M * n * sizeof(double));
    for (int r = 0; r < MAX_M; r++)
        for (int o = 0; o < n; o++) {
            double s = 0, a = 0;
            for (int j = 0; j < k; j++) {
                double xv = xd[(size_t)r * k + (l.perm ? l.perm[j] : j)], wv = wd[(size_t)o * k + j];
                s += xv * wv;
                a += fabs(xv * wv);
            }
            ref[(size_t)r * n + o] = s;
            mag[(size_t)r * n + o] = a;
        }
    /* A bias (every other row count takes it), added before y's rounding. */
    uint16_t *bh = malloc((size_t)n * 2);
    double *bd = malloc((size_t)n * sizeof(double));
    for (int o = 0; o < n; o++) bh[o] = to_half((float)(2 * urand() - 1), dt), bd[o] = from_half(bh[o], dt);
    void *xdv = dev_alloc((size_t)MAX_M * ldx * 2), *ydv = dev_alloc((size_t)MAX_M * ldy * 2);
    void *bdv = dev_alloc((size_t)n * 2);
    assert_int_equal(cudaMemcpy(xdv, xh, (size_t)MAX_M * ldx * 2, cudaMemcpyHostToDevice), cudaSuccess);
    assert_int_equal(cudaMemcpy(bdv, bh, (size_t)n * 2, cudaMemcpyHostToDevice), cudaSuccess);
    uint16_t *yh = malloc((size_t)MAX_M * ldy * 2);
    void *wsv = dev_alloc(WS_BYTES);
    /* The tile kernel takes layers whose groups are 2^i whole chunks of K
     * (128 columns int4, 64 8-bit) or all of it, without act-order. */
    const int chunk_k = c->type == RL_WQ_INT4 ? 128 : 64, cpg = c->gk / chunk_k;
    const int tile = !c->act_order && (c->gk >= c->k || (c->gk % chunk_k == 0 && !(cpg & (cpg - 1))));
    assert_int_equal(rl_wq_max_rows(w), tile ? WQ_MAX_ROWS : WQ_FAST_ROWS);
    /* Every kernel on the rows it may take, whichever the rule picks: the
     * mma kernel on all, the decode GEMV up to 8, the tile kernel from 1
     * (with the workspace, so narrow layers split K over blocks, and
     * without).  What rl_wq_gemm picks by itself is one of these. */
    const int want = !c->act_order ? WQ_KERNEL_GEMV : WQ_KERNEL_MMA;
    assert_int_equal(wq_kernel(w, 1), want);
    assert_int_equal(wq_kernel(w, 8), want);
    assert_int_equal(wq_kernel(w, 9), tile ? WQ_KERNEL_TILE : WQ_KERNEL_MMA);
    for (int kern = WQ_KERNEL_MMA; kern <= WQ_KERNEL_TILE + 1; kern++) {
        if (kern >= WQ_KERNEL_TILE && !tile) continue;
        wq_decode_kernel_force(kern > WQ_KERNEL_TILE ? WQ_KERNEL_TILE : kern);
        void *ws = kern > WQ_KERNEL_TILE ? NULL : wsv;
        for (size_t mi = 0; mi < sizeof(ms) / sizeof(ms[0]); mi++) {
            int m = ms[mi], bias = mi % 2;
            if (kern == WQ_KERNEL_GEMV && m > 8) continue;
            assert_int_equal(cudaMemsetAsync(ydv, 0xff, (size_t)MAX_M * ldy * 2, stream), cudaSuccess);
            assert_int_equal(rl_wq_gemm(w, dt, xdv, ldx, ydv, ldy, bias ? bdv : NULL, m, ws,
                                        ws ? WS_BYTES : 0, pdl, stream), 0);
            assert_int_equal(cudaStreamSynchronize(stream), cudaSuccess);
            assert_int_equal(cudaMemcpy(yh, ydv, (size_t)MAX_M * ldy * 2, cudaMemcpyDeviceToHost), cudaSuccess);
            double err = check_y(c, dt, kernel_name[kern], m, yh, ldy, ref, mag, bias ? bd : NULL);
            if (err > *worst) *worst = err;
        }
    }
    wq_decode_kernel_force(-1);
    const int a8 = c->type == RL_WQ_FP8 ? rl_wq_a8_rows(w) : 0;
    if (a8) run_a8(c, dt, w, xd, wd, xdv, ldx, ydv, ldy, bdv, bd, yh, worst);
    /* rl_wq_dequant: exactly the CPU's values, rounded once. */
    void *ddv = dev_alloc((size_t)n * k * 2);
    assert_int_equal(cudaMemsetAsync(ddv, 0xff, (size_t)n * k * 2, stream), cudaSuccess);
    assert_int_equal(rl_wq_dequant(w, dt, ddv, stream), 0);
    assert_int_equal(cudaStreamSynchronize(stream), cudaSuccess);
    uint16_t *dh = malloc((size_t)n * k * 2);
    assert_int_equal(cudaMemcpy(dh, ddv, (size_t)n * k * 2, cudaMemcpyDeviceToHost), cudaSuccess);
    for (int r = 0; r < n; r++)
        for (int j = 0; j < k; j++) {
            uint16_t want = to_half(layer_w(&l, r, j), dt);
            uint16_t got = dh[(size_t)r * k + (l.perm ? l.perm[j] : j)];
            if (got != want)
                fail_msg("%s %s dequant [%d][%d]: 0x%04x, the CPU's value rounds to 0x%04x",
                         c->name, rl_dtype_name(dt), r, j, got, want);
        }
    printf("  %-34s %-5s %8zu bytes  max err %.2e of |x||w| (m 1..128; gemv m 1..8%s), dequant exact",
           c->name, rl_dtype_name(dt), bytes, *worst, tile ? "; tile m 1..128" : "");
    if (a8) printf("; a8 m 1..%d", a8);
    printf("\n");
    cudaFree(wsv);
    cudaFree(xdv);
    cudaFree(ydv);
    cudaFree(ddv);
    cudaFree(bdv);
    free(xh), free(xd), free(wd), free(ref), free(mag), free(yh), free(dh), free(bh), free(bd);
    rl_wq_free(w);
    layer_free(&l);
}

static void test_layers(void **state) {
    (void)state;
    if (!gpu_ok) skip();
    double worst_all = 0;
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        double worst[2] = {0, 0};
        run_case(&cases[i], RL_BF16, &worst[0]);
        run_case(&cases[i], RL_F16, &worst[1]);
        if (worst[0] > worst_all) worst_all = worst[0];
    }
    printf("  largest error (bf16): %.2e of the row's |x||w| sum (bound 1e-2)\n", worst_all);
}

/* Arguments the weights cannot take are an error code, not a launch. */
static void test_bad_calls(void **state) {
    (void)state;
    if (!gpu_ok) skip();
    Layer l;
    layer_make(&l, RL_WQ_INT4, 16, 64, 32, 1, 0);
    char msg[256];
    rlWq *w;
    assert_int_equal(rl_wq_upload(&l.h, stream, &w, NULL, msg, sizeof(msg)), 0);
    void *x = dev_alloc(4096), *y = dev_alloc(4096);
    assert_int_equal(rl_wq_gemm(w, RL_BF16, x, 64, y, 16, NULL, 0, NULL, 0, pdl, stream), RL_EINPUT);
    assert_int_equal(rl_wq_gemm(w, RL_BF16, x, 64, y, 16, NULL, WQ_MAX_ROWS + 1, NULL, 0, pdl, stream), RL_EINPUT);
    assert_int_equal(rl_wq_gemm(w, RL_F32, x, 64, y, 16, NULL, 1, NULL, 0, pdl, stream), RL_EINPUT);
    assert_int_equal(rl_wq_gemm(w, RL_BF16, x, 60, y, 16, NULL, 1, NULL, 0, pdl, stream), RL_EINPUT);
    assert_int_equal(rl_wq_gemm(w, RL_BF16, (char *)x + 2, 64, y, 16, NULL, 1, NULL, 0, pdl, stream), RL_EINPUT);
    assert_int_equal(rl_wq_gemm(w, RL_BF16, NULL, 64, y, 16, NULL, 1, NULL, 0, pdl, stream), RL_EINPUT);
    assert_int_equal(rl_wq_dequant(w, RL_BF16, (char *)y + 2, stream), RL_EINPUT);
    assert_int_equal(rl_wq_gemm(w, RL_BF16, x, 64, y, 16, NULL, 1, NULL, 0, pdl, stream), 0);
    assert_int_equal(cudaStreamSynchronize(stream), cudaSuccess);
    cudaFree(x);
    cudaFree(y);
    rl_wq_free(w);
    layer_free(&l);
}

/* ------------------------------------------------------------ benchmark */

/* Another device copy of w's arrays (benchmark copies that do not fit L2). */
static rlWq *wq_clone(const rlWq *w) {
    rlWq *c = malloc(sizeof(*c));
    *c = *w;
    const void *src[5] = {w->qw, w->scale, w->zero, w->perm, w->strips};
    void **dst[5] = {(void **)&c->qw, (void **)&c->scale, (void **)&c->zero, (void **)&c->perm,
                     (void **)&c->strips};
    size_t sz[5] = {wq_qw_bytes(w), (size_t)w->ngroups * w->scale_rows * 4,
                    w->zero ? (size_t)w->ngroups * w->ntiles * WQ_TILE_N : 0,
                    w->perm ? (size_t)w->k * 4 : 0, 2 * sizeof(unsigned)};
    for (int i = 0; i < 5; i++) {
        *dst[i] = NULL;
        if (!sz[i]) continue;
        if (cudaMalloc(dst[i], sz[i]) || cudaMemcpy(*dst[i], src[i], sz[i], cudaMemcpyDeviceToDevice)) {
            fprintf(stderr, "bench: out of device memory\n");
            exit(1);
        }
    }
    return c;
}

/* Microseconds per launch: a CUDA graph of launches cycling through the
 * copies; m = 0 times rl_wq_dequant into y, a8 rl_wq_gemm_a8. */
static double bench_time(rlWq **copies, int nc, const void *x, void *y, void *ws, size_t ws_bytes, int m,
                         int a8) {
    int per = nc * ((40 + nc - 1) / nc);
    cudaGraph_t g;
    cudaGraphExec_t ge;
    cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal);
    for (int i = 0; i < per; i++) {
        if (a8) rl_wq_gemm_a8(copies[i % nc], RL_BF16, x, copies[0]->k, y, copies[0]->n, NULL, m, NULL, pdl, stream);
        else if (m) rl_wq_gemm(copies[i % nc], RL_BF16, x, copies[0]->k, y, copies[0]->n, NULL, m, ws, ws_bytes,
                               pdl, stream);
        else rl_wq_dequant(copies[i % nc], RL_BF16, y, stream);
    }
    cudaStreamEndCapture(stream, &g);
    cudaGraphInstantiate(&ge, g, 0);
    cudaEvent_t e0, e1;
    cudaEventCreate(&e0);
    cudaEventCreate(&e1);
    cudaGraphLaunch(ge, stream);
    cudaEventRecord(e0, stream);
    const int reps = 5;
    for (int i = 0; i < reps; i++) cudaGraphLaunch(ge, stream);
    cudaEventRecord(e1, stream);
    cudaEventSynchronize(e1);
    float ms_ = 0;
    cudaEventElapsedTime(&ms_, e0, e1);
    cudaGraphExecDestroy(ge);
    cudaGraphDestroy(g);
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    return ms_ * 1e3 / (reps * per);
}

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

/* The CUDA backend's bf16 matmul at `rows` rows, microseconds per call. */
static double bench_bf16(rlBackend *be, int n, int k, int rows) {
    rlError err;
    size_t wb = (size_t)n * k * 2;
    int nc = (int)((160u << 20) / wb) + 1;
    if (nc < 2) nc = 2;
    void *w[64], *x = be->ops->alloc(be, (size_t)rows * k * 2, &err), *y = be->ops->alloc(be, (size_t)rows * n * 2, &err);
    if (nc > 64) nc = 64;
    be->ops->fill_random(be, x, RL_BF16, (size_t)rows * k, 1, 1.0f, &err);
    for (int i = 0; i < nc; i++) {
        w[i] = be->ops->alloc(be, wb, &err);
        be->ops->fill_random(be, w[i], RL_BF16, (size_t)n * k, 2 + i, 0.02f, &err);
    }
    for (int i = 0; i < 3; i++) be->ops->matmul(be, y, x, w[i % nc], NULL, rows, n, k);
    be->ops->sync(be, &err);
    int per = nc * ((60 + nc - 1) / nc);
    double t0 = now_s();
    for (int i = 0; i < per; i++) be->ops->matmul(be, y, x, w[i % nc], NULL, rows, n, k);
    be->ops->sync(be, &err);
    double us = (now_s() - t0) * 1e6 / per;
    for (int i = 0; i < nc; i++) be->ops->free(be, w[i]);
    be->ops->free(be, x);
    be->ops->free(be, y);
    return us;
}

static int bench(int argc, char **argv) {
    rlError err;
    double copy_bw = 0, flops = 0;
    if (rl_cuda_ceilings(0, &copy_bw, &flops, &err)) {
        fprintf(stderr, "bench: %s\n", err.msg);
        return 1;
    }
    rlBackendOptions o = {.dtype = RL_BF16};
    rlBackend *be = rl_backend_cuda_create(&o, &err);
    if (!be) {
        fprintf(stderr, "bench: %s\n", err.msg);
        return 1;
    }
    static const struct { const char *name; int n, k; } shapes[4] = {
        {"qkv", 4608, 3584}, {"o", 3584, 3584}, {"gate_up", 37888, 3584}, {"down", 3584, 18944}};
    static const int bm[] = {1, 2, 4, 8, 16, 32, 64, 128};
    enum { NBM = sizeof(bm) / sizeof(bm[0]) };
    const char *nw = getenv("RL_WQ_NW");
    printf("copy bandwidth %.0f GB/s (read + written), bf16 GEMM %.0f TFLOP/s; RL_WQ_NW=%s; "
           "up to 8 rows both the mma kernel and the GEMV timed, the table has the one "
           "rl_wq_gemm picks\n", copy_bw / 1e9, flops / 1e12, nw ? nw : "(default)");
    /* The dense path at the row counts where the threshold may fall. */
    static const int dm[] = {1, 16, 32, 64};
    enum { NDM = sizeof(dm) / sizeof(dm[0]) };
    double bf16_us[4][NDM], bf16_layer[NDM] = {0};
    for (int s = 0; s < 4; s++)
        for (int j = 0; j < NDM; j++) {
            bf16_us[s][j] = bench_bf16(be, shapes[s].n, shapes[s].k, dm[j]);
            bf16_layer[j] += bf16_us[s][j];
        }
    static const char *all[] = {"int4", "fp8"};
    int nt = argc > 2 ? argc - 2 : 2;
    for (int t = 0; t < nt; t++) {
        const char *tn = argc > 2 ? argv[2 + t] : all[t];
        rlWqType type = !strcmp(tn, "int8") ? RL_WQ_INT8 : !strcmp(tn, "fp8") ? RL_WQ_FP8 : RL_WQ_INT4;
        double layer_us[NBM] = {0}, layer_ab[4][NBM] = {{0}}, layer_bytes = 0, layer_std = 0, layer_deq = 0;
        int a8_miss[NBM] = {0};   /* shapes past rl_wq_gemm_a8's rows (layer_ab[3] has the default) */
        int kdef = WQ_KERNEL_MMA;
        for (int s = 0; s < 4; s++) {
            int n = shapes[s].n, k = shapes[s].k;
            Layer l;
            layer_make(&l, type, n, k, 128, type == RL_WQ_FP8 ? 128 : 1, 0);
            char msg[512];
            rlWq *w;
            size_t bytes;
            if (rl_wq_upload(&l.h, stream, &w, &bytes, msg, sizeof(msg))) {
                fprintf(stderr, "bench: %s\n", msg);
                return 1;
            }
            layer_free(&l);
            int nc = (int)((160u << 20) / bytes) + 1;
            if (nc > 64) nc = 64;
            rlWq *copies[64];
            copies[0] = w;
            for (int i = 1; i < nc; i++) copies[i] = wq_clone(w);
            void *x = dev_alloc((size_t)128 * k * 2), *y = dev_alloc((size_t)n * k * 2);
            /* The backend's workspace holds a dequantized layer: the split sums' room. */
            const size_t ws_bytes = (size_t)n * k * 2;
            void *ws = dev_alloc(ws_bytes);
            cudaMemset(x, 0x3c, (size_t)128 * k * 2);   /* bf16 0x3c3c, about 0.011 */
            /* The checkpoint's own bytes: fp16 scales and packed zeros (int), fp32 scales (fp8). */
            double std_bytes = type == RL_WQ_FP8 ? (double)n * k + (double)((n + 127) / 128) * (k / 128) * 4
                               : (double)n * k * (type == RL_WQ_INT4 ? 0.5 : 1) + (double)n * (k / 128) * (2 + (type == RL_WQ_INT4 ? 0.5 : 1));
            layer_bytes += bytes;
            layer_std += std_bytes;
            double deq = bench_time(copies, nc, x, y, NULL, 0, 0, 0);
            layer_deq += deq;
            printf("%-4s %-7s n %5d k %5d dequant to bf16: %8.2f us  %6.0f GB/s read + written\n", tn,
                   shapes[s].name, n, k, deq, (bytes + 2.0 * n * k) / deq * 1e-3);
            kdef = wq_kernel(w, 1);
            for (int mi = 0; mi < NBM; mi++) {
                /* Every kernel that can take the rows (the GEMV up to 8),
                 * the one rl_wq_gemm picks in the table. */
                const int dec = bm[mi] <= 8, a8 = bm[mi] <= rl_wq_a8_rows(w);
                double ab[4] = {0, 0, 0, 0};
                for (int kern = WQ_KERNEL_MMA; kern <= WQ_KERNEL_TILE; kern++) {
                    if (kern == WQ_KERNEL_GEMV && !dec) continue;
                    wq_decode_kernel_force(kern);
                    ab[kern] = bench_time(copies, nc, x, y, ws, ws_bytes, bm[mi], 0);
                    layer_ab[kern][mi] += ab[kern];
                }
                if (a8) ab[3] = bench_time(copies, nc, x, y, NULL, 0, bm[mi], 1);
                else ab[3] = ab[wq_kernel(w, bm[mi])], a8_miss[mi]++;
                layer_ab[3][mi] += ab[3];
                wq_decode_kernel_force(-1);
                double us = ab[wq_kernel(w, bm[mi])];
                layer_us[mi] += us;
                double gbs = bytes / us * 1e-3;
                printf("%-4s %-7s n %5d k %5d m %3d: %8.2f us  %6.0f GB/s  %5.1f %% of copy bw",
                       tn, shapes[s].name, n, k, bm[mi], us, gbs, 100 * gbs * 1e9 / copy_bw);
                for (int j = 0; j < NDM; j++)
                    if (dm[j] == bm[mi])
                        printf("  bf16 %8.2f us  bf16/%s %.2fx", bf16_us[s][j], tn, bf16_us[s][j] / us);
                if (dec) printf("  [mma %.2f  gemv %.2f  tile %.2f us]", ab[0], ab[1], ab[2]);
                if (a8) printf("  a8 %.2f us (%5.1f %% of copy bw)", ab[3], 100 * bytes / ab[3] * 1e-3 * 1e9 / copy_bw);
                else printf("  [mma %.2f  tile %.2f us]", ab[0], ab[2]);
                printf("\n");
            }
            cudaFree(ws);
            for (int i = 0; i < nc; i++) rl_wq_free(copies[i]);
            cudaFree(x);
            cudaFree(y);
        }
        double floor_us = layer_bytes / copy_bw * 1e6, std_floor_us = layer_std / copy_bw * 1e6;
        for (int mi = 0; mi < NBM; mi++)
            printf("%-4s layer m %3d: %8.2f us  28 layers %.3f ms  floor %.2f us (%.1f %% of it; "
                   "%.1f %% of the checkpoint-bytes floor %.2f us)\n",
                   tn, bm[mi], layer_us[mi], layer_us[mi] * 28e-3, floor_us,
                   100 * floor_us / layer_us[mi], 100 * std_floor_us / layer_us[mi], std_floor_us);
        for (int mi = 0; mi < NBM; mi++) {
            printf("%-4s layer m %3d: mma %8.2f us (%.1f %% of the floor)", tn, bm[mi], layer_ab[0][mi],
                   100 * floor_us / layer_ab[0][mi]);
            if (bm[mi] <= 8)
                printf(", gemv %8.2f us (%.1f %%)", layer_ab[1][mi], 100 * floor_us / layer_ab[1][mi]);
            printf(", tile %8.2f us (%.1f %%)%s%s", layer_ab[2][mi], 100 * floor_us / layer_ab[2][mi],
                   bm[mi] == 1 ? "; default at 1 row: " : "", bm[mi] == 1 ? kernel_name[kdef] : "");
            if (type == RL_WQ_FP8 && bm[mi] <= 8)
                printf("; a8 where it runs, else the default, %8.2f us (%.1f %%)%s", layer_ab[3][mi],
                       100 * floor_us / layer_ab[3][mi], a8_miss[mi] ? " (a shape past a8's rows)" : "");
            printf("\n");
        }
        for (int j = 0; j < NDM; j++)
            for (int mi = 0; mi < NBM; mi++)
                if (bm[mi] == dm[j])
                    printf("%-4s layer m %3d: %.2f us; the backend's bf16 matmul %.2f us (bf16/%s "
                           "%.2fx); dequant + bf16 %.2f us\n", tn, dm[j], layer_us[mi],
                           bf16_layer[j], tn, bf16_layer[j] / layer_us[mi], layer_deq + bf16_layer[j]);
    }
    be->ops->destroy(be);
    return 0;
}
#endif

int main(int argc, char **argv) {
#ifndef RL_HAVE_CUDA
    (void)argc, (void)argv;
    printf("skipped: built without CUDA\n");
    return 77;
#else
    const char *seed = getenv("RL_TEST_SEED");
    rng_state = seed ? strtoull(seed, NULL, 10) : (uint64_t)time(NULL);
    int n_dev = 0;
    gpu_ok = cudaGetDeviceCount(&n_dev) == cudaSuccess && n_dev > 0 &&
             cudaSetDevice(0) == cudaSuccess && cudaStreamCreate(&stream) == cudaSuccess;
    pdl = gpu_ok && rl_cuda_pdl(0);
    if (argc > 1 && !strcmp(argv[1], "bench")) {
        if (!gpu_ok) {
            fprintf(stderr, "test_cuda_wq bench: no usable GPU\n");
            return 1;
        }
        return bench(argc, argv);
    }
    printf("test_cuda_wq: RL_TEST_SEED=%llu\n", (unsigned long long)rng_state);
    if (!gpu_ok && getenv("RL_REQUIRE_GPU")) {
        fprintf(stderr, "test_cuda_wq: no usable GPU\n");
        return 1;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_layout),
        cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_layers),
        cmocka_unit_test(test_bad_calls),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    if (rc) return rc;
    if (!gpu_ok) {
        printf("skipped: no GPU (the layout and refusal checks passed)\n");
        return 77;
    }
    return 0;
#endif
}
