/* sample.c: logits to logprobs, top alternatives and a sampled token.
 *
 * Logprobs are log-softmax of the raw logits (before temperature, any
 * filter, logit_bias or penalty), in double, as Hugging Face and vLLM (its
 * default "raw" logprobs) report them.  A draw is a pure
 * function of the row's (seed, sample_index, step), so the same request gives
 * the same tokens in any batch and on any backend that follows these rules:
 *
 *   first the row's adjustments (logit_bias, bans, penalties from the
 *   row's table of counts; see rl_sample_adjust), then on the adjusted
 *   logits:
 *   temperature 0: greedy, ties to the lowest id;
 *   else p_i proportional to exp((l_i - max l) / T), candidates sorted by
 *   p descending (ties: lower id first); keep the first top_k (0 = all);
 *   then the shortest prefix whose mass reaches top_p of the kept mass;
 *   then those with p_i >= min_p * p_max; draw u = rl_uniform(seed,
 *   sample_index, step) and take the first kept token whose cumulative mass
 *   exceeds u times the kept mass (the last kept one if rounding leaves none).
 *
 * Sorting the whole vocabulary costs ~10 ms per sampled row at 152k tokens,
 * so the candidates are sorted lazily: a quickselect finds the best 1024
 * (or top_k) and only those are sorted unless a walk goes past them. */
#include "kernels/cpu/sample.h"

#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/rng.h"
#include "kernels/cpu/cpu.h"

int rl_sample_check(const rlRowSpec *spec, const rlLogitAdj *adjs, const rlPenFill *fills,
                    int vocab, rlError *err) {
    if (spec->n_top < 0 || spec->n_top > RL_MAX_TOP)
        return rl_error(err, RL_EINPUT, "logprobs asks for %d alternatives; the most is %d",
                        spec->n_top, RL_MAX_TOP);
    if (spec->target < -1 || spec->target >= vocab)
        return rl_error(err, RL_EINPUT, "token id %d is outside the vocabulary (0..%d)",
                        spec->target, vocab - 1);
    if (!spec->sample) return 0;
    if (!(spec->temperature >= 0) || !isfinite(spec->temperature))
        return rl_error(err, RL_EINPUT, "temperature %g must be a finite number >= 0",
                        spec->temperature);
    if (!(spec->top_p > 0 && spec->top_p <= 1))
        return rl_error(err, RL_EINPUT, "top_p %g must be in (0, 1]", spec->top_p);
    if (!(spec->min_p >= 0 && spec->min_p < 1))
        return rl_error(err, RL_EINPUT, "min_p %g must be in [0, 1)", spec->min_p);
    if (spec->top_k < 0)
        return rl_error(err, RL_EINPUT, "top_k %d must be >= 0 (0 = off)", spec->top_k);
    if (spec->n_adj <= 0 && spec->pen <= 0) return 0;
    if (!(spec->repetition > 0) || !isfinite(spec->repetition) || !isfinite(spec->frequency) ||
        !isfinite(spec->presence))
        return rl_error(err, RL_EINPUT, "repetition penalty %g must be finite and > 0, frequency "
                        "(%g) and presence (%g) penalties finite", spec->repetition,
                        spec->frequency, spec->presence);
    for (int i = 0; i < spec->n_adj; i++) {
        const rlLogitAdj *a = &adjs[spec->adj0 + i];
        if (a->id < 0 || a->id >= vocab || isnan(a->bias) || a->bias == INFINITY)
            return rl_error(err, RL_EINPUT, "logit adjustment %d (token %d, bias %g) is outside "
                            "the vocabulary (0..%d) or not a bias", i, a->id, a->bias, vocab - 1);
    }
    for (int i = 0; spec->pen_fill && i < spec->n_fill; i++) {
        const rlPenFill *f = &fills[spec->fill0 + i];
        if (f->id < 0 || f->id >= vocab || f->count < 0 || f->count > INT32_MAX / 2)
            return rl_error(err, RL_EINPUT, "penalty count %d (token %d, count %d) is outside "
                            "the vocabulary (0..%d) or not a count", i, f->id, f->count,
                            vocab - 1);
    }
    return 0;
}

