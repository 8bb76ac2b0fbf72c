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
            float v = quant_fp8_e4m3(qw[r * w->k + c]);
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
