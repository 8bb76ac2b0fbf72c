/* moe.cu: mixture-of-experts routing and the experts over their tokens.
 *
 * Routing is one kernel per step: a warp per token takes the softmax of the
 * router's fp32 logits, the top k (ties to the lower expert id, as the CPU
 * backend), renormalised when asked; ids and weights stay on the device.
 * At decode (up to 8 rows) the router's GEMV and the routing are one kernel
 * (moe_gate), a launch and a wait fewer in each MoE layer.
 *
 * The experts run in one of two shapes, neither reading the routing on the
 * host, so decode steps stay inside CUDA graphs:
 *  - a few (token, expert) pairs (decode at small batch): GEMV kernels on
 *    the dense GEMV's occupancy model (cuda_gemv.cuh: short 128-thread
 *    blocks, <= 40 registers) over the pairs, reading only the chosen
 *    experts' rows (batch 1 reads the 8 chosen experts of 128 and nothing
 *    else); the down projection sums each token's k experts, weighted, in
 *    the same block, so there is no scatter and no atomics.  Measured on
 *    an H200 (PERF.md v26; Qwen3-30B-A3B, 512 -> 128, floor 1.54-1.62 ms):
 *    2.94 ms a decode step at batch 1 and 5.93 at batch 4, against 3.29 and
 *    7.03 for the warp-per-column pair they replace and 3.03 and 6.16 with
 *    down's later chunks prefetched into L2 before its PDL wait.
 *  - more pairs: a permutation of the pairs by expert made on the device
 *    (one block: counts, offsets, a list of 64-row tiles of each expert's
 *    pairs), then two grouped GEMMs on tensor cores (mma.sync,
 *    cuda_tile_gemm.cuh) over that tile list, one launch each for every
 *    expert: gate/up with SwiGLU in the epilogue, then down; then each
 *    token's k rows weighted and summed back in a fixed order.  The grid is
 *    sized for the most tiles the pairs can make, so no host sync is needed;
 *    spare blocks return at once.
 * Within an expert the pairs' order is whatever the atomics give, which
 * changes nothing: every output row of a GEMM depends on its own input row
 * alone, and the sum back to the token runs over j = 0..k-1.  So the grouped
 * path is batch-invariant, and --batch-invariant (rlCuda.invariant) takes it
 * for every step, with the router's logits from gemm.cu's invariant GEMM:
 * the GEMV kernels sum in another order. */
#include "kernels/cuda/cuda_internal.h"
#include "kernels/cuda/cuda_gemv.cuh"
#include "kernels/cuda/cuda_tile_gemm.cuh"
#include "kernels/cuda/moe_chunks.h"

#include <limits.h>

#define MOE_GEMV_PAIRS 32   /* up to this many (token, expert) pairs: the GEMV kernels */
#define MOE_BM TG_BM        /* pairs per tile of the grouped GEMMs (rl_moe_scratch_bytes's 64) */
#define MOE_MAX_EXPERTS 1024

/* ---- routing ---- */

/* A float's order as an unsigned integer (larger float, larger key; -0 as
 * +0, since they compare equal), so a warp finds its largest with one
 * redux.sync instead of a shuffle tree. */
static __device__ __forceinline__ unsigned order_key(float x) {
    unsigned b = __float_as_uint(x + 0.0f);
    return b & 0x80000000u ? ~b : b | 0x80000000u;
}

/* One token's routing, by a warp: softmax of its logits l[0..E) in fp32,
 * the top k (ties to the lower id) into ids[0..k) and their probabilities,
 * renormalised when asked, into weights[0..k).  Each of the k rounds: every
 * lane's best untaken expert, the warp's largest key (redux.sync), then the
 * lowest id holding it (redux.sync again): two collective steps a round
 * where a shuffle tree over (value, id) pairs takes ten. */
