/* gpuclocks.c: a thread that samples a GPU's SM clock and power (see
 * gpuclocks.h for why).  The samples go to a fixed array: at one every
 * RL_CLOCK_PERIOD_MS, RL_CLOCK_SAMPLES hold over five minutes, and a longer
 * stretch keeps its first five. */
#include "kernels/gpuclocks.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <time.h>

#include "kernels/gpuinfo.h"

#define RL_CLOCK_SAMPLES 65536

struct rlClockSampler {
    int device;
    atomic_int stop;
    pthread_t thread;
    int n;
    unsigned mhz[RL_CLOCK_SAMPLES];
    double watts[RL_CLOCK_SAMPLES];
};

static void *sampler_main(void *arg) {
    rlClockSampler *s = arg;
    const struct timespec period = {0, RL_CLOCK_PERIOD_MS * 1000000L};
    while (!atomic_load(&s->stop)) {
        if (s->n < RL_CLOCK_SAMPLES &&
            rl_gpu_clock_now(s->device, &s->mhz[s->n], &s->watts[s->n]) == 0)
            s->n++;
        nanosleep(&period, NULL);
    }
    return NULL;
}

rlClockSampler *rl_clock_sampler_start(int device) {
    unsigned mhz;
    double w;
    if (rl_gpu_clock_now(device, &mhz, &w) != 0) return NULL;
    rlClockSampler *s = malloc(sizeof *s);
    if (!s) return NULL;
    s->device = device;
    s->n = 0;
    atomic_init(&s->stop, 0);
    if (pthread_create(&s->thread, NULL, sampler_main, s) != 0) {
        free(s);
        return NULL;
    }
    return s;
}

static int cmp_unsigned(const void *a, const void *b) {
    unsigned x = *(const unsigned *)a, y = *(const unsigned *)b;
    return (x > y) - (x < y);
}

int rl_gpu_clocks_summarize(unsigned *mhz, const double *watts, int n, rlGpuClocks *out) {
    *out = (rlGpuClocks){.n = n};
    if (n <= 0) return -1;
    double sum = 0;
    for (int i = 0; i < n; i++) sum += watts[i];
    qsort(mhz, (size_t)n, sizeof *mhz, cmp_unsigned);
    out->min_mhz = mhz[0];
    out->median_mhz = mhz[(n - 1) / 2];
    out->max_mhz = mhz[n - 1];
    out->watts = sum / n;
    return 0;
}

int rl_clock_sampler_stop(rlClockSampler *s, rlGpuClocks *out) {
    *out = (rlGpuClocks){0};
    if (!s) return -1;
    atomic_store(&s->stop, 1);
    pthread_join(s->thread, NULL);
    int rc = rl_gpu_clocks_summarize(s->mhz, s->watts, s->n, out);
    if (rl_gpu_clock_limits(s->device, &out->top_mhz, &out->cap_watts) != 0)
        out->top_mhz = 0, out->cap_watts = 0;
    free(s);
    return rc;
}
