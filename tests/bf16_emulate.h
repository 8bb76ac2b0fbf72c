/* bf16_emulate.h: the CPU backend with activations rounded to bf16 wherever
 * the CUDA backend stores a 16-bit value, so the drift of a bf16 GPU run can
 * be reproduced (and taken apart) on any machine.
 *
 * bf16_wrap(be, 1) swaps a CPU backend's operation table for one that calls
 * the CPU operations and then, while ->on, rounds their 16-bit outputs to nearest-even:
 * embeddings, norms (the residual rounded before its norm, as
 * add_rmsnorm_kernel), every matmul out of act_dtype, q and k after the
 * rotary embedding and the K/V cache slots written, attention output,
 * SwiGLU, the shared expert's gated output, the final residual add.  The
 * experts are run pair by pair as kernels/cuda/moe.cu runs them (both its
 * paths): gate/up and SwiGLU in fp32, h rounded, the down projection in
 * fp32, the k pairs summed in fp32 and added to out with one rounding.  Router logits (matmul_f32) and the LM head stay fp32, as on
 * the GPU.  Not emulated: roundings inside one CUDA kernel (the norm's
 * normalised value before the weight, attention's probabilities fed to the
 * tensor cores), so the dense fixtures' emulated drift is a little under
 * the GPU's.
 *
 * On any backend (bf16_wrap(be, 0): a GPU too) ->routes, when set, records
 * every routing decision of a one-sequence step by (MoE layer, position):
 * the chosen ids and the gap between the k-th and the (k+1)-th expert's
 * probability, to count the choices that flip; ->force, when set, routes
 * every token to the experts recorded there (another run's) with its own
 * logits' weights, to measure the drift with the routing held fixed. */
#ifndef RL_TEST_BF16_EMULATE_H
#define RL_TEST_BF16_EMULATE_H

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/backend.h"
#include "kernels/cpu/cpu.h"

#define BF16_MAX_LAYERS 8
#define BF16_MAX_POS 4096
#define BF16_MAX_K 8

typedef struct bf16Route {
    int set;
    int ids[BF16_MAX_K];        /* sorted ascending, to compare as sets */
    float gap;                  /* p of the k-th expert - p of the (k+1)-th */
} bf16Route;

/* One wrapped backend: its own table first, so be->ops leads back here. */
typedef struct bf16Wrap {
    rlBackendOps ops;
    const rlBackendOps *inner;  /* the backend's own table */
    int on;                     /* round (else the backend's own results) */
    bf16Route (*routes)[BF16_MAX_POS];  /* [BF16_MAX_LAYERS][BF16_MAX_POS], when set */
    bf16Route (*force)[BF16_MAX_POS];   /* when set, these experts replace the router's */
    const rlBatch *b;
    int moe_layer;              /* moe_route calls so far this step */
} bf16Wrap;

static inline bf16Wrap *bf16_of(rlBackend *be) { return (bf16Wrap *)(void *)be->ops; }

static inline float bf16_round(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7f800000u) == 0x7f800000u) return f;
    u = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
    memcpy(&f, &u, 4);
    return f;
}

static inline void bf16_round_n(rlBackend *be, void *p, size_t n) {
    float *x = p;
    if (!bf16_of(be)->on) return;
    for (size_t i = 0; i < n; i++) x[i] = bf16_round(x[i]);
}

static int bf16_begin_step(rlBackend *be, const rlBatch *b, rlError *err) {
    bf16Wrap *w = bf16_of(be);
    w->b = b, w->moe_layer = 0;
    return w->inner->begin_step(be, b, err);
}

static void bf16_embed(rlBackend *be, void *out, const void *table, int vocab0, int n_vocab,
                       int dim) {
    bf16_of(be)->inner->embed(be, out, table, vocab0, n_vocab, dim);
    bf16_round_n(be, out, (size_t)bf16_of(be)->b->n_tokens * dim);
}

static void bf16_rmsnorm(rlBackend *be, void *out, const void *in, const void *w, int rows,
                         int dim, float eps) {
    bf16_of(be)->inner->rmsnorm(be, out, in, w, rows, dim, eps);
    bf16_round_n(be, out, (size_t)rows * dim);
}

static void bf16_add(rlBackend *be, void *a, const void *b, size_t n) {
    bf16_of(be)->inner->add(be, a, b, n);
    bf16_round_n(be, a, n);
}

static void bf16_add_rmsnorm(rlBackend *be, void *resid, const void *x, void *out,
                             const void *w, int rows, int dim, float eps) {
    if (!bf16_of(be)->on) {
        bf16_of(be)->inner->add_rmsnorm(be, resid, x, out, w, rows, dim, eps);
        return;
    }
    bf16_add(be, resid, x, (size_t)rows * dim);
    bf16_rmsnorm(be, out, resid, w, rows, dim, eps);
}