static __device__ void route_row(int *ids, float *weights, const float *l, int E, int k,
                                 int renorm, int lane) {
    float mx = -INFINITY, sum = 0, chosen = 0;
    for (int e = lane; e < E; e += 32) mx = fmaxf(mx, l[e]);
    mx = warp_max(mx);
    for (int e = lane; e < E; e += 32) sum += expf(l[e] - mx);
    sum = warp_sum(sum);
    unsigned taken = 0;     /* bit s: this lane's expert lane + 32 s is chosen */
    for (int j = 0; j < k; j++) {
        unsigned best = 0;  /* keys of real floats are > 0: 0 is "none left" */
        int bi = INT_MAX;
        for (int e = lane, s = 0; e < E; e += 32, s++) {
            const unsigned key = order_key(l[e]);
            if (!(taken >> s & 1u) && (bi == INT_MAX || key > best)) best = key, bi = e;
        }
        const unsigned top = __reduce_max_sync(0xffffffffu, best);
        bi = (int)__reduce_min_sync(0xffffffffu, bi != INT_MAX && best == top ? (unsigned)bi
                                                                               : UINT_MAX);
        if (bi < 0 || bi >= E) bi = 0;   /* fewer than k experts: cannot happen (k <= E) */
        if ((bi & 31) == lane) taken |= 1u << (bi >> 5);
        float w = expf(l[bi] - mx) / sum;
        chosen += w;
        if (lane == 0) ids[j] = bi, weights[j] = w;
    }
    if (renorm && lane == 0)
        for (int j = 0; j < k; j++) weights[j] /= chosen;
}

__global__ void moe_route_kernel(int *ids, float *weights, const float *logits, int rows, int E,
                                 int k, int renorm) {
    int t = (blockIdx.x * blockDim.x + threadIdx.x) >> 5, lane = threadIdx.x & 31;
    if (t >= rows) return;
    route_row(ids + (size_t)t * k, weights + (size_t)t * k, logits + (size_t)t * E, E, k, renorm,
              lane);
}

void cuda_moe_route(rlBackend *be, int *ids, float *weights, const float *logits, int rows,
                    int n_experts, int k, int renorm) {
    rlCuda *c = cuda_of(be);
    if (!rows) return;
    if (n_experts > MOE_MAX_EXPERTS || k > 32) {
        cuda_fail(c, RL_EMODEL, "moe_route: %d experts, top %d; the CUDA kernels route among "
                  "at most %d experts, top 32 at most", n_experts, k, MOE_MAX_EXPERTS);
        return;
    }
    PROF(c, "moe_route");
    moe_route_kernel<<<(rows + 7) / 8, 256, 0, c->stream>>>(ids, weights, logits, rows,
                                                            n_experts, k, renorm);
    cuda_launched(c, "moe_route");
}

/* The router and the routing in one kernel at decode (rows <= GEMV_MAX_ROWS):
 * each block computes its GEMV_COLS logits as gemm.cu's GEMV does
 * (gemv_block, so they are the same logits), and the block that finishes
 * last (a counter in device memory, set back to zero by that block for the
 * next launch) routes every row from all of them, staged in shared memory.
 * One launch and one wait fewer per MoE layer than the GEMV then
 * moe_route_kernel. */
template <typename T, int R>
__global__ void __launch_bounds__(GEMV_THREADS)
moe_gate_kernel(int *ids, float *weights, float *logits, const T *x, const T *router,
                int *count, int rows, int E, int dim, int k, int renorm) {
    __shared__ float lg[GEMV_THREADS / 32][MOE_MAX_EXPERTS];
    __shared__ int last;
    gemv_block<T, float, R>(logits, x, router, NULL, rows, E, dim);
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0) last = atomicAdd(count, 1) == (int)gridDim.x - 1;
    __syncthreads();
    if (!last) return;
    __threadfence();
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    for (int t = warp; t < rows; t += GEMV_THREADS / 32) {
        for (int e = lane; e < E; e += 32) lg[warp][e] = __ldcg(logits + (size_t)t * E + e);
        __syncwarp();
        route_row(ids + (size_t)t * k, weights + (size_t)t * k, lg[warp], E, k, renorm, lane);
        __syncwarp();
    }
    if (threadIdx.x == 0) *count = 0;
}

