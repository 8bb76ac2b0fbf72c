/* wq.cu: linear layers over quantized weights (int4 / int8 / fp8), read in
 * the packed layout of wq_internal.h and dequantized in registers.
 *
 * Three kernels, one rule for which runs (wq_kernel): the decode GEMV
 * (wq_gemv_kernel below) for 1-8 rows of layers without act-order, the tile
 * kernel (wq_tile_kernel) for 9-128 rows of layers whose groups are whole
 * chunks (g128 and up, fp8 blocks, one group), and the mma kernel for the
 * rest (act-order, g32 / g64 / g96) up to 32 rows.
 *
 * The mma kernel: a block owns NW tiles of 8 output columns over all of K,
 * its 8 warps take every 8th chunk of K (a split-K inside the block, so a
 * narrow layer still puts enough loads in flight), and each warp runs
 * mma.sync m16n8k16 over MT tiles of 16 rows.
 * Weights stream once per block, 16 bytes per lane per chunk, with a ring
 * of the next chunks' loads (and their scales and zero points) in flight;
 * activations come straight from global memory (small, shared through L1).
 * q - zero (int4 / int8) and e4m3 are exact in bf16 and fp16, so the B
 * fragments are exact and the fp32 scale multiplies an fp32 partial sum once
 * per group.  The warps' partial sums meet in shared memory and are rounded
 * once into y.  rl_wq_dequant writes the dense matrix for larger batches;
 * rl_wq_fp8_values an FP8 layer's e4m3 bytes as they came, for FP8 GEMMs.
 *
 * Speed, per Qwen2.5-7B layer (qkv, o, gate_up, down), `test_cuda_wq bench
 * int4 fp8 int8`: the decode GEMV takes 56 / 82 / 99 us at 1-8 rows on an
 * H200 (int4 / fp8 / int8; kernels/PERF.md v30).  On an H100 (PERF.md v34)
 * the tile kernel takes int4 85 / 125 / 174 / 347 us at 16 / 32 / 64 / 128
 * rows (fp8 117 / 145 / 193 / 384), against the mma kernel's 137 / 199 /
 * 446 / 1,282 and dequantize + the bf16 GEMM's ~390-430; at 64 rows the
 * backend's bf16 matmul takes 188, so AWQ batch 64 decodes faster than
 * bf16.  The mma kernel stays for the layouts the tile kernel does not
 * take, up to rl_wq_max_rows = 32 there (past it dequantize + bf16 wins):
 * its blocks re-read all of x from L2 and hold 124-255 registers (PERF.md
 * v17, v22).  A first tiled kernel (PERF.md v26: warps split N, no split of
 * K over blocks, grids of 14-112 blocks on narrow layers) lost to it; the
 * tile kernel's one-wave grids are what changed.
 *
 * rl_wq_gemm_a8 runs the decode GEMV on FP8 layers as W8A8 (A8): each block
 * first rounds x to e4m3 in shared memory per row and 128 columns, as the
 * prefill's quantizer does (cuda_fp8.cuh), and the lane's weight bytes go
 * into mma.sync m16n8k32 e4m3 as they are: a unit's columns 8q .. 8q + 7
 * are k rows 4q .. 4q + 3 and 16 + 4q .. of the mma in both operands, so
 * neither is shuffled, and nothing is dequantized (kernels/PERF.md v49).
 *
 * rl_wq_gemm's kernels launch with PDL where the caller says so (the
 * backend's arch.pdl): each starts its first weight loads before it waits for
 * x, the kernel before's output (cuda_launch.cuh).
 *
 * Errors: rl_wq_upload fills the caller's message (the loader names the
 * tensor around it); rl_wq_gemm and rl_wq_dequant run inside a step and
 * return an rlErrorCode (RL_EINPUT for arguments the weights cannot take,
 * RL_EDEVICE for a failed launch) that the backend records as its first
 * failure; nothing here aborts. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <atomic>
#include <type_traits>

#include "kernels/cuda/cuda_fp8.cuh"
#include "kernels/cuda/cuda_launch.cuh"
#include "kernels/cuda/cuda_mma.cuh"
#include "kernels/cuda/cuda_types.cuh"
#include "kernels/cuda/wq_internal.h"

extern "C" {
#include "kernels/error.h"
}

#define WQ_WARPS 8

template <typename T> struct WqArgs {
    const uint8_t *qw;
    const float *scale;
    const uint8_t *zero;
    const int32_t *perm;
    const T *x;
    T *y;
    const T *bias;   /* added to y in fp32 before its one rounding, or NULL */
    const float *in_scale;   /* the decode GEMV's A8: x's static scale (device), or NULL */
    int ldx, ldy, m, n, k;
    int ntiles, nchunks, ngroups, group_units, scale_rows, gshift;
    int cshift;   /* a chunk's group is c >> cshift (groups of 2^i whole chunks or all of K), else -1 */
    /* The tile kernel's split of K over blocks: chunks per split and the
     * splits' fp32 sums [split][m][ntiles * 8]. */
    int csplit;
    float *part;
    /* The decode GEMV's counter of strips past each block's first two
     * (rlWq's strips), for its COUNTER kernel (wq_gemv_grid). */
    unsigned *strips;
};

/* Where rl_wq_gemm's kernels go: the caller's stream, with programmatic
 * dependent launch or not (cuda_launch.cuh), the device's SMs (asked once
 * a call) and the launch's error. */
struct WqLaunch {
    cudaStream_t s;
    int pdl;
    int sms;   /* the device's SMs, which the GEMV and tile grids fill */
    cudaError_t err;
    template <typename T>
    void operator()(void (*kernel)(WqArgs<T>), dim3 grid, int threads, size_t shm, const WqArgs<T> &a) {
        err = cuda_launch_ex(s, pdl, kernel, grid, dim3(threads), shm, a);
    }
};

/* The weight stream: read once, so kept out of L1. */
static __device__ __forceinline__ uint4 wq_ld_stream(const uint8_t *p) {
    uint4 r;
    asm("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];\n"
        : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
        : "l"(p));
    return r;
}

static __device__ __forceinline__ uint32_t wq_sub2(uint32_t a, uint32_t b, f16) {
    __half2 r = __hsub2(*(__half2 *)&a, *(__half2 *)&b);
    return *(uint32_t *)&r;
}
static __device__ __forceinline__ uint32_t wq_sub2(uint32_t a, uint32_t b, bf16) {
    __nv_bfloat162 r = __hsub2(*(__nv_bfloat162 *)&a, *(__nv_bfloat162 *)&b);
    return *(uint32_t *)&r;
}
static __device__ __forceinline__ uint32_t wq_mul2(uint32_t a, uint32_t b, bf16) {
    __nv_bfloat162 r = __hmul2(*(__nv_bfloat162 *)&a, *(__nv_bfloat162 *)&b);
    return *(uint32_t *)&r;
}
static __device__ __forceinline__ uint32_t wq_mul2(uint32_t a, uint32_t b, f16) {
    __half2 r = __hmul2(*(__half2 *)&a, *(__half2 *)&b);
    return *(uint32_t *)&r;
}
static __device__ __forceinline__ uint32_t wq_pack2(float lo, float hi, bf16) {
    __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
    return *(uint32_t *)&h;
}

/* e4m3 bits -> its value times 2^-120 as fp32 bits (exact, subnormals too). */
static __device__ __forceinline__ float wq_e4m3_scaled(uint32_t b) {
    return __uint_as_float(((b & 0x7fu) << 20) | ((b & 0x80u) << 24));
}
static __device__ __forceinline__ float wq_e4m3(uint32_t b) {
    return wq_e4m3_scaled(b) * 0x1p120f;
}

/* Per type and element type: what a group's zero point becomes for the
 * subtraction (zz), the four B registers of unit u of a lane's 16 bytes,
 * and the factor the kernel's B values are short of (folded into scales).
 * Integer formats whose values fit the element type as offset + q (a magic
 * exponent, no arithmetic) also give those raw registers (raw, with
 * zfold = true): the decode GEMV multiplies them and takes (offset + z)
 * times the group's sum of x off once per group instead of subtracting z
 * from every pair. */
template <typename T, int TY> struct WqDeq;

template <typename T> struct WqDeq<T, RL_WQ_INT4> {
    static constexpr float fold = 1.0f;
    static constexpr bool zfold = true;
    /* 1024 + q in fp16, 128 + q in bf16 */
    static constexpr uint32_t magic = std::is_same<T, f16>::value ? 0x64006400u : 0x43004300u;
    static constexpr float offset = std::is_same<T, f16>::value ? 1024.0f : 128.0f;
    static __device__ __forceinline__ uint32_t zz(uint32_t z) { return magic | z * 0x10001u; }
    static __device__ __forceinline__ void raw(const uint32_t *w, int u, uint32_t *b) {
        uint32_t word = w[u];
#pragma unroll
        for (int p = 0; p < 4; p++) b[p] = ((word >> (4 * p)) & 0x000f000fu) | magic;
    }
    static __device__ __forceinline__ void unit(const uint32_t *w, int u, uint32_t zz, uint32_t *b) {
        raw(w, u, b);
#pragma unroll
        for (int p = 0; p < 4; p++) b[p] = wq_sub2(b[p], zz, T());
    }
};

template <> struct WqDeq<f16, RL_WQ_INT8> {
    static constexpr float fold = 1.0f;
    static constexpr bool zfold = true;
    static constexpr float offset = 1024.0f;
    static __device__ __forceinline__ uint32_t zz(uint32_t z) { return 0x64006400u | z * 0x10001u; }
    static __device__ __forceinline__ void raw(const uint32_t *w, int u, uint32_t *b) {
#pragma unroll
        for (int h = 0; h < 2; h++) {
            uint32_t word = w[2 * u + h];
            b[2 * h] = __byte_perm(word, 0x64646464u, 0x4140);
            b[2 * h + 1] = __byte_perm(word, 0x64646464u, 0x4342);
        }
    }
    static __device__ __forceinline__ void unit(const uint32_t *w, int u, uint32_t zz, uint32_t *b) {
        raw(w, u, b);
#pragma unroll
        for (int p = 0; p < 4; p++) b[p] = wq_sub2(b[p], zz, f16());
    }
};

/* bf16 holds 128 + q only up to q = 127: int8 goes through fp32 (2^23 + q). */
template <> struct WqDeq<bf16, RL_WQ_INT8> {
    static constexpr float fold = 1.0f;
    static constexpr bool zfold = false;
    static __device__ __forceinline__ uint32_t zz(uint32_t z) { return __float_as_uint(8388608.0f + (float)z); }
    static __device__ __forceinline__ void unit(const uint32_t *w, int u, uint32_t zz, uint32_t *b) {
        float zf = __uint_as_float(zz);
#pragma unroll
        for (int h = 0; h < 2; h++) {
            uint32_t word = w[2 * u + h];
            float v[4];
#pragma unroll
            for (int i = 0; i < 4; i++)
                v[i] = __uint_as_float(0x4b000000u | ((word >> (8 * i)) & 0xffu)) - zf;
            b[2 * h] = wq_pack2(v[0], v[1], bf16());
            b[2 * h + 1] = wq_pack2(v[2], v[3], bf16());
        }
    }
};

