/* attention.cu: causal attention over the paged KV cache, prefill and decode
 * in one kernel.
 *
 * A block takes one sequence, one KV head, a tile of up to 32 query rows
 * (row = new token x query head of that KV head's group, so every KV head is
 * read once per group: GQA-aware) and one split of the key range.  It walks
 * the keys 32 at a time through shared memory, following the block table,
 * with the online softmax of flash attention in fp32.  Long contexts with few
 * queries (decode) are split over the sequence and the splits' partial
 * results merged by a second kernel (flash-decoding).  Head dims up to 256
 * (even) work; 64 and 128 are the tuned cases.
 *
 * KV layout (kv_init): [layer][block][kv head][block_size][head_dim]. */
#include "cuda_internal.h"
#include "cuda_reduce.cuh"
#include "cuda_types.cuh"

#define ATT_ROWS 32      /* query rows per block */
#define ATT_WARPS 4
#define ATT_RPW 8        /* rows per warp: ATT_ROWS / ATT_WARPS */
#define ATT_KEYS 32      /* keys per shared-memory chunk: one per lane */

static __device__ __forceinline__ float2 ld2(const bf16 *p) {
    return __bfloat1622float2(*(const __nv_bfloat162 *)p);
}
static __device__ __forceinline__ float2 ld2(const f16 *p) {
    return __half22float2(*(const __half2 *)p);
}
static __device__ __forceinline__ void st2(bf16 *p, float a, float b) {
    *(__nv_bfloat162 *)p = __floats2bfloat162_rn(a, b);
}
static __device__ __forceinline__ void st2(f16 *p, float a, float b) {
    *(__half2 *)p = __floats2half2_rn(a, b);
}

struct AttArgs {
    const int32_t *positions, *seq_start, *seq_len, *block_tables;
    int max_blocks, n_tokens;
    int n_q, n_kv, q_head0, kv_head0, group, D, bs;
    size_t layer_off;
    float scale_log2;    /* softmax scale times log2(e): scores go through exp2 */
    int split_len;       /* keys per split; 0: one split, write out directly */
    float *part;         /* [split][token][q head][2 + D]: m, l, unnormalised o */
};

/* Stage keys kb .. kb + 31 of KV head hk (rows of DP elements; keys past
 * k_end get zero values, since 0 x garbage could still be NaN).  16-byte
 * loads when head_dim allows, else 4-byte ones. */
template <typename T>
static __device__ __forceinline__ void attention_load_chunk(T *k_s, T *v_s, const T *kc,
                                                            const T *vc, const AttArgs &a,
                                                            const int32_t *btab, int hk, int kb,
                                                            int k_end) {
    const int D = a.D, DP = D + 2;
    const int W = D % 8 == 0 ? 8 : 2;        /* elements per load */
    for (int e = threadIdx.x; e < ATT_KEYS * (D / W); e += blockDim.x) {
        int j = e / (D / W), p = (e % (D / W)) * W, kpos = kb + j;
        uint32_t *kd = (uint32_t *)(k_s + j * DP + p), *vd = (uint32_t *)(v_s + j * DP + p);
        if (kpos >= k_end) {
            for (int w = 0; w < W / 2; w++) vd[w] = 0;
            continue;
        }
        size_t base = a.layer_off + ((size_t)btab[kpos / a.bs] * a.n_kv + hk) * a.bs * D +
                      (size_t)(kpos % a.bs) * D + p;
        if (W == 8) {
            uint4 k4 = *(const uint4 *)(kc + base), v4 = *(const uint4 *)(vc + base);
            kd[0] = k4.x, kd[1] = k4.y, kd[2] = k4.z, kd[3] = k4.w;
            vd[0] = v4.x, vd[1] = v4.y, vd[2] = v4.z, vd[3] = v4.w;
        } else {
            kd[0] = *(const uint32_t *)(kc + base);
            vd[0] = *(const uint32_t *)(vc + base);
        }
    }
}

