/* quant_gptq.c: GPTQ as AutoGPTQ and optimum write it (and GPTQModel's
 * gptq_v2).
 *
 * qweight int32 [K * bits / 32, N]: 32 / bits values of consecutive input
 * rows per word, packed along K from the least significant bits; qzeros
 * int32 [groups, N * bits / 32] packed along N the same way, holding z - 1
 * in the v1 format (checkpoint_format "gptq", the default) and z in gptq_v2;
 * scales [groups, N]; g_idx int32 [K], input row k's group (k / G in K's
 * order, any order with desc_act).  w[n][k] = s[g][n] * (q - z[g][n]). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "worker/model/quant.h"

typedef struct gptqLayout {
    int bits, pack;
    uint32_t mask;
    int64_t groups;
} gptqLayout;

static gptqLayout gptq_layout(const rlQuantLinear *w) {
    gptqLayout l = {.bits = w->q->bits, .pack = 32 / w->q->bits};
    l.mask = (1u << l.bits) - 1;
    l.groups = w->q->group ? (w->k + w->q->group - 1) / w->q->group : 1;
    return l;
}

/* Input row k's group: g_idx when stored, else K's order. */
static int64_t gptq_group(const rlQuantLinear *w, int64_t k) {
    const int32_t *gi = w->data[QUANT_G_IDX];
    return gi ? gi[k] : w->q->group ? k / w->q->group : 0;
}

int quant_gptq_check(const rlQuantLinear *w, rlError *err) {
    gptqLayout l = gptq_layout(w);
    const int32_t *gi = w->data[QUANT_G_IDX];
    for (int64_t k = 0; gi && k < w->k; k++) {
        int64_t in_order = w->q->group ? k / w->q->group : 0;
        if (gi[k] < 0 || gi[k] >= l.groups)
            return rl_error(err, RL_EMODEL,
                            "%s: g_idx[%lld] = %d is not a group of this layer (0..%lld): the "
                            "checkpoint is damaged; download it again", w->name, (long long)k,
                            gi[k], (long long)l.groups - 1);
        if (!w->q->act_order && gi[k] != in_order)
            return rl_error(err, RL_EMODEL,
                            "%s: g_idx[%lld] = %d, not %lld: the groups follow an act-order "
                            "permutation but quantization_config.desc_act is false. Set "
                            "\"desc_act\": true in config.json (the checkpoint was made with "
                            "act-order).", w->name, (long long)k, gi[k], (long long)in_order);
    }
    if (w->q->zeros_v2) return 0;
    /* v1 stores z - 1 in `bits` bits, so z = 0 wraps to all ones and reads back as 2^bits. */
    const int32_t *qz = w->data[QUANT_ZEROS];
    int64_t words = l.groups * (w->n / l.pack);
    for (int64_t i = 0; i < words; i++)
        for (int p = 0; p < l.pack; p++)
            if ((((uint32_t)qz[i] >> (l.bits * p)) & l.mask) == l.mask)
                return rl_error(err, RL_EMODEL,
                                "%s: a zero point of 0 (group %lld, column %lld) cannot be stored "
                                "in the GPTQ v1 format, which keeps z - 1 in %d bits: the value "
                                "has wrapped. redlm refuses asymmetric GPTQ v1 checkpoints with "
                                "such zeros; export with checkpoint_format \"gptq_v2\" (GPTQModel) "
                                "or symmetric quantization (sym true).", w->name,
                                (long long)(i / (w->n / l.pack)),
                                (long long)(i % (w->n / l.pack) * l.pack + p), l.bits);
    return 0;
}

int quant_gptq_dequant(const rlQuantLinear *w, int64_t r0, int64_t nr, int64_t c0, int64_t nc,
                       float *out, rlError *err) {
    gptqLayout l = gptq_layout(w);
    const int32_t *qw = w->data[QUANT_WEIGHT], *qz = w->data[QUANT_ZEROS];
    const void *sc = w->data[QUANT_SCALES];
    rlDtype sd = w->dtype[QUANT_SCALES];
    int64_t zwords = w->n / l.pack;
    int zplus = w->q->zeros_v2 ? 0 : 1;
    for (int64_t r = r0; r < r0 + nr; r++) {
        int zshift = l.bits * (int)(r % l.pack);
        float *o = out + (r - r0) * nc;
        for (int64_t c = c0; c < c0 + nc; c++) {
            int64_t g = gptq_group(w, c);
            int q = (int)(((uint32_t)qw[(c / l.pack) * w->n + r] >> (l.bits * (int)(c % l.pack))) &
                          l.mask);
            int z = (int)(((uint32_t)qz[g * zwords + r / l.pack] >> zshift) & l.mask) + zplus;
            double s = quant_scale(sc, sd, (size_t)(g * w->n + r));
            if (!isfinite(s))
                return rl_error(err, RL_EMODEL, "%s: scale [%lld, %lld] is not finite: the "
                                "checkpoint is damaged; download it again", w->name,
                                (long long)g, (long long)r);
            o[c - c0] = (float)(s * (q - z));
        }
    }
    return 0;
}

