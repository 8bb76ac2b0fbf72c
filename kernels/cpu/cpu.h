/* cpu.h: the CPU backend's state, shared by its files (not a public header).
 *
 * backend.c holds memory, the step and the element-wise operations;
 * attention.c RoPE, the paged KV cache writes and attention; sample.c turns
 * logits into results; moe.c routes tokens to experts and runs them. */
#ifndef RL_CPU_H
#define RL_CPU_H

#include "kernels/backend.h"
#include "kernels/cpu/pool.h"

typedef struct cpuBackend {
    rlBackend base;
    cpuPool *pool;
    /* KV cache: per layer, K then V as [n_blocks * block_size][n_kv][head_dim]. */
    int n_layers, n_blocks, block_size, n_kv, head_dim;
    float *kv;
    const rlBatch *b;           /* the current step (host memory, caller-owned) */
    /* rope_init's inverse frequencies and cos/sin factor; cos / sin per
     * batch token and frequency, filled at the first rope of a step:
     * [n_tokens][rope_n]. */
    double *rope_inv_freq, rope_scale;
    int rope_n;
    float *rope_cos, *rope_sin;
    size_t rope_cap;
    int rope_ready;
    float *moe_scratch;         /* moe.c: one expert's gathered rows and activations */
    size_t moe_scratch_cap;     /* floats */
    int invariant;              /* batch-invariant products (rlBackendOptions) */
    uint32_t *pen;              /* penalty tables 1..pen_n, [pen_vocab] RL_PEN values each */
    int pen_n, pen_vocab;
    int failed;                 /* first failure since the last sync */
    rlError err;
} cpuBackend;

static inline float *cpu_k(cpuBackend *c, int layer) {
    return c->kv + (size_t)layer * 2 * (size_t)c->n_blocks * c->block_size * c->n_kv * c->head_dim;
}
static inline float *cpu_v(cpuBackend *c, int layer) {
    return cpu_k(c, layer) + (size_t)c->n_blocks * c->block_size * c->n_kv * c->head_dim;
}

/* Record the first failure of a void operation for sync() to report. */
void cpu_fail(cpuBackend *c, rlErrorCode code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* out[rows, n] = in[rows, k] . w[n, k]^T (matmul.c) */
void cpu_matmul_rows(cpuBackend *c, float *out, const float *in, const float *w, int rows, int n,
                     int k);
/* x = rmsnorm(x) * w over dim entries, the sum of squares in double. */
void cpu_norm_row(float *out, const float *x, const float *w, int dim, float eps);
int cpu_rope_init(rlBackend *be, const double *inv_freq, int n, double scale, rlError *err);
void cpu_rope_kv_store(rlBackend *be, void *qkv, const void *q_norm, const void *k_norm,
                       float eps, int layer, const rlAttnShape *s);
void cpu_attention(rlBackend *be, void *out, const void *qkv, int layer, const rlAttnShape *s);
int cpu_sample(rlBackend *be, const float *logits, int vocab, int row0, int n, rlRowResult *out,
               rlError *err);
/* moe.c: routing, the experts over their tokens, the shared expert's gate. */
void cpu_moe_route(rlBackend *be, int *ids, float *weights, const float *logits, int rows,
                   int n_experts, int k, int renorm);
void cpu_moe_experts(rlBackend *be, void *out, const void *x, const void *wgu,
                     const void *wdown, const int *ids, const float *weights, int rows, int dim,
                     int m, int n_experts, int k, int accumulate);
void cpu_shared_gate(rlBackend *be, void *out, const void *x, const void *w, int rows,
                     int dim);

#endif