/* NP: bf16 pairs per lane per row, head_dim <= 64 * NP. */
template <typename T, int NP>
__global__ void __launch_bounds__(ATT_WARPS * 32)
attention_kernel(T *out, const T *qkv, const T *kc, const T *vc, AttArgs a) {
    extern __shared__ __align__(16) unsigned char smem_raw[];
    const int D = a.D, DP = D + 2;          /* padded key rows: conflict-free lane reads */
    T *q_s = (T *)smem_raw;                  /* [ATT_ROWS][D] */
    T *k_s = q_s + ATT_ROWS * D;             /* [ATT_KEYS][DP] */
    T *v_s = k_s + ATT_KEYS * DP;
    float *p_s = (float *)(v_s + ATT_KEYS * DP);   /* [ATT_WARPS][ATT_RPW][ATT_KEYS] */

    const int s = blockIdx.y / a.n_kv, hk = blockIdx.y % a.n_kv;
    const int gkv = a.kv_head0 + hk;
    const int lo = max(a.q_head0, gkv * a.group), hi = min(a.q_head0 + a.n_q, (gkv + 1) * a.group);
    const int G = hi - lo, qh0 = lo - a.q_head0;
    if (G <= 0) return;
    const int t0 = a.seq_start[s], n_new = a.seq_start[s + 1] - t0;
    const int row0 = blockIdx.x * ATT_ROWS;
    const int n_rows = min(ATT_ROWS, n_new * G - row0);
    if (n_rows <= 0) return;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;

    /* Keys this block reads: up to the tile's last position, within its split. */
    const int last_pos = a.positions[t0 + (row0 + n_rows - 1) / G];
    const int k_total = min(a.seq_len[s], last_pos + 1);
    int k_begin = 0, k_end = k_total;
    if (a.split_len) {
        k_begin = blockIdx.z * a.split_len;
        k_end = min(k_total, k_begin + a.split_len);
    }

    /* Stage the tile's query rows. */
    const int W = (a.n_q + 2 * a.n_kv) * D;
    for (int e = threadIdx.x; e < n_rows * (D / 2); e += blockDim.x) {
        int r = e / (D / 2), p = e % (D / 2), rr = row0 + r;
        const T *src = qkv + (size_t)(t0 + rr / G) * W + (size_t)(qh0 + rr % G) * D + 2 * p;
        *(uint32_t *)(q_s + r * D + 2 * p) = *(const uint32_t *)src;
    }

    /* This warp's rows: warp, warp + 4, ... (so a decode tile of 7 rows uses every warp). */
    int my_pos[ATT_RPW];
    float m[ATT_RPW], l[ATT_RPW], o[ATT_RPW][NP][2];
#pragma unroll
    for (int i = 0; i < ATT_RPW; i++) {
        int r = warp + i * ATT_WARPS;
        my_pos[i] = r < n_rows ? a.positions[t0 + (row0 + r) / G] : -1;
        m[i] = -INFINITY;
        l[i] = 0;
#pragma unroll
        for (int p = 0; p < NP; p++) o[i][p][0] = o[i][p][1] = 0;
    }

    const int32_t *btab = a.block_tables + (size_t)s * a.max_blocks;
    for (int kb = k_begin; kb < k_end; kb += ATT_KEYS) {
        __syncthreads();
        attention_load_chunk(k_s, v_s, kc, vc, a, btab, hk, kb, k_end);
        __syncthreads();

        /* Scores: lane j scores key kb + j against each of the warp's rows. */
        float sc[ATT_RPW];
#pragma unroll
        for (int i = 0; i < ATT_RPW; i++) sc[i] = 0;
        const T *krow = k_s + lane * DP;
        for (int p = 0; p < D / 2; p++) {
            float2 k2 = ld2(krow + 2 * p);
#pragma unroll
            for (int i = 0; i < ATT_RPW; i++) {
                if (my_pos[i] < 0) continue;
                float2 q2 = ld2(q_s + (warp + i * ATT_WARPS) * D + 2 * p);
                sc[i] = fmaf(q2.x, k2.x, fmaf(q2.y, k2.y, sc[i]));
            }
        }
        const int kpos = kb + lane;
        float *pw = p_s + warp * ATT_RPW * ATT_KEYS;
#pragma unroll
        for (int i = 0; i < ATT_RPW; i++) {
            if (my_pos[i] < 0) continue;
            float x = (kpos < k_end && kpos <= my_pos[i]) ? sc[i] * a.scale_log2 : -INFINITY;
            float m_new = fmaxf(m[i], warp_max(x));
            float pj = 0, corr = 1;
            if (m_new != -INFINITY) {
                pj = exp2f(x - m_new);
                corr = exp2f(m[i] - m_new);
            }
            l[i] = l[i] * corr + warp_sum(pj);
            m[i] = m_new;
#pragma unroll
            for (int p = 0; p < NP; p++) o[i][p][0] *= corr, o[i][p][1] *= corr;
            pw[i * ATT_KEYS + lane] = pj;
        }
        __syncwarp();
        /* Values: lane owns pairs lane, lane + 32, ... of every row. */
        for (int j = 0; j < ATT_KEYS; j++) {
            float2 v2[NP];
#pragma unroll
            for (int p = 0; p < NP; p++) {
                int pp = lane + 32 * p;
                v2[p] = pp < D / 2 ? ld2(v_s + j * DP + 2 * pp) : make_float2(0, 0);
            }
#pragma unroll
            for (int i = 0; i < ATT_RPW; i++) {
                if (my_pos[i] < 0) continue;
                float pj = pw[i * ATT_KEYS + j];
#pragma unroll
                for (int p = 0; p < NP; p++) {
                    o[i][p][0] = fmaf(pj, v2[p].x, o[i][p][0]);
                    o[i][p][1] = fmaf(pj, v2[p].y, o[i][p][1]);
                }
            }
        }
        __syncwarp();
    }

#pragma unroll
    for (int i = 0; i < ATT_RPW; i++) {
        if (my_pos[i] < 0) continue;
        int rr = row0 + warp + i * ATT_WARPS;
        int t = t0 + rr / G, qh = qh0 + rr % G;
        if (!a.split_len) {
            float inv = l[i] > 0 ? 1.0f / l[i] : 0.0f;
            T *dst = out + ((size_t)t * a.n_q + qh) * D;
#pragma unroll
            for (int p = 0; p < NP; p++) {
                int pp = lane + 32 * p;
                if (pp < D / 2) st2(dst + 2 * pp, o[i][p][0] * inv, o[i][p][1] * inv);
            }
        } else {
            float *dst = a.part + (((size_t)blockIdx.z * a.n_tokens + t) * a.n_q + qh) * (D + 2);
            if (lane == 0) dst[0] = m[i], dst[1] = l[i];
#pragma unroll
            for (int p = 0; p < NP; p++) {
                int pp = lane + 32 * p;
                if (pp < D / 2) dst[2 + 2 * pp] = o[i][p][0], dst[3 + 2 * pp] = o[i][p][1];
            }
        }
    }
}

