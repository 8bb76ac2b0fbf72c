/* gemm.cu: the model's matrix products through cuBLASLt.
 *
 * out[rows, n] = in[rows, k] . w[n, k]^T (+ bias[n]): in cuBLAS's column-major
 * terms D(n x rows) = W^T(n x k) . In(k x rows), so A = w transposed and the
 * bias is the epilogue's per-row vector.  fp32 accumulation; the LM head
 * writes fp32.  A shape's descriptors and chosen algorithm are kept, so the
 * heuristic runs once per shape rather than once per call (and a captured
 * graph replays the same algorithm).  Shapes of up to GEMM_TUNE_ROWS rows
 * (decode batches, where cuBLASLt's first guess is often far from the best)
 * time the heuristic's candidates once, on the call's own buffers, and keep
 * the fastest.  The heuristic and the timing hold a 7B decode step up by
 * ~65 ms, and continuous batching meets a new row count at almost every
 * change of the running set, so only the first shape of each row bucket
 * (rl_batch_bucket: 16, 24, 32, 48 ... 256) is timed; the others take its
 * winner once cuBLASLt confirms the algorithm fits their shape.  (Decode
 * steps are padded to those buckets, model.c; prefill remainders and mixed
 * steps are not.)
 *
 * Up to 8 rows (decode at small batch) the product is a matrix-vector one,
 * bound by reading the weights; cuBLASLt's kernels for that shape leave much
 * of the bandwidth unused, so gemv_kernel (cuda_gemv.cuh) does it.
 *
 * --batch-invariant (rlCuda.invariant): the GEMV, cuBLASLt's algorithms (one
 * per row bucket, split-K and stream-K among them) and their choice by row
 * count each sum k in their own order, so a row's product would depend on
 * how many rows share its step.  Then every product takes one kernel,
 * tile_gemm_kernel (cuda_tile_gemm.cuh, moe.cu's grouped GEMM with a dense
 * tile list): one fixed chain of mma steps over k per output element, no
 * split, whatever the row count. */
#include <string.h>

#include "kernels/cuda/cuda_internal.h"
#include "kernels/cuda/cuda_gemv.cuh"
#include "kernels/cuda/cuda_tile_gemm.cuh"

#define GEMM_TUNE_ROWS 256
#define GEMM_CANDIDATES 24

/* The fastest of the candidates on these buffers (index into h), timed over
 * three runs each after a warm-up; -1 when timing is not possible. */
static int gemm_tune(rlCuda *c, rlGemmAlgo *g, const cublasLtMatmulHeuristicResult_t *h,
                     int found, void *out, const void *in, const void *w) {
    cudaEvent_t e0, e1;
    if (cudaEventCreate(&e0) != cudaSuccess) return -1;
    if (cudaEventCreate(&e1) != cudaSuccess) {
        cudaEventDestroy(e0);
        return -1;
    }
    float alpha = 1.0f, beta = 0.0f, best_ms = 1e30f;
    int best = 0;
    for (int i = 0; i < found; i++) {
        if (h[i].state != CUBLAS_STATUS_SUCCESS) continue;
        cublasStatus_t st = CUBLAS_STATUS_SUCCESS;
        for (int rep = 0; rep < 4 && st == CUBLAS_STATUS_SUCCESS; rep++) {
            if (rep == 1) cudaEventRecord(e0, c->stream);
            st = cublasLtMatmul(c->lt, g->desc, &alpha, w, g->a, in, g->b, &beta, out, g->c, out,
                                g->c, &h[i].algo, c->lt_ws, c->lt_ws_bytes, c->stream);
        }
        cudaEventRecord(e1, c->stream);
        float ms = 0;
        if (cudaEventSynchronize(e1) == cudaSuccess && st == CUBLAS_STATUS_SUCCESS &&
            cudaEventElapsedTime(&ms, e0, e1) == cudaSuccess && ms < best_ms)
            best_ms = ms, best = i;
    }
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    cudaGetLastError();
    return best;
}

