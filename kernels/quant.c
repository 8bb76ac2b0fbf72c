/* quant.c: names, shard units and device bytes of the quantized formats
 * (quant.h).  The bytes are those the CUDA int4 / FP8 path will hold, so a
 * memory plan made today stays true when it lands. */
#include "kernels/quant.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

const char *rl_quant_method_name(rlQuantMethod m) {
    switch (m) {
    case RL_QUANT_AWQ: return "awq";
    case RL_QUANT_GPTQ: return "gptq";
    case RL_QUANT_FP8: return "fp8";
    case RL_QUANT_NONE: break;
    }
    return "none";
}

const char *rl_quant_name(const rlQuant *q, char *buf, size_t n) {
    switch (q->method) {
    case RL_QUANT_NONE: snprintf(buf, n, "none"); break;
    case RL_QUANT_AWQ:
    case RL_QUANT_GPTQ:
        if (q->group) snprintf(buf, n, "%s int%d g%d%s%s", rl_quant_method_name(q->method),
                               q->bits, q->group, q->act_order ? " act-order" : "",
                               q->method == RL_QUANT_GPTQ && !q->sym ? " asym" : "");
        else snprintf(buf, n, "%s int%d per-channel%s%s", rl_quant_method_name(q->method),
                      q->bits, q->act_order ? " act-order" : "",
                      q->method == RL_QUANT_GPTQ && !q->sym ? " asym" : "");
        break;
    case RL_QUANT_FP8:
        if (q->fp8_scale == RL_FP8_BLOCK) snprintf(buf, n, "fp8 block %dx%d", q->block_n, q->group);
        else snprintf(buf, n, "fp8 per-%s", q->fp8_scale == RL_FP8_CHANNEL ? "channel" : "tensor");
        break;
    }
    return buf;
}

/* Values in one int32 word. */
static int quant_pack(const rlQuant *q) { return 32 / q->bits; }

int rl_quant_k_unit(const rlQuant *q) {
    switch (q->method) {
    case RL_QUANT_AWQ: return q->group ? q->group : 1;
    case RL_QUANT_GPTQ:
        /* Act-order and single-group layers keep all scales on every shard:
         * only the packed words along K bound the cut. */
        return q->group && !q->act_order ? q->group : quant_pack(q);
    case RL_QUANT_FP8: return q->fp8_scale == RL_FP8_BLOCK ? q->group : 1;
    case RL_QUANT_NONE: break;
    }
    return 1;
}

int rl_quant_n_unit(const rlQuant *q) {
    switch (q->method) {
    case RL_QUANT_AWQ: return 8;                 /* qweight / qzeros pack 8 columns of N */
    case RL_QUANT_GPTQ: return quant_pack(q);    /* qzeros pack along N */
    case RL_QUANT_FP8: return q->fp8_scale == RL_FP8_BLOCK ? q->block_n : 1;
    case RL_QUANT_NONE: break;
    }
    return 1;
}

static size_t quant_ceil(int64_t a, int64_t b) { return (size_t)((a + b - 1) / b); }

/* What the CUDA path holds for a shard in the plain form (kernels/cuda/wq.h
 * packs it; qlinear.cu adds FP8's W8A8 scales): the values in tiles of 8
 * rows, padded to whole strips of 4 tiles (32 rows), and chunks of 128
 * (int4) or 64 (8-bit) columns, fp32 scales per (group, row) and uint8 zero
 * points per (group, row) over the padded rows,
 * the act-order permutation; FP8 layers keep their scales once more for the
 * W8A8 path of sm_89 / sm_90 (plus the static input scale). */
