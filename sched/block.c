/* block.c: the reference-counted KV block pool and its prefix cache.
 *
 * Every operation is O(1) except a cache lookup or registration, which walks
 * one hash bucket (the table has at least as many buckets as blocks, so a
 * bucket holds about one entry) and compares block_size tokens.  Free blocks
 * sit on a stack; unreferenced cached blocks on a doubly linked LRU list, so
 * both taking the oldest and pulling one out on a hit are constant time. */
#include "sched/block.h"

#include <stdlib.h>
#include <string.h>

typedef struct rlBlockMeta {
    int ref;
    int registered;     /* in the hash table */
    uint32_t gen;       /* bumped on every registration: identifies this content */
    uint64_t hash;      /* chain hash, valid while registered */
    int parent;         /* registered after this block (-1: first block) ... */
    uint32_t parent_gen;/* ... in this generation of it */
    int hnext;          /* next block in the same hash bucket */
    int lru_prev, lru_next;
} rlBlockMeta;

struct rlBlockPool {
    int n_blocks, block_size;
    rlBlockMeta *meta;
    int32_t *tokens;    /* [n_blocks * block_size] contents of registered blocks */
    int *free_stack;
    int n_free;
    int lru_head, lru_tail;  /* oldest, newest unreferenced cached block */
    int n_lru;
    int *buckets;
    uint64_t bucket_mask;
};

static uint64_t block_mix(uint64_t h, uint64_t v) {
    h ^= v + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2);
    h *= 0xff51afd7ed558ccdULL;
    return h ^ (h >> 33);
}

/* The hash chain: a block's key covers its parent's key, hence the whole prefix. */
static uint64_t block_hash(uint64_t parent_hash, const int32_t *tokens, int n) {
    uint64_t h = block_mix(0x51ed270b27a4b3c1ULL, parent_hash);
    for (int i = 0; i < n; i++) h = block_mix(h, (uint32_t)tokens[i]);
    return h;
}

rlBlockPool *block_pool_create(int n_blocks, int block_size) {
    if (n_blocks <= 0 || block_size <= 0) return NULL;
    rlBlockPool *p = calloc(1, sizeof(*p));
    if (!p) return NULL;
    p->n_blocks = n_blocks;
    p->block_size = block_size;
    uint64_t nb = 1;
    while (nb < (uint64_t)n_blocks) nb <<= 1;
    p->bucket_mask = nb - 1;
    p->meta = calloc((size_t)n_blocks, sizeof(*p->meta));
    p->tokens = malloc((size_t)n_blocks * (size_t)block_size * sizeof(int32_t));
    p->free_stack = malloc((size_t)n_blocks * sizeof(int));
    p->buckets = malloc(nb * sizeof(int));
    if (!p->meta || !p->tokens || !p->free_stack || !p->buckets) {
        block_pool_free(p);
        return NULL;
    }
    for (uint64_t i = 0; i < nb; i++) p->buckets[i] = -1;
    /* Stacked so that block 0 is handed out first: easier to read in tests. */
    for (int i = 0; i < n_blocks; i++) {
        p->free_stack[i] = n_blocks - 1 - i;
        p->meta[i].parent = -1;
        p->meta[i].lru_prev = p->meta[i].lru_next = -1;
        p->meta[i].hnext = -1;
    }
    p->n_free = n_blocks;
    p->lru_head = p->lru_tail = -1;
    return p;
}

void block_pool_free(rlBlockPool *p) {
    if (!p) return;
    free(p->meta);
    free(p->tokens);
    free(p->free_stack);
    free(p->buckets);
    free(p);
}

int block_pool_available(const rlBlockPool *p) { return p->n_free + p->n_lru; }

static void lru_remove(rlBlockPool *p, int b) {
    rlBlockMeta *m = &p->meta[b];
    if (m->lru_prev >= 0) p->meta[m->lru_prev].lru_next = m->lru_next;
    else p->lru_head = m->lru_next;
    if (m->lru_next >= 0) p->meta[m->lru_next].lru_prev = m->lru_prev;
    else p->lru_tail = m->lru_prev;
    m->lru_prev = m->lru_next = -1;
    p->n_lru--;
}