void cuda_moe_gate(rlBackend *be, int *ids, float *weights, float *logits, const void *x,
                   const void *router, int rows, int n_experts, int dim, int k, int renorm) {
    rlCuda *c = cuda_of(be);
    if (!rows) return;
    if (c->invariant || rows > GEMV_MAX_ROWS || dim % 8 || be->act_dtype == RL_F32 ||
        be->weight_dtype != be->act_dtype || n_experts > MOE_MAX_EXPERTS || k > 32 ||
        (((uintptr_t)x | (uintptr_t)router) & 15)) {
        cuda_matmul_f32(be, logits, x, router, rows, n_experts, dim);
        cuda_moe_route(be, ids, weights, logits, rows, n_experts, k, renorm);
        return;
    }
    if (cuda_grow(c, (void **)&c->moe_count, &c->moe_count_cap, sizeof(int), 1, "moe_gate"))
        return;     /* taken by reserve already, except where an op runs alone (tests) */
    PROF(c, "moe_gate %dx%d", n_experts, dim);
    dim3 blocks((unsigned)((n_experts + GEMV_COLS - 1) / GEMV_COLS));
#define MOE_GATE(T, R)                                                                         \
    cuda_launch_pdl(c, "moe_gate", moe_gate_kernel<T, R>, blocks, GEMV_THREADS, 0, ids, weights, \
                    logits, (const T *)x, (const T *)router, c->moe_count, rows, n_experts,     \
                    dim, k, renorm)
    if (be->act_dtype == RL_F16) {
        if (rows <= 1) MOE_GATE(f16, 1);
        else if (rows <= 2) MOE_GATE(f16, 2);
        else if (rows <= 4) MOE_GATE(f16, 4);
        else MOE_GATE(f16, 8);
    } else {
        if (rows <= 1) MOE_GATE(bf16, 1);
        else if (rows <= 2) MOE_GATE(bf16, 2);
        else if (rows <= 4) MOE_GATE(bf16, 4);
        else MOE_GATE(bf16, 8);
    }
#undef MOE_GATE
}

/* ---- the shared expert's gate ---- */

/* A block per token: the gate's dot product, then the row scaled. */
template <typename T>
__global__ void shared_gate_kernel(T *out, const T *x, const T *w, int dim) {
    __shared__ float red[32];
    const T *xr = x + (size_t)blockIdx.x * dim;
    float s = 0;
    for (int i = threadIdx.x; i < dim; i += blockDim.x) s += ld(xr + i) * ld(w + i);
    float g = 1.0f / (1.0f + expf(-block_sum(s, red)));
    T *o = out + (size_t)blockIdx.x * dim;
    for (int i = threadIdx.x; i < dim; i += blockDim.x) st(o + i, ld(o + i) * g);
}

void cuda_shared_gate(rlBackend *be, void *out, const void *x, const void *w, int rows,
                      int dim) {
    rlCuda *c = cuda_of(be);
    if (!rows) return;
    PROF(c, "shared_gate");
    RL_DISPATCH(be->act_dtype, T, shared_gate_kernel<T><<<rows, 256, 0, c->stream>>>(
                                      (T *)out, (const T *)x, (const T *)w, dim));
    cuda_launched(c, "shared_gate");
}

/* ---- few pairs: GEMVs over (token, chosen expert) on cuda_gemv.cuh's model ---- */

/* The dense GEMV (gemv_block) reads at ~94 % of the copy bandwidth with
 * short blocks of GEMV_THREADS threads that all stride over the same rows'
 * 16-byte chunks and meet in shared memory.  These two kernels do the same
 * over the chosen experts: each lane keeps its next chunk loading while it
 * uses the current one, in two buffers of static registers that take turns
 * (a register copied from a buffer whose load is in flight would wait for
 * it: PERF.md v22), at most 40 registers, so 12 blocks fit an SM. */
#define MOE_DN_COLS 2   /* outputs per down-projection block */

/* h[p, j] = silu(gate_e[j] . x_t) * (up_e[j] . x_t), pair p = (t, e = ids[p]):
 * a block per (column j, pair), the grid over every chosen expert's rows at
 * once.  Launched with PDL, it waits before anything (the rows it reads
 * follow the routing) and only then lets the down projection launch, so
 * that kernel's blocks may read the routing before their own wait. */
