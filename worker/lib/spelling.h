/* spelling.h: how far a typed word is from a known one, so every refusal of
 * a misspelt name (a command-line flag, a request field) can say what was
 * meant with one rule. */
#ifndef RL_SPELLING_H
#define RL_SPELLING_H

#include <stddef.h>

/* Edits (insert, delete, change, swap two neighbours) from a to b; words of
 * 64 bytes or more count as 64 edits apart. */
int spelling_distance(const char *a, size_t la, const char *b, size_t lb);

/* The most edits a word of len bytes may be from a name it is taken for. */
static inline int spelling_most(size_t len) { return 2 + (int)len / 8; }

/* Append to buf (a NUL-terminated string of cap bytes) the names of
 * names[0..n) within spelling_most edits of word, closest first, as
 * "'a', 'b'"; returns how many were listed. */
int spelling_near(const char *word, const char *const *names, int n, char *buf, size_t cap);

#endif
