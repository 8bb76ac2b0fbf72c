/* qlinear.cu: linear layers held quantized on the GPU (backend.h's
 * upload_quant / matmul_quant / free_quant), over the weight-only kernels
 * of wq.h.
 *
 * A product of m rows takes one of three roads:
 *   - m <= rl_wq_max_rows (128 for most layouts): rl_wq_gemm reads the
 *     int4 / int8 / float8 weights and dequantizes in registers (decode,
 *     where reading the weights bounds the step), the bias added before
 *     each output's one rounding, as the dense GEMV does (no kernel of its
 *     own: it would cost Qwen2's decode a launch a layer); the workspace
 *     holds its split sums.  FP8 layers on sm_89 / sm_90 (not
 *     RL_CUDA_GENERIC, not RL_CUDA_FP8_W8A8=0) take rl_wq_gemm_a8 instead
 *     up to rl_wq_a8_rows (1-8): x rounded to e4m3 inside the GEMV as the
 *     W8A8 prefill rounds it, the weights' bytes multiplied as they are,
 *     no dequantizing (kernels/PERF.md v48).
 *   - FP8 weights on sm_89 / sm_90 (not RL_CUDA_GENERIC), from
 *     RL_QUANT_W8A8_MIN_ROWS rows: W8A8.  The activations are quantized to
 *     e4m3 here, per token or per 1x128 group (block FP8, as DeepSeek-V3 and
 *     vLLM do), or with the checkpoint's static input_scale; the down
 *     projection's (swiglu_matmul_quant) are made straight from gate_up,
 *     SwiGLU on the way, where the groups allow (vLLM fuses the two too).
 *     rl_wq_fp8_values writes the layer's e4m3 bytes row-major into the
 *     workspace (2 bytes moved a weight), so no second copy of the weights
 *     is held; cuBLASLt multiplies e4m3 x e4m3 in fp32 with the scales
 *     applied through its scale modes (BLK128x128 / VEC128, OUTER_VEC per
 *     channel or token, SCALAR per tensor) and writes 16-bit with the bias
 *     in its epilogue.  Prefill is compute-bound, and FP8 tensor cores run
 *     twice the bf16 rate.
 *   - otherwise (int4 / int8, FP8 on sm_80 / sm_86 or the generic path, a
 *     scale mode this cuBLASLt refuses): rl_wq_dequant into the workspace
 *     and the bf16 / fp16 GEMM of gemm.cu (W8A16 / W4A16).
 * The layouts cuBLASLt expects for its block scales are not spelled out for
 * Hopper, so each pair of scale modes is tried once, on a small product
 * checked against a host reference, with each candidate layout, at 32 rows
 * and at 18 (the H200's cuBLAS 13.1 runs 128x128 weight blocks with 1x128
 * activation groups for multiples of 16 rows only); a pair that cuBLASLt
 * refuses or gets wrong falls back to W8A16, saying so on stderr.
 * With --batch-invariant every product takes the last road (matmul_quant).
 * Everything a captured decode step calls is asynchronous and allocation
 * free once its shape has run eagerly (graph.cu's rule). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cuda/cuda_fp8.cuh"
#include "kernels/cuda/cuda_internal.h"
#include "kernels/cuda/cuda_math.cuh"
#include "kernels/cuda/cuda_reduce.cuh"
#include "kernels/cuda/cuda_types.cuh"
#include "kernels/cuda/wq.h"

#define QL_THREADS 128
#define QL_PLANS 64
/* W8A8 pays for writing the weights' e4m3 bytes row-major (one pass over
 * them) and quantizing the activations only where the GEMM's time
 * dominates: from RL_QUANT_W8A8_MIN_ROWS rows (kernels/quant.h says why). */

typedef cublasLtMatmulMatrixScale_t qlMode;
enum { QL_MODES = 6 };          /* SCALAR_32F .. BLK128x128_32F */

typedef struct qlPlan {
    int rows, n, k, bias, a_mode, b_mode;
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t a, b, c;
    cublasLtMatmulAlgo_t algo;
} qlPlan;

/* A pair of scale modes (weights, activations): untried (0), refused or
 * wrong (-1), or working (1) with these scale layouts, for any number of
 * rows or (rows16) for multiples of 16 only. */
typedef struct qlProbe {
    int state;
    int a_var, b_var;
    int rows16;
} qlProbe;

struct rlQlState {
    qlProbe probe[QL_MODES][QL_MODES];
    qlPlan plans[QL_PLANS];
    int n_plans;
    void *ws;                   /* the workspace: dequantized weights, e4m3 operands, scales */
    size_t ws_cap;
    size_t max_nk;              /* the largest layer's n x k, */
    int max_k, w8a8;            /* the widest W8A8 layer's k, any W8A8 layer: what ws must hold */
    char why[160];              /* what cuBLASLt said last time it refused (for the probe's line) */
};