static void lru_append(rlBlockPool *p, int b) {
    rlBlockMeta *m = &p->meta[b];
    m->lru_prev = p->lru_tail;
    m->lru_next = -1;
    if (p->lru_tail >= 0) p->meta[p->lru_tail].lru_next = b;
    else p->lru_head = b;
    p->lru_tail = b;
    p->n_lru++;
}

static void hash_remove(rlBlockPool *p, int b) {
    int *link = &p->buckets[p->meta[b].hash & p->bucket_mask];
    while (*link != b) link = &p->meta[*link].hnext;
    *link = p->meta[b].hnext;
    p->meta[b].hnext = -1;
    p->meta[b].registered = 0;
}

int block_alloc(rlBlockPool *p) {
    int b;
    if (p->n_free > 0) {
        b = p->free_stack[--p->n_free];
    } else if (p->lru_head >= 0) {
        b = p->lru_head;
        lru_remove(p, b);
        hash_remove(p, b);
    } else {
        return -1;
    }
    p->meta[b].ref = 1;
    return b;
}

void block_ref(rlBlockPool *p, int b) {
    if (p->meta[b].ref++ == 0 && p->meta[b].registered) lru_remove(p, b);
}

void block_unref(rlBlockPool *p, int b) {
    if (--p->meta[b].ref > 0) return;
    if (p->meta[b].registered) lru_append(p, b);
    else p->free_stack[p->n_free++] = b;
}

int block_refcount(const rlBlockPool *p, int b) { return p->meta[b].ref; }

/* The registered block equal to (parent, tokens), or -1. */
static int block_find(const rlBlockPool *p, int parent, uint64_t h, const int32_t *tokens) {
    uint32_t parent_gen = parent >= 0 ? p->meta[parent].gen : 0;
    size_t bytes = (size_t)p->block_size * sizeof(int32_t);
    for (int b = p->buckets[h & p->bucket_mask]; b >= 0; b = p->meta[b].hnext) {
        const rlBlockMeta *m = &p->meta[b];
        if (m->hash == h && m->parent == parent && m->parent_gen == parent_gen &&
            !memcmp(p->tokens + (size_t)b * (size_t)p->block_size, tokens, bytes))
            return b;
    }
    return -1;
}

int block_lookup(rlBlockPool *p, int parent, const int32_t *tokens) {
    if (parent >= 0 && !p->meta[parent].registered) return -1;
    uint64_t h = block_hash(parent >= 0 ? p->meta[parent].hash : 0, tokens, p->block_size);
    int b = block_find(p, parent, h, tokens);
    if (b >= 0) block_ref(p, b);
    return b;
}

void block_register(rlBlockPool *p, int b, int parent, const int32_t *tokens) {
    rlBlockMeta *m = &p->meta[b];
    if (m->registered || (parent >= 0 && !p->meta[parent].registered)) return;
    uint64_t h = block_hash(parent >= 0 ? p->meta[parent].hash : 0, tokens, p->block_size);
    if (block_find(p, parent, h, tokens) >= 0) return;
    memcpy(p->tokens + (size_t)b * (size_t)p->block_size, tokens,
           (size_t)p->block_size * sizeof(int32_t));
    m->registered = 1;
    m->gen++;
    m->hash = h;
    m->parent = parent;
    m->parent_gen = parent >= 0 ? p->meta[parent].gen : 0;
    size_t slot = h & p->bucket_mask;
    m->hnext = p->buckets[slot];
    p->buckets[slot] = b;
}

void block_pool_counts(const rlBlockPool *p, rlBlockCounts *c) {
    c->total = p->n_blocks;
    c->free = p->n_free;
    c->cached = p->n_lru;
    c->used = p->n_blocks - p->n_free - p->n_lru;
}
