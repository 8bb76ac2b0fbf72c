/* cuda_fp8.cuh: how activations are rounded to e4m3 for FP8 W8A8, in one
 * place: the prefill's quantizers (qlinear.cu) and the decode GEMV that
 * rounds its own x (wq.cu) must make the same bytes and scales, so a row's
 * product does not depend on which road its step took. */
#ifndef RL_CUDA_FP8_CUH
#define RL_CUDA_FP8_CUH

#include <cuda_fp8.h>
#include <stdint.h>

#define FP8_E4M3_MAX 448.0f

/* Eight values times inv (448 over their group's absolute maximum, or one
 * over a static scale) rounded to e4m3, saturating, two a conversion.  A
 * multiply, not a division by the scale: the quantizers are bound by the
 * instructions they issue as much as by the bytes they move (PERF.md v46). */
static __device__ __forceinline__ uint2 fp8_e4m3x8(const float *v, float inv) {
    union { __nv_fp8x2_storage_t b[4]; uint2 u; } o;
#pragma unroll
    for (int i = 0; i < 4; i++)
        o.b[i] = __nv_cvt_float2_to_fp8x2(make_float2(v[2 * i] * inv, v[2 * i + 1] * inv),
                                          __NV_SATFINITE, __NV_E4M3);
    return o.u;
}

/* A group's scale (stored, the product's multiplier) and its inverse
 * (fp8_e4m3x8's), from the group's absolute maximum. */
static __device__ __forceinline__ float fp8_scale_of(float amax, float *inv) {
    *inv = amax > 0 ? FP8_E4M3_MAX / amax : 1.0f;
    return amax > 0 ? amax / FP8_E4M3_MAX : 1.0f;
}

/* A 128-column group's scale and inv, the group held by a half-warp eight
 * values a lane: the static scale where there is one, else from the
 * group's largest magnitude.  Every lane of the warp calls it (the
 * shuffles take both halves). */
static __device__ __forceinline__ float fp8_group128_scale(const float *v, const float *static_scale,
                                                           float *inv) {
    if (static_scale) {
        *inv = 1.0f / *static_scale;
        return *static_scale;
    }
    float amax = 0;
#pragma unroll
    for (int i = 0; i < 8; i++) amax = fmaxf(amax, fabsf(v[i]));
#pragma unroll
    for (int o = 8; o; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
    return fp8_scale_of(amax, inv);
}

#endif
