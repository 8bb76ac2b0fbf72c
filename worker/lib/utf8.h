/* utf8.h: the one home of UTF-8 in redlm: validation and lossy repair, used
 * by the tokenizer (decode, detokenizer, tokenizer.json), request validation
 * and payload decoding alike, so text is judged and repaired by one rule
 * everywhere.  The rule is Unicode's recommended practice ("substitution of
 * maximal subparts"): every maximal prefix of a would-be character that
 * cannot be completed becomes one U+FFFD, as Rust's
 * String::from_utf8_lossy, Python's bytes.decode('utf-8', 'replace') and
 * Hugging Face tokenizers' decoders do. */
#ifndef RL_UTF8_H
#define RL_UTF8_H

#include <stddef.h>

#include "worker/lib/bytebuf.h"

typedef enum utf8Kind {
    UTF8_CHAR,   /* a complete, valid character */
    UTF8_BAD,    /* an invalid maximal subpart: one U+FFFD */
    UTF8_SHORT   /* input ends inside a character that could still be valid */
} utf8Kind;

/* Classify the bytes at s (n > 0); *len is how many bytes that covers. */
utf8Kind utf8_next(const unsigned char *s, size_t n, size_t *len);

/* 1 when s[0..n) is valid UTF-8; otherwise 0 and *bad_at is the offset of
 * the first byte that is not. */
int utf8_valid(const char *s, size_t n, size_t *bad_at);

/* Append s[0..n) to out with every maximal ill-formed subpart replaced by
 * one U+FFFD; a trailing incomplete character is replaced too.  Returns how
 * many U+FFFD were written (0: s was valid and is copied as is), or -1 when
 * out of memory. */
int utf8_lossy_append(bytebuf *out, const char *s, size_t n);

#define UTF8_REPLACEMENT "\xEF\xBF\xBD"

#endif
