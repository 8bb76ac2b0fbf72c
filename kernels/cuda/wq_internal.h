/* wq_internal.h: the packed layout rl_wq_upload writes (wq_pack.c, plain C)
 * and the kernels of wq.cu read, in one place.
 *
 * The kernels multiply with mma.sync m16n8k16 and want each lane's weights
 * to arrive in one 16-byte load, already in B-fragment order.  Output rows
 * are cut into tiles of 8 (WQ_TILE_N, one mma column tile; n is padded up
 * to whole strips of 4 tiles, WQ_STRIP_N) and K into units of 32 (WQ_UNIT_K, two mma k-steps).  Within a unit, lane
 * (g, q) = (lane / 4, lane % 4) holds row n0 + g and the 8 consecutive
 * columns 8q .. 8q + 7: the mma's logical k order is a permutation of the
 * unit's columns, the same for the activations, so a lane's activations are
 * one 16-byte load too.  A chunk is what one lane's 16 bytes hold: 4 units
 * (128 columns) of int4, 2 units (64) of int8 / fp8; the packed matrix is
 * [tile][chunk][lane][16 bytes], K padded with zeros to whole chunks.
 *
 * Inside a lane's 16 bytes: int4 word u is unit u, nibble p (bits 4p..) =
 * column 8q + 2p and nibble p + 4 (bits 16 + 4p..) = column 8q + 2p + 1, so
 * (word >> 4p) & 0x000f000f is the pair the p-th B register needs; 8-bit
 * byte 8u + i is unit u's column 8q + i (B pairs are bytes 0-1, 2-3, ...).
 *
 * Scales stay fp32, [group along K][scale row], and are applied to the fp32
 * accumulators once per group (q - zero and e4m3 are exact in bf16/fp16), so
 * the only roundings are fp32 sums and the output's.  Zeros: uint8
 * [group][padded n].  Groups along K must be whole units (group_k % 32 == 0)
 * or span all of K; fp8 scale rows (group_n) are 1, a power of two, or all
 * of n, so a row's scale row is n >> gshift. */
#ifndef RL_CUDA_WQ_INTERNAL_H
#define RL_CUDA_WQ_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/cuda/wq.h"

#define WQ_TILE_N 8
/* Output rows are padded with zeros to whole strips of 4 tiles: the decode
 * GEMV's strips (wq.cu) never end inside the layout. */
#define WQ_STRIP_N 32
#define WQ_UNIT_K 32
#define WQ_LANE_BYTES 16
#define WQ_CHUNK_BYTES (32 * WQ_LANE_BYTES)
/* rl_wq_gemm takes up to WQ_MAX_ROWS rows.  The tile kernel beats
 * rl_wq_dequant + the dense GEMM up to there (int4 at 128 rows: 347 us a 7B
 * layer against ~400 on an H100); the mma kernel, which layers the tile
 * kernel does not take run on, up to WQ_FAST_ROWS (int4 at 32 rows: 200 us
 * against ~294; at 64: 454 against ~295 on an H200; wq.cu). */
#define WQ_MAX_ROWS 128
#define WQ_FAST_ROWS 32

struct rlWq {
    rlWqType type;
    int n, k, group_k;
    int ntiles;          /* ceil(n / 32) * 4: whole strips (WQ_STRIP_N) */
    int nchunks;         /* ceil(k / chunk_k) */
    int chunk_units;     /* units of 32 columns per chunk: 4 (int4), 2 (8-bit) */
    int ngroups;         /* ceil(k / group_k) */
    int group_units;     /* units per group (all of K: 2^29, more than any k has) */
    int scale_rows;      /* rows of scale: ((ntiles * 8 - 1) >> gshift) + 1 */
    int gshift;          /* a row's scale row is n >> gshift */
    uint8_t *qw;         /* device: [ntiles][nchunks][32][16] */
    float *scale;        /* device: [ngroups][scale_rows] */
    uint8_t *zero;       /* device: [ngroups][ntiles * 8], int types only */
    int32_t *perm;       /* device: [k] or NULL */
    unsigned *strips;    /* device: [2], the decode GEMV's strip counter (wq.cu), zero between launches */
    size_t bytes;
};

