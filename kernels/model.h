/* model.h: a decoder-only transformer of the Qwen2 / Qwen3 / Llama families
 * (one rank's shard of it) on a backend.
 *
 * rl_model_init takes weights from a tensor source (a checkpoint) or makes
 * random ones (dummy), slices this rank's shard, and uploads it; the forward
 * runs one step over an rlBatch and returns the logit rows' results. */
#ifndef RL_MODEL_H
#define RL_MODEL_H

#include "kernels/backend.h"
#include "kernels/batch.h"
#include "kernels/comm.h"
#include "kernels/config.h"
#include "kernels/shard.h"

/* A read-only view of one stored tensor (row-major). */
typedef struct rlTensorView {
    rlDtype dtype;
    int ndim;
    int64_t shape[2];    /* the whole tensor's */
    const void *data;    /* NULL: nothing stored, the model makes dummy values */
    /* In: the block the caller reads, rows [r0, r0 + nr) x columns [c0, c0 + nc)
     * (nr = 0: all).  A source that makes the data rather than map it (a
     * quantized layer, dequantized) may make just that block: it sets owned,
     * data then holds the block alone (nr rows of nc), and the caller
     * free()s owned. */
    int64_t r0, nr, c0, nc;
    void *owned;
    /* In: the caller takes a quantized linear layer as it is stored (a
     * backend with upload_quant).  Out: quantized set when the source served
     * the block in the plain form wq instead of data (its arrays in owned, or
     * in the source's own memory when owned is NULL), with the layer's static
     * FP8 input_scale (0: activations scaled per token at run time). */
    int want_quant, quantized;
    rlWqHost wq;
    float input_scale;
} rlTensorView;

/* Looks a tensor up by its Hugging Face name. */
typedef int (*rlTensorLookup)(void *ctx, const char *name, rlTensorView *out, rlError *err);

/* Calls fn for every tensor a checkpoint of this config must hold, with its
 * expected shape (ndim 1 or 2); the loader checks names and shapes with it. */
typedef int (*rlTensorVisit)(void *ctx, const char *name, int ndim, const int64_t *shape);
int rl_model_expected_tensors(const rlModelConfig *cfg, rlTensorVisit fn, void *ctx);

/* One rank's weights of one layer.  A buffer a config does not use (a bias
 * the family lacks, q/k norms outside Qwen3, the experts of a dense layer)
 * is NULL, and the operations take NULL as "none".  An MoE layer's MLP
 * buffers (wgu, wdown) hold its shared expert, n_shared wide. */
typedef struct rlLayer {
    void *ln1;     /* (hidden) input_layernorm */
    void *wqkv;    /* ((n_q + 2 n_kv) head_dim, hidden) this rank's q, k, v rows */
    void *bqkv;    /* ((n_q + 2 n_kv) head_dim) */
    void *q_norm;  /* (head_dim) RMSNorm weight of every q head */
    void *k_norm;  /* (head_dim) of every k head */
    void *wo;      /* (hidden, n_q head_dim) o_proj columns of this rank's heads */
    void *bo;      /* (hidden) on TP rank 0 only: added once before the all-reduce */
    void *ln2;     /* (hidden) post_attention_layernorm */
    void *wgu;     /* (2 n_mlp, hidden) gate rows then up rows */
    void *bgu;     /* (2 n_mlp) */
    void *wdown;   /* (hidden, n_mlp) down_proj columns */
    void *bdown;   /* (hidden) on TP rank 0 only */
    void *router;  /* (num_experts, hidden) mlp.gate, whole on every rank */
    void *wgu_e;   /* (num_experts, 2 n_moe, hidden) each expert's gate rows then up rows */
    void *wdown_e; /* (num_experts, hidden, n_moe) each expert's down_proj columns */
    void *wsgate;  /* (1, hidden) shared_expert_gate, whole on every rank */
    /* Buffers the backend holds quantized (upload_quant): one bit per
     * pointer above, RL_LAYER_BIT(offsetof(rlLayer, buffer)). */
    unsigned quantized;
} rlLayer;

#define RL_LAYER_BIT(slot) (1u << ((slot) / sizeof(void *)))

/* How one dimension of a stored tensor is cut across tensor-parallel ranks. */
typedef enum rlDim {
    RL_DIM_NONE = 0,    /* the column count of a vector */
    RL_DIM_HIDDEN,      /* whole on every rank */
    RL_DIM_HEAD,        /* head_dim, whole on every rank */
    RL_DIM_Q,           /* num_heads x head_dim, by this rank's query heads */
    RL_DIM_KV,          /* num_kv_heads x head_dim, by the KV heads they read */
    RL_DIM_MLP,         /* intermediate_size, by this rank's MLP columns */
    RL_DIM_EXPERTS,     /* num_experts, whole on every rank (the router's rows) */
    RL_DIM_MOE,         /* moe_intermediate_size, by this rank's columns of every expert */
    RL_DIM_SHARED,      /* shared_expert_size, by this rank's shared-expert columns */
    RL_DIM_ONE,         /* 1 (the shared expert's gate is one row) */
} rlDim;

