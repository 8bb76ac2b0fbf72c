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
 * Decode steps (one new token per sequence) with head dims 64 or 128, groups
 * of up to 16 query heads and 16-token-aligned cache blocks take
 * attention_decode_kernel instead: there the work is reading the cache once,
 * so each warp streams 16-key tiles of K and V through a cp.async ring in
 * shared memory (several tiles in flight, the block table read once per
 * tile) and scores its KV head's whole query group against each tile on
 * tensor cores (the group as the rows of one m16n8k16 tile).  Splits of one
 * sequence merge in the same kernel: on Hopper, up to 8 splits are one
 * thread-block cluster and merge through distributed shared memory (batch-1
 * decode 1-1.6 % faster a step on an H100, PERF.md v38); more, or on older
 * GPUs, the last one to finish merges them from memory.  They
 * are whole 128-key units (two tiles a warp): 64-key units, more and shorter
 * blocks where a step has few, measured no faster on an H200 (PERF.md v26;
 * Qwen3-30B-A3B, 4 KV heads, 512 -> 128: 3.34 and 7.08 ms a step at batch
 * 1 and 4, against 3.29 and 7.03), and slower once the merge loaded its
 * partials together (v33, an H100: 3.35-3.38 ms against 3.30-3.31).
 *
 * A step that prefills beside running sequences gives its leading
 * one-token sequences to the decode kernel and the rest to the prefill
 * kernel (PERF.md v40-v41: the mixed 1,000-request batch 38.23 -> 37.11 s
 * on an H100, against the prefill kernel for all).
 *
 * Prefill steps with head dims 64 or 128 take attention_fa_kernel: the same
 * tiling of (token, query head) rows by KV head, on tensor cores (mma.sync
 * m16n8k16, bf16 or fp16 in, fp32 accumulate), flash-attention 2 style:
 * each warp scores its query rows against a 64-key tile into C fragments and
 * turns them in registers into the A fragments of P for P.V, while the next
 * K/V tile streams in through cp.async.
 *
 * KV layout (kv_init): [layer][block][kv head][block_size][head_dim]. */
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include <cooperative_groups.h>

#include "kernels/cuda/cuda_internal.h"
#include "kernels/cuda/cuda_launch.cuh"
#include "kernels/cuda/cuda_math.cuh"
#include "kernels/cuda/cuda_mma.cuh"
#include "kernels/cuda/cuda_reduce.cuh"
#include "kernels/cuda/cuda_types.cuh"

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
    int *count;          /* decode: finished splits per (sequence, KV head) */
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
            float x = (kpos < k_end && kpos <= my_pos[i]) ? __fmul_rn(sc[i], a.scale_log2)
                                                          : -INFINITY;
            float m_new = fmaxf(m[i], warp_max(x));
            float pj = 0, corr = 1;
            /* Each step rounded explicitly: row i of the warp is an unrolled
             * copy, and which copy a row takes depends on the batch (see the
             * prefill kernel). */
            if (m_new != -INFINITY) {   /* an unchanged max keeps l and o exactly */
                pj = exp2f(__fsub_rn(x, m_new));
                corr = m_new == m[i] ? 1.0f : exp2f(__fsub_rn(m[i], m_new));
            }
            l[i] = __fadd_rn(__fmul_rn(l[i], corr), warp_sum(pj));
            m[i] = m_new;
#pragma unroll
            for (int p = 0; p < NP; p++)
                o[i][p][0] = __fmul_rn(o[i][p][0], corr), o[i][p][1] = __fmul_rn(o[i][p][1], corr);
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
                if (pp < D / 2) st2(dst + 2 * pp, __fmul_rn(o[i][p][0], inv), __fmul_rn(o[i][p][1], inv));
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

#define FA_WARPS 4
#define FA_MT 2                           /* 16-row tiles per warp */
#define FA_ROWS (16 * FA_MT * FA_WARPS)   /* query rows per block */
#define FA_KEYS 64                        /* keys per K/V tile */

/* Start copying keys kb .. kb + FA_KEYS - 1 of KV head hk into one stage (K
 * to ks, V to vs, 16-byte chunks XOR-swizzled by row so ldmatrix reads them
 * without bank conflicts); keys past k_end are zero-filled, since 0 x garbage
 * could still be NaN.  Every thread of the block takes FA_KEYS * D / 8 /
 * threads chunks of each. */
template <typename T, int D>
static __device__ __forceinline__ void fa_load_tile(T *ks, T *vs, const T *kc, const T *vc,
                                                    const AttArgs &a, const int32_t *btab,
                                                    int hk, int kb, int k_end) {
    constexpr int CPR = D / 8;    /* 16-byte chunks per row */
    constexpr int THREADS = FA_WARPS * 32;
    static_assert(FA_KEYS * CPR % THREADS == 0, "whole chunks per thread");
#pragma unroll
    for (int i = 0; i < FA_KEYS * CPR / THREADS; i++) {
        const int e = i * THREADS + threadIdx.x, r = e / CPR, ch = e % CPR, kpos = kb + r;
        const bool valid = kpos < k_end;
        size_t src = a.layer_off;
        if (valid)
            src += ((size_t)__ldg(btab + kpos / a.bs) * a.n_kv + hk) * a.bs * D +
                   (size_t)(kpos % a.bs) * D + ch * 8;
        cp_async16(ks + swz16<D>(r, ch), kc + src, valid);
        cp_async16(vs + swz16<D>(r, ch), vc + src, valid);
    }
}

/* The pipelined prefill kernel (flash-attention 2 on mma.sync).  A block
 * takes FA_ROWS (token, query head) rows of one sequence and KV head,
 * so the query heads of a GQA group share every K/V tile it loads; its tiles
 * run from the sequence's end (gridDim.y counts down), so the longest start
 * first.  The block's queries are staged once in shared memory; K and V
 * tiles of FA_KEYS keys are double-buffered through cp.async (tile j + 1 loads
 * while tile j is computed), all three XOR-swizzled so ldmatrix reads them
 * without bank conflicts (.trans for V).  Each of the FA_WARPS warps holds
 * FA_MT = 2 16-row tiles, so every K or V fragment it loads feeds 4 mma
 * (flash-attention 2's 128-row blocks; PERF.md v20 measured 64- and 256-row
 * blocks, one tile a warp, 32-key tiles).  P stays in registers
 * as the A operand of P.V, and the online softmax runs in exp2 with the
 * scale folded into one FMA.  Causal masking happens only where a warp's
 * rows reach into the tile (the diagonal) or the tile passes the keys' end;
 * a warp whose rows all precede the tile skips it.
 *
 * Batch-invariant by construction (--batch-invariant runs every step here,
 * decode rows too): a row's key tiles are absolute (keys 64 j ..), walked
 * from key 0 whatever chunk of its prompt the step holds; a tile wholly past
 * the row's position (there because a later row of its block needs it)
 * masks all its scores to -inf, so its max is unchanged, corr is exactly 1,
 * every p is 0 and P.V adds zeros: the row's m, l and o stay bit-identical,
 * as if the tile were skipped.  Keys past the row but before k_end are this
 * sequence's own (finite) values, keys past k_end zero-filled.  Which of a
 * thread's four row slots (mt, h) a row takes depends on the batch, and each
 * slot is its own unrolled copy of the code, so every multiply and add on
 * m, l and o is rounded explicitly (__fmul_rn, __fadd_rn, fmaf): left to
 * the compiler, `l * corr + p` became one fma in two slots and two
 * roundings in the others (tests/test_invariant_ptx.sh). */
