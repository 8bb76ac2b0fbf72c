/* startup.h: checks a command runs at start, before anything heavy is
 * loaded, so a start that cannot work stops in seconds with its cause
 * instead of after minutes of loading weights or never. */
#ifndef RL_STARTUP_H
#define RL_STARTUP_H

#include <stdio.h>

#include "../kernels/config.h"
#include "../kernels/error.h"
#include "engine.h"
#include "redis_url.h"

/* Redis answers PING within wait_s seconds (at least one attempt, each
 * connect limited to 2 s): a worker started beside its Redis (compose,
 * systemd) may come up first, but one pointed at the wrong address must
 * not retry forever.  RL_EREDIS with the address and the last error. */
int startup_wait_redis(const rlRedisUrl *u, int wait_s, rlError *err);

/* A GPU start's memory plan (plan.h) for its TP x PP layout on the real
 * free memory of its devices, printed to log.  RL_EMEMORY with the plan's
 * numbers and the flags to change when it does not fit; RL_EDEVICE when the
 * GPUs cannot be read or are fewer than the ranks.  Runs before any weight
 * is loaded, and before this process creates a CUDA context.  *kv_blocks:
 * the KV blocks every rank has room for. */
int startup_check_plan(const rlModelConfig *cfg, const rlEngineOptions *o, FILE *log,
                       long long *kv_blocks, rlError *err);

#endif