static void bf16_matmul(rlBackend *be, void *out, const void *in, const void *w,
                        const void *bias, int rows, int n, int k) {
    bf16_of(be)->inner->matmul(be, out, in, w, bias, rows, n, k);
    bf16_round_n(be, out, (size_t)rows * n);
}

static void bf16_rope_kv_store(rlBackend *be, void *qkv, const void *q_norm, const void *k_norm,
                               float eps, int layer, const rlAttnShape *s) {
    bf16_of(be)->inner->rope_kv_store(be, qkv, q_norm, k_norm, eps, layer, s);
    const rlBatch *b = bf16_of(be)->b;
    size_t kv_row = (size_t)s->n_kv * s->head_dim;
    bf16_round_n(be, qkv, (size_t)b->n_tokens * (s->n_q + 2 * s->n_kv) * s->head_dim);
    cpuBackend *c = be->impl;
    for (int t = 0; t < b->n_tokens; t++)
        if (b->slots[t] >= 0) {
            bf16_round_n(be, cpu_k(c, layer) + (size_t)b->slots[t] * kv_row, kv_row);
            bf16_round_n(be, cpu_v(c, layer) + (size_t)b->slots[t] * kv_row, kv_row);
        }
}

static void bf16_attention(rlBackend *be, void *out, const void *qkv, int layer,
                           const rlAttnShape *s) {
    bf16_of(be)->inner->attention(be, out, qkv, layer, s);
    bf16_round_n(be, out, (size_t)bf16_of(be)->b->n_tokens * s->n_q * s->head_dim);
}

static void bf16_swiglu(rlBackend *be, void *out, const void *gate_up, int rows, int m) {
    bf16_of(be)->inner->swiglu(be, out, gate_up, rows, m);
    bf16_round_n(be, out, (size_t)rows * m);
}

static void bf16_shared_gate(rlBackend *be, void *out, const void *x, const void *w, int rows,
                             int dim) {
    bf16_of(be)->inner->shared_gate(be, out, x, w, rows, dim);
    bf16_round_n(be, out, (size_t)rows * dim);
}

/* With ->force, token t of layer l goes to the forced experts instead,
 * weighted by their probabilities under these logits (renormalised as the
 * router would). */
static void bf16_force_route(int *ids, float *weights, const float *lg, const bf16Route *f,
                             int n_experts, int k, int renorm) {
    float max = -INFINITY, sum = 0, chosen = 0;
    for (int e = 0; e < n_experts; e++) max = fmaxf(max, lg[e]);
    for (int e = 0; e < n_experts; e++) sum += expf(lg[e] - max);
    for (int j = 0; j < k; j++) {
        ids[j] = f->ids[j];
        weights[j] = expf(lg[f->ids[j]] - max) / sum;
        chosen += weights[j];
    }
    for (int j = 0; renorm && j < k; j++) weights[j] /= chosen;
}

/* The routing on the host (download / upload: any backend; ids and weights
 * are both 4-byte words, copied as they are): recorded, or replaced. */
static void bf16_moe_route(rlBackend *be, int *ids, float *weights, const float *logits,
                           int rows, int n_experts, int k, int renorm) {
    bf16Wrap *wr = bf16_of(be);
    wr->inner->moe_route(be, ids, weights, logits, rows, n_experts, k, renorm);
    int l = wr->moe_layer++;
    if ((!wr->routes && !wr->force) || l >= BF16_MAX_LAYERS || k > BF16_MAX_K) return;
    size_t nl = (size_t)rows * n_experts, nk = (size_t)rows * k;
    float *lgs = malloc((nl + nk) * sizeof(float)), *w = lgs + nl;
    int *id = malloc(nk * sizeof(int));
    rlError err = {0};
    if (!lgs || !id || be->ops->download(be, lgs, logits, nl * sizeof(float), &err) ||
        be->ops->download(be, id, ids, nk * sizeof(int), &err) ||
        be->ops->download(be, w, weights, nk * sizeof(float), &err))
        abort();
    for (int t = 0; t < rows; t++) {
        int pos = wr->b->positions[t];
        if (pos < 0 || pos >= BF16_MAX_POS) continue;
        const float *lg = lgs + (size_t)t * n_experts;
        if (wr->force && wr->force[l][pos].set)
            bf16_force_route(id + (size_t)t * k, w + (size_t)t * k, lg, &wr->force[l][pos],
                             n_experts, k, renorm);
        if (!wr->routes) continue;
        bf16Route *r = &wr->routes[l][pos];
        float max = -INFINITY, sum = 0, kth = INFINITY, next = -INFINITY;
        for (int e = 0; e < n_experts; e++) max = fmaxf(max, lg[e]);
        for (int e = 0; e < n_experts; e++) sum += expf(lg[e] - max);
        r->set = 1;
        for (int j = 0; j < k; j++) {
            int e = id[(size_t)t * k + j], i = j;
            kth = fminf(kth, lg[e]);
            for (; i > 0 && r->ids[i - 1] > e; i--) r->ids[i] = r->ids[i - 1];
            r->ids[i] = e;
        }
        for (int e = 0; e < n_experts; e++) {
            int chosen = 0;
            for (int j = 0; j < k; j++) chosen |= r->ids[j] == e;
            if (!chosen) next = fmaxf(next, lg[e]);
        }
        r->gap = next == -INFINITY ? 1.0f : (expf(kth - max) - expf(next - max)) / sum;
    }
    if (wr->force && (be->ops->upload(be, ids, RL_F32, id, RL_F32, nk, &err) ||
                      be->ops->upload(be, weights, RL_F32, w, RL_F32, nk, &err)))
        abort();
    free(lgs), free(id);
}

