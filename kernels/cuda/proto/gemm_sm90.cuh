/* gemm_sm90.cuh: a Hopper (sm_90a) GEMM for decode steps of 129-256 rows, not
 * yet in the backend (README.md beside this says why and what it measured).
 *
 * out[M, N] = A[M, K] . W[N, K]^T (+ bias[N]), bf16 in, fp32 accumulation,
 * bf16 out, M <= 256: the whole 256-row tile in one CTA, so each weight is
 * read once; N in tiles of 128; K split over a cluster of S CTAs whose fp32
 * partials are summed in rank order through distributed shared memory (no
 * workspace, no atomics, the same bits every run).  A producer warpgroup
 * (one thread) streams A and W tiles by TMA into a 4-stage ring of 48 KiB
 * stages (mbarriers, 128-byte swizzle); two consumer warpgroups each run
 * 2 x wgmma m64n128k16 per 16 of k over their 128 rows. */
#pragma once
#include <cuda.h>
#include <cuda_bf16.h>
#include <cudaTypedefs.h>
#include <cooperative_groups.h>
#include <stdint.h>

#define HG_BM 256
#define HG_BN 128
#define HG_BK 64
#define HG_STAGES 4
#define HG_THREADS 384                      /* producer warpgroup + 2 consumer warpgroups */
#define HG_A_BYTES (HG_BM * HG_BK * 2)      /* 32 KiB */
#define HG_B_BYTES (HG_BN * HG_BK * 2)      /* 16 KiB */
#define HG_STAGE_BYTES (HG_A_BYTES + HG_B_BYTES)
#define HG_PART_LD (HG_BN + 8)              /* fp32 partial row stride: half-warps conflict-free */
#define HG_SMEM (HG_STAGES * HG_STAGE_BYTES + 1024 + 256)

#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define HG_ON 1
#endif

#ifdef HG_ON
static __device__ __forceinline__ uint32_t hg_smem(const void *p) {
    return (uint32_t)__cvta_generic_to_shared(p);
}
static __device__ __forceinline__ void hg_bar_init(uint64_t *b, unsigned count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(hg_smem(b)), "r"(count));
}
static __device__ __forceinline__ void hg_bar_wait(uint64_t *b, unsigned parity) {
    asm volatile(
        "{\n.reg .pred p;\nWAIT_%=:\n"
        "mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n"
        "@!p bra WAIT_%=;\n}\n" ::"r"(hg_smem(b)),
        "r"(parity)
        : "memory");
}
static __device__ __forceinline__ void hg_bar_expect(uint64_t *b, unsigned bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(hg_smem(b)),
                 "r"(bytes)
                 : "memory");
}
static __device__ __forceinline__ void hg_bar_arrive(uint64_t *b) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(hg_smem(b)) : "memory");
}
static __device__ __forceinline__ void hg_tma_2d(void *dst, const CUtensorMap *map, uint64_t *bar,
                                                 int c0, int c1) {
    asm volatile(
        "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes"
        " [%0], [%1, {%3, %4}], [%2];" ::"r"(hg_smem(dst)),
        "l"((uint64_t)map), "r"(hg_smem(bar)), "r"(c0), "r"(c1)
        : "memory");
}
/* The same box into the same offset of every CTA in mask (cluster ranks),
 * each CTA's barrier at bar's offset counting its bytes. */
static __device__ __forceinline__ void hg_tma_2d_mc(void *dst, const CUtensorMap *map,
                                                    uint64_t *bar, int c0, int c1, uint16_t mask) {
    asm volatile(
        "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes"
        ".multicast::cluster [%0], [%1, {%3, %4}], [%2], %5;" ::"r"(hg_smem(dst)),
        "l"((uint64_t)map), "r"(hg_smem(bar)), "r"(c0), "r"(c1), "h"(mask)
        : "memory");
}
/* An arrival on the barrier at b's offset in cluster rank `rank`. */
static __device__ __forceinline__ void hg_bar_arrive_at(uint64_t *b, unsigned rank) {
    uint32_t remote;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(hg_smem(b)), "r"(rank));
    asm volatile("mbarrier.arrive.release.cluster.shared::cluster.b64 _, [%0];" ::"r"(remote)
                 : "memory");
}
/* A wgmma descriptor of a K-major tile in 128-byte swizzle: rows of 128 bytes,
 * 8-row atoms 1024 bytes apart. */