template <typename T, int D>
__global__ void __launch_bounds__(FA_WARPS * 32)
attention_fa_kernel(T *out, const T *qkv, const T *kc, const T *vc, AttArgs a) {
    extern __shared__ __align__(128) unsigned char fa_smem[];
    constexpr int TILE = FA_KEYS * D, CPR = D / 8;
    T *k_s = (T *)fa_smem, *v_s = k_s + 2 * TILE;      /* [stage][TILE] each */
    T *q_s = v_s + 2 * TILE;                           /* [FA_ROWS][D] */

    const int s = blockIdx.x / a.n_kv, hk = blockIdx.x % a.n_kv;
    const int gkv = a.kv_head0 + hk;
    const int lo = max(a.q_head0, gkv * a.group), hi = min(a.q_head0 + a.n_q, (gkv + 1) * a.group);
    const int G = hi - lo, qh0 = lo - a.q_head0;
    if (G <= 0) return;
    const int t0 = a.seq_start[s], n_new = a.seq_start[s + 1] - t0;
    const int row0 = (gridDim.y - 1 - blockIdx.y) * FA_ROWS;
    const int n_rows = min(FA_ROWS, n_new * G - row0);
    if (n_rows <= 0) return;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, q = lane & 3;
    const int last_pos = a.positions[t0 + (row0 + n_rows - 1) / G];
    const int k_end = min(a.seq_len[s], last_pos + 1);
    const int n_tiles = (k_end + FA_KEYS - 1) / FA_KEYS;
    const int32_t *btab = a.block_tables + (size_t)s * a.max_blocks;

    /* The queries (rows past the tile zero) and the first K/V tile: one group. */
    const int W = (a.n_q + 2 * a.n_kv) * D;
    for (int e = threadIdx.x; e < FA_ROWS * CPR; e += FA_WARPS * 32) {
        const int r = e / CPR, ch = e % CPR, rr = row0 + r;
        const T *src = r < n_rows ? qkv + (size_t)(t0 + rr / G) * W + (size_t)(qh0 + rr % G) * D +
                                        ch * 8
                                  : qkv;
        cp_async16(q_s + swz16<D>(r, ch), src, r < n_rows);
    }
    fa_load_tile<T, D>(k_s, v_s, kc, vc, a, btab, hk, 0, k_end);
    cp_async_commit();

    /* This thread's rows: g and g + 8 of each of the warp's two tiles, by
     * position (-1 past the block's rows); the warp's lowest and highest
     * positions bound the keys it needs masked and the keys it needs at all. */
    int pos[FA_MT][2], p_lo = INT_MAX, p_hi = -1;
#pragma unroll
    for (int mt = 0; mt < FA_MT; mt++)
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const int r = (warp * FA_MT + mt) * 16 + g + 8 * h;
            pos[mt][h] = r < n_rows ? a.positions[t0 + (row0 + r) / G] : -1;
            if (pos[mt][h] >= 0) p_lo = min(p_lo, pos[mt][h]), p_hi = max(p_hi, pos[mt][h]);
        }
    const int w_hi = __reduce_max_sync(0xffffffffu, p_hi);
    const int w_lo = __reduce_min_sync(0xffffffffu, p_lo);

    float o[FA_MT][D / 8][4], m[FA_MT][2], l[FA_MT][2];