/* fp8 has no zero points; each 32-bit word's four e4m3 bytes become two
 * 16-bit pairs through the type's own bit move, D::pair. */
template <typename D> struct WqFp8Unit {
    static constexpr bool zfold = false;
    static __device__ __forceinline__ uint32_t zz(uint32_t) { return 0; }
    static __device__ __forceinline__ void unit(const uint32_t *w, int u, uint32_t, uint32_t *b) {
#pragma unroll
        for (int h = 0; h < 2; h++) {
            uint32_t word = w[2 * u + h];
            b[2 * h] = D::pair(__byte_perm(word, 0, 0x1404));
            b[2 * h + 1] = D::pair(__byte_perm(word, 0, 0x3424));
        }
    }
};

/* fp16: the e4m3 bits moved into fp16's fields are the value times 2^-8
 * (exact, subnormals included); the 256 goes into the scale. */
template <> struct WqDeq<f16, RL_WQ_FP8> : WqFp8Unit<WqDeq<f16, RL_WQ_FP8>> {
    static constexpr float fold = 256.0f;
    static __device__ __forceinline__ uint32_t pair(uint32_t t) {
        return ((t >> 1) & 0x3f803f80u) | (t & 0x80008000u);
    }
};

/* bf16: the e4m3 bits moved into bf16's fields are the value times 2^-120
 * (a bf16 subnormal for e4m3's subnormals, exact); one bf16x2 multiply by
 * 2^120 (exact: bf16 multiplies keep subnormal inputs, there is no .ftz)
 * restores it, so no value goes through fp32 (PERF.md v22: fp8 at 1 row
 * 154.5 -> 136.6 us a 7B layer). */
template <> struct WqDeq<bf16, RL_WQ_FP8> : WqFp8Unit<WqDeq<bf16, RL_WQ_FP8>> {
    static constexpr float fold = 1.0f;
    static __device__ __forceinline__ uint32_t pair(uint32_t t) {
        uint32_t r = ((t >> 4) & 0x07f007f0u) | (t & 0x80008000u);
        return wq_mul2(r, 0x7b807b80u, bf16());   /* 2^120 in both halves */
    }
};

/* A lane's 8 activations of row `row` at column col (16 bytes), gathered
 * through perm for act-order; zeros past m or k. */
template <typename T>
static __device__ __forceinline__ uint4 wq_load_x(const WqArgs<T> &a, int row, int col) {
    uint4 v = make_uint4(0, 0, 0, 0);
    if (row >= a.m || col >= a.k) return v;
    const T *xr = a.x + (size_t)row * a.ldx;
    if (!a.perm) return __ldg((const uint4 *)(xr + col));
    const int4 p0 = __ldg((const int4 *)(a.perm + col)), p1 = __ldg((const int4 *)(a.perm + col + 4));
    const unsigned short *xs = (const unsigned short *)xr;
    v.x = (uint32_t)__ldg(xs + p0.x) | (uint32_t)__ldg(xs + p0.y) << 16;
    v.y = (uint32_t)__ldg(xs + p0.z) | (uint32_t)__ldg(xs + p0.w) << 16;
    v.z = (uint32_t)__ldg(xs + p1.x) | (uint32_t)__ldg(xs + p1.y) << 16;
    v.w = (uint32_t)__ldg(xs + p1.z) | (uint32_t)__ldg(xs + p1.w) << 16;
    return v;
}

/* One warp's sums in the mma kernel over NW tiles of 8 output columns and
 * MT tiles of 16 rows: each unit's exact B fragments multiplied into
 * per-group partial sums (tmp), which flush multiplies by the group's fp32
 * scales into acc. */
template <typename T, int TY, int MT, int NW> struct WqSums {
    typedef WqDeq<T, TY> D;
    float acc[MT][NW][4], tmp[MT][NW][4];
    __device__ __forceinline__ WqSums() {
#pragma unroll
        for (int mt = 0; mt < MT; mt++)
#pragma unroll
            for (int nt = 0; nt < NW; nt++)
#pragma unroll
                for (int j = 0; j < 4; j++) acc[mt][nt][j] = tmp[mt][nt][j] = 0.0f;
    }
    /* The zero-point byte of row n0 + g and the scales of columns n0 + 2q,
     * n0 + 2q + 1 of group G, for tiles tile0 ... tile0 + NW - 1. */
    static __device__ __forceinline__ void meta(const WqArgs<T> &a, int G, int tile0, int g, int q,
                                                uint32_t *zz, float (*sc)[2]) {
        const int gc = min(G, a.ngroups - 1), npad = a.ntiles * WQ_TILE_N;
        const float *srow = a.scale + (size_t)gc * a.scale_rows;
#pragma unroll
        for (int nt = 0; nt < NW; nt++) {
            const int n0 = (tile0 + nt) * WQ_TILE_N;
            const bool in = n0 < npad;
            zz[nt] = a.zero && in ? __ldg(a.zero + (size_t)gc * npad + n0 + g) : 0u;
            sc[nt][0] = in ? __ldg(srow + ((n0 + 2 * q) >> a.gshift)) * D::fold : 0.0f;
            sc[nt][1] = in ? __ldg(srow + ((n0 + 2 * q + 1) >> a.gshift)) * D::fold : 0.0f;
        }
    }
    __device__ __forceinline__ void flush(const float (*sc)[2]) {
#pragma unroll
        for (int nt = 0; nt < NW; nt++)
#pragma unroll
            for (int mt = 0; mt < MT; mt++) {
                acc[mt][nt][0] += sc[nt][0] * tmp[mt][nt][0];
                acc[mt][nt][1] += sc[nt][1] * tmp[mt][nt][1];
                acc[mt][nt][2] += sc[nt][0] * tmp[mt][nt][2];
                acc[mt][nt][3] += sc[nt][1] * tmp[mt][nt][3];
#pragma unroll
                for (int j = 0; j < 4; j++) tmp[mt][nt][j] = 0.0f;
            }
    }
    /* Unit u of the tiles' chunk w into tmp; xa: the lane's 8 activations of
     * rows 16 mt + g and 16 mt + 8 + g at the unit's columns 8q ... */
    __device__ __forceinline__ void mul(const uint4 (*xa)[2], const uint4 *w, int u, const uint32_t *zz) {
#pragma unroll
        for (int nt = 0; nt < NW; nt++) {
            uint32_t b[4];
            D::unit((const uint32_t *)&w[nt], u, D::zz(zz[nt]), b);
#pragma unroll
            for (int mt = 0; mt < MT; mt++) {
                const uint32_t a0[4] = {xa[mt][0].x, xa[mt][1].x, xa[mt][0].y, xa[mt][1].y};
                const uint32_t a1[4] = {xa[mt][0].z, xa[mt][1].z, xa[mt][0].w, xa[mt][1].w};
                mma16816(tmp[mt][nt], a0, b[0], b[1], T());
                mma16816(tmp[mt][nt], a1, b[2], b[3], T());
            }
        }
    }
};

template <typename T, int TY, int MT, int NW>
__global__ void __launch_bounds__(WQ_WARPS * 32) wq_gemm_kernel(WqArgs<T> a) {
    typedef WqSums<T, TY, MT, NW> S;
    constexpr int UPC = TY == RL_WQ_INT4 ? 4 : 2;
    /* Chunks in flight per warp: all of a 3584-wide layer's share at decode. */
    constexpr int DEPTH = MT == 1 ? 4 : 2;
    __shared__ float red[WQ_WARPS][MT * NW * 4][32];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, q = lane & 3;
    const int tile0 = blockIdx.x * NW;
    /* Groups of whole chunks (g128 and up, fp8, one group): a chunk's zero
     * points and scales are fetched with its weights; smaller groups fetch
     * them per unit. */
    const bool chunk_meta = a.group_units % UPC == 0;
    pdl_trigger();
    S sums;
    auto unit = [&](const uint4 *w, int u, int col, const uint32_t *zz) {
        uint4 xa[MT][2];
#pragma unroll
        for (int mt = 0; mt < MT; mt++) {
            xa[mt][0] = wq_load_x(a, mt * 16 + g, col);
            xa[mt][1] = wq_load_x(a, mt * 16 + 8 + g, col);
        }
        sums.mul(xa, w, u, zz);
    };

    /* A ring of DEPTH chunks per warp (every WQ_WARPS-th chunk of K). */
    uint4 wb[DEPTH][NW];
    uint32_t zb[DEPTH][NW];
    float sb[DEPTH][NW][2];
    auto fetch = [&](int c, uint4 *w, uint32_t *zz, float (*sc)[2]) {
#pragma unroll
        for (int nt = 0; nt < NW; nt++) {
            const int tile = tile0 + nt;
            w[nt] = tile < a.ntiles
                        ? wq_ld_stream(a.qw + (((size_t)tile * a.nchunks + c) * 32 + lane) *
                                                  WQ_LANE_BYTES)
                        : make_uint4(0, 0, 0, 0);
        }
        if (chunk_meta) S::meta(a, c * UPC / a.group_units, tile0, g, q, zz, sc);
    };
#pragma unroll
    for (int d = 0; d < DEPTH; d++)
        if (warp + d * WQ_WARPS < a.nchunks) fetch(warp + d * WQ_WARPS, wb[d], zb[d], sb[d]);
    pdl_wait();   /* x is the kernel before's output; the weights were not */
    for (int c0 = warp; c0 < a.nchunks; c0 += DEPTH * WQ_WARPS) {
#pragma unroll
        for (int d = 0; d < DEPTH; d++) {
            const int c = c0 + d * WQ_WARPS;
            if (c >= a.nchunks) break;
            const int U0 = c * UPC;
            if (chunk_meta) {
#pragma unroll
                for (int u = 0; u < UPC; u++) unit(wb[d], u, (U0 + u) * WQ_UNIT_K + 8 * q, zb[d]);
                sums.flush(sb[d]);
            } else {
                /* Groups of 32 or 64 columns: the unit's group's metadata. */
#pragma unroll
                for (int u = 0; u < UPC; u++) {
                    uint32_t zz[NW];
                    float sc[NW][2];
                    S::meta(a, (U0 + u) / a.group_units, tile0, g, q, zz, sc);
                    unit(wb[d], u, (U0 + u) * WQ_UNIT_K + 8 * q, zz);
                    if ((U0 + u + 1) % a.group_units == 0 || u == UPC - 1) sums.flush(sc);
                }
            }
            if (c + DEPTH * WQ_WARPS < a.nchunks) fetch(c + DEPTH * WQ_WARPS, wb[d], zb[d], sb[d]);
        }
    }

#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int nt = 0; nt < NW; nt++)
#pragma unroll
            for (int j = 0; j < 4; j++) red[warp][(mt * NW + nt) * 4 + j][lane] = sums.acc[mt][nt][j];
    __syncthreads();
    for (int i = threadIdx.x; i < MT * NW * 4 * 32; i += WQ_WARPS * 32) {
        const int reg = i >> 5, ln = i & 31;
        float s = 0.0f;
#pragma unroll
        for (int w = 0; w < WQ_WARPS; w++) s += red[w][reg][ln];
        const int mt = reg / (NW * 4), nt = (reg >> 2) % NW, j = reg & 3;
        const int row = mt * 16 + (ln >> 2) + (j >= 2 ? 8 : 0);
        const int col = (tile0 + nt) * WQ_TILE_N + 2 * (ln & 3) + (j & 1);
        if (row < a.m && col < a.n) st(a.y + (size_t)row * a.ldy + col, a.bias ? s + ld(a.bias + col) : s);
    }
}

