/* test_redis_url.c: worker/lib/redis_url, the --redis URL a user types:
 * every part, the defaults, percent-escapes and the refusals. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "worker/lib/redis_url.h"

static void test_redis_url(void **state) {
    (void)state;
    rlRedisUrl u;
    rlError err;
    assert_int_equal(redis_url_parse("redis://localhost:6380/2", &u, &err), 0);
    assert_string_equal(u.host, "localhost");
    assert_int_equal(u.port, 6380);
    assert_int_equal(u.db, 2);
    assert_string_equal(u.pass, "");
    assert_int_equal(redis_url_parse("redis://bob:p%40ss@10.0.0.1", &u, &err), 0);
    assert_string_equal(u.user, "bob");
    assert_string_equal(u.pass, "p@ss");
    assert_string_equal(u.host, "10.0.0.1");
    assert_int_equal(u.port, 6379);
    assert_int_equal(redis_url_parse("redis://:secret@h:1", &u, &err), 0);
    assert_string_equal(u.user, "");
    assert_string_equal(u.pass, "secret");
    rlRedisLogin l;
    char buf[16];
    assert_int_equal(redis_url_login(&u, &l, buf), 1);
    assert_int_equal(l.argc[0], 2);
    assert_int_equal(redis_url_parse("http://h:1", &u, &err), -1);
    assert_int_equal(redis_url_parse("redis://h:99999", &u, &err), -1);
    assert_int_equal(redis_url_parse("redis://h:1/x", &u, &err), -1);
    assert_int_equal(redis_url_parse("redis://h:1x", &u, &err), -1);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_redis_url),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