/* Act-order: the block's columns sorted by group (stably), so each group's
 * columns are contiguous; *len the run length every group but the last has.
 * Fails when the runs are not of one length (a TP shard that holds parts of
 * groups unevenly). */
static int gptq_runs(const rlQuantLinear *w, int64_t c0, int64_t nc, int64_t groups,
                     int32_t *perm, int64_t *len, rlError *err) {
    int64_t *count = calloc((size_t)groups + 1, sizeof(int64_t));
    if (!count) return rl_error(err, RL_EMEMORY, "out of host memory sorting %s", w->name);
    for (int64_t c = c0; c < c0 + nc; c++) count[gptq_group(w, c) + 1]++;
    /* every non-empty run but the last as long as the first; the last no longer */
    int64_t run = 0, prev = 0;
    int uneven = 0;
    for (int64_t g = 0; g < groups; g++) {
        int64_t n = count[g + 1];
        if (!n) continue;
        if (!run) run = n;
        if (prev && prev != run) uneven = 1;  /* a shorter run was not the last */
        if (n > run) uneven = 1;
        prev = n;
    }
    for (int64_t g = 0; g < groups; g++) count[g + 1] += count[g];
    for (int64_t c = c0; c < c0 + nc; c++) perm[count[gptq_group(w, c)]++] = (int32_t)(c - c0);
    free(count);
    *len = run;
    if (uneven)
        return rl_error(err, RL_EUSAGE, "%s: this shard of an act-order (desc_act) GPTQ layer "
                        "holds unequal parts of its groups, which the GPU kernels cannot take. "
                        "Run it at --tp 1 on CUDA, or on the CPU backend.", w->name);
    return 0;
}

int quant_gptq_plain(const rlQuantLinear *w, int64_t r0, int64_t nr, int64_t c0, int64_t nc,
                     rlWqHost *out, void **owned, rlError *err) {
    gptqLayout l = gptq_layout(w);
    int act = w->q->act_order && w->data[QUANT_G_IDX];
    int64_t G = w->q->group ? w->q->group : nc;
    int32_t *order = NULL;
    if (act) {
        if (!(order = malloc((size_t)nc * sizeof(int32_t))))
            return rl_error(err, RL_EMEMORY, "out of host memory sorting %s", w->name);
        if (gptq_runs(w, c0, nc, l.groups, order, &G, err)) {
            free(order);
            return -1;
        }
        int identity = 1;
        for (int64_t j = 0; j < nc && identity; j++) identity = order[j] == j;
        if (identity) act = 0;
    }
    int64_t groups = (nc + G - 1) / G;
    if (rl_wq_host_alloc(out, l.bits == 4 ? RL_WQ_INT4 : RL_WQ_INT8, nr, nc, 1, (int)G, 1, act,
                          owned, w->name, err)) {
        free(order);
        return -1;
    }
    if (act) memcpy((int32_t *)out->perm, order, (size_t)nc * sizeof(int32_t));
    const int32_t *qw = w->data[QUANT_WEIGHT], *qz = w->data[QUANT_ZEROS];
    int64_t zwords = w->n / l.pack;
    int zplus = w->q->zeros_v2 ? 0 : 1, rc = 0;
    uint8_t *q = (uint8_t *)out->q;
    float *s = (float *)out->scale, *z = (float *)out->zero;
    for (int64_t r = r0; r < r0 + nr && !rc; r++) {
        int zshift = l.bits * (int)(r % l.pack);
        for (int64_t j = 0; j < nc; j++) {
            int64_t c = c0 + (act ? order[j] : j);
            q[(r - r0) * nc + j] = (uint8_t)(((uint32_t)qw[(c / l.pack) * w->n + r] >>
                                               (l.bits * (int)(c % l.pack))) & l.mask);
        }
        for (int64_t g = 0; g < groups && !rc; g++) {
            int64_t gs = gptq_group(w, c0 + (act ? order[g * G] : g * G));
            double v = quant_scale(w->data[QUANT_SCALES], w->dtype[QUANT_SCALES],
                                   (size_t)(gs * w->n + r));
            if (!isfinite(v))
                rc = rl_error(err, RL_EMODEL, "%s: scale [%lld, %lld] is not finite: the "
                              "checkpoint is damaged; download it again", w->name,
                              (long long)gs, (long long)r);
            s[(r - r0) * groups + g] = (float)v;
            z[(r - r0) * groups + g] =
                (float)((((uint32_t)qz[gs * zwords + r / l.pack] >> zshift) & l.mask) + zplus);
        }
    }
    free(order);
    return rc;
}
