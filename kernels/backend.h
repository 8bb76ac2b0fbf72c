/* backend.h: the small interface the model's forward pass is written against.
 *
 * kernels/model.c reads as the model's math and calls these operations; a
 * backend (cpu/ with OpenBLAS, cuda/ with CUDA kernels and cuBLAS) implements
 * them on its own memory.  Buffers are opaque device pointers from alloc().
 * Activations are in the backend's act_dtype (fp32 on CPU; bf16/fp16 on
 * CUDA), accumulation always in fp32, logits always fp32.
 *
 * Compute operations are void and may run asynchronously (CUDA stream order);
 * a backend records its first failure and reports it from sync(), which every
 * step ends with.  One backend instance serves one rank and owns that rank's
 * KV cache. */
#ifndef RL_BACKEND_H
#define RL_BACKEND_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "kernels/batch.h"
#include "kernels/config.h"
#include "kernels/error.h"

/* The heads one rank computes, for RoPE, the KV write and attention. */
typedef struct rlAttnShape {
    int n_q;          /* local query heads */
    int n_kv;         /* local KV heads */
    int q_head0;      /* global index of local query head 0 */
    int kv_head0;     /* global index of local KV head 0 */
    int group;        /* query heads per KV head (global num_heads / num_kv_heads) */
    int head_dim;
} rlAttnShape;

typedef struct rlBackend rlBackend;