typedef struct rlQLinear {
    rlWq *wq;
    int n, k, max_rows;
    rlWqType type;
    int w8a8;                   /* FP8 activations for rows > max_rows (2: multiples of 16 only) */
    int a8_rows;                /* FP8 activations in rl_wq_gemm_a8 up to this many rows */
    int a_mode, b_mode, a_var, b_var;
    int group_n, group_k;       /* the weight scales' blocks, as the host form gives them */
    int act_group;              /* activation scale group along k (128 or k) */
    float *scale;               /* weight scales: [ceil(n / group_n)][ceil(k / group_k)] */
    float *lt_scale;            /* the same in cuBLASLt's layout (may be scale itself) */
    float *in_scale;            /* static input scale (one float), or NULL */
    size_t bytes;
} rlQLinear;

/* ---- scale layouts ----------------------------------------------------- */

static int ql_ceil(int a, int b) { return (a + b - 1) / b; }
static __host__ __device__ int ql_round4(int a) { return (a + 3) & ~3; }

/* Layout variants tried per mode (outer: the rows of the operand, n for the
 * weights, m for the activations; kb: its 128-blocks along k). */
static int ql_variants(int mode) {
    return mode == CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F ? 2
           : mode == CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F ? 3 : 1;
}

/* Floats a scale operand takes. */
static __host__ __device__ size_t ql_scale_count(int mode, int var, int outer, int k) {
    int kb = (k + 127) / 128, ob = (outer + 127) / 128;
    switch (mode) {
    case CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F: return (size_t)outer;
    case CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F:
        return var == 0 ? (size_t)kb * ql_round4(outer) : (size_t)outer * kb;
    case CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F:
        return var == 0 ? (size_t)ob * kb : var == 1 ? (size_t)ob * ql_round4(kb)
                                                     : (size_t)kb * ql_round4(ob);
    default: return 1;
    }
}

/* Where the scale of element (o, kk) of the operand lives. */
static __host__ __device__ size_t ql_scale_at(int mode, int var, int outer, int k, int o, int kk) {
    int kb = (k + 127) / 128, ob = (outer + 127) / 128;
    switch (mode) {
    case CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F: return (size_t)o;
    case CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F:
        return var == 0 ? (size_t)(kk / 128) * ql_round4(outer) + o : (size_t)o * kb + kk / 128;
    case CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F:
        return var == 0   ? (size_t)(o / 128) * kb + kk / 128
               : var == 1 ? (size_t)(o / 128) * ql_round4(kb) + kk / 128
                          : (size_t)(kk / 128) * ql_round4(ob) + o / 128;
    default: return 0;
    }
    (void)kb, (void)ob;
}

static const char *ql_mode_name(int mode) {
    switch (mode) {
    case CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F: return "per tensor";
    case CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F: return "per row";
    case CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F: return "per 1x128";
    case CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F: return "per 128x128";
    default: return "?";
    }
}

/* ---- kernels ----------------------------------------------------------- */

/* Per token (a group of all k columns, no static scale): one block per
 * row, 8 values a thread per 16-byte load (k % 16 == 0 on this path); the
 * row's absolute maximum makes its scale (max / 448), and the values are
 * rounded to e4m3 on a second read of the row (from L1 / L2). */
template <typename T>
__global__ void __launch_bounds__(QL_THREADS)
ql_quant_act(__nv_fp8_e4m3 *q, float *scale, const T *x, int m, int k, int mode, int var) {
    __shared__ float red[32];
    const int row = blockIdx.x, k8 = k / 8;
    const uint4 *xr = (const uint4 *)(x + (size_t)row * k);
    float amax = 0;
    for (int i = threadIdx.x; i < k8; i += blockDim.x) {
        const uint4 raw = xr[i];
        const T *e = (const T *)&raw;
#pragma unroll
        for (int j = 0; j < 8; j++) amax = fmaxf(amax, fabsf(ld(e + j)));
    }
    int lane = threadIdx.x & 31;
    amax = warp_max(amax);
    if (lane == 0) red[threadIdx.x >> 5] = amax;
    __syncthreads();
    amax = warp_max(lane < (int)(blockDim.x >> 5) ? red[lane] : 0.0f);  /* every warp */
    float inv, s = fp8_scale_of(amax, &inv);
    if (threadIdx.x == 0) scale[ql_scale_at(mode, var, m, k, row, 0)] = s;
    uint2 *qr = (uint2 *)(q + (size_t)row * k);
    for (int i = threadIdx.x; i < k8; i += blockDim.x) {
        const uint4 raw = xr[i];
        const T *e = (const T *)&raw;
        float v[8];
#pragma unroll
        for (int j = 0; j < 8; j++) v[j] = ld(e + j);
        qr[i] = fp8_e4m3x8(v, inv);
    }
}

/* Where the 1x128 quantizer's values come from: x itself, or SwiGLU's
 * output made from gate_up (rows of [gate | up], k each) and rounded to T
 * as cuda_swiglu stores it, so the bytes are the same as quantizing that. */
