/* pool.h: a small fixed pool of threads that run one parallel loop at a time.
 *
 * The CPU backend's own loops (attention over sequences and heads, sampling
 * over rows) run here; GEMMs run on OpenBLAS's threads.  The caller's thread
 * takes items too, so a pool of one thread is a plain loop. */
#ifndef RL_CPU_POOL_H
#define RL_CPU_POOL_H

#include "kernels/error.h"

typedef struct cpuPool cpuPool;
typedef void (*cpuPoolFn)(void *ctx, int item);

/* threads: total threads including the caller's (>= 1). */
cpuPool *cpu_pool_create(int threads, rlError *err);
/* Calls fn(ctx, i) for every i in [0, n), spread over the threads; returns
 * when all are done. */
void cpu_pool_run(cpuPool *p, int n, cpuPoolFn fn, void *ctx);
int cpu_pool_threads(const cpuPool *p);
void cpu_pool_destroy(cpuPool *p);

#endif
