/* pretok.h: the Split pre-tokenizer (behavior "Isolated"): a regex taken
 * from tokenizer.json cuts the text into pieces; the matches and the text
 * between them are all pieces, in order.  Hugging Face runs the pattern
 * with Oniguruma; PCRE2 with UTF and Unicode properties reads Qwen's
 * pattern the same way. */
#ifndef RL_PRETOK_H
#define RL_PRETOK_H

#include <stddef.h>

#include "kernels/error.h"

typedef struct pretok {
    void *code;     /* pcre2_code_8 */
} pretok;

/* is_regex = 0: the pattern is a literal string ({"String": ...}). */
int pretok_compile(pretok *p, const char *pattern, size_t len, int is_regex, rlError *err);
void pretok_free(pretok *p);

typedef int (*pretokPieceFn)(void *ctx, const char *s, size_t n, rlError *err);

/* Call fn for every piece of s[0..n), which must be valid UTF-8. */
int pretok_split(const pretok *p, const char *s, size_t n, pretokPieceFn fn, void *ctx,
                 rlError *err);

#endif
