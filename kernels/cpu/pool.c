/* pool.c: the CPU backend's thread pool (see pool.h).
 *
 * Items are handed out by an atomic counter, so uneven items (a long prompt
 * next to single decode tokens) balance themselves without a scheduler.
 * Workers sleep on a condition variable between loops: a step runs a few
 * hundred loops at most, so wake-up latency (microseconds) does not matter
 * next to the GEMMs around them. */
#include "kernels/cpu/pool.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

struct cpuPool {
    int n_threads;
    pthread_t *workers;
    pthread_mutex_t mu;
    pthread_cond_t start, done;
    unsigned long generation;     /* bumped once per loop */
    int busy;                     /* workers still inside the current loop */
    int stop;
    cpuPoolFn fn;
    void *ctx;
    int n;
    atomic_int next;
};

static void pool_drain(cpuPool *p) {
    for (;;) {
        int i = atomic_fetch_add(&p->next, 1);
        if (i >= p->n) return;
        p->fn(p->ctx, i);
    }
}

static void *pool_worker(void *arg) {
    cpuPool *p = arg;
    unsigned long seen = 0;
    pthread_mutex_lock(&p->mu);
    for (;;) {
        while (!p->stop && p->generation == seen) pthread_cond_wait(&p->start, &p->mu);
        if (p->stop) break;
        seen = p->generation;
        pthread_mutex_unlock(&p->mu);
        pool_drain(p);
        pthread_mutex_lock(&p->mu);
        if (--p->busy == 0) pthread_cond_signal(&p->done);
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

cpuPool *cpu_pool_create(int threads, rlError *err) {
    cpuPool *p = calloc(1, sizeof(*p));
    if (!p) goto nomem;
    p->n_threads = threads < 1 ? 1 : threads;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->start, NULL);
    pthread_cond_init(&p->done, NULL);
    p->workers = calloc((size_t)p->n_threads, sizeof(pthread_t));
    if (!p->workers) goto nomem;
    for (int i = 1; i < p->n_threads; i++) {
        if (pthread_create(&p->workers[i], NULL, pool_worker, p) != 0) {
            p->n_threads = i;
            cpu_pool_destroy(p);
            rl_error(err, RL_EINTERNAL,
                     "could not start CPU worker thread %d: the system refused a new thread; "
                     "lower --threads", i);
            return NULL;
        }
    }
    return p;
nomem:
    if (p) free(p);
    rl_error(err, RL_EMEMORY, "out of host memory creating the CPU thread pool");
    return NULL;
}

void cpu_pool_run(cpuPool *p, int n, cpuPoolFn fn, void *ctx) {
    if (n <= 0) return;
    if (p->n_threads == 1 || n == 1) {
        for (int i = 0; i < n; i++) fn(ctx, i);
        return;
    }
    pthread_mutex_lock(&p->mu);
    p->fn = fn, p->ctx = ctx, p->n = n;
    atomic_store(&p->next, 0);
    p->busy = p->n_threads - 1;
    p->generation++;
    pthread_cond_broadcast(&p->start);
    pthread_mutex_unlock(&p->mu);
    pool_drain(p);
    pthread_mutex_lock(&p->mu);
    while (p->busy > 0) pthread_cond_wait(&p->done, &p->mu);
    pthread_mutex_unlock(&p->mu);
}

int cpu_pool_threads(const cpuPool *p) { return p->n_threads; }

void cpu_pool_destroy(cpuPool *p) {
    if (!p) return;
    pthread_mutex_lock(&p->mu);
    p->stop = 1;
    pthread_cond_broadcast(&p->start);
    pthread_mutex_unlock(&p->mu);
    for (int i = 1; i < p->n_threads; i++) pthread_join(p->workers[i], NULL);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->start);
    pthread_cond_destroy(&p->done);
    free(p->workers);
    free(p);
}
