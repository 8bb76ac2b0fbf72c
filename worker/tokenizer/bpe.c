/* bpe.c: see bpe.h.  Hash tables are open addressing with linear probing:
 * the vocab table holds ids (keys live in one string arena), the merge
 * table holds (pair, rank, new id) inline, so one probe answers a lookup. */
#include "worker/tokenizer/bpe.h"

#include <stdlib.h>
#include <string.h>

#include "worker/tokenizer/bytelevel.h"

/* Pre-tokens up to this many bytes are cached; longer ones are rare and
 * merging them is already linear-logarithmic. */
#define BPE_CACHE_WORD 64
#define BPE_CACHE_SLOTS (1u << 17)
#define BPE_CACHE_MAX (BPE_CACHE_SLOTS / 2)

typedef struct bpeCacheEntry {
    uint64_t hash;
    uint16_t len, n_ids;
    /* followed by len key bytes, then n_ids int32 ids (aligned) */
} bpeCacheEntry;

struct bpeCache {
    pthread_mutex_t lock;
    bpeCacheEntry **slots;
    uint32_t count;
};

/* MurmurHash3's finalizer: tables index by the low bits, so every input
 * bit must reach them. */
static uint64_t bpe_mix(uint64_t h) {
    h ^= h >> 33;
    h *= 0xFF51AFD7ED558CCDULL;
    h ^= h >> 33;
    h *= 0xC4CEB9FE1A85EC53ULL;
    return h ^ (h >> 33);
}

static uint64_t bpe_hash(const void *p, size_t n) {
    const unsigned char *s = p;
    uint64_t h = 0x9E3779B97F4A7C15ULL ^ n;
    while (n >= 8) {
        uint64_t w;
        memcpy(&w, s, 8);
        h = bpe_mix(h ^ w);
        s += 8;
        n -= 8;
    }
    uint64_t w = 0;
    memcpy(&w, s, n);
    return bpe_mix(h ^ w);
}

static uint64_t bpe_pair_hash(uint64_t pair) {
    return bpe_mix(pair);
}

int bpe_ids_push(bpeIds *ids, int32_t id) {
    if (ids->n == ids->cap) {
        if (ids->cap > INT32_MAX / 2) return -1;
        int cap = ids->cap ? ids->cap * 2 : 256;
        int32_t *v = realloc(ids->v, (size_t)cap * sizeof(*v));
        if (!v) return -1;
        ids->v = v;
        ids->cap = cap;
    }
    ids->v[ids->n++] = id;
    return 0;
}

void bpe_init(bpeModel *m) {
    memset(m, 0, sizeof(*m));
    for (int i = 0; i < 256; i++) m->byte_id[i] = -1;
}

static void bpe_cache_free(bpeCache *c) {
    if (!c) return;
    for (uint32_t i = 0; i < BPE_CACHE_SLOTS; i++) free(c->slots[i]);
    free(c->slots);
    pthread_mutex_destroy(&c->lock);
    free(c);
}

void bpe_free(bpeModel *m) {
    bytebuf_free(&m->strs);
    bytebuf_free(&m->bytes);
    free(m->str);
    free(m->slots);
    free(m->byte_off);
    free(m->byte_len);
    free(m->merges);
    bpe_cache_free(m->cache);
    bpe_init(m);
}

/* Tokens arrive in file order with arbitrary ids: the by-id arrays grow. */
static int bpe_grow_ids(bpeModel *m, long long need) {
    int cap = m->ids_cap ? m->ids_cap : 1024;
    while (cap < need) cap *= 2;
    bpeSpan *str = realloc(m->str, (size_t)cap * sizeof(*str));
    if (!str) return -1;
    m->str = str;
    for (int i = m->ids_cap; i < cap; i++) m->str[i] = (bpeSpan){0, UINT32_MAX};
    m->ids_cap = cap;
    return 0;
}

