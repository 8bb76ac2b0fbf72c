/* test_sha256.c: SHA-256 against the FIPS 180-2 examples, split across
 * updates at every offset, and a file against sha256sum's answer. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "worker/lib/sha256.h"

static void hex_of(const uint8_t d[32], char out[65]) {
    for (int i = 0; i < 32; i++) snprintf(out + 2 * i, 3, "%02x", d[i]);
}

static void check(const char *msg, size_t n, const char *want) {
    rlSha256 s;
    uint8_t d[32];
    char hex[65];
    sha256_init(&s);
    sha256_update(&s, msg, n);
    sha256_final(&s, d);
    hex_of(d, hex);
    assert_string_equal(hex, want);
    /* the same bytes fed in two pieces, cut at every offset */
    for (size_t cut = 0; cut <= n; cut++) {
        sha256_init(&s);
        sha256_update(&s, msg, cut);
        sha256_update(&s, msg + cut, n - cut);
        sha256_final(&s, d);
        hex_of(d, hex);
        assert_string_equal(hex, want);
    }
}

static void test_vectors(void **state) {
    (void)state;
    check("", 0, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    check("abc", 3, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    const char *m448 = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
    check(m448, strlen(m448), "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
    const char *m896 = "abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmnhijklmnoijklmnopjklm"
                       "nopqklmnopqrlmnopqrsmnopqrstnopqrstu";
    check(m896, strlen(m896), "cf5b16a778af8380036ce59e7b0492370b249b11e8f07a51afac45037afee9d1");
    /* one million 'a' */
    size_t n = 1000000;
    char *a = malloc(n);
    assert_non_null(a);
    memset(a, 'a', n);
    rlSha256 s;
    uint8_t d[32];
    char hex[65];
    sha256_init(&s);
    for (size_t off = 0; off < n; off += 999) sha256_update(&s, a + off, off + 999 > n ? n - off : 999);
    sha256_final(&s, d);
    hex_of(d, hex);
    assert_string_equal(hex, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
    free(a);
}

static void test_file(void **state) {
    (void)state;
    char path[] = "/tmp/rl-test-sha-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, "abc", 3), 3);
    close(fd);
    char hex[65];
    rlError err = {0};
    assert_int_equal(sha256_file(path, hex, &err), 0);
    assert_string_equal(hex, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    unlink(path);
    assert_int_equal(sha256_file(path, hex, &err), -1);
    assert_int_equal(err.code, RL_EIO);
    assert_non_null(strstr(err.msg, path));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_vectors),
        cmocka_unit_test(test_file),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
