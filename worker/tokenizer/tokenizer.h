/* tokenizer.h: Hugging Face tokenizer.json (Qwen byte-level BPE) and
 * incremental detokenizing for streamed replies.
 *
 * Token ids must be exactly what Hugging Face `tokenizers` gives: any
 * difference changes model outputs and scores. */
#ifndef RL_TOKENIZER_H
#define RL_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/error.h"

typedef struct rlTokenizer rlTokenizer;

/* Load a tokenizer.json; anything outside the supported subset is refused
 * with an error naming the unsupported part. */
rlTokenizer *tokenizer_load(const char *path, rlError *err);
void tokenizer_free(rlTokenizer *t);
int tokenizer_vocab_size(const rlTokenizer *t);   /* highest id + 1, added tokens included */

/* text -> ids, as tokenizer.encode(text) (special tokens in the text are
 * recognised).  Invalid UTF-8 fails with RL_EINPUT and a message starting
 * "invalid_utf8:".  *ids is malloc'd; the caller frees it. */
int tokenizer_encode(const rlTokenizer *t, const char *text, size_t len, int32_t **ids,
                     int *n_ids, rlError *err);

/* An added token marked "special" in tokenizer.json (skip_special_tokens). */
int tokenizer_is_special(const rlTokenizer *t, int32_t id);
/* ids -> text (special tokens included), invalid UTF-8 replaced by U+FFFD as
 * Rust's String::from_utf8_lossy.  *text is malloc'd and NUL-terminated. */
int tokenizer_decode(const rlTokenizer *t, const int32_t *ids, int n_ids, char **text,
                     size_t *len, rlError *err);

/* Incremental detokenizer for one generated sequence.  Emits only complete
 * UTF-8; the concatenation of everything emitted equals the full decode of
 * the pushed ids (minus a stop string and what follows it).  Text that could
 * still be the start of a stop string is held back until it cannot. */
typedef struct rlDetok rlDetok;

/* Flags of detok_create, vLLM's request fields of the same names. */
enum {
    RL_DETOK_SKIP_SPECIAL = 1 << 0, /* added tokens marked "special" leave no text */
    RL_DETOK_KEEP_STOP = 1 << 1,    /* include_stop_str_in_output: the stop string stays */
};
rlDetok *detok_create(const rlTokenizer *t, char *const *stops, int n_stops, unsigned flags,
                      rlError *err);
/* vLLM's min_tokens for stop strings: none is looked for until more than n
 * ids were pushed (one completed earlier is text like any other; one that
 * began earlier and completes later ends the sequence). */
void detok_min_tokens(rlDetok *d, int n);
/* Feed one generated id.  Sets *stopped to 1 + the index (in the stops
 * given) of a stop string that is now complete, 0 while none is
 * (generation must end; the stop string, unless kept, and anything after it
 * are dropped). */
int detok_push(rlDetok *d, int32_t id, int *stopped, rlError *err);
/* Text ready since the last take; valid until the next call on d. */
const char *detok_take(rlDetok *d, size_t *len);
/* End of sequence: release held text (a trailing incomplete UTF-8 sequence
 * becomes U+FFFD) and return what was not yet taken. */
const char *detok_finish(rlDetok *d, size_t *len);
void detok_free(rlDetok *d);

#endif
