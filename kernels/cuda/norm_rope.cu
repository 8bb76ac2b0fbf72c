/* norm_rope.cu: RMSNorm (plain and fused with the residual add) and rotary
 * embedding fused with the KV-cache write.
 *
 * Rounding follows Hugging Face's Qwen2 in bf16: the residual stream is
 * stored rounded, the norm is taken over the rounded values in fp32, the
 * normalised value is rounded before the weight multiplies it; RoPE uses
 * fp32 angles from an fp32 inverse-frequency table (rope_init, from
 * kernels/rope.c's double one) and cos/sin scaled, then rounded to the
 * activation type.  Qwen3's q/k head norms run inside the RoPE kernel.  The decode path's
 * kernels (the one-pass norms, RoPE) launch with PDL (cuda_launch.cuh). */
#include "kernels/cuda/cuda_internal.h"
#include "kernels/cuda/cuda_launch.cuh"
#include "kernels/cuda/cuda_reduce.cuh"
#include "kernels/cuda/cuda_types.cuh"

template <typename T>
__global__ void rmsnorm_kernel(T *out, const T *in, const T *w, int dim, float eps) {
    __shared__ float shm[32];
    const T *x = in + (size_t)blockIdx.x * dim;
    T *o = out + (size_t)blockIdx.x * dim;
    float ss = 0;
    for (int j = threadIdx.x; j < dim; j += blockDim.x) {
        float v = ld(x + j);
        ss += v * v;
    }
    float rstd = rsqrtf(block_sum(ss, shm) / dim + eps);
    for (int j = threadIdx.x; j < dim; j += blockDim.x)
        st(o + j, ld(w + j) * round_to<T>(ld(x + j) * rstd));
}

template <typename T>
__global__ void add_rmsnorm_kernel(T *resid, const T *xin, T *out, const T *w, int dim,
                                   float eps) {
    __shared__ float shm[32];
    T *r = resid + (size_t)blockIdx.x * dim;
    const T *x = xin + (size_t)blockIdx.x * dim;
    T *o = out + (size_t)blockIdx.x * dim;
    float ss = 0;
    for (int j = threadIdx.x; j < dim; j += blockDim.x) {
        float v = round_to<T>(ld(r + j) + ld(x + j));
        st(r + j, v);
        ss += v * v;
    }
    float rstd = rsqrtf(block_sum(ss, shm) / dim + eps);
    for (int j = threadIdx.x; j < dim; j += blockDim.x)
        st(o + j, ld(w + j) * round_to<T>(ld(r + j) * rstd));
}

/* Both norms for 16-bit rows of dim a multiple of 8, up to 8 x 1024: one
 * 16-byte load per thread and operand, the row held in registers across the
 * reduction, so a row costs one pass (these run ~55 times per decode step,
 * where the two-pass loops above are latency, not bandwidth).  ADD: resid +=
 * x first, as add_rmsnorm_kernel; else resid is only read. */
template <typename T, bool ADD>
__global__ void rmsnorm8_kernel(T *resid, const T *xin, T *out, const T *w, int dim, float eps) {
    __shared__ float shm[32];
    pdl_trigger();
    const int j = threadIdx.x * 8;
    const size_t row = (size_t)blockIdx.x * dim;
    uint4 wv = j < dim ? *(const uint4 *)(w + j) : make_uint4(0, 0, 0, 0);
    float v[8], ss = 0;
    pdl_wait();
    if (j < dim) {
        uint4 rv = *(const uint4 *)(resid + row + j);
        T *rs = (T *)&rv;
        if (ADD) {
            uint4 xv = *(const uint4 *)(xin + row + j);
            const T *xs = (const T *)&xv;
#pragma unroll
            for (int i = 0; i < 8; i++) st(rs + i, ld(rs + i) + ld(xs + i));
            *(uint4 *)(resid + row + j) = rv;
        }
#pragma unroll
        for (int i = 0; i < 8; i++) v[i] = ld(rs + i), ss += v[i] * v[i];
    }
    const float rstd = rsqrtf(block_sum(ss, shm) / dim + eps);
    if (j >= dim) return;
    uint4 ov;
    const T *ws = (const T *)&wv;
    T *os = (T *)&ov;
#pragma unroll
    for (int i = 0; i < 8; i++) st(os + i, ld(ws + i) * round_to<T>(v[i] * rstd));
    *(uint4 *)(out + row + j) = ov;
}

