/* fixture_configs.h: model configs from tests/fixtures, for the tests that
 * check a rule on every shape: the config.json files at the real Qwen2.5 and
 * Qwen3 shapes (configs/) and the dense fixture models' own (models/ in
 * fixture_paths.h's list).  One home for finding and reading them, so the
 * shard, weight and plan tests walk the same set.
 * Header-only, as each test program is one file; include after cmocka.h. */
#ifndef RL_TEST_FIXTURE_CONFIGS_H
#define RL_TEST_FIXTURE_CONFIGS_H

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "worker/model/checkpoint.h"
#include "tests/fixture_paths.h"

/* rel under $FIXTURES (tests/run sets it; tests/fixtures otherwise): a
 * config file ("configs/qwen2.5-7b.json") or a model directory
 * ("models/qwen2-tiny-gqa3").  A config that cannot be read fails the test. */
static inline void fixture_config(const char *rel, rlModelConfig *c) {
    const char *root = getenv("FIXTURES");
    char path[1024];
    snprintf(path, sizeof(path), "%s/%s", root ? root : "build/fixtures", rel);
    rlError err = {0};
    if (checkpoint_read_config(path, c, &err)) fail_msg("%s: %s", path, err.msg);
}

/* fn(file name, its config, ctx) for every .json in configs/; the test fails
 * when fewer than seven are found (the set shrank or the path is wrong). */
static inline void fixture_each_config(void (*fn)(const char *name, rlModelConfig *c, void *ctx),
                                void *ctx) {
    const char *root = getenv("FIXTURES");
    char dir[1024];
    snprintf(dir, sizeof(dir), "%s/configs", root ? root : "build/fixtures");
    DIR *d = opendir(dir);
    if (!d) fail_msg("cannot open %s", dir);
    int n = 0;
    for (struct dirent *e; (e = readdir(d));) {
        if (!strstr(e->d_name, ".json")) continue;
        char rel[512];
        snprintf(rel, sizeof(rel), "configs/%s", e->d_name);
        rlModelConfig c;
        fixture_config(rel, &c);
        fn(e->d_name, &c, ctx);
        n++;
    }
    closedir(d);
    if (n < 7) fail_msg("%d configs in %s, want at least 7", n, dir);
}

/* fn(model name, its config, ctx) for each dense fixture model (models/). */
static inline void fixture_each_model(void (*fn)(const char *name, rlModelConfig *c, void *ctx),
                               void *ctx) {
    for (int i = 0; i < FIXTURE_N_MODELS; i++) {
        if (strncmp(fixture_models[i], "models/", 7)) continue;
        rlModelConfig c;
        fixture_config(fixture_models[i], &c);
        fn(fixture_models[i] + 7, &c, ctx);
    }
}

#endif
