/* engine_flags.h: the engine's command-line flags, parsed in one place so
 * `redlm generate`, `redlm worker` and `redlm bench` accept the same ones. */
#ifndef RL_ENGINE_FLAGS_H
#define RL_ENGINE_FLAGS_H

#include "../kernels/error.h"
#include "engine.h"

/* If argv[*i] is an engine flag, store it in o, advance *i past its value
 * and return 1; return 0 for any other argument, -1 (err filled) for a bad
 * value.  The strings stored point into argv. */
int engine_flags_parse(int argc, char **argv, int *i, rlEngineOptions *o, rlError *err);
/* The flags' help text, one per line. */
extern const char engine_flags_help[];

#endif