template <typename T> struct QlFromX {
    const T *x;
    __device__ void load8(int row, int col, int k, float *v) const {
        const uint4 raw = *(const uint4 *)(x + (size_t)row * k + col);
        const T *e = (const T *)&raw;
#pragma unroll
        for (int i = 0; i < 8; i++) v[i] = ld(e + i);
    }
};
template <typename T> struct QlFromSwiglu {
    const T *gate_up;
    __device__ void load8(int row, int col, int k, float *v) const {
        const T *g = gate_up + (size_t)row * 2 * k + col;
        const uint4 graw = *(const uint4 *)g, uraw = *(const uint4 *)(g + k);
        const T *ge = (const T *)&graw, *ue = (const T *)&uraw;
#pragma unroll
        for (int i = 0; i < 8; i++) {
            T h;
            st(&h, silu_mul(ld(ge + i), ld(ue + i)));
            v[i] = ld(&h);
        }
    }
};

/* Groups of 128 columns (Qwen's 1x128 activation scales) or a static
 * scale: a half-warp per (row, 128 columns), eight values per lane from one
 * 16-byte load held in registers, so the input is read once (a block per
 * group, as per token above, left the down projection's input, 8,192 x
 * 18,944, at ~0.6 TB/s: kernels/PERF.md, "FP8 prefill"; a warp per group
 * with 8-byte loads at ~1.4 TB/s, v45).  Each half-warp takes QL_GROUPS
 * groups a grid's width apart, every load issued before any value is used,
 * so more bytes are in flight than one short-lived group a lane keeps
 * (v46).  k % 16 == 0 on this path, so a lane's eight values are all inside
 * the row or all past it.  The scales' place is linear in (row, group): two
 * strides from ql_scale_at, so the kernel holds one copy of its loop, not
 * one per layout. */
#define QL_GROUPS 2
template <typename T, typename Src>
__global__ void __launch_bounds__(256)
ql_quant_act128(__nv_fp8_e4m3 *q, float *scale, Src src, int m, int k,
                const float *static_scale, size_t row_stride, size_t block_stride) {
    const int lane = threadIdx.x & 15, groups = (k + 127) / 128;
    const size_t first = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) >> 4,
                 apart = (size_t)gridDim.x * blockDim.x >> 4, n = (size_t)m * groups;
    float v[QL_GROUPS][8];
#pragma unroll
    for (int u = 0; u < QL_GROUPS; u++) {
        const size_t gi = first + u * apart;
        const int row = (int)(gi / groups), col = (int)(gi % groups) * 128 + 8 * lane;
#pragma unroll
        for (int i = 0; i < 8; i++) v[u][i] = 0;
        if (gi < n && col < k) src.load8(row, col, k, v[u]);
    }
#pragma unroll
    for (int u = 0; u < QL_GROUPS; u++) {
        const size_t gi = first + u * apart;
        const bool live = gi < n;    /* the whole half-warp alike; the shuffles take both */
        const int row = (int)(gi / groups), k0 = (int)(gi % groups) * 128, col = k0 + 8 * lane;
        float inv;
        const float s = fp8_group128_scale(v[u], static_scale, &inv);
        if (!static_scale && live && lane == 0) scale[row * row_stride + (k0 / 128) * block_stride] = s;
        if (live && col < k) *(uint2 *)(q + (size_t)row * k + col) = fp8_e4m3x8(v[u], inv);
    }
}

/* ---- state, workspace, plans ------------------------------------------- */

static rlQlState *ql_state(rlCuda *c) {
    if (!c->ql) c->ql = (rlQlState *)calloc(1, sizeof(rlQlState));
    return c->ql;
}

static void ql_plan_destroy(qlPlan *p) {
    if (p->desc) cublasLtMatmulDescDestroy(p->desc);
    if (p->a) cublasLtMatrixLayoutDestroy(p->a);
    if (p->b) cublasLtMatrixLayoutDestroy(p->b);
    if (p->c) cublasLtMatrixLayoutDestroy(p->c);
}

void cuda_qlinear_free(rlCuda *c) {
    if (!c->ql) return;
    for (int i = 0; i < c->ql->n_plans; i++) ql_plan_destroy(&c->ql->plans[i]);
    cudaFree(c->ql->ws);
    free(c->ql);
    c->ql = NULL;
}

/* The workspace, grown outside captures only (a captured shape ran eagerly first). */
static char *ql_ws(rlCuda *c, size_t bytes, const char *op) {
    rlQlState *q = c->ql;
    return cuda_grow(c, &q->ws, &q->ws_cap, bytes, 0, op) ? NULL : (char *)q->ws;
}

static size_t ql_align(size_t b) { return (b + 255) & ~(size_t)255; }

int cuda_qlinear_reserve(rlCuda *c, int rows) {
    rlQlState *q = c->ql;
    if (!q || !q->max_nk) return 0;
    return ql_ws(c, rl_quant_scratch_bytes(q->max_nk, q->max_k, q->w8a8, rows), "reserve") ? 0 : -1;
}

/* The FP8 plan for this shape and pair of modes; NULL when cuBLASLt has none
 * (quiet: the caller decides what that means). */
