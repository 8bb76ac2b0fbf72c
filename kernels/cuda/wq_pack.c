/* wq_pack.c: rl_wq_upload's host half: the checks that turn a shape or a
 * value the kernels cannot take into a message naming it, and the repack of
 * an rlWqHost into the layout wq_internal.h describes.  Plain C, so it runs
 * (and its refusals are tested) without a GPU. */
#include "kernels/cuda/wq_internal.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int wq_fail(char *msg, size_t msg_n, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int wq_fail(char *msg, size_t msg_n, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    if (msg && msg_n) vsnprintf(msg, msg_n, fmt, ap);
    va_end(ap);
    return -1;
}

static const char *wq_type_name(rlWqType t) {
    return t == RL_WQ_INT4 ? "int4" : t == RL_WQ_INT8 ? "int8" : "fp8";
}

int wq_layout(const rlWqHost *h, rlWq *w, char *msg, size_t msg_n) {
    memset(w, 0, sizeof(*w));
    if (h->type != RL_WQ_INT4 && h->type != RL_WQ_INT8 && h->type != RL_WQ_FP8)
        return wq_fail(msg, msg_n, "quantized weights of type %d: the GPU kernels read int4, "
                       "int8 and fp8", (int)h->type);
    const char *tn = wq_type_name(h->type);
    if (h->n < 1 || h->k < 1)
        return wq_fail(msg, msg_n, "%s weights of shape [%d, %d]: both sizes must be positive",
                       tn, h->n, h->k);
    if (h->k % 8)
        return wq_fail(msg, msg_n, "%s weights with k = %d input columns: the GPU kernels need "
                       "k to be a multiple of 8 (16-byte activation loads); this layer cannot "
                       "run quantized on the GPU", tn, h->k);
    if (h->group_k < 1 || (h->group_k % WQ_UNIT_K && h->group_k < h->k))
        return wq_fail(msg, msg_n, "%s weights with groups of %d input columns (k = %d): the "
                       "GPU kernels take groups that are multiples of %d or span all of k",
                       tn, h->group_k, h->k, WQ_UNIT_K);
    int gn = h->group_n, gshift = 0;
    if (h->type != RL_WQ_FP8 && gn != 1)
        return wq_fail(msg, msg_n, "%s weights with one scale per %d output rows: integer "
                       "formats have a scale per row (group_n 1)", tn, gn);
    if (gn >= h->n) gshift = 30;     /* one scale row: every row's index shifts to 0 */
    else if (gn >= 1 && !(gn & (gn - 1))) while ((1 << gshift) < gn) gshift++;
    else
        return wq_fail(msg, msg_n, "fp8 weights with scale blocks of %d output rows: the GPU "
                       "kernels take 1, a power of two, or all %d rows", gn, h->n);
    if (!h->q || !h->scale || (h->type != RL_WQ_FP8 && !h->zero))
        return wq_fail(msg, msg_n, "%s weights without their %s", tn,
                       !h->q ? "values" : !h->scale ? "scales" : "zero points");
    w->type = h->type;
    w->n = h->n;
    w->k = h->k;
    w->group_k = h->group_k;
    w->ntiles = (h->n + WQ_STRIP_N - 1) / WQ_STRIP_N * (WQ_STRIP_N / WQ_TILE_N);
    w->chunk_units = h->type == RL_WQ_INT4 ? 4 : 2;
    int chunk_k = w->chunk_units * WQ_UNIT_K;
    w->nchunks = (h->k + chunk_k - 1) / chunk_k;
    w->ngroups = (h->k + h->group_k - 1) / h->group_k;
    w->group_units = h->group_k >= h->k ? 1 << 29 : h->group_k / WQ_UNIT_K;
    w->gshift = gshift;
    w->scale_rows = ((w->ntiles * WQ_TILE_N - 1) >> gshift) + 1;
    return 0;
}

