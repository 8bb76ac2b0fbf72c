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

/* `nvidia-smi topo -m` then `nvidia-smi topo -p2p r` of a six-GPU PCIe
 * host: two switches of three cards under two sockets, a NIC column, and
 * peer-to-peer only inside a switch. */
static const char smi_text[] =
    "\tGPU0\tGPU1\tGPU2\tGPU3\tGPU4\tGPU5\tNIC0\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\n"
    "GPU0\t X \tPIX\tPIX\tSYS\tSYS\tSYS\tPHB\t0-31\t0\t\tN/A\n"
    "GPU1\tPIX\t X \tPIX\tSYS\tSYS\tSYS\tPHB\t0-31\t0\t\tN/A\n"
    "GPU2\tPIX\tPIX\t X \tSYS\tSYS\tSYS\tPHB\t0-31\t0\t\tN/A\n"
    "GPU3\tSYS\tSYS\tSYS\t X \tPIX\tPIX\tSYS\t32-63\t1\t\tN/A\n"
    "GPU4\tSYS\tSYS\tSYS\tPIX\t X \tPIX\tSYS\t32-63\t1\t\tN/A\n"
    "GPU5\tSYS\tSYS\tSYS\tPIX\tPIX\t X \tSYS\t32-63\t1\t\tN/A\n"
    "NIC0\tPHB\tPHB\tPHB\tSYS\tSYS\tSYS\t X \n"
    "\n"
    "Legend:\n\n"
    "  X    = Self\n"
    "  SYS  = Connection traversing PCIe as well as the SMP interconnect between NUMA nodes\n"
    "  PIX  = Connection traversing at most a single PCIe bridge\n"
    "  NV#  = Connection traversing a bonded set of # NVLinks\n"
    "\n"
    " \tGPU0\tGPU1\tGPU2\tGPU3\tGPU4\tGPU5\n"
    " GPU0\tX\tOK\tOK\tCNS\tCNS\tCNS\n"
    " GPU1\tOK\tX\tOK\tCNS\tCNS\tCNS\n"
    " GPU2\tOK\tOK\tX\tCNS\tCNS\tCNS\n"
    " GPU3\tCNS\tCNS\tCNS\tX\tOK\tOK\n"
    " GPU4\tCNS\tCNS\tCNS\tOK\tX\tOK\n"
    " GPU5\tCNS\tCNS\tCNS\tOK\tOK\tX\n"
    "\n"
    "Legend:\n\n"
    "  X    = Self\n"
    "  OK   = Status Ok\n"
    "  CNS  = Chipset not supported\n";

static void test_topology_parse(void **state) {
    (void)state;
    rlGpuTopology t;
    char why[256];
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
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_probe),
                                       cmocka_unit_test(test_topology_parse)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
