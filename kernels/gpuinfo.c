/* gpuinfo.c: NVML through dlopen (see gpuinfo.h for why).
 *
 * Only the handful of NVML calls used here are declared, with the layouts of
 * NVML's public header (nvml.h, stable across drivers for these entry
 * points), so no NVIDIA header or library is needed at build time. */
#include "kernels/gpuinfo.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

typedef void *nvmlDevice_t;
typedef struct { unsigned long long total, free, used; } nvmlMemory_t;
typedef struct {
    char busIdLegacy[16];
    unsigned domain, bus, device, pciDeviceId, pciSubSystemId;
    char busId[32];
} nvmlPciInfo_t;
typedef struct {
    unsigned pid;
    unsigned long long usedGpuMemory;
    unsigned gpuInstanceId, computeInstanceId;
} nvmlProcessInfo_t;

enum { NVML_P2P_CAPS_INDEX_NVLINK = 2, NVML_NVLINK_MAX_LINKS = 18 };

static struct {
    int tried, ok;
    char why[256];
    int (*init)(void);
    const char *(*error_string)(int);
    int (*driver_version)(char *, unsigned);
    int (*cuda_version)(int *);
    int (*count)(unsigned *);
    int (*by_index)(unsigned, nvmlDevice_t *);
    int (*name)(nvmlDevice_t, char *, unsigned);
    int (*memory)(nvmlDevice_t, nvmlMemory_t *);
    int (*pci)(nvmlDevice_t, nvmlPciInfo_t *);
    int (*procs)(nvmlDevice_t, unsigned *, nvmlProcessInfo_t *);
    int (*proc_name)(unsigned, char *, unsigned);
    int (*ancestor)(nvmlDevice_t, nvmlDevice_t, int *);
    int (*p2p)(nvmlDevice_t, nvmlDevice_t, int, int *);
    int (*link_state)(nvmlDevice_t, unsigned, int *);
} nv;

static pthread_once_t nv_once = PTHREAD_ONCE_INIT;

static void nv_load(void) {
    void *h = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        snprintf(nv.why, sizeof(nv.why),
                 "no NVIDIA driver here (libnvidia-ml.so.1 cannot be loaded: %s)", dlerror());
        return;
    }
#define NV_SYM(field, name)                                                        \
    do {                                                                           \
        *(void **)&nv.field = dlsym(h, name);                                      \
        if (!nv.field) {                                                           \
            snprintf(nv.why, sizeof(nv.why), "the NVIDIA driver's NVML lacks %s; " \
                     "update the driver", name);                                   \
            return;                                                                \
        }                                                                          \
    } while (0)
    NV_SYM(init, "nvmlInit_v2");
    NV_SYM(error_string, "nvmlErrorString");
    NV_SYM(driver_version, "nvmlSystemGetDriverVersion");
    NV_SYM(cuda_version, "nvmlSystemGetCudaDriverVersion");
    NV_SYM(count, "nvmlDeviceGetCount_v2");
    NV_SYM(by_index, "nvmlDeviceGetHandleByIndex_v2");
    NV_SYM(name, "nvmlDeviceGetName");
    NV_SYM(memory, "nvmlDeviceGetMemoryInfo");
    NV_SYM(pci, "nvmlDeviceGetPciInfo_v3");
    NV_SYM(procs, "nvmlDeviceGetComputeRunningProcesses_v3");
    NV_SYM(proc_name, "nvmlSystemGetProcessName");
    NV_SYM(ancestor, "nvmlDeviceGetTopologyCommonAncestor");
    NV_SYM(p2p, "nvmlDeviceGetP2PStatus");
    NV_SYM(link_state, "nvmlDeviceGetNvLinkState");
#undef NV_SYM
    int rc = nv.init();
    if (rc) {
        snprintf(nv.why, sizeof(nv.why), "NVML does not start: %s (is the driver loaded? "
                 "try nvidia-smi)", nv.error_string(rc));
        return;
    }
    nv.ok = 1;
}

static int nv_ready(void) {
    pthread_once(&nv_once, nv_load);
    return nv.ok;
}

/* NVML indices of the visible devices, in CUDA ordinal order. */
static int nv_visible(int *idx, int max) {
    unsigned total = 0;
    if (nv.count(&total)) return 0;
    const char *vis = getenv("CUDA_VISIBLE_DEVICES");
    int n = 0;
    if (vis) {
        char buf[256];
        snprintf(buf, sizeof(buf), "%s", vis);
        for (char *save = NULL, *t = strtok_r(buf, ",", &save); t && n < max;
             t = strtok_r(NULL, ",", &save)) {
            char *end;
            long v = strtol(t, &end, 10);
            if (end == t || *end || v < 0) break; /* UUIDs and junk: stop, as CUDA does */
            if (v < (long)total) idx[n++] = (int)v;
        }
        return n;
    }
    for (unsigned i = 0; i < total && n < max; i++) idx[n++] = (int)i;
    return n;
}

