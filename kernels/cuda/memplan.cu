/* memplan.cu: how much of the GPU becomes KV cache.
 *
 * --gpu-memory-utilization is this instance's share of the GPU's total
 * memory, as in vLLM: its weights, activations, workspace and KV cache
 * together stay under share x total, whatever other processes hold (two
 * instances at 0.45 share one GPU).  Called once the weights and activation
 * buffers are on the device: what this process holds by then (NVML's
 * process list; where a PID namespace hides it, what the device lost since
 * this backend was created) counts against the share, the backend reserves
 * its own workspace (attention split partials, sampling rows, graph pools),
 * and the rest becomes KV blocks, never more than is free.  Whether the
 * share is free at all is checked before anything loads (worker/plan).  The
 * plan is logged as a table so a user can see where the memory went. */
#include <stdio.h>

#include "kernels/cuda/cuda_internal.h"
extern "C" {
#include "kernels/gpuinfo.h"
}

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
    unsigned long long own = 0;
    int by_pid = rl_gpu_own_used(c->device, &own) == 0;
    if (!by_pid) {
        size_t used = total_b - free_b;
        own = used > c->used_at_open ? used - c->used_at_open : 0;
    }
    size_t budget = (size_t)(util * (double)total_b);
    size_t reserve = RL_CUDA_RESERVE;
    size_t kv = budget > own + reserve ? budget - own - reserve : 0;
    /* Never plan past what is actually free (another process may hold memory). */
    if (kv + reserve > free_b) kv = free_b > reserve ? free_b - reserve : 0;
    long long blocks = bytes_per_block ? (long long)(kv / bytes_per_block) : 0;
    if (blocks > 0x7fffffff) blocks = 0x7fffffff;
    size_t others = total_b - free_b > own ? total_b - free_b - own : 0;
    fprintf(stderr,
            "cuda:%d memory plan (GiB)      total %7.2f  this instance's share %7.2f (%.2f)\n"
            "  weights + activations + context %7.2f  (this process, %s)\n"
            "  workspace + graphs reserved     %7.2f\n"
            "  KV cache                        %7.2f  = %lld blocks x %d tokens = %lld tokens\n"
            "  held by others and the driver   %7.2f\n",
            c->device, gib(total_b), gib(budget), util, gib(own),
            by_pid ? "NVML's process list" : "device memory taken since start", gib(reserve),
            gib(kv), blocks, block_size, blocks * block_size, gib(others));
    if (blocks < min_blocks)
        return rl_error(err, RL_EMEMORY,
                        "not enough GPU memory for the KV cache on device %d: %.2f GiB total, "
                        "this instance's share %.2f GiB at --gpu-memory-utilization %.2f, %.2f GiB "
                        "used by its weights and activations, %.2f GiB reserved for workspace; %.2f GiB "
                        "left holds %lld blocks of %d tokens but at least %d are needed. Lower "
                        "--max-model-len or --max-num-seqs, raise --gpu-memory-utilization, or "
                        "shard the model over more GPUs (--tp / --pp).",
                        c->device, gib(total_b), gib(budget), util, gib(own), gib(reserve),
                        gib(kv), blocks, block_size, min_blocks);
    *n_blocks = (int)blocks;
    return 0;
}
