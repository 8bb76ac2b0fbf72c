/* test_request_decode.c: worker/request/request_decode, the one decoder of
 * both front doors.  tests/fixtures/requests/bad.tsv is a table of bad
 * request lines and the code each must get ("code<TAB>line"); this runs it
 * through request_decode as the Redis intake calls it, and
 * tests/test_request_decode.sh runs the same table through `redlm
 * generate`, so the two front doors answer each line alike.  Every line
 * that is JSON at all is also sent as msgpack: the same code again. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "worker/request/request_decode.h"

static const char *decode_code(rlEncoding enc, const char *buf, size_t len, rlDecoded *d) {
    rlRequest *r = request_decode(enc, buf, len, d);
    if (r) {
        request_free(r);
        free(r);
        return NULL;
    }
    return d->code;
}

static void test_table(void **state) {
    (void)state;
    char path[1024];
    const char *dir = getenv("FIXTURES");
    snprintf(path, sizeof(path), "%s/requests/bad.tsv", dir ? dir : "build/fixtures");
    FILE *f = fopen(path, "r");
    if (!f) fail_msg("cannot open %s", path);
    char *row = NULL;
    size_t cap = 0;
    ssize_t n;
    int lines = 0, as_msgpack = 0;
    while ((n = getline(&row, &cap, f)) > 0) {
        if (row[n - 1] == '\n') row[--n] = 0;
        char *line = strchr(row, '\t');
        assert_non_null(line);
        *line++ = 0;
        size_t len = (size_t)(row + n - line);
        lines++;
        rlDecoded d;
        const char *code = decode_code(RL_ENC_JSON, line, len, &d);
        if (!code || strcmp(code, row))
            fail_msg("line %d (%s): code %s, want %s", lines, line, code ? code : "none", row);
        printf("line %d: %s: %s\n", lines, code, d.err.msg);
        request_decoded_free(&d);

        json_t *v = json_loadb(line, len, JSON_DECODE_ANY | JSON_ALLOW_NUL | JSON_REJECT_DUPLICATES, NULL);
        if (!v) continue;
        char *mp;
        size_t mlen;
        rlError err;
        assert_int_equal(codec_encode(RL_ENC_MSGPACK, v, &mp, &mlen, &err), 0);
        code = decode_code(RL_ENC_MSGPACK, mp, mlen, &d);
        if (!code || strcmp(code, row))
            fail_msg("line %d as msgpack: code %s, want %s", lines, code ? code : "none", row);
        request_decoded_free(&d);
        free(mp);
        json_decref(v);
        as_msgpack++;
    }
    free(row);
    fclose(f);
    assert_true(lines >= 20);
    printf("%d bad lines decoded, %d of them as msgpack too\n", lines, as_msgpack);
}

/* Where a bad request is answered: its id (up to REQUEST_ANSWER_ID_MAX
 * bytes, beyond the 256 a valid id may have) and reply_to. */
static void test_answer(void **state) {
    (void)state;
    char line[2200];
    rlDecoded d;
    snprintf(line, sizeof(line), "{\"id\":\"%0300d\",\"prompt_ids\":[1],\"reply_to\":\"r\"}", 0);
    assert_string_equal(decode_code(RL_ENC_JSON, line, strlen(line), &d), "invalid_request");
    assert_int_equal(strlen(d.id), 300);
    assert_string_equal(d.reply_to, "r");
    request_decoded_free(&d);
    snprintf(line, sizeof(line), "{\"id\":\"%02000d\",\"prompt_ids\":[1],\"reply_to\":\"r\"}", 0);
    assert_string_equal(decode_code(RL_ENC_JSON, line, strlen(line), &d), "invalid_request");
    assert_null(d.id);
    assert_null(d.reply_to);
    request_decoded_free(&d);
    /* a reply_to of more than 1,024 bytes is refused, and answered on the
     * default reply stream (d.reply_to NULL), not on the huge key */
    snprintf(line, sizeof(line), "{\"id\":\"big\",\"prompt_ids\":[1],\"reply_to\":\"redlm:reply:%01100d\"}", 0);
    assert_string_equal(decode_code(RL_ENC_JSON, line, strlen(line), &d), "invalid_request");
    assert_string_equal(d.id, "big");
    assert_null(d.reply_to);
    assert_non_null(strstr(d.err.msg, "'reply_to' is 1112 bytes; at most 1024"));
    request_decoded_free(&d);
    const char bad[] = "{\"id\":\"j\\u00e9\",\"prompt\":\"\xff\"}";
    assert_string_equal(decode_code(RL_ENC_JSON, bad, sizeof(bad) - 1, &d), "invalid_utf8");
    assert_string_equal(d.id, "j\xc3\xa9");
    request_decoded_free(&d);
    const char ok[] = "{\"id\":\"ok\",\"prompt_ids\":[1,2],\"max_tokens\":3}";
    rlRequest *r = request_decode(RL_ENC_JSON, ok, sizeof(ok) - 1, &d);
    assert_non_null(r);
    assert_null(d.code);
    assert_string_equal(d.id, "ok");
    assert_int_equal(r->n_prompt_ids, 2);
    assert_int_equal(r->max_tokens, 3);
    request_decoded_free(&d);
    request_free(r);
    free(r);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_table),
        cmocka_unit_test(test_answer),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
