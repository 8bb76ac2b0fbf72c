/* bpe.h: the byte-level BPE model of a tokenizer.json: the vocab, the merge
 * ranks, and turning one pre-token (raw bytes) into ids.
 *
 * Merging follows Hugging Face's BPE::merge_word step for step: all
 * adjacent pairs go into a priority queue ordered by (rank, position); the
 * best is merged and its new neighbours' pairs queued.  That is
 * O(n log n) in the pre-token's length, so a megabyte of one repeated
 * character is fine.  Results for short pre-tokens are cached. */
#ifndef RL_BPE_H
#define RL_BPE_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "kernels/error.h"
#include "worker/lib/bytebuf.h"

/* Token ids are below this: the largest vocabularies hold a few hundred
 * thousand, and an id sets the size of the by-id tables, so a damaged file's
 * id of a billion must be refused before it asks for gigabytes. */
#define BPE_MAX_ID (1 << 24)

typedef struct bpeIds {
    int32_t *v;
    int n, cap;
} bpeIds;

int bpe_ids_push(bpeIds *ids, int32_t id);

typedef struct bpeMerge {
    uint64_t pair;      /* left id << 32 | right id */
    int32_t rank;
    int32_t new_id;     /* -1: an empty slot */
} bpeMerge;

typedef struct bpeCache bpeCache;

typedef struct bpeSpan {
    uint32_t off, len;  /* together: one cache line visit per lookup */
} bpeSpan;

typedef struct bpeSlot {
    uint32_t id1;       /* id + 1; 0 = empty */
    uint32_t tag;       /* high hash bits: most mismatches end here */
} bpeSlot;

typedef struct bpeModel {
    /* vocab: token strings as tokenizer.json spells them (byte-level) */
    bytebuf strs;
    bpeSpan *str;                   /* by id; len = UINT32_MAX: no such id */
    bpeSlot *slots;                 /* string hash */
    uint32_t slot_mask;
    int n_ids;                      /* highest id + 1 */
    int ids_cap;
    int n_tokens;
    /* what each id decodes to, in raw bytes */
    bytebuf bytes;
    uint32_t *byte_off, *byte_len;
    int32_t byte_id[256];           /* single-byte tokens: where merging starts */
    /* merges */
    bpeMerge *merges;
    uint64_t merge_mask;
    int n_merges;
    int ignore_merges;
    bpeCache *cache;
} bpeModel;

void bpe_init(bpeModel *m);
void bpe_free(bpeModel *m);
/* Loading: every token, then bpe_index(), then every merge in rank order. */
int bpe_add_token(bpeModel *m, const char *s, size_t n, long long id, rlError *err);
int bpe_index(bpeModel *m, rlError *err);
int bpe_add_merge(bpeModel *m, const char *a, size_t an, const char *b, size_t bn, rlError *err);
/* The id of a token string, or -1. */
int32_t bpe_lookup(const bpeModel *m, const char *s, size_t n);

/* Append the ids of one pre-token.  Safe to call from several threads. */
int bpe_encode_word(const bpeModel *m, const unsigned char *w, size_t n, bpeIds *out,
                    rlError *err);

#endif