/* ---- --batch-invariant: the tile GEMM (see the top of this file) ---- */

/* Up to this many rows (decode batches: one or two row tiles, so as few
 * blocks as the weights have 64-row tiles) the deep K loop, whose 7 steps
 * in flight per block stream the weights where few blocks share the GPU;
 * above it the 128 x 128 tile over 4 stages (prefill: half the shared-memory
 * reads per mma; 7B prefill 8 x 2,048 at 19.8k tok/s against the 64 x 64
 * tile's 10.6k on an H200, kernels/PERF.md v28).  Neither the loop nor the
 * tile changes an output element's chain of mma steps, so no bit;
 * RL_CUDA_TILE_PIPE forces one loop on the 64 x 64 tile everywhere, for the
 * tests that hold the tiles and loops to the same bits. */
#define GEMM_DEEP_ROWS 128

template <typename T, int E, int S, int BIG>
static void gemm_tile_launch(rlCuda *c, void *out, const void *in, const void *w,
                             const void *bias, int rows, int n, int k) {
    const dim3 grid((unsigned)((n + TG_COLS(BIG) - 1) / TG_COLS(BIG)),
                    (unsigned)((rows + TG_ROWS(BIG) - 1) / TG_ROWS(BIG)));
    tile_gemm_kernel<T, E, S, BIG><<<grid, TG_THREADS, TG_DYN_SMEM(S, BIG, T), c->stream>>>(
        out, (const T *)in, (const T *)w, (const T *)bias, NULL, NULL, NULL, 1, k, n, 0, rows);
}

template <typename T, int E>
static void gemm_invariant_launch(rlCuda *c, void *out, const void *in, const void *w,
                                  const void *bias, int rows, int n, int k) {
    const int pipe = tile_gemm_pipe_env();
    if (pipe == 0) gemm_tile_launch<T, E, 1, 0>(c, out, in, w, bias, rows, n, k);
    else if (pipe == TG_STAGES) gemm_tile_launch<T, E, TG_STAGES, 0>(c, out, in, w, bias, rows, n, k);
    else if (pipe > 0 || rows <= GEMM_DEEP_ROWS)
        gemm_tile_launch<T, E, TG_DEEP_STAGES, 0>(c, out, in, w, bias, rows, n, k);
    else gemm_tile_launch<T, E, TG_STAGES, 1>(c, out, in, w, bias, rows, n, k);
}

static void gemm_invariant(rlCuda *c, rlDtype wt, void *out, const void *in, const void *w,
                           const void *bias, int rows, int n, int k, int f32out,
                           const char *op) {
    if (k % 8 || (wt != RL_BF16 && wt != RL_F16) || (((uintptr_t)in | (uintptr_t)w) & 15) ||
        (rows + TG_BM - 1) / TG_BM > 65535) {
        cuda_fail(c, RL_EUSAGE, "%s: --batch-invariant's GEMM takes 16-bit weights, k a "
                  "multiple of 8, 16-byte aligned rows and at most %d rows; this %d x %d x %d "
                  "product does not fit: run it without --batch-invariant", op, 65535 * TG_BM,
                  rows, n, k);
        return;
    }
    PROF(c, "gemm invariant %dx%d%s", n, k, f32out ? " f32" : "");
    if (wt == RL_F16) {
        if (f32out) gemm_invariant_launch<f16, TG_F32>(c, out, in, w, NULL, rows, n, k);
        else gemm_invariant_launch<f16, TG_ACT>(c, out, in, w, bias, rows, n, k);
    } else {
        if (f32out) gemm_invariant_launch<bf16, TG_F32>(c, out, in, w, NULL, rows, n, k);
        else gemm_invariant_launch<bf16, TG_ACT>(c, out, in, w, bias, rows, n, k);
    }
    cuda_launched(c, op);
}