/* The decode GEMV, 1-8 rows, on the packed layout above.  What bounds it is
 * instructions per weight byte, not loads in flight (kernels/PERF.md v29: the
 * kernel before this one spent 248 warp instructions on each 512-byte chunk,
 * which caps it near 2 TB/s however many loads fly), so each chunk's work is
 * shared as far as it goes:
 * - a warp works on a strip of NT tiles (8 NT output columns) at once: one
 *   chunk index of all NT tiles per step, so the step's activations (4 x 16
 *   bytes a lane), loop and address arithmetic serve NT chunks;
 * - the weights are the mma's A operand, two tiles' B-layout registers
 *   making one 16-row A fragment (rows g and g + 8 are row g of each tile),
 *   and x its B operand (column g = row g of x): one m16n8k16 covers 16
 *   output columns and up to 8 rows of x, half the mmas of x-as-A, and none
 *   of the 8 rows is padding when 8 rows come;
 * - a chunk's zero points and scales are loaded into registers with its
 *   weights (one byte and one float per tile a lane: the lane holds one
 *   output column of each tile) and applied to the fp32 sums once per group;
 *   int4 (and int8 under fp16) multiplies the raw offset + q values, and
 *   (offset + z) times the group's sum of x, which one more mma over an A of
 *   ones gives every lane for all its tiles, comes off at the flush, instead
 *   of a subtraction for every pair of weights;
 * - output rows are padded to whole strips (wq_layout), so a strip's tiles,
 *   zero points and scales sit at constant strides from its first.
 * A block of W warps (4-16) owns a strip at a time and its warps take every
 * W-th chunk of K, so a narrow layer still puts enough warps on the SMs; a
 * wide one runs one wave of blocks over the strips: each block its own
 * first two (blockIdx.x and one wave on), then, in the COUNTER kernel,
 * whichever strip a counter (a.strips) hands it next, claimed a strip ahead.  Under PDL the
 * blocks that fit beside the kernel before start early and the rest as it
 * retires, so fixed shares left the late blocks' last strips as a tail
 * with few loads in flight (PERF.md v44, v45); taken from the counter, the
 * early blocks take more.  A strip's sums are its warps' in a fixed order
 * whichever block runs it, so the result is the same.  Each warp
 * has two buffers in fixed registers that take turns (PERF.md v22: moves
 * between ring slots wait on their loads): while it works on one item the
 * next is in flight in the other, and the item after is loaded as soon as a
 * buffer is free, running on into the block's next strip, so loads stay in
 * flight across a strip's reduction.  The math is the mma kernel's: exact
 * fragments (q - z, e4m3), fp32 accumulation, fp32 scales once per group,
 * the warps' sums met in shared memory in a fixed order, one rounding. */
#define WQG_MAX_ROWS 8
#define WQG_MAX_WARPS 16

/* A8G: 0, W8A16; else W8A8 (rl_wq_gemm_a8), x's 128-column groups a
 * half-warp loads at once when it rounds x (1, or 4 behind
 * RL_WQ_A8_GROUPS=4 until measured: PERF.md v50). */
