/* model_weights.c: one rank's shard of the weights, sliced out of the
 * Hugging Face tensors (or made up for --load-format dummy) and uploaded, as
 * the layer table of model_tensors.c describes them.
 *
 * Column-parallel tensors (q, k, v, gate, up, the vocabulary tables) are row
 * ranges of the stored matrices, contiguous in the file, and go up in one
 * upload each; row-parallel ones (o_proj, down_proj) are column ranges and
 * are packed through a host staging buffer first.  The backend converts
 * dtypes on upload, so a bf16, fp16 or fp32 checkpoint loads the same way; a
 * source that makes its data (a quantized checkpoint, dequantized) hands
 * over just the block asked for.
 *
 * A backend with upload_quant (CUDA) keeps quantized linear layers
 * quantized: the source serves each part's shard in the plain form of
 * kernels/quant.h, the parts of one buffer (q|k|v, gate|up) are joined
 * along n here (groups run along k, so they join as they are), and the
 * backend repacks the whole for its kernels.  This is the one narrow point
 * between the formats and the GPU: the loader decodes AWQ / GPTQ / FP8
 * packing once, the kernels read one form, and neither knows the other's
 * layout.  The CPU backend has no upload_quant and takes the layers
 * dequantized (its fp32 path is the reference). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/model.h"
#include "kernels/rope.h"

typedef struct wLoad {
    rlModel *m;
    rlTensorLookup src;     /* NULL: dummy weights */
    void *ctx;
    uint64_t seed;
} wLoad;

static void *w_alloc(wLoad *L, size_t elems, rlError *err) {
    rlBackend *be = L->m->be;
    return be->ops->alloc(be, elems * rl_dtype_size(be->weight_dtype), err);
}

static uint64_t w_hash(const char *s, uint64_t h) {
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 0x100000001b3ULL;
    return h;
}

/* Upload the block [r0, r0 + nr) x [c0, c0 + nc) of tensor `name`, stored
 * (rows, cols) (cols = 0: a vector of rows), to dst + dst_off elements.
 * Dummy weights: uniform in [-scale, scale), or ones when scale is 0 (norms). */
static int w_part(wLoad *L, void *dst, size_t dst_off, const char *name, int64_t rows,
                  int64_t cols, int64_t r0, int64_t nr, int64_t c0, int64_t nc, float scale,
                  rlError *err) {
    rlBackend *be = L->m->be;
    rlDtype wd = be->weight_dtype;
    void *d = (char *)dst + dst_off * rl_dtype_size(wd);
    size_t n = (size_t)nr * (size_t)(cols ? nc : 1);
    if (n == 0) return 0;
    rlTensorView v = {.r0 = r0, .nr = nr, .c0 = cols ? c0 : 0, .nc = cols ? nc : 1};
    if (L->src && L->src(L->ctx, name, &v, err) != 0) return -1;
    if (!L->src || !v.data) {
        if (scale > 0)
            return be->ops->fill_random(be, d, wd, n, w_hash(name, L->seed) ^ (uint64_t)(r0 << 20 | c0),
                                        scale, err);
        float *ones = malloc(n * sizeof(float));
        if (!ones) return rl_error(err, RL_EMEMORY, "out of host memory making %s", name);
        for (size_t i = 0; i < n; i++) ones[i] = 1.0f;
        int rc = be->ops->upload(be, d, wd, ones, RL_F32, n, err);
        free(ones);
        return rc;
    }

    int ndim = cols ? 2 : 1, rc;
    if (v.ndim != ndim || v.shape[0] != rows || (cols && v.shape[1] != cols)) {
        rc = rl_error(err, RL_EMODEL,
                      "tensor %s has shape [%lld%s%lld] but config.json implies [%lld%s%lld]: "
                      "the weights do not belong to this config; re-download the model",
                      name, (long long)v.shape[0], v.ndim == 2 ? ", " : "",
                      v.ndim == 2 ? (long long)v.shape[1] : 0LL, (long long)rows,
                      cols ? ", " : "", cols ? (long long)cols : 0LL);
        free(v.owned);
        return rc;
    }
    if (v.owned) {  /* the block alone */
        rc = be->ops->upload(be, d, wd, v.data, v.dtype, n, err);
        free(v.owned);
        return rc;
    }
    size_t es = rl_dtype_size(v.dtype);
    int64_t width = cols ? cols : 1;
    const char *base = (const char *)v.data + ((size_t)r0 * width + (size_t)c0) * es;
    if (!cols || nc == cols) return be->ops->upload(be, d, wd, base, v.dtype, n, err);

    char *stage = malloc(n * es);
    if (!stage) return rl_error(err, RL_EMEMORY, "out of host memory staging %s", name);
    for (int64_t r = 0; r < nr; r++)
        memcpy(stage + (size_t)r * nc * es, base + (size_t)r * cols * es, (size_t)nc * es);
    rc = be->ops->upload(be, d, wd, stage, v.dtype, n, err);
    free(stage);
    return rc;
}