size_t rl_quant_linear_bytes(const rlQuant *q, int64_t n, int64_t k, int64_t k_full,
                             size_t dense_size, int joined) {
    (void)k_full;
    if (n == 0 || k == 0) return 0;
    size_t npad = quant_ceil(n, 32) * 32;
    switch (q->method) {
    case RL_QUANT_AWQ:
    case RL_QUANT_GPTQ: {
        size_t chunk = q->bits == 4 ? 128 : 64, groups = q->group ? quant_ceil(k, q->group) : 1;
        return npad * quant_ceil(k, (int64_t)chunk) * chunk * (size_t)q->bits / 8 +
               groups * npad * (sizeof(float) + 1) +
               (q->act_order ? (size_t)k * sizeof(int32_t) : 0);
    }
    case RL_QUANT_FP8: {
        size_t values = npad * quant_ceil(k, 64) * 64, kernels, w8a8;
        if (q->fp8_scale == RL_FP8_BLOCK) {
            kernels = quant_ceil(k, q->group) * quant_ceil((int64_t)npad, q->block_n);
            w8a8 = quant_ceil(k, q->group) * quant_ceil(n, q->block_n);
        } else if (q->fp8_scale == RL_FP8_CHANNEL || joined) {
            /* a per-tensor scale of q, k or v becomes one per row once they are joined */
            kernels = npad, w8a8 = (size_t)n;
        } else {
            kernels = w8a8 = 1;
        }
        return values + (kernels + w8a8) * sizeof(float) + (q->act_static ? sizeof(float) : 0);
    }
    case RL_QUANT_NONE: break;
    }
    return (size_t)n * (size_t)k * dense_size;
}

float rl_fp8_e4m3(uint8_t v) {
    int sign = v >> 7, exp = (v >> 3) & 0xf, man = v & 7;
    if (exp == 0xf && man == 7) return NAN;
    /* Subnormals: man / 8 * 2^-6; normals: (1 + man / 8) * 2^(exp - 7). */
    float mag = exp ? ldexpf(1.0f + (float)man / 8.0f, exp - 7) : ldexpf((float)man / 8.0f, -6);
    return sign ? -mag : mag;
}

float rl_wq_host_weight(const rlWqHost *h, int64_t r, int64_t j) {
    int64_t groups = (h->k + h->group_k - 1) / h->group_k, g = j / h->group_k;
    float s = h->scale[(r / h->group_n) * groups + g];
    uint8_t q = h->q[r * h->k + j];
    if (h->type == RL_WQ_FP8) return s * rl_fp8_e4m3(q);
    return s * ((float)q - h->zero[r * groups + g]);
}

int rl_wq_host_alloc(rlWqHost *h, rlWqType type, int64_t n, int64_t k, int group_n, int group_k,
                     int zeros, int perm, void **owned, const char *name, rlError *err) {
    size_t groups = (size_t)((k + group_k - 1) / group_k);
    size_t ns = (size_t)((n + group_n - 1) / group_n) * groups, nz = zeros ? (size_t)n * groups : 0;
    size_t nq = ((size_t)n * (size_t)k + 15) & ~(size_t)15;
    char *p = malloc(nq + (ns + nz) * sizeof(float) + (perm ? (size_t)k * sizeof(int32_t) : 0));
    *owned = p;
    if (!p)
        return rl_error(err, RL_EMEMORY, "out of host memory for %s (%lld x %lld)", name,
                        (long long)n, (long long)k);
    *h = (rlWqHost){.type = type, .n = (int)n, .k = (int)k, .group_k = group_k,
                    .group_n = group_n, .q = (uint8_t *)p, .scale = (float *)(p + nq),
                    .zero = zeros ? (float *)(p + nq) + ns : NULL,
                    .perm = perm ? (int32_t *)((float *)(p + nq) + ns + nz) : NULL};
    return 0;
}

static size_t quant_align(size_t b) { return (b + 255) & ~(size_t)255; }

size_t rl_quant_scratch_bytes(size_t max_nk, int max_k, int w8a8, int max_rows) {
    size_t dequant = quant_align(max_nk * 2);
    if (!w8a8 || max_rows < RL_QUANT_W8A8_MIN_ROWS) return dequant;
    size_t rows = (size_t)max_rows, groups = ((size_t)max_k + 127) / 128;
    size_t fp8 = quant_align(max_nk) + quant_align(rows * (size_t)max_k) +
                 quant_align(groups * ((rows + 3) & ~(size_t)3) * 4);
    return fp8 > dequant ? fp8 : dequant;
}
