/* bytebuf.h: a growable byte string, the one output type of the tokenizer
 * code (decoded text, JSON lines, detokenizer chunks).  Always kept
 * NUL-terminated so text can be handed out as a C string. */
#ifndef RL_BYTEBUF_H
#define RL_BYTEBUF_H

#include <stddef.h>

typedef struct bytebuf {
    char *data;     /* NULL until the first append */
    size_t len;
    size_t cap;
} bytebuf;

/* Make room for n more bytes (plus the NUL); -1 when out of memory. */
int bytebuf_reserve(bytebuf *b, size_t n);
int bytebuf_append(bytebuf *b, const void *p, size_t n);
int bytebuf_putc(bytebuf *b, char c);
void bytebuf_clear(bytebuf *b);                 /* len = 0, keeps the memory */
void bytebuf_consume(bytebuf *b, size_t n);     /* drop the first n bytes */
char *bytebuf_steal(bytebuf *b, size_t *len);   /* hand the memory to the caller */
void bytebuf_free(bytebuf *b);

#endif
