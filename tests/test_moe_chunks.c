/* test_moe_chunks.c: the stepping of moe.cu's down-projection GEMV
 * over its experts' chunks (kernels/cuda/moe_chunks.h) lands where a
 * division would, for every expert width up to 8 x 512 and every lane's
 * start, past the 32 experts the kernel takes. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "kernels/cuda/moe_chunks.h"

#define THREADS 128     /* the kernel's block (GEMV_THREADS) */

static void test_stepping(void **state) {
    (void)state;
    for (int mc = 1; mc <= 512; mc++) {
        const rlMoeChunk step = moe_chunk_at(THREADS, mc);
        for (int c0 = 0; c0 < THREADS; c0++) {
            rlMoeChunk p = moe_chunk_at(c0, mc);
            for (int c = c0; c < 33 * mc; c += THREADS) {
                rlMoeChunk want = moe_chunk_at(c, mc);
                if (p.j != want.j || p.q != want.q || p.q < 0 || p.q >= mc)
                    fail_msg("mc %d, chunk %d: stepped to (%d, %d), (%d, %d) wanted", mc, c,
                             p.j, p.q, want.j, want.q);
                p = moe_chunk_next(p, step, mc);
            }
        }
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_stepping),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
