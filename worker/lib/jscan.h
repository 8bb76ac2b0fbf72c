/* jscan.h: a pull reader for one large JSON document in memory.
 *
 * tokenizer.json is 11 MB, nearly all of it the vocab object and the merges
 * array.  Building a jansson tree of it costs about half a second (a hash
 * table and a malloc per key); reading those two values straight into the
 * tokenizer's own tables takes a small fraction of that.  The small parts
 * of the file are still handed to jansson (jscan_value_span), so this
 * reader only needs strings, integers, and walking objects and arrays.
 * The request codec reads a refused job's id with it too: it skips values
 * without building them, however deep or large (no recursion). */
#ifndef RL_JSCAN_H
#define RL_JSCAN_H

#include <stddef.h>

#include "worker/lib/bytebuf.h"

typedef struct jscan {
    const char *start;
    const char *p;
    const char *end;
    char err[256];      /* set when a call returns -1 */
} jscan;

void jscan_init(jscan *j, const char *s, size_t n);
/* The next non-blank character, without consuming it; 0 at the end. */
int jscan_peek(jscan *j);
/* Object members: call with *first = 1 after nothing, then repeatedly.
 * Returns 1 with the key in *key (":" consumed), 0 after the closing
 * brace, -1 on a syntax error.  The opening brace is consumed on the first
 * call. */
int jscan_object_next(jscan *j, int *first, bytebuf *key);
/* Array elements, the same way: 1 when an element follows, 0 after "]". */
int jscan_array_next(jscan *j, int *first);
/* A string, unescaped, into *out (cleared first). */
int jscan_string(jscan *j, bytebuf *out);
int jscan_int(jscan *j, long long *v);
/* Skip one value of any kind, reporting where it lies. */
int jscan_value_span(jscan *j, const char **at, size_t *len);
/* 1-based line of the reader's position, for error messages. */
int jscan_line(const jscan *j);

#endif
