/* qwen2_ref.h: a plain forward of the Qwen2 / Qwen3 / Llama families and
 * the Qwen2-MoE / Qwen3-MoE mixtures of experts in double precision, one
 * token at a time, written from Hugging Face's modeling_qwen2,
 * modeling_qwen3, modeling_llama, modeling_qwen2_moe, modeling_qwen3_moe and
 * modeling_rope_utils and
 * sharing no code with kernels/ (only the bf16/fp16 widening of half.h and
 * the switches of rlModelConfig: biases, q/k norms, rope scaling).  It is
 * the oracle for checkpoints that have no Hugging Face reference.json:
 * test_variants.c first checks it against every fixture's reference.json,
 * then checks the engine against it.  Slow on purpose: no batching, no paged
 * cache, no BLAS.  Header-only because every tests/test_*.c is its own
 * program. */
#ifndef RL_TEST_QWEN2_REF_H
#define RL_TEST_QWEN2_REF_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/config.h"
#include "kernels/half.h"
#include "kernels/model.h"

typedef struct refLayer {
    float *in_norm, *post_norm;
    float *q, *q_bias, *k, *k_bias, *v, *v_bias, *o, *o_bias;
    float *q_norm, *k_norm;
    float *gate, *gate_bias, *up, *up_bias, *down, *down_bias;
    /* An MoE layer: the router, each expert's MLP ([expert] of gate, up,
     * down) and Qwen2-MoE's shared expert (gate, up, down above) and its gate. */
    float *router, **e_gate, **e_up, **e_down, *shared_gate;
} refLayer;

typedef struct refModel {
    rlModelConfig cfg;
    float *embed, *head, *norm;          /* head is embed when tied */
    refLayer *layers;
    int max_len;
    double *k_cache, *v_cache;           /* [layer][position][kv_heads * head_dim] */
    double *x, *h, *q, *k, *v, *att, *o, *gate, *up, *scores, *moe_out, *router_p;
    double *inv_freq, rope_scale;        /* [head_dim / 2], cos/sin factor */
} refModel;

/* Copies tensor name (n elements) out of lookup as floats into *out. */
static inline int ref_tensor(rlTensorLookup lookup, void *ctx, const char *name, size_t n,
                             float **out, rlError *err) {
    rlTensorView t = {0};   /* nr 0: the whole tensor */
    if (lookup(ctx, name, &t, err) != 0) return -1;
    size_t have = (size_t)t.shape[0] * (size_t)(t.ndim == 2 ? t.shape[1] : 1);
    float *f = have == n ? malloc(n * sizeof(float)) : NULL;
    if (!f) {
        snprintf(err->msg, sizeof(err->msg), "%s: %zu elements, the reference expects %zu", name,
                 have, n);
        free(t.owned);
        return -1;
    }
    for (size_t i = 0; i < n; i++) {
        uint16_t h;
        if (t.dtype == RL_F32) {
            memcpy(&f[i], (const char *)t.data + 4 * i, 4);
            continue;
        }
        memcpy(&h, (const char *)t.data + 2 * i, 2);
        f[i] = t.dtype == RL_BF16 ? rl_bf16_to_f32(h) : rl_f16_to_f32(h);
    }
    free(t.owned);
    *out = f;
    return 0;
}

static inline void ref_free(refModel *m) {
    for (int l = 0; m->layers && l < m->cfg.num_layers; l++) {
        refLayer *y = &m->layers[l];
        float *all[] = {y->in_norm, y->post_norm, y->q, y->q_bias, y->k, y->k_bias, y->v,
                        y->v_bias, y->o, y->o_bias, y->q_norm, y->k_norm, y->gate,
                        y->gate_bias, y->up, y->up_bias, y->down, y->down_bias};
        for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++) free(all[i]);
        for (int e = 0; y->e_gate && e < m->cfg.num_experts; e++)
            free(y->e_gate[e]), free(y->e_up[e]), free(y->e_down[e]);
        free(y->e_gate), free(y->e_up), free(y->e_down), free(y->router), free(y->shared_gate);
    }
    if (m->head != m->embed) free(m->head);
    free(m->embed), free(m->norm), free(m->layers);
    double *bufs[] = {m->k_cache, m->v_cache, m->x, m->h, m->q, m->k, m->v, m->att, m->o,
                      m->gate, m->up, m->scores, m->inv_freq, m->moe_out, m->router_p};
    for (size_t i = 0; i < sizeof(bufs) / sizeof(bufs[0]); i++) free(bufs[i]);
    memset(m, 0, sizeof(*m));
}

