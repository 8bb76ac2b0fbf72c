/* quant.c: what every quantized format shares: which tensors a layer
 * stores, the checks and dequantization dispatched to each format's file,
 * and the scalar decoders (float8_e4m3fn, 16-bit scales). */
#include "worker/model/quant.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/half.h"

#define QUANT_FLOATS ((1u << RL_F32) | (1u << RL_F16) | (1u << RL_BF16))
#define QUANT_INT ((1u << RL_I32))

static int quant_shape_error(rlError *err, const char *name, const char *what, int64_t v,
                             int64_t unit, const rlQuant *q) {
    char fmt[64];
    return rl_error(err, RL_EMODEL,
                    "%s: its %s (%lld) is not a multiple of %lld, as the %s format needs; the "
                    "checkpoint and its quantization_config do not belong together. Download "
                    "them together from one repository.", name, what, (long long)v,
                    (long long)unit, rl_quant_name(q, fmt, sizeof(fmt)));
}

static int64_t quant_ceil(int64_t a, int64_t b) { return (a + b - 1) / b; }

int quant_parts(const rlQuant *q, const char *name, int64_t n, int64_t k,
                rlQuantPart parts[QUANT_N_PARTS], rlError *err) {
    memset(parts, 0, QUANT_N_PARTS * sizeof(*parts));
    rlQuantPart *w = &parts[QUANT_WEIGHT], *z = &parts[QUANT_ZEROS], *s = &parts[QUANT_SCALES];
    switch (q->method) {
    case RL_QUANT_AWQ:
        /* qweight [K, N/8] and qzeros [K/G, N/8] packed along N; scales [K/G, N]. */
        if (n % 8) return quant_shape_error(err, name, "output size", n, 8, q);
        if (k % q->group) return quant_shape_error(err, name, "input size", k, q->group, q);
        *w = (rlQuantPart){"qweight", 2, {k, n / 8}, QUANT_INT, 0};
        *z = (rlQuantPart){"qzeros", 2, {k / q->group, n / 8}, QUANT_INT, 0};
        *s = (rlQuantPart){"scales", 2, {k / q->group, n}, QUANT_FLOATS, 0};
        return 0;
    case RL_QUANT_GPTQ: {
        /* qweight [K / pack, N] packed along K; qzeros [groups, N / pack]
         * packed along N; scales [groups, N]; g_idx [K]. */
        int64_t pack = 32 / q->bits, groups = q->group ? quant_ceil(k, q->group) : 1;
        if (n % pack) return quant_shape_error(err, name, "output size", n, pack, q);
        if (k % pack) return quant_shape_error(err, name, "input size", k, pack, q);
        *w = (rlQuantPart){"qweight", 2, {k / pack, n}, QUANT_INT, 0};
        *z = (rlQuantPart){"qzeros", 2, {groups, n / pack}, QUANT_INT, 0};
        *s = (rlQuantPart){"scales", 2, {groups, n}, QUANT_FLOATS, 0};
        parts[QUANT_G_IDX] = (rlQuantPart){"g_idx", 1, {k, 0}, QUANT_INT, !q->act_order};
        return 0;
    }
    case RL_QUANT_FP8: {
        *w = (rlQuantPart){"weight", 2, {n, k}, 1u << RL_F8_E4M3, 0};
        const char *sname = q->scale_named ? "weight_scale" : "weight_scale_inv";
        if (q->fp8_scale == RL_FP8_BLOCK)
            *s = (rlQuantPart){sname, 2, {quant_ceil(n, q->block_n), quant_ceil(k, q->group)},
                               QUANT_FLOATS, 0};
        else if (q->fp8_scale == RL_FP8_CHANNEL)
            *s = (rlQuantPart){sname, 2, {n, 1}, QUANT_FLOATS, 0};
        else
            *s = (rlQuantPart){sname, 0, {0, 0}, QUANT_FLOATS, 0};
        if (q->act_static)
            parts[QUANT_INPUT_SCALE] = (rlQuantPart){"input_scale", 0, {0, 0}, QUANT_FLOATS, 0};
        return 0;
    }
    case RL_QUANT_NONE: break;
    }
    return rl_error(err, RL_EINTERNAL, "%s: not a quantized layer", name);
}

