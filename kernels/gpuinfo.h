/* gpuinfo.h: what NVML says about this host's GPUs, without needing it.
 *
 * NVML is opened with dlopen("libnvidia-ml.so.1") on first use, so the
 * binary starts (and `redlm plan`, `doctor`, CPU ranks work) on machines
 * without an NVIDIA driver.  Used for the start-up plan (free memory), the
 * NCCL watchdog's diagnosis and the TP-group link check (topology), and
 * `redlm doctor` (versions, busy cards).
 *
 * Devices are CUDA ordinals as the process sees them: when
 * CUDA_VISIBLE_DEVICES lists numbers, ordinal i is NVML index list[i];
 * otherwise ordinal i is NVML index i (true with CUDA_DEVICE_ORDER=PCI_BUS_ID,
 * and in practice on hosts of identical cards). */
#ifndef RL_GPUINFO_H
#define RL_GPUINFO_H

#include <stddef.h>
#include <stdio.h>

#define RL_GPU_MAX 16
#define RL_GPU_MAX_PROCS 8

typedef struct rlGpuProc {
    unsigned pid;
    unsigned long long used;    /* bytes, 0 when NVML cannot tell */
    char name[64];
} rlGpuProc;

typedef struct rlGpu {
    int nvml_index;
    char name[96];
    char bus_id[32];
    unsigned long long total, free, used;
    int n_procs;
    rlGpuProc procs[RL_GPU_MAX_PROCS];
    int nvlinks;                /* active NVLink links */
} rlGpu;

typedef struct rlGpuHost {
    char driver[32];            /* "550.54.15" */
    int cuda_driver;            /* the CUDA version the driver supports, e.g. 12040 */
    int count;                  /* visible devices (CUDA ordinals) */
    rlGpu gpus[RL_GPU_MAX];
} rlGpuHost;

/* Fill host with every visible GPU.  Returns 0, or -1 with why filled
 * (no driver, NVML failing) and host->count 0. */
int rl_gpu_probe(rlGpuHost *host, char *why, size_t why_len);

/* The link between two visible devices, as `nvidia-smi topo -m` names it:
 * "X" (same), "NV<links>", "PIX", "PXB", "PHB", "NODE", "SYS", or "?". */
void rl_gpu_link(int a, int b, char *out, size_t n);

/* 1 when a and b talk over NVLink (a TP group wants that), 0 when over
 * PCIe or between sockets, -1 when unknown (no NVML). */
int rl_gpu_link_fast(int a, int b);

/* The matrix of rl_gpu_link over devices[0..n), `nvidia-smi topo -m` style. */
void rl_gpu_topology_print(FILE *f, const int *devices, int n);

#endif
