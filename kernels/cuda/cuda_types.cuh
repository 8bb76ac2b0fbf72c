/* cuda_types.cuh: the element types kernels are written over, and the one
 * place that turns a runtime rlDtype into a template instantiation.
 *
 * Kernels load bf16/fp16 (or fp32) values, compute in fp32 and round once on
 * store; ld()/st() hide which of the three a pointer holds. */
#ifndef RL_CUDA_TYPES_CUH
#define RL_CUDA_TYPES_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>

typedef __nv_bfloat16 bf16;
typedef __half f16;

static __device__ __forceinline__ float ld(const float *p) { return *p; }
static __device__ __forceinline__ float ld(const bf16 *p) { return __bfloat162float(*p); }
static __device__ __forceinline__ float ld(const f16 *p) { return __half2float(*p); }

static __device__ __forceinline__ void st(float *p, float v) { *p = v; }
static __device__ __forceinline__ void st(bf16 *p, float v) { *p = __float2bfloat16_rn(v); }
static __device__ __forceinline__ void st(f16 *p, float v) { *p = __float2half_rn(v); }

/* Round a float to T's precision and back (what storing then loading gives). */
template <typename T> static __device__ __forceinline__ float round_to(float v) {
    T t;
    st(&t, v);
    return ld(&t);
}

/* RL_DISPATCH(dtype, T, call): call with T bound to dtype's element type. */
#define RL_DISPATCH(dtype, T, ...)                      \
    do {                                                \
        switch (dtype) {                                \
        case RL_F32: { typedef float T; __VA_ARGS__; } break; \
        case RL_F16: { typedef f16 T; __VA_ARGS__; } break;   \
        default: { typedef bf16 T; __VA_ARGS__; } break;      \
        }                                               \
    } while (0)

static inline unsigned rl_blocks(size_t n, unsigned threads) {
    size_t b = (n + threads - 1) / threads;
    return b > 65535u * 16 ? 65535u * 16 : (unsigned)(b ? b : 1);
}

#endif
