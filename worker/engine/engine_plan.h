/* engine_plan.h: a GPU start's memory plan, checked before anything heavy.
 *
 * The engine builds the planner's options from its own (the planner never
 * knows the engine), so a start that cannot fit stops in seconds with its
 * cause instead of after minutes of loading weights. */
#ifndef RL_ENGINE_PLAN_H
#define RL_ENGINE_PLAN_H

#include <stdio.h>

#include "kernels/config.h"
#include "kernels/error.h"
#include "worker/engine/engine.h"

/* The memory plan (plan.h) for o's TP x PP layout on the real free memory
 * of its devices, printed to log.  RL_EMEMORY with the plan's numbers and
 * the flags to change when it does not fit; RL_EDEVICE when the GPUs cannot
 * be read or are fewer than the ranks.  Runs before any weight is loaded,
 * and before this process creates a CUDA context.  *kv_blocks: the KV
 * blocks every rank has room for. */
int engine_check_plan(const rlModelConfig *cfg, const rlEngineOptions *o, FILE *log,
                      long long *kv_blocks, rlError *err);

#endif