/* The dynamic shared memory of the deep loop and the big tile. */
template <typename T, int E> static cudaError_t gemm_invariant_allow_smem() {
    cudaError_t e = cudaFuncSetAttribute(tile_gemm_kernel<T, E, TG_DEEP_STAGES, 0>,
                                         cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         (int)TG_DYN_SMEM(TG_DEEP_STAGES, 0, T));
    if (e == cudaSuccess)
        e = cudaFuncSetAttribute(tile_gemm_kernel<T, E, TG_STAGES, 1>,
                                 cudaFuncAttributeMaxDynamicSharedMemorySize,
                                 (int)TG_DYN_SMEM(TG_STAGES, 1, T));
    return e;
}

/* Allowed once per device, outside any capture. */
static int gemm_invariant_init(rlCuda *c, rlError *err) {
    size_t need = TG_DYN_SMEM(TG_DEEP_STAGES, 0, bf16);
    if (TG_DYN_SMEM(TG_STAGES, 1, bf16) > need) need = TG_DYN_SMEM(TG_STAGES, 1, bf16);
    cudaError_t e = need > c->arch.smem_block ? cudaErrorInvalidValue : cudaSuccess;
    if (e == cudaSuccess) e = gemm_invariant_allow_smem<bf16, TG_F32>();
    if (e == cudaSuccess) e = gemm_invariant_allow_smem<bf16, TG_ACT>();
    if (e == cudaSuccess) e = gemm_invariant_allow_smem<f16, TG_F32>();
    if (e == cudaSuccess) e = gemm_invariant_allow_smem<f16, TG_ACT>();
    if (e != cudaSuccess)
        return rl_error(err, RL_EDEVICE,
                        "CUDA backend, device %d: --batch-invariant's GEMM needs %zu KiB of "
                        "shared memory per block (this GPU allows %zu KiB): %s", c->device,
                        need >> 10, c->arch.smem_block >> 10, cudaGetErrorString(e));
    return 0;
}

cudaDataType_t cuda_lt_type(rlDtype t) {
    return t == RL_F32 ? CUDA_R_32F : t == RL_F16 ? CUDA_R_16F : CUDA_R_16BF;
}

int cuda_gemm_init(rlCuda *c, rlError *err) {
    cublasStatus_t st = cublasLtCreate(&c->lt);
    if (st != CUBLAS_STATUS_SUCCESS)
        return rl_error(err, RL_EDEVICE, "CUDA backend, device %d: cuBLASLt did not start: %s",
                        c->device, cublasGetStatusString(st));
    c->lt_ws_bytes = (size_t)64 << 20;
    cudaError_t e = cudaMalloc(&c->lt_ws, c->lt_ws_bytes);
    if (e != cudaSuccess)
        return rl_error(err, RL_EMEMORY,
                        "CUDA backend, device %d: cannot allocate the GEMM workspace: %s",
                        c->device, cudaGetErrorString(e));
    return c->invariant ? gemm_invariant_init(c, err) : 0;
}

void cuda_gemm_free(rlCuda *c) {
    for (int i = 0; i < c->n_gemm; i++) {
        rlGemmAlgo *g = &c->gemm[i];
        cublasLtMatmulDescDestroy(g->desc);
        cublasLtMatrixLayoutDestroy(g->a);
        cublasLtMatrixLayoutDestroy(g->b);
        cublasLtMatrixLayoutDestroy(g->c);
    }
    c->n_gemm = 0;
    if (c->lt) cublasLtDestroy(c->lt);
    c->lt = NULL;
    cudaFree(c->lt_ws);
    c->lt_ws = NULL;
}

/* The winner timed on another shape of rows' bucket, if cuBLASLt accepts it
 * for g's layouts within the workspace. */
