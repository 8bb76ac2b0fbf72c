/* doctor_gpu.c: the driver and the CUDA runtime redlm was built with, every
 * visible GPU with its free memory and the processes holding it, and the
 * links between the chosen GPUs with their matrix.
 *
 * "In use" is what NVML's process list gives other processes: an idle card
 * shows some memory used (the driver's reservation, ~0.6 GiB on an H200) and
 * doctor's own context is doctor's, neither is another process.  The CUDA
 * runtime is asked for its version and for peer-to-peer access, which it
 * may refuse where NVML says yes (IOMMU and ACS settings on a PCIe switch). */
#include "kernels/gpuinfo.h"
#include "worker/doctor/doctor.h"

#ifdef RL_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

#define GIB (1024.0 * 1024.0 * 1024.0)

static void gpu_versions(rlDoctor *d, const rlGpuHost *host) {
#ifdef RL_HAVE_CUDA
    int rt = 0;
    cudaRuntimeGetVersion(&rt);
    int drv = host->cuda_driver;
    if (drv / 1000 < rt / 1000)
        doctor_line(d, RL_DOC_FAIL, RL_EDEVICE, "driver",
                    "%s supports CUDA %d.%d but redlm was built with runtime %d.%d, a newer "
                    "major version this driver cannot run; update the driver to one for CUDA %d "
                    "or rebuild with a CUDA %d.x toolkit", host->driver, drv / 1000,
                    drv % 1000 / 10, rt / 1000, rt % 1000 / 10, rt / 1000, drv / 1000);
    else if (drv < rt)
        doctor_line(d, RL_DOC_WARN, 0, "driver",
                    "%s supports CUDA %d.%d, older than the runtime %d.%d redlm was built with; "
                    "minor-version compatibility runs it, but kernels needing newer PTX may fail "
                    "to load: update the driver when you can", host->driver, drv / 1000,
                    drv % 1000 / 10, rt / 1000, rt % 1000 / 10);
    else
        doctor_line(d, RL_DOC_OK, 0, "driver", "%s supports CUDA %d.%d; redlm's runtime is %d.%d",
                    host->driver, drv / 1000, drv % 1000 / 10, rt / 1000, rt % 1000 / 10);
#else
    doctor_line(d, RL_DOC_OK, 0, "driver", "%s supports CUDA %d.%d", host->driver,
                host->cuda_driver / 1000, host->cuda_driver % 1000 / 10);
    doctor_line(d, d->devices_given ? RL_DOC_FAIL : RL_DOC_WARN, RL_EDEVICE, "cuda",
                "this redlm was built without CUDA (no nvcc at build time), so it cannot use the "
                "GPUs; install the CUDA Toolkit and rebuild (make clean && make)");
#endif
}

static void gpu_memory(rlDoctor *d, const rlGpu *g, int dev) {
    char topic[32];
    snprintf(topic, sizeof(topic), "gpu %d", dev);
    if (!g->others && !g->n_procs) {
        doctor_line(d, RL_DOC_OK, 0, topic, "%s (%s), %.2f of %.2f GiB free", g->name, g->bus_id,
                    g->free / GIB, g->total / GIB);
        return;
    }
    char who[512] = "";
    size_t len = 0;
    for (int i = 0; i < g->n_procs && len < sizeof(who) - 80; i++)
        len += (size_t)snprintf(who + len, sizeof(who) - len, "%s pid %u (%s, %.2f GiB)",
                                i ? "," : " by", g->procs[i].pid,
                                g->procs[i].name[0] ? g->procs[i].name : "?",
                                g->procs[i].used / GIB);
    doctor_line(d, RL_DOC_WARN, 0, topic,
                "%s, in use: %.2f of %.2f GiB held by other processes%s; %.2f GiB free for "
                "--gpu-memory-utilization (at most %.2f here); stop those processes or choose "
                "other --devices",
                g->name, g->others / GIB, g->total / GIB, who, g->free / GIB,
                g->total ? (double)g->free / (double)g->total : 0.0);
}

/* The link of every chosen pair and P2P (NVML's answer, and the CUDA
 * runtime's where the links are NVML's own), then the matrix. */