/* Inverse frequencies and the cos/sin factor, straight from Hugging Face's
 * _compute_default / linear_scaling / yarn / llama3 _parameters. */
static inline void ref_rope_table(const rlModelConfig *c, double *inv, double *scale) {
    const rlRopeScaling *r = &c->rope_scaling;
    int dim = c->head_dim;
    double base = c->rope_theta, low = 0, high = 0;
    *scale = 1;
    if (r->type == RL_ROPE_YARN) {
        low = dim * log(r->original_max_position / (r->beta_fast * 2 * M_PI)) / (2 * log(base));
        high = dim * log(r->original_max_position / (r->beta_slow * 2 * M_PI)) / (2 * log(base));
        if (r->truncate) low = floor(low), high = ceil(high);
        low = fmax(low, 0), high = fmin(high, dim - 1);
        if (low == high) high += 0.001;
        *scale = r->attention_factor;
    }
    for (int i = 0; i < dim / 2; i++) {
        double pos_freq = pow(base, (2.0 * i) / dim), f = 1 / pos_freq;
        if (r->type == RL_ROPE_LINEAR) {
            f /= r->factor;
        } else if (r->type == RL_ROPE_YARN) {
            double extrapolation_factor = 1 - fmin(fmax((i - low) / (high - low), 0), 1);
            f = 1 / (r->factor * pos_freq) * (1 - extrapolation_factor) +
                1 / pos_freq * extrapolation_factor;
        } else if (r->type == RL_ROPE_LLAMA3) {
            double old = r->original_max_position, wavelen = 2 * M_PI / f;
            double scaled = wavelen > old / r->low_freq_factor ? f / r->factor : f;
            double smooth = (old / wavelen - r->low_freq_factor) /
                            (r->high_freq_factor - r->low_freq_factor);
            int medium = !(wavelen < old / r->high_freq_factor) &&
                         !(wavelen > old / r->low_freq_factor);
            f = medium ? (1 - smooth) * scaled / r->factor + smooth * scaled : scaled;
        }
        inv[i] = f;
    }
}