/* The one-pass kernel when the rows allow it; 0 when they do not. */
static int rmsnorm8_run(rlBackend *be, void *resid, const void *x, void *out, const void *w,
                        int rows, int dim, float eps) {
    rlCuda *c = cuda_of(be);
    if (be->act_dtype == RL_F32 || dim % 8 || dim > 8 * 1024 ||
        (((uintptr_t)resid | (uintptr_t)x | (uintptr_t)out | (uintptr_t)w) & 15))
        return 0;
    const dim3 grid((unsigned)rows), threads((unsigned)((dim / 8 + 31) / 32 * 32));
    const char *op = x ? "add_rmsnorm" : "rmsnorm";
    if (be->act_dtype == RL_F16)
        cuda_launch_pdl(c, op, x ? rmsnorm8_kernel<f16, true> : rmsnorm8_kernel<f16, false>,
                        grid, threads, 0, (f16 *)resid, (const f16 *)x, (f16 *)out,
                        (const f16 *)w, dim, eps);
    else
        cuda_launch_pdl(c, op, x ? rmsnorm8_kernel<bf16, true> : rmsnorm8_kernel<bf16, false>,
                        grid, threads, 0, (bf16 *)resid, (const bf16 *)x, (bf16 *)out,
                        (const bf16 *)w, dim, eps);
    return 1;
}

void cuda_rmsnorm(rlBackend *be, void *out, const void *in, const void *w, int rows, int dim,
                  float eps) {
    rlCuda *c = cuda_of(be);
    if (!rows) return;
    PROF(c, "rmsnorm");
    if (rmsnorm8_run(be, (void *)in, NULL, out, w, rows, dim, eps)) return;
    RL_DISPATCH(be->act_dtype, T, rmsnorm_kernel<T><<<rows, 256, 0, c->stream>>>(
                                      (T *)out, (const T *)in, (const T *)w, dim, eps));
    cuda_launched(c, "rmsnorm");
}

void cuda_add_rmsnorm(rlBackend *be, void *resid, const void *x, void *out, const void *w,
                      int rows, int dim, float eps) {
    rlCuda *c = cuda_of(be);
    if (!rows) return;
    PROF(c, "add_rmsnorm");
    if (rmsnorm8_run(be, resid, x, out, w, rows, dim, eps)) return;
    RL_DISPATCH(be->act_dtype, T, add_rmsnorm_kernel<T><<<rows, 256, 0, c->stream>>>(
                                      (T *)resid, (const T *)x, (T *)out, (const T *)w, dim,
                                      eps));
    cuda_launched(c, "add_rmsnorm");
}

/* A warp per (token, q or k head): with q_norm / k_norm, RMSNorm the head
 * first (Qwen3), then rotate it (rotate-half layout: element i pairs with
 * i + head_dim/2) and store it back, and for a k head store it and its v
 * head at the token's cache slot (slot < 0: a padding token, nothing
 * stored).  ROPE_WARPS heads a block, so a decode token spreads its heads
 * over many SMs.  The normalised head waits in shared memory for its
 * rotation, holding the values Hugging Face's 16-bit norm stores (rounded
 * before and after the weight), and each lane sums its squares in the
 * order j = lane, lane + 32, ...: the same rounding steps as a norm written
 * to memory and read back.  The token's head_dim/2 angles (position x
 * rope_init's fp32 inverse frequencies, fp32 as Hugging Face computes them;
 * cos and sin times the attention factor, then rounded) are computed by each
 * block before it waits on the kernel that wrote qkv (PDL). */