template <typename T>
__global__ void __launch_bounds__(GEMV_THREADS, 12)
moe_gu_gemv_kernel(T *h, const T *__restrict__ x, const T *__restrict__ wgu, const int *ids,
                   int k, int dim, int m) {
    __shared__ float red[GEMV_THREADS / 32][2];
    pdl_wait();
    pdl_trigger();
    const int p = blockIdx.y, j = blockIdx.x, kc = dim / 8;
    const uint4 *g = (const uint4 *)(wgu + ((size_t)ids[p] * 2 * m + j) * dim);
    const uint4 *u = g + (size_t)m * kc;
    const uint4 *xv = (const uint4 *)(x + (size_t)(p / k) * dim);
    float sg = 0, su = 0;
    uint4 ga, ua, gb, ub;
    auto use = [&](uint4 gw, uint4 uw, int i) {
        float xf[8];
        unpack8(__ldg(xv + i), xf, T());
        sg = dot8(gw, xf, sg, T());
        su = dot8(uw, xf, su, T());
    };
    int i = threadIdx.x;
    if (i < kc) ga = __ldcs(g + i), ua = __ldcs(u + i);
    while (i < kc) {
        int i1 = i + GEMV_THREADS;
        if (i1 < kc) gb = __ldcs(g + i1), ub = __ldcs(u + i1);
        use(ga, ua, i);
        if (i1 >= kc) break;
        i = i1 + GEMV_THREADS;
        if (i < kc) ga = __ldcs(g + i), ua = __ldcs(u + i);
        use(gb, ub, i1);
    }
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    sg = warp_sum(sg), su = warp_sum(su);
    if (lane == 0) red[warp][0] = sg, red[warp][1] = su;
    __syncthreads();
    if (threadIdx.x == 0) {
        float gs = 0, us = 0;
#pragma unroll
        for (int w = 0; w < GEMV_THREADS / 32; w++) gs += red[w][0], us += red[w][1];
        st(h + (size_t)p * m + j, silu_mul(gs, us));
    }
}

/* out[t, i] (+)= sum_j w[t, j] (down_e[i] . h[t k + j]) for the block's
 * MOE_DN_COLS outputs i: its threads stride over the token's k experts'
 * chunks at once (chunk c: expert c / (m / 8), so a lane meets its experts
 * in order), each chunk of h scaled by its expert's weight, one fp32 sum per
 * output, rounded once.  The routing is final when this kernel starts
 * (moe_gu_gemv_kernel waited before it triggered), so its blocks read it
 * and load their first weights before waiting for h (PDL). */
template <typename T>
__global__ void __launch_bounds__(GEMV_THREADS, 12)
moe_down_gemv_kernel(T *out, const T *__restrict__ h, const T *__restrict__ wdown,
                     const int *ids, const float *wts, int k, int dim, int m, int accumulate) {
    __shared__ const uint4 *rows[32];  /* expert j's row i0, in chunks */
    __shared__ float scale[32];
    __shared__ float red[GEMV_THREADS / 32][MOE_DN_COLS];
    pdl_trigger();
    const int t = blockIdx.y, i0 = blockIdx.x * MOE_DN_COLS, mc = m / 8, n = k * mc;
    if (threadIdx.x < k) {
        int e = __ldcg(ids + t * k + threadIdx.x);
        rows[threadIdx.x] = (const uint4 *)(wdown + ((size_t)e * dim + i0) * m);
        scale[threadIdx.x] = __ldcg(wts + t * k + threadIdx.x);
    }
    __syncthreads();
    /* A lane's chunks c, c + GEMV_THREADS, ... (moe_chunks.h). */
    const rlMoeChunk step = moe_chunk_at(GEMV_THREADS, mc);
    int c = threadIdx.x;
    rlMoeChunk at = moe_chunk_at(c, mc);
    auto load = [&](uint4 (&w)[MOE_DN_COLS], rlMoeChunk p) {
#pragma unroll
        for (int d = 0; d < MOE_DN_COLS; d++) w[d] = __ldcs(rows[p.j] + (size_t)d * mc + p.q);
    };
    uint4 a[MOE_DN_COLS], b[MOE_DN_COLS];
    if (c < n) load(a, at);
    pdl_wait();
    const uint4 *hv = (const uint4 *)(h + (size_t)t * k * m);   /* chunk c of the token's h */
    float acc[MOE_DN_COLS] = {};
    auto use = [&](const uint4 (&w)[MOE_DN_COLS], int cu, rlMoeChunk p) {
        float hf[8];
        unpack8(__ldg(hv + cu), hf, T());
        const float s = scale[p.j];
#pragma unroll
        for (int e = 0; e < 8; e++) hf[e] *= s;
#pragma unroll
        for (int d = 0; d < MOE_DN_COLS; d++) acc[d] = dot8(w[d], hf, acc[d], T());
    };
    while (c < n) {
        const int c1 = c + GEMV_THREADS;
        const rlMoeChunk at1 = moe_chunk_next(at, step, mc);
        if (c1 < n) load(b, at1);
        use(a, c, at);
        if (c1 >= n) break;
        c = c1 + GEMV_THREADS, at = moe_chunk_next(at1, step, mc);
        if (c < n) load(a, at);
        use(b, c1, at1);
    }
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
    for (int d = 0; d < MOE_DN_COLS; d++) {
        float v = warp_sum(acc[d]);
        if (lane == 0) red[warp][d] = v;
    }
    __syncthreads();
    if (threadIdx.x < MOE_DN_COLS) {
        float s = 0;
#pragma unroll
        for (int w = 0; w < GEMV_THREADS / 32; w++) s += red[w][threadIdx.x];
        T *o = out + (size_t)t * dim + i0 + threadIdx.x;
        st(o, (accumulate ? ld(o) : 0.0f) + s);
    }
}

