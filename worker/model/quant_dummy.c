/* quant_dummy.c: random quantized layers for --load-format dummy.
 *
 * Each layer's parts are made at their real shapes and dtypes (packed
 * words, fp16 scales, zeros, float8 bytes) and go through the same
 * dequantization as a checkpoint's, so a dummy run loads what a real one
 * would and a benchmark sees the format's load path.  Values are drawn so
 * the dense weights land near the dummy model's uniform +-0.02.  A backend
 * that keeps layers quantized takes them in the plain form, one random
 * shard per (shape, block) shared by every layer: the weights' values do
 * not change a benchmark, their bytes do. */
#include <stdlib.h>
#include <string.h>

#include "kernels/half.h"
#include "kernels/rng.h"
#include "worker/model/quant.h"

struct rlQuantDummyShard {
    int64_t n, k, r0, nr, c0, nc;
    rlWqHost wq;
    float input_scale;
    void *owned;
    rlQuantDummyShard *next;
};

void quant_dummy_init(rlQuantDummy *d, const rlModelConfig *cfg, uint64_t seed) {
    *d = (rlQuantDummy){.cfg = *cfg, .seed = seed, .ready = 1};
    pthread_mutex_init(&d->lock, NULL);
}

void quant_dummy_free(rlQuantDummy *d) {
    if (!d->ready) return;
    d->ready = 0;
    pthread_mutex_destroy(&d->lock);
    while (d->shards) {
        rlQuantDummyShard *s = d->shards;
        d->shards = s->next;
        free(s->owned);
        free(s);
    }
}

typedef struct dummyFind {
    const char *name;
    int64_t shape[2];
    int found;
} dummyFind;

static int dummy_find(void *ctx, const char *name, int ndim, const int64_t *shape) {
    dummyFind *f = ctx;
    if (ndim != 2 || strcmp(name, f->name)) return 0;
    f->shape[0] = shape[0], f->shape[1] = shape[1], f->found = 1;
    return 1;
}

static uint64_t dummy_hash(const char *s, uint64_t h) {
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 0x100000001b3ULL;
    return h;
}

/* Fills one part: random words (packed values, float8 bytes that are never
 * NaN) or scales near `scale`, a third of them negative for FP8's sake. */
static void dummy_fill(void *p, rlDtype dtype, size_t n, uint64_t key,
                       double scale, rlQuantPartId id, const rlQuant *q) {
    for (size_t i = 0; i < n; i++) {
        uint64_t r = rl_mix64(key + i);
        switch (dtype) {
        case RL_I32:
            if (id == QUANT_G_IDX) ((int32_t *)p)[i] = q->group ? (int32_t)(i / (size_t)q->group) : 0;
            else if (id == QUANT_ZEROS) ((uint32_t *)p)[i] = q->bits == 4 ? 0x77777777u : 0x7f7f7f7fu;
            else ((uint32_t *)p)[i] = (uint32_t)r;
            break;
        case RL_F8_E4M3: ((uint8_t *)p)[i] = (uint8_t)(r & 0xbf); break; /* |v| < 2: no NaN */
        case RL_F16:
            ((uint16_t *)p)[i] = rl_f32_to_f16((float)(scale * (0.5 + (double)(r >> 11) / 9007199254740992.0)));
            break;
        default:
            ((float *)p)[i] = (float)(scale * (0.5 + (double)(r >> 11) / 9007199254740992.0));
        }
    }
}

/* A made shard, lent (owned NULL: it stays in the cache). */
static int dummy_serve(const rlQuantDummyShard *sh, rlTensorView *out) {
    *out = (rlTensorView){.ndim = 2, .shape = {sh->n, sh->k}, .r0 = sh->r0, .nr = sh->nr,
                          .c0 = sh->c0, .nc = sh->nc, .want_quant = 1, .quantized = 1,
                          .wq = sh->wq, .input_scale = sh->input_scale};
    return 0;
}

/* The stored parts of layer `name` ([n, k] = shape), random, into w (their
 * memory in mem[], to free). */
