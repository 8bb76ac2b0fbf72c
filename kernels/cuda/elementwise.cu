/* elementwise.cu: the operations that touch each element once.
 *
 * dtype conversion (uploads), dummy weights drawn on the device, embedding
 * gather, SwiGLU, the logit-row gather and the residual add.  All are bound
 * by memory and tiny next to the GEMMs; they are written plainly, with
 * grid-stride loops, and vectorised only where it is free. */
#include "kernels/cuda/cuda_internal.h"
#include "kernels/cuda/cuda_launch.cuh"
#include "kernels/cuda/cuda_math.cuh"
#include "kernels/cuda/cuda_types.cuh"

extern "C" {
#include "kernels/rng.h"
}

template <typename D, typename S>
__global__ void convert_kernel(D *dst, const S *src, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        st(dst + i, ld(src + i));
}

void cuda_convert(rlCuda *c, void *dst, rlDtype dt, const void *src, rlDtype st_, size_t n) {
    RL_DISPATCH(dt, D, RL_DISPATCH(st_, S, convert_kernel<D, S><<<rl_blocks(n, 256), 256, 0,
                                                     c->stream>>>((D *)dst, (const S *)src, n)));
    cuda_launched(c, "upload (dtype conversion)");
}

/* Element i is a pure function of (seed, i), so a shard draws the same values
 * whatever else was drawn before it. */
template <typename T>
__global__ void fill_random_kernel(T *dst, size_t n, uint64_t seed, float scale) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        uint64_t h = rl_mix64(seed ^ rl_mix64((uint64_t)i));
        float u = (float)(h >> 40) * (1.0f / 16777216.0f);
        st(dst + i, (2.0f * u - 1.0f) * scale);
    }
}

void cuda_fill_random(rlCuda *c, void *dst, rlDtype dt, size_t n, uint64_t seed, float scale) {
    RL_DISPATCH(dt, T, fill_random_kernel<T><<<rl_blocks(n, 256), 256, 0, c->stream>>>(
                           (T *)dst, n, seed, scale));
    cuda_launched(c, "fill_random");
}

template <typename T>
__global__ void embed_kernel(T *out, const T *table, const int32_t *tokens, int vocab0,
                             int n_vocab, int dim) {
    int t = blockIdx.x;
    int id = tokens[t] - vocab0;
    T *o = out + (size_t)t * dim;
    if (id < 0 || id >= n_vocab) {
        for (int j = threadIdx.x; j < dim; j += blockDim.x) st(o + j, 0.0f);
        return;
    }
    const T *row = table + (size_t)id * dim;
    for (int j = threadIdx.x; j < dim; j += blockDim.x) o[j] = row[j];
}

void cuda_embed(rlBackend *be, void *out, const void *table, int vocab0, int n_vocab, int dim) {
    rlCuda *c = cuda_of(be);
    if (!c->n_tokens) return;
    PROF(c, "embed");
    RL_DISPATCH(be->act_dtype, T, embed_kernel<T><<<c->n_tokens, 256, 0, c->stream>>>(
                                      (T *)out, (const T *)table, c->d_tokens, vocab0, n_vocab,
                                      dim));
    cuda_launched(c, "embed");
}

template <typename T>
__global__ void swiglu_kernel(T *out, const T *gu, int rows, int m) {
    size_t n = (size_t)rows * m;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        size_t r = i / m, j = i % m;
        st(out + i, silu_mul(ld(gu + r * 2 * m + j), ld(gu + r * 2 * m + m + j)));
    }
}

/* The same for m a multiple of 8: one row per grid row, 16-byte loads and
 * stores, no divisions (prefill spends ~18 ms per 8192-token step here);
 * launched with PDL. */
template <typename T>
__global__ void swiglu8_kernel(T *out, const T *gu, int m) {
    pdl_trigger();
    pdl_wait();
    int j = (blockIdx.x * blockDim.x + threadIdx.x) * 8;
    if (j >= m) return;
    const T *g = gu + (size_t)blockIdx.y * 2 * m + j;
    uint4 gv = *(const uint4 *)g, uv = *(const uint4 *)(g + m), ov;
    const T *gs = (const T *)&gv, *us = (const T *)&uv;
    T *os = (T *)&ov;
#pragma unroll
    for (int i = 0; i < 8; i++) st(os + i, silu_mul(ld(gs + i), ld(us + i)));
    *(uint4 *)(out + (size_t)blockIdx.y * m + j) = ov;
}

void cuda_swiglu(rlBackend *be, void *out, const void *gate_up, int rows, int m) {
    rlCuda *c = cuda_of(be);
    size_t n = (size_t)rows * m;
    if (!n) return;
    PROF(c, "swiglu");
    if (m % 8 == 0 && rows <= 65535 && be->act_dtype != RL_F32 &&
        !(((uintptr_t)out | (uintptr_t)gate_up) & 15)) {
        dim3 grid((unsigned)((m / 8 + 255) / 256), (unsigned)rows);
        if (be->act_dtype == RL_F16)
            cuda_launch_pdl(c, "swiglu", swiglu8_kernel<f16>, grid, dim3(256), 0, (f16 *)out,
                            (const f16 *)gate_up, m);
        else
            cuda_launch_pdl(c, "swiglu", swiglu8_kernel<bf16>, grid, dim3(256), 0, (bf16 *)out,
                            (const bf16 *)gate_up, m);
        return;
    }
    RL_DISPATCH(be->act_dtype, T, swiglu_kernel<T><<<rl_blocks(n, 256), 256, 0, c->stream>>>(
                                      (T *)out, (const T *)gate_up, rows, m));
    cuda_launched(c, "swiglu");
}

template <typename T>
__global__ void gather_rows_kernel(T *out, const T *in, const rlRowSpec *rows, int dim) {
    int r = blockIdx.x;
    const T *src = in + (size_t)rows[r].token * dim;
    for (int j = threadIdx.x; j < dim; j += blockDim.x) out[(size_t)r * dim + j] = src[j];
}

void cuda_gather_rows(rlBackend *be, void *out, const void *in, int dim, int row0, int n) {
    rlCuda *c = cuda_of(be);
    if (n <= 0) return;
    PROF(c, "gather_rows");
    RL_DISPATCH(be->act_dtype, T, gather_rows_kernel<T><<<n, 256, 0, c->stream>>>(
                                      (T *)out, (const T *)in, c->d_rows + row0, dim));
    cuda_launched(c, "gather_rows");
}

template <typename T> __global__ void add_kernel(T *a, const T *b, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        st(a + i, ld(a + i) + ld(b + i));
}

void cuda_add(rlBackend *be, void *a, const void *b, size_t n) {
    rlCuda *c = cuda_of(be);
    if (!n) return;
    PROF(c, "add");
    RL_DISPATCH(be->act_dtype, T, add_kernel<T><<<rl_blocks(n, 256), 256, 0, c->stream>>>(
                                      (T *)a, (const T *)b, n));
    cuda_launched(c, "add");
}