int bpe_add_token(bpeModel *m, const char *s, size_t n, long long id, rlError *err) {
    if (id < 0 || id >= BPE_MAX_ID)
        return rl_error(err, RL_EMODEL, "model.vocab: id %lld for \"%.*s\" is out of range "
                        "(0..%d)", id, (int)(n < 64 ? n : 64), s, BPE_MAX_ID - 1);
    if (n >= UINT16_MAX || m->strs.len > UINT32_MAX - n)
        return rl_error(err, RL_EMODEL, "model.vocab: token of id %lld is too long", id);
    if (id >= m->ids_cap && bpe_grow_ids(m, id + 1)) return rl_error(err, RL_EMEMORY, "out of memory");
    if (m->str[id].len == UINT32_MAX) m->n_tokens++;
    m->str[id] = (bpeSpan){(uint32_t)m->strs.len, (uint32_t)n};
    if (bytebuf_append(&m->strs, s, n)) return rl_error(err, RL_EMEMORY, "out of memory");
    if (id + 1 > m->n_ids) m->n_ids = (int)id + 1;
    return 0;
}

int32_t bpe_lookup(const bpeModel *m, const char *s, size_t n) {
    if (!m->slots) return -1;
    uint64_t h = bpe_hash(s, n);
    uint32_t tag = (uint32_t)(h >> 32);
    for (uint32_t i = (uint32_t)h & m->slot_mask;; i = (i + 1) & m->slot_mask) {
        bpeSlot v = m->slots[i];
        if (!v.id1) return -1;
        uint32_t id = v.id1 - 1;
        if (v.tag == tag && m->str[id].len == n && !memcmp(m->strs.data + m->str[id].off, s, n))
            return (int32_t)id;
    }
}

int bpe_index(bpeModel *m, rlError *err) {
    uint32_t cap = 1024;
    while (cap < (uint32_t)m->n_tokens * 2) cap *= 2;
    m->slots = calloc(cap, sizeof(*m->slots));
    m->byte_off = calloc((size_t)m->n_ids + 1, sizeof(*m->byte_off));
    m->byte_len = calloc((size_t)m->n_ids + 1, sizeof(*m->byte_len));
    if (bytebuf_reserve(&m->bytes, m->strs.len)) return rl_error(err, RL_EMEMORY, "out of memory");
    if (!m->slots || !m->byte_off || !m->byte_len) return rl_error(err, RL_EMEMORY, "out of memory");
    m->slot_mask = cap - 1;
    /* Later ids win a duplicated string, as in Hugging Face's vocab map. */
    for (int id = 0; id < m->n_ids; id++) {
        if (m->str[id].len == UINT32_MAX) continue;
        const char *s = m->strs.data + m->str[id].off;
        size_t n = m->str[id].len;
        uint64_t h = bpe_hash(s, n);
        uint32_t i = (uint32_t)h & m->slot_mask;
        for (; m->slots[i].id1; i = (i + 1) & m->slot_mask) {
            uint32_t o = m->slots[i].id1 - 1;
            if (m->slots[i].tag == (uint32_t)(h >> 32) && m->str[o].len == n &&
                !memcmp(m->strs.data + m->str[o].off, s, n))
                break;
        }
        m->slots[i] = (bpeSlot){(uint32_t)id + 1, (uint32_t)(h >> 32)};
        m->byte_off[id] = (uint32_t)m->bytes.len;
        if (bytelevel_decode(s, n, &m->bytes) < 0) return rl_error(err, RL_EMEMORY, "out of memory");
        m->byte_len[id] = (uint32_t)(m->bytes.len - m->byte_off[id]);
    }
    for (int b = 0; b < 256; b++) {
        bytebuf one = {0};
        unsigned char byte = (unsigned char)b;
        if (bytelevel_encode(&byte, 1, &one)) {
            bytebuf_free(&one);
            return rl_error(err, RL_EMEMORY, "out of memory");
        }
        m->byte_id[b] = bpe_lookup(m, one.data, one.len);
        bytebuf_free(&one);
    }
    /* Merges number about as many as tokens: a table at most 2/3 full
     * keeps linear probes short. */
    uint64_t mcap = 1024;
    while (mcap * 2 < (uint64_t)m->n_tokens * 3) mcap *= 2;
    m->merges = malloc(mcap * sizeof(*m->merges));
    if (!m->merges) return rl_error(err, RL_EMEMORY, "out of memory");
    for (uint64_t i = 0; i < mcap; i++) m->merges[i] = (bpeMerge){0, 0, -1};
    m->merge_mask = mcap - 1;
    return 0;
}