/* Every weight of cfg's model through lookup; room for max_len positions. */
static inline int ref_load(refModel *m, const rlModelConfig *cfg, rlTensorLookup lookup,
                           void *ctx, int max_len, rlError *err) {
    memset(m, 0, sizeof(*m));
    m->cfg = *cfg;
    m->max_len = max_len;
    size_t H = (size_t)cfg->hidden_size, I = (size_t)cfg->intermediate_size;
    size_t Q = (size_t)cfg->num_heads * (size_t)cfg->head_dim;
    size_t KV = (size_t)cfg->num_kv_heads * (size_t)cfg->head_dim;
    size_t V = (size_t)cfg->vocab_size, L = (size_t)cfg->num_layers;
    size_t E = (size_t)cfg->num_experts, ME = (size_t)cfg->moe_intermediate_size;
    size_t SE = (size_t)cfg->shared_expert_size;
    size_t widest = I > ME ? I : ME;
    widest = widest > SE ? widest : SE;
    m->layers = calloc(L, sizeof(refLayer));
    m->k_cache = calloc(L * (size_t)max_len * KV, sizeof(double));
    m->v_cache = calloc(L * (size_t)max_len * KV, sizeof(double));
    m->x = calloc(H, sizeof(double)), m->h = calloc(H, sizeof(double));
    m->q = calloc(Q, sizeof(double)), m->att = calloc(Q, sizeof(double));
    m->k = calloc(KV, sizeof(double)), m->v = calloc(KV, sizeof(double));
    m->o = calloc(H, sizeof(double)), m->scores = calloc((size_t)max_len, sizeof(double));
    m->gate = calloc(widest, sizeof(double)), m->up = calloc(widest, sizeof(double));
    m->moe_out = calloc(H, sizeof(double)), m->router_p = calloc(E + 1, sizeof(double));
    m->inv_freq = calloc((size_t)cfg->head_dim / 2, sizeof(double));
    if (!m->layers || !m->k_cache || !m->v_cache || !m->x || !m->h || !m->q || !m->att ||
        !m->k || !m->v || !m->o || !m->scores || !m->gate || !m->up || !m->inv_freq ||
        !m->moe_out || !m->router_p)
        goto fail;
    ref_rope_table(cfg, m->inv_freq, &m->rope_scale);
    size_t D = (size_t)cfg->head_dim;
    if (ref_tensor(lookup, ctx, "model.embed_tokens.weight", V * H, &m->embed, err) ||
        ref_tensor(lookup, ctx, "model.norm.weight", H, &m->norm, err))
        goto fail;
    if (cfg->tie_word_embeddings) m->head = m->embed;
    else if (ref_tensor(lookup, ctx, "lm_head.weight", V * H, &m->head, err)) goto fail;
    for (size_t l = 0; l < L; l++) {
        refLayer *y = &m->layers[l];
        int qkv_b = cfg->qkv_bias, o_b = cfg->o_bias, mlp_b = cfg->mlp_bias, qk = cfg->qk_norm;
        int moe = rl_layer_is_moe(cfg, (int)l), dense = !moe, shared = moe && SE > 0;
        size_t MI = moe ? SE : I;   /* the MLP of a dense layer, or the shared expert */
        struct { const char *name; size_t n; float **out; int present; } w[] = {
            {"input_layernorm.weight", H, &y->in_norm, 1},
            {"post_attention_layernorm.weight", H, &y->post_norm, 1},
            {"self_attn.q_proj.weight", Q * H, &y->q, 1},
            {"self_attn.q_proj.bias", Q, &y->q_bias, qkv_b},
            {"self_attn.k_proj.weight", KV * H, &y->k, 1},
            {"self_attn.k_proj.bias", KV, &y->k_bias, qkv_b},
            {"self_attn.v_proj.weight", KV * H, &y->v, 1},
            {"self_attn.v_proj.bias", KV, &y->v_bias, qkv_b},
            {"self_attn.q_norm.weight", D, &y->q_norm, qk},
            {"self_attn.k_norm.weight", D, &y->k_norm, qk},
            {"self_attn.o_proj.weight", H * Q, &y->o, 1},
            {"self_attn.o_proj.bias", H, &y->o_bias, o_b},
            {"mlp.gate_proj.weight", MI * H, &y->gate, dense},
            {"mlp.gate_proj.bias", MI, &y->gate_bias, dense && mlp_b},
            {"mlp.up_proj.weight", MI * H, &y->up, dense},
            {"mlp.up_proj.bias", MI, &y->up_bias, dense && mlp_b},
            {"mlp.down_proj.weight", H * MI, &y->down, dense},
            {"mlp.down_proj.bias", H, &y->down_bias, dense && mlp_b},
            {"mlp.shared_expert.gate_proj.weight", MI * H, &y->gate, shared},
            {"mlp.shared_expert.up_proj.weight", MI * H, &y->up, shared},
            {"mlp.shared_expert.down_proj.weight", H * MI, &y->down, shared},
            {"mlp.shared_expert_gate.weight", H, &y->shared_gate, shared},
            {"mlp.gate.weight", E * H, &y->router, moe},
        };
        for (size_t i = 0; i < sizeof(w) / sizeof(w[0]); i++) {
            if (!w[i].present) continue;
            char name[160];
            snprintf(name, sizeof(name), "model.layers.%zu.%s", l, w[i].name);
            if (ref_tensor(lookup, ctx, name, w[i].n, w[i].out, err)) goto fail;
        }
        if (!moe) continue;
        y->e_gate = calloc(E, sizeof(float *)), y->e_up = calloc(E, sizeof(float *));
        y->e_down = calloc(E, sizeof(float *));
        if (!y->e_gate || !y->e_up || !y->e_down) goto fail;
        for (size_t e = 0; e < E; e++) {
            const char *part[] = {"gate_proj", "up_proj", "down_proj"};
            float **dst[] = {&y->e_gate[e], &y->e_up[e], &y->e_down[e]};
            for (int i = 0; i < 3; i++) {
                char name[160];
                snprintf(name, sizeof(name), "model.layers.%zu.mlp.experts.%zu.%s.weight", l, e,
                         part[i]);
                if (ref_tensor(lookup, ctx, name, ME * H, dst[i], err)) goto fail;
            }
        }
    }
    return 0;
fail:
    if (!err->msg[0]) snprintf(err->msg, sizeof(err->msg), "out of memory");
    ref_free(m);
    return -1;
}