static int gemm_reuse_timed(rlCuda *c, rlGemmAlgo *g) {
    for (int i = 0; i < c->n_gemm; i++) {
        const rlGemmAlgo *t = &c->gemm[i];
        if (!t->timed || t->n != g->n || t->k != g->k || t->bias != g->bias ||
            t->f32out != g->f32out || rl_batch_bucket(t->rows) != rl_batch_bucket(g->rows))
            continue;
        cublasLtMatmulHeuristicResult_t r;
        if (cublasLtMatmulAlgoCheck(c->lt, g->desc, g->a, g->b, g->c, g->c, &t->algo, &r) ==
                CUBLAS_STATUS_SUCCESS &&
            r.workspaceSize <= c->lt_ws_bytes) {
            g->algo = t->algo;
            return 1;
        }
        return 0;
    }
    return 0;
}

/* The cached plan for this shape, made on first use; NULL after recording a failure. */
static rlGemmAlgo *gemm_plan(rlCuda *c, rlDtype wt, int rows, int n, int k, const void *bias,
                             int f32out, void *out, const void *in, const void *w) {
    for (int i = 0; i < c->n_gemm; i++) {
        rlGemmAlgo *g = &c->gemm[i];
        if (g->rows == rows && g->n == n && g->k == k && g->bias == (bias != NULL) &&
            g->f32out == f32out)
            return g;
    }
    /* A full cache drops its oldest half: shapes repeat step after step. */
    if (c->n_gemm == RL_CUDA_GEMM_CACHE) {
        int keep = RL_CUDA_GEMM_CACHE / 2;
        for (int i = 0; i < keep; i++) {
            rlGemmAlgo *g = &c->gemm[i];
            cublasLtMatmulDescDestroy(g->desc);
            cublasLtMatrixLayoutDestroy(g->a);
            cublasLtMatrixLayoutDestroy(g->b);
            cublasLtMatrixLayoutDestroy(g->c);
        }
        memmove(c->gemm, c->gemm + keep, (RL_CUDA_GEMM_CACHE - keep) * sizeof c->gemm[0]);
        c->n_gemm = RL_CUDA_GEMM_CACHE - keep;
    }
    rlGemmAlgo *g = &c->gemm[c->n_gemm];
    memset(g, 0, sizeof *g);
    g->rows = rows, g->n = n, g->k = k, g->bias = bias != NULL, g->f32out = f32out;
    cudaDataType_t ab = cuda_lt_type(wt), dt = f32out ? CUDA_R_32F : ab;
    cublasOperation_t tA = CUBLAS_OP_T, tB = CUBLAS_OP_N;
    cublasStatus_t st = cublasLtMatmulDescCreate(&g->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F);
    if (st == CUBLAS_STATUS_SUCCESS)
        st = cublasLtMatmulDescSetAttribute(g->desc, CUBLASLT_MATMUL_DESC_TRANSA, &tA, sizeof tA);
    if (st == CUBLAS_STATUS_SUCCESS)
        st = cublasLtMatmulDescSetAttribute(g->desc, CUBLASLT_MATMUL_DESC_TRANSB, &tB, sizeof tB);
    if (st == CUBLAS_STATUS_SUCCESS && bias) {
        cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_BIAS;
        st = cublasLtMatmulDescSetAttribute(g->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi,
                                            sizeof epi);
        if (st == CUBLAS_STATUS_SUCCESS)
            st = cublasLtMatmulDescSetAttribute(g->desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE,
                                                &ab, sizeof ab);
        if (st == CUBLAS_STATUS_SUCCESS)
            st = cublasLtMatmulDescSetAttribute(g->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER,
                                                &bias, sizeof bias);
    }
    if (st == CUBLAS_STATUS_SUCCESS) st = cublasLtMatrixLayoutCreate(&g->a, ab, k, n, k);
    if (st == CUBLAS_STATUS_SUCCESS) st = cublasLtMatrixLayoutCreate(&g->b, ab, k, rows, k);
    if (st == CUBLAS_STATUS_SUCCESS) st = cublasLtMatrixLayoutCreate(&g->c, dt, n, rows, n);
    if (st == CUBLAS_STATUS_SUCCESS && rows <= GEMM_TUNE_ROWS && gemm_reuse_timed(c, g)) {
        c->n_gemm++;
        return g;
    }
    cublasLtMatmulPreference_t pref = NULL;
    if (st == CUBLAS_STATUS_SUCCESS) st = cublasLtMatmulPreferenceCreate(&pref);
    if (st == CUBLAS_STATUS_SUCCESS)
        st = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                  &c->lt_ws_bytes, sizeof c->lt_ws_bytes);
    cublasLtMatmulHeuristicResult_t h[GEMM_CANDIDATES];
    int found = 0;
    if (st == CUBLAS_STATUS_SUCCESS)
        st = cublasLtMatmulAlgoGetHeuristic(c->lt, g->desc, g->a, g->b, g->c, g->c, pref,
                                            GEMM_CANDIDATES, h, &found);
    if (pref) cublasLtMatmulPreferenceDestroy(pref);
    if (st != CUBLAS_STATUS_SUCCESS || !found) {
        cuda_fail(c, RL_EDEVICE,
                  "cuBLASLt has no algorithm for a %s GEMM of %d x %d x %d%s%s: %s", 
                  rl_dtype_name(wt), rows, n, k, bias ? " with bias" : "",
                  f32out ? " (fp32 output)" : "",
                  st != CUBLAS_STATUS_SUCCESS ? cublasGetStatusString(st) : "none found");
        if (g->desc) cublasLtMatmulDescDestroy(g->desc);
        if (g->a) cublasLtMatrixLayoutDestroy(g->a);
        if (g->b) cublasLtMatrixLayoutDestroy(g->b);
        if (g->c) cublasLtMatrixLayoutDestroy(g->c);
        return NULL;
    }
    int pick = -1;
    if (found > 1 && rows <= GEMM_TUNE_ROWS && !c->capturing && c->err.code == RL_OK)
        pick = gemm_tune(c, g, h, found, out, in, w);
    g->timed = pick >= 0;
    g->algo = h[pick >= 0 ? pick : 0].algo;
    c->n_gemm++;
    return g;
}