static const bpeMerge *bpe_find_merge(const bpeModel *m, int32_t a, int32_t b) {
    uint64_t pair = (uint64_t)(uint32_t)a << 32 | (uint32_t)b;
    for (uint64_t i = bpe_pair_hash(pair) & m->merge_mask;; i = (i + 1) & m->merge_mask) {
        const bpeMerge *e = &m->merges[i];
        if (e->new_id < 0) return NULL;
        if (e->pair == pair) return e;
    }
}

static int bpe_grow_merges(bpeModel *m) {
    uint64_t cap = (m->merge_mask + 1) * 2;
    bpeMerge *t = malloc(cap * sizeof(*t));
    if (!t) return -1;
    for (uint64_t i = 0; i < cap; i++) t[i] = (bpeMerge){0, 0, -1};
    for (uint64_t i = 0; i <= m->merge_mask; i++) {
        if (m->merges[i].new_id < 0) continue;
        uint64_t j = bpe_pair_hash(m->merges[i].pair) & (cap - 1);
        while (t[j].new_id >= 0) j = (j + 1) & (cap - 1);
        t[j] = m->merges[i];
    }
    free(m->merges);
    m->merges = t;
    m->merge_mask = cap - 1;
    return 0;
}

int bpe_add_merge(bpeModel *m, const char *a, size_t an, const char *b, size_t bn, rlError *err) {
    int32_t ia = bpe_lookup(m, a, an), ib = bpe_lookup(m, b, bn);
    if (ia < 0 || ib < 0)
        return rl_error(err, RL_EMODEL, "model.merges[%d]: \"%.*s\" is not in the vocab",
                        m->n_merges, (int)(ia < 0 ? an : bn), ia < 0 ? a : b);
    char small[256];
    char *joined = an + bn <= sizeof(small) ? small : malloc(an + bn);
    if (!joined) return rl_error(err, RL_EMEMORY, "out of memory");
    memcpy(joined, a, an);
    memcpy(joined + an, b, bn);
    int32_t inew = bpe_lookup(m, joined, an + bn);
    if (joined != small) free(joined);
    if (inew < 0)
        return rl_error(err, RL_EMODEL, "model.merges[%d]: \"%.*s%.*s\" (the merged pair) is not in the vocab",
                        m->n_merges, (int)an, a, (int)bn, b);
    if ((uint64_t)(m->n_merges + 1) * 3 > (m->merge_mask + 1) * 2 && bpe_grow_merges(m))
        return rl_error(err, RL_EMEMORY, "out of memory");
    /* A repeated pair takes its last rank, as Hugging Face's map does. */
    uint64_t pair = (uint64_t)(uint32_t)ia << 32 | (uint32_t)ib;
    uint64_t i = bpe_pair_hash(pair) & m->merge_mask;
    while (m->merges[i].new_id >= 0 && m->merges[i].pair != pair) i = (i + 1) & m->merge_mask;
    m->merges[i] = (bpeMerge){pair, m->n_merges, inew};
    m->n_merges++;
    return 0;
}

/* ---- merging one word ---- */

typedef struct bpeCand {
    int32_t rank, pos, new_id;
} bpeCand;

static int bpe_cand_less(bpeCand a, bpeCand b) {
    return a.rank != b.rank ? a.rank < b.rank : a.pos < b.pos;
}

typedef struct bpeHeap {
    bpeCand *v;
    size_t n, cap;
} bpeHeap;