template <typename T, int TY, int NT, bool PLAIN, bool COUNTER, int A8G>
__global__ void __launch_bounds__(WQG_MAX_WARPS * 32) wq_gemv_kernel(WqArgs<T> a) {
    typedef WqDeq<T, TY> D;
    constexpr int UPC = TY == RL_WQ_INT4 ? 4 : 2, NP = NT / 2;
    constexpr bool ZERO = TY != RL_WQ_FP8, FOLD = D::zfold, A8 = A8G > 0;
    static_assert(!A8 || (TY == RL_WQ_FP8 && PLAIN && !COUNTER), "A8: FP8 layers, whole-chunk groups");
    /* What the B values are short of, folded into the scales: e4m3 as it is
     * under A8. */
    constexpr float SFOLD = A8 ? 1.0f : D::fold;
    /* bf16 / fp16 1.0 in both halves: the A operand that sums x. */
    constexpr uint32_t ONE2 = std::is_same<T, f16>::value ? 0x3c003c00u : 0x3f803f80u;
    /* The warps' sums [warp][NP * 4][32]; under A8 in dynamic shared memory
     * (sized by the block's warps), then x in e4m3 and its scales
     * (wq_a8_smem). */
    extern __shared__ __align__(16) float wq_dyn[];
    __shared__ float red_fixed[A8 ? 1 : WQG_MAX_WARPS][NP * 4][32];
    float (*red)[NP * 4][32] = A8 ? (float (*)[NP * 4][32])wq_dyn : red_fixed;
    const int nwarps = blockDim.x >> 5, warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int g = lane >> 2;
    const unsigned npad = (unsigned)a.ntiles * WQ_TILE_N, nstrips = (unsigned)a.ntiles / NT;
    const unsigned tstride = (unsigned)a.nchunks * 32u;   /* uint4s from a tile to the next */
    const bool busy = warp < a.nchunks;
    /* Row g of x, B's column g: rows past m reread row m - 1 (no predicate,
     * no zeros to move); their sums are never stored. */
    const T *xr = a.x + (size_t)min(g, a.m - 1) * a.ldx;
    const uint4 *qw = (const uint4 *)a.qw + lane;

    /* Item (s, c): chunk c of the NT tiles of strip s (ntiles is a multiple
     * of 4: wq_layout), and with PLAIN its group's zero points and scales:
     * the lane's output column of each tile is row g of it. */
    struct Buf {
        uint4 w[NT];
        uint32_t z[NT];
        float sc[NT];
    };
    /* Row g's zero point (the byte) and scale of the strip's tile i, group G. */
    auto meta = [&](unsigned s, unsigned G, uint32_t *z, float *sc) {
        const unsigned row0 = s * (NT * WQ_TILE_N) + g;
        if constexpr (ZERO) {
            const uint8_t *zr = a.zero + G * npad + row0;
#pragma unroll
            for (int i = 0; i < NT; i++) z[i] = __ldg(zr + WQ_TILE_N * i);
        } else {
#pragma unroll
            for (int i = 0; i < NT; i++) z[i] = 0;
        }
        const float *sr = a.scale + G * (unsigned)a.scale_rows;
#pragma unroll
        for (int i = 0; i < NT; i++) sc[i] = __ldg(sr + ((row0 + WQ_TILE_N * i) >> a.gshift)) * SFOLD;
    };
    auto fetch = [&](Buf &b, unsigned s, unsigned c) {
        const uint4 *p = qw + (s * NT * (unsigned)a.nchunks + c) * 32u;
#pragma unroll
        for (int i = 0; i < NT; i++) b.w[i] = wq_ld_stream((const uint8_t *)(p + i * tstride));
        if constexpr (PLAIN) meta(s, c >> a.cshift, b.z, b.sc);
    };
    /* A8: x's e4m3 copy in shared memory, its rows xs bytes apart (k
     * padded to whole chunks, then 32 bytes, so a half-warp's rows fall in
     * different banks), and the rows' scales per 128 columns. */
    const int xs = a.nchunks * 64 + 32, gk = (a.k + 127) >> 7;
    const uint8_t *xq = (const uint8_t *)(wq_dyn + nwarps * NP * 4 * 32);
    const float *xsc = (const float *)(xq + (size_t)a.m * xs);
    /* Row g of x at the lane's 8 columns of each unit of chunk c (zeros
     * past k; gathered through perm for act-order). */
    auto load_x = [&](int c, uint4 *x) {
        const int col0 = wq_lane_col(UPC, c, lane, 0);
        if constexpr (A8) {
            /* A unit's 8 columns 8q .. 8q + 7 of row g as B's two registers:
             * the mma's k rows 4q .. 4q + 3 and 16 + 4q .. are the unit's
             * columns 8q .. and 8q + 4 .., as A's are (unit below). */
            const uint8_t *xr8 = xq + min(g, a.m - 1) * xs + col0;
#pragma unroll
            for (int u = 0; u < UPC; u++) {
                const uint2 v = *(const uint2 *)(xr8 + WQ_UNIT_K * u);
                x[u] = make_uint4(v.x, v.y, 0, 0);
            }
        } else if (!PLAIN) {
#pragma unroll
            for (int u = 0; u < UPC; u++) x[u] = wq_load_x(a, g, col0 + WQ_UNIT_K * u);
        } else if ((c + 1) * UPC * WQ_UNIT_K <= a.k) {
#pragma unroll
            for (int u = 0; u < UPC; u++) x[u] = __ldg((const uint4 *)(xr + col0 + WQ_UNIT_K * u));
        } else {
#pragma unroll
            for (int u = 0; u < UPC; u++)
                x[u] = col0 + WQ_UNIT_K * u < a.k ? __ldg((const uint4 *)(xr + col0 + WQ_UNIT_K * u))
                                                  : make_uint4(0, 0, 0, 0);
        }
    };
    /* The group's running sums: tmp[p] for tiles 2p (c0, c1: x rows 2q,
     * 2q + 1) and 2p + 1 (c2, c3), and with FOLD xs, the sum of x over the
     * group's columns (c0, c1: x rows 2q, 2q + 1). */
    struct Sums {
        float tmp[NP][4], xs[4];
    };
    /* Unit u of the strip's weights in b against x into the group's sums:
     * with FOLD the raw offset + q values, else q - z. */
    auto unit = [&](const Buf &b, const uint4 &x, int u, const uint32_t *z, Sums &S) {
#pragma unroll
        for (int p = 0; p < NP; p++) {
            if constexpr (A8) {
                /* The lane's e4m3 bytes as they are: words 2u and 2u + 1 hold
                 * unit u's columns 8q .. 8q + 3 and 8q + 4 .. 8q + 7 of row g
                 * (tile 2p: A's row g, tile 2p + 1: row g + 8). */
                const uint32_t *w0 = (const uint32_t *)&b.w[2 * p], *w1 = (const uint32_t *)&b.w[2 * p + 1];
                const uint32_t a8[4] = {w0[2 * u], w1[2 * u], w0[2 * u + 1], w1[2 * u + 1]};
                mma_e4m3_16832(S.tmp[p], a8, x.x, x.y);
                continue;
            }
            uint32_t w0[4], w1[4];
            if constexpr (FOLD) {
                D::raw((const uint32_t *)&b.w[2 * p], u, w0);
                D::raw((const uint32_t *)&b.w[2 * p + 1], u, w1);
            } else {
                D::unit((const uint32_t *)&b.w[2 * p], u, D::zz(z[2 * p]), w0);
                D::unit((const uint32_t *)&b.w[2 * p + 1], u, D::zz(z[2 * p + 1]), w1);
            }
            const uint32_t a0[4] = {w0[0], w1[0], w0[1], w1[1]}, a1[4] = {w0[2], w1[2], w0[3], w1[3]};
            mma16816(S.tmp[p], a0, x.x, x.y, T());
            mma16816(S.tmp[p], a1, x.z, x.w, T());
        }
        if constexpr (FOLD) {
            const uint32_t ones[4] = {ONE2, ONE2, ONE2, ONE2};
            mma16816(S.xs, ones, x.x, x.y, T());
            mma16816(S.xs, ones, x.z, x.w, T());
        }
    };
    /* The group's sums times the tiles' scales into acc (with FOLD less
     * (offset + z) times the group's sum of x), and zeroed. */
    auto flush = [&](Sums &S, const uint32_t *z, const float *sc, float (*acc)[4], const float *sx) {
#pragma unroll
        for (int p = 0; p < NP; p++)
#pragma unroll
            for (int j = 0; j < 4; j++) {
                const int i = 2 * p + (j >> 1);
                float v = S.tmp[p][j];
                if constexpr (FOLD) v -= ((float)z[i] + D::offset) * S.xs[j & 1];
                if constexpr (A8) v *= sx[j & 1];
                acc[p][j] += sc[i] * v;
                S.tmp[p][j] = 0.0f;
            }
        if constexpr (FOLD) S.xs[0] = S.xs[1] = S.xs[2] = S.xs[3] = 0.0f;
    };
    /* Chunk c of strip s, whose weights are in b, into acc. */
    auto chunk = [&](const Buf &b, unsigned s, int c, float (*acc)[4]) {
        Sums S = {};
        uint4 x[UPC];
        load_x(c, x);
        if constexpr (PLAIN) {
            /* A8: the scales of x rows 2q and 2q + 1 (C's columns) over the
             * chunk's 128 columns. */
            float sx[2] = {1.0f, 1.0f};
            if constexpr (A8)
#pragma unroll
                for (int t = 0; t < 2; t++) sx[t] = xsc[min(2 * (lane & 3) + t, a.m - 1) * gk + (c >> 1)];
#pragma unroll
            for (int u = 0; u < UPC; u++) unit(b, x[u], u, b.z, S);
            flush(S, b.z, b.sc, acc, sx);
        } else {
            /* Act-order, or groups of 32 or 64 columns or straddling chunks:
             * each unit's group's metadata. */
#pragma unroll
            for (int u = 0; u < UPC; u++) {
                const int U = c * UPC + u, G = min(U / a.group_units, a.ngroups - 1);
                uint32_t z[NT];
                float sc[NT];
                meta(s, (unsigned)G, z, sc);
                unit(b, x[u], u, z, S);
                if ((U + 1) % a.group_units == 0 || u == UPC - 1) flush(S, z, sc, acc, nullptr);
            }
        }
    };
    /* The block's strip now and, with COUNTER, its next (nchunks >= 2 W:
     * an item two ahead is at most one strip on, the one the block knows). */
    unsigned s = blockIdx.x, nxt = blockIdx.x + gridDim.x;
    __shared__ unsigned after;   /* COUNTER: the strip after nxt, for every warp */
    /* The warp's item after (s2, c): this strip's next chunk, else the first
     * of the block's next strip. */
    auto advance = [&](unsigned &s2, int &c) {
        c += nwarps;
        if (c >= a.nchunks) {
            c = warp;
            if constexpr (COUNTER) s2 = s2 == s ? nxt : nstrips;
            else s2 += gridDim.x;
        }
    };

    pdl_trigger();
    Buf ba, bb;
    if (busy && s < nstrips) {
        unsigned s1 = s;
        int c1 = warp;
        fetch(ba, s1, c1);
        advance(s1, c1);
        if (s1 < nstrips) fetch(bb, s1, c1);
    }
    pdl_wait();   /* x is the kernel before's output; the weights were not */
    if constexpr (A8) {
        /* x rounded to e4m3 once a block, as the prefill's quantizer
         * (qlinear.cu) rounds it: a half-warp a (row, 128 columns), the
         * scale from the group's absolute maximum or the static in_scale;
         * zeros past k. */
        uint8_t *xw = (uint8_t *)xq;
        float *sw = (float *)xsc;
        const int hl = threadIdx.x & 15, nh = blockDim.x >> 4, total = a.m * gk;
        /* A8G groups a half-warp a round, every load issued before any
         * value is used. */
        for (int base = 0; base < total; base += A8G * nh) {
            float v[A8G][8];
#pragma unroll
            for (int j = 0; j < A8G; j++) {
                const int gi = base + j * nh + (threadIdx.x >> 4), row = gi / gk, col = (gi - row * gk) * 128 + 8 * hl;
#pragma unroll
                for (int i = 0; i < 8; i++) v[j][i] = 0;
                if (gi < total && col < a.k) {
                    const uint4 raw = __ldg((const uint4 *)(a.x + (size_t)row * a.ldx + col));
                    const T *e = (const T *)&raw;
#pragma unroll
                    for (int i = 0; i < 8; i++) v[j][i] = ld(e + i);
                }
            }
#pragma unroll
            for (int j = 0; j < A8G; j++) {
                const int gi = base + j * nh + (threadIdx.x >> 4), row = gi / gk, col = (gi - row * gk) * 128 + 8 * hl;
                const bool live = gi < total;   /* alike over each half-warp; the shuffles take all */
                float inv;
                const float s = fp8_group128_scale(v[j], a.in_scale, &inv);
                if (live && hl == 0) sw[gi] = s;
                if (live && col < xs - 32) *(uint2 *)(xw + (size_t)row * xs + col) = fp8_e4m3x8(v[j], inv);
            }
        }
        __syncthreads();
    }
    bool in_b = false;   /* the warp's current item is in bb */
    while (s < nstrips) {
        /* The strip after nxt, asked for now and read at the strip's end. */
        unsigned claim = 0;
        if (COUNTER && threadIdx.x == 0 && nxt < nstrips) claim = atomicAdd(a.strips, 1u);
        float acc[NP][4] = {};
#pragma unroll 1
        for (int c = busy ? warp : a.nchunks; c < a.nchunks; c += nwarps) {
            unsigned s2 = s;
            int c2 = c;
            advance(s2, c2);
            advance(s2, c2);
            if (!in_b) {
                chunk(ba, s, c, acc);
                if (s2 < nstrips) fetch(ba, s2, c2);
            } else {
                chunk(bb, s, c, acc);
                if (s2 < nstrips) fetch(bb, s2, c2);
            }
            in_b = !in_b;
        }
#pragma unroll
        for (int p = 0; p < NP; p++)
#pragma unroll
            for (int j = 0; j < 4; j++) red[warp][4 * p + j][lane] = acc[p][j];
        if (COUNTER && threadIdx.x == 0) after = nxt < nstrips ? 2 * gridDim.x + claim : nstrips;
        __syncthreads();
        for (int i = threadIdx.x; i < NP * 4 * 32; i += blockDim.x) {
            const int reg = i >> 5, ln = i & 31, j = reg & 3;
            const int row = 2 * (ln & 3) + (j & 1);
            const int col = ((int)s * NT + 2 * (reg >> 2) + (j >> 1)) * WQ_TILE_N + (ln >> 2);
            if (row < a.m && col < a.n) {
                float sum = 0.0f;
                for (int wi = 0; wi < nwarps; wi++) sum += red[wi][reg][ln];
                st(a.y + (size_t)row * a.ldy + col, a.bias ? sum + ld(a.bias + col) : sum);
            }
        }
        const unsigned later = COUNTER ? after : 0;
        __syncthreads();
        if constexpr (COUNTER) s = nxt, nxt = later;
        else s += gridDim.x;
    }
    /* The last block out sets the counter back to zero for the next launch
     * (every block's claims come before its count: the fence). */
    if (COUNTER && threadIdx.x == 0) {
        __threadfence();
        if (atomicAdd(a.strips + 1, 1u) == gridDim.x - 1) a.strips[0] = 0, a.strips[1] = 0;
    }
}

/* The tile kernel, 9-128 rows of layers whose groups are whole chunks (as
 * the GEMV's PLAIN), where the decode GEMV's one column group would read
 * the weights again for every 8 rows and the mma kernel reads x from L2
 * again in every block.  A block of W warps (8-12, chosen per layer) owns
 * 4W tiles (32W output columns) and a split of the chunks along K, up to
 * 64 rows a launch:
 * - each chunk's x (8R rows) and the block's weights stream into shared
 *   memory by cp.async, three stages deep where 99 KiB holds them (the
 *   Ampere / Ada limit), else two; x's 16-byte pieces of odd rows are
 *   swapped by halves, so the two rows a quarter-warp reads sit in
 *   different banks;
 * - each warp owns four tiles, two mma A operands as in the GEMV (rows g
 *   and g + 8 are row g of two tiles), and multiplies them against all the
 *   block's rows, 8 at a time as the B operand: a dequantized fragment
 *   feeds R mma.sync and an x fragment four;
 * - the scale is folded into the fragment (q - z and e4m3 exact, times the
 *   scale rounded to T, one rounding: Marlin's numerics), so the fp32 sums
 *   run over all of K in 64 registers a lane with no per-group partials;
 * - the grid is one wave: wide layers (gate_up) widen the blocks until
 *   there is one per SM; narrow ones (qkv, o, down) split K over blocks
 *   until the SMs are full, each split leaving fp32 sums in the caller's
 *   workspace for wq_split_sum_kernel to add in split order with the bias
 *   and round once, so the result is the same every run. */
#define WQT_TPW 4                 /* tiles a warp: two A operands */
#define WQT_MAX_WARPS 12
#define WQT_ROWS 64               /* rows a launch: 8 R at R = 8 */
#define WQT_SMEM (99 << 10)       /* the most shared memory a block takes */

