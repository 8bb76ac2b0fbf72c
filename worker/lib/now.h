/* now.h: the one clock of worker/.
 *
 * Durations come from the monotonic clock (never jumps with NTP); times
 * that leave the process (deadline_ms, heartbeats, arrival stamps compared
 * with a producer's) from the wall clock, in Unix milliseconds. */
#ifndef RL_NOW_H
#define RL_NOW_H

#include <stdint.h>
#include <time.h>

/* Monotonic seconds, for durations. */
static inline double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Monotonic milliseconds, for durations. */
static inline double now_ms(void) { return now_s() * 1e3; }

/* CPU seconds the calling thread has used. */
static inline double now_thread_cpu_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Wall-clock Unix time in milliseconds. */
static inline int64_t now_wall_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

#endif
