/* arch.cu: which GPU generation the kernels plan for.
 *
 * One binary carries code for sm_80, sm_86, sm_89 and sm_90 (Makefile
 * CUDA_ARCHS); the driver picks the closest, and this file tells the
 * kernels what that code and the device allow: programmatic dependent
 * launch and thread-block clusters only where Hopper code runs on a Hopper
 * GPU, and the shared memory
 * and threads per SM that size the decode attention's splits.
 *
 * RL_CUDA_GENERIC=1 puts any GPU on the generic path with the limits of the
 * cards it stands for (sm_86 / sm_89: RTX 3090 / 4090, A10, L4), not the
 * device's own, so an H200 shows whether a kernel would launch and split
 * the same way there: otherwise a kernel that asks an H200 for 200 KiB of
 * shared memory passes here and fails on an RTX 4090.  cuBLASLt still picks
 * its own kernels for the device it runs on. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cuda/cuda_internal.h"

#ifndef RL_CUDA_ARCHS
#define RL_CUDA_ARCHS "?"
#endif

/* Compute capabilities 8.6 and 8.9 (CUDA C++ Programming Guide, "Technical
 * Specifications per Compute Capability"): 99 KiB of shared memory per
 * block, 100 KiB per SM, 1,536 resident threads per SM. */
#define GENERIC_SMEM_BLOCK ((size_t)101376)
#define GENERIC_SMEM_SM ((size_t)102400)
#define GENERIC_THREADS_SM 1536
/* Shared memory the runtime reserves per resident block (1 KiB from sm_80). */
#define SMEM_PER_BLOCK_RESERVED ((size_t)1024)

/* Compiled like every kernel here: its code's version is theirs. */
__global__ void arch_probe_kernel() {}

static int env_on(const char *name) {
    const char *e = getenv(name);
    return e && *e && strcmp(e, "0");
}

/* PDL for code of attributes fa on a GPU of compute capability cc.
 * fa.ptxVersion: the virtual architecture the loaded code was compiled for.
 * pdl_wait() is compiled in only from compute_90, and a JIT from older PTX
 * reports the device's own binaryVersion, so PDL goes by the PTX: a
 * CUDA_ARCHS=80 build on an H100 must not launch kernels whose waits are
 * empty. */
static int arch_pdl(int cc, const cudaFuncAttributes *fa) {
    const char *pdl_env = getenv("RL_CUDA_PDL");
    return cc >= 90 && fa->ptxVersion >= 90 && !env_on("RL_CUDA_GENERIC") &&
           !(pdl_env && !strcmp(pdl_env, "0"));
}

extern "C" int rl_cuda_pdl(int device) {
    cudaDeviceProp p;
    cudaFuncAttributes fa;
    if (cudaGetDeviceProperties(&p, device) != cudaSuccess ||
        cudaFuncGetAttributes(&fa, arch_probe_kernel) != cudaSuccess) {
        cudaGetLastError();
        return 0;
    }
    return arch_pdl(10 * p.major + p.minor, &fa);
}

int cuda_arch_init(rlCuda *c, rlError *err) {
    cudaDeviceProp p;
    cudaError_t e = cudaGetDeviceProperties(&p, c->device);
    cudaFuncAttributes fa;
    if (e == cudaSuccess) e = cudaFuncGetAttributes(&fa, arch_probe_kernel);
    if (e == cudaErrorNoKernelImageForDevice || e == cudaErrorInvalidDeviceFunction ||
        e == cudaErrorUnsupportedPtxVersion) {
        cudaGetLastError();
        return rl_error(err, RL_EDEVICE,
                        "GPU %d (%s, compute capability %d.%d) cannot run this build of redlm, "
                        "which holds code for CUDA_ARCHS=\"%s\" only: rebuild with the default "
                        "`make` (sm_80, sm_86, sm_89, sm_90 and PTX for newer GPUs) or add %d%d "
                        "to CUDA_ARCHS",
                        c->device, p.name, p.major, p.minor, RL_CUDA_ARCHS, p.major, p.minor);
    }
    if (e != cudaSuccess)
        return rl_error(err, RL_EDEVICE, "GPU %d: cannot read its properties: %s", c->device,
                        cudaGetErrorString(e));
    rlCudaArch *a = &c->arch;
    a->cc = 10 * p.major + p.minor;
    a->generic = env_on("RL_CUDA_GENERIC");
    a->smem_block = p.sharedMemPerBlockOptin;
    a->smem_sm = p.sharedMemPerMultiprocessor;
    a->threads_sm = p.maxThreadsPerMultiProcessor;
    if (a->generic) {
        if (a->smem_block > GENERIC_SMEM_BLOCK) a->smem_block = GENERIC_SMEM_BLOCK;
        if (a->smem_sm > GENERIC_SMEM_SM) a->smem_sm = GENERIC_SMEM_SM;
        if (a->threads_sm > GENERIC_THREADS_SM) a->threads_sm = GENERIC_THREADS_SM;
    }
    a->pdl = arch_pdl(a->cc, &fa);
    a->clusters = a->cc >= 90 && fa.ptxVersion >= 90 && !a->generic;

    static unsigned long long said; /* one line per device and process */
    if (c->device < 64 && !(__atomic_fetch_or(&said, 1ULL << c->device, __ATOMIC_RELAXED) &
                            (1ULL << c->device)))
        fprintf(stderr,
                "cuda:%d %s (sm_%d, running sm_%d code): %s path, PDL %s, %zu KiB shared memory "
                "per block, %d threads per SM%s\n",
                c->device, p.name, a->cc, fa.binaryVersion, a->generic || a->cc < 90 ? "generic"
                                                                                     : "Hopper",
                a->pdl ? "on" : "off", a->smem_block >> 10, a->threads_sm,
                a->generic ? " (RL_CUDA_GENERIC=1: Ampere / Ada limits)" : "");
    return 0;
}

int cuda_arch_blocks_per_sm(const rlCuda *c, int occupancy, int threads, size_t smem) {
    int n = occupancy;
    if (threads > 0 && c->arch.threads_sm / threads < n) n = c->arch.threads_sm / threads;
    size_t per = smem + SMEM_PER_BLOCK_RESERVED;
    if ((size_t)n * per > c->arch.smem_sm) n = (int)(c->arch.smem_sm / per);
    return n > 0 ? n : 1;
}
