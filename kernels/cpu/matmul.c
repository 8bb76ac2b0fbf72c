/* matmul.c: out[rows, n] = in[rows, k] . w[n, k]^T on the CPU.
 *
 * Large row counts (prefill) go to OpenBLAS's sgemm.  Decode steps have a
 * handful of rows, where sgemm spends most of its time packing the whole
 * weight matrix into its panel layout (measured: ~15 ms for a 9728 x 896
 * matrix at 1 to 16 rows, against ~3 ms to simply stream it).  For those,
 * each weight row is read once from memory and dotted with every input row
 * while it sits in L1: the step stays bandwidth-bound as batch-1 decode is,
 * and batching rows costs compute, not bytes.  The dot product is compiled
 * for AVX2 too and picked at run time, since the build targets baseline
 * x86-64.
 *
 * Batch-invariant (--batch-invariant): sgemm's blocking and the 8- and
 * 4-row kernels sum in orders that depend on how many rows a step holds, so
 * a token's numbers would change with what else is batched with it.  Then
 * every row goes through the one-row kernel (a fixed order over k), 64 rows
 * at a time so each weight row is read once per 64: the same bits whatever
 * the batch or the prompt's chunking, at the cost of sgemm's speed on
 * prefill. */
#include <cblas.h>
#include <string.h>

#include "kernels/cpu/cpu.h"

#define SKINNY_ROWS 8       /* at most this many rows: the streaming kernel */
#define SKINNY_TILE 32      /* weight rows per pool item */

#define INVARIANT_ROWS 64   /* rows per pass of the batch-invariant path */

typedef struct skinnyJob {
    float *out;
    const float *in, *w;
    int rows, n, k;
    int invariant;          /* every row by skinny_dot1 */
} skinnyJob;

/* 8-float vectors (GCC/Clang vector extension): AVX registers in the avx2
 * clones, pairs of SSE registers otherwise.  The helpers returning them are
 * static and inlined, so the ABI note GCC gives for baseline x86-64 does not
 * apply. */
#pragma GCC diagnostic ignored "-Wpsabi"
typedef float v8 __attribute__((vector_size(32)));

static inline v8 v8_load(const float *p) {
    v8 v;
    memcpy(&v, p, sizeof(v));
    return v;
}

static inline float v8_sum(v8 v) {
    return ((v[0] + v[4]) + (v[1] + v[5])) + ((v[2] + v[6]) + (v[3] + v[7]));
}

/* Four input rows against one weight row: each weight vector is loaded once
 * for four products, and the four sums are independent dependency chains,
 * so the adds' latency overlaps. */
__attribute__((target_clones("arch=x86-64-v3", "default")))
static void skinny_dot4(const float *x, size_t stride, const float *w, int k, float *out,
                        size_t out_stride) {
    const float *x0 = x, *x1 = x + stride, *x2 = x + 2 * stride, *x3 = x + 3 * stride;
    v8 a0 = {0}, a1 = {0}, a2 = {0}, a3 = {0};
    int i = 0;
    for (; i + 8 <= k; i += 8) {
        v8 wv = v8_load(w + i);
        a0 += v8_load(x0 + i) * wv;
        a1 += v8_load(x1 + i) * wv;
        a2 += v8_load(x2 + i) * wv;
        a3 += v8_load(x3 + i) * wv;
    }
    float s0 = v8_sum(a0), s1 = v8_sum(a1), s2 = v8_sum(a2), s3 = v8_sum(a3);
    for (; i < k; i++) {
        s0 += x0[i] * w[i], s1 += x1[i] * w[i];
        s2 += x2[i] * w[i], s3 += x3[i] * w[i];
    }
    out[0] = s0, out[out_stride] = s1, out[2 * out_stride] = s2, out[3 * out_stride] = s3;
}

