/* model.c: the forward pass over one step's flat batch of tokens.
 *
 * Read it next to Hugging Face's modeling_qwen2.py (modeling_qwen3.py and
 * modeling_llama.py differ only where a buffer is NULL): per layer, RMSNorm,
 * Q/K/V projections (with bias in Qwen2), the q/k head norms of Qwen3, rotary
 * embedding (scaled as the config says), grouped-query causal attention over
 * the paged KV cache, output projection, residual add, RMSNorm, SwiGLU MLP,
 * residual add (the MLP a mixture of experts in MoE layers: model_moe); then
 * the final norm and the LM head on the rows whose logits are wanted.  A bias after a row-parallel product (Llama's o_proj
 * and down_proj with attention_bias / mlp_bias) lives on TP rank 0 only, so
 * the all-reduce adds it once.  Tensor parallelism shows up as three
 * all-reduces per layer boundary (embedding, o_proj, down_proj) and a gather
 * of the vocabulary slices; pipeline parallelism as a receive before the
 * first layer and a send after the last.  A TP communicator of one rank
 * (--collectives always) is used like any other, so one device runs the
 * same collectives a TP group does.  With --batch-invariant over 3 or more
 * TP ranks an all-reduce is an all-gather and a sum in rank order
 * (rl_model_invariant_reduce).  Everything else is the backend's. */
#include "kernels/model.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int model_all_reduce(rlModel *m, void *buf, size_t n, rlError *err) {
    if (!m->tp) return 0;
    /* Collectives read device memory: queued work must have produced it. */
    rlBackend *be = m->be;
    if (be->ops->sync(be, err) != 0) return -1;
    if (!m->reduce_gather)
        return m->tp->ops->all_reduce_sum(m->tp, buf, n, be->act_dtype, err);
    /* rl_model_invariant_reduce: every rank's part, then their sum in rank
     * order, each add rounded to the activation type as a ring's hops are. */
    size_t bytes = n * rl_dtype_size(be->act_dtype);
    char *parts = m->reduce_gather;
    if (m->tp->ops->all_gather(m->tp, buf, parts, n, be->act_dtype, err) != 0) return -1;
    be->ops->copy2d(be, buf, bytes, parts, bytes, bytes, 1);
    for (int r = 1; r < m->tp->size; r++) be->ops->add(be, buf, parts + r * bytes, n);
    return 0;
}

static int model_check(const rlModel *m, const rlBatch *b, rlError *err) {
    if (b->n_tokens < 0 || b->n_tokens > m->max_tokens || b->n_rows < 0 ||
        b->n_rows > m->max_rows)
        return rl_error(err, RL_EINPUT,
                        "step of %d tokens and %d logit rows is larger than the model was set "
                        "up for (%d tokens, %d rows per step)",
                        b->n_tokens, b->n_rows, m->max_tokens, m->max_rows);
    for (int t = 0; t < b->n_tokens; t++)
        if (b->tokens[t] < 0 || b->tokens[t] >= m->cfg.vocab_size)
            return rl_error(err, RL_EINPUT,
                            "token id %d is outside the model's vocabulary (0..%d)",
                            b->tokens[t], m->cfg.vocab_size - 1);
    return 0;
}

/* A linear layer: w's buffer `slot` of rlLayer, held quantized or dense. */
static void model_linear(rlModel *m, const rlLayer *w, size_t slot, void *out, const void *in,
                         const void *bias, int rows, int n, int k) {
    rlBackend *be = m->be;
    const void *wt = *(void *const *)((const char *)w + slot);
    if (w->quantized & RL_LAYER_BIT(slot))
        be->ops->matmul_quant(be, out, in, wt, bias, rows, n, k);
    else
        be->ops->matmul(be, out, in, wt, bias, rows, n, k);
}
#define LINEAR(m, w, buf, ...) model_linear(m, w, offsetof(rlLayer, buf), __VA_ARGS__)

/* The last stage's logits, each TP rank holding a vocabulary slice: gather
 * the slices and lay them side by side into full rows. */
