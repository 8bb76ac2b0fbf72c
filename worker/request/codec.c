/* codec.c: JSON and msgpack payloads <-> jansson values (see codec.h).
 *
 * msgpack is converted through jansson rather than validated separately so
 * that the two encodings cannot drift apart: one validator, one set of error
 * messages.  The cost is one extra tree per job, small next to a forward. */
#include "worker/request/codec.h"
#include "worker/lib/jscan.h"
#include "worker/lib/utf8.h"

#include <math.h>
#include <msgpack.h>
#include <stdlib.h>
#include <string.h>

/* Nesting deeper than this is refused: no request needs it, and recursion
 * on attacker-chosen depth is how decoders run out of stack. */
#define CODEC_MAX_DEPTH 64
/* msgpack-c's own stack (MSGPACK_EMBED_STACK_SIZE, not in its public
 * headers): deeper values are refused by the unpacker, before ours */
#define CODEC_MSGPACK_STACK 32

const char *codec_field_name(rlEncoding enc) { return enc == RL_ENC_MSGPACK ? "msgpack" : "json"; }

int codec_field_encoding(const char *name, size_t len, rlEncoding *enc) {
    if (len == 4 && !memcmp(name, "json", 4)) *enc = RL_ENC_JSON;
    else if (len == 7 && !memcmp(name, "msgpack", 7)) *enc = RL_ENC_MSGPACK;
    else return -1;
    return 0;
}

/* out = s[0..len), NUL-terminated, with invalid UTF-8 repaired by utf8.h's
 * rule and *bad_utf8 set: the job's id can still be read, so the producer
 * hears `invalid_utf8` on its reply stream.  -1 when out of memory. */
static int codec_text(bytebuf *out, const char *s, size_t len, int *bad_utf8) {
    bytebuf_clear(out);
    int replaced = utf8_lossy_append(out, s, len);
    if (replaced > 0) *bad_utf8 = 1;
    return replaced < 0 || bytebuf_reserve(out, 0) ? -1 : 0;
}

static json_t *codec_string(const char *s, size_t len, int *bad_utf8) {
    bytebuf text = {0};
    json_t *v = codec_text(&text, s, len, bad_utf8) ? NULL : json_stringn_nocheck(text.data, text.len);
    bytebuf_free(&text);
    return v;
}

static json_t *codec_from_msgpack(const msgpack_object *o, int depth, int *bad_utf8,
                                  const char **code, rlError *err) {
    if (depth > CODEC_MAX_DEPTH) {
        *code = "invalid_request";
        rl_error(err, RL_EINPUT, "msgpack value nested deeper than %d levels", CODEC_MAX_DEPTH);
        return NULL;
    }
    json_t *v = NULL;
    switch (o->type) {
    case MSGPACK_OBJECT_NIL: return json_null();
    case MSGPACK_OBJECT_BOOLEAN: return json_boolean(o->via.boolean);
    case MSGPACK_OBJECT_POSITIVE_INTEGER:
        /* Above INT64_MAX no field can take it; a real makes the validator
         * say "must be an integer in range" with the field's name. */
        if (o->via.u64 > (uint64_t)INT64_MAX) return json_real((double)o->via.u64);
        return json_integer((json_int_t)o->via.u64);
    case MSGPACK_OBJECT_NEGATIVE_INTEGER: return json_integer((json_int_t)o->via.i64);
    case MSGPACK_OBJECT_FLOAT32:
    case MSGPACK_OBJECT_FLOAT64:
        if (!isfinite(o->via.f64)) {
            *code = "invalid_request";
            rl_error(err, RL_EINPUT, "msgpack float is NaN or infinite; numbers must be finite");
            return NULL;
        }
        return json_real(o->via.f64);
    /* Older msgpack producers send text as raw/bin: accept both as strings. */
    case MSGPACK_OBJECT_STR: return codec_string(o->via.str.ptr, o->via.str.size, bad_utf8);
    case MSGPACK_OBJECT_BIN: return codec_string(o->via.bin.ptr, o->via.bin.size, bad_utf8);
    case MSGPACK_OBJECT_ARRAY:
        v = json_array();
        for (uint32_t i = 0; v && i < o->via.array.size; i++) {
            json_t *e = codec_from_msgpack(&o->via.array.ptr[i], depth + 1, bad_utf8, code, err);
            if (!e || json_array_append_new(v, e)) goto fail;
        }
        return v;
    case MSGPACK_OBJECT_MAP:
        v = json_object();
        for (uint32_t i = 0; v && i < o->via.map.size; i++) {
            const msgpack_object *k = &o->via.map.ptr[i].key;
            const char *ks;
            size_t kn;
            if (k->type == MSGPACK_OBJECT_STR) ks = k->via.str.ptr, kn = k->via.str.size;
            else if (k->type == MSGPACK_OBJECT_BIN) ks = k->via.bin.ptr, kn = k->via.bin.size;
            else {
                *code = "invalid_request";
                rl_error(err, RL_EINPUT, "msgpack map key is not a string; request fields are named by strings");
                goto fail;
            }
            bytebuf key = {0};
            if (codec_text(&key, ks, kn, bad_utf8)) goto oom;
            if (strlen(key.data) != key.len || json_object_get(v, key.data)) {
                *code = "invalid_request";
                rl_error(err, RL_EINPUT, "msgpack map key '%s' is %s", key.data,
                         strlen(key.data) != key.len ? "not a valid field name (contains NUL)"
                                                     : "given twice");
                bytebuf_free(&key);
                goto fail;
            }
            json_t *e = codec_from_msgpack(&o->via.map.ptr[i].val, depth + 1, bad_utf8, code, err);
            int bad = !e || json_object_set_new_nocheck(v, key.data, e);
            bytebuf_free(&key);
            if (bad) goto fail;
        }
        return v;
    case MSGPACK_OBJECT_EXT:
    default:
        *code = "invalid_encoding";
        rl_error(err, RL_EINPUT, "msgpack extension types are not part of the request format");
        return NULL;
    }
oom:
    *code = "internal";
    rl_error(err, RL_EINTERNAL, "out of memory decoding msgpack");
fail:
    if (!*code) {
        *code = "internal";
        rl_error(err, RL_EINTERNAL, "out of memory decoding msgpack");
    }
    json_decref(v);
    return NULL;
}

