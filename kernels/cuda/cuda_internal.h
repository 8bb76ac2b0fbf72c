/* cuda_internal.h: the CUDA backend's private state, shared by its files.
 *
 * One rlCuda is one backend instance: one device, one stream, one cuBLASLt
 * handle, this rank's KV cache, and the current step's batch staged on the
 * device.  Operations launch on the stream and never block; a failure is
 * recorded once (the first) with the operation's name and reported by sync().
 * Each .cu file holds one family of operations and exposes it through the
 * cuda_* functions below, which backend_cuda.cu puts in the vtable. */
#ifndef RL_CUDA_INTERNAL_H
#define RL_CUDA_INTERNAL_H

#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <stddef.h>
#include <stdint.h>

extern "C" {
#include "kernels/backend.h"
}

#define RL_CUDA_GEMM_CACHE 128

typedef struct rlGemmAlgo {
    int rows, n, k, bias, f32out;
    int timed;                  /* algo won the timing on this shape (see gemm.cu) */
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t a, b, c;
    cublasLtMatmulAlgo_t algo;
} rlGemmAlgo;

typedef struct rlProf rlProf;
typedef struct rlGraphs rlGraphs;

/* The GPU generation's limits and fast paths the kernels plan with
 * (arch.cu): the device's own, or with RL_CUDA_GENERIC=1 those of the
 * Ampere / Ada cards the generic path stands for. */
typedef struct rlCudaArch {
    int cc;                     /* compute capability, 10 x major + minor: 90 */
    int generic;                /* forced onto the generic path (RL_CUDA_GENERIC=1) */
    int pdl;                    /* launch with programmatic dependent launch (sm_90 code) */
    int clusters;               /* thread-block clusters (sm_90 code on a Hopper GPU) */
    size_t smem_block;          /* most dynamic shared memory one block may ask for */
    size_t smem_sm;             /* shared memory per SM, for blocks resident at once */
    int threads_sm;             /* threads resident per SM */
} rlCudaArch;

typedef struct rlCuda {
    rlBackend be;
    int device;
    int sm_count;
    rlCudaArch arch;
    /* --batch-invariant (rlBackendOptions.batch_invariant): every operation
     * computes a row the same way whatever else the step holds: one GEMM
     * (cuda_tile_gemm.cuh) for every product, the prefill attention kernel for
     * every step, the grouped MoE path, quantized layers dequantized, the
     * sampler's chunks fixed. */
    int invariant;
    size_t used_at_open;        /* device memory in use before this backend's context (NVML) */
    cudaStream_t stream;
    cublasLtHandle_t lt;
    void *lt_ws;
    size_t lt_ws_bytes;
    rlGemmAlgo gemm[RL_CUDA_GEMM_CACHE];
    int n_gemm;

    /* First failure since the last sync (code RL_OK when none). */
    rlError err;

    /* KV cache: for each layer, block, KV head: block_size x head_dim values,
     * K and V in two arrays, so one block of one head is one contiguous run. */
    void *k_cache, *v_cache;
    int kv_layers, kv_blocks, kv_block_size, kv_heads, kv_head_dim;
    /* rope_init's inverse frequencies (fp32, rope_n of them) and cos/sin factor. */
    float *rope_inv_freq;
    int rope_n;
    float rope_scale;

    /* The step's batch: packed into pinned host memory, copied in one transfer. */
    unsigned char *stage_host, *stage_dev;
    size_t stage_cap;
    int n_seqs, n_tokens, n_rows, max_blocks;
    int max_new;        /* most new tokens of one sequence in this step */
    int lead_decode;    /* sequences of one new token before the step's first longer one
                         * (the scheduler puts running decodes first) */
    int max_seq_len;    /* longest KV length in this step */
    int32_t *d_tokens, *d_positions, *d_slots, *d_seq_start, *d_seq_len, *d_block_tables;
    rlRowSpec *d_rows;
    rlLogitAdj *d_adjs;  /* the rows' logit adjustments (n_adjs of them) */
    int n_adjs;
    rlPenFill *d_pen_fills;  /* counts penalty tables start over from */
    /* What the step's sampling rows need (begin_step): the highest penalty
     * table, a table to fill, rows drawn from adjusted logits (adjusted
     * maxima), and of those the non-greedy ones (an adjusted copy). */
    int pen_max, pen_fill, adj_rows, adj_copy_rows;
    /* Penalty tables 1..pen_n: [vocab] RL_PEN values each (sample.cu). */
    uint32_t *pen;
    int pen_n, pen_vocab;

    /* Scratch: attention's split partials and sampling's per-row workspace. */
    void *scratch;
    size_t scratch_cap;
    /* moe.cu: the experts' permutation, activations and outputs. */
    void *moe_ws;
    size_t moe_ws_cap;
    /* moe.cu's router kernel: its blocks that have finished, zero between
     * launches (the last block resets it). */
    int *moe_count;
    size_t moe_count_cap;
    /* Decode attention's per-(sequence, KV head) count of finished splits:
     * zero between launches (the last split resets it). */
    int *att_count;
    size_t att_count_cap;
    int dec_blocks_per_sm[2];   /* decode attention blocks resident per SM, head dim 64 / 128 */
    rlRowResult *d_results, *h_results;
    int results_cap;
    /* Sampling's first pass: per-chunk max, exp sum and argmax of each row. */
    void *stats;
    size_t stats_cap;

    /* Decode steps as CUDA graphs (graph.cu); att_len: the key range attention
     * plans its splits for (the longest sequence, or in a graphed step the
     * block-table pitch in tokens, so one capture fits every step of a shape). */
    rlGraphs *graphs;
    int graph_shape;    /* begin_step found a decode step graph_run may capture */
    int capturing;      /* inside a capture: nothing may sync or allocate */
    int att_len;

    rlProf *prof;       /* per-operation timing (profile.cu); NULL: off */

    /* Quantized linear layers (qlinear.cu): what cuBLASLt's FP8 scale modes
     * were found to do here, FP8 GEMM plans, and the workspace a large
     * batch dequantizes a layer into. */
    struct rlQlState *ql;
} rlCuda;