void rl_sample_fill(uint32_t *pen, int vocab, const rlRowSpec *sp, const rlPenFill *fills) {
    memset(pen, 0, (size_t)vocab * sizeof *pen);
    for (int i = 0; i < sp->n_fill; i++) {
        const rlPenFill *f = &fills[sp->fill0 + i];
        pen[f->id] = RL_PEN(f->count, f->in_prompt);
    }
}

/* One token's logit x after bias and the penalties of its RL_PEN value p:
 * in float, in this order, as vLLM's sampler (bias, then penalties); the
 * CUDA sampler does the same operations with the same roundings. */
static float sample_adjust_one(float x, float bias, uint32_t p, const rlRowSpec *sp) {
    int32_t count = (int32_t)(p >> 1);
    x = x + bias;
    if (sp->repetition != 1.0f && p)
        x = x > 0 ? x / sp->repetition : x * sp->repetition;
    float f = sp->frequency * (float)count;
    x = x - f;
    if (count > 0) x = x - sp->presence;
    return x;
}

/* Tokens in no entry and never seen keep their logit; a listed one is
 * adjusted from its raw logit with its bias and its counts. */
void rl_sample_adjust(float *adj, const float *raw, int vocab, const rlRowSpec *sp,
                      const rlLogitAdj *adjs, const uint32_t *pen) {
    for (int i = 0; pen && i < vocab; i++)
        if (pen[i]) adj[i] = sample_adjust_one(raw[i], 0.0f, pen[i], sp);
    for (int i = 0; i < sp->n_adj; i++) {
        const rlLogitAdj *a = &adjs[sp->adj0 + i];
        adj[a->id] = sample_adjust_one(raw[a->id], a->bias, pen ? pen[a->id] : 0, sp);
    }
}

size_t rl_sample_scratch(const rlRowSpec *sp, int vocab) {
    if (!sp->sample) return 0;
    size_t n = sp->temperature > 0 ? (size_t)vocab * sizeof(int) : 0;
    return n + (sp->n_adj > 0 || sp->pen > 0 ? (size_t)vocab * sizeof(float) : 0);
}

/* Does (la, a) rank before (lb, b)?  Higher logit first, then lower id. */
static int sample_before(float la, int a, float lb, int b) {
    return la > lb || (la == lb && a < b);
}

/* qsort has no context argument; the logits for the comparison travel in a
 * thread-local so rows can be sampled on several threads at once. */
static _Thread_local const float *sort_logits;

static int sample_cmp(const void *pa, const void *pb) {
    int a = *(const int *)pa, b = *(const int *)pb;
    if (a == b) return 0;
    return sample_before(sort_logits[a], a, sort_logits[b], b) ? -1 : 1;
}

/* The best n ids, best first, by insertion into a short sorted list. */
static void sample_top(const float *l, int vocab, int n, int *ids) {
    int have = 0;
    for (int i = 0; i < vocab; i++) {
        if (have == n && !sample_before(l[i], i, l[ids[n - 1]], ids[n - 1])) continue;
        int j = have < n ? have++ : n - 1;
        while (j > 0 && sample_before(l[i], i, l[ids[j - 1]], ids[j - 1])) {
            ids[j] = ids[j - 1];
            j--;
        }
        ids[j] = i;
    }
}

/* Rearrange ids[0, n) so that ids[0, k) are the k best (in any order):
 * quickselect, O(n) on average.  The order is total (ties by id), so the
 * result does not depend on the pivots. */
static void sample_select(const float *l, int *ids, int n, int k) {
    int lo = 0, hi = n - 1;
    while (lo < hi) {
        int p = ids[lo + (hi - lo) / 2], i = lo, j = hi;
        while (i <= j) {
            while (sample_before(l[ids[i]], ids[i], l[p], p)) i++;
            while (sample_before(l[p], p, l[ids[j]], ids[j])) j--;
            if (i <= j) {
                int t = ids[i];
                ids[i++] = ids[j];
                ids[j--] = t;
            }
        }
        if (k - 1 <= j) hi = j;
        else if (k - 1 >= i) lo = i;
        else break;
    }
}

