/* test_sample.c: the sampling rules of kernels/README.md, row by row.
 *
 * Logprobs are log-softmax of the raw logits; ties go to the lower id;
 * top-k, top-p and min-p cut where the rules say; draws follow the
 * probabilities and depend on (seed, sample index, step) alone. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/sample.h"
#include "kernels/rng.h"

static rlRowSpec spec(float temperature) {
    return (rlRowSpec){.target = -1, .sample = 1, .temperature = temperature, .top_p = 1};
}

static int draw(const float *l, int v, rlRowSpec sp) {
    int scratch[16];
    rlRowResult r;
    assert_int_equal(rl_sample_row(l, v, &sp, NULL, NULL, &r, scratch), 0);
    return r.token;
}

static void test_logprobs(void **state) {
    (void)state;
    const float l[4] = {1, 3, 3, 2};
    rlRowSpec sp = spec(0);
    sp.n_top = 3;
    sp.target = 0;
    rlRowResult r;
    assert_int_equal(rl_sample_row(l, 4, &sp, NULL, NULL, &r, NULL), 0);
    double lse = log(exp(1) + 2 * exp(3) + exp(2));
    assert_true(fabs(r.target_logprob - (1 - lse)) < 1e-6);
    assert_int_equal(r.n_top, 3);
    assert_int_equal(r.top_ids[0], 1);      /* tie between 1 and 2: lower id first */
    assert_int_equal(r.top_ids[1], 2);
    assert_int_equal(r.top_ids[2], 3);
    assert_true(fabs(r.top_logprobs[2] - (2 - lse)) < 1e-6);
    assert_int_equal(r.token, 1);           /* greedy tie: lowest id */
    assert_true(fabs(r.token_logprob - (3 - lse)) < 1e-6);

    sp.sample = 0;
    assert_int_equal(rl_sample_row(l, 4, &sp, NULL, NULL, &r, NULL), 0);
    assert_int_equal(r.token, -1);
}

static void test_filters(void **state) {
    (void)state;
    /* p = 0.5, 0.3, 0.2 at temperature 1 */
    const float l[3] = {logf(0.3f), logf(0.5f), logf(0.2f)};
    for (uint64_t seed = 0; seed < 300; seed++) {
        rlRowSpec sp = spec(1);
        sp.seed = seed;
        sp.top_k = 1;
        assert_int_equal(draw(l, 3, sp), 1);
        sp.top_k = 0, sp.top_p = 0.4f;          /* the top token alone reaches 0.4 */
        assert_int_equal(draw(l, 3, sp), 1);
        sp.top_p = 0.7f;                        /* 0.5 + 0.3 */
        assert_int_not_equal(draw(l, 3, sp), 2);
        sp.top_p = 1, sp.min_p = 0.5f;          /* keeps p >= 0.25 */
        assert_int_not_equal(draw(l, 3, sp), 2);
        sp.min_p = 0, sp.top_k = 2;
        assert_int_not_equal(draw(l, 3, sp), 2);
    }
}

static void test_distribution(void **state) {
    (void)state;
    const float l[3] = {logf(0.3f), logf(0.5f), logf(0.2f)};
    int count[3] = {0};
    int n = 20000;
    for (int i = 0; i < n; i++) {
        rlRowSpec sp = spec(1);
        sp.seed = 42;
        sp.step = (uint32_t)i;
        count[draw(l, 3, sp)]++;
    }
    assert_true(fabs(count[0] / (double)n - 0.3) < 0.015);
    assert_true(fabs(count[1] / (double)n - 0.5) < 0.015);
    assert_true(fabs(count[2] / (double)n - 0.2) < 0.015);

    /* temperature 2 flattens: p ~ sqrt(p) */
    count[0] = count[1] = count[2] = 0;
    for (int i = 0; i < n; i++) {
        rlRowSpec sp = spec(2);
        sp.seed = 7;
        sp.sample_index = (uint32_t)i;
        count[draw(l, 3, sp)]++;
    }
    double z = sqrt(0.3) + sqrt(0.5) + sqrt(0.2);
    assert_true(fabs(count[2] / (double)n - sqrt(0.2) / z) < 0.015);
}

static void test_deterministic(void **state) {
    (void)state;
    float l[16];
    for (int i = 0; i < 16; i++) l[i] = (float)((i * 7) % 5) * 0.3f;
    for (uint32_t step = 0; step < 50; step++) {
        rlRowSpec sp = spec(0.8f);
        sp.seed = 1234, sp.step = step, sp.top_p = 0.9f;
        int a = draw(l, 16, sp), b = draw(l, 16, sp);
        assert_int_equal(a, b);
    }
}