/* Merge the splits of one (token, query head): weights 2^(m_z - M). */
template <typename T>
__global__ void attention_merge_kernel(T *out, const float *part, int n_splits, int n_tokens,
                                       int n_q, int D) {
    const int tq = blockIdx.x;
    const size_t stride = (size_t)n_tokens * n_q * (D + 2);
    const float *p0 = part + (size_t)tq * (D + 2);
    float M = -INFINITY;
    for (int z = 0; z < n_splits; z++)
        if (p0[z * stride + 1] > 0) M = fmaxf(M, p0[z * stride]);
    float L = 0;
    for (int z = 0; z < n_splits; z++)
        if (p0[z * stride + 1] > 0) L += p0[z * stride + 1] * exp2f(p0[z * stride] - M);
    float inv = L > 0 ? 1.0f / L : 0.0f;
    for (int d = threadIdx.x; d < D; d += blockDim.x) {
        float acc = 0;
        for (int z = 0; z < n_splits; z++) {
            const float *pz = p0 + z * stride;
            if (pz[1] > 0) acc += pz[2 + d] * exp2f(pz[0] - M);
        }
        st(out + (size_t)tq * D + d, acc * inv);
    }
}

template <typename T, int NP>
static void attention_launch(rlCuda *c, T *out, const T *qkv, const AttArgs &a, dim3 grid) {
    size_t shm = ((size_t)ATT_ROWS * a.D + 2 * (size_t)ATT_KEYS * (a.D + 2)) * sizeof(T) +
                 ATT_WARPS * ATT_RPW * ATT_KEYS * sizeof(float);
    /* Past 48 KiB (head dims over 128) the limit is lifted per device, so per launch. */
    if (shm > 48 * 1024 &&
        cuda_check(c, cudaFuncSetAttribute(attention_kernel<T, NP>,
                                           cudaFuncAttributeMaxDynamicSharedMemorySize, (int)shm),
                   "attention"))
        return;
    attention_kernel<T, NP><<<grid, ATT_WARPS * 32, shm, c->stream>>>(
        out, qkv, (const T *)c->k_cache, (const T *)c->v_cache, a);
    cuda_launched(c, "attention");
}