static void gpu_links(rlDoctor *d) {
    d->nvlink = 1;
    d->p2p = 1;
    char why[300];
    int injected = rl_gpu_topology_env(NULL, why, sizeof(why));
    if (injected < 0) doctor_line(d, RL_DOC_WARN, 0, "topology", "%s; links unknown", why);
    else if (injected > 0)
        doctor_line(d, RL_DOC_OK, 0, "topology", "links read from RL_GPU_TOPOLOGY, not NVML");
    for (int i = 0; i < d->n_devices; i++)
        for (int j = i + 1; j < d->n_devices; j++) {
            int a = d->devices[i], b = d->devices[j];
            rlGpuLink l = rl_gpu_link(a, b);
            char link[16], topic[48];
            rl_gpu_link_name(l, link, sizeof(link));
            snprintf(topic, sizeof(topic), "link %d<->%d", a, b);
            int fast = rl_gpu_link_fast(a, b);
            if (fast < 1) d->nvlink = fast < 0 && d->nvlink ? -1 : 0;
            int p2p = l.p2p;
#ifdef RL_HAVE_CUDA
            if (injected == 0) {
                int ab = 0, ba = 0;
                if (cudaDeviceCanAccessPeer(&ab, a, b) != cudaSuccess ||
                    cudaDeviceCanAccessPeer(&ba, b, a) != cudaSuccess)
                    cudaGetLastError();
                p2p = ab && ba && p2p != 0;
            }
#endif
            if (p2p == 0) d->p2p = 0;
            else if (p2p < 0 && d->p2p) d->p2p = -1;
            if (p2p == 0)
                doctor_line(d, RL_DOC_WARN, 0, topic,
                            "%s without peer-to-peer access: NCCL copies through host memory, "
                            "so a TP group here is slow; check the IOMMU / PCIe ACS settings, "
                            "or put these GPUs in different instances", link);
            else if (fast == 1)
                doctor_line(d, RL_DOC_OK, 0, topic, "%s (NVLink)", link);
            else
                doctor_line(d, RL_DOC_WARN, 0, topic,
                            "%s (PCIe, no NVLink): tensor parallelism across it pays two "
                            "all-reduces per layer at PCIe speed; prefer pipeline stages or "
                            "instance splits (redlm plan --devices ranks them) or list "
                            "NVLink-joined GPUs next to each other",
                            link);
        }
    fprintf(d->out, "topology of the chosen GPUs:\n");
    rl_gpu_topology_print(d->out, d->devices, d->n_devices);
}

void doctor_check_gpus(rlDoctor *d) {
    rlGpuHost host;
    char why[256];
    if (rl_gpu_probe(&host, why, sizeof(why))) {
        doctor_line(d, d->devices_given ? RL_DOC_FAIL : RL_DOC_WARN, RL_EDEVICE, "driver",
                    "%s; install the NVIDIA driver or, in a container, pass the GPUs through "
                    "(docker run --gpus all); --backend cpu works without one", why);
        /* An injected topology still has links to judge (or an error to tell). */
        if (rl_gpu_topology_env(NULL, NULL, 0) != 0 && d->n_devices > 1) gpu_links(d);
        return;
    }
    gpu_versions(d, &host);
    if (host.count == 0) {
        doctor_line(d, d->devices_given ? RL_DOC_FAIL : RL_DOC_WARN, RL_EDEVICE, "gpus",
                    "none visible; check CUDA_VISIBLE_DEVICES and that the container was started "
                    "with the GPUs");
        return;
    }
    doctor_line(d, RL_DOC_OK, 0, "gpus", "%d visible", host.count);
    if (!d->devices_given) {
        d->n_devices = host.count < RL_DOC_MAX_DEVICES ? host.count : RL_DOC_MAX_DEVICES;
        for (int i = 0; i < d->n_devices; i++) d->devices[i] = i;
    }
    int usable = 1;
    for (int i = 0; i < d->n_devices; i++)
        if (d->devices[i] >= host.count) {
            doctor_line(d, RL_DOC_FAIL, RL_EDEVICE, "devices",
                        "GPU %d is not among the %d visible (numbered 0-%d); choose --devices "
                        "within them or check CUDA_VISIBLE_DEVICES",
                        d->devices[i], host.count, host.count - 1);
            usable = 0;
        }
    if (!usable) return;
    for (int i = 0; i < d->n_devices; i++) gpu_memory(d, &host.gpus[d->devices[i]], d->devices[i]);
    if (d->n_devices > 1) gpu_links(d);
}
