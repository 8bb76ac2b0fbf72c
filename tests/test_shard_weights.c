/* test_shard_weights.c: every weight element, as the loader really places
 * it, is owned exactly once or replicated where the design says.
 *
 * tests/test_shard.c checks the shard plan's ranges; this checks what
 * rl_model_init does with them.  Each layout's ranks are loaded on CPU
 * backends with shared-memory communicators from a tensor source whose
 * every element holds its own index in the whole model, so the values read
 * back from a rank's buffers say exactly which elements it holds.  Each rank
 * must hold only elements its shard names, none twice, as many as
 * rl_model_weight_bytes reports; over all ranks, every element is held once,
 * except the replicas of the design: RMSNorm weights (Qwen3's q/k norms
 * too) on every TP rank of their stage, a KV head's rows on every TP rank
 * whose query heads read it, and a tied embedding also on the last stage
 * when it is not the first.  A bias after a row-parallel product (o_proj,
 * down_proj) is held by TP rank 0 alone.  In a mixture of experts, every
 * routed expert and the shared expert are cut by columns as the MLP is, and
 * the router and the shared expert's gate are on every TP rank.
 *
 * Layouts TP 1..8 x PP 1..4 (as far as the layers allow), for every fixture
 * model at its real shape (and llama-tiny with every bias switched on) and for every config in fixtures/configs with
 * its heads, KV heads, head size, MLP width, vocabulary and tying kept, the
 * hidden size (never split) cut to 8 and the layers to 4, so that the whole
 * model stays under 2^24 elements, each exact as an fp32 value. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/comm.h"
#include "kernels/model.h"
#include "kernels/shard.h"
#include "tests/fixture_configs.h"

#define MAX_TP 8
#define MAX_PP 4
#define MAX_TENSORS 1024
#define EXACT_LIMIT (1 << 24)   /* integers up to here are exact in fp32 */

typedef enum tKind {
    K_EMBED, K_LM_HEAD, K_NORM, K_LN, K_Q, K_KV, K_O, K_GATE_UP, K_DOWN, K_ONCE,
    K_REPLICA,                  /* the router and the shared expert's gate: every TP rank */
    K_EXPERT_GATE_UP, K_EXPERT_DOWN, K_SHARED_GATE_UP, K_SHARED_DOWN
} tKind;

typedef struct tTensor {
    char name[128];
    tKind kind;
    int layer;              /* -1 outside the layers */
    int ndim;
    int64_t rows, cols;     /* cols 1 for a vector */
    int64_t base;           /* index of its first element in the whole model */
} tTensor;

typedef struct tModel {
    const char *what;
    rlModelConfig cfg;
    tTensor tensors[MAX_TENSORS];
    int n_tensors;
    int64_t n_elems;
    float *values;          /* element i holds i */
    uint16_t *tensor_of;    /* element -> tensors[] index */
    uint8_t *count;         /* ranks holding each element, per layout */
    int32_t *seen_by;       /* last rank (layout-unique stamp) that held it */
} tModel;

static tKind kind_of(const char *name) {
    static const struct { const char *suffix; tKind kind; } kinds[] = {
        {"embed_tokens.weight", K_EMBED}, {"lm_head.weight", K_LM_HEAD},
        {"model.norm.weight", K_NORM}, {"layernorm.weight", K_LN}, {"_norm.weight", K_LN},
        {"o_proj.bias", K_ONCE}, {"down_proj.bias", K_ONCE}, {"gate_proj.bias", K_GATE_UP},
        {"up_proj.bias", K_GATE_UP},
        {"q_proj.weight", K_Q}, {"q_proj.bias", K_Q}, {"k_proj.weight", K_KV},
        {"k_proj.bias", K_KV}, {"v_proj.weight", K_KV}, {"v_proj.bias", K_KV},
        {"o_proj.weight", K_O}, {"gate_proj.weight", K_GATE_UP},
        {"up_proj.weight", K_GATE_UP}, {"down_proj.weight", K_DOWN},
    };
    size_t n = strlen(name);
    /* A mixture of experts' MLP: the experts and the shared expert are cut
     * like the dense MLP, each over its own columns. */
    int down = strstr(name, "down_proj.weight") != NULL;
    if (strstr(name, ".mlp.experts.")) return down ? K_EXPERT_DOWN : K_EXPERT_GATE_UP;
    if (strstr(name, ".mlp.shared_expert.")) return down ? K_SHARED_DOWN : K_SHARED_GATE_UP;
    if (strstr(name, ".mlp.gate.weight") || strstr(name, ".mlp.shared_expert_gate.weight"))
        return K_REPLICA;
    for (size_t i = 0; i < sizeof(kinds) / sizeof(kinds[0]); i++) {
        size_t m = strlen(kinds[i].suffix);
        if (n >= m && !strcmp(name + n - m, kinds[i].suffix)) return kinds[i].kind;
    }
    fail_msg("tensor %s: no ownership rule for it", name);
    return K_EMBED;
}