/* One stage: x's chunk [8R][CK] of T, then the block's weights [4W][32 lanes]. */
template <typename T, int TY, int R> struct WqtGeom {
    static constexpr int CK = (TY == RL_WQ_INT4 ? 4 : 2) * WQ_UNIT_K;   /* a chunk's columns */
    static constexpr size_t X_BYTES = (size_t)8 * R * CK * sizeof(T);
    static size_t __host__ __device__ stage_bytes(int w) { return X_BYTES + (size_t)WQT_TPW * w * 32 * 16; }
    static int __host__ __device__ stages(int w) { return 3 * stage_bytes(w) <= WQT_SMEM ? 3 : 2; }
    static size_t __host__ __device__ smem(int w) { return stages(w) * stage_bytes(w); }
};

template <typename T, int TY, int R>
__global__ void __launch_bounds__(WQT_MAX_WARPS * 32, 1) wq_tile_kernel(WqArgs<T> a) {
    typedef WqDeq<T, TY> D;
    typedef WqtGeom<T, TY, R> Geom;
    constexpr int UPC = TY == RL_WQ_INT4 ? 4 : 2, CK = Geom::CK, PIECES = CK / 8;
    extern __shared__ __align__(16) unsigned char wqt_smem[];
    const int nw = blockDim.x >> 5, tiles = WQT_TPW * nw;
    const size_t stage_bytes = Geom::stage_bytes(nw);
    const int nstages = Geom::stages(nw);
    auto xs = [&](int st) { return (T(*)[CK])(wqt_smem + st * stage_bytes); };
    auto ws = [&](int st) { return (uint4(*)[32])(wqt_smem + st * stage_bytes + Geom::X_BYTES); };
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, q = lane & 3;
    const int tb = blockIdx.x * tiles, nbt = min(tiles, a.ntiles - tb);
    const int t0 = tb + WQT_TPW * warp;
    const bool busy = t0 < a.ntiles;   /* ntiles is a multiple of 4: a warp's tiles all exist or none */
    const int c0 = blockIdx.y * a.csplit, nc = min(a.nchunks - c0, a.csplit);
    const unsigned npad = (unsigned)a.ntiles * WQ_TILE_N;

    /* The block's weights of chunk c into stage st (independent of the
     * kernel before): thread (warp, lane) copies that lane's 16 bytes of
     * tiles warp, warp + W, ..., so only the chunk moves its addresses. */
    const uint4 *wsrc = (const uint4 *)a.qw + (size_t)(tb + warp) * a.nchunks * 32 + lane;
    const size_t wstep = (size_t)nw * a.nchunks * 32;
    auto load_w = [&](int st, int c) {
        uint4(*w)[32] = ws(st);
#pragma unroll
        for (int i = 0; i < WQT_TPW; i++)
            if (warp + nw * i < nbt) cp_async16(&w[warp + nw * i][lane], wsrc + (size_t)c * 32 + i * wstep, true);
    };
    /* x's chunk c into stage st: thread (row xr, piece xp) copies rows xr,
     * xr + the rows a pass covers, ...; rows past m read row m - 1 again
     * (their sums are never stored), columns past k are zeros. */
    const int xp = threadIdx.x % PIECES, xr = threadIdx.x / PIECES, xrows = blockDim.x / PIECES;
    auto load_x = [&](int st, int c) {
        T(*x)[CK] = xs(st);
        const int col = c * CK + 8 * xp;
        const bool valid = col < a.k;
        for (int r = xr; r < 8 * R; r += xrows) {
            const T *src = a.x + (size_t)min(r, a.m - 1) * a.ldx + (valid ? col : 0);
            cp_async16(&x[r][8 * (xp ^ ((r & 1) << 2))], src, valid);
        }
    };
    /* Chunk c's zero point (as D::zz) and scale (times D::fold, rounded to
     * T in both halves) of the lane's output column of each tile: row g. */
    uint32_t zz[WQT_TPW], s2[WQT_TPW];
    auto meta = [&](int c) {
        const unsigned G = min((unsigned)c >> a.cshift, (unsigned)a.ngroups - 1);
#pragma unroll
        for (int i = 0; i < WQT_TPW; i++) {
            const unsigned row = (unsigned)(t0 + i) * WQ_TILE_N + g;
            zz[i] = D::zz(TY != RL_WQ_FP8 ? __ldg(a.zero + G * npad + row) : 0u);
            const float sc = __ldg(a.scale + G * (unsigned)a.scale_rows + (row >> a.gshift)) * D::fold;
            s2[i] = pack2(sc, sc, T());
        }
    };

    pdl_trigger();
    load_w(0, c0);
    if (nstages == 3 && nc > 1) load_w(1, c0 + 1);
    if (busy) meta(c0);
    pdl_wait();   /* x is the kernel before's output; the weights were not */
    load_x(0, c0);
    cp_async_commit();
    if (nstages == 3) {
        if (nc > 1) load_x(1, c0 + 1);
        cp_async_commit();
    }

    float acc[2][R][4] = {};
    for (int j = 0; j < nc; j++) {
        /* Stage j landed for every warp, and the stage the next loads go
         * to (chunk j - 1's) is free. */
        if (nstages == 3) cp_async_wait<1>();
        else cp_async_wait<0>();
        __syncthreads();
        const int ahead = j + nstages - 1;
        if (ahead < nc) {
            load_w(ahead % nstages, c0 + ahead);
            load_x(ahead % nstages, c0 + ahead);
        }
        cp_async_commit();
        if (!busy) continue;
        T(*x)[CK] = xs(j % nstages);
        const uint4 *wrow = &ws(j % nstages)[WQT_TPW * warp][lane];
        /* The tiles' 16 bytes a lane, 8 at a time (half the registers of
         * all 16 held through the chunk). */
        constexpr int UPH = UPC / 2;   /* units in 8 bytes */
        uint2 wv[WQT_TPW];
#pragma unroll
        for (int u = 0; u < UPC; u++) {
            if (u % UPH == 0)
#pragma unroll
                for (int i = 0; i < WQT_TPW; i++) wv[i] = ((const uint2 *)&wrow[32 * i])[u / UPH];
            uint32_t af[2][2][4];   /* [tile pair][k-step of the unit] */
#pragma unroll
            for (int p = 0; p < 2; p++) {
                uint32_t w0[4], w1[4];
                D::unit((const uint32_t *)&wv[2 * p], u % UPH, zz[2 * p], w0);
                D::unit((const uint32_t *)&wv[2 * p + 1], u % UPH, zz[2 * p + 1], w1);
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    w0[e] = wq_mul2(w0[e], s2[2 * p], T());
                    w1[e] = wq_mul2(w1[e], s2[2 * p + 1], T());
                }
                af[p][0][0] = w0[0], af[p][0][1] = w1[0], af[p][0][2] = w0[1], af[p][0][3] = w1[1];
                af[p][1][0] = w0[2], af[p][1][1] = w1[2], af[p][1][2] = w0[3], af[p][1][3] = w1[3];
            }
            /* Two row groups at a time, so the four mma between one into
             * an accumulator and the next into it are independent. */
#pragma unroll
            for (int r = 0; r < R; r += 2) {
                uint4 xv[2];
#pragma unroll
                for (int h = 0; h < 2; h++)
                    xv[h] = *(const uint4 *)&x[8 * (r + h) + g][8 * ((4 * u + q) ^ ((g & 1) << 2))];
#pragma unroll
                for (int h = 0; h < 2; h++)
#pragma unroll
                    for (int p = 0; p < 2; p++) mma16816(acc[p][r + h], af[p][0], xv[h].x, xv[h].y, T());
#pragma unroll
                for (int h = 0; h < 2; h++)
#pragma unroll
                    for (int p = 0; p < 2; p++) mma16816(acc[p][r + h], af[p][1], xv[h].z, xv[h].w, T());
            }
        }
        if (j + 1 < nc) meta(c0 + j + 1);
    }
    cp_async_wait<0>();
    if (!busy) return;

    /* C fragment j of pair p: output column (tile t0 + 2p + j / 2) row g, x
     * row 8 r + 2 q + j % 2; one split writes y, several their fp32 sums. */
    float *part = a.part + (size_t)blockIdx.y * a.m * npad;
#pragma unroll
    for (int p = 0; p < 2; p++)
#pragma unroll
        for (int r = 0; r < R; r++)
#pragma unroll
            for (int j = 0; j < 4; j++) {
                const int row = 8 * r + 2 * q + (j & 1), col = (t0 + 2 * p + (j >> 1)) * WQ_TILE_N + g;
                if (row >= a.m) continue;
                if (gridDim.y > 1) part[(size_t)row * npad + col] = acc[p][r][j];
                else if (col < a.n)
                    st(a.y + (size_t)row * a.ldy + col, a.bias ? acc[p][r][j] + ld(a.bias + col) : acc[p][r][j]);
            }
}

/* The tile kernel's splits summed in split order, the bias added, y rounded
 * once: a thread per 4 columns of a row. */
template <typename T> __global__ void wq_split_sum_kernel(WqArgs<T> a, int splits) {
    pdl_trigger();
    const unsigned npad = (unsigned)a.ntiles * WQ_TILE_N;
    const size_t e = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (e >= (size_t)a.m * (npad / 4)) return;
    const int row = (int)(e / (npad / 4)), c4 = 4 * (int)(e % (npad / 4));
    pdl_wait();
    float4 s = make_float4(0, 0, 0, 0);
    for (int z = 0; z < splits; z++) {
        const float4 v = __ldcg((const float4 *)(a.part + ((size_t)z * a.m + row) * npad + c4));
        s.x += v.x, s.y += v.y, s.z += v.z, s.w += v.w;
    }
    const float sv[4] = {s.x, s.y, s.z, s.w};
#pragma unroll
    for (int i = 0; i < 4; i++)
        if (c4 + i < a.n) st(a.y + (size_t)row * a.ldy + c4 + i, a.bias ? sv[i] + ld(a.bias + c4 + i) : sv[i]);
}

/* One thread per lane's 16 bytes: the values the CPU dequantizes, s * (q - z)
 * or e4m3 * s rounded once to fp32 then to T, at x's column (perm undone);
 * without a permutation each unit's 8 columns are one 16-byte store. */
template <typename T, int TY> __global__ void wq_dequant_kernel(WqArgs<T> a, size_t total) {
    constexpr int UPC = TY == RL_WQ_INT4 ? 4 : 2;
    const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= total) return;
    const int lane = (int)(i & 31);
    const size_t tc = i >> 5;
    const int c = (int)(tc % a.nchunks), row = wq_lane_row((int)(tc / a.nchunks), lane);
    if (row >= a.n) return;
    const uint4 v = *(const uint4 *)(a.qw + i * WQ_LANE_BYTES);
    const uint32_t *w = (const uint32_t *)&v;
    const int npad = a.ntiles * WQ_TILE_N;
    T *dst = a.y + (size_t)row * a.k;
