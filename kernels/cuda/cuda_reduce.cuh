/* cuda_reduce.cuh: warp and block reductions the row kernels share. */
#ifndef RL_CUDA_REDUCE_CUH
#define RL_CUDA_REDUCE_CUH

template <typename T> static __device__ __forceinline__ T warp_sum(T v) {
    for (int o = 16; o; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

static __device__ __forceinline__ float warp_max(float v) {
    for (int o = 16; o; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

/* Sum over the block (blockDim.x a multiple of 32, at most 1024); every
 * thread gets the result.  Uses 32 slots of shared memory of type T. */
template <typename T> static __device__ T block_sum(T v, T *shm) {
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    v = warp_sum(v);
    __syncthreads();
    if (lane == 0) shm[warp] = v;
    __syncthreads();
    T r = lane < nw ? shm[lane] : (T)0;
    return warp_sum(r);
}

#endif