static int add_tensor(void *ctx, const char *name, int ndim, const int64_t *shape) {
    tModel *t = ctx;
    if (t->n_tensors == MAX_TENSORS) fail_msg("%s: more than %d tensors", t->what, MAX_TENSORS);
    tTensor *x = &t->tensors[t->n_tensors++];
    snprintf(x->name, sizeof(x->name), "%s", name);
    x->kind = kind_of(name);
    x->layer = -1;
    sscanf(name, "model.layers.%d.", &x->layer);
    x->ndim = ndim;
    x->rows = shape[0];
    x->cols = ndim == 2 ? shape[1] : 1;
    x->base = t->n_elems;
    t->n_elems += x->rows * x->cols;
    return 0;
}

static int lookup(void *ctx, const char *name, rlTensorView *out, rlError *err) {
    tModel *t = ctx;
    for (int i = 0; i < t->n_tensors; i++) {
        const tTensor *x = &t->tensors[i];
        if (strcmp(x->name, name)) continue;
        *out = (rlTensorView){.dtype = RL_F32, .ndim = x->ndim,
                              .shape = {x->rows, x->ndim == 2 ? x->cols : 0},
                              .data = t->values + x->base};
        return 0;
    }
    return rl_error(err, RL_EMODEL, "no tensor %s", name);
}

static void model_setup(tModel *t, const char *what, const rlModelConfig *cfg) {
    memset(t, 0, sizeof(*t));
    t->what = what;
    t->cfg = *cfg;
    rl_model_expected_tensors(cfg, add_tensor, t);
    if (t->n_elems >= EXACT_LIMIT)
        fail_msg("%s: %lld elements, more than fp32 indexes exactly", what, (long long)t->n_elems);
    size_t n = (size_t)t->n_elems;
    t->values = malloc(n * sizeof(float));
    t->tensor_of = malloc(n * sizeof(uint16_t));
    t->count = malloc(n);
    t->seen_by = malloc(n * sizeof(int32_t));
    assert_true(t->values && t->tensor_of && t->count && t->seen_by);
    for (int i = 0; i < t->n_tensors; i++) {
        const tTensor *x = &t->tensors[i];
        for (int64_t e = x->base; e < x->base + x->rows * x->cols; e++) {
            t->values[e] = (float)e;
            t->tensor_of[e] = (uint16_t)i;
        }
    }
}

static void model_teardown(tModel *t) {
    free(t->values);
    free(t->tensor_of);
    free(t->count);
    free(t->seen_by);
}

static int in_range(int64_t v, int start, int n) { return v >= start && v < start + n; }