static qlPlan *ql_plan(rlCuda *c, rlDtype dt, int rows, int n, int k, int bias, int a_mode,
                       int b_mode) {
    rlQlState *q = c->ql;
    for (int i = 0; i < q->n_plans; i++) {
        qlPlan *p = &q->plans[i];
        if (p->rows == rows && p->n == n && p->k == k && p->bias == bias &&
            p->a_mode == a_mode && p->b_mode == b_mode)
            return p;
    }
    if (q->n_plans == QL_PLANS) {
        for (int i = 0; i < q->n_plans; i++) ql_plan_destroy(&q->plans[i]);
        q->n_plans = 0;
    }
    qlPlan p;
    memset(&p, 0, sizeof p);
    p.rows = rows, p.n = n, p.k = k, p.bias = bias, p.a_mode = a_mode, p.b_mode = b_mode;
    cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
    cudaDataType_t ot = cuda_lt_type(dt);
    int32_t am = a_mode, bm = b_mode;
    cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_BIAS;
    /* Scale pointers set before the heuristic, as NVIDIA's FP8 sample does
     * (any device address: the heuristic reads none); the modes only when
     * not the default (one scalar). */
    const void *any = c->lt_ws;
    const char *step = "creating the descriptors";
    cublasStatus_t st = cublasLtMatmulDescCreate(&p.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F);
    if (!st) st = cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta);
    if (!st) st = cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb);
    if (!st) st = cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &any, sizeof any);
    if (!st) st = cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &any, sizeof any);
    if (!st && am != CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F)
        step = "setting the weights' scale mode",
        st = cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &am, sizeof am);
    if (!st && bm != CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F)
        step = "setting the activations' scale mode",
        st = cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &bm, sizeof bm);
    if (!st && bias)
        step = "setting the bias epilogue",
        st = cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi);
    if (!st) step = "creating the layouts", st = cublasLtMatrixLayoutCreate(&p.a, CUDA_R_8F_E4M3, k, n, k);
    if (!st) st = cublasLtMatrixLayoutCreate(&p.b, CUDA_R_8F_E4M3, k, rows, k);
    if (!st) st = cublasLtMatrixLayoutCreate(&p.c, ot, n, rows, n);
    cublasLtMatmulPreference_t pref = NULL;
    cublasLtMatmulHeuristicResult_t h;
    int found = 0;
    if (!st) step = "the heuristic", st = cublasLtMatmulPreferenceCreate(&pref);
    if (!st)
        st = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                  &c->lt_ws_bytes, sizeof c->lt_ws_bytes);
    if (!st) st = cublasLtMatmulAlgoGetHeuristic(c->lt, p.desc, p.a, p.b, p.c, p.c, pref, 1, &h, &found);
    if (pref) cublasLtMatmulPreferenceDestroy(pref);
    if (st || found < 1) {
        snprintf(q->why, sizeof q->why, "%s (%d x %d x %d): %s", step, rows, n, k,
                 st ? cublasGetStatusString(st) : "no algorithm found");
        ql_plan_destroy(&p);
        return NULL;
    }
    p.algo = h.algo;
    q->plans[q->n_plans] = p;
    return &q->plans[q->n_plans++];
}

/* e4m3 activations (a8, with scales) times e4m3 weights (w8, scales in
 * cuBLASLt's layout) into out; 0 when cuBLASLt ran it. */
static int ql_fp8_gemm(rlCuda *c, rlDtype dt, void *out, const void *a8, const float *a_scale,
                       const void *w8, const float *w_scale, const void *bias, int rows, int n,
                       int k, int a_mode, int b_mode) {
    qlPlan *p = ql_plan(c, dt, rows, n, k, bias != NULL, a_mode, b_mode);
    if (!p) return -1;
    if (cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &w_scale,
                                       sizeof w_scale) ||
        cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &a_scale,
                                       sizeof a_scale) ||
        (bias && cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias,
                                                sizeof bias)))
        return -1;
    float alpha = 1.0f, beta = 0.0f;
    cublasStatus_t st = cublasLtMatmul(c->lt, p->desc, &alpha, w8, p->a, a8, p->b, &beta, out,
                                       p->c, out, p->c, &p->algo, c->lt_ws, c->lt_ws_bytes,
                                       c->stream);
    if (st) snprintf(c->ql->why, sizeof c->ql->why, "cublasLtMatmul: %s", cublasGetStatusString(st));
    return st ? -1 : 0;
}

/* The activations' e4m3 values and scales: of x (rows x k), or with
 * gate_up set of swiglu(gate_up) instead (groups of 128 or a static scale
 * only, as ql_matmul asks). */
