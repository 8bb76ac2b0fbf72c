/* cuda_tile_gemm.cuh: one 64 x 64 tile of C = A . B^T on tensor cores, the
 * kernel of moe.cu's grouped expert GEMMs and of gemm.cu's batch-invariant
 * path (--batch-invariant), so the two share one GEMM instead of two.
 *
 * A rows and B rows are K-contiguous (the weights' own layout); K must be a
 * multiple of 8 and the rows 16-byte aligned (one 16-byte load per 8
 * elements, zero past K).  A block takes a tile of up to 64 rows: from the
 * grouped GEMMs' tile list on the device (tiles != NULL: expert, first row,
 * row count), else rows blockIdx.y * 64 ... of a dense product of `rows`
 * rows.  4 warps of 32 x 32 each, K in steps of 32 through shared memory:
 * either loaded through registers one step at a time (STAGES = 1, what the
 * expert GEMMs were measured with) or pipelined through cp.async, STAGES - 1
 * steps in flight while one is multiplied (what a block with few tiles
 * needs to stream its weights: a decode step's down projection has 56
 * blocks of 592 K steps at the 7B shape, so the fewer a call's blocks, the
 * deeper its pipeline should be); RL_CUDA_TILE_PIPE overrides the callers'
 * choices.  The kernel is static: each .cu file that includes this holds
 * its own instantiations (and sets the deep loop's shared memory for them).
 *
 * Why it is batch-invariant: every output element is one chain of
 * m16n8k16 mma steps over k = 0, 16, 32 ... from a zero accumulator, then
 * the epilogue's per-element arithmetic.  No split of K; the tile (64 x 64,
 * or BIG's 128 x 128) and the K loop's depth only change which warp runs an
 * element's chain and when its operands arrive: its value depends on its
 * own row of A and column of B only, never on the tile's other rows, where
 * in the tile the row sits, or how many rows the call has.
 *
 * Epilogues: TG_SWIGLU (gate/up of the experts: A rows gathered through
 * perm, B rows 32 gate then 32 up rows of the tile's expert, silu(gate) * up
 * written to T), TG_F32 (fp32 out: the experts' down projections, summed
 * per token before one rounding; the LM head), TG_ACT (T out, + bias[col]
 * when given, one rounding: a linear layer). */
#ifndef RL_CUDA_TILE_GEMM_CUH
#define RL_CUDA_TILE_GEMM_CUH

#include "kernels/cuda/cuda_math.cuh"
#include "kernels/cuda/cuda_mma.cuh"
#include "kernels/cuda/cuda_types.cuh"

#include <stdlib.h>
#include <string.h>

#define TG_BM 64            /* rows per tile (rl_moe_scratch_bytes's 64) */
#define TG_BN 64            /* weight rows per tile (gate/up: 32 gate + 32 up) */
#define TG_BK 32
#define TG_LD (TG_BK + 8)   /* padded shared-memory row: ldmatrix rows in distinct banks */
#define TG_THREADS 128
#define TG_STAGES 4         /* K steps in flight - 1 in the pipelined loop */
#define TG_DEEP_STAGES 8    /* the deep loop: for calls of few blocks (dynamic shared memory) */
/* The big tile (BIG = 1): 128 x 128, 4 warps of 64 x 64, twice the mma per
 * ldmatrix of the 64 x 64 tile's 32 x 32 warps; dense products only. */
#define TG_ROWS(BIG) ((BIG) ? 128 : TG_BM)
#define TG_COLS(BIG) ((BIG) ? 128 : TG_BN)

enum { TG_SWIGLU, TG_F32, TG_ACT };

/* Shared memory of one block: STAGES pairs of A and B tiles and the
 * epilogue's fp32 C tile, which the pipelined loops lay over their stages
 * once they are done (40 KiB at 4 stages, under the 48 KiB of static shared
 * memory; 80 KiB at 8 stages or the big tile's 4, dynamic); the plain loop
 * keeps it apart, as it was measured (ptxas spills the plain loop's
 * registers when C overlaps its tiles). */
#define TG_TILE_ELEMS(BIG) (TG_ROWS(BIG) * TG_LD)
#define TG_C_BYTES(BIG) (TG_ROWS(BIG) * (TG_COLS(BIG) + 4) * 4)
#define TG_AB_BYTES(STAGES, BIG, T) ((STAGES) * 2 * TG_TILE_ELEMS(BIG) * sizeof(T))
#define TG_C_OFFSET(STAGES, BIG, T) ((STAGES) == 1 ? TG_AB_BYTES(1, BIG, T) : 0)
#define TG_SMEM(STAGES, BIG, T)                                                    \
    ((STAGES) == 1 ? TG_AB_BYTES(1, BIG, T) + TG_C_BYTES(BIG)                      \
     : TG_AB_BYTES(STAGES, BIG, T) > TG_C_BYTES(BIG) ? TG_AB_BYTES(STAGES, BIG, T) \
                                                     : TG_C_BYTES(BIG))
