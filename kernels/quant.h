/* quant.h: how a checkpoint's linear layers are quantized, as far as the
 * kernels need to know it: where a tensor-parallel shard may cut a layer
 * (on group and packing boundaries) and how many bytes the GPU path holds
 * for it.  Reading the formats from disk is the loader's job
 * (worker/model/quant*.c); a config without quantization has method
 * RL_QUANT_NONE and changes nothing here. */
#ifndef RL_QUANT_H
#define RL_QUANT_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/error.h"

typedef enum rlQuantMethod {
    RL_QUANT_NONE = 0,
    RL_QUANT_AWQ,        /* AutoAWQ GEMM: int4, zero point, groups along K */
    RL_QUANT_GPTQ,       /* AutoGPTQ / optimum: int4 or int8, groups along K (g_idx) */
    RL_QUANT_FP8,        /* float8_e4m3fn weights with block, channel or tensor scales */
} rlQuantMethod;

typedef enum rlFp8Scale {
    RL_FP8_BLOCK = 0,    /* one scale per block_n x group (DeepSeek-V3 / Qwen3-FP8) */
    RL_FP8_CHANNEL,      /* one per output row (compressed-tensors "channel") */
    RL_FP8_TENSOR,       /* one per matrix (compressed-tensors "tensor") */
} rlFp8Scale;

typedef struct rlQuant {
    rlQuantMethod method;
    int bits;            /* 4 or 8 */
    int group;           /* AWQ / GPTQ: input columns per scale, 0 = all of K (GPTQ -1);
                            FP8 block: block_k */
    int block_n;         /* FP8 block: output rows per scale */
    rlFp8Scale fp8_scale;
    int act_order;       /* GPTQ desc_act: groups follow g_idx, not K's order */
    int sym;             /* GPTQ sym (zero point 2^(bits-1)) */
    int zeros_v2;        /* GPTQ checkpoint_format gptq_v2: zeros stored as is, not z - 1 */
    int act_dynamic;     /* FP8: W8A8 with per-token activation scales made at run time */
    int act_static;      /* FP8: W8A8 with a stored input_scale per layer */
    int scale_named;     /* FP8 from compressed-tensors: scales are "weight_scale" (they
                            multiply, like block FP8's "weight_scale_inv") */
} rlQuant;

/* "awq int4 g128", "gptq int8 g32 act-order", "fp8 block 128x128", "none". */
const char *rl_quant_name(const rlQuant *q, char *buf, size_t n);
/* "awq", "gptq", "fp8" or "none": the --quantization value. */
const char *rl_quant_method_name(rlQuantMethod m);

/* Row-parallel layers (o_proj, down_proj) are cut along K, their input:
 * every cut must fall on a multiple of this (a whole group, a whole packed
 * word).  Column-parallel ones (q, k, v, gate, up) are cut along N, their
 * output: on a multiple of rl_quant_n_unit.  1 and 1 without quantization. */
int rl_quant_k_unit(const rlQuant *q);
int rl_quant_n_unit(const rlQuant *q);

/* Bytes the GPU path holds for the part [n rows x k columns] of a linear
 * layer whose whole input is k_full columns (quant.c says what they are);
 * joined: the layer is one part of a matrix the model joins (q|k|v,
 * gate|up), where a per-tensor FP8 scale becomes one per row.  Without
 * quantization, n x k elements of dense_size bytes. */
size_t rl_quant_linear_bytes(const rlQuant *q, int64_t n, int64_t k, int64_t k_full,
                             size_t dense_size, int joined);

/* From this many rows a step's FP8 layers take FP8 tensor cores (W8A8)
 * where the GPU has them (kernels/cuda/qlinear.cu says why). */
#define RL_QUANT_W8A8_MIN_ROWS 1024

/* The scratch a GPU backend's quantized layers take beyond their own bytes
 * for steps of up to max_rows rows, the larger of its two roads: a batch
 * past the fast kernels' rows dequantizes a layer (max_nk: the largest
 * n x k, 16 bits each); a W8A8 step instead writes the layer's e4m3 values
 * (one byte each) and quantizes its activations (max_rows x max_k e4m3 and
 * their 1x128 scales), each part 256-byte aligned. */
size_t rl_quant_scratch_bytes(size_t max_nk, int max_k, int w8a8, int max_rows);

/* One rank's shard of a quantized linear layer in one plain form, whatever
 * the checkpoint's packing: what a backend that keeps weights quantized
 * (kernels/cuda/wq.h) takes.  The loader decodes each format into it
 * (worker/model/quant*.c); the model joins q|k|v and gate|up along n. */
typedef enum rlWqType { RL_WQ_INT4 = 1, RL_WQ_INT8, RL_WQ_FP8 } rlWqType;

/* y[m][n] = x[m][k] . W[n][k]^T, W given as: */
typedef struct rlWqHost {
    rlWqType type;
    int n, k;
    int group_k;          /* input columns per scale (k: one group) */
    int group_n;          /* output rows per scale: 1 (int types, fp8 per channel),
                             block_n (fp8 block), n (fp8 per tensor) */
    const uint8_t *q;     /* [n][k]: integers (int4 0..15, int8 0..255) or e4m3 bit patterns */
    const float *scale;   /* [ceil(n / group_n)][ceil(k / group_k)] */
    const float *zero;    /* int types: [n][ceil(k / group_k)], w = scale * (q - zero);
                             NULL for fp8, w = scale * e4m3(q) */
    const int32_t *perm;  /* [k] or NULL (GPTQ act-order): q's column j multiplies x[:, perm[j]] */
} rlWqHost;

/* The weight h's stored column j holds for output row r (in fp32, as
 * w = scale * (q - zero) or scale * e4m3(q)); it multiplies input column
 * perm[j] (j without a perm). */
float rl_wq_host_weight(const rlWqHost *h, int64_t r, int64_t j);
/* The arrays of a plain n x k shard with the given groups in one allocation
 * (*owned, to free()); zero and perm only when asked for.  RL_EMEMORY naming
 * the layer when out of memory. */
int rl_wq_host_alloc(rlWqHost *h, rlWqType type, int64_t n, int64_t k, int group_n, int group_k,
                     int zeros, int perm, void **owned, const char *name, rlError *err);
/* float8_e4m3fn to float, exactly (S.1111.111 is NaN). */
float rl_fp8_e4m3(uint8_t v);

#endif