/* Whole vector `name` of n elements (norms, where scale 0 gives ones). */
static void *w_vector(wLoad *L, const char *name, int64_t n, rlError *err) {
    void *p = w_alloc(L, (size_t)n, err);
    if (p && w_part(L, p, 0, name, n, 0, 0, n, 0, 0, 0.0f, err) != 0) {
        L->m->be->ops->free(L->m->be, p);
        return NULL;
    }
    return p;
}

/* Rows [r0, r0 + nr) of the (rows, hidden) table `name`. */
static void *w_rows(wLoad *L, const char *name, int64_t rows, int64_t r0, int64_t nr,
                    rlError *err) {
    int64_t hidden = L->m->cfg.hidden_size;
    void *p = w_alloc(L, (size_t)nr * (size_t)hidden, err);
    if (p && w_part(L, p, 0, name, rows, hidden, r0, nr, 0, hidden, 0.02f, err) != 0) {
        L->m->be->ops->free(L->m->be, p);
        return NULL;
    }
    return p;
}

/* Parts a..b of one buffer, each a shard in the plain quantized form, as one
 * matrix of their rows one after another.  Parts whose scales cover
 * different row ranges (a per-tensor FP8 scale, or blocks that straddle a
 * part's end) get one scale row per weight row; act-order permutations
 * must agree (GPTQ orders columns by the input's statistics, the same
 * input for q, k and v, and for gate and up). */
static int w_join(const rlTensorView *v, int n, const char *name, rlWqHost *out, void **owned,
                  rlError *err) {
    const rlWqHost *h0 = &v[0].wq;
    int rows = 0, gn = h0->group_n;
    for (int i = 0; i < n; i++) {
        const rlWqHost *h = &v[i].wq;
        if (h->type != h0->type || h->k != h0->k || h->group_k != h0->group_k ||
            !h->zero != !h0->zero || !h->perm != !h0->perm ||
            (h->perm && memcmp(h->perm, h0->perm, (size_t)h->k * sizeof(int32_t))))
            return rl_error(err, RL_EMODEL, "%s: its parts are quantized differently (type, "
                            "groups or act-order), so they cannot run as one matrix",
                            name);
        if (h->group_n != gn || h->n % h->group_n) gn = 1;
        rows += h->n;
    }
    if (rl_wq_host_alloc(out, h0->type, rows, h0->k, gn, h0->group_k, h0->zero != NULL,
                         h0->perm != NULL, owned, name, err))
        return -1;
    int64_t groups = (h0->k + h0->group_k - 1) / h0->group_k, r0 = 0;
    for (int i = 0; i < n; i++) {
        const rlWqHost *h = &v[i].wq;
        memcpy((uint8_t *)out->q + r0 * h->k, h->q, (size_t)h->n * (size_t)h->k);
        for (int64_t r = 0; r < h->n; r += gn)
            memcpy((float *)out->scale + (r0 + r) / gn * groups,
                   h->scale + r / h->group_n * groups, (size_t)groups * sizeof(float));
        if (h->zero)
            memcpy((float *)out->zero + r0 * groups, h->zero,
                   (size_t)(h->n * groups) * sizeof(float));
        r0 += h->n;
    }
    if (h0->perm) memcpy((int32_t *)out->perm, h0->perm, (size_t)h0->k * sizeof(int32_t));
    return 0;
}

