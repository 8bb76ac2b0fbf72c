/* added.c: see added.h.  A handful of tokens, all but a few starting with
 * '<': a first-byte table skips almost every position, so a plain check
 * of the candidates beats building an automaton. */
#include "worker/tokenizer/added.h"

#include <stdlib.h>
#include <string.h>

int added_add(addedSet *s, const char *content, size_t len, int32_t id) {
    if (len == 0) return 0;   /* never matches anything */
    addedToken *v = realloc(s->v, (size_t)(s->n + 1) * sizeof(*v));
    if (!v) return -1;
    s->v = v;
    char *c = malloc(len + 1);
    if (!c) return -1;
    memcpy(c, content, len);
    c[len] = 0;
    /* A repeated content keeps its last id. */
    for (int i = 0; i < s->n; i++) {
        if (s->v[i].len == len && !memcmp(s->v[i].content, c, len)) {
            free(s->v[i].content);
            s->v[i] = (addedToken){c, len, id};
            return 0;
        }
    }
    s->v[s->n++] = (addedToken){c, len, id};
    s->first[(unsigned char)c[0]] = 1;
    if (!s->min_len || len < s->min_len) s->min_len = len;
    return 0;
}

void added_free(addedSet *s) {
    for (int i = 0; i < s->n; i++) free(s->v[i].content);
    free(s->v);
    memset(s, 0, sizeof(*s));
}

int added_find(const addedSet *s, const char *text, size_t n, size_t *at, size_t *len,
               int32_t *id) {
    if (!s->n || n < s->min_len) return 0;
    const unsigned char *p = (const unsigned char *)text;
    for (size_t i = 0; i + s->min_len <= n; i++) {
        if (!s->first[p[i]]) continue;
        size_t best = 0;
        for (int k = 0; k < s->n; k++) {
            const addedToken *t = &s->v[k];
            if (t->len > best && t->len <= n - i && !memcmp(t->content, text + i, t->len)) {
                best = t->len;
                *id = t->id;
            }
        }
        if (best) {
            *at = i;
            *len = best;
            return 1;
        }
    }
    return 0;
}