/* k = 0 (a rank owning no heads or MLP columns): the product is the bias or zeros. */
template <typename T>
__global__ void gemm_empty_kernel(T *out, const T *bias, int rows, int n) {
    size_t total = (size_t)rows * n;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total;
         i += (size_t)gridDim.x * blockDim.x)
        out[i] = bias ? bias[i % n] : (T)0.0f;
}

/* out[r, c] = in[r, :] . w[c, :] (+ bias[c]) for rows <= R (cuda_gemv.cuh). */
template <typename T, typename O, int R>
__global__ void __launch_bounds__(GEMV_THREADS)
gemv_kernel(O *out, const T *in, const T *w, const T *bias, int rows, int n, int k) {
    gemv_block<T, O, R>(out, in, w, bias, rows, n, k);
}

template <typename T, typename O>
static void gemv_launch(rlCuda *c, O *out, const T *in, const T *w, const T *bias, int rows,
                        int n, int k, const char *op) {
    dim3 blocks((unsigned)((n + GEMV_COLS - 1) / GEMV_COLS));
    if (rows <= 1)
        cuda_launch_pdl(c, op, gemv_kernel<T, O, 1>, blocks, GEMV_THREADS, 0, out, in, w, bias,
                        rows, n, k);
    else if (rows <= 2)
        cuda_launch_pdl(c, op, gemv_kernel<T, O, 2>, blocks, GEMV_THREADS, 0, out, in, w, bias,
                        rows, n, k);
    else if (rows <= 4)
        cuda_launch_pdl(c, op, gemv_kernel<T, O, 4>, blocks, GEMV_THREADS, 0, out, in, w, bias,
                        rows, n, k);
    else
        cuda_launch_pdl(c, op, gemv_kernel<T, O, 8>, blocks, GEMV_THREADS, 0, out, in, w, bias,
                        rows, n, k);
}

