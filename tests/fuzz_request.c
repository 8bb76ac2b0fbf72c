/* fuzz_request.c: libFuzzer target for the job decoder and validator
 * (`make fuzz`): what a producer puts in a stream entry.
 *
 * The first byte picks the encoding (bit 0: JSON or msgpack); the rest is
 * the payload.  Decoding must either give an object or a protocol error
 * code with a message; a decoded value must survive encoding back and
 * decoding again; validation must either fill the request or name a code;
 * reading just the id of a refused payload must never fail.  Declared
 * sizes far beyond the bytes (a 5-byte array header claiming billions of
 * elements) must be refused without allocating them: the run's RSS limit
 * (-rss_limit_mb) catches any that is not. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "worker/request/codec.h"
#include "worker/request/request.h"

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size);

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size) {
    if (size < 1) return 0;
    rlEncoding enc = data[0] & 1 ? RL_ENC_MSGPACK : RL_ENC_JSON;
    const char *buf = (const char *)data + 1;
    size_t len = size - 1;
    int bad_utf8;
    const char *code;
    rlError err = {0};
    json_t *obj = codec_decode(enc, buf, len, &bad_utf8, &code, &err);
    json_t *peek = codec_peek(enc, buf, len);
    if (!peek) abort(); /* only out of memory */
    json_decref(peek);
    if (!obj) {
        if (!code || !err.msg[0]) abort();
        return 0;
    }
    char *out;
    size_t out_len;
    if (codec_encode(enc, obj, &out, &out_len, &err)) abort();
    int bad2;
    json_t *again = codec_decode(enc, out, out_len, &bad2, &code, &err);
    if (!again || bad2) abort(); /* what we encode, we read back */
    json_decref(again);
    free(out);
    rlRequest req;
    request_init(&req);
    code = NULL;
    if (request_parse(&req, obj, &code, &err) && (!code || !err.msg[0])) abort();
    request_free(&req);
    json_decref(obj);
    return 0;
}