template <typename T>
static void ql_quant_act_launch(rlCuda *c, void *q, float *scale, const void *x,
                                const void *gate_up, int m, int k, int group,
                                const float *static_scale, int mode, int var) {
    if (group == 128 || static_scale) {
        const unsigned blocks =
            (unsigned)(((size_t)m * ql_ceil(k, 128) + 16 * QL_GROUPS - 1) / (16 * QL_GROUPS));
        const size_t rs = ql_scale_at(mode, var, m, k, 1, 0) - ql_scale_at(mode, var, m, k, 0, 0),
                     bs = ql_scale_at(mode, var, m, k, 0, 128) - ql_scale_at(mode, var, m, k, 0, 0);
        auto launch = [&](auto src) {
            ql_quant_act128<T><<<blocks, 256, 0, c->stream>>>((__nv_fp8_e4m3 *)q, scale, src, m, k,
                                                             static_scale, rs, bs);
        };
        if (gate_up) launch(QlFromSwiglu<T>{(const T *)gate_up});
        else launch(QlFromX<T>{(const T *)x});
        return;
    }
    ql_quant_act<T><<<(unsigned)m, QL_THREADS, 0, c->stream>>>((__nv_fp8_e4m3 *)q, scale,
                                                                (const T *)x, m, k, mode, var);
}

static void ql_quant_act_run(rlCuda *c, rlDtype dt, void *q, float *scale, const void *x,
                             const void *gate_up, int m, int k, int group,
                             const float *static_scale, int mode, int var) {
    if (dt == RL_F16)
        ql_quant_act_launch<f16>(c, q, scale, x, gate_up, m, k, group, static_scale, mode, var);
    else
        ql_quant_act_launch<bf16>(c, q, scale, x, gate_up, m, k, group, static_scale, mode, var);
}

/* ---- the probe ----------------------------------------------------------- */

static float ql_e4m3(uint8_t v) { return rl_fp8_e4m3(v); }

/* One candidate layout pair on a small product (n 256 x k 384 x m rows, so
 * padding and transposition both show), checked against the host: 0 when
 * right, 1 when wrong, -1 when cuBLASLt refuses the pair. */
static int ql_probe_one(rlCuda *c, int a_mode, int b_mode, int a_var, int b_var, int m) {
    const int n = 256, k = 384;
    size_t na = ql_scale_count(a_mode, a_var, n, k), nb = ql_scale_count(b_mode, b_var, m, k);
    uint8_t *w8 = (uint8_t *)malloc((size_t)n * k), *a8 = (uint8_t *)malloc((size_t)m * k);
    float *ws = (float *)calloc(na, sizeof(float)), *as = (float *)calloc(nb, sizeof(float));
    bf16 *x = (bf16 *)malloc((size_t)m * k * sizeof(bf16)), *y = (bf16 *)malloc((size_t)m * n * sizeof(bf16));
    float in_scale = 0.05f;
    int rc = -1;
    void *d = NULL;
    size_t off_w = 0, off_ws = ql_align((size_t)n * k), off_x = off_ws + ql_align(na * 4),
           off_a = off_x + ql_align((size_t)m * k * 2), off_as = off_a + ql_align((size_t)m * k),
           off_y = off_as + ql_align(nb * 4 + 4), total = off_y + ql_align((size_t)m * n * 2);
    if (!w8 || !a8 || !ws || !as || !x || !y || cudaMalloc(&d, total) != cudaSuccess) goto done;
    {
        uint64_t r = 0x9e3779b97f4a7c15ull;
        for (size_t i = 0; i < (size_t)n * k; i++) {
            r = r * 6364136223846793005ull + 1442695040888963407ull;
            uint8_t v = (uint8_t)(r >> 56);
            w8[i] = (v & 0x7f) == 0x7f ? 0x38 : v & 0xbf;     /* |w| < 2, never NaN */
        }
        for (size_t i = 0; i < na; i++) ws[i] = 0.5f + 0.01f * (float)(i % 97);
        for (size_t i = 0; i < (size_t)m * k; i++) {
            r = r * 6364136223846793005ull + 1442695040888963407ull;
            x[i] = __float2bfloat16((float)((double)(r >> 11) / 9007199254740992.0 - 0.5) *
                                    (1.0f + (float)(i / k)));
        }
        char *dp = (char *)d;
        const float *d_static = NULL;
        if (b_mode == CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F) {
            d_static = (const float *)(dp + off_as + nb * 4);
            cudaMemcpy(dp + off_as + nb * 4, &in_scale, 4, cudaMemcpyHostToDevice);
        }
        cudaMemcpy(dp + off_w, w8, (size_t)n * k, cudaMemcpyHostToDevice);
        cudaMemcpy(dp + off_ws, ws, na * 4, cudaMemcpyHostToDevice);
        cudaMemcpy(dp + off_x, x, (size_t)m * k * 2, cudaMemcpyHostToDevice);
        int group = b_mode == CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F ? 128 : k;
        ql_quant_act_run(c, RL_BF16, dp + off_a, (float *)(dp + off_as), dp + off_x, NULL, m, k,
                         group, d_static, b_mode, b_var);
        if (ql_fp8_gemm(c, RL_BF16, dp + off_y, dp + off_a,
                        d_static ? d_static : (const float *)(dp + off_as), dp + off_w,
                        (const float *)(dp + off_ws), NULL, m, n, k, a_mode, b_mode)) {
            cudaGetLastError();
            goto done;
        }
        if (cudaStreamSynchronize(c->stream) != cudaSuccess ||
            cudaMemcpy(a8, dp + off_a, (size_t)m * k, cudaMemcpyDeviceToHost) != cudaSuccess ||
            cudaMemcpy(as, dp + off_as, nb * 4, cudaMemcpyDeviceToHost) != cudaSuccess ||
            cudaMemcpy(y, dp + off_y, (size_t)m * n * 2, cudaMemcpyDeviceToHost) != cudaSuccess) {
            cudaGetLastError();
            goto done;
        }
        double worst = 0, big = 0;
        for (int i = 0; i < m; i++)
            for (int j = 0; j < n; j++) {
                double ref = 0;
                for (int kk = 0; kk < k; kk++) {
                    double sa = d_static ? in_scale : as[ql_scale_at(b_mode, b_var, m, k, i, kk)];
                    double sw = ws[ql_scale_at(a_mode, a_var, n, k, j, kk)];
                    ref += (double)ql_e4m3(a8[(size_t)i * k + kk]) * sa *
                           ql_e4m3(w8[(size_t)j * k + kk]) * sw;
                }
                worst = fmax(worst, fabs(ref - (double)__bfloat162float(y[(size_t)i * n + j])));
                big = fmax(big, fabs(ref));
            }
        rc = worst <= 1e-2 * big + 1e-3 ? 0 : 1;
    }
done:
    cudaFree(d);
    free(w8), free(a8), free(ws), free(as), free(x), free(y);
    return rc;
}

