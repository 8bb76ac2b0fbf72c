/* request_decode.c: payload -> rlRequest (see request_decode.h).  The order
 * of the checks is the protocol's: bytes that are not JSON / msgpack first,
 * then invalid UTF-8 (repaired by the codec so the id is still readable),
 * then the request's fields. */
#include "worker/request/request_decode.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

/* A copy of string value v when it is one of 1..max bytes without NUL. */
static char *request_decode_answer(const json_t *v, size_t max) {
    size_t n = json_string_length(v);
    if (!json_is_string(v) || n == 0 || n > max || strlen(json_string_value(v)) != n) return NULL;
    return strdup(json_string_value(v));
}

rlRequest *request_decode(rlEncoding enc, const char *buf, size_t len, rlDecoded *d) {
    memset(d, 0, sizeof(*d));
    int bad_utf8 = 0;
    json_t *obj = codec_decode(enc, buf, len, &bad_utf8, &d->code, &d->err);
    if (!obj) {
        /* refused (NaN, ext types, duplicate keys ...): still answer the id
         * when the part of the payload that holds it reads */
        json_t *p = codec_peek(enc, buf, len);
        if ((d->id = request_decode_answer(json_object_get(p, "id"), REQUEST_ANSWER_ID_MAX)))
            d->reply_to = request_decode_answer(json_object_get(p, "reply_to"), RL_REPLY_TO_MAX);
        json_decref(p);
        return NULL;
    }
    if ((d->id = request_decode_answer(json_object_get(obj, "id"), REQUEST_ANSWER_ID_MAX)))
        d->reply_to = request_decode_answer(json_object_get(obj, "reply_to"), RL_REPLY_TO_MAX);
    rlRequest *r = NULL;
    if (bad_utf8) {
        d->code = "invalid_utf8";
        rl_error(&d->err, RL_EINPUT, "a string in the request is not valid UTF-8 (bad bytes are "
                 "shown as U+FFFD); send text as UTF-8");
    } else if (!(r = malloc(sizeof(*r)))) {
        d->code = "internal";
        rl_error(&d->err, RL_EINTERNAL, "out of memory reading a request");
    } else {
        request_init(r);
        if (request_parse(r, obj, &d->code, &d->err)) {
            request_free(r);
            free(r);
            r = NULL;
        } else {
            d->code = NULL;   /* request_parse sets it on success too */
        }
    }
    json_decref(obj);
    return r;
}

void request_decoded_free(rlDecoded *d) {
    free(d->id);
    free(d->reply_to);
    d->id = d->reply_to = NULL;
}
