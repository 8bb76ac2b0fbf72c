/* quant_awq.c: AutoAWQ's GEMM layout (WQLinear_GEMM), as AutoAWQ writes it.
 *
 * qweight int32 [K, N/8]: eight 4-bit values of one input row, packed along
 * the output in the order [0, 2, 4, 6, 1, 3, 5, 7] (nibble i holds column
 * 8c + order[i]); qzeros int32 [K/G, N/8] packed the same way; scales
 * [K/G, N].  The dense weight is w[n][k] = (q - z) * s of k's group. */
#include <math.h>

#include "worker/model/quant.h"

/* Nibble of column j % 8: the inverse of the packing order. */
static const int awq_nibble[8] = {0, 4, 1, 5, 2, 6, 3, 7};

int quant_awq_dequant(const rlQuantLinear *w, int64_t r0, int64_t nr, int64_t c0, int64_t nc,
                      float *out, rlError *err) {
    const int32_t *qw = w->data[QUANT_WEIGHT], *qz = w->data[QUANT_ZEROS];
    const void *sc = w->data[QUANT_SCALES];
    rlDtype sd = w->dtype[QUANT_SCALES];
    int64_t words = w->n / 8, G = w->q->group;
    for (int64_t r = r0; r < r0 + nr; r++) {
        int shift = 4 * awq_nibble[r % 8];
        float *o = out + (r - r0) * nc;
        for (int64_t c = c0; c < c0 + nc; c++) {
            int64_t g = c / G;
            int q = (int)(((uint32_t)qw[c * words + r / 8] >> shift) & 0xf);
            int z = (int)(((uint32_t)qz[g * words + r / 8] >> shift) & 0xf);
            double s = quant_scale(sc, sd, (size_t)(g * w->n + r));
            if (!isfinite(s))
                return rl_error(err, RL_EMODEL, "%s: scale [%lld, %lld] is not finite: the "
                                "checkpoint is damaged; download it again", w->name,
                                (long long)g, (long long)r);
            o[c - c0] = (float)((q - z) * s);
        }
    }
    return 0;
}

int quant_awq_plain(const rlQuantLinear *w, int64_t r0, int64_t nr, int64_t c0, int64_t nc,
                    rlWqHost *out, void **owned, rlError *err) {
    const int32_t *qw = w->data[QUANT_WEIGHT], *qz = w->data[QUANT_ZEROS];
    int64_t words = w->n / 8, G = w->q->group, groups = (nc + G - 1) / G;
    if (rl_wq_host_alloc(out, RL_WQ_INT4, nr, nc, 1, (int)G, 1, 0, owned, w->name, err))
        return -1;
    uint8_t *q = (uint8_t *)out->q;
    float *s = (float *)out->scale, *z = (float *)out->zero;
    for (int64_t r = r0; r < r0 + nr; r++) {
        int shift = 4 * awq_nibble[r % 8];
        for (int64_t c = c0; c < c0 + nc; c++)
            q[(r - r0) * nc + c - c0] = (uint8_t)(((uint32_t)qw[c * words + r / 8] >> shift) & 0xf);
        for (int64_t g = 0; g < groups; g++) {
            int64_t gs = c0 / G + g;
            double v = quant_scale(w->data[QUANT_SCALES], w->dtype[QUANT_SCALES],
                                   (size_t)(gs * w->n + r));
            if (!isfinite(v))
                return rl_error(err, RL_EMODEL, "%s: scale [%lld, %lld] is not finite: the "
                                "checkpoint is damaged; download it again", w->name,
                                (long long)gs, (long long)r);
            s[(r - r0) * groups + g] = (float)v;
            z[(r - r0) * groups + g] = (float)(((uint32_t)qz[gs * words + r / 8] >> shift) & 0xf);
        }
    }
    return 0;
}