/* The design: does the rank with shard s hold element (row, col) of x? */
static int rank_holds(const rlModelConfig *c, const rlShard *s, const tTensor *x, int64_t row,
                      int64_t col) {
    int first = s->pp_rank == 0, last = s->pp_rank == s->pp_size - 1;
    int64_t hd = c->head_dim;
    switch (x->kind) {
    case K_EMBED:
        return (first || (last && c->tie_word_embeddings)) && in_range(row, s->vocab0, s->n_vocab);
    case K_LM_HEAD: return last && in_range(row, s->vocab0, s->n_vocab);
    case K_NORM: return last;
    default: break;
    }
    if (!in_range(x->layer, s->layer0, s->n_layers)) return 0;
    switch (x->kind) {
    case K_LN: return 1;
    case K_Q: return in_range(row / hd, s->q_head0, s->n_q_heads);
    case K_KV: return in_range(row / hd, s->kv_head0, s->n_kv_heads);
    case K_O: return in_range(col / hd, s->q_head0, s->n_q_heads);
    case K_GATE_UP: return in_range(row, s->mlp0, s->n_mlp);
    case K_DOWN: return in_range(col, s->mlp0, s->n_mlp);
    case K_ONCE: return s->tp_rank == 0;
    case K_REPLICA: return 1;
    case K_EXPERT_GATE_UP: return in_range(row, s->moe0, s->n_moe);
    case K_EXPERT_DOWN: return in_range(col, s->moe0, s->n_moe);
    case K_SHARED_GATE_UP: return in_range(row, s->shared0, s->n_shared);
    case K_SHARED_DOWN: return in_range(col, s->shared0, s->n_shared);
    default: return 0;
    }
}

/* How many ranks of the layout should hold element (row, col) of x, from the
 * replication rules alone (KV: the TP ranks whose query heads read it). */
static int design_count(const rlModelConfig *c, const rlShard *plan, int tp, int pp,
                        const tTensor *x, int64_t row) {
    switch (x->kind) {
    case K_EMBED: return c->tie_word_embeddings && pp > 1 ? 2 : 1;
    case K_NORM:
    case K_LN:
    case K_REPLICA: return tp;
    case K_KV: {
        int stage = 0;
        while (!in_range(x->layer, plan[stage * tp].layer0, plan[stage * tp].n_layers)) stage++;
        int group = c->num_heads / c->num_kv_heads, readers = 0;
        int64_t kv = row / c->head_dim;
        for (int r = 0; r < tp; r++) {
            const rlShard *s = &plan[stage * tp + r];
            int reads = 0;
            for (int h = s->q_head0; h < s->q_head0 + s->n_q_heads; h++) reads |= h / group == kv;
            readers += reads;
        }
        return readers;
    }
    default: return 1;
    }
}

/* Read back one buffer of n elements and account for every value in it. */
static size_t take_buffer(tModel *t, rlBackend *be, const void *buf, size_t n, const rlShard *s,
                          int32_t stamp, const char *field) {
    if (!n) return 0;
    float *host = malloc(n * sizeof(float));
    assert_non_null(host);
    rlError err = {0};
    if (be->ops->download(be, host, buf, n * sizeof(float), &err)) fail_msg("%s", err.msg);
    for (size_t i = 0; i < n; i++) {
        float v = host[i];
        if (!(v >= 0 && v < (float)t->n_elems) || v != (float)(int64_t)v)
            fail_msg("%s TP%d PP%d rank tp%d.pp%d %s[%zu] = %g: not a weight of the model",
                     t->what, s->tp_size, s->pp_size, s->tp_rank, s->pp_rank, field, i, v);
        int64_t e = (int64_t)v;
        const tTensor *x = &t->tensors[t->tensor_of[e]];
        int64_t row = (e - x->base) / x->cols, col = (e - x->base) % x->cols;
        if (!rank_holds(&t->cfg, s, x, row, col))
            fail_msg("%s TP%d PP%d rank tp%d.pp%d holds %s[%lld, %lld] in %s, which its shard "
                     "does not name", t->what, s->tp_size, s->pp_size, s->tp_rank, s->pp_rank,
                     x->name, (long long)row, (long long)col, field);
        if (t->seen_by[e] == stamp)
            fail_msg("%s TP%d PP%d rank tp%d.pp%d holds %s[%lld, %lld] twice", t->what,
                     s->tp_size, s->pp_size, s->tp_rank, s->pp_rank, x->name, (long long)row,
                     (long long)col);
        t->seen_by[e] = stamp;
        t->count[e]++;
    }
    free(host);
    return n;
}

