/* nocuda.c: the CUDA backend's entry point in a build without nvcc,
 * so `--backend cuda` explains itself instead of failing to link. */
#include "kernels/backend.h"

rlBackend *rl_backend_cuda_create(const rlBackendOptions *opt, rlError *err) {
    (void)opt;
    rl_error(err, RL_EDEVICE,
             "this redlm was built without CUDA (no nvcc was found at build time). "
             "Install the CUDA Toolkit, rebuild with `make clean && make`, and check that "
             "`build/redlm doctor` lists your GPUs; or run with --backend cpu.");
    return NULL;
}

int rl_cuda_ceilings(int device, double *copy_bytes_per_s, double *gemm_flops, rlError *err) {
    (void)device;
    *copy_bytes_per_s = *gemm_flops = 0;
    return rl_error(err, RL_EDEVICE,
                    "this redlm was built without CUDA, so it has no GPU ceilings to measure. "
                    "Rebuild on a machine with the CUDA Toolkit (`make clean && make`).");
}

int rl_cuda_pdl(int device) {
    (void)device;
    return 0;
}