#pragma unroll
    for (int mt = 0; mt < FA_MT; mt++) {
        m[mt][0] = m[mt][1] = -INFINITY;
        l[mt][0] = l[mt][1] = 0;
#pragma unroll
        for (int j = 0; j < D / 8; j++) o[mt][j][0] = o[mt][j][1] = o[mt][j][2] = o[mt][j][3] = 0;
    }
    const float sl2 = a.scale_log2;
    const int mi = lane >> 3;
    const T *qw = q_s + (size_t)warp * FA_MT * 16 * D;

    for (int j = 0; j < n_tiles; j++) {
        if (j + 1 < n_tiles)
            fa_load_tile<T, D>(k_s + ((j + 1) & 1) * TILE, v_s + ((j + 1) & 1) * TILE, kc, vc,
                               a, btab, hk, (j + 1) * FA_KEYS, k_end);
        cp_async_commit();
        cp_async_wait<1>();
        __syncthreads();      /* tile j (and the queries) visible to every warp */
        const int kb = j * FA_KEYS;
        if (kb <= w_hi) {
            const T *ks = k_s + (j & 1) * TILE, *vs = v_s + (j & 1) * TILE;
            /* S = Q K^T: 8 n-tiles of 8 keys per row tile; one ldmatrix.x4
             * gives two n-tiles' B fragments of a 16-dim k-step. */
            float sc[FA_MT][FA_KEYS / 8][4];
#pragma unroll
            for (int mt = 0; mt < FA_MT; mt++)
#pragma unroll
                for (int nt = 0; nt < FA_KEYS / 8; nt++)
                    sc[mt][nt][0] = sc[mt][nt][1] = sc[mt][nt][2] = sc[mt][nt][3] = 0;
#pragma unroll
            for (int kk = 0; kk < D / 16; kk++) {
                uint32_t qa[FA_MT][4];
#pragma unroll
                for (int mt = 0; mt < FA_MT; mt++)
                    ldsm_x4(qa[mt], qw + swz16<D>(mt * 16 + (mi & 1) * 8 + (lane & 7),
                                                  2 * kk + (mi >> 1)));
#pragma unroll
                for (int np = 0; np < FA_KEYS / 16; np++) {
                    uint32_t b[4];
                    ldsm_x4(b, ks + swz16<D>(np * 16 + (mi >> 1) * 8 + (lane & 7),
                                             2 * kk + (mi & 1)));
#pragma unroll
                    for (int mt = 0; mt < FA_MT; mt++) {
                        mma16816(sc[mt][2 * np], qa[mt], b[0], b[1], T());
                        mma16816(sc[mt][2 * np + 1], qa[mt], b[2], b[3], T());
                    }
                }
            }
            if (kb + FA_KEYS - 1 > w_lo || kb + FA_KEYS > k_end) {
#pragma unroll
                for (int mt = 0; mt < FA_MT; mt++)
#pragma unroll
                    for (int nt = 0; nt < FA_KEYS / 8; nt++)
#pragma unroll
                        for (int i = 0; i < 4; i++) {
                            const int kpos = kb + nt * 8 + 2 * q + (i & 1);
                            if (kpos >= k_end || kpos > pos[mt][i >> 1]) sc[mt][nt][i] = -INFINITY;
                        }
            }
            /* Online softmax on the raw scores (rows g and g + 8; the 4 lanes of
             * a row share it): p = 2^(s * scale - m * scale), one FMA and one ex2. */
#pragma unroll
            for (int mt = 0; mt < FA_MT; mt++) {
                float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
                for (int nt = 0; nt < FA_KEYS / 8; nt++)
#pragma unroll
                    for (int i = 0; i < 4; i++) mx[i >> 1] = fmaxf(mx[i >> 1], sc[mt][nt][i]);
                float mb[2];
#pragma unroll
                for (int h = 0; h < 2; h++) {
                    mx[h] = fmaxf(mx[h], __shfl_xor_sync(0xffffffffu, mx[h], 1));
                    mx[h] = fmaxf(mx[h], __shfl_xor_sync(0xffffffffu, mx[h], 2));
                    const float mn = fmaxf(m[mt][h], mx[h]);
                    mb[h] = mn == -INFINITY ? 0.0f : __fmul_rn(mn, sl2);   /* all masked so far: p = 0 */
                    /* A tile that leaves the max as it was (one wholly past
                     * the row's position among them) must leave l and o as
                     * they were: the FMA would give m * sl2's rounding error,
                     * whose ex2 need not be 1. */
                    const float corr = mn == m[mt][h] ? 1.0f : ex2(fmaf(m[mt][h], sl2, -mb[h]));
                    m[mt][h] = mn;
                    l[mt][h] = __fmul_rn(l[mt][h], corr);
#pragma unroll
                    for (int dt = 0; dt < D / 8; dt++)
                        o[mt][dt][2 * h] = __fmul_rn(o[mt][dt][2 * h], corr),
                        o[mt][dt][2 * h + 1] = __fmul_rn(o[mt][dt][2 * h + 1], corr);
                }
#pragma unroll
                for (int nt = 0; nt < FA_KEYS / 8; nt++)
#pragma unroll
                    for (int i = 0; i < 4; i++) {
                        const float p = ex2(fmaf(sc[mt][nt][i], sl2, -mb[i >> 1]));
                        sc[mt][nt][i] = p;
                        l[mt][i >> 1] = __fadd_rn(l[mt][i >> 1], p);
                    }
            }
            /* O += P V: P's C fragments of key tiles 2kk, 2kk + 1 are the A
             * fragment of k-step kk; V's B fragments come transposed out of
             * ldmatrix, two 8-dim n-tiles per load. */
#pragma unroll
            for (int kk = 0; kk < FA_KEYS / 16; kk++) {
                uint32_t pf[FA_MT][4];
#pragma unroll
                for (int mt = 0; mt < FA_MT; mt++) {
                    pf[mt][0] = pack2(sc[mt][2 * kk][0], sc[mt][2 * kk][1], T());
                    pf[mt][1] = pack2(sc[mt][2 * kk][2], sc[mt][2 * kk][3], T());
                    pf[mt][2] = pack2(sc[mt][2 * kk + 1][0], sc[mt][2 * kk + 1][1], T());
                    pf[mt][3] = pack2(sc[mt][2 * kk + 1][2], sc[mt][2 * kk + 1][3], T());
                }
#pragma unroll
                for (int dp = 0; dp < D / 16; dp++) {
                    uint32_t b[4];
                    ldsm_x4_trans(b, vs + swz16<D>(kk * 16 + (mi & 1) * 8 + (lane & 7),
                                                   2 * dp + (mi >> 1)));
#pragma unroll
                    for (int mt = 0; mt < FA_MT; mt++) {
                        mma16816(o[mt][2 * dp], pf[mt], b[0], b[1], T());
                        mma16816(o[mt][2 * dp + 1], pf[mt], b[2], b[3], T());
                    }
                }
            }
        }
        __syncthreads();      /* every warp done with stage j & 1 before it is refilled */
    }
    cp_async_wait<0>();

#pragma unroll
    for (int mt = 0; mt < FA_MT; mt++)
#pragma unroll
        for (int h = 0; h < 2; h++) {
            float lt = l[mt][h];
            lt = __fadd_rn(lt, __shfl_xor_sync(0xffffffffu, lt, 1));
            lt = __fadd_rn(lt, __shfl_xor_sync(0xffffffffu, lt, 2));
            if (pos[mt][h] < 0) continue;
            const int rr = row0 + (warp * FA_MT + mt) * 16 + g + 8 * h;
            const float inv = lt > 0 ? 1.0f / lt : 0.0f;
            T *dst = out + ((size_t)(t0 + rr / G) * a.n_q + qh0 + rr % G) * D + 2 * q;
#pragma unroll
            for (int dt = 0; dt < D / 8; dt++)
                st2(dst + dt * 8, __fmul_rn(o[mt][dt][2 * h], inv), __fmul_rn(o[mt][dt][2 * h + 1], inv));
        }
}

/* K and V in two stages, the block's queries: 96 KiB at head dim 128. */
template <typename T, int D> static size_t attention_fa_smem() {
    return ((size_t)2 * 2 * FA_KEYS * D + (size_t)FA_ROWS * D) * sizeof(T);
}

template <typename T, int D> static cudaError_t attention_fa_allow_smem() {
    return cudaFuncSetAttribute(attention_fa_kernel<T, D>,
                                cudaFuncAttributeMaxDynamicSharedMemorySize,
                                (int)attention_fa_smem<T, D>());
}

#define DEC_WARPS 4
#define DEC_TILE 16          /* keys per tile: the k extent of one P.V mma */
#define DEC_STAGES 3         /* tiles per warp in shared memory: two loading, one in use */
#define DEC_G 16             /* most query heads per KV head: the mma's 16 rows */
#define DEC_MIN_SPLIT (2 * DEC_WARPS * DEC_TILE)   /* two tiles per warp: its ring overlaps them */
#define DEC_MAX_SPLITS 64
#define DEC_CLUSTER_MAX 8    /* most splits merged over a cluster: the portable cluster size */