#pragma unroll
    for (int u = 0; u < UPC; u++) {
        const int U = c * UPC + u, col0 = wq_lane_col(UPC, c, lane, 8 * u);
        if (col0 >= a.k) break;
        const int G = min(U / a.group_units, a.ngroups - 1);
        const float s = a.scale[(size_t)G * a.scale_rows + (row >> a.gshift)];
        const int z = TY == RL_WQ_FP8 ? 0 : a.zero[(size_t)G * npad + row];
        T out[8];
#pragma unroll
        for (int e = 0; e < 8; e++) {
            const uint32_t qv = wq_lane_value(w, TY == RL_WQ_INT4, 8 * u + e);
            const float val = TY == RL_WQ_FP8 ? __fmul_rn(wq_e4m3(qv), s) : __fmul_rn(s, (float)((int)qv - z));
            st(&out[e], val);
        }
        if (a.perm)
            for (int e = 0; e < 8; e++) dst[a.perm[col0 + e]] = out[e];
        else
            *(uint4 *)(dst + col0) = *(const uint4 *)out;
    }
}

/* A chunk's group is c >> wq_cshift(w) where groups are 2^i whole chunks
 * or all of K (30); -1 for the rest (act-order is the caller's test). */
static int wq_cshift(const rlWq *w) {
    const int cpg = w->group_units / w->chunk_units;
    int cs = w->group_k >= w->k ? 30 : w->group_units % w->chunk_units || (cpg & (cpg - 1)) ? -1 : 0;
    while (cs >= 0 && cs < 30 && (1 << cs) < cpg) cs++;
    return cs;
}

template <typename T> static WqArgs<T> wq_args(const rlWq *w, const void *x, int ldx, void *y, int ldy,
                                               const void *bias, int m) {
    WqArgs<T> a;
    a.bias = (const T *)bias;
    a.qw = w->qw;
    a.scale = w->scale;
    a.zero = w->zero;
    a.perm = w->perm;
    a.x = (const T *)x;
    a.y = (T *)y;
    a.ldx = ldx;
    a.ldy = ldy;
    a.m = m;
    a.n = w->n;
    a.k = w->k;
    a.ntiles = w->ntiles;
    a.nchunks = w->nchunks;
    a.ngroups = w->ngroups;
    a.group_units = w->group_units;
    a.scale_rows = w->scale_rows;
    a.gshift = w->gshift;
    a.cshift = wq_cshift(w);
    a.csplit = w->nchunks;
    a.part = NULL;
    a.strips = w->strips;
    a.in_scale = NULL;
    return a;
}

/* Output tiles per block for 16 / 32 / 64 / 128 rows, int4 and 8-bit:
 * more tiles reuse each activation load and keep more weight bytes in
 * flight per warp, fewer put more blocks on the SMs.  Measured at the 7B
 * shapes on an H200 (kernels/PERF.md v17).  RL_WQ_NW="a,b,c,d" overrides
 * both rows for benchmarks (1, 2 or 4 up to 32 rows, 1 or 2 at 64, 1 at
 * 128: a block's partial sums fit 32 KiB of shared memory). */
static int wq_nw[2][4] = {{4, 4, 2, 1}, {2, 2, 2, 1}};
static bool wq_nw_parse(void) {
    const char *e = getenv("RL_WQ_NW");
    int v[4];
    if (e && sscanf(e, "%d,%d,%d,%d", &v[0], &v[1], &v[2], &v[3]) == 4)
        for (int i = 0; i < 4; i++)
            if (v[i] == 1 || (v[i] == 2 && i < 3) || (v[i] == 4 && i < 2)) wq_nw[0][i] = wq_nw[1][i] = v[i];
    return true;
}

template <typename T, int TY, int MT>
static void wq_launch_mt(const WqArgs<T> &a, int nw, WqLaunch &L) {
    if (MT == 8 || nw == 1)
        L(wq_gemm_kernel<T, TY, MT, 1>, a.ntiles, WQ_WARPS * 32, 0, a);
    else if (MT == 4 || nw == 2)
        L(wq_gemm_kernel<T, TY, MT, (MT == 8 ? 1 : 2)>, (a.ntiles + 1) / 2, WQ_WARPS * 32, 0, a);
    else
        L(wq_gemm_kernel<T, TY, MT, (MT >= 4 ? 1 : 4)>, (a.ntiles + 3) / 4, WQ_WARPS * 32, 0, a);
}

/* Which kernel runs m rows of w (wq_internal.h says why); the tests and the
 * benchmark force one where it can run (-1: the rule again). */
static std::atomic<int> wq_forced{-1};
static bool wq_plain(const rlWq *w) { return !w->perm && wq_cshift(w) >= 0; }
extern "C" int wq_kernel(const rlWq *w, int m) {
    const int f = wq_forced.load(std::memory_order_relaxed);
    if (f == WQ_KERNEL_MMA || (f == WQ_KERNEL_GEMV && m <= WQG_MAX_ROWS) ||
        (f == WQ_KERNEL_TILE && wq_plain(w)))
        return f;
    if (m > WQG_MAX_ROWS) return wq_plain(w) ? WQ_KERNEL_TILE : WQ_KERNEL_MMA;
    return !w->perm ? WQ_KERNEL_GEMV : WQ_KERNEL_MMA;
}
extern "C" void wq_decode_kernel_force(int kernel) { wq_forced.store(kernel); }

/* Blocks of `threads` threads one SM holds of a kernel, from the occupancy
 * calculator once per process into slot (first asked at upload, outside any
 * graph capture).  A failed query is reported through err (its error taken
 * off the runtime, so no later launch check inherits it) and not cached. */
template <typename K>
static int wq_occupancy(std::atomic<int> &slot, K kernel, int threads, size_t smem, cudaError_t *err) {
    int nb = slot.load(std::memory_order_relaxed);
    if (!nb) {
        cudaError_t e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&nb, kernel, threads, smem);
        if (e != cudaSuccess) {
            cudaGetLastError();
            if (err && *err == cudaSuccess) *err = e;
            return 1;
        }
        if (nb < 1) nb = 1;
        slot.store(nb, std::memory_order_relaxed);
    }
    return nb;
}
/* The GEMV's, for blocks of W warps (A8: as its registers allow; its
 * shared memory, which depends on the rows, is counted in wq_gemv_grid). */
template <typename T, int TY, int NT, bool PLAIN, bool COUNTER = false, int A8G = 0>
static int wq_gemv_occupancy(int w, cudaError_t *err = NULL) {
    static std::atomic<int> occ[WQG_MAX_WARPS + 1];
    return wq_occupancy(occ[w], wq_gemv_kernel<T, TY, NT, PLAIN, COUNTER, A8G>, 32 * w, 0, err);
}

/* The A8 GEMV's dynamic shared memory for blocks of W warps: the warps'
 * sums, then x's m rows in e4m3 and their scales per 128 columns
 * (wq_gemv_kernel). */
#define WQ_A8_X_BYTES (32 << 10)   /* x's part: with 16 warps' sums, the 48 KiB a launch gets unasked */
/* Rows rl_wq_gemm_a8 takes (PERF.md v49, an H100): at one row it beats the
 * W8A16 GEMV (a 7B layer 89.9 against 94.8 us); at eight, rounding x in
 * every block (a half-warp's groups one after another) costs more than
 * the dequantizing it saves (7B qkv, o and gate_up 87.5 against 69.1 us).
 * Until v50's groups loaded four at a time are measured, RL_WQ_A8_GROUPS=4
 * takes them and RL_WQ_A8_ROWS=2..8 more rows (benchmarks, gpu_wq.sh). */
#define WQ_A8_MAX_ROWS 1
/* A benchmark switch's value: the integer in `name` where it lies in lo ..
 * hi, else dflt. */
static int wq_env_int(const char *name, int lo, int hi, int dflt) {
    const char *e = getenv(name);
    const int v = e ? atoi(e) : dflt;
    return v >= lo && v <= hi ? v : dflt;
}
static int wq_a8_groups(void) {
    static const int g = wq_env_int("RL_WQ_A8_GROUPS", 1, 4, 1) == 4 ? 4 : 1;
    return g;
}
static size_t wq_a8_x_bytes(int nchunks, int k, int m) {
    return (size_t)m * ((size_t)nchunks * 64 + 32 + (size_t)(k + 127) / 128 * 4);
}
template <int NT> static size_t wq_a8_smem(int w, int nchunks, int k, int m) {
    return (size_t)w * (NT / 2) * 4 * 32 * sizeof(float) + wq_a8_x_bytes(nchunks, k, m);
}
/* Shared memory an SM holds, asked once. */
static size_t wq_smem_sm(void) {
    static const size_t v = [] {
        int dev = 0, b = 0;
        if (cudaGetDevice(&dev) != cudaSuccess ||
            cudaDeviceGetAttribute(&b, cudaDevAttrMaxSharedMemoryPerMultiprocessor, dev) != cudaSuccess)
            cudaGetLastError();
        return (size_t)b;
    }();
    return v;
}

/* The GEMV's grid: the most warps that one wave of blocks holds, each warp
 * on at least one chunk (W = 4 excepted); with more strips than a wave of
 * 4-warp blocks holds (gate_up), that wave strides over the strips, taking
 * those past each block's first two from the counter (the COUNTER kernel,
 * a few registers more, so the others do without it) where there are such
 * strips and an item two ahead stays within the next strip (nchunks >=
 * 2 W).  The counter waits behind RL_WQ_COUNTER=1 until it is measured
 * against the fixed shares (PERF.md v47, scripts/bench-ab). */
static bool wq_counter_on(void) {
    static const bool on = wq_env_int("RL_WQ_COUNTER", 0, 1, 0) == 1;
    return on;
}
template <typename T, int TY, int NT, bool PLAIN, int A8G>
static void wq_gemv_grid(const WqArgs<T> &a, int sms, WqLaunch &L) {
    const int nstrips = a.ntiles / NT;
    auto smem = [&](int w) { return A8G ? wq_a8_smem<NT>(w, a.nchunks, a.k, a.m) : 0; };
    /* Blocks of W warps an SM holds (A8G: its shared memory too, with the
     * runtime's 1 KiB a block). */
    auto per_sm = [&](int w) {
        int nb = wq_gemv_occupancy<T, TY, NT, PLAIN, false, A8G>(w);
        if (A8G) nb = min(nb, (int)(wq_smem_sm() / (smem(w) + 1024)));
        return max(nb, 1);
    };
    int best_w = 0;
    long best = 0;
    for (int w = 4; w <= WQG_MAX_WARPS && (w == 4 || w <= a.nchunks); w += 2) {
        const long warps = (long)nstrips * min(w, a.nchunks);
        if (nstrips <= (long)sms * per_sm(w) && warps > best) best = warps, best_w = w;
    }
    if (best_w) return L(wq_gemv_kernel<T, TY, NT, PLAIN, false, A8G>, nstrips, 32 * best_w, smem(best_w), a);
    if constexpr (A8G == 0) {
        const int wave = sms * wq_gemv_occupancy<T, TY, NT, PLAIN, true>(4);
        if (wq_counter_on() && a.nchunks >= 2 * 4 && nstrips > 2 * wave)
            return L(wq_gemv_kernel<T, TY, NT, PLAIN, true, 0>, wave, 128, 0, a);
    }
    L(wq_gemv_kernel<T, TY, NT, PLAIN, false, A8G>, sms * per_sm(4), 128, smem(4), a);
}