/* y[rows] = w[rows][cols] x (+ bias): a Linear layer, HF's [out, in] layout. */
static inline void ref_linear(const float *w, const float *bias, const double *x, size_t rows,
                              size_t cols, double *y) {
    for (size_t r = 0; r < rows; r++) {
        double s = bias ? bias[r] : 0;
        for (size_t c = 0; c < cols; c++) s += (double)w[r * cols + c] * x[c];
        y[r] = s;
    }
}

static inline void ref_rmsnorm(const double *x, const float *w, size_t n, double eps, double *y) {
    double ss = 0;
    for (size_t i = 0; i < n; i++) ss += x[i] * x[i];
    double scale = 1 / sqrt(ss / (double)n + eps);
    for (size_t i = 0; i < n; i++) y[i] = x[i] * scale * w[i];
}

/* Rotate-half RoPE of one head: dimension i pairs with i + d/2; cos and
 * sin times scale (YaRN's attention factor). */
static inline void ref_rope(double *v, int d, int pos, const double *inv_freq, double scale) {
    for (int i = 0; i < d / 2; i++) {
        double angle = pos * inv_freq[i], c = cos(angle) * scale, s = sin(angle) * scale;
        double a = v[i], b = v[i + d / 2];
        v[i] = a * c - b * s;
        v[i + d / 2] = b * c + a * s;
    }
}

/* out[H] = down(silu(gate x) * up x) for an MLP n wide (biases may be NULL). */
static inline void ref_mlp(refModel *m, const float *gate, const float *gate_bias,
                           const float *up, const float *up_bias, const float *down,
                           const float *down_bias, size_t n, const double *x, double *out) {
    size_t H = (size_t)m->cfg.hidden_size;
    ref_linear(gate, gate_bias, x, n, H, m->gate);
    ref_linear(up, up_bias, x, n, H, m->up);
    for (size_t i = 0; i < n; i++) m->gate[i] = m->gate[i] / (1 + exp(-m->gate[i])) * m->up[i];
    ref_linear(down, down_bias, m->gate, H, n, out);
}

/* Qwen2MoeSparseMoeBlock / Qwen3MoeSparseMoeBlock on x: softmax of the
 * router logits over every expert, the top k (ties to the lower id),
 * renormalised when norm_topk_prob; their MLPs weighted and summed, plus
 * sigmoid(shared_expert_gate x) times the shared expert. */