/* Start copying keys kb .. kb + 15 of KV head hk (K to ks, V to vs); rows past
 * k_end are zero-filled, since 0 x garbage could still be NaN.  kb is a
 * multiple of 16 and the block size too, so the tile is one cache block's run. */
template <typename T, int D>
static __device__ __forceinline__ void dec_load_tile(T *ks, T *vs, const T *kc, const T *vc,
                                                     const AttArgs &a, const int32_t *btab,
                                                     int hk, int kb, int k_end, int lane) {
    constexpr int CPR = D / 8;    /* 16-byte chunks per row */
    const int blk = __ldg(btab + kb / a.bs);
    const size_t off = a.layer_off + ((size_t)blk * a.n_kv + hk) * a.bs * D +
                       (size_t)(kb % a.bs) * D;
#pragma unroll
    for (int i = 0; i < DEC_TILE * CPR / 32; i++) {
        const int e = i * 32 + lane, r = e / CPR, ch = e % CPR;
        const bool valid = kb + r < k_end;
        const size_t src = valid ? off + (size_t)r * D + ch * 8 : off;
        cp_async16(ks + swz16<D>(r, ch), kc + src, valid);
        cp_async16(vs + swz16<D>(r, ch), vc + src, valid);
    }
}

/* The splits of one cluster merged: every split's partial (cp: [16 rows][D]
 * unnormalised o, ml: [16][M, L]) is in its own block's shared memory.  A
 * thread per (row, split), 16 x 8 = the block's 128 threads, reads that
 * split's M and L and the 8 lanes of a row agree on its weights; then each
 * block writes its share of the G x D outputs, every split's value read
 * where it lies.  The second barrier keeps each block's shared memory alive
 * until every block has read it. */
template <typename T, int D>
static __device__ __forceinline__ void attention_decode_cluster_merge(T *out, const float *cp,
                                                                      const float *ml, float *w,
                                                                      int G) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    static_assert(DEC_WARPS * 32 == 16 * DEC_CLUSTER_MAX, "a thread per (row, split)");
    namespace cg = cooperative_groups;
    cg::cluster_group cl = cg::this_cluster();
    cl.sync();
    const int nz = (int)cl.num_blocks(), me = (int)cl.block_rank();
    const int r = threadIdx.x / DEC_CLUSTER_MAX, z = threadIdx.x % DEC_CLUSTER_MAX;
    float mz = -INFINITY, lz = 0;
    if (r < G && z < nz) {
        const float *rml = cl.map_shared_rank(ml, z);
        lz = rml[2 * r + 1];
        mz = lz > 0 ? rml[2 * r] : -INFINITY;
    }
    float M = mz;
#pragma unroll
    for (int o = 1; o < DEC_CLUSTER_MAX; o <<= 1) M = fmaxf(M, __shfl_xor_sync(0xffffffffu, M, o));
    float L = lz > 0 ? lz * exp2f(mz - M) : 0.0f;
#pragma unroll
    for (int o = 1; o < DEC_CLUSTER_MAX; o <<= 1) L += __shfl_xor_sync(0xffffffffu, L, o);
    w[z * 16 + r] = lz > 0 ? exp2f(mz - M) / L : 0.0f;
    __syncthreads();
    const float *src[DEC_CLUSTER_MAX];
#pragma unroll
    for (int i = 0; i < DEC_CLUSTER_MAX; i++) src[i] = i < nz ? cl.map_shared_rank(cp, i) : cp;
    const int pairs = G * D / 2, share = (pairs + nz - 1) / nz;
    const int end = min(pairs, (me + 1) * share);
    for (int e = me * share + threadIdx.x; e < end; e += blockDim.x) {
        const int rr = e / (D / 2), d = 2 * (e % (D / 2));
        float2 v[DEC_CLUSTER_MAX];
#pragma unroll
        for (int i = 0; i < DEC_CLUSTER_MAX; i++)
            v[i] = i < nz ? *(const float2 *)(src[i] + rr * D + d) : make_float2(0.0f, 0.0f);
        float2 acc = make_float2(0, 0);
#pragma unroll
        for (int i = 0; i < DEC_CLUSTER_MAX; i++) {
            const float wz = i < nz ? w[i * 16 + rr] : 0.0f;
            if (wz > 0) acc.x += wz * v[i].x, acc.y += wz * v[i].y;
        }
        st2(out + (size_t)rr * D + d, acc.x, acc.y);
    }
    cl.sync();
#endif
}

/* One block: a sequence's single new token, one KV head with its group of up
 * to 16 query heads (the 16 rows of the mma tiles, zero past the group) and
 * one split of the keys.  Each warp streams its own 16-key tiles (tile w,
 * w + 4, ...) through a 3-deep cp.async ring and keeps its own online softmax;
 * the warps merge through shared memory.  With several splits, each block
 * leaves its partial (m, l, unnormalised o) in a.part and the last split of a
 * (sequence, KV head) to finish merges them all, so no second kernel runs.
 * CL (Hopper, up to DEC_CLUSTER_MAX splits): the splits of a (sequence, KV
 * head) are one thread-block cluster instead; each keeps its partial in its
 * own shared memory and all of them merge together, reading the others'
 * through distributed shared memory, so the merge waits on two cluster
 * barriers instead of a fence, an atomic and a last block's loads from L2
 * (at batch 1 the decode attention is a chain of latencies, not a read of
 * its bytes: kernels/PERF.md v33, v38). */