/* The matrix-vector path when the shape allows it; 0 when it did not apply. */
static int gemv_run(rlCuda *c, rlDtype wt, void *out, const void *in, const void *w,
                    const void *bias, int rows, int n, int k, int f32out, const char *op) {
    if (rows > GEMV_MAX_ROWS || k % 8 || (wt != RL_BF16 && wt != RL_F16) ||
        (((uintptr_t)in | (uintptr_t)w) & 15))
        return 0;
    PROF(c, "gemv %dx%d%s", n, k, f32out ? " f32" : "");
    if (wt == RL_F16) {
        if (f32out) gemv_launch(c, (float *)out, (const f16 *)in, (const f16 *)w, (const f16 *)bias, rows, n, k, op);
        else gemv_launch(c, (f16 *)out, (const f16 *)in, (const f16 *)w, (const f16 *)bias, rows, n, k, op);
    } else {
        if (f32out) gemv_launch(c, (float *)out, (const bf16 *)in, (const bf16 *)w, (const bf16 *)bias, rows, n, k, op);
        else gemv_launch(c, (bf16 *)out, (const bf16 *)in, (const bf16 *)w, (const bf16 *)bias, rows, n, k, op);
    }
    return 1;
}

void cuda_gemm(rlCuda *c, rlDtype wt, void *out, const void *in, const void *w,
                     const void *bias, int rows, int n, int k, int f32out, const char *op) {
    if (!rows || !n || c->err.code != RL_OK) return;
    if (k == 0) {
        PROF(c, "gemm %dx0", n);
        unsigned blocks = (unsigned)(((size_t)rows * n + 255) / 256 < 65535 ? ((size_t)rows * n + 255) / 256 : 65535);
        if (f32out)
            gemm_empty_kernel<float><<<blocks, 256, 0, c->stream>>>((float *)out, NULL, rows, n);
        else if (wt == RL_F16)
            gemm_empty_kernel<__half><<<blocks, 256, 0, c->stream>>>((__half *)out, (const __half *)bias, rows, n);
        else
            gemm_empty_kernel<__nv_bfloat16><<<blocks, 256, 0, c->stream>>>(
                (__nv_bfloat16 *)out, (const __nv_bfloat16 *)bias, rows, n);
        cuda_launched(c, op);
        return;
    }
    if (c->invariant) {
        gemm_invariant(c, wt, out, in, w, bias, rows, n, k, f32out, op);
        return;
    }
    if (gemv_run(c, wt, out, in, w, bias, rows, n, k, f32out, op)) return;
    PROF(c, "gemm %dx%d%s", n, k, f32out ? " f32" : "");
    rlGemmAlgo *g = gemm_plan(c, wt, rows, n, k, bias, f32out, out, in, w);
    if (!g) return;
    if (bias) {
        cublasStatus_t st = cublasLtMatmulDescSetAttribute(
            g->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias);
        if (st != CUBLAS_STATUS_SUCCESS) {
            cuda_fail(c, RL_EDEVICE, "%s: cuBLASLt refused the bias: %s", op,
                      cublasGetStatusString(st));
            return;
        }
    }
    float alpha = 1.0f, beta = 0.0f;
    cublasStatus_t st = cublasLtMatmul(c->lt, g->desc, &alpha, w, g->a, in, g->b, &beta, out,
                                       g->c, out, g->c, &g->algo, c->lt_ws, c->lt_ws_bytes,
                                       c->stream);
    if (st != CUBLAS_STATUS_SUCCESS)
        cuda_fail(c, RL_EDEVICE, "%s (%d x %d x %d): cuBLASLt failed: %s", op, rows, n, k,
                  cublasGetStatusString(st));
}

void cuda_matmul(rlBackend *be, void *out, const void *in, const void *w, const void *bias,
                 int rows, int n, int k) {
    cuda_gemm(cuda_of(be), be->weight_dtype, out, in, w, bias, rows, n, k, 0, "matmul");
}

void cuda_matmul_f32(rlBackend *be, float *out, const void *in, const void *w, int rows, int n,
                     int k) {
    cuda_gemm(cuda_of(be), be->weight_dtype, out, in, w, NULL, rows, n, k, 1, "matmul_f32");
}