/* The rules of kernels/README.md written the plain way: sort everything. */
static const float *oracle_l;
static int oracle_cmp(const void *a, const void *b) {
    int x = *(const int *)a, y = *(const int *)b;
    if (oracle_l[x] != oracle_l[y]) return oracle_l[x] > oracle_l[y] ? -1 : 1;
    return x - y;
}

static int oracle(const float *l, int v, const rlRowSpec *sp) {
    int *ids = malloc((size_t)v * sizeof(int));
    double *p = malloc((size_t)v * sizeof(double));
    float max = l[0];
    for (int i = 0; i < v; i++) ids[i] = i, max = l[i] > max ? l[i] : max;
    oracle_l = l;
    qsort(ids, (size_t)v, sizeof(int), oracle_cmp);
    int n = sp->top_k > 0 && sp->top_k < v ? sp->top_k : v;
    double total = 0, cum = 0;
    for (int i = 0; i < n; i++) total += p[i] = exp(((double)l[ids[i]] - max) / sp->temperature);
    for (int i = 0; i < n && sp->top_p < 1; i++)
        if ((cum += p[i]) >= sp->top_p * total) n = i + 1;
    int keep = 1;
    while (keep < n && p[keep] >= sp->min_p * p[0]) keep++;
    n = keep;
    total = cum = 0;
    for (int i = 0; i < n; i++) total += p[i];
    double target = rl_uniform(sp->seed, sp->sample_index, sp->step) * total;
    int tok = ids[n - 1];
    for (int i = 0; i < n; i++)
        if ((cum += p[i]) > target) {
            tok = ids[i];
            break;
        }
    free(ids);
    free(p);
    return tok;
}

/* A large vocabulary, peaked and flat, through every filter: the lazy
 * selection must draw what a full sort draws. */
static void test_large_vocab(void **state) {
    (void)state;
    enum { V = 5000 };
    static float peaked[V], flat[V];
    static int scratch[V];
    uint64_t x = 12345;
    for (int i = 0; i < V; i++) {
        x = x * 6364136223846793005ULL + 1442695040888963407ULL;
        double u = (double)(x >> 11) / 9007199254740992.0;
        peaked[i] = (float)(u * 12.0);
        flat[i] = (float)(u * 0.01);
    }
    peaked[77] = peaked[78] = 13.0f;    /* a tie at the top */
    const float temps[] = {0.7f, 1.5f}, top_ps[] = {1, 0.9f, 0.3f}, min_ps[] = {0, 0.05f};
    const int top_ks[] = {0, 10, 100, 2000};
    for (int d = 0; d < 2; d++)
        for (int a = 0; a < 2; a++)
            for (int b = 0; b < 3; b++)
                for (int c = 0; c < 2; c++)
                    for (int k = 0; k < 4; k++)
                        for (uint32_t step = 0; step < 4; step++) {
                            rlRowSpec sp = spec(temps[a]);
                            sp.top_p = top_ps[b], sp.min_p = min_ps[c], sp.top_k = top_ks[k];
                            sp.seed = 99, sp.step = step;
                            const float *l = d ? flat : peaked;
                            rlRowResult r;
                            assert_int_equal(rl_sample_row(l, V, &sp, NULL, NULL, &r, scratch), 0);
                            assert_int_equal(r.token, oracle(l, V, &sp));
                        }
}

static void test_check(void **state) {
    (void)state;
    rlError err = {0};
    rlRowSpec sp = spec(1);
    assert_int_equal(rl_sample_check(&sp, NULL, NULL, 10, &err), 0);
    sp.top_p = 0;
    assert_int_equal(rl_sample_check(&sp, NULL, NULL, 10, &err), -1);
    sp = spec(1), sp.min_p = 1;
    assert_int_equal(rl_sample_check(&sp, NULL, NULL, 10, &err), -1);
    sp = spec(-1);
    assert_int_equal(rl_sample_check(&sp, NULL, NULL, 10, &err), -1);
    sp = spec(NAN);
    assert_int_equal(rl_sample_check(&sp, NULL, NULL, 10, &err), -1);
    sp = spec(1), sp.n_top = RL_MAX_TOP + 1;
    assert_int_equal(rl_sample_check(&sp, NULL, NULL, 10, &err), -1);
    sp = spec(1), sp.target = 10;
    assert_int_equal(rl_sample_check(&sp, NULL, NULL, 10, &err), -1);
    sp = spec(1), sp.top_k = -1;
    assert_int_equal(rl_sample_check(&sp, NULL, NULL, 10, &err), -1);
}


/* Penalties and logit_bias against a reference computed here, in double,
 * from vLLM's definitions (not from rl_sample_adjust): bias added (a ban is
 * -inf), then repetition (prompt or generated tokens: divided when
 * positive, multiplied otherwise), frequency (x generated count), presence
 * (generated at all).  Greedy and seeded draws must pick the token the
 * reference row picks; logprobs stay those of the raw row. */