template <typename T, int D, bool CL>
__global__ void __launch_bounds__(DEC_WARPS * 32)
attention_decode_kernel(T *out, const T *qkv, const T *kc, const T *vc, AttArgs a) {
    extern __shared__ __align__(128) unsigned char dec_smem[];
    constexpr int TILE = DEC_TILE * D;     /* elements of one K or V tile */
    pdl_trigger();

    const int s = blockIdx.y / a.n_kv, hk = blockIdx.y % a.n_kv;
    const int gkv = a.kv_head0 + hk;
    const int lo = max(a.q_head0, gkv * a.group), hi = min(a.q_head0 + a.n_q, (gkv + 1) * a.group);
    const int G = hi - lo, qh0 = lo - a.q_head0;
    if (G <= 0) return;
    const int t = a.seq_start[s];
    const int k_total = min(a.seq_len[s], a.positions[t] + 1);
    int k_begin = 0, k_end = k_total;
    if (a.split_len) {
        k_begin = blockIdx.z * a.split_len;
        k_end = min(k_total, k_begin + a.split_len);
    }
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, q = lane & 3;
    const int n_tiles = k_end > k_begin ? (k_end - k_begin + DEC_TILE - 1) / DEC_TILE : 0;
    const int my_tiles = n_tiles > warp ? (n_tiles - warp + DEC_WARPS - 1) / DEC_WARPS : 0;
    const int32_t *btab = a.block_tables + (size_t)s * a.max_blocks;
    T *ring = (T *)dec_smem + (size_t)warp * DEC_STAGES * 2 * TILE;   /* [stage][K, V][TILE] */

    /* The warp's first tiles.  The step's batch is staged before any kernel;
     * of the cache, only the new token's key (position positions[t]) is
     * written in this step (rope_kv_store, the kernel before): the rest
     * came from earlier steps.  So a warp whose first tiles end before the
     * new key loads them before waiting for the kernel before, overlapping
     * its end; the warp whose tiles reach the new key waits first. */
    const int pre = min(my_tiles, DEC_STAGES - 1);
    const int pre_last = pre ? min(k_begin + (warp + (pre - 1) * DEC_WARPS + 1) * DEC_TILE, k_end) - 1 : -1;
    const bool early = pre_last < a.positions[t];
    auto prologue = [&]() {
#pragma unroll
        for (int j = 0; j < DEC_STAGES - 1; j++) {
            if (j < my_tiles)
                dec_load_tile<T, D>(ring + 2 * j * TILE, ring + (2 * j + 1) * TILE, kc, vc, a, btab,
                                    hk, k_begin + (warp + j * DEC_WARPS) * DEC_TILE, k_end, lane);
            cp_async_commit();
        }
    };
    if (early) prologue();
    pdl_wait();      /* qkv and the new key are the kernels before's */
    if (!early) prologue();

    /* Rows g and g + 8 of the A fragments: query heads qh0 + g and qh0 + g + 8. */
    const T *qrow = qkv + (size_t)t * (a.n_q + 2 * a.n_kv) * D + (size_t)qh0 * D;
    uint32_t qf[D / 16][4];
#pragma unroll
    for (int ks = 0; ks < D / 16; ks++)
#pragma unroll
        for (int i = 0; i < 4; i++) {
            const int r = g + 8 * (i & 1), col = ks * 16 + 2 * q + (i >> 1) * 8;
            qf[ks][i] = r < G ? *(const uint32_t *)(qrow + (size_t)r * D + col) : 0u;
        }

    float o[D / 8][4], m[2] = {-INFINITY, -INFINITY}, l[2] = {0, 0};
#pragma unroll
    for (int j = 0; j < D / 8; j++) o[j][0] = o[j][1] = o[j][2] = o[j][3] = 0;

    for (int j = 0; j < my_tiles; j++) {
        cp_async_wait<DEC_STAGES - 2>();
        __syncwarp();      /* tile j visible to the whole warp; tile j - 1's slot free */
        const int jn = j + DEC_STAGES - 1;
        if (jn < my_tiles) {
            T *slot = ring + 2 * (jn % DEC_STAGES) * TILE;
            dec_load_tile<T, D>(slot, slot + TILE, kc, vc, a, btab, hk,
                                k_begin + (warp + jn * DEC_WARPS) * DEC_TILE, k_end, lane);
        }
        cp_async_commit();
        const T *ks = ring + 2 * (j % DEC_STAGES) * TILE, *vs = ks + TILE;
        const int kb = k_begin + (warp + j * DEC_WARPS) * DEC_TILE;

        /* S = Q K^T: two n-tiles of 8 keys; one ldmatrix.x4 gives both tiles' B
         * fragments of a 16-dim k-step. */
        float sc[2][4] = {{0, 0, 0, 0}, {0, 0, 0, 0}};
        const int mi = lane >> 3;
#pragma unroll
        for (int kk = 0; kk < D / 16; kk++) {
            uint32_t b[4];
            ldsm_x4(b, ks + swz16<D>((mi >> 1) * 8 + (lane & 7), 2 * kk + (mi & 1)));
            mma16816(sc[0], qf[kk], b[0], b[1], T());
            mma16816(sc[1], qf[kk], b[2], b[3], T());
        }
        float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
        for (int nt = 0; nt < 2; nt++)
#pragma unroll
            for (int i = 0; i < 4; i++) {
                const int kpos = kb + nt * 8 + 2 * q + (i & 1);
                const float x = kpos < k_end ? sc[nt][i] * a.scale_log2 : -INFINITY;
                sc[nt][i] = x;
                mx[i >> 1] = fmaxf(mx[i >> 1], x);
            }
        float corr[2];
#pragma unroll
        for (int h = 0; h < 2; h++) {
            mx[h] = fmaxf(mx[h], __shfl_xor_sync(0xffffffffu, mx[h], 1));
            mx[h] = fmaxf(mx[h], __shfl_xor_sync(0xffffffffu, mx[h], 2));
            const float mn = fmaxf(m[h], mx[h]);
            corr[h] = mn == -INFINITY ? 1.0f : exp2f(m[h] - mn);
            m[h] = mn;
            l[h] *= corr[h];
        }
#pragma unroll
        for (int nt = 0; nt < 2; nt++)
#pragma unroll
            for (int i = 0; i < 4; i++) {
                const int h = i >> 1;
                const float p = m[h] == -INFINITY ? 0.0f : exp2f(sc[nt][i] - m[h]);
                sc[nt][i] = p;
                l[h] += p;
            }
#pragma unroll
        for (int dt = 0; dt < D / 8; dt++) {
            o[dt][0] *= corr[0], o[dt][1] *= corr[0];
            o[dt][2] *= corr[1], o[dt][3] *= corr[1];
        }
        /* O += P V: P's C fragments are the A fragment; V's B fragments come
         * transposed out of ldmatrix, two 8-dim n-tiles per load. */
        const uint32_t pf[4] = {pack2(sc[0][0], sc[0][1], T()), pack2(sc[0][2], sc[0][3], T()),
                                pack2(sc[1][0], sc[1][1], T()), pack2(sc[1][2], sc[1][3], T())};
#pragma unroll
        for (int dp = 0; dp < D / 16; dp++) {
            uint32_t b[4];
            ldsm_x4_trans(b, vs + swz16<D>((mi & 1) * 8 + (lane & 7), 2 * dp + (mi >> 1)));
            mma16816(o[2 * dp], pf, b[0], b[1], T());
            mma16816(o[2 * dp + 1], pf, b[2], b[3], T());
        }
    }
    cp_async_wait<0>();
#pragma unroll
    for (int h = 0; h < 2; h++) {
        l[h] += __shfl_xor_sync(0xffffffffu, l[h], 1);
        l[h] += __shfl_xor_sync(0xffffffffu, l[h], 2);
    }
    __syncthreads();       /* every ring drained: the shared memory is reused below */

    /* Merge the warps: weights 2^(m_w - M). */
    float *o_s = (float *)dec_smem;                       /* [warp][16 rows][D] */
    float *m_s = o_s + DEC_WARPS * 16 * D, *l_s = m_s + DEC_WARPS * 16;
    float *wt_s = l_s + DEC_WARPS * 16, *ml_s = wt_s + DEC_WARPS * 16;   /* [warp][16], [16][M, L] */
    int *last = (int *)(ml_s + 2 * 16);
    /* CL: this split's partial for the cluster, [16 rows][D] then [16][M, L],
     * and each split's weight [split][16 rows]. */
    float *cp_s = ml_s + 2 * 16 + 4, *cml_s = cp_s + 16 * D, *cw_s = cml_s + 2 * 16;
    static_assert(sizeof(float) * (DEC_WARPS * 16 * (D + 3) + 2 * 16 + 4 + 16 * D + 2 * 16 +
                                   DEC_CLUSTER_MAX * 16) <=
                      (size_t)DEC_WARPS * DEC_STAGES * 2 * DEC_TILE * D * sizeof(T),
                  "the merges fit in the rings' shared memory");
#pragma unroll
    for (int dt = 0; dt < D / 8; dt++)
#pragma unroll
        for (int h = 0; h < 2; h++)
            *(float2 *)(o_s + (warp * 16 + g + 8 * h) * D + dt * 8 + 2 * q) =
                make_float2(o[dt][2 * h], o[dt][2 * h + 1]);
    if (q == 0)
#pragma unroll
        for (int h = 0; h < 2; h++)
            m_s[warp * 16 + g + 8 * h] = m[h], l_s[warp * 16 + g + 8 * h] = l[h];
    __syncthreads();
    /* Each row's warp weights once, a thread a row (0 for a warp without
     * keys, whose o is 0), so the loop below is a multiply-add a warp. */
    if (threadIdx.x < G) {
        const int r = threadIdx.x;
        float M = -INFINITY, L = 0;
#pragma unroll
        for (int w = 0; w < DEC_WARPS; w++)
            if (l_s[w * 16 + r] > 0) M = fmaxf(M, m_s[w * 16 + r]);
#pragma unroll
        for (int w = 0; w < DEC_WARPS; w++) {
            const float wt = l_s[w * 16 + r] > 0 ? exp2f(m_s[w * 16 + r] - M) : 0.0f;
            if (wt > 0) L += l_s[w * 16 + r] * wt;
            wt_s[w * 16 + r] = wt;
        }
        ml_s[2 * r] = M, ml_s[2 * r + 1] = L;
    }
    __syncthreads();
    const size_t stride = (size_t)a.n_tokens * a.n_q * (D + 2);   /* one split's partials */
    for (int e = threadIdx.x; e < G * D; e += blockDim.x) {
        const int r = e / D, d = e % D;
        const float M = ml_s[2 * r], L = ml_s[2 * r + 1];
        float acc = 0;
#pragma unroll
        for (int w = 0; w < DEC_WARPS; w++) acc += o_s[(w * 16 + r) * D + d] * wt_s[w * 16 + r];
        if (!a.split_len) {
            st(out + ((size_t)t * a.n_q + qh0 + r) * D + d, L > 0 ? acc / L : 0.0f);
        } else if (CL) {
            if (d == 0) cml_s[2 * r] = M, cml_s[2 * r + 1] = L;
            cp_s[r * D + d] = acc;
        } else {
            float *dst = a.part + blockIdx.z * stride + ((size_t)t * a.n_q + qh0 + r) * (D + 2);
            if (d == 0) dst[0] = M, dst[1] = L;
            dst[2 + d] = acc;
        }
    }
    if (!a.split_len) return;
    if (CL) {
        attention_decode_cluster_merge<T, D>(out + ((size_t)t * a.n_q + qh0) * D, cp_s, cml_s,
                                             cw_s, G);
        return;
    }

    /* The last split of this (sequence, KV head) to finish merges every split. */
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0)
        *last = atomicAdd(a.count + blockIdx.y, 1) == (int)gridDim.z - 1;
    __syncthreads();
    if (!*last) return;
    __threadfence();
    /* Each split's weight 2^(m_z - M) / L for each query head, a warp per head
     * and a lane per split, then the weighted sum, two dims per thread.  The
     * partials come from L2: every load of a round is issued before any is
     * used, so a round costs one L2 latency, not one per split. */
    float *w_s = o_s;                                      /* [split][16 rows] */
    const float *p0 = a.part + (size_t)t * a.n_q * (D + 2) + (size_t)qh0 * (D + 2);
    const int nz = (int)gridDim.z;
    for (int r = warp; r < G; r += DEC_WARPS) {
        const float *pr = p0 + (size_t)r * (D + 2);
        float mz[DEC_MAX_SPLITS / 32], lz[DEC_MAX_SPLITS / 32], M = -INFINITY, L = 0;
#pragma unroll
        for (int i = 0; i < DEC_MAX_SPLITS / 32; i++) {
            const int z = lane + 32 * i;
            const float2 ml = z < nz ? __ldcg((const float2 *)(pr + z * stride))
                                     : make_float2(-INFINITY, 0.0f);
            lz[i] = ml.y;
            mz[i] = lz[i] > 0 ? ml.x : -INFINITY;
            M = fmaxf(M, mz[i]);
        }
        M = warp_max(M);
#pragma unroll
        for (int i = 0; i < DEC_MAX_SPLITS / 32; i++)
            if (lz[i] > 0) L += lz[i] * exp2f(mz[i] - M);
        L = warp_sum(L);
#pragma unroll
        for (int i = 0; i < DEC_MAX_SPLITS / 32; i++) {
            const int z = lane + 32 * i;
            if (z < nz) w_s[z * 16 + r] = lz[i] > 0 ? exp2f(mz[i] - M) / L : 0.0f;
        }
    }
    __syncthreads();
    constexpr int ZR = 8;   /* splits loaded per round */
    for (int e = threadIdx.x; e < G * D / 2; e += blockDim.x) {
        const int r = e / (D / 2), d = 2 * (e % (D / 2));
        const float *pr = p0 + (size_t)r * (D + 2) + 2 + d;
        float2 acc = make_float2(0, 0);
        for (int z0 = 0; z0 < nz; z0 += ZR) {
            float2 v[ZR];
#pragma unroll
            for (int i = 0; i < ZR; i++)
                v[i] = z0 + i < nz ? __ldcg((const float2 *)(pr + (z0 + i) * stride))
                                   : make_float2(0.0f, 0.0f);
#pragma unroll
            for (int i = 0; i < ZR; i++) {
                const float wz = z0 + i < nz ? w_s[(z0 + i) * 16 + r] : 0.0f;
                if (wz > 0) acc.x += wz * v[i].x, acc.y += wz * v[i].y;
            }
        }
        st2(out + ((size_t)t * a.n_q + qh0 + r) * D + d, acc.x, acc.y);
    }
    if (threadIdx.x == 0) a.count[blockIdx.y] = 0;
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
    if (shm > c->arch.smem_block) {
        cuda_fail(c, RL_EUSAGE,
                  "attention over head dim %d needs %zu KiB of shared memory per block, more "
                  "than the %zu KiB this GPU%s allows", a.D, shm >> 10, c->arch.smem_block >> 10,
                  c->arch.generic ? " (the generic path's Ampere / Ada limit)" : "");
        return;
    }
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

