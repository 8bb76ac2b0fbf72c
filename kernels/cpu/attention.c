/* attention.c: rotary embedding, the paged KV cache and causal attention on
 * the CPU.
 *
 * RoPE follows Hugging Face's rotate-half layout: dimension i pairs with
 * i + head_dim/2 (not with i + 1 as in the original paper's interleaving),
 * at angle pos * inv_freq[i] (rope_init's table, kernels/rope.c), cos and
 * sin computed in double once per step.  Qwen3's q/k norms run here too,
 * on each head just before it turns, as Hugging Face orders them.
 * The cache is paged: token j of a sequence lives in slot
 * block_table[j / block_size] * block_size + j % block_size, so sequences
 * grow block by block and share nothing unless the scheduler says so.
 * Attention is plain two-pass softmax per query (scores, then the weighted
 * sum of values): each new token attends to every cached position up to its
 * own, which makes a prompt chunk and a decode token the same case. */
#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/cpu.h"

int cpu_rope_init(rlBackend *be, const double *inv_freq, int n, double scale, rlError *err) {
    cpuBackend *c = be->impl;
    double *t = malloc((size_t)(n > 0 ? n : 1) * sizeof(double));
    if (!t) return rl_error(err, RL_EMEMORY, "out of host memory for the rotary frequencies");
    memcpy(t, inv_freq, (size_t)n * sizeof(double));
    free(c->rope_inv_freq);
    c->rope_inv_freq = t, c->rope_n = n, c->rope_scale = scale;
    return 0;
}

static int cpu_rope_tables(cpuBackend *c, const rlAttnShape *s) {
    const rlBatch *b = c->b;
    int half = s->head_dim / 2;
    size_t n = (size_t)b->n_tokens * half;
    if (n > c->rope_cap) {
        float *cs = realloc(c->rope_cos, n * sizeof(float));
        if (cs) c->rope_cos = cs;
        float *sn = realloc(c->rope_sin, n * sizeof(float));
        if (sn) c->rope_sin = sn;
        if (!cs || !sn) return -1;
        c->rope_cap = n;
    }
    for (int i = 0; i < half; i++) {
        for (int t = 0; t < b->n_tokens; t++) {
            double a = b->positions[t] * c->rope_inv_freq[i];
            c->rope_cos[(size_t)t * half + i] = (float)(cos(a) * c->rope_scale);
            c->rope_sin[(size_t)t * half + i] = (float)(sin(a) * c->rope_scale);
        }
    }
    c->rope_ready = 1;
    return 0;
}

static int cpu_shape_ok(cpuBackend *c, int layer, const rlAttnShape *s) {
    if (c->failed) return 0;
    if (!c->b || layer < 0 || layer >= c->n_layers || s->n_kv != c->n_kv ||
        s->head_dim != c->head_dim || c->rope_n != s->head_dim / 2) {
        cpu_fail(c, RL_EINTERNAL,
                 "attention shape (layer %d, %d KV heads of %d) does not match the KV cache "
                 "(%d layers, %d KV heads of %d) and rotary table (%d frequencies), or no "
                 "step was begun",
                 layer, s->n_kv, s->head_dim, c->n_layers, c->n_kv, c->head_dim, c->rope_n);
        return 0;
    }
    return 1;
}

void cpu_rope_kv_store(rlBackend *be, void *qkv, const void *q_norm, const void *k_norm,
                       float eps, int layer, const rlAttnShape *s) {
    cpuBackend *c = be->impl;
    if (s->n_q == 0 || !cpu_shape_ok(c, layer, s)) return;
    if (!c->rope_ready && cpu_rope_tables(c, s) != 0) {
        cpu_fail(c, RL_EMEMORY, "out of host memory for the rotary tables");
        return;
    }
    const rlBatch *b = c->b;
    int hd = s->head_dim, half = hd / 2, width = (s->n_q + 2 * s->n_kv) * hd;
    size_t kv_row = (size_t)s->n_kv * hd;
    float *kc = cpu_k(c, layer), *vc = cpu_v(c, layer);
    for (int t = 0; t < b->n_tokens; t++) {
        float *row = (float *)qkv + (size_t)t * width;
        const float *cs = c->rope_cos + (size_t)t * half, *sn = c->rope_sin + (size_t)t * half;
        for (int h = 0; h < s->n_q + s->n_kv; h++) {     /* q heads, then k heads */
            float *x = row + (size_t)h * hd;
            const float *norm = h < s->n_q ? q_norm : k_norm;
            if (norm) cpu_norm_row(x, x, norm, hd, eps);
            for (int i = 0; i < half; i++) {
                float x1 = x[i], x2 = x[i + half];
                x[i] = x1 * cs[i] - x2 * sn[i];
                x[i + half] = x2 * cs[i] + x1 * sn[i];
            }
        }
        if (b->slots[t] < 0) continue;     /* padding */
        size_t slot = (size_t)b->slots[t];
        memcpy(kc + slot * kv_row, row + (size_t)s->n_q * hd, kv_row * sizeof(float));
        memcpy(vc + slot * kv_row, row + (size_t)(s->n_q + s->n_kv) * hd, kv_row * sizeof(float));
    }
}