/* Tiles per strip: 4 where strips of 4 still give every SM several (gate_up:
 * more x reuse, fewer instructions a byte), else 2, so narrow layers spread
 * over more blocks (test_cuda_wq bench on an H200: qkv 6.6 -> 5.9 us with 2,
 * gate_up 31.8 -> 28.3 with 4).  RL_WQ_NT=2|4 forces one for benchmarks.
 * PLAIN: no act-order and groups of 2^i whole chunks (g128 and up, fp8
 * blocks) or all of K, whose metadata comes once a chunk with the weights;
 * the rest (act-order, g32, g64, g96, g384) takes the general kernel. */
template <typename T, int TY> static void wq_gemv_launch(const WqArgs<T> &a, WqLaunch &L, bool a8) {
    static const int forced = wq_env_int("RL_WQ_NT", 2, 4, 0);
    const bool plain = !a.perm && a.cshift >= 0;
    const int sms = L.sms;
    const int nt = forced == 2 || forced == 4 ? forced : a.ntiles / 4 >= 4 * sms ? 4 : 2;
    if constexpr (TY == RL_WQ_FP8)
        if (a8) {
            if (wq_a8_groups() == 4)
                return nt == 2 ? wq_gemv_grid<T, TY, 2, true, 4>(a, sms, L) : wq_gemv_grid<T, TY, 4, true, 4>(a, sms, L);
            return nt == 2 ? wq_gemv_grid<T, TY, 2, true, 1>(a, sms, L) : wq_gemv_grid<T, TY, 4, true, 1>(a, sms, L);
        }
    if (nt == 2) {
        if (plain) wq_gemv_grid<T, TY, 2, true, 0>(a, sms, L);
        else wq_gemv_grid<T, TY, 2, false, 0>(a, sms, L);
    } else {
        if (plain) wq_gemv_grid<T, TY, 4, true, 0>(a, sms, L);
        else wq_gemv_grid<T, TY, 4, false, 0>(a, sms, L);
    }
}

/* The tile kernel's shared memory over the 48 KiB a launch gets unasked:
 * raised once per device, at upload (outside any capture) and before any
 * launch there. */
template <typename T, int TY, int R> static cudaError_t wq_tile_allow_smem(void) {
    typedef WqtGeom<T, TY, R> Geom;
    static std::atomic<unsigned long long> done{0};   /* a bit per device */
    int dev = 0;
    cudaError_t e = cudaGetDevice(&dev);
    if (e != cudaSuccess || (dev < 64 && (done.load() >> dev & 1))) return e;
    size_t most = 0;
    for (int v = 8; v <= WQT_MAX_WARPS; v++) most = Geom::smem(v) > most ? Geom::smem(v) : most;
    e = cudaFuncSetAttribute(wq_tile_kernel<T, TY, R>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)most);
    if (e == cudaSuccess && dev < 64) done.fetch_or(1ull << dev);
    return e;
}

/* Blocks of W warps an SM holds of the tile kernel, for W = 8 .. 12, once
 * per process (asked after wq_tile_allow_smem, in wq_prepare_t). */
template <typename T, int TY, int R> static int wq_tile_occupancy(int w, cudaError_t *err = NULL) {
    static std::atomic<int> occ[WQT_MAX_WARPS + 1];
    return wq_occupancy(occ[w], wq_tile_kernel<T, TY, R>, 32 * w, WqtGeom<T, TY, R>::smem(w), err);
}

/* One launch of up to 64 rows, in one wave of blocks: where the layer has
 * more tiles than 8 warps a block on every SM take (gate_up), blocks of
 * enough warps (up to 12) that one per SM covers it; else 8 warps a block
 * and K split over blocks until the SMs hold no more (each split at least
 * two chunks: the stages' overlap; only as far as the workspace holds the
 * splits' sums), then wq_split_sum_kernel. */
template <typename T, int TY, int R>
static void wq_tile_run(const WqArgs<T> &a0, void *ws, size_t ws_bytes, WqLaunch &L) {
    WqArgs<T> a = a0;
    const int sms = L.sms;
    int w = (a.ntiles + WQT_TPW * sms - 1) / (WQT_TPW * sms);
    w = w < 8 ? 8 : w > WQT_MAX_WARPS ? WQT_MAX_WARPS : w;
    const int nbn = (a.ntiles + WQT_TPW * w - 1) / (WQT_TPW * w);
    const size_t per_split = (size_t)a.m * a.ntiles * WQ_TILE_N * sizeof(float);
    int splits = min(sms * wq_tile_occupancy<T, TY, R>(w) / nbn, a.nchunks / 2);
    if (ws && splits > 1 && (size_t)splits * per_split > ws_bytes) splits = (int)(ws_bytes / per_split);
    if (!ws || splits < 2) splits = 1;
    a.csplit = (a.nchunks + splits - 1) / splits;
    splits = (a.nchunks + a.csplit - 1) / a.csplit;
    a.part = (float *)ws;
    L(wq_tile_kernel<T, TY, R>, dim3(nbn, splits), 32 * w, WqtGeom<T, TY, R>::smem(w), a);
    if (splits > 1 && L.err == cudaSuccess) {
        const size_t n4 = (size_t)a.m * a.ntiles * WQ_TILE_N / 4;
        L.err = cuda_launch_ex(L.s, L.pdl, wq_split_sum_kernel<T>, dim3((unsigned)((n4 + 255) / 256)),
                               dim3(256), 0, a, splits);
    }
}

template <typename T, int TY>
static void wq_tile_launch(const WqArgs<T> &a0, void *ws, size_t ws_bytes, WqLaunch &L) {
    for (int r0 = 0; r0 < a0.m && L.err == cudaSuccess; r0 += WQT_ROWS) {
        WqArgs<T> a = a0;
        a.x += (size_t)r0 * a.ldx;
        a.y += (size_t)r0 * a.ldy;
        a.m = min(WQT_ROWS, a0.m - r0);
        if (a.m <= 16) wq_tile_run<T, TY, 2>(a, ws, ws_bytes, L);
        else if (a.m <= 32) wq_tile_run<T, TY, 4>(a, ws, ws_bytes, L);
        else wq_tile_run<T, TY, 8>(a, ws, ws_bytes, L);
    }
}

/* What a layer of type TY needs before its first launch, asked at upload
 * rather than inside a graph capture: the GEMV's grid sizes, the tile
 * kernel's shared memory on this device and its blocks per SM. */
template <typename T, int TY> static void wq_prepare_t(cudaError_t *e) {
    for (int w = 4; w <= WQG_MAX_WARPS; w += 2) {
        wq_gemv_occupancy<T, TY, 2, true>(w, e);
        wq_gemv_occupancy<T, TY, 2, false>(w, e);
        wq_gemv_occupancy<T, TY, 4, true>(w, e);
        wq_gemv_occupancy<T, TY, 4, false>(w, e);
    }
    wq_gemv_occupancy<T, TY, 2, true, true>(4, e);
    wq_gemv_occupancy<T, TY, 2, false, true>(4, e);
    wq_gemv_occupancy<T, TY, 4, true, true>(4, e);
    wq_gemv_occupancy<T, TY, 4, false, true>(4, e);
    if constexpr (TY == RL_WQ_FP8)
        for (int w = 4; w <= WQG_MAX_WARPS; w += 2) {
            wq_gemv_occupancy<T, TY, 2, true, false, 1>(w, e);
            wq_gemv_occupancy<T, TY, 4, true, false, 1>(w, e);
            wq_gemv_occupancy<T, TY, 2, true, false, 4>(w, e);
            wq_gemv_occupancy<T, TY, 4, true, false, 4>(w, e);
        }
    for (cudaError_t r : {wq_tile_allow_smem<T, TY, 2>(), wq_tile_allow_smem<T, TY, 4>(),
                          wq_tile_allow_smem<T, TY, 8>()})
        if (r != cudaSuccess && *e == cudaSuccess) *e = r;
    for (int w = 8; w <= WQT_MAX_WARPS; w++) {
        wq_tile_occupancy<T, TY, 2>(w, e);
        wq_tile_occupancy<T, TY, 4>(w, e);
        wq_tile_occupancy<T, TY, 8>(w, e);
    }
}
template <int TY> static cudaError_t wq_prepare(void) {
    cudaError_t e = cudaSuccess;
    wq_prepare_t<bf16, TY>(&e);
    wq_prepare_t<f16, TY>(&e);
    if (e != cudaSuccess) cudaGetLastError();
    return e;
}

template <typename T, int TY>
static void wq_launch(const WqArgs<T> &a, int kernel, void *ws, size_t ws_bytes, WqLaunch &L) {
    if (kernel == WQ_KERNEL_GEMV) return wq_gemv_launch<T, TY>(a, L, false);
    if (kernel == WQ_KERNEL_TILE) return wq_tile_launch<T, TY>(a, ws, ws_bytes, L);
    const int mt = (a.m + 15) / 16, *nw = wq_nw[TY == RL_WQ_INT4 ? 0 : 1];
    if (mt <= 1) wq_launch_mt<T, TY, 1>(a, nw[0], L);
    else if (mt <= 2) wq_launch_mt<T, TY, 2>(a, nw[1], L);
    else if (mt <= 4) wq_launch_mt<T, TY, 4>(a, nw[2], L);
    else wq_launch_mt<T, TY, 8>(a, nw[3], L);
}

template <typename T>
static void wq_launch_type(const rlWq *w, const WqArgs<T> &a, void *ws, size_t ws_bytes, WqLaunch &L) {
    const int kernel = wq_kernel(w, a.m);
    switch (w->type) {
    case RL_WQ_INT4: wq_launch<T, RL_WQ_INT4>(a, kernel, ws, ws_bytes, L); break;
    case RL_WQ_INT8: wq_launch<T, RL_WQ_INT8>(a, kernel, ws, ws_bytes, L); break;
    case RL_WQ_FP8: wq_launch<T, RL_WQ_FP8>(a, kernel, ws, ws_bytes, L); break;
    }
}