static float *model_full_logits(rlModel *m, int rows, rlError *err) {
    if (!m->tp) return m->logits;
    rlBackend *be = m->be;
    size_t part = (size_t)rows * m->vocab_pad;
    if (be->ops->sync(be, err) != 0 ||
        m->tp->ops->all_gather(m->tp, m->logits, m->logits_gather, part, RL_F32, err) != 0)
        return NULL;
    size_t V = (size_t)m->cfg.vocab_size;
    for (int r = 0; r < m->shard.tp_size; r++) {
        size_t n = (size_t)m->tp_n_vocab[r];
        be->ops->copy2d(be, m->logits_full + m->tp_vocab0[r], V * sizeof(float),
                        m->logits_gather + r * part, n * sizeof(float), n * sizeof(float), rows);
    }
    return m->logits_full;
}

/* delta = down(silu(gate x) * up x), n columns of this rank's share;
 * `skip`: the RL_LEAVE_* kinds this step leaves out. */
static void model_mlp(rlModel *m, const rlLayer *w, int T, int n, unsigned skip) {
    const rlBackendOps *op = m->be->ops;
    int D = m->cfg.hidden_size;
    if (!(skip & RL_LEAVE_GATE_UP)) LINEAR(m, w, wgu, m->gu, m->x, w->bgu, T, 2 * n, D);
    if (!(skip & (RL_LEAVE_SWIGLU | RL_LEAVE_DOWN)) && op->swiglu_matmul_quant &&
        (w->quantized & RL_LAYER_BIT(offsetof(rlLayer, wdown)))) {
        op->swiglu_matmul_quant(m->be, m->delta, m->mlp, m->gu, w->wdown, w->bdown, T, D, n);
        return;
    }
    if (!(skip & RL_LEAVE_SWIGLU)) op->swiglu(m->be, m->mlp, m->gu, T, n);
    if (!(skip & RL_LEAVE_DOWN)) LINEAR(m, w, wdown, m->delta, m->mlp, w->bdown, T, D, n);
}

/* A mixture-of-experts MLP (Qwen2MoeSparseMoeBlock / Qwen3MoeSparseMoeBlock):
 * router logits = gate x; p = softmax over all experts (fp32); the top-k
 * experts by p (renormalised to sum 1 when norm_topk_prob); delta = sum of
 * p_e x expert_e(x) over them, each expert a SwiGLU MLP; plus, in Qwen2-MoE,
 * sigmoid(shared_expert_gate x) x shared_expert(x).  Each rank holds a column
 * range of every expert (and of the shared expert) and the whole router, so
 * every rank routes the same way and the sum over TP ranks (the all-reduce
 * after this) completes each expert's down projection. */
static void model_moe(rlModel *m, const rlLayer *w, int T, unsigned skip) {
    const rlModelConfig *c = &m->cfg;
    rlBackend *be = m->be;
    const rlBackendOps *op = be->ops;
    int D = c->hidden_size, E = c->num_experts, K = c->num_experts_per_tok;
    if (skip & RL_LEAVE_ROUTER) {
        /* the experts chosen last time stay chosen */
    } else if (op->moe_gate) {
        op->moe_gate(be, m->moe_ids, m->moe_weights, m->moe_logits, m->x, w->router, T, E, D, K,
                     c->norm_topk_prob);
    } else {
        op->matmul_f32(be, m->moe_logits, m->x, w->router, T, E, D);
        op->moe_route(be, m->moe_ids, m->moe_weights, m->moe_logits, T, E, K, c->norm_topk_prob);
    }
    if (w->wgu) {
        model_mlp(m, w, T, m->shard.n_shared, skip);
        op->shared_gate(be, m->delta, m->x, w->wsgate, T, D);
    }
    if (!(skip & RL_LEAVE_EXPERTS))
        op->moe_experts(be, m->delta, m->x, w->wgu_e, w->wdown_e, m->moe_ids, m->moe_weights, T,
                        D, m->shard.n_moe, E, K, w->wgu != NULL);
}

/* The hidden state after the last layer: embedded (vocabulary-parallel,
 * so summed over TP) or handed over by the previous stage, then every
 * layer of this stage. */
