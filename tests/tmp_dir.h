/* tmp_dir.h: one scratch directory per test program, for the tests that
 * write files (broken copies of checkpoints, generated model variants): made
 * by the group setup, removed with everything in it by the group teardown.
 * Header-only, as each test program is one file:
 *     cmocka_run_group_tests(tests, tmp_dir_setup, tmp_dir_teardown) */
#ifndef RL_TEST_TMP_DIR_H
#define RL_TEST_TMP_DIR_H

#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>

static char g_tmp[256];   /* the directory, once tmp_dir_setup has run */

static inline int tmp_dir_rm_one(const char *path, const struct stat *sb, int flag, struct FTW *ftw) {
    (void)sb, (void)flag, (void)ftw;
    return remove(path);
}

static inline int tmp_dir_setup(void **state) {
    (void)state;
    snprintf(g_tmp, sizeof(g_tmp), "/tmp/redlm-test-XXXXXX");
    return mkdtemp(g_tmp) ? 0 : -1;
}

static inline int tmp_dir_teardown(void **state) {
    (void)state;
    return nftw(g_tmp, tmp_dir_rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

#endif