#ifdef __cplusplus
extern "C" {
#endif
/* Check h and fill w's geometry; 0, or nonzero with msg filled. */
int wq_layout(const rlWqHost *h, rlWq *w, char *msg, size_t msg_n);
/* The host arrays of the packed layout for w (geometry from wq_layout);
 * each is malloc'd (zero NULL for fp8); 0, or nonzero with msg filled. */
int wq_pack(const rlWqHost *h, const rlWq *w, uint8_t **qw, float **scale, uint8_t **zero,
            char *msg, size_t msg_n);
/* The kernel rl_wq_gemm runs for m rows of w, the one home of the rule:
 * the decode GEMV for 1-8 rows of a layer without act-order (on an H200 at
 * the 7B shapes 0.45x the mma kernel's time on int4, 0.63x on fp8, 0.67x on
 * int8: kernels/PERF.md v30); from 9 rows the tile kernel where the groups
 * are 2^i whole chunks or all of K without act-order (0.38-0.64x the mma
 * kernel's time at 16-64 rows on an H100: PERF.md v34); else the mma kernel
 * (act-order layers stay where they were, unmeasured on the GEMV).  The
 * tests and the benchmark force one kernel where it can run (the GEMV up
 * to 8 rows, the tile kernel on the layers it takes; -1: the rule again),
 * so each stays checked on every format. */
enum { WQ_KERNEL_MMA = 0, WQ_KERNEL_GEMV = 1, WQ_KERNEL_TILE = 2 };
int wq_kernel(const rlWq *w, int m);
void wq_decode_kernel_force(int kernel);
#ifdef __cplusplus
}
#endif
static inline size_t wq_qw_bytes(const rlWq *w) {
    return (size_t)w->ntiles * w->nchunks * WQ_CHUNK_BYTES;
}

/* Where a lane's 16 bytes sit and what they hold, for the kernels and the
 * host's tests alike (wq_pack.c writes the layout; test_cuda_wq checks
 * these against it on the CPU). */
#ifdef __CUDACC__
#define WQ_HD static __host__ __device__ __forceinline__
#else
#define WQ_HD static inline
#endif
/* Byte offset in qw of lane `lane`'s 16 bytes of chunk c of tile t (the
 * lane's index in 32 bits, cheap in a kernel's loop: layers under 64 GiB). */
WQ_HD size_t wq_lane_offset(int nchunks, int t, int c, int lane) {
    return (size_t)(((unsigned)t * (unsigned)nchunks + (unsigned)c) * 32u + (unsigned)lane) * WQ_LANE_BYTES;
}
/* The weight row (output column n) every value of the lane belongs to. */
WQ_HD int wq_lane_row(int t, int lane) { return t * WQ_TILE_N + (lane >> 2); }
/* The packed column (along K, before an act-order permutation) of value e
 * (0 .. 8 * chunk_units - 1) of the lane's 16 bytes in chunk c: unit e / 8,
 * column 8q + e % 8 of it. */
WQ_HD int wq_lane_col(int chunk_units, int c, int lane, int e) {
    return (c * chunk_units + e / 8) * WQ_UNIT_K + 8 * (lane & 3) + e % 8;
}
/* Value e of the lane's 16 bytes as 4 little-endian words: int4 word e / 8,
 * nibble (e % 8) / 2 of its low half for even e, of its high half for odd;
 * 8-bit: byte e. */
WQ_HD unsigned wq_lane_value(const uint32_t *w, int int4, int e) {
    if (int4) return w[e / 8] >> ((e & 1) * 16 + (e % 8 >> 1) * 4) & 15u;
    return w[e / 4] >> (8 * (e % 4)) & 255u;
}

#endif
