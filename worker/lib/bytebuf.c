/* bytebuf.c: growable byte strings; see bytebuf.h. */
#include "worker/lib/bytebuf.h"

#include <stdlib.h>
#include <string.h>

int bytebuf_reserve(bytebuf *b, size_t n) {
    if (b->data && b->len + n < b->cap) return 0;
    if (n > ((size_t)-1 >> 2) - b->len) return -1;
    size_t cap = b->cap ? b->cap : 64;
    while (cap <= b->len + n) cap *= 2;
    char *p = realloc(b->data, cap);
    if (!p) return -1;
    b->data = p;
    b->cap = cap;
    b->data[b->len] = 0;
    return 0;
}

int bytebuf_append(bytebuf *b, const void *p, size_t n) {
    if (bytebuf_reserve(b, n)) return -1;
    if (n) memcpy(b->data + b->len, p, n);
    b->len += n;
    b->data[b->len] = 0;
    return 0;
}

int bytebuf_putc(bytebuf *b, char c) {
    return bytebuf_append(b, &c, 1);
}

void bytebuf_clear(bytebuf *b) {
    b->len = 0;
    if (b->data) b->data[0] = 0;
}

void bytebuf_consume(bytebuf *b, size_t n) {
    if (n >= b->len) {
        bytebuf_clear(b);
        return;
    }
    memmove(b->data, b->data + n, b->len - n);
    b->len -= n;
    b->data[b->len] = 0;
}

char *bytebuf_steal(bytebuf *b, size_t *len) {
    if (!b->data && bytebuf_reserve(b, 0)) return NULL;
    char *p = b->data;
    if (len) *len = b->len;
    b->data = NULL;
    b->len = b->cap = 0;
    return p;
}

void bytebuf_free(bytebuf *b) {
    free(b->data);
    b->data = NULL;
    b->len = b->cap = 0;
}
