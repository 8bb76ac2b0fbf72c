/* cuda_launch.cuh: programmatic dependent launch (PDL) for the short kernels
 * of a decode step.
 *
 * A decode step at small batch is ~250 kernels of a few microseconds each;
 * between two of them the GPU drains the first and ramps the second up, and
 * that costs about as much as a small kernel's work.  Launched with PDL, a
 * kernel's blocks may start while the kernel before it still runs: they read
 * what no earlier kernel writes (weights, the step's positions) and then
 * wait, in hardware, until the earlier kernel has finished and its writes
 * are visible.  Each kernel launched this way must call pdl_wait() before it
 * reads anything an earlier kernel wrote and before it writes anything, and
 * calls pdl_trigger() at its start to let the next one launch early.  Both
 * are no-ops for a kernel launched without the attribute.  RL_CUDA_PDL=0
 * launches everything plainly. */
#ifndef RL_CUDA_LAUNCH_CUH
#define RL_CUDA_LAUNCH_CUH

#include <stdlib.h>
#include <string.h>

static __device__ __forceinline__ void pdl_trigger() {
    asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
}
static __device__ __forceinline__ void pdl_wait() {
    asm volatile("griddepcontrol.wait;\n" ::: "memory");
}

static inline int pdl_enabled() {
    static int on = -1;
    if (on < 0) {
        const char *e = getenv("RL_CUDA_PDL");
        on = !(e && !strcmp(e, "0"));
    }
    return on;
}

/* kernel<<<grid, block, shm, c->stream>>>(args...), with the PDL attribute;
 * the launch's error is checked under op's name. */
template <typename... P, typename... A>
static void cuda_launch_pdl(rlCuda *c, const char *op, void (*kernel)(P...), dim3 grid,
                            dim3 block, size_t shm, A... args) {
    cudaLaunchAttribute attr;
    attr.id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr.val.programmaticStreamSerializationAllowed = pdl_enabled();
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = grid;
    cfg.blockDim = block;
    cfg.dynamicSmemBytes = shm;
    cfg.stream = c->stream;
    cfg.attrs = &attr;
    cfg.numAttrs = 1;
    cuda_check(c, cudaLaunchKernelEx(&cfg, kernel, (P)args...), op);
}

#endif