int wq_pack(const rlWqHost *h, const rlWq *w, uint8_t **qw_out, float **scale_out,
            uint8_t **zero_out, char *msg, size_t msg_n) {
    const char *tn = wq_type_name(h->type);
    int n = w->n, k = w->k, npad = w->ntiles * WQ_TILE_N, gcols = w->ngroups;
    int srows_host = (n + h->group_n - 1) / h->group_n;
    uint8_t *qw = calloc(wq_qw_bytes(w), 1);
    float *scale = calloc((size_t)w->ngroups * w->scale_rows, sizeof(float));
    uint8_t *zero = h->type == RL_WQ_FP8 ? NULL : calloc((size_t)w->ngroups * npad, 1);
    *qw_out = qw;
    *scale_out = scale;
    *zero_out = zero;
    if (!qw || !scale || (h->type != RL_WQ_FP8 && !zero))
        return wq_fail(msg, msg_n, "%s weights [%d, %d]: out of host memory for the repack",
                       tn, n, k);
    int qmax = h->type == RL_WQ_INT4 ? 15 : 255;
    for (int r = 0; r < srows_host; r++)
        for (int g = 0; g < gcols; g++) {
            float s = h->scale[(size_t)r * gcols + g];
            if (!isfinite(s))
                return wq_fail(msg, msg_n, "%s weights: scale [%d, %d] is not finite", tn, r, g);
            /* Host scale row r covers rows r * group_n ..; the device's
             * scale row is row >> gshift, the same partition. */
            scale[(size_t)g * w->scale_rows + r] = s;
        }
    if (zero)
        for (int r = 0; r < n; r++)
            for (int g = 0; g < gcols; g++) {
                float z = h->zero[(size_t)r * gcols + g];
                if (!(z >= 0 && z <= qmax) || z != floorf(z))
                    return wq_fail(msg, msg_n, "%s weights: zero point [%d, %d] = %g is not an "
                                   "integer in 0..%d", tn, r, g, (double)z, qmax);
                zero[(size_t)g * npad + r] = (uint8_t)z;
            }
    /* The values first, in one pass the compiler vectorizes; then the
     * repack, 8 columns (k is a multiple of 8) at a time. */
    for (int r = 0; r < n; r++) {
        const uint8_t *row = h->q + (size_t)r * k;
        unsigned bad = 0;
        if (h->type == RL_WQ_INT4)
            for (int j = 0; j < k; j++) bad |= row[j] > 15;
        else if (h->type == RL_WQ_FP8)
            for (int j = 0; j < k; j++) bad |= (row[j] & 0x7f) == 0x7f;
        if (!bad) continue;
        for (int j = 0; j < k; j++)
            if (h->type == RL_WQ_INT4 ? row[j] > 15 : (row[j] & 0x7f) == 0x7f)
                return h->type == RL_WQ_INT4
                           ? wq_fail(msg, msg_n, "int4 weights: value [%d, %d] = %d is not in "
                                     "0..15", r, j, row[j])
                           : wq_fail(msg, msg_n, "fp8 weights: value [%d, %d] is NaN", r, j);
    }
    int chunk_k = w->chunk_units * WQ_UNIT_K;
    for (int r = 0; r < n; r++) {
        const uint8_t *row = h->q + (size_t)r * k;
        for (int col0 = 0; col0 < k; col0 += 8) {
            int c = col0 / chunk_k, u = col0 % chunk_k / WQ_UNIT_K, qd = col0 % WQ_UNIT_K / 8;
            uint8_t *lane16 = qw + (((size_t)(r / WQ_TILE_N) * w->nchunks + c) * 32 +
                                    (r % WQ_TILE_N) * 4 + qd) * WQ_LANE_BYTES;
            const uint8_t *v = row + col0;
            if (h->type == RL_WQ_INT4) {
                uint32_t word = 0;
                for (int p = 0; p < 4; p++)
                    word |= (uint32_t)v[2 * p] << (4 * p) | (uint32_t)v[2 * p + 1] << (16 + 4 * p);
                memcpy(lane16 + 4 * u, &word, 4);   /* little-endian, as the GPU reads it */
            } else {
                memcpy(lane16 + 8 * u, v, 8);
            }
        }
    }
    if (h->perm) {
        char *seen = calloc((size_t)k, 1);
        if (!seen) return wq_fail(msg, msg_n, "%s weights: out of host memory", tn);
        for (int j = 0; j < k; j++) {
            int32_t p = h->perm[j];
            if (p < 0 || p >= k || seen[p]) {
                free(seen);
                return wq_fail(msg, msg_n, "%s weights: the act-order permutation's entry %d "
                               "(%d) is %s", tn, j, (int)p,
                               p < 0 || p >= k ? "outside 0..k-1" : "repeated");
            }
            seen[p] = 1;
        }
        free(seen);
    }
    return 0;
}