/* The candidates, best first, sorted lazily: the head by a quickselect and a
 * small sort; the tail only when a walk gets past the head, which a peaked
 * distribution almost never makes it do. */
#define SAMPLE_HEAD 1024

typedef struct sampleOrder {
    const float *l;
    int *ids;
    int n, sorted;
} sampleOrder;

static void order_sort(sampleOrder *o, int from, int to) {
    sort_logits = o->l;
    qsort(o->ids + from, (size_t)(to - from), sizeof(int), sample_cmp);
}

/* ids[i] of the sorted order. */
static int order_at(sampleOrder *o, int i) {
    if (i >= o->sorted) {
        order_sort(o, o->sorted, o->n);
        o->sorted = o->n;
    }
    return o->ids[i];
}

static int sample_draw(const float *l, int vocab, float max, const rlRowSpec *sp, int *ids) {
    for (int i = 0; i < vocab; i++) ids[i] = i;
    sampleOrder o = {.l = l, .ids = ids, .n = sp->top_k > 0 && sp->top_k < vocab ? sp->top_k : vocab};
    if (o.n < vocab) sample_select(l, ids, vocab, o.n);
    o.sorted = o.n < SAMPLE_HEAD ? o.n : SAMPLE_HEAD;
    if (o.sorted < o.n) sample_select(l, ids, o.n, o.sorted);
    order_sort(&o, 0, o.sorted);

    double inv_t = 1.0 / sp->temperature;
    /* p is recomputed where needed rather than stored: exp is cheap next to
     * the selection, and it saves a vocab-sized buffer. */
#define P(id) exp(((double)l[id] - max) * inv_t)
    int n = o.n;
    double total = 0;
    for (int i = 0; i < n; i++) total += P(ids[i]);
    if (sp->top_p < 1) {
        double cum = 0, want = sp->top_p * total;
        for (int i = 0; i < n; i++) {
            cum += P(order_at(&o, i));
            if (cum >= want) {
                n = i + 1;
                break;
            }
        }
    }
    if (sp->min_p > 0) {
        double floor = sp->min_p * P(ids[0]);
        int keep = 1;
        while (keep < n && P(order_at(&o, keep)) >= floor) keep++;
        n = keep;
    }
    if (n < o.n) {
        total = 0;
        for (int i = 0; i < n; i++) total += P(ids[i]);
    }
    double target = rl_uniform(sp->seed, sp->sample_index, sp->step) * total, cum = 0;
    for (int i = 0; i < n; i++) {
        int id = order_at(&o, i);
        cum += P(id);
        if (cum > target) return id;
    }
#undef P
    return order_at(&o, n - 1);
}

/* The highest logit, lowest id among ties. */
static int sample_argmax(const float *l, int vocab) {
    int best = 0;
    for (int i = 1; i < vocab; i++)
        if (l[i] > l[best]) best = i;
    return best;
}

int rl_sample_row(const float *l, int vocab, const rlRowSpec *sp, const rlLogitAdj *adjs,
                  uint32_t *pen, rlRowResult *out, void *scratch) {
    float max = l[0];
    for (int i = 1; i < vocab; i++)
        if (l[i] > max) max = l[i];
    double sum = 0;
    for (int i = 0; i < vocab; i++) sum += exp((double)l[i] - max);
    double lse = max + log(sum);

    out->n_top = sp->n_top;
    int top[RL_MAX_TOP];
    int n_top = sp->n_top > 0 ? sp->n_top : 1;
    if (n_top > vocab) n_top = out->n_top = vocab;
    sample_top(l, vocab, n_top, top);
    for (int i = 0; i < out->n_top; i++) {
        out->top_ids[i] = top[i];
        out->top_logprobs[i] = (float)(l[top[i]] - lse);
    }
    out->target_logprob = sp->target >= 0 ? (float)(l[sp->target] - lse) : 0.0f;
    out->token = -1;
    out->token_logprob = 0;
    if (!sp->sample) return 0;
    if (rl_sample_scratch(sp, vocab) && !scratch) return -1;
    const float *la = l;   /* the logits sampled from */
    float amax = max;
    int *ids = scratch;
    if (sp->n_adj > 0 || pen) {
        float *adj = (float *)scratch;
        ids = (int *)(adj + vocab);
        memcpy(adj, l, (size_t)vocab * sizeof(float));
        rl_sample_adjust(adj, l, vocab, sp, adjs, pen);
        amax = adj[sample_argmax(adj, vocab)];
        if (amax != -INFINITY) la = adj;   /* everything banned: the raw row */
        else amax = max;
    }
    if (sp->temperature == 0) out->token = la == l ? top[0] : sample_argmax(la, vocab);
    else out->token = sample_draw(la, vocab, amax, sp, ids);
    out->token_logprob = (float)(l[out->token] - lse);
    if (pen) pen[out->token] += RL_PEN(1, 0);
    return 0;
}

