/* test_gpuinfo.c: the NVML helper works, or explains itself, on any machine.
 *
 * Without a driver (CI) the probe must fail with a message naming the
 * library, links read "?" and nothing crashes; with one, every visible GPU
 * has a name and a total, and a device's link to itself is "X".  Topology
 * matrices as users paste them (`nvidia-smi topo -m`, `-p2p r`) parse into
 * links and P2P answers, and malformed ones say why. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "kernels/gpuclocks.h"
#include "kernels/gpuinfo.h"

static void test_probe(void **state) {
    (void)state;
    rlGpuHost host;
    char why[256] = "";
    char link[16];
    if (rl_gpu_probe(&host, why, sizeof(why)) != 0) {
        assert_int_equal(host.count, 0);
        assert_non_null(strstr(why, "libnvidia-ml") ? why : strstr(why, "NVML"));
        rl_gpu_link_name(rl_gpu_link(0, 1), link, sizeof(link));
        assert_string_equal(link, "?");
        assert_int_equal(rl_gpu_link_fast(0, 1), -1);
        unsigned long long own;
        assert_int_equal(rl_gpu_own_used(0, &own), -1);
    } else {
        for (int i = 0; i < host.count; i++) {
            assert_true(host.gpus[i].name[0] != 0);
            assert_true(host.gpus[i].total > 0);
            assert_true(host.gpus[i].others <= host.gpus[i].total);
        }
        rl_gpu_link_name(rl_gpu_link(0, 0), link, sizeof(link));
        assert_string_equal(link, "X");
    }
    /* The matrix prints whatever NVML knows. */
    FILE *f = tmpfile();
    int devs[2] = {0, 1};
    rl_gpu_topology_print(f, devs, 2);
    assert_true(ftell(f) > 0);
    fclose(f);
}

/* The clock sampler: nothing to sample without a driver, and with one a
 * stretch of 50 ms gives samples whose median lies in their range, under
 * the device's top clock. */
static void test_clock_sampler(void **state) {
    (void)state;
    unsigned mhz;
    double watts;
    rlGpuClocks c;
    rlClockSampler *s = rl_clock_sampler_start(0);
    if (rl_gpu_clock_now(0, &mhz, &watts) != 0) {
        assert_null(s);
        assert_int_equal(rl_clock_sampler_stop(NULL, &c), -1);
        assert_int_equal(c.n, 0);
        return;
    }
    assert_non_null(s);
    const struct timespec wait = {0, 50 * 1000000L};
    nanosleep(&wait, NULL);
    assert_int_equal(rl_clock_sampler_stop(s, &c), 0);
    assert_true(c.n >= 1);
    assert_true(c.min_mhz <= c.median_mhz && c.median_mhz <= c.max_mhz);
    assert_true(c.top_mhz == 0 || c.max_mhz <= c.top_mhz);
    assert_true(c.watts > 0);
}

/* The summary: the median is the lower middle sample, the power a mean. */
static void test_clocks_summarize(void **state) {
    (void)state;
    unsigned mhz[] = {1980, 1410, 1755, 1425};
    const double watts[] = {650, 700, 690, 660};
    rlGpuClocks c;
    assert_int_equal(rl_gpu_clocks_summarize(mhz, watts, 4, &c), 0);
    assert_int_equal(c.n, 4);
    assert_int_equal(c.min_mhz, 1410);
    assert_int_equal(c.median_mhz, 1425);
    assert_int_equal(c.max_mhz, 1980);
    assert_true(c.watts > 674.9 && c.watts < 675.1);
    assert_int_equal(rl_gpu_clocks_summarize(mhz, watts, 0, &c), -1);
    assert_int_equal(c.n, 0);
}

/* tests/fixtures/topology/pcie-2x3.txt: `nvidia-smi topo -m` then
 * `nvidia-smi topo -p2p r` of a six-GPU PCIe host: two switches of three
 * cards under two sockets, a NIC column, peer-to-peer only inside a switch. */
static void read_fixture(const char *name, char *buf, size_t n) {
    const char *root = getenv("FIXTURES");
    char path[1024];
    snprintf(path, sizeof(path), "%s/topology/%s", root ? root : "build/fixtures", name);
    FILE *f = fopen(path, "r");
    if (!f) fail_msg("cannot open %s", path);
    size_t len = fread(buf, 1, n - 1, f);
    buf[len] = 0;
    fclose(f);
}

static void test_topology_parse(void **state) {
    (void)state;
    rlGpuTopology t;
    char why[256], smi_text[8192];
    read_fixture("pcie-2x3.txt", smi_text, sizeof(smi_text));
    assert_int_equal(rl_gpu_topology_parse(smi_text, &t, why, sizeof(why)), 0);
    assert_int_equal(t.n, 6);
    assert_int_equal(t.link[0][0].kind, RL_LINK_SELF);
    assert_int_equal(t.link[0][1].kind, RL_LINK_PIX);
    assert_int_equal(t.link[2][3].kind, RL_LINK_SYS);
    assert_int_equal(t.link[4][5].kind, RL_LINK_PIX);
    assert_int_equal(t.link[0][1].p2p, 1);
    assert_int_equal(t.link[0][3].p2p, 0);
    assert_int_equal(t.link[5][5].p2p, 1);

    /* bare rows, ';' between them: P2P unknown when not given */
    assert_int_equal(rl_gpu_topology_parse("X NV18 SYS; NV18 X SYS; SYS SYS X", &t, why,
                                           sizeof(why)), 0);
    assert_int_equal(t.n, 3);
    assert_int_equal(t.link[0][1].kind, RL_LINK_NVLINK);
    assert_int_equal(t.link[1][0].nvlinks, 18);
    assert_int_equal(t.link[1][2].kind, RL_LINK_SYS);
    assert_int_equal(t.link[0][1].p2p, -1);
    char name[16];
    rl_gpu_link_name(t.link[0][1], name, sizeof(name));
    assert_string_equal(name, "NV18");

    /* malformed: each says what is wrong */
    assert_int_equal(rl_gpu_topology_parse("hello", &t, why, sizeof(why)), -1);
    assert_non_null(strstr(why, "no rows of links"));
    assert_int_equal(rl_gpu_topology_parse("X PIX; PIX", &t, why, sizeof(why)), -1);
    assert_non_null(strstr(why, "row 1 has 1 links"));
    assert_int_equal(rl_gpu_topology_parse("X PIX; X PIX", &t, why, sizeof(why)), -1);
    assert_non_null(strstr(why, "diagonal"));
    assert_int_equal(rl_gpu_topology_parse("X PIX; PIX X; X OK; OK X; OK X", &t, why,
                                           sizeof(why)), -1);
    assert_non_null(strstr(why, "3 rows of P2P answers for 2 GPUs"));
    assert_int_equal(t.n, 0);

    /* two NVLink islands of four */
    read_fixture("nvlink-2x4.txt", smi_text, sizeof(smi_text));
    assert_int_equal(rl_gpu_topology_parse(smi_text, &t, why, sizeof(why)), 0);
    assert_int_equal(t.n, 8);
    assert_int_equal(t.link[1][3].kind, RL_LINK_NVLINK);
    assert_int_equal(t.link[3][4].kind, RL_LINK_SYS);
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_probe),
                                       cmocka_unit_test(test_clock_sampler),
                                       cmocka_unit_test(test_clocks_summarize),
                                       cmocka_unit_test(test_topology_parse)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