/* The decode kernel's shapes: one new token per sequence, head dim 64 or
 * 128, at most DEC_G query heads per KV head, cache blocks a whole number of
 * tiles (RL_CUDA_DECODE_ATTN=0: off). */
static bool attention_decode_fits(const rlCuda *c, int D, int g_max) {
    static int off = -1;
    if (off < 0) {
        const char *e = getenv("RL_CUDA_DECODE_ATTN");
        off = e && !strcmp(e, "0");
    }
    return !off && (D == 64 || D == 128) && g_max <= DEC_G && c->kv_block_size % DEC_TILE == 0;
}

/* A step that prefills and decodes (chunked prefill beside running
 * sequences): its leading one-token sequences take the decode kernel and the
 * rest the prefill kernel, instead of the prefill kernel for all, whose grid
 * gives every decode row as many query tiles as the longest chunk needs
 * (mostly empty blocks) and no split of its keys. */
static bool attention_mixed_split(const rlCuda *c) {
    return c->max_new > 1 && c->lead_decode > 0 && c->lead_decode < c->n_seqs;
}

/* The decode kernel's shared memory: every warp's ring of K and V tiles. */
template <typename T, int D> static size_t attention_decode_smem() {
    return (size_t)DEC_WARPS * DEC_STAGES * 2 * DEC_TILE * D * sizeof(T);
}