static int nv_device(int ordinal, nvmlDevice_t *d) {
    int idx[RL_GPU_MAX], n = nv_visible(idx, RL_GPU_MAX);
    if (ordinal < 0 || ordinal >= n) return -1;
    return nv.by_index((unsigned)idx[ordinal], d) ? -1 : 0;
}

static int nv_nvlinks(nvmlDevice_t d) {
    int n = 0;
    for (unsigned l = 0; l < NVML_NVLINK_MAX_LINKS; l++) {
        int active = 0;
        if (nv.link_state(d, l, &active) == 0 && active) n++;
    }
    return n;
}

int rl_gpu_probe(rlGpuHost *host, char *why, size_t why_len) {
    memset(host, 0, sizeof(*host));
    if (!nv_ready()) {
        snprintf(why, why_len, "%s", nv.why);
        return -1;
    }
    nv.driver_version(host->driver, sizeof(host->driver));
    nv.cuda_version(&host->cuda_driver);
    int idx[RL_GPU_MAX];
    host->count = nv_visible(idx, RL_GPU_MAX);
    for (int i = 0; i < host->count; i++) {
        rlGpu *g = &host->gpus[i];
        nvmlDevice_t d;
        g->nvml_index = idx[i];
        if (nv.by_index((unsigned)idx[i], &d)) continue;
        nv.name(d, g->name, sizeof(g->name));
        nvmlMemory_t m;
        if (nv.memory(d, &m) == 0) g->total = m.total, g->free = m.free, g->used = m.used;
        nvmlPciInfo_t pci;
        if (nv.pci(d, &pci) == 0) snprintf(g->bus_id, sizeof(g->bus_id), "%s", pci.busId);
        nvmlProcessInfo_t p[64];
        unsigned np = 64;
        if (nv.procs(d, &np, p) == 0) {
            for (unsigned k = 0; k < np && g->n_procs < RL_GPU_MAX_PROCS; k++) {
                rlGpuProc *q = &g->procs[g->n_procs++];
                q->pid = p[k].pid;
                /* NVML reports "not available" as all ones. */
                q->used = p[k].usedGpuMemory == ~0ULL ? 0 : p[k].usedGpuMemory;
                if (nv.proc_name(p[k].pid, q->name, sizeof(q->name)))
                    snprintf(q->name, sizeof(q->name), "?");
            }
        }
        g->nvlinks = nv_nvlinks(d);
    }
    return 0;
}

void rl_gpu_link(int a, int b, char *out, size_t n) {
    nvmlDevice_t da, db;
    if (a == b) {
        snprintf(out, n, "X");
        return;
    }
    if (!nv_ready() || nv_device(a, &da) || nv_device(b, &db)) {
        snprintf(out, n, "?");
        return;
    }
    int status = 1;
    if (nv.p2p(da, db, NVML_P2P_CAPS_INDEX_NVLINK, &status) == 0 && status == 0) {
        snprintf(out, n, "NV%d", nv_nvlinks(da));
        return;
    }
    int level = -1;
    if (nv.ancestor(da, db, &level)) {
        snprintf(out, n, "?");
        return;
    }
    /* NVML's levels: 0 internal, 10 single switch, 20 multiple switches,
     * 30 host bridge, 40 NUMA node, 50 system (across sockets). */
    const char *name = level <= 10 ? "PIX" : level <= 20 ? "PXB" : level <= 30 ? "PHB"
                     : level <= 40 ? "NODE" : "SYS";
    snprintf(out, n, "%s", name);
}

int rl_gpu_link_fast(int a, int b) {
    char link[16];
    rl_gpu_link(a, b, link, sizeof(link));
    if (link[0] == '?') return -1;
    return link[0] == 'X' || !strncmp(link, "NV", 2);
}

void rl_gpu_topology_print(FILE *f, const int *devices, int n) {
    fprintf(f, "        ");
    for (int j = 0; j < n; j++) fprintf(f, " GPU%-4d", devices[j]);
    fprintf(f, "\n");
    for (int i = 0; i < n; i++) {
        fprintf(f, "  GPU%-3d", devices[i]);
        for (int j = 0; j < n; j++) {
            char link[16];
            rl_gpu_link(devices[i], devices[j], link, sizeof(link));
            fprintf(f, " %-7s", link);
        }
        fprintf(f, "\n");
    }
    fprintf(f, "  (X self, NV# NVLink with # links, PIX/PXB one or more PCIe switches, PHB host "
               "bridge, NODE within a NUMA node, SYS across sockets: slowest)\n");
}
