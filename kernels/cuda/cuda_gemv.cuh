/* cuda_gemv.cuh: the matrix-vector product of decode steps at small batch
 * (up to GEMV_MAX_ROWS rows), bound by reading the weights: each block owns
 * GEMV_COLS output columns, its threads stride over k in 16-byte chunks (the
 * weights streamed past L1, the few input rows cached), then reduce through
 * shared memory.  gemm.cu launches it for linear layers; moe.cu's router
 * runs the same block, so its logits are the ones a plain GEMV gives. */
#ifndef RL_CUDA_GEMV_CUH
#define RL_CUDA_GEMV_CUH

#include <type_traits>

#include "kernels/cuda/cuda_launch.cuh"
#include "kernels/cuda/cuda_reduce.cuh"
#include "kernels/cuda/cuda_types.cuh"

#define GEMV_THREADS 128
#define GEMV_COLS 4
#define GEMV_MAX_ROWS 8

/* A packed pair of 16-bit values as two floats. */
static __device__ __forceinline__ float2 pair_float2(__nv_bfloat162 h) { return __bfloat1622float2(h); }
static __device__ __forceinline__ float2 pair_float2(__half2 h) { return __half22float2(h); }
template <typename T>
using pair16 = typename std::conditional<std::is_same<T, bf16>::value, __nv_bfloat162, __half2>::type;

/* Eight packed 16-bit values times eight floats, accumulated into acc. */
template <typename T> static __device__ __forceinline__ float dot8(uint4 w, const float *x, float acc, T) {
    const pair16<T> *h = (const pair16<T> *)&w;
#pragma unroll
    for (int i = 0; i < 4; i++) {
        float2 f = pair_float2(h[i]);
        acc = fmaf(f.x, x[2 * i], fmaf(f.y, x[2 * i + 1], acc));
    }
    return acc;
}
template <typename T> static __device__ __forceinline__ void unpack8(uint4 v, float *x, T) {
    const pair16<T> *h = (const pair16<T> *)&v;
#pragma unroll
    for (int i = 0; i < 4; i++) {
        float2 f = pair_float2(h[i]);
        x[2 * i] = f.x, x[2 * i + 1] = f.y;
    }
}

/* One block of gemv_kernel (gemm.cu), also the first part of moe.cu's
 * router kernel: out[r, c] = in[r, :] . w[c, :] (+ bias[c]) for rows <= R
 * and the block's GEMV_COLS columns c; k a multiple of 8.  Each thread keeps
 * the next chunk's weights loading while it uses the current one; the first
 * chunk is read before waiting on the kernel that writes `in` (PDL: the
 * weights are nobody's output).  Launch with GEMV_THREADS threads. */
template <typename T, typename O, int R>
static __device__ __forceinline__ void gemv_block(O *out, const T *in, const T *w, const T *bias,
                                                  int rows, int n, int k) {
    __shared__ float red[GEMV_THREADS / 32][GEMV_COLS * R];
    pdl_trigger();
    const int c0 = blockIdx.x * GEMV_COLS, kc = k / 8;
    const uint4 *wv[GEMV_COLS];
#pragma unroll
    for (int c = 0; c < GEMV_COLS; c++)
        wv[c] = (const uint4 *)(w + (size_t)min(c0 + c, n - 1) * k);
    const uint4 *xv = (const uint4 *)in;
    float acc[GEMV_COLS][R];
#pragma unroll
    for (int c = 0; c < GEMV_COLS; c++)
#pragma unroll
        for (int r = 0; r < R; r++) acc[c][r] = 0;
    uint4 wn[GEMV_COLS];
    if (threadIdx.x < kc)
#pragma unroll
        for (int c = 0; c < GEMV_COLS; c++) wn[c] = __ldcs(wv[c] + threadIdx.x);
    pdl_wait();
    for (int j = threadIdx.x; j < kc; j += GEMV_THREADS) {
        uint4 wq[GEMV_COLS];
#pragma unroll
        for (int c = 0; c < GEMV_COLS; c++) wq[c] = wn[c];
        if (j + GEMV_THREADS < kc)
#pragma unroll
            for (int c = 0; c < GEMV_COLS; c++) wn[c] = __ldcs(wv[c] + j + GEMV_THREADS);
#pragma unroll
        for (int r = 0; r < R; r++) {
            if (r >= rows) break;
            float x[8];
            unpack8(__ldg(xv + (size_t)r * kc + j), x, T());
#pragma unroll
            for (int c = 0; c < GEMV_COLS; c++) acc[c][r] = dot8(wq[c], x, acc[c][r], T());
        }
    }
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
    for (int c = 0; c < GEMV_COLS; c++)
#pragma unroll
        for (int r = 0; r < R; r++) {
            float v = warp_sum(acc[c][r]);
            if (lane == 0) red[warp][c * R + r] = v;
        }
    __syncthreads();
    for (int i = threadIdx.x; i < GEMV_COLS * R; i += blockDim.x) {
        int c = i / R, r = i % R, col = c0 + c;
        if (r >= rows || col >= n) continue;
        float v = 0;
#pragma unroll
        for (int wi = 0; wi < GEMV_THREADS / 32; wi++) v += red[wi][i];
        if (bias) v += ld(bias + col);
        st(out + (size_t)r * n + col, v);
    }
}

#endif