/* Big-endian unsigned of n bytes at p. */
static uint64_t codec_be(const unsigned char *p, int n) {
    uint64_t v = 0;
    for (int i = 0; i < n; i++) v = v << 8 | p[i];
    return v;
}

/* msgpack-c allocates an array's or map's elements when it reads the
 * header, before any element: 5 bytes declaring 3.7 billion elements made
 * its zone ask for 128 GiB.  This walks one value's headers from *off
 * without building anything and refuses a container declaring more
 * elements than bytes remain (every element takes at least one), so what
 * the unpacker allocates stays proportional to the payload.  0 (and *off
 * past the value) when it is whole and bounded. */
static int codec_msgpack_skip(const unsigned char *p, size_t len, size_t *offp) {
    size_t off = *offp;
    uint64_t need = 1; /* values still to read */
    while (need > 0) {
        if (off >= len) return -1;
        unsigned c = p[off++];
        need--;
        uint64_t items = 0, skip = 0;
        int lb = 0; /* bytes of a length field */
        if (c <= 0x7f || c >= 0xe0 || c == 0xc0 || c == 0xc2 || c == 0xc3) {
        } else if (c <= 0x8f) items = 2 * (uint64_t)(c & 0x0f);
        else if (c <= 0x9f) items = c & 0x0f;
        else if (c <= 0xbf) skip = c & 0x1f;
        else if (c == 0xc1) return -1;
        else if (c >= 0xc4 && c <= 0xc6) lb = 1 << (c - 0xc4);          /* bin 8/16/32 */
        else if (c >= 0xc7 && c <= 0xc9) lb = 1 << (c - 0xc7), skip = 1; /* ext 8/16/32 + type */
        else if (c == 0xca) skip = 4;
        else if (c == 0xcb) skip = 8;
        else if (c >= 0xcc && c <= 0xcf) skip = (uint64_t)1 << (c - 0xcc); /* uint */
        else if (c >= 0xd0 && c <= 0xd3) skip = (uint64_t)1 << (c - 0xd0); /* int */
        else if (c >= 0xd4 && c <= 0xd8) skip = 1 + ((uint64_t)1 << (c - 0xd4)); /* fixext */
        else if (c >= 0xd9 && c <= 0xdb) lb = 1 << (c - 0xd9);          /* str 8/16/32 */
        else {                                                             /* array/map 16/32 */
            int n = c == 0xdc || c == 0xde ? 2 : 4;
            if (len - off < (size_t)n) return -1;
            items = codec_be(p + off, n) * (c >= 0xde ? 2 : 1);
            off += (size_t)n;
        }
        if (lb) {
            if (len - off < (size_t)lb) return -1;
            skip += codec_be(p + off, lb);
            off += (size_t)lb;
        }
        if (skip > len - off) return -1;
        off += skip;
        need += items;
        if (need > len - off) return -1;
    }
    *offp = off;
    return 0;
}

static int codec_msgpack_bounded(const unsigned char *p, size_t len) {
    size_t off = 0;
    return codec_msgpack_skip(p, len, &off);
}

