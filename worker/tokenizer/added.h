/* added.h: the added tokens of a tokenizer.json (<|im_start|>, <think>,
 * ...), found in text before anything else runs, leftmost first and the
 * longest at a position, as Hugging Face's Aho-Corasick matcher does. */
#ifndef RL_ADDED_H
#define RL_ADDED_H

#include <stddef.h>
#include <stdint.h>

typedef struct addedToken {
    char *content;
    size_t len;
    int32_t id;
} addedToken;

typedef struct addedSet {
    addedToken *v;
    int n;
    size_t min_len;
    uint8_t first[256];   /* 1 when some token starts with this byte */
} addedSet;

int added_add(addedSet *s, const char *content, size_t len, int32_t id);   /* -1: no memory */
void added_free(addedSet *s);
/* The first match in text[0..n): 1 with its offset, length and id; 0 when none. */
int added_find(const addedSet *s, const char *text, size_t n, size_t *at, size_t *len,
               int32_t *id);

#endif
