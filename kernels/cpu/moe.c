/* moe.c: the CPU backend's mixture-of-experts operations, the reference the
 * GPU kernels are checked against.
 *
 * Routing follows transformers' Qwen2/Qwen3-MoE blocks: softmax over every
 * expert in fp32, the top k (ties to the lower expert id, as torch.topk's
 * stable order on the CPU), renormalised when the config says so.  The
 * experts then run over the tokens routed to each: the tokens are grouped by
 * expert (a permutation), each group's rows gathered, put through that
 * expert's SwiGLU MLP as two GEMMs, and added back to their tokens times
 * their routing weight.  Expert by expert in id order, and within an expert
 * in token order, so the sum is the same however the batch is made up. */
#include "kernels/cpu/cpu.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

void cpu_moe_route(rlBackend *be, int *ids, float *weights, const float *logits, int rows,
                   int n_experts, int k, int renorm) {
    (void)be;
    for (int t = 0; t < rows; t++) {
        const float *l = logits + (size_t)t * n_experts;
        float max = -INFINITY, sum = 0;
        for (int e = 0; e < n_experts; e++) max = fmaxf(max, l[e]);
        for (int e = 0; e < n_experts; e++) sum += expf(l[e] - max);
        int *id = ids + (size_t)t * k;
        float *w = weights + (size_t)t * k, chosen = 0;
        for (int j = 0; j < k; j++) {
            /* The j-th largest: the largest logit not yet taken (softmax is
             * monotonic), the lower id on a tie. */
            int best = -1;
            for (int e = 0; e < n_experts; e++) {
                int taken = 0;
                for (int i = 0; i < j; i++) taken |= id[i] == e;
                if (!taken && (best < 0 || l[e] > l[best])) best = e;
            }
            id[j] = best;
            w[j] = expf(l[best] - max) / sum;
            chosen += w[j];
        }
        for (int j = 0; renorm && j < k; j++) w[j] /= chosen;
    }
}

void cpu_shared_gate(rlBackend *be, void *out, const void *x, const void *w, int rows,
                     int dim) {
    (void)be;
    float *o = out;
    const float *xs = x, *ws = w;
    for (int t = 0; t < rows; t++) {
        float s = 0;
        for (int i = 0; i < dim; i++) s += xs[(size_t)t * dim + i] * ws[i];
        float g = 1.0f / (1.0f + expf(-s));
        for (int i = 0; i < dim; i++) o[(size_t)t * dim + i] *= g;
    }
}

/* Grows *buf to hold n floats; 0 when out of memory (recorded). */
static int moe_reserve(cpuBackend *c, float **buf, size_t *cap, size_t n) {
    if (n <= *cap) return 1;
    float *p = realloc(*buf, n * sizeof(float));
    if (!p) {
        cpu_fail(c, RL_EMEMORY, "out of host memory for the experts' scratch (%zu MiB)",
                 n * sizeof(float) >> 20);
        return 0;
    }
    *buf = p, *cap = n;
    return 1;
}

void cpu_moe_experts(rlBackend *be, void *out, const void *x, const void *wgu,
                     const void *wdown, const int *ids, const float *weights, int rows, int dim,
                     int m, int n_experts, int k, int accumulate) {
    cpuBackend *c = be->impl;
    float *o = out;
    const float *xs = x;
    if (!accumulate) memset(o, 0, (size_t)rows * dim * sizeof(float));
    if (m <= 0 || rows <= 0) return;
    size_t pairs = (size_t)rows * k;
    /* The permutation: (token, weight) pairs ordered by expert, then token. */
    int *count = calloc((size_t)n_experts + 1, sizeof(int));
    int *tok = malloc(pairs * sizeof(int));
    float *wt = malloc(pairs * sizeof(float));
    if (!count || !tok || !wt) {
        cpu_fail(c, RL_EMEMORY, "out of host memory routing %d tokens to experts", rows);
        goto done;
    }
    for (size_t p = 0; p < pairs; p++) count[ids[p] + 1]++;
    for (int e = 0; e < n_experts; e++) count[e + 1] += count[e];
    int *next = malloc((size_t)n_experts * sizeof(int));
    if (!next) {
        cpu_fail(c, RL_EMEMORY, "out of host memory routing %d tokens to experts", rows);
        goto done;
    }
    memcpy(next, count, (size_t)n_experts * sizeof(int));
    for (size_t p = 0; p < pairs; p++) {
        int slot = next[ids[p]]++;
        tok[slot] = (int)(p / (size_t)k), wt[slot] = weights[p];
    }
    free(next);

    int most = 0;
    for (int e = 0; e < n_experts; e++)
        if (count[e + 1] - count[e] > most) most = count[e + 1] - count[e];
    size_t need = (size_t)most * ((size_t)dim * 2 + 3 * (size_t)m);
    if (!moe_reserve(c, &c->moe_scratch, &c->moe_scratch_cap, need)) goto done;
    float *xe = c->moe_scratch, *ye = xe + (size_t)most * dim;
    float *gu = ye + (size_t)most * dim, *h = gu + (size_t)most * 2 * m;
    for (int e = 0; e < n_experts; e++) {
        int n = count[e + 1] - count[e], first = count[e];
        if (n == 0) continue;
        for (int i = 0; i < n; i++)
            memcpy(xe + (size_t)i * dim, xs + (size_t)tok[first + i] * dim,
                   (size_t)dim * sizeof(float));
        const float *we = (const float *)wgu + (size_t)e * 2 * m * dim;
        const float *wd = (const float *)wdown + (size_t)e * dim * m;
        cpu_matmul_rows(c, gu, xe, we, n, 2 * m, dim);
        for (int i = 0; i < n; i++) {
            const float *g = gu + (size_t)i * 2 * m, *u = g + m;
            for (int j = 0; j < m; j++) h[(size_t)i * m + j] = g[j] / (1.0f + expf(-g[j])) * u[j];
        }
        cpu_matmul_rows(c, ye, h, wd, n, dim, m);
        for (int i = 0; i < n; i++) {
            float *ot = o + (size_t)tok[first + i] * dim, w = wt[first + i];
            const float *y = ye + (size_t)i * dim;
            for (int j = 0; j < dim; j++) ot[j] += w * y[j];
        }
    }
done:
    free(count), free(tok), free(wt);
}