/* Table rows a..b (one buffer) kept quantized on the backend, when the
 * source serves them quantized: 1 when it serves them dense (a module the
 * checkpoint keeps unquantized), so the caller loads them as usual. */
static int w_quant(wLoad *L, int l, const rlLayerTensor *t, int a, int b, void **dst,
                   rlError *err) {
    rlBackend *be = L->m->be;
    const rlModelConfig *c = &L->m->cfg;
    const rlShard *s = &L->m->shard;
    rlTensorView v[RL_MAX_LAYER_TENSORS];
    char name[160];
    int n = 0, rc = -1;
    float input_scale = 0;
    for (int k = a; k < b; k++, n++) {
        if (!rl_layer_tensor_elems(c, s, &t[k])) {  /* no rows of this part on this rank */
            n--;
            continue;
        }
        int64_t r0, nr, c0, nc;
        rl_dim_cut(c, s, t[k].rows, &r0, &nr);
        rl_dim_cut(c, s, t[k].cols, &c0, &nc);
        rl_layer_tensor_name(&t[k], s->layer0 + l, 0, name, sizeof(name));
        v[n] = (rlTensorView){.r0 = r0, .nr = nr, .c0 = c0, .nc = nc, .want_quant = 1};
        if (L->src(L->ctx, name, &v[n], err) != 0) goto done;
        int64_t rows = rl_dim_size(c, t[k].rows), cols = rl_dim_size(c, t[k].cols);
        if (!v[n].quantized) {
            free(v[n].owned);
            if (n == 0) return 1;
            v[n].owned = NULL;
            rl_error(err, RL_EMODEL, "%s is stored unquantized but the other parts of its "
                     "matrix are quantized: the checkpoint's quantization_config does not "
                     "match its tensors", name);
            goto done;
        }
        if (v[n].shape[0] != rows || v[n].shape[1] != cols || v[n].wq.n != nr ||
            v[n].wq.k != nc) {
            rl_error(err, RL_EMODEL, "tensor %s has shape [%lld, %lld] but config.json implies "
                     "[%lld, %lld]: the weights do not belong to this config; re-download the "
                     "model", name, (long long)v[n].shape[0], (long long)v[n].shape[1],
                     (long long)rows, (long long)cols);
            n++;
            goto done;
        }
        if (v[n].input_scale > input_scale) input_scale = v[n].input_scale;
    }
    {
        /* A fused layer's activations get one static scale: the largest, as vLLM does. */
        rlWqHost joined, *h = &v[0].wq;
        void *owned = NULL;
        if (n > 1) {
            snprintf(name, sizeof(name), "model.layers.%d.%s (and the parts after it)",
                     s->layer0 + l, t[a].name);
            if (w_join(v, n, name, &joined, &owned, err)) goto done;
            h = &joined;
        }
        size_t bytes = 0;
        *dst = be->ops->upload_quant(be, h, input_scale, &bytes, err);
        free(owned);
        if (*dst) {
            L->m->quant_bytes += bytes, rc = 0;
        } else {
            char fmt[64];
            rl_error_wrap(err, "keeping model.layers.%d.%s of this %s checkpoint quantized on the "
                          "%s backend (--backend cpu runs every format, dequantized)",
                          s->layer0 + l, t[a].name, rl_quant_name(&c->quant, fmt, sizeof fmt),
                          be->ops->name);
        }
    }
done:
    for (int i = 0; i < n; i++) free(v[i].owned);
    return rc;
}

/* The buffer of rlLayer that a table row names. */
static void **w_slot(rlLayer *w, const rlLayerTensor *t) { return (void **)((char *)w + t->slot); }

static int be_quant(const wLoad *L) { return L->m->be->ops->upload_quant != NULL; }

