/* test_layout.c: the layout flags every command shares (worker/engine/layout.c). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "worker/engine/layout.h"

/* Parse argv as a command would: the layout flags beside a --model flag
 * of the command's own, whose words are counted in others. */
static int parse(rlLayout *l, int argc, char **argv, int *others, rlError *err) {
    layout_init(l);
    const char *model = NULL;
    rlFlags fs;
    flags_init(&fs, "test", NULL);
    flags_string(&fs, "--model", &model, "DIR", NULL);
    layout_flags_add(&fs, l);
    char *args[32] = {"test"};
    for (int i = 0; i < argc && i < 31; i++) args[i + 1] = argv[i];
    int rc = flags_parse(&fs, argc + 1, args, err);
    *others = 2 * flags_given(&fs, "--model");
    return rc ? -1 : 0;
}

static void test_flags(void **state) {
    (void)state;
    char *argv[] = {"--model", "m", "--tp", "3", "--pp=2", "--devices", "0-2,5,4,3",
                    "--pp-layer-partition", "14,14", "--nccl-timeout", "30",
                    "--collectives=always"};
    rlLayout l;
    rlError err;
    int others;
    assert_int_equal(parse(&l, 12, argv, &others, &err), 0);
    assert_int_equal(others, 2);
    assert_int_equal(l.tp, 3);
    assert_int_equal(l.pp, 2);
    assert_int_equal(l.n_devices, 6);
    int want[] = {0, 1, 2, 5, 4, 3};
    assert_memory_equal(l.devices, want, sizeof(want));
    assert_int_equal(l.n_partition, 2);
    assert_int_equal(l.partition[1], 14);
    assert_true(l.nccl_timeout_s == 30);
    assert_int_equal(l.collectives, 1);
    assert_int_equal(layout_check(&l, 28, &err), 0);
    char buf[128];
    layout_describe(&l, buf, sizeof(buf));
    assert_string_equal(buf, "tp 3 x pp 2 on devices 0,1,2,5,4,3");
}

static void expect_code(int argc, char **argv, int num_layers, rlErrorCode code,
                        const char *needle) {
    rlLayout l;
    rlError err = {0};
    int others;
    int rc = parse(&l, argc, argv, &others, &err);
    if (rc == 0) rc = layout_check(&l, num_layers, &err);
    assert_int_equal(rc, -1);
    assert_int_equal(err.code, code);
    if (!strstr(err.msg, needle)) fail_msg("'%s' does not mention '%s'", err.msg, needle);
}

static void expect_error(int argc, char **argv, int num_layers, const char *needle) {
    expect_code(argc, argv, num_layers, RL_EUSAGE, needle);
}

static void test_errors(void **state) {
    (void)state;
    expect_error(2, (char *[]){"--tp", "0"}, 0, "from 1 to");
    expect_error(1, (char *[]){"--tp"}, 0, "needs a value");
    expect_error(2, (char *[]){"--devices", "0,x"}, 0, "not a list");
    expect_error(2, (char *[]){"--devices", "0,1,1"}, 0, "twice");
    expect_error(2, (char *[]){"--devices", "3-1"}, 0, "not a list");
    expect_code(4, (char *[]){"--tp", "2", "--devices", "0"}, 0, RL_EDEVICE,
                "needs 2 GPUs but 1 is given");
    expect_error(4, (char *[]){"--pp", "2", "--pp-layer-partition", "14"}, 28, "gives 1 stage");
    expect_error(4, (char *[]){"--pp", "2", "--pp-layer-partition", "14,13"}, 28, "adds up to 27");
    expect_error(2, (char *[]){"--pp", "4"}, 3, "more stages");
    expect_error(2, (char *[]){"--nccl-timeout", "-1"}, 0, "positive");
    expect_error(2, (char *[]){"--collectives", "never"}, 0, "auto");
}

/* auto is the default and leaves a 1x1 layout without communicators. */
static void test_collectives_auto(void **state) {
    (void)state;
    rlLayout l;
    rlError err;
    int others;
    layout_init(&l);
    assert_int_equal(l.collectives, 0);
    assert_int_equal(parse(&l, 2, (char *[]){"--collectives", "always"}, &others, &err), 0);
    assert_int_equal(l.collectives, 1);
    assert_int_equal(parse(&l, 2, (char *[]){"--collectives", "auto"}, &others, &err), 0);
    assert_int_equal(l.collectives, 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_flags), cmocka_unit_test(test_errors),
                                       cmocka_unit_test(test_collectives_auto)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