int quant_check(const rlQuantLinear *w, rlError *err) {
    return w->q->method == RL_QUANT_GPTQ ? quant_gptq_check(w, err) : 0;
}

int quant_dequant(const rlQuantLinear *w, int64_t r0, int64_t nr, int64_t c0, int64_t nc,
                  float *out, rlError *err) {
    if (r0 < 0 || c0 < 0 || nr < 0 || nc < 0 || r0 + nr > w->n || c0 + nc > w->k)
        return rl_error(err, RL_EINTERNAL, "%s: block [%lld+%lld, %lld+%lld] outside [%lld, %lld]",
                        w->name, (long long)r0, (long long)nr, (long long)c0, (long long)nc,
                        (long long)w->n, (long long)w->k);
    switch (w->q->method) {
    case RL_QUANT_AWQ: return quant_awq_dequant(w, r0, nr, c0, nc, out, err);
    case RL_QUANT_GPTQ: return quant_gptq_dequant(w, r0, nr, c0, nc, out, err);
    case RL_QUANT_FP8: return quant_fp8_dequant(w, r0, nr, c0, nc, out, err);
    case RL_QUANT_NONE: break;
    }
    return rl_error(err, RL_EINTERNAL, "%s: not a quantized layer", w->name);
}

int quant_plain(const rlQuantLinear *w, int64_t r0, int64_t nr, int64_t c0, int64_t nc,
                rlWqHost *out, float *input_scale, void **owned, rlError *err) {
    int ku = rl_quant_k_unit(w->q), nu = rl_quant_n_unit(w->q);
    if (r0 < 0 || c0 < 0 || nr <= 0 || nc <= 0 || r0 + nr > w->n || c0 + nc > w->k ||
        r0 % nu || c0 % ku || (r0 + nr < w->n && nr % nu) || (c0 + nc < w->k && nc % ku))
        return rl_error(err, RL_EINTERNAL, "%s: block [%lld+%lld, %lld+%lld] of [%lld, %lld] is "
                        "not cut on the format's units (%d rows, %d columns)", w->name,
                        (long long)r0, (long long)nr, (long long)c0, (long long)nc,
                        (long long)w->n, (long long)w->k, nu, ku);
    *input_scale = 0;
    *owned = NULL;
    int rc;
    switch (w->q->method) {
    case RL_QUANT_AWQ: rc = quant_awq_plain(w, r0, nr, c0, nc, out, owned, err); break;
    case RL_QUANT_GPTQ: rc = quant_gptq_plain(w, r0, nr, c0, nc, out, owned, err); break;
    case RL_QUANT_FP8:
        rc = quant_fp8_plain(w, r0, nr, c0, nc, out, owned, err);
        if (!rc && w->data[QUANT_INPUT_SCALE]) {
            double s = quant_scale(w->data[QUANT_INPUT_SCALE], w->dtype[QUANT_INPUT_SCALE], 0);
            if (!isfinite(s) || s <= 0)
                rc = rl_error(err, RL_EMODEL, "%s: input_scale %g is not a positive number: "
                              "the checkpoint is damaged; download it again", w->name, s);
            *input_scale = (float)s;
        }
        break;
    default: rc = rl_error(err, RL_EINTERNAL, "%s: not a quantized layer", w->name);
    }
    if (rc) {
        free(*owned);
        *owned = NULL;
    }
    return rc;
}

double quant_scale(const void *data, rlDtype dtype, size_t i) {
    switch (dtype) {
    case RL_F32: return ((const float *)data)[i];
    case RL_F16: return rl_f16_to_f32(((const uint16_t *)data)[i]);
    case RL_BF16: return rl_bf16_to_f32(((const uint16_t *)data)[i]);
    default: break;
    }
    return NAN;
}
