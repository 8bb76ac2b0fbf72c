/* adjust.c: what a request's sampling rows change in their logits (see
 * adjust.h), with vLLM's meanings:
 *
 *   - logit_bias: added to the token's logit;
 *   - bad_words: each word tokenized alone and after a space (the spaced
 *     form kept when it is as long and starts differently, as vLLM does);
 *     a one-token word is never generated, a longer one's last token is
 *     banned right after its other tokens were generated;
 *   - min_tokens: EOS (unless ignore_eos) and stop_token_ids banned until
 *     that many tokens are generated;
 *   - repetition_penalty over prompt and generated tokens,
 *     frequency_penalty and presence_penalty over generated tokens: the
 *     counts live in a penalty table of the backend that samples, which
 *     adds every token it draws (kernels/batch.h).
 *
 * Each sample keeps its tokens' counts here too, in an array sorted by id
 * (prompt tokens too when repetition_penalty is on): they fill its table at
 * its first sampling row, once; after that its rows carry only the biases
 * and bans, each id once, so a step at batch 64 stages a few entries a row
 * instead of every prompt token's count. */
#include "worker/engine/adjust.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct adjSeen {
    rlPenFill *v;       /* sorted by id */
    int n, cap;
} adjSeen;

struct rlAdjust {
    const rlRequest *r;
    int penalties;      /* any of the three is on */
    int32_t **bad;      /* bad word token sequences */
    int *bad_len;
    int n_bad;
    int32_t *stop_ids;  /* banned before min_tokens */
    int n_stop_ids;
    adjSeen *seen;      /* [r->n] */
    rlPenTables *tables;
    int *table;         /* [r->n]: each sample's penalty table, 0 until its first row */
};

void adjust_tables_free(rlPenTables *t) {
    free(t->taken);
    memset(t, 0, sizeof *t);
}

/* The lowest free table, or -1 when out of memory. */
static int tables_take(rlPenTables *t) {
    int i = 0;
    while (i < t->cap && t->taken[i]) i++;
    if (i == t->cap) {
        if (t->cap >= RL_MAX_PEN) return -1;
        int cap = t->cap ? t->cap * 2 : 64;
        unsigned char *v = realloc(t->taken, (size_t)cap);
        if (!v) return -1;
        memset(v + t->cap, 0, (size_t)(cap - t->cap));
        t->taken = v, t->cap = cap;
    }
    t->taken[i] = 1;
    return i + 1;
}

void adjust_free(rlAdjust *a) {
    if (!a) return;
    for (int i = 0; i < a->n_bad; i++) free(a->bad[i]);
    free(a->bad);
    free(a->bad_len);
    free(a->stop_ids);
    for (int i = 0; a->seen && i < a->r->n; i++) free(a->seen[i].v);
    free(a->seen);
    for (int i = 0; a->table && i < a->r->n; i++)
        if (a->table[i]) a->tables->taken[a->table[i] - 1] = 0;
    free(a->table);
    free(a);
}

/* The index of id in v[0..n) sorted by id, or where it would go (negative:
 * -(slot) - 1). */
static int adj_find(const rlPenFill *v, int n, int32_t id) {
    int lo = 0, hi = n;
    while (lo < hi) {
        int mid = (lo + hi) / 2;
        if (v[mid].id < id) lo = mid + 1;
        else hi = mid;
    }
    return lo < n && v[lo].id == id ? lo : -lo - 1;
}

static int seen_add(adjSeen *s, int32_t id, int in_prompt) {
    int at = adj_find(s->v, s->n, id);
    if (at >= 0) {
        if (in_prompt) s->v[at].in_prompt = 1;
        else s->v[at].count++;
        return 0;
    }
    at = -at - 1;
    if (s->n == s->cap) {
        int cap = s->cap ? s->cap * 2 : 64;
        rlPenFill *v = realloc(s->v, (size_t)cap * sizeof(*v));
        if (!v) return -1;
        s->v = v, s->cap = cap;
    }
    memmove(s->v + at + 1, s->v + at, (size_t)(s->n - at) * sizeof(*s->v));
    s->v[at] = (rlPenFill){.id = id, .count = in_prompt ? 0 : 1, .in_prompt = in_prompt};
    s->n++;
    return 0;
}