static int bpe_heap_push(bpeHeap *h, bpeCand c) {
    if (h->n == h->cap) {
        size_t cap = h->cap ? h->cap * 2 : 64;
        bpeCand *v = realloc(h->v, cap * sizeof(*v));
        if (!v) return -1;
        h->v = v;
        h->cap = cap;
    }
    size_t i = h->n++;
    while (i > 0 && bpe_cand_less(c, h->v[(i - 1) / 2])) {
        h->v[i] = h->v[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    h->v[i] = c;
    return 0;
}

static bpeCand bpe_heap_pop(bpeHeap *h) {
    bpeCand top = h->v[0], last = h->v[--h->n];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= h->n) break;
        if (c + 1 < h->n && bpe_cand_less(h->v[c + 1], h->v[c])) c++;
        if (!bpe_cand_less(h->v[c], last)) break;
        h->v[i] = h->v[c];
        i = c;
    }
    if (h->n) h->v[i] = last;
    return top;
}

/* Symbols form a doubly linked list over positions; a merged-away symbol
 * is marked dead (id -1) so stale queue entries can be recognised. */
static int bpe_merge_word(const bpeModel *m, const unsigned char *w, size_t n, bpeIds *out) {
    int32_t *id = malloc(n * sizeof(*id)), *prev = malloc(n * sizeof(*prev)),
            *next = malloc(n * sizeof(*next));
    bpeHeap heap = {0};
    int rc = -1;
    if (!id || !prev || !next) goto done;
    int32_t count = 0;
    for (size_t i = 0; i < n; i++) {
        int32_t t = m->byte_id[w[i]];
        if (t < 0) continue;   /* not in the vocab and no unk token: dropped */
        id[count] = t;
        prev[count] = count - 1;
        next[count] = count + 1;
        count++;
    }
    if (count) next[count - 1] = -1;
    for (int32_t i = 0; i + 1 < count; i++) {
        const bpeMerge *e = bpe_find_merge(m, id[i], id[i + 1]);
        if (e && bpe_heap_push(&heap, (bpeCand){e->rank, i, e->new_id})) goto done;
    }
    while (heap.n) {
        bpeCand top = bpe_heap_pop(&heap);
        int32_t p = top.pos;
        if (id[p] < 0 || next[p] < 0) continue;
        int32_t q = next[p];
        const bpeMerge *e = bpe_find_merge(m, id[p], id[q]);
        if (!e || e->new_id != top.new_id) continue;   /* stale: the pair changed */
        id[p] = top.new_id;
        id[q] = -1;
        next[p] = next[q];
        if (next[q] >= 0) prev[next[q]] = p;
        if (prev[p] >= 0) {
            e = bpe_find_merge(m, id[prev[p]], id[p]);
            if (e && bpe_heap_push(&heap, (bpeCand){e->rank, prev[p], e->new_id})) goto done;
        }
        if (next[p] >= 0) {
            e = bpe_find_merge(m, id[p], id[next[p]]);
            if (e && bpe_heap_push(&heap, (bpeCand){e->rank, p, e->new_id})) goto done;
        }
    }
    for (int32_t i = count ? 0 : -1; i >= 0; i = next[i])
        if (bpe_ids_push(out, id[i])) goto done;
    rc = 0;
done:
    free(id);
    free(prev);
    free(next);
    free(heap.v);
    return rc;
}

/* ---- the cache ---- */

static bpeCache *bpe_cache_get(const bpeModel *m) {
    bpeCache *c = __atomic_load_n(&((bpeModel *)m)->cache, __ATOMIC_ACQUIRE);
    if (c) return c;
    c = calloc(1, sizeof(*c));
    if (!c) return NULL;
    c->slots = calloc(BPE_CACHE_SLOTS, sizeof(*c->slots));
    if (!c->slots) {
        free(c);
        return NULL;
    }
    pthread_mutex_init(&c->lock, NULL);
    bpeCache *expected = NULL;
    if (!__atomic_compare_exchange_n(&((bpeModel *)m)->cache, &expected, c, 0, __ATOMIC_ACQ_REL,
                                     __ATOMIC_ACQUIRE)) {
        bpe_cache_free(c);
        return expected;
    }
    return c;
}