/* Eight partial sums the compiler can keep in one vector register: a plain
 * float reduction may not be reordered, so it would stay scalar. */
static float attn_dot(const float *a, const float *b, int n) {
    float part[8] = {0};
    int i = 0;
    for (; i + 8 <= n; i += 8)
        for (int l = 0; l < 8; l++) part[l] += a[i + l] * b[i + l];
    float dot = 0;
    for (; i < n; i++) dot += a[i] * b[i];
    for (int l = 0; l < 8; l++) dot += part[l];
    return dot;
}

/* acc += w * v; restrict lets the compiler vectorise without alias checks. */
static void attn_axpy(float *restrict acc, const float *restrict v, float w, int n) {
    for (int i = 0; i < n; i++) acc[i] += w * v[i];
}

/* Queries of one sequence are cut into chunks so a long prompt spreads over
 * the threads as well as many short sequences do. */
#define ATTN_CHUNK 16

typedef struct attnJob {
    cpuBackend *c;
    const rlAttnShape *s;
    float *out;
    const float *qkv;
    const float *kc, *vc;
    int n_chunks;
    int *chunk_seq, *chunk_t0;   /* [n_chunks] */
    atomic_int oom;
} attnJob;

static void attn_item(void *ctx, int item) {
    attnJob *j = ctx;
    const rlBatch *b = j->c->b;
    const rlAttnShape *s = j->s;
    int chunk = item / s->n_q, h = item % s->n_q;
    int seq = j->chunk_seq[chunk], t0 = j->chunk_t0[chunk];
    int t1 = t0 + ATTN_CHUNK < b->seq_start[seq + 1] ? t0 + ATTN_CHUNK : b->seq_start[seq + 1];
    int hd = s->head_dim, bs = j->c->block_size;
    int width = (s->n_q + 2 * s->n_kv) * hd;
    int kvh = (s->q_head0 + h) / s->group - s->kv_head0;
    size_t kv_row = (size_t)s->n_kv * hd;
    const int32_t *bt = b->block_tables + (size_t)seq * b->max_blocks;
    float scale = 1.0f / sqrtf((float)hd);

    int max_pos = 0;
    for (int t = t0; t < t1; t++)
        if (b->positions[t] > max_pos) max_pos = b->positions[t];
    float *score = malloc(((size_t)max_pos + 1) * sizeof(float));
    float *acc = malloc((size_t)hd * sizeof(float));
    if (!score || !acc) {
        atomic_store(&j->oom, 1);
        free(score);
        free(acc);
        return;
    }
    for (int t = t0; t < t1; t++) {
        const float *q = j->qkv + (size_t)t * width + (size_t)h * hd;
        int n = b->positions[t] + 1;
        float max = -INFINITY;
        for (int p = 0; p < n; p++) {
            size_t slot = (size_t)bt[p / bs] * bs + p % bs;
            const float *k = j->kc + slot * kv_row + (size_t)kvh * hd;
            score[p] = attn_dot(q, k, hd) * scale;
            if (score[p] > max) max = score[p];
        }
        float sum = 0;
        for (int p = 0; p < n; p++) sum += score[p] = expf(score[p] - max);
        memset(acc, 0, (size_t)hd * sizeof(float));
        for (int p = 0; p < n; p++) {
            size_t slot = (size_t)bt[p / bs] * bs + p % bs;
            const float *v = j->vc + slot * kv_row + (size_t)kvh * hd;
            attn_axpy(acc, v, score[p], hd);
        }
        float *o = j->out + (size_t)t * s->n_q * hd + (size_t)h * hd;
        for (int i = 0; i < hd; i++) o[i] = acc[i] / sum;
    }
    free(score);
    free(acc);
}

void cpu_attention(rlBackend *be, void *out, const void *qkv, int layer, const rlAttnShape *s) {
    cpuBackend *c = be->impl;
    if (s->n_q == 0 || !cpu_shape_ok(c, layer, s)) return;
    const rlBatch *b = c->b;
    int max_chunks = b->n_tokens / ATTN_CHUNK + b->n_seqs;
    attnJob j = {.c = c, .s = s, .out = out, .qkv = qkv, .kc = cpu_k(c, layer),
                 .vc = cpu_v(c, layer)};
    j.chunk_seq = malloc(((size_t)max_chunks + 1) * sizeof(int));
    j.chunk_t0 = malloc(((size_t)max_chunks + 1) * sizeof(int));
    if (!j.chunk_seq || !j.chunk_t0) goto oom;
    for (int seq = 0; seq < b->n_seqs; seq++)
        for (int t = b->seq_start[seq]; t < b->seq_start[seq + 1]; t += ATTN_CHUNK)
            j.chunk_seq[j.n_chunks] = seq, j.chunk_t0[j.n_chunks++] = t;
    atomic_init(&j.oom, 0);
    cpu_pool_run(c->pool, j.n_chunks * s->n_q, attn_item, &j);
    if (atomic_load(&j.oom)) goto oom;
    free(j.chunk_seq);
    free(j.chunk_t0);
    return;
oom:
    free(j.chunk_seq);
    free(j.chunk_t0);
    cpu_fail(c, RL_EMEMORY, "out of host memory for attention scratch space");
}
