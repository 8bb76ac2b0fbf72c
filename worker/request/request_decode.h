/* request_decode.h: a request's bytes -> a validated rlRequest, the one way
 * in for both front doors.  The Redis intake (a stream entry's json or
 * msgpack payload) and `redlm generate` (one JSON line) both call
 * request_decode, so the same bad input gets the same error code and
 * message wherever it arrives. */
#ifndef RL_REQUEST_DECODE_H
#define RL_REQUEST_DECODE_H

#include <stddef.h>

#include "kernels/error.h"
#include "worker/request/codec.h"
#include "worker/request/request.h"

/* Ids longer than this are not answered at all: a Redis reply stream's name
 * would be the producer's bytes, and nobody waits on a megabyte key. */
#define REQUEST_ANSWER_ID_MAX 1024

typedef struct rlDecoded {
    const char *code;   /* NULL when the request is valid, else the protocol's
                           error code: invalid_encoding (not JSON / msgpack),
                           invalid_utf8, invalid_request, internal (memory) */
    rlError err;        /* the message naming the field, when code is set */
    /* Where to answer, whenever the payload could be read at all (a bad
     * request too, and a refused payload whose id still reads: codec_peek): its id when a string of 1..REQUEST_ANSWER_ID_MAX bytes
     * without NUL, and then its reply_to when a non-empty string without
     * NUL; else NULL.  NUL-terminated, malloc'd. */
    char *id, *reply_to;
} rlDecoded;

/* Decode and validate buf[0..len) in encoding enc.  Returns the request
 * (malloc'd, request_free + free it), or NULL with d->code set.  Either way
 * d is filled; release it with request_decoded_free. */
rlRequest *request_decode(rlEncoding enc, const char *buf, size_t len, rlDecoded *d);
void request_decoded_free(rlDecoded *d);

#endif