typedef struct rlBackendOps {
    const char *name;

    /* Memory.  alloc returns NULL and fills err on failure. */
    void *(*alloc)(rlBackend *be, size_t bytes, rlError *err);
    void (*free)(rlBackend *be, void *p);
    /* n elements from host memory of src_dtype into device memory of dst_dtype. */
    int (*upload)(rlBackend *be, void *dst, rlDtype dst_dtype, const void *src,
                  rlDtype src_dtype, size_t n, rlError *err);
    int (*download)(rlBackend *be, void *dst_host, const void *src, size_t bytes, rlError *err);
    /* Uniform values in [-scale, scale), deterministic in seed (dummy weights). */
    int (*fill_random)(rlBackend *be, void *dst, rlDtype dtype, size_t n, uint64_t seed,
                       float scale, rlError *err);

    /* KV cache for this rank: n_layers x n_blocks x block_size x n_kv x head_dim
     * for K and for V, in act_dtype, laid out as the backend likes. */
    int (*kv_init)(rlBackend *be, int n_layers, int n_blocks, int block_size, int n_kv,
                   int head_dim, rlError *err);

    /* The rotary embedding every later rope_kv_store applies: dimension i
     * (and i + n) of a head at position p turns by p * inv_freq[i], and cos
     * and sin are multiplied by scale (kernels/rope.c; n = head_dim / 2). */
    int (*rope_init)(rlBackend *be, const double *inv_freq, int n, double scale, rlError *err);

    /* Make the step's batch current (stage its arrays on the device).  b
     * and the arrays it points to stay the caller's and must stay valid
     * until the step's last operation (the CPU backend reads them as it
     * runs, sample included). */
    int (*begin_step)(rlBackend *be, const rlBatch *b, rlError *err);

    /* Operations over the current step's n_tokens rows.
     * embed: out[t] = table[tokens[t] - vocab0] for ids in [vocab0, vocab0 + n_vocab), else 0. */
    void (*embed)(rlBackend *be, void *out, const void *table, int vocab0, int n_vocab, int dim);
    /* out = rmsnorm(in) * w (out may be in) */
    void (*rmsnorm)(rlBackend *be, void *out, const void *in, const void *w, int rows, int dim,
                    float eps);
    /* resid += x; out = rmsnorm(resid) * w */
    void (*add_rmsnorm)(rlBackend *be, void *resid, const void *x, void *out, const void *w,
                        int rows, int dim, float eps);
    /* out[rows, n] = in[rows, k] . w[n, k]^T (+ bias[n]); n = 0 does nothing,
     * k = 0 gives zeros (+ bias): a rank that owns no heads or MLP columns. */
    void (*matmul)(rlBackend *be, void *out, const void *in, const void *w, const void *bias,
                   int rows, int n, int k);
    /* Quantized linear layers kept quantized on the device; NULL where the
     * backend takes them dequantized through upload (the CPU, the reference).
     * upload_quant takes one rank's shard in the plain form of quant.h (and
     * a static FP8 input scale, 0 for none) and returns the weight
     * matmul_quant reads, with the device bytes it holds. */
    void *(*upload_quant)(rlBackend *be, const rlWqHost *w, float input_scale, size_t *bytes,
                          rlError *err);
    void (*matmul_quant)(rlBackend *be, void *out, const void *in, const void *w,
                         const void *bias, int rows, int n, int k);
    void (*free_quant)(rlBackend *be, void *w);
    /* out = swiglu(gate_up) . w^T (+ bias) for a quantized w of n x k:
     * swiglu into mid (rows x k), then matmul_quant, except where the
     * product quantizes its activations itself (FP8 W8A8): those are made
     * straight from gate_up, the same bytes without writing mid and reading
     * it back.  Optional (NULL: the model calls the two). */
    void (*swiglu_matmul_quant)(rlBackend *be, void *out, void *mid, const void *gate_up,
                                const void *w, const void *bias, int rows, int n, int k);
    /* Same with fp32 output (LM head). */
    void (*matmul_f32)(rlBackend *be, float *out, const void *in, const void *w, int rows, int n,
                       int k);
    /* qkv rows hold [n_q | n_kv | n_kv] heads; with q_norm and k_norm (each
     * head_dim weights, NULL for none) first RMSNorm each q and k head, then
     * rotate q and k in place at the batch positions (rope_init's table),
     * then write k and v into this layer's cache slots. */
    void (*rope_kv_store)(rlBackend *be, void *qkv, const void *q_norm, const void *k_norm,
                          float eps, int layer, const rlAttnShape *s);
    /* Causal attention of each sequence's new queries over its cached keys
     * (block tables, seq_len); out[rows, n_q * head_dim]. */
    void (*attention)(rlBackend *be, void *out, const void *qkv, int layer, const rlAttnShape *s);
    /* out[rows, m] = silu(gu[:, :m]) * gu[:, m:] */
    void (*swiglu)(rlBackend *be, void *out, const void *gate_up, int rows, int m);
    /* Mixture of experts (NULL where a backend has none; the model then
     * refuses MoE configs on it).
     * moe_route: per row t, p = softmax(logits[t, 0..n_experts)) in fp32;
     * ids[t, 0..k) the k largest p, largest first, ties to the lower expert
     * id; weights[t, j] their p, divided by their sum when renorm. */
    void (*moe_route)(rlBackend *be, int *ids, float *weights, const float *logits, int rows,
                      int n_experts, int k, int renorm);
    /* Optional (NULL: the model calls matmul_f32, then moe_route): both in
     * one, logits[rows, n_experts] = x . router^T in fp32, then moe_route's
     * ids and weights from them, so a backend may fuse the two. */
    void (*moe_gate)(rlBackend *be, int *ids, float *weights, float *logits, const void *x,
                     const void *router, int rows, int n_experts, int dim, int k, int renorm);
    /* out[t] (+= when accumulate, else =) sum over j of weights[t, j] x
     * down_e(silu(gate_e x[t]) * up_e x[t]), e = ids[t, j]: each expert's
     * wgu (n_experts, 2 m, dim) gate rows then up rows, wdown (n_experts,
     * dim, m); m = 0 (a rank without expert columns) adds nothing. */
    void (*moe_experts)(rlBackend *be, void *out, const void *x, const void *wgu,
                        const void *wdown, const int *ids, const float *weights, int rows,
                        int dim, int m, int n_experts, int k, int accumulate);
    /* out[t] *= sigmoid(x[t] . w) over dim entries (w: dim weights, the dot
     * in fp32): Qwen2-MoE's shared expert gate. */
    void (*shared_gate)(rlBackend *be, void *out, const void *x, const void *w, int rows,
                        int dim);
    /* out[r] = in[rows[row0 + r].token] for n of the batch's logit rows */
    void (*gather_rows)(rlBackend *be, void *out, const void *in, int dim, int row0, int n);
    /* a += b over n elements (act dtype) */
    void (*add)(rlBackend *be, void *a, const void *b, size_t n);
    /* rows rows of width bytes, from src (rows src_pitch bytes apart) to dst
     * (dst_pitch apart), as cudaMemcpy2D: places each TP rank's vocabulary
     * slice of the logits into the full rows. */
    void (*copy2d)(rlBackend *be, void *dst, size_t dst_pitch, const void *src,
                   size_t src_pitch, size_t width, int rows);

    /* Turn logits[n, vocab] (fp32, device) of the batch's rows row0 ..
     * row0 + n - 1 into results on the host: log-softmax, target logprob,
     * top alternatives, sampling (rng.h).  A step's rows may come in
     * several calls, in order, each row once. */
    int (*sample)(rlBackend *be, const float *logits, int vocab, int row0, int n,
                  rlRowResult *out, rlError *err);

    /* Wait for queued work; report the first failure since the last sync. */
    int (*sync)(rlBackend *be, rlError *err);
    void (*destroy)(rlBackend *be);

    /* Memory plan (device backends; NULL on the CPU, which sizes its cache
     * from --kv-cache-memory).  Called once the weights and activations are
     * allocated: how many KV blocks of bytes_per_block fit within util of the
     * device's memory after the backend's own workspace.  Logs the plan as a
     * table; fails (RL_EMEMORY) with those numbers and the flags to change
     * when fewer than min_blocks fit. */
    int (*kv_capacity)(rlBackend *be, size_t bytes_per_block, int block_size, int min_blocks,
                       double util, int *n_blocks, rlError *err);
    /* Called before kv_capacity, once the weights are uploaded: take now
     * the scratch steps of up to max_rows tokens will need, moe_bytes for
     * moe_experts (rl_moe_scratch_bytes; 0 for a dense model) and what the
     * backend's quantized layers take (rl_quant_scratch_bytes), so the
     * plan counts it instead of the first long prefill growing it into the
     * KV cache's share.  NULL where the backend keeps no device scratch. */
    int (*reserve)(rlBackend *be, int max_rows, size_t moe_bytes, rlError *err);

    /* Run body(ctx), the step's work between begin_step and sample, which
     * must make no host syncs (one rank, no collectives).  A device backend
     * may capture it once per batch shape and replay the capture on later
     * decode steps of that shape instead of launching every operation.
     * variant is whatever else decides body's work (the model's leave-out
     * kinds): a capture serves only its own shape and variant.
     * NULL: the caller runs body itself. */
    int (*graph_run)(rlBackend *be, void (*body)(void *ctx), void *ctx, unsigned variant,
                     rlError *err);

    /* With rlBackendOptions.profile: print the device time per operation
     * kind since the last report, per step over `steps` steps, and reset
     * (f NULL: reset only).  NULL where the backend does not profile. */
    void (*profile_report)(rlBackend *be, FILE *f, const char *label, int steps);
} rlBackendOps;

