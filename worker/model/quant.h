/* quant.h: quantized checkpoints (AWQ, GPTQ, FP8) read exactly as the tools
 * that make them write them.
 *
 * The config's quantization_config becomes an rlQuant (kernels/quant.h);
 * each quantized linear layer's stored tensors (packed weights, scales,
 * zeros, g_idx) are checked by the checkpoint like every other tensor and
 * served to the model as the dense matrix they stand for, dequantized to
 * fp32, one shard's block at a time.  One file per format holds its layout:
 * quant_awq.c, quant_gptq.c, quant_fp8.c; quant_config.c reads the config,
 * quant_dummy.c makes random quantized layers for --load-format dummy. */
#ifndef RL_WORKER_QUANT_H
#define RL_WORKER_QUANT_H

#include <jansson.h>
#include <pthread.h>
#include <stdint.h>

#include "kernels/config.h"
#include "kernels/error.h"
#include "kernels/model.h"

/* config.json's "quantization_config" (absent or null: RL_QUANT_NONE).
 * Anything redlm cannot load exactly is refused naming the key, its value and
 * what is supported.  num_layers: for modules the config keeps unquantized. */
int quant_config_parse(json_t *root, const char *path, int num_layers, rlQuant *q,
                       rlError *err);

/* --quantization awq|gptq|fp8 (NULL: not given) against the config: it must
 * name the config's method when there is one; a dummy model without one
 * gets the format's usual layout (AWQ int4 g128, GPTQ int4 g128 sym, FP8
 * block 128x128); a checkpoint without one is refused (the flag does not
 * quantize). */
int quant_apply_flag(rlModelConfig *cfg, const char *flag, int dummy, rlError *err);

/* An error when cfg is a quantized mixture of experts (not run in this
 * version); where: what made it quantized, config.json's path (RL_EMODEL)
 * or "--quantization" (RL_EUSAGE). */
int quant_check_moe(const rlModelConfig *cfg, const char *where, rlError *err);

/* Whether `name` (a tensor the model reads) is a quantized linear layer's
 * weight: the seven projections of every layer, when q quantizes. */
int quant_is_linear(const rlQuant *q, const char *name);

/* The tensors a quantized layer stores beside or instead of its .weight. */
typedef enum rlQuantPartId {
    QUANT_WEIGHT,        /* AWQ / GPTQ "qweight" int32; FP8 "weight" float8_e4m3fn */
    QUANT_ZEROS,         /* "qzeros" int32 */
    QUANT_SCALES,        /* "scales", "weight_scale_inv" or "weight_scale" */
    QUANT_G_IDX,         /* GPTQ "g_idx" int32 */
    QUANT_INPUT_SCALE,   /* FP8 static activations: "input_scale" */
    QUANT_N_PARTS
} rlQuantPartId;

typedef struct rlQuantPart {
    const char *suffix;  /* NULL: this format stores no such tensor */
    int ndim;
    int64_t shape[2];
    unsigned dtypes;     /* bit (1 << rlDtype) per dtype accepted */
    int optional;
} rlQuantPart;

/* The stored parts of layer `name` (its dense weight, [n, k]: out, in);
 * fails when n or k cannot be packed or grouped in the format.  A part of
 * ndim 0 is one value stored as [] or [1]. */
int quant_parts(const rlQuant *q, const char *name, int64_t n, int64_t k,
                rlQuantPart parts[QUANT_N_PARTS], rlError *err);

/* One stored quantized layer: its parts' data (NULL when absent) and dtypes. */
typedef struct rlQuantLinear {
    const rlQuant *q;
    const char *name;    /* the dense weight's name, for messages */
    int64_t n, k;
    const void *data[QUANT_N_PARTS];
    rlDtype dtype[QUANT_N_PARTS];
} rlQuantLinear;

/* What the shapes cannot show, checked once at open: g_idx in range (and in
 * K's order unless desc_act), GPTQ v1 zeros that cannot be represented. */
int quant_check(const rlQuantLinear *w, rlError *err);

/* The block rows [r0, r0 + nr) x columns [c0, c0 + nc) of the dense [n, k]
 * weight into out (nr x nc, row-major), each value the exact product of the
 * stored integer (less its zero) or float8 value and its scale, rounded once
 * to fp32.  Fails on a NaN float8 value or a scale that is not finite. */
int quant_dequant(const rlQuantLinear *w, int64_t r0, int64_t nr, int64_t c0, int64_t nc,
                  float *out, rlError *err);

/* The same block in the plain form a backend that keeps weights quantized
 * takes (kernels/quant.h's rlWqHost): integers or float8 bytes [nr][nc],
 * fp32 scales and zero points per (row, group), act-order as a permutation
 * that makes each group's columns contiguous.  The block must start on the
 * format's units (rl_quant_k_unit / rl_quant_n_unit), as a TP shard does.
 * The arrays live in *owned (free() it); *input_scale is the static FP8
 * input scale, 0 when activations are scaled at run time. */
int quant_plain(const rlQuantLinear *w, int64_t r0, int64_t nr, int64_t c0, int64_t nc,
                rlWqHost *out, float *input_scale, void **owned, rlError *err);

/* Per format (quant_awq.c, quant_gptq.c, quant_fp8.c). */
int quant_awq_dequant(const rlQuantLinear *w, int64_t r0, int64_t nr, int64_t c0, int64_t nc,
                      float *out, rlError *err);
int quant_gptq_check(const rlQuantLinear *w, rlError *err);
int quant_gptq_dequant(const rlQuantLinear *w, int64_t r0, int64_t nr, int64_t c0, int64_t nc,
                       float *out, rlError *err);
int quant_fp8_dequant(const rlQuantLinear *w, int64_t r0, int64_t nr, int64_t c0, int64_t nc,
                      float *out, rlError *err);
int quant_awq_plain(const rlQuantLinear *w, int64_t r0, int64_t nr, int64_t c0, int64_t nc,
                    rlWqHost *out, void **owned, rlError *err);
int quant_gptq_plain(const rlQuantLinear *w, int64_t r0, int64_t nr, int64_t c0, int64_t nc,
                     rlWqHost *out, void **owned, rlError *err);
int quant_fp8_plain(const rlQuantLinear *w, int64_t r0, int64_t nr, int64_t c0, int64_t nc,
                    rlWqHost *out, void **owned, rlError *err);

/* A stored scale (fp32, bf16 or fp16) as a double. */
double quant_scale(const void *data, rlDtype dtype, size_t i);

/* quant_dummy.c: an rlTensorLookup (kernels/model.h) for --load-format dummy
 * with a quantized config: every quantized layer is made as random stored
 * parts of its real shapes and dequantized like a checkpoint's; other
 * tensors are left to the model's dummy weights (data NULL).  A caller that
 * takes layers quantized (want_quant) gets one random shard per shape and
 * block, made once and served to every layer, so a 72B-class model loads
 * in seconds; quant_dummy_free releases them. */
typedef struct rlQuantDummyShard rlQuantDummyShard;
typedef struct rlQuantDummy {
    rlModelConfig cfg;
    uint64_t seed;
    rlQuantDummyShard *shards;
    pthread_mutex_t lock;       /* ranks load in parallel threads */
    int ready;                  /* quant_dummy_init ran */
} rlQuantDummy;

void quant_dummy_init(rlQuantDummy *d, const rlModelConfig *cfg, uint64_t seed);
/* Releases the shards (nothing before quant_dummy_init: a zeroed d is fine). */
void quant_dummy_free(rlQuantDummy *d);

int quant_dummy_lookup(void *ctx, const char *name, rlTensorView *out, rlError *err);

#endif
