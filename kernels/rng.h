/* rng.h: the counter-based random numbers sampling draws from.
 *
 * A draw is a pure function of (seed, sample index, step), so a request's
 * tokens never depend on what else shares its batch, on preemption, or on
 * which backend runs it.  splitmix64-style finalisers over the packed key:
 * cheap, stateless, identical in C and CUDA. */
#ifndef RL_RNG_H
#define RL_RNG_H

#include <stdint.h>

#ifdef __CUDACC__
#define RL_HD __host__ __device__
#else
#define RL_HD
#endif

static inline RL_HD uint64_t rl_mix64(uint64_t z) {
    z += 0x9e3779b97f4a7c15ULL;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

/* Uniform in [0, 1) with 53 random bits, as a double for both backends. */
static inline RL_HD double rl_uniform(uint64_t seed, uint32_t sample_index, uint32_t step) {
    uint64_t h = rl_mix64(rl_mix64(seed) ^ (((uint64_t)sample_index << 32) | step));
    return (double)(h >> 11) * (1.0 / 9007199254740992.0);
}

#endif
