/* memplan.cu: how much of the GPU becomes KV cache.
 *
 * Called once the weights and activation buffers are on the device: what is
 * already used counts as weights + activations, the backend reserves its own
 * workspace (GEMM workspace, attention split partials, sampling rows, graph
 * pools), and the rest up to --gpu-memory-utilization becomes KV blocks.  The
 * plan is logged as a table so a user can see where the memory went. */
#include <stdio.h>

#include "kernels/cuda/cuda_internal.h"

/* Attention partials, sampling workspace and CUDA graph pools: measured
 * upper bound for Qwen2.5 shapes at 256 sequences, with margin. */
#define RL_CUDA_RESERVE ((size_t)2 << 30)

static double gib(size_t b) { return (double)b / 1073741824.0; }

int cuda_kv_capacity(rlBackend *be, size_t bytes_per_block, int block_size, int min_blocks,
                     double util, int *n_blocks, rlError *err) {
    rlCuda *c = cuda_of(be);
    cudaSetDevice(c->device);
    size_t free_b = 0, total_b = 0;
    cudaError_t e = cudaMemGetInfo(&free_b, &total_b);
    if (e != cudaSuccess)
        return rl_error(err, RL_EDEVICE, "CUDA backend, device %d: cannot read free memory: %s",
                        c->device, cudaGetErrorString(e));
    if (util <= 0 || util > 1)
        return rl_error(err, RL_EUSAGE,
                        "--gpu-memory-utilization must be in (0, 1], got %g", util);
    size_t used = total_b - free_b;
    size_t budget = (size_t)(util * (double)total_b);
    size_t reserve = RL_CUDA_RESERVE + c->lt_ws_bytes;
    size_t kv = budget > used + reserve ? budget - used - reserve : 0;
    /* Never plan past what is actually free (another process may hold memory). */
    if (kv + reserve > free_b) kv = free_b > reserve ? free_b - reserve : 0;
    long long blocks = bytes_per_block ? (long long)(kv / bytes_per_block) : 0;
    if (blocks > 0x7fffffff) blocks = 0x7fffffff;
    fprintf(stderr,
            "cuda:%d memory plan (GiB)      total %7.2f  budget %7.2f (%.2f)\n"
            "  weights + activations + context %7.2f\n"
            "  workspace + graphs reserved     %7.2f\n"
            "  KV cache                        %7.2f  = %lld blocks x %d tokens = %lld tokens\n",
            c->device, gib(total_b), gib(budget), util, gib(used), gib(reserve), gib(kv), blocks,
            block_size, blocks * block_size);
    if (blocks < min_blocks)
        return rl_error(err, RL_EMEMORY,
                        "not enough GPU memory for the KV cache on device %d: %.2f GiB total, "
                        "budget %.2f GiB at --gpu-memory-utilization %.2f, %.2f GiB already used "
                        "by weights and activations, %.2f GiB reserved for workspace; %.2f GiB "
                        "left holds %lld blocks of %d tokens but at least %d are needed. Lower "
                        "--max-model-len or --max-num-seqs, raise --gpu-memory-utilization, or "
                        "shard the model over more GPUs (--tp / --pp).",
                        c->device, gib(total_b), gib(budget), util, gib(used), gib(reserve),
                        gib(kv), blocks, block_size, min_blocks);
    *n_blocks = (int)blocks;
    return 0;
}