/* Every tensor of the layer's table (model_tensors.c) as this shard cuts
 * it; the parts of one buffer follow each other in the table, and a buffer
 * of routed experts holds expert 0's parts, then expert 1's, and so on. */
static int w_layer(wLoad *L, int l, rlLayer *w, rlError *err) {
    const rlModelConfig *c = &L->m->cfg;
    const rlShard *s = &L->m->shard;
    int layer = s->layer0 + l;
    rlLayerTensor t[RL_MAX_LAYER_TENSORS];
    int n = rl_layer_tensors(c, layer, t);
    for (int i = 0, j; i < n; i = j) {
        size_t total = 0;
        int held = 0;
        for (j = i; j < n && t[j].slot == t[i].slot; j++) {
            total += rl_layer_tensor_elems(c, s, &t[j]);
            held |= !t[j].rank0_only || s->tp_rank == 0;
        }
        if (!held) continue;
        void **dst = w_slot(w, &t[i]);
        if (t[i].cols != RL_DIM_NONE && !t[i].per_expert && c->quant.method && L->src &&
            be_quant(L) && total) {
            int rc = w_quant(L, l, t, i, j, dst, err);
            if (rc < 0) return -1;
            if (rc == 0) {
                w->quantized |= RL_LAYER_BIT(t[i].slot);
                continue;
            }
        }
        if (!(*dst = w_alloc(L, total, err))) return -1;
        int experts = t[i].per_expert ? c->num_experts : 1;
        size_t off = 0;
        for (int e = 0; e < experts; e++) {
            for (int k = i; k < j; k++) {
                size_t elems = rl_layer_tensor_elems(c, s, &t[k]) / (size_t)experts;
                int64_t r0, nr, c0 = 0, nc = 0;
                rl_dim_cut(c, s, t[k].rows, &r0, &nr);
                if (t[k].cols != RL_DIM_NONE) rl_dim_cut(c, s, t[k].cols, &c0, &nc);
                char name[160];
                rl_layer_tensor_name(&t[k], layer, e, name, sizeof(name));
                if (elems && w_part(L, *dst, off, name, rl_dim_size(c, t[k].rows),
                                    rl_dim_size(c, t[k].cols), r0, nr, c0, nc, t[k].init, err))
                    return -1;
                off += elems;
            }
        }
    }
    return 0;
}

/* The rotary table of kernels/rope.c, handed to the backend once. */
static int model_rope_init(rlModel *m, rlError *err) {
    int half = m->cfg.head_dim / 2;
    double *inv_freq = malloc((size_t)half * sizeof(double)), scale;
    if (!inv_freq) return rl_error(err, RL_EMEMORY, "out of host memory for the rotary table");
    rl_rope_frequencies(&m->cfg, inv_freq, &scale);
    int rc = m->be->ops->rope_init(m->be, inv_freq, half, scale, err);
    free(inv_freq);
    return rc;
}

static void *model_act(rlModel *m, size_t elems, rlDtype dtype, rlError *err) {
    return m->be->ops->alloc(m->be, elems * rl_dtype_size(dtype), err);
}