static inline void ref_moe(refModel *m, const refLayer *y, const double *x, double *out) {
    const rlModelConfig *c = &m->cfg;
    size_t H = (size_t)c->hidden_size, E = (size_t)c->num_experts;
    double *p = m->router_p, max = -INFINITY, sum = 0;
    ref_linear(y->router, NULL, x, E, H, p);
    for (size_t e = 0; e < E; e++) max = fmax(max, p[e]);
    for (size_t e = 0; e < E; e++) sum += p[e] = exp(p[e] - max);
    for (size_t e = 0; e < E; e++) p[e] /= sum;
    int chosen[64], k = c->num_experts_per_tok;
    double w[64], total = 0;
    for (int j = 0; j < k; j++) {
        int best = -1;
        for (size_t e = 0; e < E; e++) {
            int taken = 0;
            for (int i = 0; i < j; i++) taken |= chosen[i] == (int)e;
            if (!taken && (best < 0 || p[e] > p[best])) best = (int)e;
        }
        chosen[j] = best, w[j] = p[best], total += p[best];
    }
    for (size_t i = 0; i < H; i++) out[i] = 0;
    for (int j = 0; j < k; j++) {
        ref_mlp(m, y->e_gate[chosen[j]], NULL, y->e_up[chosen[j]], NULL, y->e_down[chosen[j]],
                NULL, (size_t)c->moe_intermediate_size, x, m->moe_out);
        double wj = c->norm_topk_prob ? w[j] / total : w[j];
        for (size_t i = 0; i < H; i++) out[i] += wj * m->moe_out[i];
    }
    if (!y->shared_gate) return;
    ref_mlp(m, y->gate, NULL, y->up, NULL, y->down, NULL, (size_t)c->shared_expert_size, x,
            m->moe_out);
    double g = 0;
    for (size_t i = 0; i < H; i++) g += (double)y->shared_gate[i] * x[i];
    g = 1 / (1 + exp(-g));
    for (size_t i = 0; i < H; i++) out[i] += g * m->moe_out[i];
}

/* Token at position pos (every earlier position already stepped): writes
 * the vocabulary's logits for the next token. */
static inline void ref_step(refModel *m, int token, int pos, double *logits) {
    const rlModelConfig *c = &m->cfg;
    size_t H = (size_t)c->hidden_size, I = (size_t)c->intermediate_size;
    int d = c->head_dim, group = c->num_heads / c->num_kv_heads;
    size_t Q = (size_t)c->num_heads * (size_t)d, KV = (size_t)c->num_kv_heads * (size_t)d;
    for (size_t i = 0; i < H; i++) m->x[i] = m->embed[(size_t)token * H + i];
    for (int l = 0; l < c->num_layers; l++) {
        refLayer *y = &m->layers[l];
        double *kc = m->k_cache + (size_t)l * (size_t)m->max_len * KV;
        double *vc = m->v_cache + (size_t)l * (size_t)m->max_len * KV;
        ref_rmsnorm(m->x, y->in_norm, H, c->rms_norm_eps, m->h);
        ref_linear(y->q, y->q_bias, m->h, Q, H, m->q);
        ref_linear(y->k, y->k_bias, m->h, KV, H, kc + (size_t)pos * KV);
        ref_linear(y->v, y->v_bias, m->h, KV, H, vc + (size_t)pos * KV);
        /* Qwen3: RMSNorm over each head of q and k, before RoPE. */
        for (int h = 0; y->q_norm && h < c->num_heads; h++)
            ref_rmsnorm(m->q + (size_t)h * d, y->q_norm, (size_t)d, c->rms_norm_eps,
                        m->q + (size_t)h * d);
        for (int h = 0; y->k_norm && h < c->num_kv_heads; h++)
            ref_rmsnorm(kc + (size_t)pos * KV + (size_t)h * d, y->k_norm, (size_t)d,
                        c->rms_norm_eps, kc + (size_t)pos * KV + (size_t)h * d);
        for (int h = 0; h < c->num_heads; h++)
            ref_rope(m->q + (size_t)h * d, d, pos, m->inv_freq, m->rope_scale);
        for (int h = 0; h < c->num_kv_heads; h++)
            ref_rope(kc + (size_t)pos * KV + (size_t)h * d, d, pos, m->inv_freq, m->rope_scale);
        for (int h = 0; h < c->num_heads; h++) {
            const double *q = m->q + (size_t)h * d;
            size_t kv = (size_t)(h / group) * (size_t)d;
            double max = -INFINITY, sum = 0;
            for (int p = 0; p <= pos; p++) {
                double s = 0;
                for (int i = 0; i < d; i++) s += q[i] * kc[(size_t)p * KV + kv + i];
                m->scores[p] = s / sqrt((double)d);
                if (m->scores[p] > max) max = m->scores[p];
            }
            for (int p = 0; p <= pos; p++) sum += m->scores[p] = exp(m->scores[p] - max);
            double *out = m->att + (size_t)h * d;
            for (int i = 0; i < d; i++) out[i] = 0;
            for (int p = 0; p <= pos; p++)
                for (int i = 0; i < d; i++) out[i] += m->scores[p] / sum * vc[(size_t)p * KV + kv + i];
        }
        ref_linear(y->o, y->o_bias, m->att, H, Q, m->o);
        for (size_t i = 0; i < H; i++) m->x[i] += m->o[i];
        ref_rmsnorm(m->x, y->post_norm, H, c->rms_norm_eps, m->h);
        if (y->router)
            ref_moe(m, y, m->h, m->o);
        else
            ref_mlp(m, y->gate, y->gate_bias, y->up, y->up_bias, y->down, y->down_bias, I, m->h,
                    m->o);
        for (size_t i = 0; i < H; i++) m->x[i] += m->o[i];
    }
    ref_rmsnorm(m->x, m->norm, H, c->rms_norm_eps, m->h);
    ref_linear(m->head, NULL, m->h, (size_t)c->vocab_size, H, logits);
}