template <typename T>
static void attention_run(rlCuda *c, T *out, const T *qkv, AttArgs a, int tiles) {
    /* Split the keys when there are too few (sequence, KV head, tile) blocks to
     * fill the GPU: decode, where each sequence has one tile. */
    int base = c->n_seqs * a.n_kv * tiles, splits = 1;
    int want = 4 * c->sm_count;
    if (base < want && c->max_seq_len > 2 * ATT_KEYS * 4) {
        splits = (want + base - 1) / base;
        int most = (c->max_seq_len + 4 * ATT_KEYS - 1) / (4 * ATT_KEYS);
        if (splits > most) splits = most;
    }
    size_t part_bytes = 0;
    if (splits > 1) {
        a.split_len = (c->max_seq_len + splits - 1) / splits;
        a.split_len = (a.split_len + ATT_KEYS - 1) / ATT_KEYS * ATT_KEYS;
        splits = (c->max_seq_len + a.split_len - 1) / a.split_len;
        part_bytes = (size_t)splits * c->n_tokens * a.n_q * (a.D + 2) * sizeof(float);
    }
    if (splits > 1 && cuda_scratch(c, part_bytes, "attention")) return;
    if (splits > 1) a.part = (float *)c->scratch;
    else a.split_len = 0;
    dim3 grid(tiles, c->n_seqs * a.n_kv, splits);
    if (a.D <= 64) attention_launch<T, 1>(c, out, qkv, a, grid);
    else if (a.D <= 128) attention_launch<T, 2>(c, out, qkv, a, grid);
    else attention_launch<T, 4>(c, out, qkv, a, grid);
    if (splits > 1) {
        attention_merge_kernel<T><<<c->n_tokens * a.n_q, 128, 0, c->stream>>>(
            out, a.part, splits, c->n_tokens, a.n_q, a.D);
        cuda_launched(c, "attention (merge)");
    }
}

void cuda_attention(rlBackend *be, void *out, const void *qkv, int layer, const rlAttnShape *s) {
    rlCuda *c = cuda_of(be);
    if (!c->n_tokens || !s->n_q) return;
    if (!c->k_cache || s->n_kv != c->kv_heads || s->head_dim != c->kv_head_dim ||
        layer < 0 || layer >= c->kv_layers || s->head_dim % 2 || s->head_dim > 256) {
        cuda_fail(c, RL_EINTERNAL,
                  "attention: the KV cache was set up for %d layers x %d heads x %d dims, "
                  "asked for layer %d with %d heads x %d dims", c->kv_layers, c->kv_heads,
                  c->kv_head_dim, layer, s->n_kv, s->head_dim);
        return;
    }
    AttArgs a;
    a.positions = c->d_positions;
    a.seq_start = c->d_seq_start;
    a.seq_len = c->d_seq_len;
    a.block_tables = c->d_block_tables;
    a.max_blocks = c->max_blocks;
    a.n_tokens = c->n_tokens;
    a.n_q = s->n_q, a.n_kv = s->n_kv, a.q_head0 = s->q_head0, a.kv_head0 = s->kv_head0;
    a.group = s->group, a.D = s->head_dim, a.bs = c->kv_block_size;
    a.layer_off = (size_t)layer * c->kv_blocks * c->kv_heads * c->kv_block_size * s->head_dim;
    a.scale_log2 = 1.4426950408889634f / sqrtf((float)s->head_dim);
    a.split_len = 0;
    a.part = NULL;
    /* The most query heads any local KV head serves sets the tiles per sequence. */
    int g_max = 0;
    for (int hk = 0; hk < s->n_kv; hk++) {
        int gkv = s->kv_head0 + hk;
        int lo = s->q_head0 > gkv * s->group ? s->q_head0 : gkv * s->group;
        int hi = s->q_head0 + s->n_q < (gkv + 1) * s->group ? s->q_head0 + s->n_q
                                                            : (gkv + 1) * s->group;
        if (hi - lo > g_max) g_max = hi - lo;
    }
    int tiles = (c->max_new * g_max + ATT_ROWS - 1) / ATT_ROWS;
    if (tiles <= 0) return;
    if (be->act_dtype == RL_F16)
        attention_run<f16>(c, (f16 *)out, (const f16 *)qkv, a, tiles);
    else
        attention_run<bf16>(c, (bf16 *)out, (const bf16 *)qkv, a, tiles);
}
