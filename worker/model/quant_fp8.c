/* quant_fp8.c: float8_e4m3fn weights with their scales.
 *
 * weight float8_e4m3fn [N, K]; block FP8 (quant_method "fp8", DeepSeek-V3
 * and Qwen3-FP8) stores weight_scale_inv [ceil(N / bn), ceil(K / bk)] in
 * fp32, bf16 or fp16, a multiplier despite its name; compressed-tensors
 * stores weight_scale, [N, 1] per channel, one value per tensor, or blocks.
 * w[n][k] = q[n][k] * scale of (n, k). */
#include <math.h>

#include "worker/model/quant.h"

int quant_fp8_dequant(const rlQuantLinear *w, int64_t r0, int64_t nr, int64_t c0, int64_t nc,
                      float *out, rlError *err) {
    const uint8_t *qw = w->data[QUANT_WEIGHT];
    const void *sc = w->data[QUANT_SCALES];
    rlDtype sd = w->dtype[QUANT_SCALES];
    const rlQuant *q = w->q;
    int64_t kblocks = q->fp8_scale == RL_FP8_BLOCK ? (w->k + q->group - 1) / q->group : 0;
    for (int64_t r = r0; r < r0 + nr; r++) {
        float *o = out + (r - r0) * nc;
        for (int64_t c = c0; c < c0 + nc; c++) {
            size_t si = q->fp8_scale == RL_FP8_BLOCK ? (size_t)((r / q->block_n) * kblocks + c / q->group)
                        : q->fp8_scale == RL_FP8_CHANNEL ? (size_t)r : 0;
            double s = quant_scale(sc, sd, si);
            float v = rl_fp8_e4m3(qw[r * w->k + c]);
            if (isnan(v) || !isfinite(s))
                return rl_error(err, RL_EMODEL, "%s: %s at [%lld, %lld] is NaN or infinite: the "
                                "checkpoint is damaged; download it again", w->name,
                                isnan(v) ? "the float8 weight" : "its scale", (long long)r,
                                (long long)c);
            o[c - c0] = (float)(v * s);
        }
    }
    return 0;
}

/* Block scales keep their blocks (the block starts on a block boundary);
 * a tensor's one scale covers the whole block asked for. */
int quant_fp8_plain(const rlQuantLinear *w, int64_t r0, int64_t nr, int64_t c0, int64_t nc,
                    rlWqHost *out, void **owned, rlError *err) {
    const rlQuant *q = w->q;
    int block = q->fp8_scale == RL_FP8_BLOCK;
    int gn = block ? q->block_n : q->fp8_scale == RL_FP8_CHANNEL ? 1 : (int)nr;
    int gk = block ? q->group : (int)nc;
    if (rl_wq_host_alloc(out, RL_WQ_FP8, nr, nc, gn, gk, 0, 0, owned, w->name, err)) return -1;
    const uint8_t *qw = w->data[QUANT_WEIGHT];
    uint8_t *dq = (uint8_t *)out->q;
    float *s = (float *)out->scale;
    for (int64_t r = 0; r < nr; r++)
        for (int64_t c = 0; c < nc; c++) {
            uint8_t v = qw[(r0 + r) * w->k + c0 + c];
            if ((v & 0x7f) == 0x7f)
                return rl_error(err, RL_EMODEL, "%s: the float8 weight at [%lld, %lld] is NaN: "
                                "the checkpoint is damaged; download it again", w->name,
                                (long long)(r0 + r), (long long)(c0 + c));
            dq[r * nc + c] = v;
        }
    int64_t kblocks = block ? (w->k + q->group - 1) / q->group : 0;
    int64_t sn = (nr + gn - 1) / gn, sk = (nc + gk - 1) / gk;
    for (int64_t i = 0; i < sn; i++)
        for (int64_t j = 0; j < sk; j++) {
            size_t si = block ? (size_t)((r0 / gn + i) * kblocks + c0 / gk + j)
                              : q->fp8_scale == RL_FP8_CHANNEL ? (size_t)(r0 + i) : 0;
            double v = quant_scale(w->data[QUANT_SCALES], w->dtype[QUANT_SCALES], si);
            if (!isfinite(v))
                return rl_error(err, RL_EMODEL, "%s: scale %zu is not finite: the checkpoint "
                                "is damaged; download it again", w->name, si);
            s[i * sk + j] = (float)v;
        }
    return 0;
}