/* ---- many pairs: permutation by expert, grouped GEMMs ---- */

/* One block: count the pairs of each expert, lay the experts' runs out one
 * after another (offsets), list every run's 64-row tiles, and place each
 * pair in its expert's run: perm[slot] = pair, pos[pair] = slot. */
__global__ void moe_sort_kernel(int4 *tiles, int *n_tiles, int *perm, int *pos, const int *ids,
                                int pairs, int E) {
    __shared__ int count[MOE_MAX_EXPERTS], cursor[MOE_MAX_EXPERTS];
    for (int e = threadIdx.x; e < E; e += blockDim.x) count[e] = 0;
    __syncthreads();
    for (int p = threadIdx.x; p < pairs; p += blockDim.x) atomicAdd(&count[ids[p]], 1);
    __syncthreads();
    if (threadIdx.x == 0) {
        int off = 0, n = 0;
        for (int e = 0; e < E; e++) {
            cursor[e] = off;
            for (int r = 0; r < count[e]; r += MOE_BM)
                tiles[n++] = make_int4(e, off + r, min(MOE_BM, count[e] - r), 0);
            off += count[e];
        }
        *n_tiles = n;
    }
    __syncthreads();
    for (int p = threadIdx.x; p < pairs; p += blockDim.x) {
        int slot = atomicAdd(&cursor[ids[p]], 1);
        perm[slot] = p;
        pos[p] = slot;
    }
}

/* out[t] (+)= sum_j w[t, j] y[pos[t k + j]], j in order. */
template <typename T>
__global__ void moe_combine_kernel(T *out, const float *y, const int *pos, const float *wts,
                                   int k, int dim, int accumulate) {
    int t = blockIdx.x;
    for (int i = threadIdx.x; i < dim; i += blockDim.x) {
        float s = 0;
        for (int j = 0; j < k; j++)
            s += wts[t * k + j] * y[(size_t)pos[t * k + j] * dim + i];
        T *o = out + (size_t)t * dim + i;
        st(o, (accumulate ? ld(o) : 0.0f) + s);
    }
}