enum { PV = 64 };

/* A token the reference adjusts: its bias and counts. */
typedef struct refTok {
    int id, count, in_prompt;
    float bias;
} refTok;

static double ref_adjusted(const float *l, int id, const rlRowSpec *sp, const refTok *t, int n) {
    double x = l[id];
    for (int i = 0; i < n; i++) {
        if (t[i].id != id) continue;
        x = t[i].bias == -INFINITY ? -INFINITY : x + t[i].bias;
        if (t[i].in_prompt || t[i].count > 0)
            x = x > 0 ? x / sp->repetition : x * sp->repetition;
        x -= (double)sp->frequency * t[i].count;
        if (t[i].count > 0) x -= sp->presence;
    }
    return x;
}

/* The reference draw: first token (by adjusted value descending, ids
 * ascending) whose cumulative mass exceeds u times the total; *margin is
 * how close u * total came to a boundary (float rounding may differ there). */
static int ref_draw(const float *l, const rlRowSpec *sp, const refTok *t, int n, double *margin) {
    double y[PV], mx = -INFINITY;
    int order[PV];
    for (int i = 0; i < PV; i++) {
        y[i] = ref_adjusted(l, i, sp, t, n);
        if (y[i] > mx) mx = y[i];
        order[i] = i;
    }
    for (int i = 1; i < PV; i++)   /* insertion sort: y desc, id asc */
        for (int j = i; j > 0 && y[order[j]] > y[order[j - 1]]; j--) {
            int tmp = order[j];
            order[j] = order[j - 1];
            order[j - 1] = tmp;
        }
    if (sp->temperature == 0) {
        *margin = y[order[0]] - y[order[1]];
        return order[0];
    }
    double total = 0, p[PV];
    for (int i = 0; i < PV; i++) total += p[i] = exp((y[i] - mx) / sp->temperature);
    double want = rl_uniform(sp->seed, sp->sample_index, sp->step) * total, cum = 0;
    for (int i = 0; i < PV; i++) {
        double before = cum;
        cum += p[order[i]];
        if (cum > want) {
            *margin = fmin(want - before, cum - want) / total;
            return order[i];
        }
    }
    *margin = 0;
    return order[PV - 1];
}

/* The row's entries (biases) and penalty table (counts) from the
 * reference's tokens. */
static int ref_split(const refTok *t, int n, rlLogitAdj *adj, uint32_t *pen) {
    int n_adj = 0;
    memset(pen, 0, PV * sizeof *pen);
    for (int i = 0; i < n; i++) {
        pen[t[i].id] = RL_PEN(t[i].count, t[i].in_prompt);
        if (t[i].bias != 0) adj[n_adj++] = (rlLogitAdj){.id = t[i].id, .bias = t[i].bias};
    }
    return n_adj;
}