/* Whether the pair of modes runs here, and with which layouts (tried once). */
static const qlProbe *ql_probe(rlCuda *c, int a_mode, int b_mode) {
    qlProbe *p = &c->ql->probe[a_mode][b_mode];
    if (p->state) return p;
    p->state = -1;
    int wrong = 0;
    for (int av = 0; av < ql_variants(a_mode) && p->state < 0; av++)
        for (int bv = 0; bv < ql_variants(b_mode) && p->state < 0; bv++) {
            int r = ql_probe_one(c, a_mode, b_mode, av, bv, 32);
            if (r < 0) goto out;         /* refused: no layout will help */
            if (r == 0) p->state = 1, p->a_var = av, p->b_var = bv;
            else wrong = 1;
        }
    /* Rows that are not a multiple of 16 (prefill chunks): some kernels
     * want them aligned; those steps then take the 16-bit path. */
    if (p->state > 0 && ql_probe_one(c, a_mode, b_mode, p->a_var, p->b_var, 18) != 0)
        p->rows16 = 1;
out:
    fprintf(stderr, "redlm: CUDA device %d: FP8 W8A8 with weights scaled %s and activations %s: "
            "%s%s%s\n", c->device, ql_mode_name(a_mode), ql_mode_name(b_mode),
            p->state > 0 ? p->rows16 ? "cuBLASLt runs it for multiples of 16 rows (prefill takes "
                                       "FP8 tensor cores; other row counts W8A16)"
                                     : "cuBLASLt runs it (prefill takes FP8 tensor cores)"
            : wrong ? "cuBLASLt's results disagree with the host in every scale layout tried; "
                      "large batches dequantize to 16 bits instead (W8A16)"
                    : "cuBLASLt refuses it here; large batches dequantize to 16 bits instead "
                      "(W8A16)",
            p->state > 0 || wrong ? "" : " - ", p->state > 0 || wrong ? "" : c->ql->why);
    return p;
}

/* ---- the backend operations --------------------------------------------- */

/* The cuBLASLt scale modes for an FP8 layer's weight scales (-1: none fits). */
static int ql_weight_mode(const rlWqHost *h) {
    if (h->group_n == h->n && h->group_k == h->k) return CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F;
    if (h->group_n == 1 && h->group_k == h->k) return CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F;
    if (h->group_n == 1 && h->group_k == 128) return CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F;
    if (h->group_n == 128 && h->group_k == 128) return CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F;
    return -1;
}