static int model_layers(rlModel *m, const rlBatch *b, rlError *err) {
    const rlModelConfig *c = &m->cfg;
    const rlShard *s = &m->shard;
    rlBackend *be = m->be;
    const rlBackendOps *op = be->ops;
    int T = b->n_tokens, D = c->hidden_size, hd = c->head_dim;
    float eps = (float)c->rms_norm_eps;
    size_t act_bytes = (size_t)T * D * rl_dtype_size(be->act_dtype);

    if (s->pp_rank == 0) {
        op->embed(be, m->resid, m->embed, s->vocab0, s->n_vocab, D);
        if (model_all_reduce(m, m->resid, (size_t)T * D, err) != 0) return -1;
    } else if (m->pp->ops->recv(m->pp, m->resid, act_bytes, s->pp_rank - 1, err) != 0) {
        return -1;
    }

    int qkv_width = (s->n_q_heads + 2 * s->n_kv_heads) * hd;
    const unsigned skip = b->n_tokens == b->n_seqs ? m->leave_out : 0;
    for (int l = 0; l < s->n_layers; l++) {
        const rlLayer *w = &m->layers[l];
        /* x = rmsnorm(h); the previous layer's MLP output joins h here. */
        if (l == 0)
            op->rmsnorm(be, m->x, m->resid, w->ln1, T, D, eps);
        else if (!(skip & RL_LEAVE_NORM))
            op->add_rmsnorm(be, m->resid, m->delta, m->x, w->ln1, T, D, eps);

        /* Attention: this rank's heads, then o_proj over them, summed over TP. */
        if (!(skip & RL_LEAVE_QKV)) LINEAR(m, w, wqkv, m->qkv, m->x, w->bqkv, T, qkv_width, D);
        if (!(skip & RL_LEAVE_ROPE))
            op->rope_kv_store(be, m->qkv, w->q_norm, w->k_norm, eps, l, &m->attn);
        if (!(skip & RL_LEAVE_ATTENTION)) op->attention(be, m->att, m->qkv, l, &m->attn);
        if (!(skip & RL_LEAVE_O))
            LINEAR(m, w, wo, m->delta, m->att, w->bo, T, D, s->n_q_heads * hd);
        if (model_all_reduce(m, m->delta, (size_t)T * D, err) != 0) return -1;

        /* h += attention; x = rmsnorm(h); MLP: down(silu(gate x) * up x). */
        if (!(skip & RL_LEAVE_NORM))
            op->add_rmsnorm(be, m->resid, m->delta, m->x, w->ln2, T, D, eps);
        if (w->router) model_moe(m, w, T, skip);
        else model_mlp(m, w, T, s->n_mlp, skip);
        if (model_all_reduce(m, m->delta, (size_t)T * D, err) != 0) return -1;
    }
    if (s->n_layers > 0) op->add(be, m->resid, m->delta, (size_t)T * D);
    return 0;
}

/* Final norm and LM head only where logits are wanted, for the step's rows
 * row0 .. row0 + n - 1 (fp32 logits, this rank's vocabulary slice). */
static void model_head(rlModel *m, int row0, int n) {
    rlBackend *be = m->be;
    int D = m->cfg.hidden_size;
    be->ops->gather_rows(be, m->rows_x, m->resid, D, row0, n);
    be->ops->rmsnorm(be, m->rows_x, m->rows_x, m->norm, n, D, (float)m->cfg.rms_norm_eps);
    be->ops->matmul_f32(be, m->logits, m->rows_x, m->lm_head, n, m->shard.n_vocab, D);
}

/* Decode steps a backend replays as graphs run padded to their bucket of
 * sequences (rl_batch_bucket: 1, 2, 4, 8, 16, 24, 32, 48 ...), so one capture
 * and one set of GEMM plans serve every batch size in a bucket: continuous
 * batching meets a new size, and would pay a new capture and new plans, at
 * almost every change of the running set.  Padding (rl_batch_pad) stores
 * nothing and its rows' results are dropped.  Returns b itself where nothing
 * is padded, NULL when out of memory. */
static const rlBatch *model_pad_decode(rlModel *m, const rlBatch *b, rlBatch *pad) {
    int n = b->n_seqs, p = rl_batch_bucket(n);
    if (!m->be->ops->graph_run || p == n || b->n_tokens != n || b->n_rows != n ||
        p > m->max_tokens || p > m->max_rows)
        return b;
    for (int s = 0; s < n; s++)
        if (b->seq_start[s + 1] != s + 1) return b;
    if (p > m->pad_out_cap) {
        rlRowResult *o = realloc(m->pad_out, (size_t)p * sizeof *o);
        if (!o) return NULL;
        m->pad_out = o, m->pad_out_cap = p;
    }
    return rl_batch_pad(&m->pad, b, p, pad) ? NULL : pad;
}

/* A one-rank step's device work, as one body a backend may capture. */
typedef struct modelStep {
    rlModel *m;
    const rlBatch *b;
    rlError *err;
    int rc;
} modelStep;