template <typename T>
static void moe_run(rlCuda *c, T *out, const T *x, const T *wgu, const T *wdown, const int *ids,
                    const float *wts, int rows, int dim, int m, int E, int k, int accumulate) {
    size_t pairs = (size_t)rows * k, es = sizeof(T);
    if (pairs <= MOE_GEMV_PAIRS && !c->invariant) {
        if (cuda_moe_ws(c, pairs * m * es, "moe_experts")) return;
        T *h = (T *)c->moe_ws;
        PROF(c, "moe_gemv gate_up");
        cuda_launch_pdl(c, "moe_experts (gate/up GEMV)", moe_gu_gemv_kernel<T>,
                        dim3((unsigned)m, (unsigned)pairs), dim3(GEMV_THREADS), 0, h, x, wgu, ids,
                        k, dim, m);
        PROF(c, "moe_gemv down");
        cuda_launch_pdl(c, "moe_experts (down GEMV)", moe_down_gemv_kernel<T>,
                        dim3((unsigned)(dim / MOE_DN_COLS), (unsigned)rows), dim3(GEMV_THREADS), 0,
                        out, h, wdown, ids, wts, k, dim, m, accumulate);
        return;
    }
    /* Workspace (rl_moe_scratch_bytes, backend.h): tiles, their count,
     * perm, pos, then h and y (fp32) 256-byte aligned. */
    size_t max_tiles = (pairs + MOE_BM - 1) / MOE_BM + (size_t)E;
    size_t ints = (max_tiles * 16 + 16 + 2 * pairs * 4 + 255) / 256 * 256;
    size_t hb = (pairs * m * es + 255) / 256 * 256;
    if (cuda_moe_ws(c, rl_moe_scratch_bytes(rows, dim, m, E, k, es), "moe_experts")) return;
    char *ws = (char *)c->moe_ws;
    int4 *tiles = (int4 *)ws;
    int *n_tiles = (int *)(ws + max_tiles * 16), *perm = n_tiles + 4, *pos = perm + pairs;
    T *h = (T *)(ws + ints);
    float *y = (float *)(ws + ints + hb);
    PROF(c, "moe_grouped");
    moe_sort_kernel<<<1, 1024, 0, c->stream>>>(tiles, n_tiles, perm, pos, ids, (int)pairs, E);
    const dim3 gu_grid((m + 31) / 32, (unsigned)max_tiles);
    const dim3 down_grid((dim + TG_BN - 1) / TG_BN, (unsigned)max_tiles);
    if (tile_gemm_pipe_env() > 0) {    /* RL_CUDA_TILE_PIPE=4 or 8 (cuda_tile_gemm.cuh) */
        tile_gemm_kernel<T, TG_SWIGLU, TG_STAGES><<<gu_grid, TG_THREADS, 0, c->stream>>>(
            h, x, wgu, NULL, tiles, n_tiles, perm, k, dim, 2 * m, m, 0);
        tile_gemm_kernel<T, TG_F32, TG_STAGES><<<down_grid, TG_THREADS, 0, c->stream>>>(
            y, h, wdown, NULL, tiles, n_tiles, perm, k, m, dim, m, 0);
    } else {
        tile_gemm_kernel<T, TG_SWIGLU, 1><<<gu_grid, TG_THREADS, 0, c->stream>>>(
            h, x, wgu, NULL, tiles, n_tiles, perm, k, dim, 2 * m, m, 0);
        tile_gemm_kernel<T, TG_F32, 1><<<down_grid, TG_THREADS, 0, c->stream>>>(
            y, h, wdown, NULL, tiles, n_tiles, perm, k, m, dim, m, 0);
    }
    moe_combine_kernel<T><<<rows, 256, 0, c->stream>>>(out, y, pos, wts, k, dim, accumulate);
    cuda_launched(c, "moe_experts (grouped GEMM)");
}

void cuda_moe_experts(rlBackend *be, void *out, const void *x, const void *wgu,
                      const void *wdown, const int *ids, const float *weights, int rows, int dim,
                      int m, int n_experts, int k, int accumulate) {
    rlCuda *c = cuda_of(be);
    if (!rows) return;
    if (m == 0) {   /* no expert columns on this rank: it adds nothing */
        if (!accumulate)
            cuda_check(c, cudaMemsetAsync(out, 0, (size_t)rows * dim * rl_dtype_size(be->act_dtype),
                                          c->stream), "moe_experts");
        return;
    }
    if (be->act_dtype == RL_F32 || dim % 8 || m % 8 || n_experts > MOE_MAX_EXPERTS || k > 32) {
        cuda_fail(c, RL_EMODEL, "moe_experts: the CUDA expert kernels need bf16 or fp16, a "
                  "hidden size and an expert width (this rank's %d columns) that are multiples "
                  "of 8, at most %d experts and top 32; run this model with --backend cpu", m,
                  MOE_MAX_EXPERTS);
        return;
    }
    if (be->act_dtype == RL_F16)
        moe_run(c, (f16 *)out, (const f16 *)x, (const f16 *)wgu, (const f16 *)wdown, ids,
                weights, rows, dim, m, n_experts, k, accumulate);
    else
        moe_run(c, (bf16 *)out, (const bf16 *)x, (const bf16 *)wgu, (const bf16 *)wdown, ids,
                weights, rows, dim, m, n_experts, k, accumulate);
}