void *cuda_upload_quant(rlBackend *be, const rlWqHost *h, float input_scale, size_t *bytes,
                        rlError *err) {
    rlCuda *c = cuda_of(be);
    cudaSetDevice(c->device);
    rlQLinear *w = (rlQLinear *)calloc(1, sizeof *w);
    if (!w || !ql_state(c)) {
        free(w);
        rl_error(err, RL_EMEMORY, "CUDA backend: out of host memory");
        return NULL;
    }
    w->n = h->n, w->k = h->k, w->type = h->type, w->group_n = h->group_n;
    w->group_k = h->group_k;
    char msg[RL_ERROR_LEN] = "";
    size_t held = 0;
    if (rl_wq_upload(h, c->stream, &w->wq, &held, msg, sizeof msg)) {
        rl_error(err, RL_EMODEL, "CUDA backend, device %d: a %d x %d %s layer: %s", c->device,
                 h->n, h->k, h->type == RL_WQ_FP8 ? "float8" : h->type == RL_WQ_INT4 ? "int4" : "int8",
                 msg);
        free(w);
        return NULL;
    }
    w->bytes = held;
    w->max_rows = rl_wq_max_rows(w->wq);
    /* FP8 on sm_89 / sm_90: W8A8 for large batches, when cuBLASLt does this pair. */
    int a_mode = h->type == RL_WQ_FP8 ? ql_weight_mode(h) : -1;
    int b_mode = input_scale > 0 ? CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F
                 : a_mode == CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F ||
                         a_mode == CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F
                     ? CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F
                     : CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F;
    const char *off = getenv("RL_CUDA_FP8_W8A8");
    if (a_mode >= 0 && c->arch.cc >= 89 && !c->arch.generic && !(off && !strcmp(off, "0")) &&
        h->k % 16 == 0 && h->n % 8 == 0) {
        const qlProbe *p = ql_probe(c, a_mode, b_mode);
        if (p->state > 0)
            w->w8a8 = 1 + p->rows16, w->a_mode = a_mode, w->b_mode = b_mode, w->a_var = p->a_var,
            w->b_var = p->b_var;
    }
    /* Decode: W8A8 in the GEMV itself, on the same terms. */
    if (a_mode >= 0 && c->arch.cc >= 89 && !c->arch.generic && !(off && !strcmp(off, "0")))
        w->a8_rows = rl_wq_a8_rows(w->wq);
    size_t ns = (size_t)ql_ceil(h->n, h->group_n) * ql_ceil(h->k, h->group_k);
    size_t nl = w->w8a8 ? ql_scale_count(w->a_mode, w->a_var, h->n, h->k) : 0;
    int same = w->w8a8 && nl == ns;   /* cuBLASLt reads the host layout itself? */
    for (size_t i = 0; same && i < ns; i++) {
        int r = (int)(i / ql_ceil(h->k, h->group_k)) * h->group_n;
        int kk = (int)(i % ql_ceil(h->k, h->group_k)) * h->group_k;
        same = ql_scale_at(w->a_mode, w->a_var, h->n, h->k, r, kk) == i;
    }
    size_t sbytes = ns * 4 + (w->w8a8 && !same ? nl * 4 : 0) + (input_scale > 0 ? 4 : 0);
    float *lt = NULL;
    if (h->type == RL_WQ_FP8) {
        /* FP8 layers keep their scales in the host layout too (cuBLASLt's
         * when they are the same), on every GPU, so the memory plan's count
         * holds whichever path runs. */
        if (cuda_check(c, cudaMalloc((void **)&w->scale, sbytes), "upload_quant")) goto fail;
        w->lt_scale = w->scale;
        if (w->w8a8 && !same) {
            w->lt_scale = w->scale + ns;
            if (!(lt = (float *)calloc(nl, sizeof(float)))) goto fail;
            int gk = ql_ceil(h->k, h->group_k);
            for (int r = 0; r < h->n; r++)
                for (int kk = 0; kk < h->k; kk += h->group_k)
                    lt[ql_scale_at(w->a_mode, w->a_var, h->n, h->k, r, kk)] =
                        h->scale[(size_t)(r / h->group_n) * gk + kk / h->group_k];
            if (cuda_check(c, cudaMemcpy(w->lt_scale, lt, nl * 4, cudaMemcpyHostToDevice),
                           "upload_quant"))
                goto fail;
            free(lt);
            lt = NULL;
        }
        if (cuda_check(c, cudaMemcpy(w->scale, h->scale, ns * 4, cudaMemcpyHostToDevice),
                       "upload_quant"))
            goto fail;
        if (input_scale > 0) {
            w->in_scale = w->scale + ns + (w->w8a8 && !same ? nl : 0);
            if (cuda_check(c, cudaMemcpy(w->in_scale, &input_scale, 4, cudaMemcpyHostToDevice),
                           "upload_quant"))
                goto fail;
        }
        w->act_group = w->b_mode == CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F ? 128 : h->k;
        w->bytes += sbytes;
    }
    /* The workspace a large batch dequantizes into, sized now (before the
     * memory plan counts what is free) for the largest layer; the model's
     * reserve adds its largest step's activations (cuda_qlinear_reserve). */
    if ((size_t)h->n * h->k > c->ql->max_nk) c->ql->max_nk = (size_t)h->n * h->k;
    if (w->w8a8 && h->k > c->ql->max_k) c->ql->max_k = h->k;
    c->ql->w8a8 |= w->w8a8 != 0;
    if (cuda_qlinear_reserve(c, 0)) goto fail;
    *bytes = w->bytes;
    return w;
fail:
    free(lt);
    rl_error(err, c->err.code ? c->err.code : RL_EMEMORY, "%s",
             c->err.code ? c->err.msg : "CUDA backend: out of host memory");
    memset(&c->err, 0, sizeof c->err);
    cuda_free_quant(be, w);
    return NULL;
}

void cuda_free_quant(rlBackend *be, void *p) {
    rlQLinear *w = (rlQLinear *)p;
    if (!w) return;
    (void)be;
    if (w->wq) rl_wq_free(w->wq);
    cudaFree(w->scale);
    free(w);
}

/* matmul_quant's product, or with gate_up set swiglu_matmul_quant's: in
 * is then swiglu(gate_up), made into mid unless W8A8 quantizes it straight
 * from gate_up (groups of 128 or a static scale: the per-token quantizer
 * reads its row twice, so it takes mid). */
