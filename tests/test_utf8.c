/* test_utf8.c: worker/lib/utf8, the one UTF-8 rule of redlm.
 *
 * Repair is one U+FFFD per maximal ill-formed subpart (Unicode's recommended
 * practice).  Every expectation below is what Python's
 * bytes.decode('utf-8', 'replace') gives for the same bytes (the same as
 * Rust's String::from_utf8_lossy and Hugging Face tokenizers' decode); the
 * cases are those where that rule differs from "one U+FFFD per bad byte"
 * or "one per bad sequence". */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <string.h>

#include "worker/lib/utf8.h"

#define R UTF8_REPLACEMENT

static const struct {
    const char *in, *out;
    int replaced;
} lossy_cases[] = {
    {"h\xC3\xA9llo \xF0\x9F\x98\x80", "h\xC3\xA9llo \xF0\x9F\x98\x80", 0}, /* valid: untouched */
    {"a\xF0\x9F\x98", "a" R, 1},                        /* truncated 4-byte sequence */
    {"\xE0\x80", R R, 2},                               /* E0 needs A0..BF next */
    {"\xED\xA0\x80", R R R, 3},                         /* surrogate U+D800 */
    {"\xC0\xAF", R R, 2},                               /* overlong '/' */
    {"\xF4\x90\x80\x80", R R R R, 4},                   /* above U+10FFFF */
    {"\xF8\x88\x80\x80\x80", R R R R R, 5},             /* old 5-byte form */
    {"\xED\xA0\x80x\xE2\x82", R R R "x" R, 4},          /* surrogate, then a truncated 3-byte */
    {"a\xC3(", "a" R "(", 1},
    {"\xE2\x82\xAC\xE2\x82" "b", "\xE2\x82\xAC" R "b", 1},
    {"\xF0\x9F\x98\x80\xF0\x9F", "\xF0\x9F\x98\x80" R, 1},
    {"\xE1\x80\xE2\xF0\x91\x92\xF1\xBF" "A", R R R R "A", 4},
    {"\x80\xBF", R R, 2},                               /* lone continuation bytes */
    {"\xFF\xFE", R R, 2},
    {"\xC2\xA9\xC2", "\xC2\xA9" R, 1},
    {"caf\xE9", "caf" R, 1},                            /* Latin-1 */
};

static void test_lossy(void **state) {
    (void)state;
    for (size_t i = 0; i < sizeof(lossy_cases) / sizeof(lossy_cases[0]); i++) {
        bytebuf b = {0};
        int replaced = utf8_lossy_append(&b, lossy_cases[i].in, strlen(lossy_cases[i].in));
        if (replaced != lossy_cases[i].replaced || strcmp(b.data, lossy_cases[i].out))
            fail_msg("case %zu: %d replaced (want %d), got '%s'", i, replaced,
                     lossy_cases[i].replaced, b.data);
        bytebuf_free(&b);
    }
    bytebuf b = {0};
    assert_int_equal(utf8_lossy_append(&b, "", 0), 0);
    assert_int_equal(b.len, 0);
    bytebuf_free(&b);
}

static void test_valid(void **state) {
    (void)state;
    for (size_t i = 0; i < sizeof(lossy_cases) / sizeof(lossy_cases[0]); i++) {
        size_t bad_at = SIZE_MAX;
        int ok = utf8_valid(lossy_cases[i].in, strlen(lossy_cases[i].in), &bad_at);
        assert_int_equal(ok, lossy_cases[i].replaced == 0);
        if (!ok) {
            /* the first byte the repair replaced */
            size_t same = 0;
            while (lossy_cases[i].in[same] == lossy_cases[i].out[same]) same++;
            assert_int_equal(bad_at, same);
        }
    }
    /* past the eight-byte ASCII stride, and a NUL is a character */
    const char s[] = "abcdefghijklmnop\0q\xC3\xA9r\xFF";
    size_t bad_at;
    assert_int_equal(utf8_valid(s, sizeof(s) - 2, NULL), 1);
    assert_int_equal(utf8_valid(s, sizeof(s) - 1, &bad_at), 0);
    assert_int_equal(bad_at, sizeof(s) - 2);
}

/* utf8_next tells a sequence cut by the end of input (the detokenizer
 * waits for more bytes) from one that can never be completed. */
static void test_next(void **state) {
    (void)state;
    size_t len;
    assert_int_equal(utf8_next((const unsigned char *)"\xF0\x9F\x98", 3, &len), UTF8_SHORT);
    assert_int_equal(len, 3);
    assert_int_equal(utf8_next((const unsigned char *)"\xF0\x9F\x98\x80", 4, &len), UTF8_CHAR);
    assert_int_equal(len, 4);
    assert_int_equal(utf8_next((const unsigned char *)"\xE0\x80", 2, &len), UTF8_BAD);
    assert_int_equal(len, 1);
    assert_int_equal(utf8_next((const unsigned char *)"\xE2\x82" "b", 3, &len), UTF8_BAD);
    assert_int_equal(len, 2);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_lossy),
        cmocka_unit_test(test_valid),
        cmocka_unit_test(test_next),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