/* The most scratch moe_experts takes for rows tokens, top k of n_experts,
 * m expert columns on this rank, hidden size dim, 16-bit activations of
 * elem bytes: the (token, expert) pairs listed by expert in tiles of 64 (a
 * 16-byte entry per tile, plus one per expert for partial tiles), the
 * pairs' order and inverse (4 bytes each), the SwiGLU outputs (elem bytes
 * per column) and the down projections in fp32, each part 256-byte aligned
 * (kernels/cuda/moe.cu lays them out so).  worker/plan counts it too. */
static inline size_t rl_moe_scratch_bytes(size_t rows, int dim, int m, int n_experts, int k,
                                          size_t elem) {
    size_t pairs = rows * (size_t)k, tiles = (pairs + 63) / 64 + (size_t)n_experts;
    size_t ints = (tiles * 16 + 16 + 2 * pairs * 4 + 255) / 256 * 256;
    size_t h = (pairs * (size_t)m * elem + 255) / 256 * 256;
    return ints + h + pairs * (size_t)dim * sizeof(float);
}

struct rlBackend {
    const rlBackendOps *ops;
    rlDtype act_dtype;      /* activations and KV cache */
    rlDtype weight_dtype;   /* weights as stored on the device */
    void *impl;             /* backend-private state */
};

typedef struct rlBackendOptions {
    int threads;            /* CPU: worker threads (0 = all cores) */
    int device;             /* CUDA: device ordinal */
    rlDtype dtype;          /* CUDA: weight/activation dtype */
    int profile;            /* CUDA: time every operation with events (no graphs) */
    int batch_invariant;    /* every row computed the same way whatever else is in the
                             * step and however its prompt was chunked: CPU
                             * (kernels/cpu/matmul.c) and CUDA (kernels/cuda/README.md) */
    int eager;              /* CUDA: no graphs (vLLM's --enforce-eager) */
} rlBackendOptions;

rlBackend *rl_backend_cpu_create(const rlBackendOptions *opt, rlError *err);
/* NULL with a clear error when built without CUDA or no GPU is usable. */
rlBackend *rl_backend_cuda_create(const rlBackendOptions *opt, rlError *err);

/* The device's two ceilings, measured now: device-to-device copy bandwidth
 * (bytes read + written per second) and a bf16 8192^3 GEMM rate (FLOP/s).
 * Fails with a clear error when built without CUDA or no GPU is usable. */
int rl_cuda_ceilings(int device, double *copy_bytes_per_s, double *gemm_flops, rlError *err);
/* Whether the CUDA backend launches its kernels with programmatic dependent
 * launch on device: a Hopper GPU running this build's sm_90 code, neither
 * RL_CUDA_GENERIC=1 nor RL_CUDA_PDL=0 (kernels/cuda/arch.cu); for programs
 * that call the kernel modules directly, as test_cuda_wq does.  0 without
 * CUDA. */
int rl_cuda_pdl(int device);

#endif
