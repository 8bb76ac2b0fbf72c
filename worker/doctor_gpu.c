/* doctor_gpu.c: the driver, the CUDA runtime redlm was built with, every
 * visible GPU with its free memory, and peer-to-peer access between the
 * chosen GPUs, through the CUDA runtime API.
 *
 * A GPU's free memory is read from a CUDA context this check creates, so
 * the figure includes that context (~0.5 GiB); memory held beyond it is some
 * other process's. */
#include "doctor.h"

#ifdef RL_HAVE_CUDA

#include <cuda_runtime_api.h>

#define GIB (1024.0 * 1024.0 * 1024.0)

/* What a fresh context of this check takes, so more "used" means another
 * process (the same figure as PLAN_RUNTIME in plan.c, with margin). */
#define DOCTOR_OWN_CONTEXT (1.0 * GIB)

static void gpu_versions(rlDoctor *d, int *driver_ok) {
    int drv = 0, rt = 0;
    cudaDriverGetVersion(&drv);
    cudaRuntimeGetVersion(&rt);
    *driver_ok = drv > 0;
    rlDocLevel none = d->devices_given ? RL_DOC_FAIL : RL_DOC_WARN;
    if (!drv) {
        doctor_line(d, none, RL_EDEVICE, "driver",
                    "no NVIDIA driver is loaded (redlm was built with CUDA runtime %d.%d); "
                    "install the driver or, in a container, run it with the GPUs passed "
                    "through (docker run --gpus all); --backend cpu works without one",
                    rt / 1000, rt % 1000 / 10);
        return;
    }
    if (drv / 1000 < rt / 1000)
        doctor_line(d, RL_DOC_FAIL, RL_EDEVICE, "driver",
                    "the driver supports CUDA %d.%d but redlm was built with runtime %d.%d, a "
                    "newer major version that this driver cannot run; update the driver to one "
                    "for CUDA %d or rebuild with a CUDA %d.x toolkit",
                    drv / 1000, drv % 1000 / 10, rt / 1000, rt % 1000 / 10, rt / 1000,
                    drv / 1000);
    else if (drv < rt)
        doctor_line(d, RL_DOC_WARN, 0, "driver",
                    "the driver supports CUDA %d.%d, older than the runtime %d.%d redlm was "
                    "built with; minor-version compatibility runs it, but kernels needing newer "
                    "PTX may fail to load: update the driver when you can",
                    drv / 1000, drv % 1000 / 10, rt / 1000, rt % 1000 / 10);
    else
        doctor_line(d, RL_DOC_OK, 0, "driver", "supports CUDA %d.%d; redlm's runtime is %d.%d",
                    drv / 1000, drv % 1000 / 10, rt / 1000, rt % 1000 / 10);
}

static void gpu_memory(rlDoctor *d, int dev) {
    char topic[32];
    snprintf(topic, sizeof(topic), "gpu %d", dev);
    struct cudaDeviceProp prop;
    cudaError_t e = cudaGetDeviceProperties(&prop, dev);
    size_t free_b = 0, total_b = 0;
    if (e == cudaSuccess && (e = cudaSetDevice(dev)) == cudaSuccess)
        e = cudaMemGetInfo(&free_b, &total_b);
    if (e != cudaSuccess) {
        doctor_line(d, RL_DOC_FAIL, RL_EDEVICE, topic,
                    "cannot be used: %s; check `nvidia-smi` for errors (Xid) and that no "
                    "process holds it in exclusive mode", cudaGetErrorString(e));
        cudaGetLastError();
        return;
    }
    double used = (double)(total_b - free_b);
    if (used > DOCTOR_OWN_CONTEXT)
        doctor_line(d, RL_DOC_WARN, 0, topic,
                    "%s, %.2f of %.2f GiB free: %.2f GiB is held by other processes "
                    "(`nvidia-smi --query-compute-apps=pid,process_name,used_memory "
                    "--format=csv` names them); stop them or choose other --devices",
                    prop.name, free_b / GIB, total_b / GIB, (used - DOCTOR_OWN_CONTEXT) / GIB);
    else
        doctor_line(d, RL_DOC_OK, 0, topic, "%s, compute %d.%d, %.2f of %.2f GiB free", prop.name,
                    prop.major, prop.minor, free_b / GIB, total_b / GIB);
}

static void gpu_p2p(rlDoctor *d) {
    d->p2p = 1;
    for (int i = 0; i < d->n_devices; i++)
        for (int j = i + 1; j < d->n_devices; j++) {
            int a = d->devices[i], b = d->devices[j], ab = 0, ba = 0, rank = 0;
            cudaDeviceCanAccessPeer(&ab, a, b);
            cudaDeviceCanAccessPeer(&ba, b, a);
            char topic[48];
            snprintf(topic, sizeof(topic), "p2p %d<->%d", a, b);
            if (!ab || !ba) {
                d->p2p = 0;
                doctor_line(d, RL_DOC_WARN, 0, topic,
                            "no peer-to-peer access, so NCCL copies through host memory and "
                            "tensor parallelism over this pair is slow; prefer GPUs that "
                            "`nvidia-smi topo -m` shows as NV# or PIX, or check that the "
                            "IOMMU / PCIe ACS settings allow P2P");
                continue;
            }
            cudaDeviceGetP2PAttribute(&rank, cudaDevP2PAttrPerformanceRank, a, b);
            doctor_line(d, RL_DOC_OK, 0, topic, "peer-to-peer access (performance rank %d)",
                        rank);
        }
    cudaGetLastError();
}

void doctor_check_gpus(rlDoctor *d) {
    int driver_ok;
    gpu_versions(d, &driver_ok);
    if (!driver_ok) return;
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess || count == 0) {
        doctor_line(d, d->devices_given ? RL_DOC_FAIL : RL_DOC_WARN, RL_EDEVICE, "gpus",
                    "none visible (%s); check CUDA_VISIBLE_DEVICES and that the container was "
                    "started with the GPUs", e != cudaSuccess ? cudaGetErrorString(e) : "0 devices");
        cudaGetLastError();
        return;
    }
    doctor_line(d, RL_DOC_OK, 0, "gpus", "%d visible", count);
    if (!d->devices_given) {
        d->n_devices = count < RL_DOC_MAX_DEVICES ? count : RL_DOC_MAX_DEVICES;
        for (int i = 0; i < d->n_devices; i++) d->devices[i] = i;
    }
    int usable = 1;
    for (int i = 0; i < d->n_devices; i++)
        if (d->devices[i] >= count) {
            doctor_line(d, RL_DOC_FAIL, RL_EDEVICE, "devices",
                        "device %d is not among the %d visible GPUs (numbered 0-%d); choose "
                        "--devices within them or check CUDA_VISIBLE_DEVICES",
                        d->devices[i], count, count - 1);
            usable = 0;
        }
    if (!usable) return;
    for (int i = 0; i < d->n_devices; i++) gpu_memory(d, d->devices[i]);
    if (d->n_devices > 1) gpu_p2p(d);
}

#else

void doctor_check_gpus(rlDoctor *d) {
    doctor_line(d, d->devices_given ? RL_DOC_FAIL : RL_DOC_WARN, RL_EDEVICE, "cuda",
                "this redlm was built without CUDA (no nvcc at build time), so it cannot see "
                "GPUs; install the CUDA Toolkit and rebuild (make clean && make), or run with "
                "--backend cpu");
}

#endif