/* One bad word's token sequence, kept unless it holds an id the model
 * cannot produce (then it can never be generated anyway). */
static int adj_bad_add(rlAdjust *a, int32_t *ids, int n, int vocab) {
    for (int i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= vocab) n = 0;
    if (n == 0) {
        free(ids);
        return 0;
    }
    a->bad[a->n_bad] = ids;
    a->bad_len[a->n_bad++] = n;
    return 0;
}

static int adj_bad_words(rlAdjust *a, const rlTokenizer *tok, int vocab, rlError *err) {
    const rlRequest *r = a->r;
    if (!(a->bad = calloc((size_t)r->n_bad_words * 2, sizeof(*a->bad))) ||
        !(a->bad_len = calloc((size_t)r->n_bad_words * 2, sizeof(int))))
        return rl_error(err, RL_EINTERNAL, "out of memory");
    for (int w = 0; w < r->n_bad_words; w++) {
        const char *word = r->bad_words[w];
        while (*word == ' ' || *word == '\t' || *word == '\n') word++;
        size_t len = strlen(word);
        char *spaced = malloc(len + 2);
        if (!spaced) return rl_error(err, RL_EINTERNAL, "out of memory");
        spaced[0] = ' ';
        memcpy(spaced + 1, word, len + 1);
        int32_t *plain = NULL, *sp = NULL;
        int n_plain = 0, n_sp = 0;
        int rc = tokenizer_encode(tok, word, len, &plain, &n_plain, err) ||
                 tokenizer_encode(tok, spaced, len + 1, &sp, &n_sp, err);
        free(spaced);
        if (rc) {
            free(plain);
            free(sp);
            return rl_error_wrap(err, "bad_words[%d]", w);
        }
        int keep_sp = n_plain > 0 && n_sp == n_plain && sp[0] != plain[0];
        adj_bad_add(a, plain, n_plain, vocab);
        if (keep_sp) adj_bad_add(a, sp, n_sp, vocab);
        else free(sp);
    }
    return 0;
}

int adjust_open(const rlRequest *r, const rlTokenizer *tok, int vocab, const int *eos, int n_eos,
                rlPenTables *tables, rlAdjust **out, rlError *err) {
    *out = NULL;
    int penalties = r->repetition_penalty != 1.0f || r->frequency_penalty != 0.0f ||
                    r->presence_penalty != 0.0f;
    if (!penalties && !r->n_logit_bias && !r->min_tokens && !r->n_bad_words) return 0;
    for (int i = 0; i < r->n_logit_bias; i++)
        if (r->logit_bias[i].id < 0 || r->logit_bias[i].id >= vocab)
            return rl_error(err, RL_EINPUT, "logit_bias names token %d, outside the model's "
                            "vocabulary (0..%d)", r->logit_bias[i].id, vocab - 1);
    if (r->n_bad_words && !tok)
        return rl_error(err, RL_EINPUT, "'bad_words' need the model's tokenizer.json");
    rlAdjust *a = calloc(1, sizeof(*a));
    if (!a) return rl_error(err, RL_EINTERNAL, "out of memory");
    a->r = r;
    a->penalties = penalties;
    a->tables = tables;
    int bad = 0;
    if (r->n_bad_words) bad = adj_bad_words(a, tok, vocab, err);
    if (!bad && r->min_tokens > 0) {
        a->stop_ids = malloc((size_t)(n_eos + r->n_stop_token_ids + 1) * sizeof(int32_t));
        if (!a->stop_ids) bad = rl_error(err, RL_EINTERNAL, "out of memory");
        for (int i = 0; !bad && !r->ignore_eos && i < n_eos; i++)
            if (eos[i] >= 0 && eos[i] < vocab) a->stop_ids[a->n_stop_ids++] = eos[i];
        for (int i = 0; !bad && i < r->n_stop_token_ids; i++)
            a->stop_ids[a->n_stop_ids++] = r->stop_token_ids[i];
    }
    if (!bad && penalties) {
        if (!(a->seen = calloc((size_t)r->n, sizeof(*a->seen))) ||
            !(a->table = calloc((size_t)r->n, sizeof(*a->table))))
            bad = rl_error(err, RL_EINTERNAL, "out of memory");
        for (int s = 0; !bad && s < r->n; s++)
            for (int i = 0; !bad && r->repetition_penalty != 1.0f && i < r->n_prompt_ids; i++)
                if (seen_add(&a->seen[s], r->prompt_ids[i], 1))
                    bad = rl_error(err, RL_EINTERNAL, "out of memory");
    }
    if (bad) {
        adjust_free(a);
        return -1;
    }
    *out = a;
    return 0;
}