/* Load rank i of the layout and account for every weight buffer it made. */
static void take_rank(tModel *t, rlCommSet *set, const rlShard *s, int i, int32_t stamp) {
    const rlModelConfig *c = &t->cfg;
    rlError err = {0};
    rlBackendOptions bo = {.threads = 1};
    rlBackend *be = rl_backend_cpu_create(&bo, &err);
    if (!be) fail_msg("%s", err.msg);
    rlComm *tp = NULL, *pp = NULL;
    if (set->ops->join(set, i, &tp, &pp, &err)) fail_msg("%s", err.msg);
    rlModel m;
    if (rl_model_init(&m, c, s, be, tp, pp, lookup, t, 0, 1, 1, &err))
        fail_msg("%s TP%d PP%d rank %d: %s", t->what, s->tp_size, s->pp_size, i, err.msg);

    size_t D = (size_t)c->hidden_size, hd = (size_t)c->head_dim;
    size_t nq = (size_t)s->n_q_heads * hd, nkv = (size_t)s->n_kv_heads * hd;
    size_t nm = (size_t)s->n_mlp, nv = (size_t)s->n_vocab, held = 0, rank0 = s->tp_rank == 0;
    int first = s->pp_rank == 0, last = s->pp_rank == s->pp_size - 1;
    if (first) held += take_buffer(t, be, m.embed, nv * D, s, stamp, "embed");
    if (last) {
        held += take_buffer(t, be, m.norm, D, s, stamp, "norm");
        if (m.lm_head != m.embed) held += take_buffer(t, be, m.lm_head, nv * D, s, stamp, "lm_head");
    }
    for (int l = 0; l < s->n_layers; l++) {
        const rlLayer *w = &m.layers[l];
        int moe = rl_layer_is_moe(c, s->layer0 + l);
        size_t E = moe ? (size_t)c->num_experts : 0, ne = (size_t)s->n_moe;
        nm = moe ? (size_t)s->n_shared : (size_t)s->n_mlp;
        held += take_buffer(t, be, w->router, E * D, s, stamp, "router");
        held += take_buffer(t, be, w->wgu_e, E * 2 * ne * D, s, stamp, "wgu_e");
        held += take_buffer(t, be, w->wdown_e, E * D * ne, s, stamp, "wdown_e");
        if (moe && c->shared_expert_size)
            held += take_buffer(t, be, w->wsgate, D, s, stamp, "wsgate");
        held += take_buffer(t, be, w->ln1, D, s, stamp, "ln1");
        held += take_buffer(t, be, w->ln2, D, s, stamp, "ln2");
        held += take_buffer(t, be, w->wqkv, (nq + 2 * nkv) * D, s, stamp, "wqkv");
        held += take_buffer(t, be, w->wo, D * nq, s, stamp, "wo");
        held += take_buffer(t, be, w->wgu, 2 * nm * D, s, stamp, "wgu");
        held += take_buffer(t, be, w->wdown, D * nm, s, stamp, "wdown");
        /* The family's optional buffers: present exactly when its switch says. */
        const struct { const void *buf; int on; size_t n; const char *name; } opt[] = {
            {w->bqkv, c->qkv_bias, nq + 2 * nkv, "bqkv"},
            {w->q_norm, c->qk_norm, hd, "q_norm"},
            {w->k_norm, c->qk_norm, hd, "k_norm"},
            {w->bo, c->o_bias && rank0, D, "bo"},
            {w->bgu, c->mlp_bias && !moe, 2 * nm, "bgu"},
            {w->bdown, c->mlp_bias && !moe && rank0, D, "bdown"},
            {w->router, moe, 0, "router"},
        };
        for (size_t i = 0; i < sizeof(opt) / sizeof(opt[0]); i++) {
            if (!opt[i].on != !opt[i].buf)
                fail_msg("%s rank tp%d.pp%d: %s is %s", t->what, s->tp_rank, s->pp_rank,
                         opt[i].name, opt[i].buf ? "held but the config has none" : "missing");
            if (opt[i].buf && opt[i].n)
                held += take_buffer(t, be, opt[i].buf, opt[i].n, s, stamp, opt[i].name);
        }
    }
    /* What the start-up print and the memory plan report is what is held. */
    assert_int_equal(held * sizeof(float), rl_model_weight_bytes(c, s, RL_F32));
    rl_model_free(&m);
    be->ops->destroy(be);
}

