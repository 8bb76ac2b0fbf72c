/* gemm.cu: the model's matrix products through cuBLASLt.
 *
 * out[rows, n] = in[rows, k] . w[n, k]^T (+ bias[n]): in cuBLAS's column-major
 * terms D(n x rows) = W^T(n x k) . In(k x rows), so A = w transposed and the
 * bias is the epilogue's per-row vector.  fp32 accumulation; the LM head
 * writes fp32.  A shape's descriptors and chosen algorithm are kept, so the
 * heuristic runs once per shape rather than once per call (and a captured
 * graph replays the same algorithm). */
#include <string.h>

#include "cuda_internal.h"

static cudaDataType_t lt_type(rlDtype t) {
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
    return 0;
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

/* The cached plan for this shape, made on first use; NULL after recording a failure. */
static rlGemmAlgo *gemm_plan(rlCuda *c, rlDtype wt, int rows, int n, int k, int bias,
                             int f32out) {
    for (int i = 0; i < c->n_gemm; i++) {
        rlGemmAlgo *g = &c->gemm[i];
        if (g->rows == rows && g->n == n && g->k == k && g->bias == bias && g->f32out == f32out)
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
    g->rows = rows, g->n = n, g->k = k, g->bias = bias, g->f32out = f32out;
    cudaDataType_t ab = lt_type(wt), dt = f32out ? CUDA_R_32F : ab;
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
    }
    if (st == CUBLAS_STATUS_SUCCESS) st = cublasLtMatrixLayoutCreate(&g->a, ab, k, n, k);
    if (st == CUBLAS_STATUS_SUCCESS) st = cublasLtMatrixLayoutCreate(&g->b, ab, k, rows, k);
    if (st == CUBLAS_STATUS_SUCCESS) st = cublasLtMatrixLayoutCreate(&g->c, dt, n, rows, n);
    cublasLtMatmulPreference_t pref = NULL;
    if (st == CUBLAS_STATUS_SUCCESS) st = cublasLtMatmulPreferenceCreate(&pref);
    if (st == CUBLAS_STATUS_SUCCESS)
        st = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                  &c->lt_ws_bytes, sizeof c->lt_ws_bytes);
    cublasLtMatmulHeuristicResult_t h;
    int found = 0;
    if (st == CUBLAS_STATUS_SUCCESS)
        st = cublasLtMatmulAlgoGetHeuristic(c->lt, g->desc, g->a, g->b, g->c, g->c, pref, 1, &h,
                                            &found);
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
    g->algo = h.algo;
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

static void gemm_run(rlCuda *c, rlDtype wt, void *out, const void *in, const void *w,
                     const void *bias, int rows, int n, int k, int f32out, const char *op) {
    if (!rows || !n || c->err.code != RL_OK) return;
    if (k == 0) {
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
    rlGemmAlgo *g = gemm_plan(c, wt, rows, n, k, bias != NULL, f32out);
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
    gemm_run(cuda_of(be), be->weight_dtype, out, in, w, bias, rows, n, k, 0, "matmul");
}

void cuda_matmul_f32(rlBackend *be, float *out, const void *in, const void *w, int rows, int n,
                     int k) {
    gemm_run(cuda_of(be), be->weight_dtype, out, in, w, NULL, rows, n, k, 1, "matmul_f32");
}
