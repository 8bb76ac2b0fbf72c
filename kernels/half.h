/* half.h: bf16 and fp16 to and from fp32 on the host.
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

/* fp32 to bf16 and fp16, rounding to nearest even (NaN stays NaN, fp16
 * overflows to infinity): one rounding after an fp32 sum, as the CPU
 * collectives do for 16-bit buffers. */
static inline uint16_t rl_f32_to_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40); /* NaN stays NaN */
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1)) >> 16);
}

static inline uint16_t rl_f32_to_f16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000);
    uint32_t a = u & 0x7fffffffu;
    if (a > 0x7f800000u) return sign | 0x7e00;           /* NaN */
    if (a >= 0x477ff000u) return sign | 0x7c00;          /* rounds past 65504: inf */
    if (a < 0x38800000u) {                               /* subnormal or zero */
        if (a < 0x33000000u) return sign;                /* below half the smallest subnormal */
        uint32_t man = (a & 0x7fffff) | 0x800000, shift = 126 - (a >> 23);
        uint32_t half = 1u << (shift - 1), rest = man & ((1u << shift) - 1);
        uint32_t r = man >> shift;
        if (rest > half || (rest == half && (r & 1))) r++;
        return sign | (uint16_t)r;
    }
    uint32_t r = a - 0x38000000u;                        /* rebias 127 -> 15 */
    r = (r + 0xfffu + ((r >> 13) & 1)) >> 13;
    return sign | (uint16_t)r;
}

#endif