/* log-softmax of logits[n] in place. */
static inline void ref_log_softmax(double *logits, int n) {
    double max = -INFINITY, sum = 0;
    for (int i = 0; i < n; i++) max = fmax(max, logits[i]);
    for (int i = 0; i < n; i++) sum += exp(logits[i] - max);
    double lse = max + log(sum);
    for (int i = 0; i < n; i++) logits[i] -= lse;
}

/* What reference.json holds for one prompt, computed here. */
typedef struct refResult {
    double *prompt_lp;        /* [n]: entry i is token i's logprob, i >= 1 */
    double *last_lp;          /* [vocab]: log-softmax at the last prompt position */
    int greedy[64];
    double margin[64];        /* top-1 minus top-2 logit at each greedy step */
} refResult;

static inline void ref_result_free(refResult *r) {
    free(r->prompt_lp), free(r->last_lp);
    memset(r, 0, sizeof(*r));
}

/* Runs ids[n] then n_gen greedy tokens (n + n_gen <= max_len, n_gen <= 64). */
static inline int ref_run(refModel *m, const int *ids, int n, int n_gen, refResult *r) {
    int V = m->cfg.vocab_size;
    double *logits = malloc((size_t)V * sizeof(double));
    r->prompt_lp = calloc((size_t)n, sizeof(double));
    r->last_lp = malloc((size_t)V * sizeof(double));
    if (!logits || !r->prompt_lp || !r->last_lp || n + n_gen > m->max_len || n_gen > 64) {
        free(logits);
        ref_result_free(r);
        return -1;
    }
    int token = ids[0];
    for (int p = 0; p < n + n_gen - 1; p++) {
        ref_step(m, token, p, logits);
        if (p >= n - 1) {
            int best = 0, second = -1;
            for (int i = 1; i < V; i++) {
                if (logits[i] > logits[best]) second = best, best = i;
                else if (second < 0 || logits[i] > logits[second]) second = i;
            }
            r->greedy[p - n + 1] = best;
            r->margin[p - n + 1] = logits[best] - logits[second];
        }
        ref_log_softmax(logits, V);
        if (p < n - 1) r->prompt_lp[p + 1] = logits[ids[p + 1]];
        if (p == n - 1) memcpy(r->last_lp, logits, (size_t)V * sizeof(double));
        token = p + 1 < n ? ids[p + 1] : r->greedy[p - n + 1];
    }
    free(logits);
    return 0;
}

#endif