static bool wq_bad_call(const rlWq *w, rlDtype dt, const void *x, int ldx, const void *y, int ldy,
                        int m) {
    return !w || !x || !y || (dt != RL_BF16 && dt != RL_F16) || m < 1 || m > WQ_MAX_ROWS ||
           ldx < w->k || ldy < w->n || ldx % 8 || ((uintptr_t)x & 15);
}
static WqLaunch wq_launcher(int pdl, cudaStream_t s) {
    int dev = 0, sms = 0;
    cudaGetDevice(&dev);
    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
    return WqLaunch{s, pdl, sms > 0 ? sms : 1, cudaSuccess};
}
static int wq_launched(const WqLaunch &L) {
    const cudaError_t last = cudaGetLastError();   /* taken off the runtime either way */
    return L.err == cudaSuccess && last == cudaSuccess ? RL_OK : RL_EDEVICE;
}

extern "C" int rl_wq_gemm(const rlWq *w, rlDtype dt, const void *x, int ldx, void *y, int ldy,
                          const void *bias, int m, void *ws, size_t ws_bytes, int pdl,
                          cudaStream_t s) {
    if (wq_bad_call(w, dt, x, ldx, y, ldy, m)) return RL_EINPUT;
    static const bool nw_read = wq_nw_parse();   /* once, thread-safe */
    (void)nw_read;
    WqLaunch L = wq_launcher(pdl, s);
    if (dt == RL_F16) wq_launch_type(w, wq_args<f16>(w, x, ldx, y, ldy, bias, m), ws, ws_bytes, L);
    else wq_launch_type(w, wq_args<bf16>(w, x, ldx, y, ldy, bias, m), ws, ws_bytes, L);
    return wq_launched(L);
}

/* Whether the FP8 tensor cores' mma is in the code that runs: a GPU of
 * compute capability 8.9 or more, and the GEMV compiled from PTX of 8.9 or
 * more (a build whose newest code is compute_80 PTX, JIT-compiled on an
 * H100, has no e4m3 mma in it).  Asked once. */
static bool wq_a8_code(void) {
    static const bool ok = [] {
        int dev = 0, major = 0, minor = 0;
        cudaFuncAttributes fa;
        if (cudaGetDevice(&dev) != cudaSuccess ||
            cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess ||
            cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev) != cudaSuccess ||
            cudaFuncGetAttributes(&fa, wq_gemv_kernel<bf16, RL_WQ_FP8, 4, true, false, 1>) != cudaSuccess) {
            cudaGetLastError();
            return false;
        }
        return 10 * major + minor >= 89 && fa.ptxVersion >= 89;
    }();
    return ok;
}

extern "C" int rl_wq_a8_rows(const rlWq *w) {
    if (!w || w->type != RL_WQ_FP8 || !wq_plain(w) || !wq_a8_code()) return 0;
    static const int most = wq_env_int("RL_WQ_A8_ROWS", 1, WQG_MAX_ROWS, WQ_A8_MAX_ROWS);
    int m = most;
    while (m > 0 && wq_a8_x_bytes(w->nchunks, w->k, m) > WQ_A8_X_BYTES) m--;
    return m;
}

extern "C" int rl_wq_gemm_a8(const rlWq *w, rlDtype dt, const void *x, int ldx, void *y, int ldy,
                             const void *bias, int m, const float *in_scale, int pdl, cudaStream_t s) {
    if (wq_bad_call(w, dt, x, ldx, y, ldy, m) || m > rl_wq_a8_rows(w)) return RL_EINPUT;
    WqLaunch L = wq_launcher(pdl, s);
    if (dt == RL_F16) {
        WqArgs<f16> a = wq_args<f16>(w, x, ldx, y, ldy, bias, m);
        a.in_scale = in_scale;
        wq_gemv_launch<f16, RL_WQ_FP8>(a, L, true);
    } else {
        WqArgs<bf16> a = wq_args<bf16>(w, x, ldx, y, ldy, bias, m);
        a.in_scale = in_scale;
        wq_gemv_launch<bf16, RL_WQ_FP8>(a, L, true);
    }
    return wq_launched(L);
}

extern "C" int rl_wq_max_rows(const rlWq *w) { return wq_plain(w) ? WQ_MAX_ROWS : WQ_FAST_ROWS; }

template <typename T> static void wq_dequant_launch(const rlWq *w, void *dst, cudaStream_t s) {
    WqArgs<T> a = wq_args<T>(w, NULL, 0, dst, w->k, NULL, 0);
    const size_t total = (size_t)w->ntiles * w->nchunks * 32;
    const unsigned blocks = (unsigned)((total + 255) / 256);
    switch (w->type) {
    case RL_WQ_INT4: wq_dequant_kernel<T, RL_WQ_INT4><<<blocks, 256, 0, s>>>(a, total); break;
    case RL_WQ_INT8: wq_dequant_kernel<T, RL_WQ_INT8><<<blocks, 256, 0, s>>>(a, total); break;
    case RL_WQ_FP8: wq_dequant_kernel<T, RL_WQ_FP8><<<blocks, 256, 0, s>>>(a, total); break;
    }
}

extern "C" int rl_wq_dequant(const rlWq *w, rlDtype dt, void *dst, cudaStream_t s) {
    if (!w || !dst || ((uintptr_t)dst & 15) || (dt != RL_BF16 && dt != RL_F16)) return RL_EINPUT;
    if (dt == RL_F16) wq_dequant_launch<f16>(w, dst, s);
    else wq_dequant_launch<bf16>(w, dst, s);
    return cudaGetLastError() == cudaSuccess ? RL_OK : RL_EDEVICE;
}

/* FP8 layers hold their checkpoint's e4m3 bytes unchanged: each lane's 16
 * bytes are two units' 8 consecutive columns of one row, so a thread per
 * lane writes them back as two 8-byte runs of the row-major matrix. */
__global__ void wq_fp8_values_kernel(const uint8_t *qw, uint8_t *dst, int n, int k, int nchunks,
                                     size_t total) {
    const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= total) return;
    const int lane = (int)(i & 31);
    const size_t tc = i >> 5;
    const int c = (int)(tc % nchunks), row = wq_lane_row((int)(tc / nchunks), lane);
    if (row >= n) return;
    const uint4 v = wq_ld_stream(qw + i * WQ_LANE_BYTES);
    const int col0 = wq_lane_col(2, c, lane, 0), col1 = wq_lane_col(2, c, lane, 8);
    uint8_t *out = dst + (size_t)row * k;
    if (col0 < k) *(uint2 *)(out + col0) = make_uint2(v.x, v.y);
    if (col1 < k) *(uint2 *)(out + col1) = make_uint2(v.z, v.w);
}

extern "C" int rl_wq_fp8_values(const rlWq *w, void *dst, cudaStream_t s) {
    if (!w || !dst || w->type != RL_WQ_FP8 || ((uintptr_t)dst & 15)) return RL_EINPUT;
    const size_t total = (size_t)w->ntiles * w->nchunks * 32;
    wq_fp8_values_kernel<<<(unsigned)((total + 255) / 256), 256, 0, s>>>(
        w->qw, (uint8_t *)dst, w->n, w->k, w->nchunks, total);
    return cudaGetLastError() == cudaSuccess ? RL_OK : RL_EDEVICE;
}

extern "C" void rl_wq_free(rlWq *w) {
    if (!w) return;
    cudaFree(w->qw);
    cudaFree(w->scale);
    cudaFree(w->zero);
    cudaFree(w->perm);
    cudaFree(w->strips);
    free(w);
}

static int wq_copy(void **dst, const void *src, size_t bytes, cudaStream_t s, char *msg,
                   size_t msg_n, const char *what) {
    cudaError_t e = cudaMalloc(dst, bytes);
    if (e == cudaSuccess) e = cudaMemcpyAsync(*dst, src, bytes, cudaMemcpyHostToDevice, s);
    if (e == cudaSuccess) return 0;
    cudaGetLastError();   /* not a failure of a later launch */
    snprintf(msg, msg_n, "quantized weights: %s (%zu bytes) on the GPU: %s", what, bytes,
             cudaGetErrorString(e));
    return e == cudaErrorMemoryAllocation ? RL_EMEMORY : RL_EDEVICE;
}

extern "C" int rl_wq_upload(const rlWqHost *h, cudaStream_t s, rlWq **out, size_t *bytes,
                            char *msg, size_t msg_n) {
    *out = NULL;
    rlWq *w = (rlWq *)calloc(1, sizeof(*w));
    if (!w) {
        snprintf(msg, msg_n, "quantized weights: out of host memory");
        return RL_EMEMORY;
    }
    uint8_t *qw = NULL, *zero = NULL;
    float *scale = NULL;
    int rc = wq_layout(h, w, msg, msg_n) ? RL_EMODEL : 0;
    if (!rc) rc = wq_pack(h, w, &qw, &scale, &zero, msg, msg_n) ? RL_EMODEL : 0;
    const size_t qb = wq_qw_bytes(w), sb = (size_t)w->ngroups * w->scale_rows * sizeof(float),
                 zb = zero ? (size_t)w->ngroups * w->ntiles * WQ_TILE_N : 0,
                 pb = h->perm ? (size_t)h->k * sizeof(int32_t) : 0;
    if (!rc) rc = wq_copy((void **)&w->qw, qw, qb, s, msg, msg_n, "packed values");
    if (!rc) rc = wq_copy((void **)&w->scale, scale, sb, s, msg, msg_n, "scales");
    if (!rc && zb) rc = wq_copy((void **)&w->zero, zero, zb, s, msg, msg_n, "zero points");
    if (!rc && pb) rc = wq_copy((void **)&w->perm, h->perm, pb, s, msg, msg_n, "act-order permutation");
    static const unsigned zeros[2] = {0, 0};
    if (!rc) rc = wq_copy((void **)&w->strips, zeros, sizeof zeros, s, msg, msg_n, "strip counter");
    if (!rc) {
        cudaError_t e = h->type == RL_WQ_INT4   ? wq_prepare<RL_WQ_INT4>()
                        : h->type == RL_WQ_INT8 ? wq_prepare<RL_WQ_INT8>()
                                                : wq_prepare<RL_WQ_FP8>();
        if (e != cudaSuccess) {
            snprintf(msg, msg_n, "quantized weights: preparing the kernels (occupancy): %s",
                     cudaGetErrorString(e));
            rc = RL_EDEVICE;
        }
    }
    /* The host copies are freed below: wait for the transfers. */
    if (!rc && cudaStreamSynchronize(s) != cudaSuccess) {
        snprintf(msg, msg_n, "quantized weights: upload: %s", cudaGetErrorString(cudaGetLastError()));
        rc = RL_EDEVICE;
    }
    free(qw);
    free(scale);
    free(zero);
    if (rc) {
        rl_wq_free(w);
        return rc;
    }
    w->bytes = qb + sb + zb + pb;
    if (bytes) *bytes = w->bytes;
    *out = w;
    return 0;
}
