/* test_codec.c: worker/request/codec, JSON and msgpack payloads <-> jansson
 * values: the part of redlm that sees a job's raw network bytes. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <msgpack.h>
#include <stdlib.h>
#include <string.h>

#include "worker/request/codec.h"

static json_t *decode(rlEncoding enc, const char *buf, size_t len, int *bad, const char **code) {
    rlError err;
    return codec_decode(enc, buf, len, bad, code, &err);
}

static void test_json_roundtrip_through_msgpack(void **state) {
    (void)state;
    const char *src = "{\"id\":\"a\",\"prompt_ids\":[1,2,-3],\"temperature\":0.5,\"stream\":false,"
                      "\"logprobs\":null,\"messages\":[{\"role\":\"user\",\"content\":\"h\\u00e9\"}]}";
    int bad;
    const char *code;
    json_t *v = decode(RL_ENC_JSON, src, strlen(src), &bad, &code);
    assert_non_null(v);
    assert_int_equal(bad, 0);
    char *mp;
    size_t mlen;
    rlError err;
    assert_int_equal(codec_encode(RL_ENC_MSGPACK, v, &mp, &mlen, &err), 0);
    json_t *w = decode(RL_ENC_MSGPACK, mp, mlen, &bad, &code);
    assert_non_null(w);
    assert_true(json_equal(v, w));
    free(mp);
    char *js;
    size_t jlen;
    assert_int_equal(codec_encode(RL_ENC_JSON, w, &js, &jlen, &err), 0);
    assert_int_equal(jlen, strlen(js));
    json_t *x = decode(RL_ENC_JSON, js, jlen, &bad, &code);
    assert_true(json_equal(v, x));
    free(js);
    json_decref(v);
    json_decref(w);
    json_decref(x);
}

static void test_bad_payloads(void **state) {
    (void)state;
    int bad;
    const char *code;
    struct { rlEncoding enc; const char *buf; size_t len; const char *code; } cases[] = {
        {RL_ENC_JSON, "{\"id\":", 6, "invalid_encoding"},
        {RL_ENC_JSON, "not json", 8, "invalid_encoding"},
        {RL_ENC_JSON, "{} {}", 5, "invalid_encoding"},
        {RL_ENC_JSON, "{\"a\":1,\"a\":2}", 13, "invalid_request"},
        {RL_ENC_JSON, "{\"a\":99999999999999999999999}", 29, "invalid_request"},
        {RL_ENC_MSGPACK, "\x81\xa1", 2, "invalid_encoding"},          /* truncated map */
        {RL_ENC_MSGPACK, "\xc1", 1, "invalid_encoding"},              /* never-used byte */
        {RL_ENC_MSGPACK, "\x80\x80", 2, "invalid_encoding"},          /* two values */
        {RL_ENC_MSGPACK, "\x81\x01\x02", 3, "invalid_request"},       /* integer key */
        {RL_ENC_MSGPACK, "\x82\xa1" "a\x01\xa1" "a\x02", 7, "invalid_request"}, /* duplicate key */
        {RL_ENC_MSGPACK, "\xd4\x01\x00", 3, "invalid_encoding"},      /* ext type */
        {RL_ENC_MSGPACK, "\xcb\x7f\xf8\x00\x00\x00\x00\x00\x00", 9, "invalid_request"}, /* NaN */
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        json_t *v = decode(cases[i].enc, cases[i].buf, cases[i].len, &bad, &code);
        if (v) fail_msg("case %zu decoded", i);
        assert_string_equal(code, cases[i].code);
    }
}

static void test_deep_nesting_refused(void **state) {
    (void)state;
    char buf[200];
    memset(buf, 0x91, sizeof(buf) - 1); /* 199 nested one-element arrays */
    buf[sizeof(buf) - 1] = 0x01;
    int bad;
    const char *code;
    /* msgpack-c's own stack limit (32 levels), named as what it is: the
     * payload is valid msgpack */
    rlError err;
    assert_null(codec_decode(RL_ENC_MSGPACK, buf, sizeof(buf), &bad, &code, &err));
    assert_string_equal(code, "invalid_request");
    assert_non_null(strstr(err.msg, "nested more than 32"));
    static const char ok[] = "\x81\xa1k\x91\x91\x91\x91\x91\x91\x91\x91\x91\x91\x91\x91\x91\x91\x91\x91"
                             "\x91\x91\x91\x91\x91\x91\x91\x91\x91\x91\x91\x91\x91\x91\x91\x01"; /* 32 levels */
    json_t *v = decode(RL_ENC_MSGPACK, ok, sizeof(ok) - 1, &bad, &code);
    assert_non_null(v);
    json_decref(v);
    memset(buf, '[', sizeof(buf));
    assert_null(decode(RL_ENC_JSON, buf, sizeof(buf), &bad, &code));
    assert_string_equal(code, "invalid_encoding");
}

static void test_invalid_utf8_keeps_id(void **state) {
    (void)state;
    const char src[] = "{\"id\":\"job-1\",\"prompt\":\"a\xff\xfe" "b\"}";
    int bad;
    const char *code;
    json_t *v = decode(RL_ENC_JSON, src, strlen(src), &bad, &code);
    assert_non_null(v);
    assert_int_equal(bad, 1);
    assert_string_equal(json_string_value(json_object_get(v, "id")), "job-1");
    json_decref(v);
    /* the same through msgpack: {"id": "x", "prompt": "\xc0\xaf"} (overlong '/') */
    const char mp[] = "\x82\xa2id\xa1x\xa6prompt\xa2\xc0\xaf";
    v = decode(RL_ENC_MSGPACK, mp, sizeof(mp) - 1, &bad, &code);
    assert_non_null(v);
    assert_int_equal(bad, 1);
    json_decref(v);
}