static void test_penalties(void **state) {
    (void)state;
    float l[PV];
    uint64_t x = 777;
    for (int i = 0; i < PV; i++) {
        x = x * 6364136223846793005ULL + 1442695040888963407ULL;
        l[i] = (float)((double)(x >> 11) / 9007199254740992.0 * 8.0 - 4.0);   /* both signs */
    }
    l[5] = 6.0f;     /* the raw favourite, in the prompt and generated */
    l[9] = 5.5f;     /* generated often */
    l[12] = -0.5f;   /* negative, in the prompt */
    l[20] = 5.9f;    /* banned */
    l[30] = 1.0f;    /* biased up */
    const refTok toks[] = {
        {.id = 5, .count = 1, .in_prompt = 1},
        {.id = 9, .count = 3},
        {.id = 12, .in_prompt = 1},
        {.id = 20, .bias = -INFINITY},
        {.id = 30, .bias = 4.75f},
        {.id = 40, .count = 2, .bias = -1.5f},
    };
    const int n_toks = sizeof(toks) / sizeof(*toks);
    rlLogitAdj adj[PV];
    uint32_t pen[PV];
    const float reps[] = {1.0f, 1.3f, 0.7f, 2.0f}, freqs[] = {0, 0.5f, -1.0f, 2.0f},
                pres[] = {0, 1.5f, -2.0f}, temps[] = {0, 0.6f, 1.0f, 1.7f};
    unsigned char scratch[PV * (sizeof(int) + sizeof(float))];
    int checked = 0, changed = 0;
    for (int a = 0; a < 4; a++)
        for (int b = 0; b < 4; b++)
            for (int c = 0; c < 3; c++)
                for (int t = 0; t < 4; t++)
                    for (uint64_t seed = 0; seed < (temps[t] > 0 ? 40 : 1); seed++) {
                        rlRowSpec sp = spec(temps[t]);
                        sp.repetition = reps[a], sp.frequency = freqs[b], sp.presence = pres[c];
                        sp.n_adj = ref_split(toks, n_toks, adj, pen);
                        sp.pen = 1, sp.seed = seed, sp.step = 3;
                        rlRowResult r;
                        assert_int_equal(rl_sample_row(l, PV, &sp, adj, pen, &r, scratch), 0);
                        /* the drawn token is counted in the table */
                        uint32_t before[PV];
                        ref_split(toks, n_toks, adj, before);
                        assert_int_equal(pen[r.token], before[r.token] + RL_PEN(1, 0));
                        double margin;
                        int want = ref_draw(l, &sp, toks, n_toks, &margin);
                        if (margin < 1e-6) continue;   /* too close to call in float */
                        if (r.token != want)
                            fail_msg("rep %g freq %g pres %g T %g seed %llu: token %d, reference %d",
                                     reps[a], freqs[b], pres[c], temps[t],
                                     (unsigned long long)seed, r.token, want);
                        checked++;
                        changed += want != 5 && temps[t] == 0;
                        /* logprobs are the raw row's */
                        double lse = 0;
                        for (int i = 0; i < PV; i++) lse += exp((double)l[i] - 6.0);
                        lse = 6.0 + log(lse);
                        assert_true(fabs(r.token_logprob - (l[r.token] - lse)) < 1e-5);
                    }
    print_message("penalties: %d draws checked against the reference, %d greedy ones moved off "
                  "the raw favourite\n", checked, changed);
    assert_true(checked > 1500);
    assert_true(changed > 10);

    /* Counts over several steps: greedy with a frequency penalty, the table
     * counting each drawn token, against the reference fed the same counts. */
    refTok seen[PV];
    int n_seen = 0;
    memset(pen, 0, sizeof pen);
    rlRowSpec sp = spec(0);
    sp.repetition = 1.2f, sp.frequency = 0.4f, sp.presence = 0.3f, sp.pen = 1;
    for (int step = 0; step < 40; step++) {
        rlRowResult r;
        assert_int_equal(rl_sample_row(l, PV, &sp, NULL, pen, &r, scratch), 0);
        double margin;
        int want = ref_draw(l, &sp, seen, n_seen, &margin);
        assert_int_equal(r.token, want);
        int k = 0;
        while (k < n_seen && seen[k].id != want) k++;
        if (k == n_seen) seen[n_seen++] = (refTok){.id = want};
        seen[k].count++;
    }
    print_message("penalties over 40 steps: %d distinct tokens drawn\n", n_seen);
    assert_true(n_seen > 3);

    /* A table started over from fills. */
    rlPenFill fills[] = {{.id = 3, .count = 2}, {.id = 7, .in_prompt = 1}};
    sp.pen_fill = 1, sp.fill0 = 0, sp.n_fill = 2;
    rl_sample_fill(pen, PV, &sp, fills);
    assert_int_equal(pen[3], RL_PEN(2, 0));
    assert_int_equal(pen[7], RL_PEN(0, 1));
    assert_int_equal(pen[5], 0);

    /* Everything banned: the raw row decides. */
    rlLogitAdj ban[PV];
    for (int i = 0; i < PV; i++) ban[i] = (rlLogitAdj){.id = i, .bias = -INFINITY};
    sp = spec(0);
    sp.repetition = 1, sp.n_adj = PV;
    rlRowResult r;
    assert_int_equal(rl_sample_row(l, PV, &sp, ban, NULL, &r, scratch), 0);
    assert_int_equal(r.token, 5);

    rlError err = {0};
    sp.repetition = 0;
    assert_int_equal(rl_sample_check(&sp, ban, NULL, PV, &err), -1);
    sp.repetition = 1;
    ban[3].id = PV;
    assert_int_equal(rl_sample_check(&sp, ban, NULL, PV, &err), -1);
    ban[3].id = 3;
    sp.pen = 1, sp.pen_fill = 1, sp.fill0 = 0, sp.n_fill = 2;
    assert_int_equal(rl_sample_check(&sp, ban, fills, PV, &err), 0);
    fills[1].id = PV;
    assert_int_equal(rl_sample_check(&sp, ban, fills, PV, &err), -1);
    print_message("bad fill: %s\n", err.msg);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_logprobs),
        cmocka_unit_test(test_filters),
        cmocka_unit_test(test_distribution),
        cmocka_unit_test(test_deterministic),
        cmocka_unit_test(test_large_vocab),
        cmocka_unit_test(test_check),
        cmocka_unit_test(test_penalties),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