static inline rlCuda *cuda_of(rlBackend *be) { return (rlCuda *)be->impl; }

/* Record err (first failure wins); returns 0 when e is cudaSuccess. */
int cuda_check(rlCuda *c, cudaError_t e, const char *op);
/* Check the launch that just happened. */
static inline void cuda_launched(rlCuda *c, const char *op) { cuda_check(c, cudaGetLastError(), op); }
/* Record a failure that is not a CUDA error (unsupported shape, library status). */
void cuda_fail(rlCuda *c, rlErrorCode code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Make sure scratch holds at least bytes; 0 on success (failure recorded). */
int cuda_scratch(rlCuda *c, size_t bytes, const char *op);
/* Make sure moe_ws holds at least bytes; 0 on success (failure recorded). */
int cuda_moe_ws(rlCuda *c, size_t bytes, const char *op);
/* Grow *buf to hold at least bytes (zeroed when zero is set), dropping the
 * graph captures; fails (recorded) inside a capture.  0 on success. */
int cuda_grow(rlCuda *c, void **buf, size_t *cap, size_t bytes, int zero, const char *op);
/* Make sure att_count holds at least n zeroed counters; 0 on success. */
int cuda_att_counters(rlCuda *c, int n, const char *op);

/* arch.cu: fill c->arch for c->device (one line on stderr per device and
 * process); RL_EDEVICE when this build holds no code the GPU can run. */
int cuda_arch_init(rlCuda *c, rlError *err);
/* Blocks of `threads` threads and `smem` bytes of shared memory resident per
 * SM: the occupancy CUDA computes for this device, within c->arch's limits. */
int cuda_arch_blocks_per_sm(const rlCuda *c, int occupancy, int threads, size_t smem);

/* profile.cu: PROF(c, fmt, ...) marks the start of an operation. */
int cuda_prof_init(rlCuda *c, rlError *err);
void cuda_prof_free(rlCuda *c);
void cuda_prof_flush(rlCuda *c);
void cuda_prof_mark(rlCuda *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void cuda_profile_report(rlBackend *be, FILE *f, const char *label, int steps);
#define PROF(c, ...) do { if ((c)->prof) cuda_prof_mark((c), __VA_ARGS__); } while (0)

/* graph.cu */
int cuda_graphs_init(rlCuda *c, rlError *err);
int cuda_graph_run(rlBackend *be, void (*body)(void *ctx), void *ctx, unsigned variant,
                   rlError *err);
void cuda_graphs_clear(rlCuda *c);
void cuda_graphs_free(rlCuda *c);

/* elementwise.cu */
void cuda_convert(rlCuda *c, void *dst, rlDtype dt, const void *src, rlDtype st, size_t n);
void cuda_fill_random(rlCuda *c, void *dst, rlDtype dt, size_t n, uint64_t seed, float scale);
void cuda_embed(rlBackend *be, void *out, const void *table, int vocab0, int n_vocab, int dim);
void cuda_swiglu(rlBackend *be, void *out, const void *gate_up, int rows, int m);
void cuda_gather_rows(rlBackend *be, void *out, const void *in, int dim, int row0, int n);
void cuda_add(rlBackend *be, void *a, const void *b, size_t n);

/* norm_rope.cu */
void cuda_rmsnorm(rlBackend *be, void *out, const void *in, const void *w, int rows, int dim,
                  float eps);
void cuda_add_rmsnorm(rlBackend *be, void *resid, const void *x, void *out, const void *w,
                      int rows, int dim, float eps);
void cuda_rope_kv_store(rlBackend *be, void *qkv, const void *q_norm, const void *k_norm,
                        float eps, int layer, const rlAttnShape *s);

/* gemm.cu */
int cuda_gemm_init(rlCuda *c, rlError *err);
void cuda_gemm_free(rlCuda *c);
void cuda_matmul(rlBackend *be, void *out, const void *in, const void *w, const void *bias,
                 int rows, int n, int k);
void cuda_matmul_f32(rlBackend *be, float *out, const void *in, const void *w, int rows, int n,
                     int k);
/* out = in . w^T (+ bias) with w of dtype wt (16-bit), f32out for fp32 output. */
void cuda_gemm(rlCuda *c, rlDtype wt, void *out, const void *in, const void *w, const void *bias,
               int rows, int n, int k, int f32out, const char *op);
/* Lt's element type of a dtype. */
cudaDataType_t cuda_lt_type(rlDtype t);

/* qlinear.cu */
void *cuda_upload_quant(rlBackend *be, const rlWqHost *w, float input_scale, size_t *bytes,
                        rlError *err);
void cuda_matmul_quant(rlBackend *be, void *out, const void *in, const void *w, const void *bias,
                       int rows, int n, int k);
void cuda_swiglu_matmul_quant(rlBackend *be, void *out, void *mid, const void *gate_up,
                              const void *w, const void *bias, int rows, int n, int k);
void cuda_free_quant(rlBackend *be, void *w);
void cuda_qlinear_free(rlCuda *c);
/* Grow the quantized layers' workspace for steps of up to rows rows; 0 on
 * success (failure recorded). */
int cuda_qlinear_reserve(rlCuda *c, int rows);

/* moe.cu */
void cuda_moe_route(rlBackend *be, int *ids, float *weights, const float *logits, int rows,
                    int n_experts, int k, int renorm);
void cuda_moe_gate(rlBackend *be, int *ids, float *weights, float *logits, const void *x,
                   const void *router, int rows, int n_experts, int dim, int k, int renorm);
void cuda_moe_experts(rlBackend *be, void *out, const void *x, const void *wgu,
                      const void *wdown, const int *ids, const float *weights, int rows, int dim,
                      int m, int n_experts, int k, int accumulate);
void cuda_shared_gate(rlBackend *be, void *out, const void *x, const void *w, int rows,
                      int dim);

/* attention.cu */
int cuda_attention_init(rlCuda *c, rlError *err);
void cuda_attention(rlBackend *be, void *out, const void *qkv, int layer, const rlAttnShape *s);

/* sample.cu */
int cuda_sample(rlBackend *be, const float *logits, int vocab, int row0, int n, rlRowResult *out,
                rlError *err);

#endif