static int dummy_parts(const rlQuantDummy *d, const char *name, const int64_t *shape,
                       rlQuantLinear *w, void *mem[QUANT_N_PARTS], rlError *err) {
    const rlQuant *q = &d->cfg.quant;
    rlQuantPart parts[QUANT_N_PARTS];
    if (quant_parts(q, name, shape[0], shape[1], parts, err)) return -1;
    *w = (rlQuantLinear){.q = q, .name = name, .n = shape[0], .k = shape[1]};
    uint64_t key = dummy_hash(name, d->seed);
    /* Dense values (q - z) * s spread over +-15 s (int4), +-127 s (int8),
     * +-2 s (float8): s makes them about +-0.02. */
    double scale = q->method == RL_QUANT_FP8 ? 0.01 : q->bits == 4 ? 0.02 / 8 : 0.02 / 128;
    for (int i = 0; i < QUANT_N_PARTS; i++) {
        const rlQuantPart *p = &parts[i];
        if (!p->suffix || p->optional) continue;
        rlDtype dt = p->dtypes & (1u << RL_I32) ? RL_I32 : p->dtypes & (1u << RL_F8_E4M3)
                     ? RL_F8_E4M3 : q->method == RL_QUANT_FP8 ? RL_F32 : RL_F16;
        size_t n = p->ndim == 0 ? 1 : (size_t)p->shape[0] * (size_t)(p->ndim == 2 ? p->shape[1] : 1);
        if (!(mem[i] = malloc(n * rl_dtype_size(dt))))
            return rl_error(err, RL_EMEMORY, "out of host memory making dummy %s", name);
        dummy_fill(mem[i], dt, n, key ^ ((uint64_t)i << 56), scale, (rlQuantPartId)i, q);
        w->data[i] = mem[i], w->dtype[i] = dt;
    }
    return 0;
}

/* The block asked for in the plain form, made once per shape and block. */
static int dummy_shard(rlQuantDummy *d, const char *name, const int64_t *shape,
                       rlTensorView *out, rlError *err) {
    int64_t r0 = out->nr ? out->r0 : 0, nr = out->nr ? out->nr : shape[0];
    int64_t c0 = out->nr ? out->c0 : 0, nc = out->nr ? out->nc : shape[1];
    for (rlQuantDummyShard *sh = d->shards; sh; sh = sh->next)
        if (sh->n == shape[0] && sh->k == shape[1] && sh->r0 == r0 && sh->nr == nr &&
            sh->c0 == c0 && sh->nc == nc)
            return dummy_serve(sh, out);
    rlQuantLinear w;
    void *mem[QUANT_N_PARTS] = {0};
    rlQuantDummyShard *sh = calloc(1, sizeof(*sh));
    int rc = sh ? dummy_parts(d, name, shape, &w, mem, err)
                : rl_error(err, RL_EMEMORY, "out of host memory making dummy %s", name);
    if (!rc) rc = quant_plain(&w, r0, nr, c0, nc, &sh->wq, &sh->input_scale, &sh->owned, err);
    for (int i = 0; i < QUANT_N_PARTS; i++) free(mem[i]);
    if (rc) {
        free(sh);
        return -1;
    }
    sh->n = shape[0], sh->k = shape[1], sh->r0 = r0, sh->nr = nr, sh->c0 = c0, sh->nc = nc;
    sh->next = d->shards;
    d->shards = sh;
    return dummy_serve(sh, out);
}

/* The block asked for, dequantized to fp32, from this layer's own parts. */
static int dummy_dense(const rlQuantDummy *d, const char *name, const int64_t *shape,
                       rlTensorView *out, rlError *err) {
    rlQuantLinear w;
    void *mem[QUANT_N_PARTS] = {0};
    int rc = dummy_parts(d, name, shape, &w, mem, err);
    int64_t r0 = out->nr ? out->r0 : 0, nr = out->nr ? out->nr : w.n;
    int64_t c0 = out->nr ? out->c0 : 0, nc = out->nr ? out->nc : w.k;
    float *block = rc ? NULL : malloc((size_t)(nr * nc > 0 ? nr * nc : 1) * sizeof(float));
    if (!rc && !block) rc = rl_error(err, RL_EMEMORY, "out of host memory making dummy %s", name);
    if (!rc) rc = quant_dequant(&w, r0, nr, c0, nc, block, err);
    for (int i = 0; i < QUANT_N_PARTS; i++) free(mem[i]);
    if (rc) {
        free(block);
        return -1;
    }
    *out = (rlTensorView){.dtype = RL_F32, .ndim = 2, .shape = {w.n, w.k}, .data = block,
                          .r0 = r0, .nr = nr, .c0 = c0, .nc = nc, .owned = block};
    return 0;
}

int quant_dummy_lookup(void *ctx, const char *name, rlTensorView *out, rlError *err) {
    rlQuantDummy *d = ctx;
    const rlQuant *q = &d->cfg.quant;
    dummyFind f = {.name = name};
    if (!quant_is_linear(q, name) ||
        (rl_model_expected_tensors(&d->cfg, dummy_find, &f), !f.found)) {
        out->data = NULL;  /* the model's own dummy values */
        out->owned = NULL;
        return 0;
    }
    if (!out->want_quant) return dummy_dense(d, name, f.shape, out, err);
    pthread_mutex_lock(&d->lock);
    int rc = dummy_shard(d, name, f.shape, out, err);
    pthread_mutex_unlock(&d->lock);
    return rc;
}
