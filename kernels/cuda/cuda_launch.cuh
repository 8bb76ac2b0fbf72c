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
 * are no-ops for a kernel launched without the attribute.
 *
 * `griddepcontrol` is an sm_90 instruction: code for older GPUs compiles
 * both to nothing, and the launch asks for PDL only where the code running
 * has them (c->arch.pdl, arch.cu: Hopper code on a Hopper GPU, not
 * RL_CUDA_GENERIC=1 or RL_CUDA_PDL=0).  Without the attribute a kernel
 * starts after the one before it has finished, so the waits are not needed. */
#ifndef RL_CUDA_LAUNCH_CUH
#define RL_CUDA_LAUNCH_CUH

static __device__ __forceinline__ void pdl_trigger() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}
static __device__ __forceinline__ void pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}

/* kernel<<<grid, block, shm, s>>>(args...), with the PDL attribute where pdl
 * is set and, for cluster_z > 1, in thread-block clusters of cluster_z
 * blocks along z (sm_90 code on a Hopper GPU only); the launch's error. */
template <typename... P, typename... A>
static cudaError_t cuda_launch_cluster(cudaStream_t s, int pdl, unsigned cluster_z,
                                       void (*kernel)(P...), dim3 grid, dim3 block, size_t shm,
                                       A... args) {
    cudaLaunchAttribute attr[2] = {};
    attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[0].val.programmaticStreamSerializationAllowed = pdl;
    attr[1].id = cudaLaunchAttributeClusterDimension;
    attr[1].val.clusterDim.x = 1;
    attr[1].val.clusterDim.y = 1;
    attr[1].val.clusterDim.z = cluster_z;
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = grid;
    cfg.blockDim = block;
    cfg.dynamicSmemBytes = shm;
    cfg.stream = s;
    cfg.attrs = attr;
    cfg.numAttrs = cluster_z > 1 ? 2 : 1;
    return cudaLaunchKernelEx(&cfg, kernel, (P)args...);
}
template <typename... P, typename... A>
static cudaError_t cuda_launch_ex(cudaStream_t s, int pdl, void (*kernel)(P...), dim3 grid, dim3 block,
                                  size_t shm, A... args) {
    return cuda_launch_cluster(s, pdl, 1, kernel, grid, block, shm, args...);
}
/* The same on the backend's stream, where the GPU and the code allow PDL,
 * the launch's error checked under op's name (C: rlCuda, a parameter so
 * that wq.cu, which has no backend, can include this header). */
template <typename C, typename... P, typename... A>
static void cuda_launch_pdl(C *c, const char *op, void (*kernel)(P...), dim3 grid, dim3 block,
                            size_t shm, A... args) {
    cuda_check(c, cuda_launch_ex(c->stream, c->arch.pdl, kernel, grid, block, shm, args...), op);
}

#endif