int rl_model_init(rlModel *m, const rlModelConfig *cfg, const rlShard *shard, rlBackend *be,
                  rlComm *tp, rlComm *pp, rlTensorLookup src, void *src_ctx, uint64_t dummy_seed,
                  int max_tokens, int max_rows, rlError *err) {
    memset(m, 0, sizeof(*m));
    m->cfg = *cfg, m->shard = *shard, m->be = be, m->tp = tp, m->pp = pp;
    m->max_tokens = max_tokens, m->max_rows = max_rows;
    const rlShard *s = shard;
    if (cfg->head_dim % 2 || max_tokens < 1 || max_rows < 0)
        return rl_error(err, RL_EMODEL,
                        "cannot run head_dim %d (rotary embedding needs it even) with %d tokens "
                        "and %d logit rows per step", cfg->head_dim, max_tokens, max_rows);
    if (cfg->num_experts &&
        (!be->ops->moe_route || !be->ops->moe_experts || !be->ops->shared_gate))
        return rl_error(err, RL_EUSAGE, "the %s backend has no mixture-of-experts kernels in "
                        "this version: run %s with --backend cpu", be->ops->name,
                        cfg->architecture);
    if ((tp ? tp->size != s->tp_size : s->tp_size > 1) ||
        (pp ? pp->size != s->pp_size : s->pp_size > 1))
        return rl_error(err, RL_EINTERNAL,
                        "shard of a TP %d x PP %d layout given communicators of %d and %d ranks",
                        s->tp_size, s->pp_size, tp ? tp->size : 1, pp ? pp->size : 1);
    m->attn = (rlAttnShape){.n_q = s->n_q_heads, .n_kv = s->n_kv_heads, .q_head0 = s->q_head0,
                            .kv_head0 = s->kv_head0, .group = cfg->num_heads / cfg->num_kv_heads,
                            .head_dim = cfg->head_dim};

    wLoad L = {.m = m, .src = src, .ctx = src_ctx, .seed = dummy_seed};
    int first = s->pp_rank == 0, last = s->pp_rank == s->pp_size - 1;
    int64_t V = cfg->vocab_size;
    if (first && !(m->embed = w_rows(&L, "model.embed_tokens.weight", V, s->vocab0, s->n_vocab, err)))
        goto fail;
    if (!(m->layers = calloc((size_t)s->n_layers, sizeof(rlLayer)))) {
        rl_error(err, RL_EMEMORY, "out of host memory for %d layers", s->n_layers);
        goto fail;
    }
    for (int l = 0; l < s->n_layers; l++)
        if (w_layer(&L, l, &m->layers[l], err) != 0) goto fail;
    if (model_rope_init(m, err) != 0) goto fail;
    if (last) {
        if (!(m->norm = w_vector(&L, "model.norm.weight", cfg->hidden_size, err))) goto fail;
        if (cfg->tie_word_embeddings && first)
            m->lm_head = m->embed;
        else if (!(m->lm_head = w_rows(&L, cfg->tie_word_embeddings ? "model.embed_tokens.weight"
                                                                     : "lm_head.weight",
                                       V, s->vocab0, s->n_vocab, err)))
            goto fail;
    }

    size_t T = (size_t)max_tokens, R = (size_t)rl_model_head_rows(max_rows);
    size_t D = (size_t)cfg->hidden_size;
    size_t hd = (size_t)cfg->head_dim, nq = (size_t)s->n_q_heads, nkv = (size_t)s->n_kv_heads;
    size_t mlp = (size_t)(s->n_shared > s->n_mlp ? s->n_shared : s->n_mlp);
    size_t E = (size_t)cfg->num_experts, K = (size_t)cfg->num_experts_per_tok;
    rlDtype act = be->act_dtype;
    if (!(m->x = model_act(m, T * D, act, err)) || !(m->resid = model_act(m, T * D, act, err)) ||
        !(m->delta = model_act(m, T * D, act, err)) ||
        !(m->qkv = model_act(m, T * (nq + 2 * nkv) * hd, act, err)) ||
        !(m->att = model_act(m, T * nq * hd, act, err)) ||
        !(m->gu = model_act(m, T * 2 * mlp, act, err)) ||
        !(m->mlp = model_act(m, T * mlp, act, err)))
        goto fail;
    if (E && (!(m->moe_logits = model_act(m, T * E, RL_F32, err)) ||
              !(m->moe_weights = model_act(m, T * K, RL_F32, err)) ||
              !(m->moe_ids = model_act(m, T * K, RL_I32, err))))
        goto fail;
    if (be->ops->reserve &&
        be->ops->reserve(be, (int)T,
                         E && s->n_moe ? rl_moe_scratch_bytes(T, (int)D, s->n_moe, (int)E, (int)K,
                                                              rl_dtype_size(act))
                                       : 0,
                         err) != 0)
        goto fail;
    if (last) {
        if (!(m->rows_x = model_act(m, R * D, act, err)) ||
            !(m->logits = model_act(m, R * (size_t)s->n_vocab, RL_F32, err)))
            goto fail;
        m->logits_full = m->logits;
        if (tp) {
            int n = s->tp_size;
            if (!be->ops->copy2d) {
                rl_error(err, RL_EINTERNAL, "the %s backend cannot combine vocabulary slices "
                         "(no copy2d): run it at TP 1", be->ops->name);
                goto fail;
            }
            rlShard plan[n];
            if (rl_shard_plan(cfg, n, 1, NULL, plan, err) != 0) goto fail;
            m->tp_vocab0 = malloc((size_t)n * sizeof(int));
            m->tp_n_vocab = malloc((size_t)n * sizeof(int));
            if (!m->tp_vocab0 || !m->tp_n_vocab) {
                rl_error(err, RL_EMEMORY, "out of host memory for the vocabulary plan");
                goto fail;
            }
            for (int r = 0; r < n; r++) {
                m->tp_vocab0[r] = plan[r].vocab0, m->tp_n_vocab[r] = plan[r].n_vocab;
                if (plan[r].n_vocab > m->vocab_pad) m->vocab_pad = plan[r].n_vocab;
            }
            /* The local slice is all_gather's send buffer: pad it to the largest part. */
            be->ops->free(be, m->logits);
            if (!(m->logits = model_act(m, R * (size_t)m->vocab_pad, RL_F32, err)) ||
                !(m->logits_gather = model_act(m, (size_t)n * R * m->vocab_pad, RL_F32, err)) ||
                !(m->logits_full = model_act(m, R * (size_t)V, RL_F32, err)))
                goto fail;
        }
    }
    return 0;
fail:
    rl_error_wrap(err, "loading layers %d-%d of the model (TP rank %d, PP stage %d)", s->layer0,
                  s->layer0 + s->n_layers - 1, s->tp_rank, s->pp_rank);
    rl_model_free(m);
    return -1;
}