/* As moe.cu: per (token, expert) pair gate/up and SwiGLU from fp32 sums, h
 * rounded, down in fp32, the pairs summed in fp32 and added to out with one
 * rounding. */
static void bf16_moe_experts(rlBackend *be, void *out, const void *x, const void *wgu,
                             const void *wdown, const int *ids, const float *weights, int rows,
                             int dim, int m, int n_experts, int k, int accumulate) {
    if (!bf16_of(be)->on) {
        bf16_of(be)->inner->moe_experts(be, out, x, wgu, wdown, ids, weights, rows, dim, m, n_experts, k,
                              accumulate);
        return;
    }
    float *o = out, *gu = malloc((size_t)(2 * m + m + 2 * dim) * sizeof(float));
    if (!gu) abort();
    float *h = gu + 2 * m, *y = h + m, *s = y + dim;
    for (int t = 0; t < rows; t++) {
        memset(s, 0, (size_t)dim * sizeof(float));
        for (int j = 0; m > 0 && j < k; j++) {
            int e = ids[(size_t)t * k + j];
            const float *xt = (const float *)x + (size_t)t * dim;
            bf16_of(be)->inner->matmul_f32(be, gu, xt, (const float *)wgu + (size_t)e * 2 * m * dim, 1,
                                 2 * m, dim);
            bf16_of(be)->inner->swiglu(be, h, gu, 1, m);
            bf16_round_n(be, h, (size_t)m);
            bf16_of(be)->inner->matmul_f32(be, y, h, (const float *)wdown + (size_t)e * dim * m, 1, dim,
                                 m);
            for (int i = 0; i < dim; i++) s[i] += weights[(size_t)t * k + j] * y[i];
        }
        float *ot = o + (size_t)t * dim;
        for (int i = 0; i < dim; i++) ot[i] = bf16_round((accumulate ? ot[i] : 0) + s[i]);
    }
    free(gu);
}

/* be through a table of the wrappers above, allocated here: on any backend
 * the routing (recorded to ->routes, replaced by ->force), step by step
 * without graphs (the wrapper reads the routing on the host); with round (a
 * CPU backend) also the bf16 rounding, while ->on.  bf16_unwrap(be) gives
 * be its own table back. */
static inline bf16Wrap *bf16_wrap(rlBackend *be, int round) {
    bf16Wrap *w = calloc(1, sizeof *w);
    if (!w) abort();
    w->inner = be->ops;
    w->ops = *be->ops;
    w->ops.begin_step = bf16_begin_step;
    w->ops.moe_route = bf16_moe_route;
    w->ops.moe_gate = NULL;     /* so the routing comes through bf16_moe_route */
    w->ops.graph_run = NULL;
    if (round) {
        w->ops.embed = bf16_embed;
        w->ops.rmsnorm = bf16_rmsnorm;
        w->ops.add_rmsnorm = bf16_add_rmsnorm;
        w->ops.matmul = bf16_matmul;
        w->ops.rope_kv_store = bf16_rope_kv_store;
        w->ops.attention = bf16_attention;
        w->ops.swiglu = bf16_swiglu;
        w->ops.moe_experts = bf16_moe_experts;
        w->ops.shared_gate = bf16_shared_gate;
        w->ops.add = bf16_add;
    }
    be->ops = &w->ops;
    return w;
}

static inline void bf16_unwrap(rlBackend *be) {
    bf16Wrap *w = bf16_of(be);
    be->ops = w->inner;
    free(w);
}

#endif
