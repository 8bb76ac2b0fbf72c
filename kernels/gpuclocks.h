/* gpuclocks.h: the SM clock and power a GPU ran at over a stretch of work.
 *
 * A GPU held at its power limit lowers its clock: on a 700 W H100 a long
 * prefill-heavy run sits near 1,400 MHz against a top of 1,980 (kernels/
 * PERF.md v43), so two rates compare only at the clocks they ran at, and a
 * benchmark says which.  A sampler reads the clock and power through NVML
 * (gpuinfo.h) every RL_CLOCK_PERIOD_MS on a thread of its own, from start
 * to stop; the summary is the clock's range and median and the mean power. */
#ifndef RL_GPUCLOCKS_H
#define RL_GPUCLOCKS_H

#define RL_CLOCK_PERIOD_MS 5

typedef struct rlGpuClocks {
    int n;                      /* samples */
    unsigned min_mhz, median_mhz, max_mhz;
    double watts;               /* mean power drawn */
    unsigned top_mhz;           /* the device's top SM clock, 0 when unknown */
    double cap_watts;           /* the power limit it is held to, 0 when unknown */
} rlGpuClocks;

typedef struct rlClockSampler rlClockSampler;

/* Start sampling a visible device; NULL when NVML cannot read its clock
 * (no driver, an old one) or the thread cannot start: nothing to report. */
rlClockSampler *rl_clock_sampler_start(int device);

/* Stop, free the sampler (NULL: nothing) and summarise: 0 with *out
 * filled, -1 when no sample was taken. */
int rl_clock_sampler_stop(rlClockSampler *s, rlGpuClocks *out);

/* The summary of n samples (clocks in MHz, power in W): the work of stop,
 * apart so it can be checked; reorders mhz. */
int rl_gpu_clocks_summarize(unsigned *mhz, const double *watts, int n, rlGpuClocks *out);

#endif