int rl_model_invariant_reduce(rlModel *m, rlError *err) {
    if (!m->tp || m->tp->size <= 2 || m->reduce_gather) return 0;
    if (!m->be->ops->copy2d)
        return rl_error(err, RL_EINTERNAL, "the %s backend cannot sum gathered parts (no "
                        "copy2d)", m->be->ops->name);
    rlDtype act = m->be->act_dtype;
    size_t bytes = rl_model_invariant_reduce_bytes(&m->cfg, &m->shard, act, m->max_tokens);
    m->reduce_gather = model_act(m, bytes / rl_dtype_size(act), act, err);
    return m->reduce_gather ? 0 : rl_error_wrap(err, "--batch-invariant's all-reduce buffer");
}

static void model_release(rlBackend *be, void *p) {
    if (p) be->ops->free(be, p);
}

void rl_model_free(rlModel *m) {
    rlBackend *be = m->be;
    if (!be) return;
    rlLayerTensor t[RL_MAX_LAYER_TENSORS];
    for (int l = 0; m->layers && l < m->shard.n_layers; l++) {
        int n = rl_layer_tensors(&m->cfg, m->shard.layer0 + l, t);
        for (int i = 0; i < n; i++) {
            void **p = w_slot(&m->layers[l], &t[i]);
            if (*p && m->layers[l].quantized & RL_LAYER_BIT(t[i].slot)) be->ops->free_quant(be, *p);
            else model_release(be, *p);
            *p = NULL;
        }
    }
    free(m->layers);
    if (m->lm_head != m->embed) model_release(be, m->lm_head);
    if (m->logits_full != m->logits) model_release(be, m->logits_full);
    void *ps[] = {m->embed, m->norm, m->x, m->resid, m->delta, m->qkv, m->att, m->gu,
                  m->mlp, m->rows_x, m->logits, m->logits_gather, m->moe_logits,
                  m->moe_weights, m->moe_ids, m->reduce_gather};
    for (size_t i = 0; i < sizeof(ps) / sizeof(ps[0]); i++) model_release(be, ps[i]);
    free(m->tp_vocab0);
    free(m->tp_n_vocab);
    rl_batch_pad_free(&m->pad);
    free(m->pad_out);
    memset(m, 0, sizeof(*m));
}
