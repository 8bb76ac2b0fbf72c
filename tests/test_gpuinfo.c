/* test_gpuinfo.c: the NVML helper works, or explains itself, on any machine.
 *
 * Without a driver (CI) the probe must fail with a message naming the
 * library, links read "?" and nothing crashes; with one, every visible GPU
 * has a name and a total, and a device's link to itself is "X". */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "kernels/gpuinfo.h"

static void test_probe(void **state) {
    (void)state;
    rlGpuHost host;
    char why[256] = "";
    char link[16];
    if (rl_gpu_probe(&host, why, sizeof(why)) != 0) {
        assert_int_equal(host.count, 0);
        assert_non_null(strstr(why, "libnvidia-ml") ? why : strstr(why, "NVML"));
        rl_gpu_link(0, 1, link, sizeof(link));
        assert_string_equal(link, "?");
        assert_int_equal(rl_gpu_link_fast(0, 1), -1);
    } else {
        for (int i = 0; i < host.count; i++) {
            assert_true(host.gpus[i].name[0] != 0);
            assert_true(host.gpus[i].total > 0);
        }
        rl_gpu_link(0, 0, link, sizeof(link));
        assert_string_equal(link, "X");
    }
    /* The matrix prints whatever NVML knows. */
    FILE *f = tmpfile();
    int devs[2] = {0, 1};
    rl_gpu_topology_print(f, devs, 2);
    assert_true(ftell(f) > 0);
    fclose(f);
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_probe)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