/* The string at *off (str or bin), advancing past it; -1 for anything else. */
static int codec_msgpack_str(const unsigned char *p, size_t len, size_t *off, const char **s, size_t *n) {
    if (*off >= len) return -1;
    unsigned c = p[*off];
    int lb = c >= 0xd9 && c <= 0xdb ? 1 << (c - 0xd9) : c >= 0xc4 && c <= 0xc6 ? 1 << (c - 0xc4) : 0;
    if (!lb && (c < 0xa0 || c > 0xbf)) return -1;
    size_t o = *off + 1 + (size_t)lb;
    if (o > len) return -1;
    uint64_t sl = lb ? codec_be(p + *off + 1, lb) : c & 0x1f;
    if (sl > len - o) return -1;
    *s = (const char *)p + o, *n = (size_t)sl, *off = o + (size_t)sl;
    return 0;
}

static json_t *codec_decode_msgpack(const char *buf, size_t len, int *bad_utf8,
                                    const char **code, rlError *err) {
    if (codec_msgpack_bounded((const unsigned char *)buf, len)) {
        *code = "invalid_encoding";
        rl_error(err, RL_EINPUT, "msgpack field is not valid msgpack (%zu bytes: truncated, or an array, "
                 "map or string longer than the bytes present); send one msgpack map", len);
        return NULL;
    }
    msgpack_unpacked u;
    msgpack_unpacked_init(&u);
    size_t off = 0;
    json_t *v = NULL;
    msgpack_unpack_return r = msgpack_unpack_next(&u, buf, len, &off);
    if (r == MSGPACK_UNPACK_NOMEM_ERROR) {
        /* whole and bounded (checked above), so what msgpack-c refuses is
         * its stack, more maps and arrays deep than it holds (it says "no
         * memory" for that too) */
        *code = "invalid_request";
        rl_error(err, RL_EINPUT, "msgpack value nested more than %d maps and arrays deep; no request field "
                 "needs that", CODEC_MSGPACK_STACK);
    } else if (r != MSGPACK_UNPACK_SUCCESS || off != len) {
        *code = "invalid_encoding";
        rl_error(err, RL_EINPUT,
                 r == MSGPACK_UNPACK_SUCCESS
                     ? "msgpack field holds %zu bytes after the first value; it must hold exactly one map"
                     : "msgpack field is not valid msgpack (%zu bytes); send one msgpack map",
                 r == MSGPACK_UNPACK_SUCCESS ? len - off : len);
    } else {
        v = codec_from_msgpack(&u.data, 0, bad_utf8, code, err);
    }
    msgpack_unpacked_destroy(&u);
    return v;
}

static json_t *codec_decode_json(const char *buf, size_t len, int *bad_utf8, const char **code,
                                 rlError *err) {
    /* jansson refuses invalid UTF-8 outright; repairing first lets the job's
     * id be read so the producer hears `invalid_utf8` on its reply stream. */
    bytebuf text = {0};
    if (codec_text(&text, buf, len, bad_utf8)) {
        *code = "internal";
        rl_error(err, RL_EINTERNAL, "out of memory decoding JSON");
        return NULL;
    }
    json_error_t je;
    /* U+0000 in a value is valid JSON: decoded, so request.c can refuse it
     * under the job's id (as it does for msgpack) */
    json_t *v = json_loadb(text.data, text.len,
                           JSON_REJECT_DUPLICATES | JSON_DECODE_ANY | JSON_ALLOW_NUL, &je);
    bytebuf_free(&text);
    if (v) return v;
    /* A value that is well-formed JSON but cannot be a request's (a key
     * given twice, a number no field can hold) is the request's fault, not
     * the encoding's, as the same value through msgpack. */
    switch (json_error_code(&je)) {
    case json_error_duplicate_key:
        *code = "invalid_request";
        rl_error(err, RL_EINPUT, "%s (at byte %d); give each field once", je.text, je.position);
        break;
    case json_error_numeric_overflow:
        *code = "invalid_request";
        rl_error(err, RL_EINPUT, "%s (at byte %d); no request field takes a number that large",
                 je.text, je.position);
        break;
    default:
        *code = "invalid_encoding";
        rl_error(err, RL_EINPUT, "not valid JSON: %s (at byte %d); send one JSON object", je.text,
                 je.position);
    }
    return NULL;
}