/* The dynamic part of a launch's shared memory (past the static 48 KiB). */
#define TG_DYN_SMEM(STAGES, BIG, T) \
    (TG_SMEM(STAGES, BIG, T) > 48 * 1024 ? TG_SMEM(STAGES, BIG, T) : 0)

/* RL_CUDA_TILE_PIPE, the K loop every tile GEMM takes: 0 the plain one
 * (registers to shared memory, then the mma), 4 or 8 that many cp.async
 * stages (the expert GEMMs take 4 for 8); unset (-1): each caller's
 * default.  All give the same bits: only when the tiles arrive changes. */
static inline int tile_gemm_pipe_env(void) {
    static int v = -2;
    if (v == -2) {
        const char *e = getenv("RL_CUDA_TILE_PIPE");
        v = !e || !*e ? -1 : !strcmp(e, "0") ? 0 : !strcmp(e, "8") ? 8 : TG_STAGES;
    }
    return v;
}

/* out (N columns, or m for TG_SWIGLU) = a . w^T over K; the tile's expert's
 * weights start at w + e * (TG_SWIGLU ? 2 m : N) * K.  BIG: the 128 x 128
 * tile (no tile list, no SwiGLU, a pipelined loop). */
template <typename T, int EPI, int STAGES, int BIG = 0>
static __global__ void __launch_bounds__(TG_THREADS)
tile_gemm_kernel(void *out, const T *a, const T *w, const T *bias, const int4 *tiles,
                 const int *n_tiles, const int *perm, int k_top, int K, int N, int m, int rows) {
    constexpr int BM = TG_ROWS(BIG), BN = TG_COLS(BIG), TILE = TG_TILE_ELEMS(BIG);
    constexpr int MT = BM / 32, NT = BN / 16;   /* a warp's m16 and n8 tiles: 2 x 4 or 4 x 8 */
    constexpr int CH = BM * (TG_BK / 8) / TG_THREADS;   /* 16-byte chunks a thread loads per tile */
    constexpr bool GATE_UP = EPI == TG_SWIGLU;
    static_assert(BM == BN && (!BIG || (!GATE_UP && STAGES > 1)), "the big tile: dense, pipelined");
    __shared__ __align__(16)
        unsigned char smem_static[TG_DYN_SMEM(STAGES, BIG, T) ? 16 : TG_SMEM(STAGES, BIG, T)];
    extern __shared__ __align__(16) unsigned char tg_smem_dyn[];
    unsigned char *const smem = TG_DYN_SMEM(STAGES, BIG, T) ? tg_smem_dyn : smem_static;
    T *const st0 = (T *)smem;     /* stage s: A tile at st0 + 2 s TILE, B tile after it */
    float (*Cs)[BN + 4] = (float (*)[BN + 4])(smem + TG_C_OFFSET(STAGES, BIG, T));
    int e = 0, row0, nrows;
    if (tiles) {
        if ((int)blockIdx.y >= *n_tiles) return;
        const int4 tile = tiles[blockIdx.y];
        e = tile.x, row0 = tile.y, nrows = tile.z;
    } else {
        row0 = blockIdx.y * BM, nrows = min(BM, rows - row0);
    }
    int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, wm = warp >> 1, wn = warp & 1;
    int col0 = blockIdx.x * (GATE_UP ? BN / 2 : BN);
    const T *we = w + (size_t)e * (GATE_UP ? 2 * (size_t)m : (size_t)N) * K;

    /* This thread's CH 8-element chunks of each tile: row c / 4, column 8 (c % 4). */
    const T *arow[CH], *brow[CH];
    int chunk_off[CH], chunk_k[CH];
#pragma unroll
    for (int i = 0; i < CH; i++) {
        int ch = tid + i * TG_THREADS, r = ch >> 2;
        chunk_off[i] = r * TG_LD + (ch & 3) * 8, chunk_k[i] = (ch & 3) * 8;
        arow[i] = NULL;
        if (r < nrows)
            arow[i] = GATE_UP ? a + (size_t)(perm[row0 + r] / k_top) * K
                              : a + (size_t)(row0 + r) * K;
        int br;
        bool ok;
        if (GATE_UP) {
            int j = col0 + (r & 31);
            ok = j < m, br = r < 32 ? j : m + j;
        } else {
            br = col0 + r, ok = br < N;
        }
        brow[i] = ok ? we + (size_t)br * K : NULL;
    }

    /* One K step of the tile from shared memory: per warp (16 MT) x (8 NT),
     * two 16-deep mma steps, k in increasing order. */
    float acc[MT][NT][4] = {};
    auto multiply = [&](const T *As, const T *Bs) {
#pragma unroll
        for (int ks = 0; ks < TG_BK; ks += 16) {
            uint32_t af[MT][4], bfr[NT / 2][4];
            for (int mi = 0; mi < MT; mi++)
                ldsm_x4(af[mi], &As[(wm * 16 * MT + mi * 16 + (lane & 15)) * TG_LD + ks +
                                    (lane >> 4) * 8]);
            for (int nj = 0; nj < NT / 2; nj++)
                ldsm_x4(bfr[nj], &Bs[(wn * 8 * NT + nj * 16 + (lane & 7) + ((lane >> 4) << 3)) *
                                         TG_LD + ks + ((lane >> 3) & 1) * 8]);
            for (int mi = 0; mi < MT; mi++)
                for (int ni = 0; ni < NT; ni++)
                    mma16816(acc[mi][ni], af[mi], bfr[ni >> 1][(ni & 1) * 2],
                             bfr[ni >> 1][(ni & 1) * 2 + 1], T());
        }
    };
    if constexpr (STAGES == 1) {
        T *As = st0, *Bs = st0 + TILE;
        for (int k0 = 0; k0 < K; k0 += TG_BK) {
#pragma unroll
            for (int i = 0; i < CH; i++) {
                int kk = k0 + chunk_k[i];
                uint4 av = make_uint4(0, 0, 0, 0), bv = make_uint4(0, 0, 0, 0);
                if (arow[i] && kk < K) av = *(const uint4 *)(arow[i] + kk);
                if (brow[i] && kk < K) bv = *(const uint4 *)(brow[i] + kk);
                *(uint4 *)&As[chunk_off[i]] = av;
                *(uint4 *)&Bs[chunk_off[i]] = bv;
            }
            __syncthreads();
            multiply(As, Bs);
            __syncthreads();
        }
    } else {
        /* K step t lives in stage t % STAGES; chunks past K or past the
         * tile's rows are zero-filled (the source then is only a valid
         * address, not read). */
        const int steps = (K + TG_BK - 1) / TG_BK;
        auto load = [&](int t) {
            T *As = st0 + (t % STAGES) * 2 * TILE, *Bs = As + TILE;
#pragma unroll
            for (int i = 0; i < CH; i++) {
                const int kk = t * TG_BK + chunk_k[i];
                const bool av = arow[i] && kk < K, bv = brow[i] && kk < K;
                cp_async16(&As[chunk_off[i]], av ? arow[i] + kk : a, av);
                cp_async16(&Bs[chunk_off[i]], bv ? brow[i] + kk : w, bv);
            }
        };
#pragma unroll
        for (int t = 0; t < STAGES - 1; t++) {
            if (t < steps) load(t);
            cp_async_commit();
        }
        for (int t = 0; t < steps; t++) {
            /* One commit group per K step (empty past the end), so
             * all but the newest STAGES - 2 done means step t is here. */
            cp_async_wait<STAGES - 2>();
            __syncthreads();      /* step t visible; every warp done with step t - 1's stage */
            if (t + STAGES - 1 < steps) load(t + STAGES - 1);
            cp_async_commit();
            const T *As = st0 + (t % STAGES) * 2 * TILE;
            multiply(As, As + TILE);
        }
        cp_async_wait<0>();
        __syncthreads();          /* every warp done with the stages: C goes over them */
    }
    int g = lane >> 2, q = lane & 3;
    for (int mi = 0; mi < MT; mi++)
        for (int ni = 0; ni < NT; ni++) {
            int r = wm * 16 * MT + mi * 16 + g, cc = wn * 8 * NT + ni * 8 + 2 * q;
            Cs[r][cc] = acc[mi][ni][0], Cs[r][cc + 1] = acc[mi][ni][1];
            Cs[r + 8][cc] = acc[mi][ni][2], Cs[r + 8][cc + 1] = acc[mi][ni][3];
        }
    __syncthreads();
    if (GATE_UP) {
        for (int i = tid; i < BM * 32; i += TG_THREADS) {
            int r = i >> 5, cc = i & 31;
            if (r >= nrows || col0 + cc >= m) continue;
            st((T *)out + (size_t)(row0 + r) * m + col0 + cc,
               silu_mul(Cs[r][cc], Cs[r][32 + cc]));
        }
    } else {
        for (int i = tid; i < BM * BN; i += TG_THREADS) {
            int r = i / BN, cc = i % BN;
            if (r >= nrows || col0 + cc >= N) continue;
            const size_t o = (size_t)(row0 + r) * N + col0 + cc;
            if (EPI == TG_F32) {
                ((float *)out)[o] = Cs[r][cc];
            } else {
                float v = Cs[r][cc];
                if (bias) v += ld(bias + col0 + cc);
                st((T *)out + o, v);
            }
        }
    }
}

#endif
