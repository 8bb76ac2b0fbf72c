/* half.h: bf16 and fp16 to fp32 on the host.
 *
 * Checkpoints store bf16 or fp16; the CPU backend computes in fp32 and
 * converts once at upload.  Plain bit manipulation, so results do not depend
 * on the compiler's _Float16 support. */
#ifndef RL_HALF_H
#define RL_HALF_H

#include <stdint.h>
#include <string.h>

static inline float rl_bf16_to_f32(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static inline float rl_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000) << 16, exp = (h >> 10) & 0x1f, man = h & 0x3ff, u;
    if (exp == 0x1f) {
        u = sign | 0x7f800000u | (man << 13);          /* inf, NaN */
    } else if (exp != 0) {
        u = sign | ((exp + 112) << 23) | (man << 13);   /* normal: rebias 15 -> 127 */
    } else if (man == 0) {
        u = sign;                                       /* zero */
    } else {                                            /* subnormal: normalise */
        uint32_t e = 113;
        while (!(man & 0x400)) man <<= 1, e--;
        u = sign | (e << 23) | ((man & 0x3ff) << 13);
    }
    float f;
    memcpy(&f, &u, 4);
    return f;
}

#endif
