/* engine_flags.h: the engine's command-line flags, parsed in one place so
 * `redlm generate`, `redlm worker` and `redlm bench` accept the same ones. */
#ifndef RL_ENGINE_FLAGS_H
#define RL_ENGINE_FLAGS_H

#include "kernels/error.h"
#include "worker/engine/engine.h"
#include "worker/engine/layout.h"

/* The engine's options and the layout flags (--tp, --pp, --devices, ...)
 * they point into: keep the struct alive as long as the options. */
typedef struct rlEngineFlags {
    rlEngineOptions o;
    rlLayout lay;
} rlEngineFlags;

void engine_flags_init(rlEngineFlags *f);
/* If argv[*i] is an engine or layout flag, store it, leave *i on its last
 * argument and return 1; return 0 for any other argument, -1 (err filled)
 * for a bad value.  The strings stored point into argv. */
int engine_flags_parse(int argc, char **argv, int *i, rlEngineFlags *f, rlError *err);
/* Copy the parsed layout into f->o; call once, after the last flag. */
void engine_flags_finish(rlEngineFlags *f);
/* The flags' help text, one per line (layout flags included). */
extern const char engine_flags_help[];

#endif