template <typename T, int D> static cudaError_t attention_decode_allow_smem() {
    cudaError_t e = cudaFuncSetAttribute(attention_decode_kernel<T, D, false>,
                                         cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         (int)attention_decode_smem<T, D>());
    if (e == cudaSuccess)
        e = cudaFuncSetAttribute(attention_decode_kernel<T, D, true>,
                                 cudaFuncAttributeMaxDynamicSharedMemorySize,
                                 (int)attention_decode_smem<T, D>());
    return e;
}

/* The decode kernel takes more than the default 48 KiB of shared memory: the
 * limit is raised once per device, outside any graph capture.  How many of
 * its blocks an SM holds at once sets how far a step splits its keys. */
int cuda_attention_init(rlCuda *c, rlError *err) {
    size_t most = attention_decode_smem<bf16, 128>();
    if (most > c->arch.smem_block)
        return rl_error(err, RL_EDEVICE,
                        "CUDA backend, device %d: the decode attention kernel needs %zu KiB of "
                        "shared memory per block, more than the %zu KiB this GPU allows",
                        c->device, most >> 10, c->arch.smem_block >> 10);
    cudaError_t e = attention_decode_allow_smem<bf16, 64>();
    if (e == cudaSuccess) e = attention_decode_allow_smem<bf16, 128>();
    if (e == cudaSuccess) e = attention_decode_allow_smem<f16, 64>();
    if (e == cudaSuccess) e = attention_decode_allow_smem<f16, 128>();
    /* The prefill kernel takes 48 KiB at head dim 64, 96 at 128. */
    if (e == cudaSuccess) e = attention_fa_allow_smem<bf16, 64>();
    if (e == cudaSuccess) e = attention_fa_allow_smem<bf16, 128>();
    if (e == cudaSuccess) e = attention_fa_allow_smem<f16, 64>();
    if (e == cudaSuccess) e = attention_fa_allow_smem<f16, 128>();
    /* bf16 and fp16 take the same. */
    int occ[2] = {0, 0};
    if (e == cudaSuccess)
        e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(
            &occ[0], attention_decode_kernel<bf16, 64, false>, DEC_WARPS * 32,
            attention_decode_smem<bf16, 64>());
    if (e == cudaSuccess)
        e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(
            &occ[1], attention_decode_kernel<bf16, 128, false>, DEC_WARPS * 32,
            attention_decode_smem<bf16, 128>());
    if (e != cudaSuccess)
        return rl_error(err, RL_EDEVICE,
                        "CUDA backend, device %d: the attention kernels cannot have the "
                        "%zu KiB of shared memory it needs: %s", c->device, most >> 10,
                        cudaGetErrorString(e));
    c->dec_blocks_per_sm[0] = cuda_arch_blocks_per_sm(c, occ[0], DEC_WARPS * 32,
                                                      attention_decode_smem<bf16, 64>());
    c->dec_blocks_per_sm[1] = cuda_arch_blocks_per_sm(c, occ[1], DEC_WARPS * 32,
                                                      attention_decode_smem<bf16, 128>());
    return 0;
}

template <typename T, int D>
static void attention_decode_launch(rlCuda *c, T *out, const T *qkv, const AttArgs &a,
                                    dim3 grid, bool cluster) {
    cuda_check(c, cuda_launch_cluster(c->stream, c->arch.pdl, cluster ? grid.z : 1,
                                      cluster ? attention_decode_kernel<T, D, true>
                                              : attention_decode_kernel<T, D, false>,
                                      grid, dim3(DEC_WARPS * 32), attention_decode_smem<T, D>(),
                                      out, qkv, (const T *)c->k_cache, (const T *)c->v_cache, a),
               "attention (decode)");
}

/* The decode kernel over sequences 0 .. n_seqs - 1 of a (each one new token,
 * so token s is sequence s): its split partials hold those n_seqs rows only,
 * not a mixed step's prompt tokens after them. */