/* Eight input rows: the same with eight chains (ten vector registers). */
__attribute__((target_clones("arch=x86-64-v3", "default")))
static void skinny_dot8(const float *x, size_t stride, const float *w, int k, float *out,
                        size_t out_stride) {
    const float *x0 = x, *x1 = x + stride, *x2 = x + 2 * stride, *x3 = x + 3 * stride;
    const float *x4 = x + 4 * stride, *x5 = x + 5 * stride, *x6 = x + 6 * stride;
    const float *x7 = x + 7 * stride;
    v8 a0 = {0}, a1 = {0}, a2 = {0}, a3 = {0}, a4 = {0}, a5 = {0}, a6 = {0}, a7 = {0};
    int i = 0;
    for (; i + 8 <= k; i += 8) {
        v8 wv = v8_load(w + i);
        a0 += v8_load(x0 + i) * wv;
        a1 += v8_load(x1 + i) * wv;
        a2 += v8_load(x2 + i) * wv;
        a3 += v8_load(x3 + i) * wv;
        a4 += v8_load(x4 + i) * wv;
        a5 += v8_load(x5 + i) * wv;
        a6 += v8_load(x6 + i) * wv;
        a7 += v8_load(x7 + i) * wv;
    }
    float s[8] = {v8_sum(a0), v8_sum(a1), v8_sum(a2), v8_sum(a3),
                  v8_sum(a4), v8_sum(a5), v8_sum(a6), v8_sum(a7)};
    for (int r = 0; r < 8; r++) {
        for (int t = i; t < k; t++) s[r] += x[r * stride + t] * w[t];
        out[r * out_stride] = s[r];
    }
}

/* One input row: four accumulators over k for the same reason. */
__attribute__((target_clones("arch=x86-64-v3", "default")))
static float skinny_dot1(const float *x, const float *w, int k) {
    v8 a0 = {0}, a1 = {0}, a2 = {0}, a3 = {0};
    int i = 0;
    for (; i + 32 <= k; i += 32) {
        a0 += v8_load(x + i) * v8_load(w + i);
        a1 += v8_load(x + i + 8) * v8_load(w + i + 8);
        a2 += v8_load(x + i + 16) * v8_load(w + i + 16);
        a3 += v8_load(x + i + 24) * v8_load(w + i + 24);
    }
    for (; i + 8 <= k; i += 8) a0 += v8_load(x + i) * v8_load(w + i);
    float s = v8_sum((a0 + a1) + (a2 + a3));
    for (; i < k; i++) s += x[i] * w[i];
    return s;
}

static void skinny_tile(const skinnyJob *j, int n0, int n1) {
    size_t k = (size_t)j->k, n = (size_t)j->n;
    for (int c = n0; c < n1; c++) {
        const float *wc = j->w + (size_t)c * k;
        int r = 0;
        for (; !j->invariant && r + 8 <= j->rows; r += 8)
            skinny_dot8(j->in + r * k, k, wc, j->k, j->out + r * n + c, n);
        for (; !j->invariant && r + 4 <= j->rows; r += 4)
            skinny_dot4(j->in + r * k, k, wc, j->k, j->out + r * n + c, n);
        for (; r < j->rows; r++) j->out[r * n + c] = skinny_dot1(j->in + r * k, wc, j->k);
    }
}

static void skinny_item(void *ctx, int item) {
    const skinnyJob *j = ctx;
    int n0 = item * SKINNY_TILE, n1 = n0 + SKINNY_TILE < j->n ? n0 + SKINNY_TILE : j->n;
    skinny_tile(j, n0, n1);
}

void cpu_matmul_rows(cpuBackend *c, float *out, const float *in, const float *w, int rows,
                     int n, int k) {
    if (rows <= 0 || n <= 0) return;
    if (k <= 0) {
        memset(out, 0, (size_t)rows * n * sizeof(float));
        return;
    }
    if (c->invariant) {
        for (int r0 = 0; r0 < rows; r0 += INVARIANT_ROWS) {
            skinnyJob j = {.out = out + (size_t)r0 * n, .in = in + (size_t)r0 * k, .w = w,
                           .rows = rows - r0 < INVARIANT_ROWS ? rows - r0 : INVARIANT_ROWS,
                           .n = n, .k = k, .invariant = 1};
            cpu_pool_run(c->pool, (n + SKINNY_TILE - 1) / SKINNY_TILE, skinny_item, &j);
        }
        return;
    }
    if (rows > SKINNY_ROWS) {
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, n, k, 1.0f, in, k, w, k, 0.0f,
                    out, n);
        return;
    }
    skinnyJob j = {.out = out, .in = in, .w = w, .rows = rows, .n = n, .k = k};
    cpu_pool_run(c->pool, (n + SKINNY_TILE - 1) / SKINNY_TILE, skinny_item, &j);
}
