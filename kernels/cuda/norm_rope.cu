/* norm_rope.cu: RMSNorm (plain and fused with the residual add) and rotary
 * embedding fused with the KV-cache write.
 *
 * Rounding follows Hugging Face's Qwen2 in bf16: the residual stream is
 * stored rounded, the norm is taken over the rounded values in fp32, the
 * normalised value is rounded before the weight multiplies it; RoPE uses
 * fp32 angles and cos/sin rounded to the activation type. */
#include "cuda_internal.h"
#include "cuda_reduce.cuh"
#include "cuda_types.cuh"

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

void cuda_rmsnorm(rlBackend *be, void *out, const void *in, const void *w, int rows, int dim,
                  float eps) {
    rlCuda *c = cuda_of(be);
    if (!rows) return;
    RL_DISPATCH(be->act_dtype, T, rmsnorm_kernel<T><<<rows, 256, 0, c->stream>>>(
                                      (T *)out, (const T *)in, (const T *)w, dim, eps));
    cuda_launched(c, "rmsnorm");
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

void cuda_add_rmsnorm(rlBackend *be, void *resid, const void *x, void *out, const void *w,
                      int rows, int dim, float eps) {
    rlCuda *c = cuda_of(be);
    if (!rows) return;
    RL_DISPATCH(be->act_dtype, T, add_rmsnorm_kernel<T><<<rows, 256, 0, c->stream>>>(
                                      (T *)resid, (const T *)x, (T *)out, (const T *)w, dim,
                                      eps));
    cuda_launched(c, "add_rmsnorm");
}

/* One block per token: rotate its q and k heads in place (rotate-half
 * layout: element i pairs with i + head_dim/2), then store k and v at the
 * token's cache slot (slot < 0: a padding token, nothing stored). */
template <typename T>
__global__ void rope_kv_kernel(T *qkv, T *kc, T *vc, const int32_t *positions,
                               const int32_t *slots, int n_q, int n_kv, int D, float theta,
                               size_t layer_off, int bs) {
    int t = blockIdx.x, half = D / 2;
    T *row = qkv + (size_t)t * (n_q + 2 * n_kv) * D;
    float pos = (float)positions[t];
    int slot = slots[t];
    size_t cache_base = 0;
    if (slot >= 0) cache_base = layer_off + (size_t)(slot / bs) * n_kv * bs * D + (size_t)(slot % bs) * D;
    for (int e = threadIdx.x; e < (n_q + n_kv) * half; e += blockDim.x) {
        int h = e / half, i = e % half;
        float inv = 1.0f / powf(theta, (float)(2 * i) / (float)D);
        float s, co;
        sincosf(pos * inv, &s, &co);
        co = round_to<T>(co);
        s = round_to<T>(s);
        T *x = row + (size_t)h * D;
        float x1 = ld(x + i), x2 = ld(x + i + half);
        float y1 = x1 * co - x2 * s, y2 = x2 * co + x1 * s;
        st(x + i, y1);
        st(x + i + half, y2);
        if (h >= n_q && slot >= 0) {
            T *k = kc + cache_base + (size_t)(h - n_q) * bs * D;
            st(k + i, y1);
            st(k + i + half, y2);
        }
    }
    if (slot < 0) return;
    for (int e = threadIdx.x; e < n_kv * D; e += blockDim.x) {
        int h = e / D, d = e % D;
        vc[cache_base + (size_t)h * bs * D + d] = row[(size_t)(n_q + n_kv + h) * D + d];
    }
}

void cuda_rope_kv_store(rlBackend *be, void *qkv, int layer, const rlAttnShape *s) {
    rlCuda *c = cuda_of(be);
    if (!c->n_tokens) return;
    if (!c->k_cache || s->n_kv != c->kv_heads || s->head_dim != c->kv_head_dim ||
        layer < 0 || layer >= c->kv_layers) {
        cuda_fail(c, RL_EINTERNAL,
                  "rope_kv_store: the KV cache was set up for %d layers x %d heads x %d dims, "
                  "asked for layer %d with %d heads x %d dims (kv_init missing or mismatched)",
                  c->kv_layers, c->kv_heads, c->kv_head_dim, layer, s->n_kv, s->head_dim);
        return;
    }
    size_t layer_off = (size_t)layer * c->kv_blocks * c->kv_heads * c->kv_block_size * s->head_dim;
    RL_DISPATCH(be->act_dtype, T, rope_kv_kernel<T><<<c->n_tokens, 256, 0, c->stream>>>(
                                      (T *)qkv, (T *)c->k_cache, (T *)c->v_cache, c->d_positions,
                                      c->d_slots, s->n_q, s->n_kv, s->head_dim, s->rope_theta,
                                      layer_off, c->kv_block_size));
    cuda_launched(c, "rope_kv_store");
}