/* Which layers hold a tensor: every one, dense-MLP layers, or MoE layers. */
typedef enum rlLayerKind { RL_LAYER_ALL = 0, RL_LAYER_DENSE, RL_LAYER_MOE } rlLayerKind;

/* A tensor a layer of a config holds (model_tensors.c has the table): its
 * name after "model.layers.N." (with a %d for the expert where per_expert),
 * the rlLayer buffer it goes to (parts of one buffer follow each other in
 * table order, and per expert: expert 0's parts, then expert 1's ...), how
 * its rows and columns are cut, and whether only TP rank 0 holds it (a bias
 * after a row-parallel product: added once, then summed by the all-reduce). */
typedef struct rlLayerTensor {
    const char *name;
    size_t slot;            /* offsetof(rlLayer, buffer) */
    rlDim rows, cols;
    int rank0_only;
    float init;             /* dummy weights: uniform in [-init, init), 0 gives ones (norms) */
    int per_expert;         /* one such tensor per routed expert */
} rlLayerTensor;

#define RL_MAX_LAYER_TENSORS 32
/* The tensors of layer `layer` of cfg, into out; returns how many. */
int rl_layer_tensors(const rlModelConfig *cfg, int layer, rlLayerTensor *out);
/* The Hugging Face name of t in layer `layer` (expert e where per_expert). */
void rl_layer_tensor_name(const rlLayerTensor *t, int layer, int e, char *out, size_t n);
/* Dimension d's full size, and the range of it shard s holds. */
int64_t rl_dim_size(const rlModelConfig *cfg, rlDim d);
void rl_dim_cut(const rlModelConfig *cfg, const rlShard *s, rlDim d, int64_t *start,
                int64_t *n);
/* Elements of t that shard s holds (0 when rank0_only and s is not TP rank 0;
 * every expert's together where per_expert). */
size_t rl_layer_tensor_elems(const rlModelConfig *cfg, const rlShard *s, const rlLayerTensor *t);

typedef struct rlModel {
    rlModelConfig cfg;
    rlShard shard;
    rlBackend *be;
    rlComm *tp;          /* this rank's tensor-parallel group (NULL: alone, no collectives) */
    rlComm *pp;          /* the pipeline's stages for this TP rank (NULL: one stage) */
    rlAttnShape attn;
    void *embed;         /* (n_vocab, hidden) on the first stage (and the last when tied) */
    void *lm_head;       /* (n_vocab, hidden) on the last stage; == embed when tied */
    void *norm;          /* (hidden) final norm, last stage */
    rlLayer *layers;     /* shard.n_layers */
    int max_tokens, max_rows;
    /* activations, sized for max_tokens / rl_model_head_rows(max_rows) */
    void *x, *resid, *qkv, *att, *gu, *mlp, *rows_x;
    /* MoE layers (NULL in a dense model): router logits (max_tokens,
     * num_experts), each token's chosen experts and their weights
     * (max_tokens, top-k) */
    float *moe_logits, *moe_weights;
    int *moe_ids;
    void *delta;         /* (max_tokens, hidden) o_proj / down_proj output before the residual add */
    float *logits, *logits_full;
    /* with tp: every TP rank's vocabulary slice, gathered ([tp][max_rows * vocab_pad]) */
    float *logits_gather;
    /* rl_model_invariant_reduce: every TP rank's part of an all-reduce,
     * gathered ([tp][max_tokens * hidden]); NULL: all-reduces as they are */
    void *reduce_gather;
    int vocab_pad;       /* the largest slice; all_gather needs equal parts */
    int *tp_vocab0, *tp_n_vocab;   /* [tp] each TP rank's vocabulary rows */
    /* a decode step padded to its bucket (model.c), and its rows' results */
    rlBatchPad pad;
    rlRowResult *pad_out;
    int pad_out_cap;
    size_t quant_bytes;  /* device bytes of the layers held quantized (upload_quant) */
    unsigned leave_out;  /* RL_LEAVE_* kinds not launched in decode steps (bench --leave-out) */
} rlModel;

/* Kinds of a layer's work that `redlm bench --leave-out` skips in decode
 * steps (every sequence one new token; prefill runs whole, so the cache
 * holds real keys).  The results are wrong while any is set: the point is
 * the time a step takes without that work, the one way to see what a
 * kernel costs inside a graphed step where launches overlap (PDL) and no
 * profiler separates them (kernels/PERF.md v43). */