static int32_t *bpe_entry_ids(bpeCacheEntry *e) {
    size_t off = (sizeof(*e) + e->len + 3) & ~(size_t)3;
    return (int32_t *)((char *)e + off);
}

/* Look w up; on a hit append its ids and return 1. */
static int bpe_cache_find(bpeCache *c, uint64_t h, const unsigned char *w, size_t n, bpeIds *out) {
    int found = 0;
    pthread_mutex_lock(&c->lock);
    for (uint32_t i = (uint32_t)h & (BPE_CACHE_SLOTS - 1); c->slots[i]; i = (i + 1) & (BPE_CACHE_SLOTS - 1)) {
        bpeCacheEntry *e = c->slots[i];
        if (e->hash != h || e->len != n || memcmp(e + 1, w, n)) continue;
        int32_t *ids = bpe_entry_ids(e);
        found = 1;
        for (int k = 0; k < e->n_ids && found; k++)
            if (bpe_ids_push(out, ids[k])) found = -1;
        break;
    }
    pthread_mutex_unlock(&c->lock);
    return found;
}

/* Once full the cache stops growing, as Hugging Face's does: the common
 * words of a language are met early. */
static void bpe_cache_put(bpeCache *c, uint64_t h, const unsigned char *w, size_t n,
                          const int32_t *ids, int n_ids) {
    size_t off = (sizeof(bpeCacheEntry) + n + 3) & ~(size_t)3;
    pthread_mutex_lock(&c->lock);
    if (c->count < BPE_CACHE_MAX) {
        uint32_t i = (uint32_t)h & (BPE_CACHE_SLOTS - 1);
        int dup = 0;
        for (; c->slots[i]; i = (i + 1) & (BPE_CACHE_SLOTS - 1)) {
            bpeCacheEntry *e = c->slots[i];
            if (e->hash == h && e->len == n && !memcmp(e + 1, w, n)) { dup = 1; break; }
        }
        bpeCacheEntry *e = dup ? NULL : malloc(off + (size_t)n_ids * sizeof(int32_t));
        if (e) {
            e->hash = h;
            e->len = (uint16_t)n;
            e->n_ids = (uint16_t)n_ids;
            memcpy(e + 1, w, n);
            memcpy(bpe_entry_ids(e), ids, (size_t)n_ids * sizeof(int32_t));
            c->slots[i] = e;
            c->count++;
        }
    }
    pthread_mutex_unlock(&c->lock);
}

int bpe_encode_word(const bpeModel *m, const unsigned char *w, size_t n, bpeIds *out,
                    rlError *err) {
    if (n == 0) return 0;
    if (m->ignore_merges) {
        bytebuf s = {0};
        if (bytelevel_encode(w, n, &s)) {
            bytebuf_free(&s);
            return rl_error(err, RL_EMEMORY, "out of memory");
        }
        int32_t whole = bpe_lookup(m, s.data, s.len);
        bytebuf_free(&s);
        if (whole >= 0) return bpe_ids_push(out, whole) ? rl_error(err, RL_EMEMORY, "out of memory") : 0;
    }
    if (n == 1 && m->byte_id[w[0]] >= 0)
        return bpe_ids_push(out, m->byte_id[w[0]]) ? rl_error(err, RL_EMEMORY, "out of memory") : 0;
    bpeCache *c = n <= BPE_CACHE_WORD ? bpe_cache_get(m) : NULL;
    uint64_t h = c ? bpe_hash(w, n) : 0;
    if (c) {
        int hit = bpe_cache_find(c, h, w, n, out);
        if (hit < 0) return rl_error(err, RL_EMEMORY, "out of memory");
        if (hit) return 0;
    }
    int start = out->n;
    if (bpe_merge_word(m, w, n, out)) return rl_error(err, RL_EMEMORY, "out of memory");
    if (c) bpe_cache_put(c, h, w, n, out->v + start, out->n - start);
    return 0;
}