static __device__ __forceinline__ uint64_t hg_desc(const void *p) {
    uint64_t a = (hg_smem(p) & 0x3FFFF) >> 4;
    return a | (1ull << 16) | (64ull << 32) | (1ull << 62);
}
static __device__ __forceinline__ void hg_wgmma(float (&d)[64], uint64_t da, uint64_t db, int acc) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 "
        "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
        "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
        "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, "
        "%64, %65, p, 1, 1, 0, 0;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),
          "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]),
          "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]),
          "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]),
          "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
          "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]),
          "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]),
          "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]),
          "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
          "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]),
          "+f"(d[62]), "+f"(d[63])
        : "l"(da), "l"(db), "r"(acc));
}
#endif

/* Grid (N / 128 tiles rounded up to CN, 1, S) in clusters of (CN, 1, S): the
 * CN column tiles of a cluster share the activations, each loading 256 / CN
 * of their rows and multicasting them to the others (CN = 1: one CTA loads
 * them all); the S ranks along z split K's 64-wide tiles in contiguous runs. */
template <int CN>
__global__ void __launch_bounds__(HG_THREADS, 1)
hg_kernel(const __grid_constant__ CUtensorMap ta, const __grid_constant__ CUtensorMap tw,
          __nv_bfloat16 *out, const __nv_bfloat16 *bias, int M, int N, int K) {
#ifdef HG_ON
    namespace cg = cooperative_groups;
    extern __shared__ __align__(1024) unsigned char hg_raw[];
    unsigned char *sm = (unsigned char *)(((uintptr_t)hg_raw + 1023) & ~(uintptr_t)1023);
    uint64_t *full = (uint64_t *)(sm + HG_STAGES * HG_STAGE_BYTES);
    uint64_t *empty = full + HG_STAGES;
    cg::cluster_group cl = cg::this_cluster();
    const int cx = (int)cl.block_index().x, cz = (int)cl.block_index().z;
    const int S = (int)cl.dim_blocks().z;
    const int kt = K / HG_BK, k0 = (int)((long)kt * cz / S), k1 = (int)((long)kt * (cz + 1) / S);
    const int n0 = blockIdx.x * HG_BN, wg = threadIdx.x / 128, t = threadIdx.x % 128;
    if (threadIdx.x == 0) {
        /* a stage is free again once both consumer warpgroups of every CTA
         * it is multicast to have read it */
        for (int s = 0; s < HG_STAGES; s++) hg_bar_init(full + s, 1), hg_bar_init(empty + s, 2 * CN);
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    cl.sync();   /* no CTA multicasts into another before its barriers exist */
    float acc[2][64];
    if (wg == 0) {
        if (t == 0) {
            const uint16_t pair = (uint16_t)(((1u << CN) - 1) << (CN * cz));
            for (int i = 0; i < k1 - k0; i++) {
                const int s = i % HG_STAGES, round = i / HG_STAGES;
                if (round) hg_bar_wait(empty + s, (round - 1) & 1);
                unsigned char *st = sm + s * HG_STAGE_BYTES;
                hg_bar_expect(full + s, HG_STAGE_BYTES);
                if (CN == 1)
                    hg_tma_2d(st, &ta, full + s, (k0 + i) * HG_BK, 0);
                else
                    hg_tma_2d_mc(st + cx * (HG_A_BYTES / CN), &ta, full + s, (k0 + i) * HG_BK,
                                 cx * (HG_BM / CN), pair);
                hg_tma_2d(st + HG_A_BYTES, &tw, full + s, (k0 + i) * HG_BK, n0);
            }
        }
    } else {
        const int c = wg - 1;   /* rows 128 c .. 128 c + 127 */
#pragma unroll
        for (int m = 0; m < 2; m++)
#pragma unroll
            for (int j = 0; j < 64; j++) acc[m][j] = 0;
        for (int i = 0; i < k1 - k0; i++) {
            const int s = i % HG_STAGES;
            hg_bar_wait(full + s, (i / HG_STAGES) & 1);
            const unsigned char *a = sm + s * HG_STAGE_BYTES + c * 128 * 128;
            const unsigned char *b = sm + s * HG_STAGE_BYTES + HG_A_BYTES;
            asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
#pragma unroll
            for (int kk = 0; kk < HG_BK / 16; kk++) {
                const uint64_t db = hg_desc(b + kk * 32);
                hg_wgmma(acc[0], hg_desc(a + kk * 32), db, 1);
                hg_wgmma(acc[1], hg_desc(a + 64 * 128 + kk * 32), db, 1);
            }
            asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
            asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
            if (t == 0) {
                if (CN == 1) hg_bar_arrive(empty + s);
                else
                    for (int x = 0; x < CN; x++) hg_bar_arrive_at(empty + s, x + CN * cz);
            }
        }
    }
    /* Every stage is consumed: the stages' memory takes this rank's fp32 partial. */
    __syncthreads();
    float *part = (float *)sm;
    if (wg) {
        const int c = wg - 1, w = t / 32, l = t % 32;
#pragma unroll
        for (int m = 0; m < 2; m++) {
            const int r = 128 * c + 64 * m + 16 * w + l / 4;
#pragma unroll
            for (int i = 0; i < 16; i++) {
                const int col = 8 * i + 2 * (l % 4);
                *(float2 *)(part + r * HG_PART_LD + col) = make_float2(acc[m][4 * i], acc[m][4 * i + 1]);
                *(float2 *)(part + (r + 8) * HG_PART_LD + col) =
                    make_float2(acc[m][4 * i + 2], acc[m][4 * i + 3]);
            }
        }
    }
    cl.sync();
    /* This rank's share of the rows: the partials of its column tile's S
     * ranks summed in k order. */
    const int rows = M < HG_BM ? M : HG_BM, per = (rows + S - 1) / S;
    const int r0 = cz * per, r1 = min(rows, r0 + per);
    for (int e = r0 * (HG_BN / 4) + threadIdx.x; e < r1 * (HG_BN / 4); e += HG_THREADS) {
        const int r = e / (HG_BN / 4), col = 4 * (e % (HG_BN / 4)), n = n0 + col;
        if (n >= N) continue;
        float4 v = make_float4(0, 0, 0, 0);
        for (int z = 0; z < S; z++) {
            const float4 p =
                *(const float4 *)(cl.map_shared_rank(part, cx + CN * z) + r * HG_PART_LD + col);
            v.x += p.x, v.y += p.y, v.z += p.z, v.w += p.w;
        }
        if (bias) {
            v.x += __bfloat162float(bias[n]), v.y += __bfloat162float(bias[n + 1]);
            v.z += __bfloat162float(bias[n + 2]), v.w += __bfloat162float(bias[n + 3]);
        }
        __nv_bfloat162 lo = __floats2bfloat162_rn(v.x, v.y), hi = __floats2bfloat162_rn(v.z, v.w);
        uint2 pk;
        pk.x = *(uint32_t *)&lo, pk.y = *(uint32_t *)&hi;
        *(uint2 *)(out + (size_t)r * N + n) = pk;
    }
    cl.sync();
#endif
}

/* Host: the tensor maps and the launch.  Returns a CUDA error. */
static PFN_cuTensorMapEncodeTiled_v12000 hg_encode_fn;

static int hg_map(CUtensorMap *map, const void *p, int rows, int K, int box_rows) {
    if (!hg_encode_fn) {
        cudaDriverEntryPointQueryResult q;
        if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", (void **)&hg_encode_fn, 12000,
                                             cudaEnableDefault, &q) != cudaSuccess ||
            q != cudaDriverEntryPointSuccess)
            return -1;
    }
    cuuint64_t dim[2] = {(cuuint64_t)K, (cuuint64_t)rows};
    cuuint64_t stride[1] = {(cuuint64_t)K * 2};
    cuuint32_t box[2] = {HG_BK, (cuuint32_t)box_rows}, es[2] = {1, 1};
    CUresult r = hg_encode_fn(map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, (void *)p, dim, stride, box,
                              es, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                              CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    return r == CUDA_SUCCESS ? 0 : -1;
}