typedef struct sampleJob {
    const float *logits;
    int vocab;
    const rlRowSpec *rows;
    const rlLogitAdj *adjs;
    uint32_t *pen;
    rlRowResult *out;
    atomic_int failed;
} sampleJob;

static void sample_item(void *ctx, int r) {
    sampleJob *j = ctx;
    const rlRowSpec *sp = &j->rows[r];
    size_t bytes = rl_sample_scratch(sp, j->vocab);
    void *scratch = NULL;
    if (bytes && !(scratch = malloc(bytes))) {
        atomic_store(&j->failed, 1);
        return;
    }
    uint32_t *pen = sp->sample && sp->pen > 0 ? j->pen + (size_t)(sp->pen - 1) * j->vocab : NULL;
    rl_sample_row(j->logits + (size_t)r * j->vocab, j->vocab, sp, j->adjs, pen, &j->out[r],
                  scratch);
    free(scratch);
}

/* Room for penalty tables 1..n of vocab ids, those there kept. */
static int cpu_pen_grow(cpuBackend *c, int n, int vocab, rlError *err) {
    if (vocab != c->pen_vocab) c->pen_n = 0;    /* tables of another vocabulary: none kept */
    if (n <= c->pen_n) return 0;
    int cap = n > 2 * c->pen_n ? n : 2 * c->pen_n;
    uint32_t *p = realloc(c->pen, (size_t)cap * vocab * sizeof *p);
    if (!p) return rl_error(err, RL_EMEMORY, "out of host memory for %d penalty tables", cap);
    memset(p + (size_t)c->pen_n * vocab, 0, (size_t)(cap - c->pen_n) * vocab * sizeof *p);
    c->pen = p, c->pen_n = cap, c->pen_vocab = vocab;
    return 0;
}

int cpu_sample(rlBackend *be, const float *logits, int vocab, int row0, int n, rlRowResult *out,
               rlError *err) {
    cpuBackend *c = be->impl;
    const rlBatch *b = c->b;
    const rlRowSpec *rows = b->rows + row0;
    int max_pen = 0;
    for (int r = 0; r < n; r++) {
        const rlRowSpec *sp = &rows[r];
        if (rl_sample_check(sp, b->adjs, b->pen_fills, vocab, err) != 0)
            return rl_error_wrap(err, "logit row %d", row0 + r);
        if (sp->sample && sp->pen > max_pen) max_pen = sp->pen;
    }
    if (cpu_pen_grow(c, max_pen, vocab, err)) return -1;
    for (int r = 0; r < n; r++) {
        const rlRowSpec *sp = &rows[r];
        if (sp->sample && sp->pen > 0 && sp->pen_fill)
            rl_sample_fill(c->pen + (size_t)(sp->pen - 1) * vocab, vocab, sp, b->pen_fills);
    }
    sampleJob j = {.logits = logits, .vocab = vocab, .rows = rows, .adjs = b->adjs,
                   .pen = c->pen, .out = out};
    atomic_init(&j.failed, 0);
    cpu_pool_run(c->pool, n, sample_item, &j);
    if (atomic_load(&j.failed))
        return rl_error(err, RL_EMEMORY, "out of host memory for sampling scratch space");
    return 0;
}
