/* startup.h: checks a command runs at start, before anything heavy is
 * loaded, so a start that cannot work stops in seconds with its cause
 * instead of after minutes of loading weights or never. */
#ifndef RL_STARTUP_H
#define RL_STARTUP_H

#include "../kernels/error.h"
#include "redis_url.h"

/* Redis answers PING within wait_s seconds (at least one attempt, each
 * connect limited to 2 s): a worker started beside its Redis (compose,
 * systemd) may come up first, but one pointed at the wrong address must
 * not retry forever.  RL_EREDIS with the address and the last error. */
int startup_wait_redis(const rlRedisUrl *u, int wait_s, rlError *err);

#endif