static void model_step_body(void *ctx) {
    modelStep *st = ctx;
    st->rc = model_layers(st->m, st->b, st->err);
    int n = st->b->n_rows;
    if (st->rc == 0 && n > 0 && n <= rl_model_head_rows(st->m->max_rows)) model_head(st->m, 0, n);
}

int rl_model_forward(rlModel *m, const rlBatch *b, rlRowResult *out, rlError *err) {
    const rlShard *s = &m->shard;
    rlBackend *be = m->be;
    const rlBackendOps *op = be->ops;
    int one_rank = s->pp_size == 1 && (!m->tp || m->tp->size == 1);

    if (model_check(m, b, err) != 0) return -1;
    rlBatch padded;
    const rlBatch *run = one_rank ? model_pad_decode(m, b, &padded) : b;
    if (!run) return rl_error(err, RL_EMEMORY, "out of host memory padding a decode step");
    if (op->begin_step(be, run, err) != 0) return -1;
    rlRowResult *results = run == b ? out : m->pad_out;

    if (one_rank) {
        /* No collectives, so nothing in the step waits on the host. */
        modelStep st = {m, run, err, 0};
        if (!op->graph_run) model_step_body(&st);
        else if (op->graph_run(be, model_step_body, &st, m->leave_out, err) != 0) return -1;
        if (st.rc != 0) return -1;
    } else {
        if (model_layers(m, b, err) != 0) return -1;
        if (s->pp_rank != s->pp_size - 1) {
            size_t act_bytes = (size_t)b->n_tokens * m->cfg.hidden_size *
                               rl_dtype_size(be->act_dtype);
            if (op->sync(be, err) != 0) return -1;
            return m->pp->ops->send(m->pp, m->resid, act_bytes, s->pp_rank + 1, err);
        }
        if (b->n_rows > 0 && b->n_rows <= rl_model_head_rows(m->max_rows))
            model_head(m, 0, b->n_rows);
    }
    /* More rows than the head's buffers hold (prompt logprobs over a whole
     * chunk of prompt): the head and the sampler take them a slice at a
     * time, so no step holds all its rows' logits at once. */
    int H = rl_model_head_rows(m->max_rows);
    for (int r0 = 0; r0 < run->n_rows; r0 += H) {
        int n = run->n_rows - r0 < H ? run->n_rows - r0 : H;
        if (run->n_rows > H) model_head(m, r0, n);
        float *logits = model_full_logits(m, n, err);
        if (!logits || op->sample(be, logits, m->cfg.vocab_size, r0, n, results + r0, err) != 0)
            return -1;
    }
    if (run->n_rows > 0 && results != out) memcpy(out, results, (size_t)b->n_rows * sizeof *out);
    return op->sync(be, err);
}

int rl_model_leave_out_parse(const char *list, unsigned *mask, rlError *err) {
    static const struct {
        const char *name;
        unsigned bit;
    } kinds[] = {{"norm", RL_LEAVE_NORM},        {"qkv_proj", RL_LEAVE_QKV},
                 {"rope", RL_LEAVE_ROPE},        {"attention", RL_LEAVE_ATTENTION},
                 {"o_proj", RL_LEAVE_O},         {"gate_up_proj", RL_LEAVE_GATE_UP},
                 {"swiglu", RL_LEAVE_SWIGLU},    {"down_proj", RL_LEAVE_DOWN},
                 {"router", RL_LEAVE_ROUTER},    {"experts", RL_LEAVE_EXPERTS}};
    const size_t n_kinds = sizeof kinds / sizeof *kinds;
    *mask = 0;
    for (const char *p = list; *p;) {
        size_t len = strcspn(p, ",");
        size_t i = 0;
        while (i < n_kinds && (strlen(kinds[i].name) != len || strncmp(p, kinds[i].name, len))) i++;
        if (i == n_kinds) {
            char names[160] = "";
            for (size_t j = 0; j < n_kinds; j++)
                snprintf(names + strlen(names), sizeof names - strlen(names), "%s%s", j ? ", " : "",
                         kinds[j].name);
            return rl_error(err, RL_EUSAGE, "unknown kind '%.*s' (kinds: %s)", (int)len, p,
                            names);
        }
        *mask |= kinds[i].bit;
        p += len;
        if (*p == ',') p++;
    }
    return 0;
}
