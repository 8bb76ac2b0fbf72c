/* rope_head.cuh: one attention head's rotary embedding (with Qwen3's head
 * norm first), by a warp.  rope_kv_kernel (norm_rope.cu) rotates every head
 * of a step this way; the decode attention kernel (attention.cu) rotates its
 * own query group and new key the same way instead of waiting for that
 * kernel, so both give the same bits from the same code.
 *
 * Rounding follows Hugging Face in 16 bits: the norm is taken in fp32 over
 * the stored values and its result rounded before and after the weight; the
 * angles are position x rope_init's fp32 inverse frequencies, cos and sin
 * times the attention factor, rounded to the activation type; the rotated
 * values are rounded where the caller stores them. */
#ifndef RL_CUDA_ROPE_HEAD_CUH
#define RL_CUDA_ROPE_HEAD_CUH

#include "kernels/cuda/cuda_reduce.cuh"
#include "kernels/cuda/cuda_types.cuh"

/* cs[0][i], cs[1][i] = cos, sin of frequency i < half at pos, by threads
 * tid = 0 .. n - 1 of the block. */
template <typename T>
static __device__ __forceinline__ void rope_angles(float (*cs)[128], float pos,
                                                   const float *inv_freq, float scale, int half,
                                                   int tid, int n) {
    for (int i = tid; i < half; i += n) {
        float s, co;
        sincosf(pos * inv_freq[i], &s, &co);
        cs[0][i] = round_to<T>(co * scale);
        cs[1][i] = round_to<T>(s * scale);
    }
}

/* The head x (D values) into xw as fp32: RMSNorm'd with weight w (Qwen3's
 * q_norm / k_norm; each lane sums its squares in the order j = lane,
 * lane + 32, ..., as a norm written to memory and read back), or as it is
 * where w is NULL.  A whole warp calls it; xw is visible to the warp after. */
template <typename T>
static __device__ __forceinline__ void rope_head_load(float *xw, const T *x, const T *w,
                                                      float eps, int D, int lane) {
    if (w) {
        float ss = 0;
#pragma unroll 4
        for (int j = lane; j < D; j += 32) {
            float v = ld(x + j);
            xw[j] = v;
            ss += v * v;
        }
        float rstd = rsqrtf(warp_sum(ss) / D + eps);
#pragma unroll 4
        for (int j = lane; j < D; j += 32) xw[j] = round_to<T>(ld(w + j) * round_to<T>(xw[j] * rstd));
    } else {
#pragma unroll 4
        for (int j = lane; j < D; j += 32) xw[j] = ld(x + j);
    }
    __syncwarp();
}

/* Elements i and i + half of the rotated head (rotate-half layout). */
static __device__ __forceinline__ float2 rope_rotate(const float *xw, float (*cs)[128], int i,
                                                     int half) {
    const float co = cs[0][i], s = cs[1][i], x1 = xw[i], x2 = xw[i + half];
    return make_float2(x1 * co - x2 * s, x2 * co + x1 * s);
}

#endif