enum {
    RL_LEAVE_NORM = 1 << 0,      /* the two add_rmsnorms of each layer after the first */
    RL_LEAVE_QKV = 1 << 1,       /* q/k/v projection */
    RL_LEAVE_ROPE = 1 << 2,      /* RoPE and the new token's K/V into the cache */
    RL_LEAVE_ATTENTION = 1 << 3, /* attention over the cache */
    RL_LEAVE_O = 1 << 4,         /* o projection */
    RL_LEAVE_GATE_UP = 1 << 5,   /* gate/up projection (dense MLP, shared expert) */
    RL_LEAVE_SWIGLU = 1 << 6,    /* silu(gate) * up */
    RL_LEAVE_DOWN = 1 << 7,      /* down projection */
    RL_LEAVE_ROUTER = 1 << 8,    /* MoE router and top-k (the last routing stays: at batch > 1
                                    the experts read may differ from a real step's) */
    RL_LEAVE_EXPERTS = 1 << 9,   /* MoE routed experts */
};

/* Parse a comma-separated list of kinds (norm, qkv_proj, rope, attention,
 * o_proj, gate_up_proj, swiglu, down_proj, router, experts) into *mask;
 * an unknown name is an RL_EUSAGE error that lists them. */
int rl_model_leave_out_parse(const char *list, unsigned *mask, rlError *err);

/* The most logit rows the head computes at once: a step with more (prompt
 * logprobs over a long prompt chunk) runs the head and the sampler a slice
 * of this many rows at a time, so the logits buffers (and the CUDA
 * sampler's scratch) stay this size whatever the step carries. */
#define RL_HEAD_ROWS 256
static inline int rl_model_head_rows(int max_rows) {
    return max_rows < RL_HEAD_ROWS ? max_rows : RL_HEAD_ROWS;
}

/* Weights from src (NULL: random, --load-format dummy, seeded by dummy_seed).
 * max_tokens: most new tokens in one step; max_rows: most logit rows (the
 * logits buffers hold rl_model_head_rows(max_rows) of them). */
int rl_model_init(rlModel *m, const rlModelConfig *cfg, const rlShard *shard, rlBackend *be,
                  rlComm *tp, rlComm *pp, rlTensorLookup src, void *src_ctx, uint64_t dummy_seed,
                  int max_tokens, int max_rows, rlError *err);


/* --batch-invariant over 3 or more TP ranks: each all-reduce becomes an
 * all-gather and a sum in rank order, the same whatever the step's size
 * (NCCL orders a sum of 3 or more ranks by the message's size: ring chunks,
 * its choice of algorithm); takes the gather buffer now, tp x max_tokens x
 * hidden activations.  Nothing to do for fewer ranks (2: one a + b). */
int rl_model_invariant_reduce(rlModel *m, rlError *err);

/* One step.  Non-first stages receive the hidden state from the previous
 * stage, non-last stages send theirs on and return 0 results; the last stage
 * fills out[0 .. b->n_rows). */
int rl_model_forward(rlModel *m, const rlBatch *b, rlRowResult *out, rlError *err);

void rl_model_free(rlModel *m);

/* Bytes of this shard's weights on the device, and of KV cache per token. */
size_t rl_model_weight_bytes(const rlModelConfig *cfg, const rlShard *s, rlDtype dtype);
/* Bytes of this shard's weights a decode step of `tokens` tokens reads: all
 * of them in a dense model; in a mixture of experts only the routed experts
 * the tokens touch, rl_moe_experts_touched of them (COSTMODEL.md). */
size_t rl_model_read_bytes(const rlModelConfig *cfg, const rlShard *s, rlDtype dtype,
                           double tokens);
double rl_moe_experts_touched(const rlModelConfig *cfg, double tokens);
/* The part of it in the layers' linear projections (quantized ones as the
 * GPU holds them: rl_quant_linear_bytes), what rlModel.quant_bytes measures. */
size_t rl_model_linear_bytes(const rlModelConfig *cfg, const rlShard *s, rlDtype dtype);
size_t rl_model_kv_bytes_per_token(const rlModelConfig *cfg, const rlShard *s, rlDtype dtype);
/* The scratch this shard's quantized layers take on a GPU for steps of up
 * to max_tokens rows (rl_quant_scratch_bytes over its largest and widest
 * layer; FP8 counted as W8A8); 0 without quantization. */
size_t rl_model_quant_scratch_bytes(const rlModelConfig *cfg, const rlShard *s, int max_tokens);
/* Bytes of the activation buffers rl_model_init allocates for this shard
 * (act_dtype: the backend's; logits are fp32), so a memory plan can count
 * them before any device exists. */
size_t rl_model_activation_bytes(const rlModelConfig *cfg, const rlShard *s, rlDtype act_dtype,
                                 int max_tokens, int max_rows);
/* Bytes of rl_model_invariant_reduce's gather buffer (0 under 3 TP ranks). */
size_t rl_model_invariant_reduce_bytes(const rlModelConfig *cfg, const rlShard *s,
                                       rlDtype act_dtype, int max_tokens);

#endif