json_t *codec_peek(rlEncoding enc, const char *buf, size_t len) {
    json_t *out = json_object();
    if (!out) return NULL;
    if (enc == RL_ENC_JSON) {
        /* the top-level object's members in order, values skipped unbuilt:
         * jansson refuses a whole text for a number it cannot hold (a seed
         * of 2^64-1) or nesting past its depth, and reads no id then */
        bytebuf text = {0}, key = {0}, val = {0};
        int bad = 0, first = 1;
        jscan j;
        const char *at;
        size_t n;
        if (!codec_text(&text, buf, len, &bad)) {
            jscan_init(&j, text.data, text.len);
            while (jscan_object_next(&j, &first, &key) == 1) {
                int is_id = key.len == 2 && !strcmp(key.data, "id");
                int is_reply = key.len == 8 && !strcmp(key.data, "reply_to");
                if ((is_id || is_reply) && jscan_peek(&j) == '"') {
                    if (jscan_string(&j, &val)) break;
                    json_object_set_new(out, is_id ? "id" : "reply_to", json_stringn_nocheck(val.data, val.len));
                } else if (jscan_value_span(&j, &at, &n)) {
                    break;
                }
            }
        }
        bytebuf_free(&text);
        bytebuf_free(&key);
        bytebuf_free(&val);
        return out;
    }
    /* the top-level map's pairs in order, up to whatever part is bad (a NaN,
     * an ext value, a declared size the bytes do not hold) */
    const unsigned char *p = (const unsigned char *)buf;
    size_t off = 1;
    uint64_t pairs = 0;
    if (len && p[0] >= 0x80 && p[0] <= 0x8f) pairs = p[0] & 0x0f;
    else if (len >= 3 && p[0] == 0xde) pairs = codec_be(p + 1, 2), off = 3;
    else if (len >= 5 && p[0] == 0xdf) pairs = codec_be(p + 1, 4), off = 5;
    for (uint64_t i = 0; i < pairs; i++) {
        const char *k, *v;
        size_t kn, vn, voff;
        if (codec_msgpack_str(p, len, &off, &k, &kn)) break;
        voff = off;
        int is_id = kn == 2 && !memcmp(k, "id", 2), is_reply = kn == 8 && !memcmp(k, "reply_to", 8);
        if ((is_id || is_reply) && !codec_msgpack_str(p, len, &voff, &v, &vn)) {
            int bad = 0;
            json_object_set_new(out, is_id ? "id" : "reply_to", codec_string(v, vn, &bad));
        }
        if (codec_msgpack_skip(p, len, &off)) break;
    }
    return out;
}

json_t *codec_decode(rlEncoding enc, const char *buf, size_t len, int *bad_utf8,
                     const char **code, rlError *err) {
    *bad_utf8 = 0;
    *code = NULL;
    return enc == RL_ENC_MSGPACK ? codec_decode_msgpack(buf, len, bad_utf8, code, err)
                                 : codec_decode_json(buf, len, bad_utf8, code, err);
}

static int codec_pack(msgpack_packer *pk, const json_t *v) {
    switch (json_typeof(v)) {
    case JSON_OBJECT: {
        const char *k;
        json_t *e;
        if (msgpack_pack_map(pk, json_object_size(v))) return -1;
        json_object_foreach((json_t *)v, k, e) {
            size_t kn = strlen(k);
            if (msgpack_pack_str(pk, kn) || msgpack_pack_str_body(pk, k, kn) || codec_pack(pk, e))
                return -1;
        }
        return 0;
    }
    case JSON_ARRAY: {
        size_t i;
        json_t *e;
        if (msgpack_pack_array(pk, json_array_size(v))) return -1;
        json_array_foreach(v, i, e) if (codec_pack(pk, e)) return -1;
        return 0;
    }
    case JSON_STRING: {
        size_t n = json_string_length(v);
        return msgpack_pack_str(pk, n) || msgpack_pack_str_body(pk, json_string_value(v), n);
    }
    case JSON_INTEGER: return msgpack_pack_int64(pk, json_integer_value(v));
    case JSON_REAL: return msgpack_pack_double(pk, json_real_value(v));
    case JSON_TRUE: return msgpack_pack_true(pk);
    case JSON_FALSE: return msgpack_pack_false(pk);
    case JSON_NULL:
    default: return msgpack_pack_nil(pk);
    }
}

int codec_encode(rlEncoding enc, const json_t *v, char **buf, size_t *len, rlError *err) {
    if (enc == RL_ENC_JSON) {
        *buf = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
        if (!*buf) return rl_error(err, RL_EINTERNAL, "cannot encode a reply as JSON (out of memory)");
        *len = strlen(*buf);
        return 0;
    }
    msgpack_sbuffer sb;
    msgpack_sbuffer_init(&sb);
    msgpack_packer pk;
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    if (codec_pack(&pk, v)) {
        msgpack_sbuffer_destroy(&sb);
        return rl_error(err, RL_EINTERNAL, "cannot encode a reply as msgpack (out of memory)");
    }
    *len = sb.size; /* release() zeroes the size */
    *buf = msgpack_sbuffer_release(&sb);
    /* An empty map still packs to one byte, so *buf is never NULL here. */
    return 0;
}