static void check_layout(tModel *t, int tp, int pp, int32_t *stamp) {
    const rlModelConfig *c = &t->cfg;
    rlShard plan[MAX_TP * MAX_PP];
    rlError err = {0};
    if (rl_shard_plan(c, tp, pp, NULL, plan, &err)) fail_msg("%s: %s", t->what, err.msg);
    rlCommSet *set = rl_comm_shm_create(tp, pp, &err);
    if (!set) fail_msg("%s", err.msg);
    memset(t->count, 0, (size_t)t->n_elems);
    for (int i = 0; i < tp * pp; i++) take_rank(t, set, &plan[i], i, ++*stamp);
    set->ops->destroy(set);

    for (int k = 0; k < t->n_tensors; k++) {
        const tTensor *x = &t->tensors[k];
        for (int64_t row = 0; row < x->rows; row++) {
            int want = design_count(c, plan, tp, pp, x, row);
            for (int64_t col = 0; col < x->cols; col++) {
                int got = t->count[x->base + row * x->cols + col];
                if (got != want)
                    fail_msg("%s TP%d PP%d: %s[%lld, %lld] is held by %d ranks, the design says "
                             "%d", t->what, tp, pp, x->name, (long long)row, (long long)col, got,
                             want);
            }
        }
    }
}

static void check_model(const char *what, const rlModelConfig *cfg) {
    tModel *t = malloc(sizeof(*t));
    assert_non_null(t);
    model_setup(t, what, cfg);
    int32_t stamp = 0;
    memset(t->seen_by, 0, (size_t)t->n_elems * sizeof(int32_t));
    for (int pp = 1; pp <= MAX_PP && pp <= cfg->num_layers; pp++)
        for (int tp = 1; tp <= MAX_TP; tp++) check_layout(t, tp, pp, &stamp);
    print_message("%-22s %2d heads %2d KV %5d MLP %6d vocab%s: TP 1-%d x PP 1-%d, %lld elements, "
                  "each held as designed\n", what, cfg->num_heads, cfg->num_kv_heads,
                  cfg->intermediate_size, cfg->vocab_size, cfg->tie_word_embeddings ? " tied" : "",
                  MAX_TP, cfg->num_layers < MAX_PP ? cfg->num_layers : MAX_PP,
                  (long long)t->n_elems);
    model_teardown(t);
    free(t);
}

static void each_model(const char *name, rlModelConfig *c, void *ctx) {
    (void)ctx;
    check_model(name, c);
}

static void test_fixture_models(void **state) {
    (void)state;
    fixture_each_model(each_model, NULL);
    /* Every bias a family can have, on a Llama shape: o_proj's and
     * down_proj's on TP rank 0 alone, gate/up's cut with the MLP. */
    rlModelConfig c;
    fixture_config("models/llama-tiny", &c);
    c.qkv_bias = c.o_bias = c.mlp_bias = c.qk_norm = 1;
    check_model("llama-tiny, every bias", &c);
}

/* Every real shape's head and MLP split, on a narrow model of few layers. */
static void each_config(const char *name, rlModelConfig *c, void *ctx) {
    (void)ctx;
    c->hidden_size = 8;
    c->num_layers = MAX_PP;
    /* Dense placement only: a quantized config's shards (cut on its groups,
     * which a hidden size of 8 cannot hold) are test_quant's and test_ranks'. */
    c->quant.method = RL_QUANT_NONE;
    /* Every expert is cut alike: 16 of them show the rule, and keep the
     * model under 2^24 elements. */
    if (c->num_experts > 16) c->num_experts = 16;
    check_model(name, c);
}

static void test_configs(void **state) {
    (void)state;
    fixture_each_config(each_config, NULL);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fixture_models),
        cmocka_unit_test(test_configs),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
