/* codec.h: a stream entry's payload (JSON or msgpack) <-> a jansson value.
 *
 * Jobs arrive as `json` or `msgpack` fields; both are turned into one json_t
 * so a single validator (request.c) serves both, and replies are written back
 * in the encoding the job used.  Decoding never trusts its input: bad bytes
 * give a protocol error code and a message, never a crash. */
#ifndef RL_CODEC_H
#define RL_CODEC_H

#include <jansson.h>
#include <stddef.h>

#include "kernels/error.h"

typedef enum rlEncoding { RL_ENC_JSON = 0, RL_ENC_MSGPACK = 1 } rlEncoding;

/* The stream field name for an encoding ("json", "msgpack"), and back:
 * returns -1 for a field name that is neither. */
const char *codec_field_name(rlEncoding enc);
int codec_field_encoding(const char *name, size_t len, rlEncoding *enc);

/* Decode a payload.  Strings with invalid UTF-8 are repaired (one U+FFFD per
 * maximal ill-formed subpart, worker/lib/utf8.h) and
 * *bad_utf8 set, so the caller can still read the job's id to answer it with
 * `invalid_utf8`.  On failure returns NULL, sets *code to the protocol's
 * error code ("invalid_encoding" or "invalid_request") and fills err. */
json_t *codec_decode(rlEncoding enc, const char *buf, size_t len, int *bad_utf8,
                     const char **code, rlError *err);

/* Best effort, to answer a payload codec_decode refused (duplicate keys,
 * NaN, ext types, ...): its top-level "id" and "reply_to" strings, in an
 * object holding only those that could be read.  NULL when out of memory. */
json_t *codec_peek(rlEncoding enc, const char *buf, size_t len);

/* Encode a value; *buf is malloc'd (the caller frees it). */
int codec_encode(rlEncoding enc, const json_t *v, char **buf, size_t *len, rlError *err);

#endif