#define ROPE_WARPS 4
template <typename T>
__global__ void __launch_bounds__(ROPE_WARPS * 32)
rope_kv_kernel(T *qkv, T *kc, T *vc, const int32_t *positions, const int32_t *slots,
               const float *inv_freq, float scale, const T *q_norm, const T *k_norm, float eps,
               int n_q, int n_kv, int D, size_t layer_off, int bs) {
    __shared__ float cs[2][128];     /* cos, sin of each frequency; head_dim <= 256 */
    __shared__ float xs[ROPE_WARPS][256];
    pdl_trigger();
    const int t = blockIdx.x, half = D / 2, lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int h = blockIdx.y * ROPE_WARPS + warp;
    float pos = (float)positions[t];
    for (int i = threadIdx.x; i < half; i += blockDim.x) {
        float s, co;
        sincosf(pos * inv_freq[i], &s, &co);
        cs[0][i] = round_to<T>(co * scale);
        cs[1][i] = round_to<T>(s * scale);
    }
    __syncthreads();
    pdl_wait();
    if (h >= n_q + n_kv) return;
    T *x = qkv + ((size_t)t * (n_q + 2 * n_kv) + h) * D;
    float *xw = xs[warp];
    if (q_norm) {
        /* As Hugging Face's RMSNorm in 16 bits: the normalised value is
         * rounded before the weight multiplies it. */
        const T *w = h < n_q ? q_norm : k_norm;
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
    const int slot = slots[t];
    T *k = NULL, *v = NULL;
    if (h >= n_q && slot >= 0) {
        size_t off = layer_off + (size_t)(slot / bs) * n_kv * bs * D + (size_t)(slot % bs) * D +
                     (size_t)(h - n_q) * bs * D;
        k = kc + off, v = vc + off;
    }
    for (int i = lane; i < half; i += 32) {
        float co = cs[0][i], s = cs[1][i];
        float x1 = xw[i], x2 = xw[i + half];
        float y1 = x1 * co - x2 * s, y2 = x2 * co + x1 * s;
        st(x + i, y1);
        st(x + i + half, y2);
        if (k) {
            st(k + i, y1);
            st(k + i + half, y2);
        }
    }
    if (v) {
        const T *vs = x + (size_t)n_kv * D;
#pragma unroll 4
        for (int j = lane; j < D; j += 32) v[j] = vs[j];
    }
}

void cuda_rope_kv_store(rlBackend *be, void *qkv, const void *q_norm, const void *k_norm,
                        float eps, int layer, const rlAttnShape *s) {
    rlCuda *c = cuda_of(be);
    if (!c->n_tokens || s->n_q + s->n_kv == 0) return;
    if (!c->k_cache || s->n_kv != c->kv_heads || s->head_dim != c->kv_head_dim ||
        layer < 0 || layer >= c->kv_layers || c->rope_n != s->head_dim / 2) {
        cuda_fail(c, RL_EINTERNAL,
                  "rope_kv_store: the KV cache was set up for %d layers x %d heads x %d dims "
                  "and the rotary table for %d frequencies, asked for layer %d with %d heads x "
                  "%d dims (kv_init or rope_init missing or mismatched)",
                  c->kv_layers, c->kv_heads, c->kv_head_dim, c->rope_n, layer, s->n_kv,
                  s->head_dim);
        return;
    }
    size_t layer_off = (size_t)layer * c->kv_blocks * c->kv_heads * c->kv_block_size * s->head_dim;
    PROF(c, "rope_kv_store");
    RL_DISPATCH(be->act_dtype, T,
                cuda_launch_pdl(c, "rope_kv_store", rope_kv_kernel<T>,
                                dim3(c->n_tokens, (s->n_q + s->n_kv + ROPE_WARPS - 1) / ROPE_WARPS),
                                dim3(ROPE_WARPS * 32), 0, (T *)qkv, (T *)c->k_cache, (T *)c->v_cache,
                                (const int32_t *)c->d_positions, (const int32_t *)c->d_slots,
                                (const float *)c->rope_inv_freq, c->rope_scale,
                                (const T *)q_norm, (const T *)k_norm, eps, s->n_q, s->n_kv,
                                s->head_dim, layer_off, c->kv_block_size));
}