template <int CN>
static cudaError_t hg_gemm(cudaStream_t st, __nv_bfloat16 *out, const __nv_bfloat16 *a,
                           const __nv_bfloat16 *w, const __nv_bfloat16 *bias, int M, int N, int K,
                           int S) {
    CUtensorMap ta, tw;
    if (hg_map(&ta, a, M, K, HG_BM / CN) || hg_map(&tw, w, N, K, HG_BN))
        return cudaErrorInvalidValue;
    cudaFuncSetAttribute(hg_kernel<CN>, cudaFuncAttributeMaxDynamicSharedMemorySize, HG_SMEM);
    cudaLaunchAttribute attr[1] = {};
    attr[0].id = cudaLaunchAttributeClusterDimension;
    attr[0].val.clusterDim.x = CN;
    attr[0].val.clusterDim.y = 1;
    attr[0].val.clusterDim.z = S;
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3((N + HG_BN * CN - 1) / (HG_BN * CN) * CN, 1, S);
    cfg.blockDim = dim3(HG_THREADS);
    cfg.dynamicSmemBytes = HG_SMEM;
    cfg.stream = st;
    cfg.attrs = attr;
    cfg.numAttrs = 1;
    return cudaLaunchKernelEx(&cfg, hg_kernel<CN>, ta, tw, out, bias, M, N, K);
}
