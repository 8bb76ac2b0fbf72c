/* block.h: the KV block pool and the prefix cache over it.
 *
 * The scheduler hands out block numbers; the engine owns the memory they
 * index.  A block is reference counted: several sequences share it when they
 * share a prefix (n > 1 samples of one prompt, or later requests hitting the
 * prefix cache).  A full block whose KV is computed may be registered in the
 * prefix cache under a hash chain (its parent's hash + its own token ids).
 * When its last reference goes it stays cached, evictable in least recently
 * used order, until the pool needs the block for something else.
 *
 * A lookup never trusts the hash alone: it compares the block's tokens and
 * checks that the block was registered under the very parent block (number
 * and registration generation) the caller matched before, so a collision or
 * a parent evicted and reused can never hand out the wrong KV. */
#ifndef RL_SCHED_BLOCK_H
#define RL_SCHED_BLOCK_H

#include <stdint.h>

typedef struct rlBlockPool rlBlockPool;

typedef struct rlBlockCounts {
    int used;       /* referenced by a sequence */
    int cached;     /* unreferenced, registered: reusable by a prefix hit, evictable */
    int free;       /* unreferenced, unregistered */
    int total;
} rlBlockCounts;

/* NULL when out of memory. */
rlBlockPool *block_pool_create(int n_blocks, int block_size);
void block_pool_free(rlBlockPool *p);

/* Blocks an allocation can get now: free plus evictable cached ones. */
int block_pool_available(const rlBlockPool *p);
/* A block with one reference, evicting the least recently used cached block
 * when none is free; -1 when every block is referenced. */
int block_alloc(rlBlockPool *p);
void block_ref(rlBlockPool *p, int b);
/* Drop one reference; at zero a cached block becomes the most recently used
 * evictable one, an uncached one returns to the free list. */
void block_unref(rlBlockPool *p, int b);
int block_refcount(const rlBlockPool *p, int b);

/* The cached block holding tokens[0 .. block_size) right after block parent
 * (-1: at the start of a sequence), referenced for the caller; -1 on a miss. */
int block_lookup(rlBlockPool *p, int parent, const int32_t *tokens);
/* Register full, computed block b (holding tokens, after parent) in the
 * cache.  Does nothing when an equal block is already registered or when the
 * parent is not registered (the chain is broken there). */
void block_register(rlBlockPool *p, int b, int parent, const int32_t *tokens);

void block_pool_counts(const rlBlockPool *p, rlBlockCounts *c);

#endif