static void ql_matmul(rlBackend *be, void *out, const void *in, void *mid, const void *gate_up,
                      const void *p, const void *bias, int rows, int n, int k) {
    rlCuda *c = cuda_of(be);
    const rlQLinear *w = (const rlQLinear *)p;
    rlDtype dt = be->act_dtype;
    if (!rows || !n || c->err.code != RL_OK) return;
    if (n != w->n || k != w->k) {
        cuda_fail(c, RL_EINTERNAL, "matmul_quant: a %d x %d product on a %d x %d layer", n, k,
                  w->n, w->k);
        return;
    }
    /* --batch-invariant: rl_wq_gemm sums by scale group in its own order and
     * W8A8 (through cuBLASLt's algorithms) takes only steps of 1,024 rows or
     * more, so a row's product would depend on its step's size; every step
     * dequantizes and takes the invariant GEMM (cuda_gemm) instead: a decode
     * step writes and reads each layer's 16-bit weights once more. */
    const int gemv = rows <= w->max_rows && !c->invariant;
    const int w8a8 = !gemv && !c->invariant && rows >= RL_QUANT_W8A8_MIN_ROWS &&
                     (w->w8a8 == 1 || (w->w8a8 == 2 && rows % 16 == 0));
    if (gate_up && !(w8a8 && (w->act_group == 128 || w->in_scale))) {
        cuda_swiglu(be, mid, gate_up, rows, k);
        in = mid, gate_up = NULL;
    }
    if (gemv) {
        /* The workspace, reserved at upload for the largest dequantized
         * layer, holds the split sums; nothing grows on this road. */
        const int a8 = rows <= w->a8_rows;
        PROF(c, a8 ? "wq gemm a8 %dx%d" : "wq gemm %dx%d", n, k);
        if (a8 ? rl_wq_gemm_a8(w->wq, dt, in, k, out, n, bias, rows, w->in_scale, c->arch.pdl, c->stream)
               : rl_wq_gemm(w->wq, dt, in, k, out, n, bias, rows, c->ql->ws, c->ql->ws_cap,
                            c->arch.pdl, c->stream)) {
            cuda_fail(c, RL_EDEVICE, "matmul_quant: the quantized kernel refused %d rows of a "
                      "%d x %d layer", rows, n, k);
            return;
        }
        cuda_launched(c, "matmul_quant");
        return;
    }
    if (!w8a8) {
        char *ws = ql_ws(c, (size_t)n * k * 2, "matmul_quant");
        if (!ws) return;
        PROF(c, "wq dequant %dx%d", n, k);
        if (rl_wq_dequant(w->wq, dt, ws, c->stream)) {
            cuda_fail(c, RL_EDEVICE, "matmul_quant: dequantizing a %d x %d layer failed", n, k);
            return;
        }
        cuda_gemm(c, dt, out, in, ws, bias, rows, n, k, 0, "matmul_quant");
        return;
    }
    size_t w8b = ql_align((size_t)n * k), a8b = ql_align((size_t)rows * k);
    size_t asb = ql_align(ql_scale_count(w->b_mode, w->b_var, rows, k) * 4);
    char *w8 = ql_ws(c, w8b + a8b + asb, "matmul_quant");
    if (!w8) return;
    char *a8 = w8 + w8b;
    float *as = (float *)(a8 + a8b);
    PROF(c, "fp8 weights %dx%d", n, k);
    if (rl_wq_fp8_values(w->wq, w8, c->stream)) {
        cuda_fail(c, RL_EDEVICE, "matmul_quant: the e4m3 values of a %d x %d layer failed", n, k);
        return;
    }
    PROF(c, gate_up ? "swiglu + fp8 quantize %dx%d" : "fp8 quantize %dx%d", n, k);
    ql_quant_act_run(c, dt, a8, as, in, gate_up, rows, k, w->act_group, w->in_scale, w->b_mode,
                     w->b_var);
    if (cuda_check(c, cudaGetLastError(), "matmul_quant")) return;
    PROF(c, "fp8 gemm %dx%d", n, k);
    if (ql_fp8_gemm(c, dt, out, a8, w->in_scale ? w->in_scale : as, w8, w->lt_scale, bias, rows,
                    n, k, w->a_mode, w->b_mode))
        cuda_fail(c, RL_EDEVICE, "matmul_quant (%d x %d x %d): cuBLASLt's FP8 GEMM failed "
                  "(RL_CUDA_FP8_W8A8=0 takes the 16-bit path)", rows, n, k);
}

void cuda_matmul_quant(rlBackend *be, void *out, const void *in, const void *w, const void *bias,
                       int rows, int n, int k) {
    ql_matmul(be, out, in, NULL, NULL, w, bias, rows, n, k);
}

void cuda_swiglu_matmul_quant(rlBackend *be, void *out, void *mid, const void *gate_up,
                              const void *w, const void *bias, int rows, int n, int k) {
    ql_matmul(be, out, mid, mid, gate_up, w, bias, rows, n, k);
}
