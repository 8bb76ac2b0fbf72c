/* doctor_gpu.c: the driver and the CUDA runtime redlm was built with, every
 * visible GPU with its free memory and the processes holding it, and the
 * links between the chosen GPUs.
 *
 * NVML (kernels/gpuinfo.c) answers without creating a CUDA context, so the
 * memory it reports as used is all other processes'.  The CUDA runtime is
 * asked only for its own version and for peer-to-peer access, which NVML
 * cannot tell (IOMMU and ACS settings can forbid P2P on a PCIe switch). */
#include "kernels/gpuinfo.h"
#include "worker/doctor/doctor.h"

#ifdef RL_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

#define GIB (1024.0 * 1024.0 * 1024.0)

/* Below this, "used" memory on an idle card is the driver's own reservation. */
#define DOCTOR_IDLE_USED (0.6 * GIB)

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
    if (g->used <= DOCTOR_IDLE_USED && !g->n_procs) {
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
                "%s, in use: %.2f of %.2f GiB held%s; `redlm plan --devices` counts it against "
                "the budget; stop those processes or choose other --devices",
                g->name, g->used / GIB, g->total / GIB, who);
}

/* The link of every chosen pair, and P2P where the runtime can say. */
static void gpu_links(rlDoctor *d) {
    d->nvlink = 1;
    d->p2p = -1;
#ifdef RL_HAVE_CUDA
    d->p2p = 1;
#endif
    for (int i = 0; i < d->n_devices; i++)
        for (int j = i + 1; j < d->n_devices; j++) {
            int a = d->devices[i], b = d->devices[j];
            char link[16], topic[48];
            rl_gpu_link(a, b, link, sizeof(link));
            snprintf(topic, sizeof(topic), "link %d<->%d", a, b);
            int fast = rl_gpu_link_fast(a, b);
            if (fast < 1) d->nvlink = fast < 0 && d->nvlink ? -1 : 0;
            int p2p = 1;
#ifdef RL_HAVE_CUDA
            int ab = 0, ba = 0;
            if (cudaDeviceCanAccessPeer(&ab, a, b) != cudaSuccess ||
                cudaDeviceCanAccessPeer(&ba, b, a) != cudaSuccess)
                cudaGetLastError();
            p2p = ab && ba;
            if (!p2p) d->p2p = 0;
#endif
            if (!p2p)
                doctor_line(d, RL_DOC_WARN, 0, topic,
                            "%s without peer-to-peer access: NCCL copies through host memory, "
                            "so a TP group here is slow; check the IOMMU / PCIe ACS settings, "
                            "or put these GPUs in different instances", link);
            else if (fast == 1)
                doctor_line(d, RL_DOC_OK, 0, topic, "%s (NVLink)", link);
            else
                doctor_line(d, RL_DOC_WARN, 0, topic,
                            "%s (PCIe, no NVLink): tensor parallelism across it pays two "
                            "all-reduces per layer at PCIe speed; prefer instance splits "
                            "(redlm plan) or list NVLink-joined GPUs next to each other",
                            link);
        }
}

void doctor_check_gpus(rlDoctor *d) {
    rlGpuHost host;
    char why[256];
    if (rl_gpu_probe(&host, why, sizeof(why))) {
        doctor_line(d, d->devices_given ? RL_DOC_FAIL : RL_DOC_WARN, RL_EDEVICE, "driver",
                    "%s; install the NVIDIA driver or, in a container, pass the GPUs through "
                    "(docker run --gpus all); --backend cpu works without one", why);
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
