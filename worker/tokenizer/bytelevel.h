/* bytelevel.h: GPT-2's byte-level alphabet, used by Qwen's tokenizer.json.
 *
 * Every byte is written as one printable character (printable Latin-1
 * bytes as themselves, the others as U+0100 onwards), so vocab entries
 * like "Ġthe" stand for the bytes " the".  redlm works on raw bytes and
 * converts only while loading the vocab. */
#ifndef RL_BYTELEVEL_H
#define RL_BYTELEVEL_H

#include <stddef.h>

#include "worker/lib/bytebuf.h"

/* Append the bytes a byte-level token string stands for.  Returns 1 when
 * every character belongs to the alphabet; 0 when one does not, in which
 * case the string's own UTF-8 is appended instead (Hugging Face's
 * ByteLevel decoder does the same); -1 when out of memory. */
int bytelevel_decode(const char *s, size_t n, bytebuf *out);

/* Append the byte-level string for raw bytes (the inverse). */
int bytelevel_encode(const unsigned char *s, size_t n, bytebuf *out);

#endif
