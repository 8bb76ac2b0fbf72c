/* ceilings.cu: the two numbers every GPU benchmark is judged against,
 * measured in the same run: device-to-device copy bandwidth and the bf16
 * GEMM rate through cuBLASLt, on random data (zeros run faster), timed with
 * events after warm-up, median of repeats. */
#include <stdlib.h>

#include "kernels/cuda/cuda_internal.h"

#define CEIL_REPS 15

static int cmp_float(const void *a, const void *b) {
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

/* Median milliseconds of CEIL_REPS runs of fn (after two warm-ups). */
template <typename F> static float time_median(cudaStream_t st, F fn) {
    cudaEvent_t e0, e1;
    cudaEventCreate(&e0);
    cudaEventCreate(&e1);
    float ms[CEIL_REPS];
    fn();
    fn();
    for (int i = 0; i < CEIL_REPS; i++) {
        cudaEventRecord(e0, st);
        fn();
        cudaEventRecord(e1, st);
        cudaEventSynchronize(e1);
        cudaEventElapsedTime(&ms[i], e0, e1);
    }
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    qsort(ms, CEIL_REPS, sizeof ms[0], cmp_float);
    return ms[CEIL_REPS / 2];
}

extern "C" int rl_cuda_ceilings(int device, double *copy_bytes_per_s, double *gemm_flops,
                                rlError *err) {
    rlBackendOptions opt = {0, device, RL_BF16, 0, 0, 0};
    rlBackend *be = rl_backend_cuda_create(&opt, err);
    if (!be) return -1;
    rlCuda *c = cuda_of(be);
    const size_t copy_bytes = (size_t)2 << 30;
    const int N = 8192;
    void *src = be->ops->alloc(be, copy_bytes, err), *dst = src ? be->ops->alloc(be, copy_bytes, err) : NULL;
    if (!dst) goto fail;
    if (be->ops->fill_random(be, src, RL_BF16, copy_bytes / 2, 1, 1.0f, err)) goto fail;
    {
        float ms = time_median(c->stream, [&] {
            cudaMemcpyAsync(dst, src, copy_bytes, cudaMemcpyDeviceToDevice, c->stream);
        });
        *copy_bytes_per_s = 2.0 * copy_bytes / (ms * 1e-3);
        /* The GEMM reuses the copy buffers: 3 x 128 MiB operands fit in either. */
        char *a = (char *)src, *b = a + (size_t)N * N * 2;
        char *d = (char *)dst;
        ms = time_median(c->stream, [&] { cuda_matmul(be, d, a, b, NULL, N, N, N); });
        *gemm_flops = 2.0 * N * N * (double)N / (ms * 1e-3);
    }
    if (be->ops->sync(be, err)) goto fail;
    be->ops->free(be, src);
    be->ops->free(be, dst);
    be->ops->destroy(be);
    return 0;
fail:
    if (src) be->ops->free(be, src);
    if (dst) be->ops->free(be, dst);
    be->ops->destroy(be);
    return rl_error_wrap(err, "measuring the GPU's ceilings");
}
