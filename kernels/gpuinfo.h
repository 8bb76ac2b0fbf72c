/* gpuinfo.h: what NVML says about this host's GPUs, without needing it.
 *
 * NVML is opened with dlopen("libnvidia-ml.so.1") on first use, so the
 * binary starts (and `redlm plan`, `doctor`, CPU ranks work) on machines
 * without an NVIDIA driver.  Used for the start-up plan (free memory, what
 * other processes hold), the NCCL watchdog's diagnosis, the TP-group link
 * check and the plan's link costs (topology), `redlm doctor`, and the clock
 * and power `redlm bench` reports (gpuclocks.h).
 *
 * RL_GPU_TOPOLOGY, when set, holds the links instead of NVML: the text of
 * `nvidia-smi topo -m` (and optionally of `nvidia-smi topo -p2p r`), or bare
 * rows of cells separated by newlines or ';' ("X NV4;NV4 X"), so the code
 * that ranks and places layouts is tested on machines it cannot run on.
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
    unsigned long long total, free, used; /* used: NVML's, the driver's reservation included */
    unsigned long long others;  /* held by other processes (NVML's process list) */
    double bandwidth;           /* memory bytes/s from bus width and clock, 0 when unknown */
    int n_procs;
    rlGpuProc procs[RL_GPU_MAX_PROCS]; /* other processes */
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

/* Bytes this process holds on a visible device by NVML's process list;
 * -1 when NVML cannot tell (no driver, or a PID namespace hides us). */
int rl_gpu_own_used(int device, unsigned long long *bytes);

/* A visible device's SM clock (MHz) and power draw (W) now; its top SM
 * clock and the power limit it is held to.  -1 when NVML cannot tell. */
int rl_gpu_clock_now(int device, unsigned *sm_mhz, double *watts);
int rl_gpu_clock_limits(int device, unsigned *top_mhz, double *cap_watts);

/* How two devices reach each other, slowest last (`nvidia-smi topo -m`). */
typedef enum rlLinkKind {
    RL_LINK_UNKNOWN,
    RL_LINK_SELF,               /* X */
    RL_LINK_NVLINK,             /* NV#: bonded NVLinks */
    RL_LINK_PIX,                /* one PCIe switch */
    RL_LINK_PXB,                /* several PCIe switches, no host bridge */
    RL_LINK_PHB,                /* a PCIe host bridge (the CPU) */
    RL_LINK_NODE,               /* host bridges within a NUMA node */
    RL_LINK_SYS                 /* across NUMA nodes (the sockets' interconnect) */
} rlLinkKind;

typedef struct rlGpuLink {
    rlLinkKind kind;
    int nvlinks;                /* NVLink: links bonded */
    int p2p;                    /* peer-to-peer reads: 1 work, 0 not, -1 unknown */
} rlGpuLink;

typedef struct rlGpuTopology {
    int n;
    rlGpuLink link[RL_GPU_MAX][RL_GPU_MAX];
} rlGpuTopology;

/* Parse a matrix (the formats above) into t; -1 with why when malformed. */
int rl_gpu_topology_parse(const char *text, rlGpuTopology *t, char *why, size_t why_len);

/* RL_GPU_TOPOLOGY: 0 when unset, 1 when set and parsed (*t, if given, is
 * it), -1 with why (if given) when it is malformed (links then unknown). */
int rl_gpu_topology_env(const rlGpuTopology **t, char *why, size_t why_len);

/* The link between two visible devices: RL_GPU_TOPOLOGY, else NVML. */
rlGpuLink rl_gpu_link(int a, int b);

/* "X", "NV12", "PIX", ... or "?". */
void rl_gpu_link_name(rlGpuLink l, char *out, size_t n);

/* 1 when a and b talk over NVLink (a TP group wants that), 0 when over
 * PCIe or between sockets, -1 when unknown (no NVML). */
int rl_gpu_link_fast(int a, int b);

/* The links and P2P of devices[0..n), `nvidia-smi topo -m` style. */
void rl_gpu_topology_print(FILE *f, const int *devices, int n);

#endif