template <typename T>
static void attention_decode_run(rlCuda *c, T *out, const T *qkv, AttArgs a, int n_seqs) {
    a.n_tokens = n_seqs;
    /* Split only as far as one wave of resident blocks goes: each block
     * pays a fixed start (the batch's indices, Q, the first tiles' latency)
     * and a split its merge, so more blocks than the GPU holds at once cost
     * more than they balance (PERF.md v7).  Splits are whole numbers of
     * DEC_MIN_SPLIT keys (finer units measured no faster: the top of this
     * file). */
    int base = n_seqs * a.n_kv;
    int slots = c->sm_count * c->dec_blocks_per_sm[a.D == 128];
    int splits = slots / base, most = (c->att_len + DEC_MIN_SPLIT - 1) / DEC_MIN_SPLIT;
    if (splits > most) splits = most;
    if (splits > DEC_MAX_SPLITS) splits = DEC_MAX_SPLITS;
    if (splits < 1) splits = 1;
    int len = (c->att_len + splits - 1) / splits;
    len = (len + DEC_MIN_SPLIT - 1) / DEC_MIN_SPLIT * DEC_MIN_SPLIT;
    splits = (c->att_len + len - 1) / len;
    a.split_len = 0;
    /* Splits merge over a cluster where the GPU has them and they are few
     * enough (the kernel's CL); else through a.part and an atomic count. */
    const bool cluster = splits > 1 && splits <= DEC_CLUSTER_MAX && c->arch.clusters;
    if (splits > 1) {
        a.split_len = len;
        if (!cluster) {
            size_t part_bytes = (size_t)splits * n_seqs * a.n_q * (a.D + 2) * sizeof(float);
            if (cuda_scratch(c, part_bytes, "attention") ||
                cuda_att_counters(c, base, "attention"))
                return;
            a.part = (float *)c->scratch;
            a.count = c->att_count;
        }
    }
    dim3 grid(1, base, splits);
    PROF(c, "attention decode");
    if (a.D == 64) attention_decode_launch<T, 64>(c, out, qkv, a, grid, cluster);
    else attention_decode_launch<T, 128>(c, out, qkv, a, grid, cluster);
}

/* Tensor-core prefill: head dim 64 or 128 (RL_CUDA_PREFILL_MMA=0: off). */
static bool attention_mma_fits(int D) {
    static int off = -1;
    if (off < 0) {
        const char *e = getenv("RL_CUDA_PREFILL_MMA");
        off = e && !strcmp(e, "0");
    }
    return !off && (D == 64 || D == 128);
}

template <typename T, int D>
static void attention_fa_launch(rlCuda *c, T *out, const T *qkv, const AttArgs &a, int g_max,
                                int n_seqs) {
    const int tiles = (c->max_new * g_max + FA_ROWS - 1) / FA_ROWS;
    if (tiles > 65535) {
        cuda_fail(c, RL_EUSAGE, "attention (prefill): %d query tiles in one sequence, more than "
                  "the 65,535 one launch takes; lower --max-num-batched-tokens", tiles);
        return;
    }
    const dim3 grid(n_seqs * a.n_kv, tiles);
    attention_fa_kernel<T, D><<<grid, FA_WARPS * 32, attention_fa_smem<T, D>(), c->stream>>>(
        out, qkv, (const T *)c->k_cache, (const T *)c->v_cache, a);
}

/* The prefill kernel over sequences 0 .. n_seqs - 1 of a. */
template <typename T>
static void attention_mma_run(rlCuda *c, T *out, const T *qkv, const AttArgs &a, int g_max,
                              int n_seqs) {
    PROF(c, "attention prefill (mma)");
    if (a.D == 64) attention_fa_launch<T, 64>(c, out, qkv, a, g_max, n_seqs);
    else attention_fa_launch<T, 128>(c, out, qkv, a, g_max, n_seqs);
    cuda_launched(c, "attention (prefill)");
}

template <typename T>
static void attention_run(rlCuda *c, T *out, const T *qkv, AttArgs a, int tiles) {
    /* Split the keys when there are too few (sequence, KV head, tile) blocks to
     * fill the GPU: decode, where each sequence has one tile. */
    int base = c->n_seqs * a.n_kv * tiles, splits = 1;
    int want = 4 * c->sm_count;
    /* --batch-invariant: one split, keys in 32-key chunks from key 0 (a chunk
     * past a row's position leaves it as it was: max unchanged, exp2(0) = 1,
     * p = 0), since splits chosen by the batch would regroup the sums. */
    if (!c->invariant && base < want && c->att_len > 2 * ATT_KEYS * 4) {
        splits = (want + base - 1) / base;
        int most = (c->att_len + 4 * ATT_KEYS - 1) / (4 * ATT_KEYS);
        if (splits > most) splits = most;
    }
    size_t part_bytes = 0;
    if (splits > 1) {
        a.split_len = (c->att_len + splits - 1) / splits;
        a.split_len = (a.split_len + ATT_KEYS - 1) / ATT_KEYS * ATT_KEYS;
        splits = (c->att_len + a.split_len - 1) / a.split_len;
        part_bytes = (size_t)splits * c->n_tokens * a.n_q * (a.D + 2) * sizeof(float);
    }
    if (splits > 1 && cuda_scratch(c, part_bytes, "attention")) return;
    if (splits > 1) a.part = (float *)c->scratch;
    else a.split_len = 0;
    dim3 grid(tiles, c->n_seqs * a.n_kv, splits);
    PROF(c, "attention (tiled) %s", c->max_new > 1 ? "prefill" : "decode");
    if (a.D <= 64) attention_launch<T, 1>(c, out, qkv, a, grid);
    else if (a.D <= 128) attention_launch<T, 2>(c, out, qkv, a, grid);
    else attention_launch<T, 4>(c, out, qkv, a, grid);
    if (splits > 1) {
        PROF(c, "attention merge");
        attention_merge_kernel<T><<<c->n_tokens * a.n_q, 128, 0, c->stream>>>(
            out, a.part, splits, c->n_tokens, a.n_q, a.D);
        cuda_launched(c, "attention (merge)");
    }
}

/* The kernels a step's attention takes.  --batch-invariant: the prefill
 * kernel for every step, decode rows too (the decode kernel's splits and
 * warp merge follow the batch), else the tiled kernel unsplit
 * (attention_run). */
template <typename T>
static void attention_step(rlCuda *c, T *out, const T *qkv, AttArgs a, int g_max, int tiles) {
    const bool decode_ok = !c->invariant && attention_decode_fits(c, a.D, g_max);
    if (decode_ok && c->max_new == 1 && c->n_tokens == c->n_seqs) {
        attention_decode_run<T>(c, out, qkv, a, c->n_seqs);
        return;
    }
    if ((c->max_new > 1 || c->invariant) && attention_mma_fits(a.D)) {
        int lead = 0;
        if (decode_ok && attention_mixed_split(c)) {
            lead = c->lead_decode;
            attention_decode_run<T>(c, out, qkv, a, lead);
            a.seq_start += lead, a.seq_len += lead;
            a.block_tables += (size_t)lead * c->max_blocks;
        }
        attention_mma_run<T>(c, out, qkv, a, g_max, c->n_seqs - lead);
        return;
    }
    attention_run<T>(c, out, qkv, a, tiles);
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
    a.count = NULL;
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
        attention_step<f16>(c, (f16 *)out, (const f16 *)qkv, a, g_max, tiles);
    else
        attention_step<bf16>(c, (bf16 *)out, (const bf16 *)qkv, a, g_max, tiles);
}