/* Bad UTF-8 is repaired by worker/lib/utf8's rule (one U+FFFD per maximal
 * ill-formed subpart), in JSON text and msgpack strings and keys alike. */
static void test_repair_utf8(void **state) {
    (void)state;
    const char *fixed = "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbdx\xef\xbf\xbd";
    const char js[] = "{\"id\":\"a\",\"prompt\":\"\xed\xa0\x80x\xe2\x82\"}";
    /* {"id": "a", "prompt": ED A0 80 'x' E2 82, E0 80: 1} */
    const char mp[] = "\x83\xa2id\xa1" "a\xa6prompt\xa6\xed\xa0\x80x\xe2\x82\xa2\xe0\x80\x01";
    int bad;
    const char *code;
    json_t *v = decode(RL_ENC_JSON, js, sizeof(js) - 1, &bad, &code);
    assert_non_null(v);
    assert_int_equal(bad, 1);
    assert_string_equal(json_string_value(json_object_get(v, "prompt")), fixed);
    json_decref(v);
    v = decode(RL_ENC_MSGPACK, mp, sizeof(mp) - 1, &bad, &code);
    assert_non_null(v);
    assert_int_equal(bad, 1);
    assert_string_equal(json_string_value(json_object_get(v, "prompt")), fixed);
    assert_non_null(json_object_get(v, "\xef\xbf\xbd\xef\xbf\xbd"));
    json_decref(v);
    const char ok[] = "{\"id\":\"h\xc3\xa9llo \xf0\x9f\x98\x80\"}";
    v = decode(RL_ENC_JSON, ok, sizeof(ok) - 1, &bad, &code);
    assert_int_equal(bad, 0);
    assert_string_equal(json_string_value(json_object_get(v, "id")), "h\xc3\xa9llo \xf0\x9f\x98\x80");
    json_decref(v);
}

/* Declared sizes are checked against the bytes before msgpack-c allocates
 * (3.7 billion elements once made it ask for 128 GiB), and the id of a
 * refused payload is still read, pair by pair, up to the bad part. */
static void test_sizes_checked_and_id_peeked(void **state) {
    (void)state;
    static const char huge[] = "\x82\xa2id\xa6m-huge\xaaprompt_ids\xdd\xdc\xa5\x4e\x00";
    static const char map[] = "\xdf\xff\xff\xff\xff";
    static const char nan[] = "\x83\xa2id\xa5m-nan\xaaprompt_ids\x91\x01\xabtemperature"
                              "\xcb\x7f\xf8\x00\x00\x00\x00\x00\x00";
    int bad;
    const char *code;
    char deep[2 * 3000 + 64];
    int at = snprintf(deep, sizeof(deep), "{\"m\":");
    for (int i = 0; i < 3000; i++) deep[at++] = '[';
    for (int i = 0; i < 3000; i++) deep[at++] = ']';
    snprintf(deep + at, sizeof(deep) - (size_t)at, ",\"id\":\"deep\",\"n\":[[[[[[1]]]]]]}");
    assert_null(decode(RL_ENC_JSON, deep, strlen(deep), &bad, &code));
    assert_string_equal(code, "invalid_encoding");
    assert_null(decode(RL_ENC_MSGPACK, huge, sizeof(huge) - 1, &bad, &code));
    assert_string_equal(code, "invalid_encoding");
    assert_null(decode(RL_ENC_MSGPACK, map, sizeof(map) - 1, &bad, &code));
    assert_null(decode(RL_ENC_MSGPACK, nan, sizeof(nan) - 1, &bad, &code));
    assert_string_equal(code, "invalid_request");
    const struct { rlEncoding enc; const char *buf; size_t len; const char *id; } cases[] = {
        {RL_ENC_MSGPACK, huge, sizeof(huge) - 1, "m-huge"},
        {RL_ENC_MSGPACK, nan, sizeof(nan) - 1, "m-nan"},
        {RL_ENC_MSGPACK, map, sizeof(map) - 1, NULL},
        {RL_ENC_JSON, "{\"id\":\"j\",\"a\":1,\"a\":2}", 22, "j"},
        {RL_ENC_JSON, "not json", 8, NULL},
        /* numbers no field can hold: JSON that jansson refuses whole */
        {RL_ENC_JSON, "{\"seed\":18446744073709551615,\"id\":\"o1\"}", 39, "o1"},
        {RL_ENC_JSON, "{\"t\":-1e999,\"u\":[1E+999],\"id\":\"o2\"}", 35, "o2"},
        /* nesting past jansson's depth (2,048) before and after the id */
        {RL_ENC_JSON, deep, strlen(deep), "deep"},
        {RL_ENC_JSON, "[{\"id\":\"x\"}]", 12, NULL},
        {RL_ENC_JSON, "{\"a\":{\"id\":\"inner\"},\"reply_to\":\"r\"}", 35, NULL},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        json_t *p = codec_peek(cases[i].enc, cases[i].buf, cases[i].len);
        assert_non_null(p);
        const char *id = json_string_value(json_object_get(p, "id"));
        if (cases[i].id) assert_string_equal(id, cases[i].id);
        else assert_null(id);
        json_decref(p);
    }
}


int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_json_roundtrip_through_msgpack),
        cmocka_unit_test(test_bad_payloads),
        cmocka_unit_test(test_deep_nesting_refused),
        cmocka_unit_test(test_invalid_utf8_keeps_id),
        cmocka_unit_test(test_repair_utf8),
        cmocka_unit_test(test_sizes_checked_and_id_peeked),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