int adjust_count(rlAdjust *a, int sample, int32_t tok) {
    return a && a->penalties ? seen_add(&a->seen[sample], tok, 0) : 0;
}

static int buf_push(rlAdjBuf *b, rlLogitAdj x) {
    if (b->n == b->cap) {
        int cap = b->cap ? b->cap * 2 : 1024;
        rlLogitAdj *v = realloc(b->v, (size_t)cap * sizeof(*v));
        if (!v) return -1;
        b->v = v, b->cap = cap;
    }
    b->v[b->n++] = x;
    return 0;
}

/* Set id's bias in the row's entries from `from` on, or append it. */
static int row_bias(rlAdjBuf *b, int from, int32_t id, float bias) {
    for (int i = from; i < b->n; i++)
        if (b->v[i].id == id) {
            b->v[i].bias = bias;
            return 0;
        }
    return buf_push(b, (rlLogitAdj){.id = id, .bias = bias});
}

/* Sample `sample`'s penalty table: taken at its first row and filled from
 * what it has seen so far. */
static int row_table(rlAdjust *a, int sample, rlRowSpec *spec, rlAdjBuf *b) {
    if (!a->table[sample]) {
        const adjSeen *s = &a->seen[sample];
        if (b->n_fills + s->n > b->fills_cap) {
            int cap = b->fills_cap ? b->fills_cap : 1024;
            while (cap < b->n_fills + s->n) cap *= 2;
            rlPenFill *v = realloc(b->fills, (size_t)cap * sizeof(*v));
            if (!v) return -1;
            b->fills = v, b->fills_cap = cap;
        }
        int t = tables_take(a->tables);
        if (t < 0) return -1;
        a->table[sample] = t;
        spec->pen_fill = 1;
        spec->fill0 = b->n_fills;
        spec->n_fill = s->n;
        if (s->n) memcpy(b->fills + b->n_fills, s->v, (size_t)s->n * sizeof(*s->v));
        b->n_fills += s->n;
    }
    spec->pen = a->table[sample];
    return 0;
}

int adjust_row(rlAdjust *a, int sample, const int32_t *gen, int n_gen, rlRowSpec *spec,
               rlAdjBuf *buf) {
    spec->adj0 = buf->n;
    spec->n_adj = 0;
    spec->repetition = 1.0f;
    if (!a) return 0;
    const rlRequest *r = a->r;
    spec->repetition = r->repetition_penalty;
    spec->frequency = r->frequency_penalty;
    spec->presence = r->presence_penalty;
    if (a->penalties && row_table(a, sample, spec, buf)) return -1;
    int from = buf->n;
    for (int i = 0; i < r->n_logit_bias; i++)
        if (row_bias(buf, from, r->logit_bias[i].id, r->logit_bias[i].bias)) return -1;
    if (n_gen < r->min_tokens)
        for (int i = 0; i < a->n_stop_ids; i++)
            if (row_bias(buf, from, a->stop_ids[i], -INFINITY)) return -1;
    for (int w = 0; w < a->n_bad; w++) {
        int len = a->bad_len[w];
        if (len - 1 > n_gen || memcmp(gen + n_gen - (len - 1), a->bad[w],
                                      (size_t)(len - 1) * sizeof(int32_t)))
            continue;
        if (row_bias(buf, from, a->bad[w][len - 1], -INFINITY)) return -1;
    }
    spec->n_adj = buf->n - from;
    return 0;
}
