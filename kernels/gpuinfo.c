/* gpuinfo.c: NVML through dlopen (see gpuinfo.h for why).
 *
 * Only the handful of NVML calls used here are declared, with the layouts of
 * NVML's public header (nvml.h, stable across drivers for these entry
 * points), so no NVIDIA header or library is needed at build time. */
#include "kernels/gpuinfo.h"

#include <ctype.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

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

enum { NVML_P2P_CAPS_INDEX_READ = 0, NVML_P2P_CAPS_INDEX_NVLINK = 2, NVML_NVLINK_MAX_LINKS = 18,
       NVML_CLOCK_SM = 1, NVML_CLOCK_MEM = 2 };

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
    /* Optional (older drivers lack them): memory bandwidth; the SM clock
     * and power now and their limits. */
    int (*bus_width)(nvmlDevice_t, unsigned *);
    int (*max_clock)(nvmlDevice_t, int, unsigned *);
    int (*clock)(nvmlDevice_t, int, unsigned *);
    int (*power)(nvmlDevice_t, unsigned *);
    int (*power_limit)(nvmlDevice_t, unsigned *);
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
    *(void **)&nv.bus_width = dlsym(h, "nvmlDeviceGetMemoryBusWidth");
    *(void **)&nv.max_clock = dlsym(h, "nvmlDeviceGetMaxClockInfo");
    *(void **)&nv.clock = dlsym(h, "nvmlDeviceGetClockInfo");
    *(void **)&nv.power = dlsym(h, "nvmlDeviceGetPowerUsage");
    *(void **)&nv.power_limit = dlsym(h, "nvmlDeviceGetEnforcedPowerLimit");
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

/* Memory bytes/s: bus width x memory clock x 2 (double data rate): 384 bits
 * x 10,501 MHz gives an RTX 4090's 1,008 GB/s, 5,120 x 2,619 an H100's 3.35 TB/s. */
static double nv_bandwidth(nvmlDevice_t d) {
    unsigned width = 0, mhz = 0;
    if (!nv.bus_width || !nv.max_clock || nv.bus_width(d, &width) ||
        nv.max_clock(d, NVML_CLOCK_MEM, &mhz))
        return 0;
    return width / 8.0 * mhz * 1e6 * 2;
}

/* A device's SM clock through `clock` (NVML's current or top clock) and its
 * power through `power` (draw or limit, milliwatts): one reading of either
 * pair, -1 when the driver lacks them or the device is not visible. */
static int nv_clock_power(int device, int (*clock)(nvmlDevice_t, int, unsigned *),
                          int (*power)(nvmlDevice_t, unsigned *), unsigned *mhz, double *watts) {
    nvmlDevice_t d;
    unsigned mw = 0;
    if (!clock || !power || nv_device(device, &d) || clock(d, NVML_CLOCK_SM, mhz) || power(d, &mw))
        return -1;
    *watts = mw / 1e3;
    return 0;
}

int rl_gpu_clock_now(int device, unsigned *sm_mhz, double *watts) {
    return nv_ready() ? nv_clock_power(device, nv.clock, nv.power, sm_mhz, watts) : -1;
}

int rl_gpu_clock_limits(int device, unsigned *top_mhz, double *cap_watts) {
    return nv_ready() ? nv_clock_power(device, nv.max_clock, nv.power_limit, top_mhz, cap_watts)
                      : -1;
}

/* Other processes on d into g (procs, others); -1 when NVML cannot list them. */
static int nv_processes(nvmlDevice_t d, rlGpu *g, unsigned self, unsigned long long *own,
                        int *found) {
    nvmlProcessInfo_t p[64];
    unsigned np = 64;
    if (nv.procs(d, &np, p)) return -1;
    for (unsigned k = 0; k < np && k < 64; k++) {
        /* NVML reports "not available" as all ones. */
        unsigned long long used = p[k].usedGpuMemory == ~0ULL ? 0 : p[k].usedGpuMemory;
        if (p[k].pid == self) {
            if (own) *own += used, *found = 1;
            continue;
        }
        if (!g) continue;
        g->others += used;
        if (g->n_procs == RL_GPU_MAX_PROCS) continue;
        rlGpuProc *q = &g->procs[g->n_procs++];
        q->pid = p[k].pid;
        q->used = used;
        if (nv.proc_name(p[k].pid, q->name, sizeof(q->name)))
            snprintf(q->name, sizeof(q->name), "?");
    }
    return 0;
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
        /* Without a process list, all that is used may be someone else's. */
        if (nv_processes(d, g, (unsigned)getpid(), NULL, NULL)) g->others = g->used;
        g->bandwidth = nv_bandwidth(d);
        g->nvlinks = nv_nvlinks(d);
    }
    return 0;
}

int rl_gpu_own_used(int device, unsigned long long *bytes) {
    nvmlDevice_t d;
    int found = 0;
    *bytes = 0;
    if (!nv_ready() || nv_device(device, &d) ||
        nv_processes(d, NULL, (unsigned)getpid(), bytes, &found))
        return -1;
    return found ? 0 : -1;
}

/* ---- topology ---- */

static const struct { const char *name; rlLinkKind kind; } link_names[] = {
    {"X", RL_LINK_SELF}, {"PIX", RL_LINK_PIX}, {"PXB", RL_LINK_PXB}, {"PHB", RL_LINK_PHB},
    {"NODE", RL_LINK_NODE}, {"SYS", RL_LINK_SYS},
};

/* A link cell ("X", "NV12", "PIX" ...): 1 and *l filled, else 0. */
static int topo_link_cell(const char *tok, rlGpuLink *l) {
    l->p2p = -1;
    l->nvlinks = 0;
    if (!strncmp(tok, "NV", 2) && isdigit((unsigned char)tok[2])) {
        char *end;
        long v = strtol(tok + 2, &end, 10);
        if (*end || v < 1 || v > 64) return 0;
        l->kind = RL_LINK_NVLINK;
        l->nvlinks = (int)v;
        return 1;
    }
    for (size_t i = 0; i < sizeof(link_names) / sizeof(link_names[0]); i++)
        if (!strcmp(tok, link_names[i].name)) {
            l->kind = link_names[i].kind;
            return 1;
        }
    return 0;
}

/* A cell of `nvidia-smi topo -p2p r`: 1 (OK), 0 (NS, CNS, GNS, TNS ...: not
 * supported), 2 (X), or -1 when tok is no such cell. */
static int topo_p2p_cell(const char *tok) {
    if (!strcmp(tok, "OK")) return 1;
    if (!strcmp(tok, "X")) return 2;
    if (!strcmp(tok, "NS") || !strcmp(tok, "CNS") || !strcmp(tok, "GNS") ||
        !strcmp(tok, "TNS") || !strcmp(tok, "NS_P2P") || !strcmp(tok, "U"))
        return 0;
    return -1;
}

/* One line: its cells after an optional "GPUi" label, as long as they are
 * cells of one kind (links, or P2P answers).  Lines of other text (headers,
 * legends, NIC rows) give none.  Returns the cell count; *p2p says which. */
static int topo_row(char *line, char **cells, int max, int *p2p) {
    char *save = NULL, *tok = strtok_r(line, " \t\r", &save);
    int labelled = 0;
    if (tok && !strncmp(tok, "GPU", 3) && isdigit((unsigned char)tok[3])) {
        labelled = 1;
        tok = strtok_r(NULL, " \t\r", &save);
    } else if (tok && !isupper((unsigned char)tok[0])) {
        return 0;
    }
    int n = 0, kind = -1;
    rlGpuLink l;
    for (; tok && n < max; tok = strtok_r(NULL, " \t\r", &save)) {
        int is_link = topo_link_cell(tok, &l), is_p2p = topo_p2p_cell(tok) >= 0;
        int k = !strcmp(tok, "X") ? kind : is_link ? 0 : is_p2p ? 1 : -2;
        if (k == -2) break;
        if (k >= 0) {
            if (kind >= 0 && k != kind) break;
            kind = k;
        }
        cells[n++] = tok;
    }
    /* An unlabelled line must be cells only (a legend line is not). */
    if (!labelled && tok) return 0;
    *p2p = kind == 1;
    return n;
}

int rl_gpu_topology_parse(const char *text, rlGpuTopology *t, char *why, size_t why_len) {
    memset(t, 0, sizeof(*t));
    size_t len = strlen(text);
    char *buf = malloc(len + 1);
    if (!buf) return snprintf(why, why_len, "out of memory"), -1;
    memcpy(buf, text, len + 1);
    char *links[RL_GPU_MAX][RL_GPU_MAX], *p2ps[RL_GPU_MAX][RL_GPU_MAX];
    int n_links = 0, n_p2p = 0, widths[RL_GPU_MAX] = {0}, p2p_widths[RL_GPU_MAX] = {0};
    int rc = 0;
    char *save = NULL;
    for (char *line = strtok_r(buf, "\n;", &save); line; line = strtok_r(NULL, "\n;", &save)) {
        char *cells[RL_GPU_MAX + 1];
        int p2p = 0, n = topo_row(line, cells, RL_GPU_MAX + 1, &p2p);
        if (n == 0) continue;
        int *count = p2p ? &n_p2p : &n_links;
        if (*count == RL_GPU_MAX) {
            snprintf(why, why_len, "more than %d GPU rows", RL_GPU_MAX);
            rc = -1;
            break;
        }
        for (int j = 0; j < n && j < RL_GPU_MAX; j++)
            (p2p ? p2ps : links)[*count][j] = cells[j];
        (p2p ? p2p_widths : widths)[*count] = n;
        (*count)++;
    }
    if (!rc && n_links == 0) {
        snprintf(why, why_len, "no rows of links (X, NV#, PIX, PXB, PHB, NODE, SYS) found");
        rc = -1;
    }
    for (int i = 0; !rc && i < n_links; i++) {
        if (widths[i] < n_links) {
            snprintf(why, why_len, "row %d has %d links but there are %d GPU rows", i, widths[i],
                     n_links);
            rc = -1;
            break;
        }
        for (int j = 0; j < n_links; j++) {
            rlGpuLink *l = &t->link[i][j];
            topo_link_cell(links[i][j], l);
            if ((i == j) != (l->kind == RL_LINK_SELF)) {
                snprintf(why, why_len, "row %d, column %d is '%s': X belongs on the diagonal "
                         "and only there", i, j, links[i][j]);
                rc = -1;
                break;
            }
        }
    }
    if (!rc && n_p2p && n_p2p != n_links) {
        snprintf(why, why_len, "%d rows of P2P answers for %d GPUs", n_p2p, n_links);
        rc = -1;
    }
    for (int i = 0; !rc && i < n_p2p; i++) {
        if (p2p_widths[i] < n_links) {
            snprintf(why, why_len, "P2P row %d has %d answers for %d GPUs", i, p2p_widths[i],
                     n_links);
            rc = -1;
            break;
        }
        for (int j = 0; j < n_links; j++) {
            int v = topo_p2p_cell(p2ps[i][j]);
            t->link[i][j].p2p = v == 2 ? 1 : v;
        }
    }
    for (int i = 0; !rc && i < n_links; i++) t->link[i][i].p2p = 1;
    t->n = rc ? 0 : n_links;
    free(buf);
    return rc;
}

static struct {
    pthread_once_t once;
    int state;                  /* 0 unset, 1 parsed, -1 malformed */
    char why[256];
    rlGpuTopology t;
} topo_env = {PTHREAD_ONCE_INIT, 0, "", {0}};

static void topo_env_load(void) {
    const char *v = getenv("RL_GPU_TOPOLOGY");
    if (!v || !*v) return;
    topo_env.state = rl_gpu_topology_parse(v, &topo_env.t, topo_env.why,
                                           sizeof(topo_env.why)) ? -1 : 1;
}

int rl_gpu_topology_env(const rlGpuTopology **t, char *why, size_t why_len) {
    pthread_once(&topo_env.once, topo_env_load);
    if (topo_env.state < 0 && why) snprintf(why, why_len, "RL_GPU_TOPOLOGY: %s", topo_env.why);
    if (t) *t = topo_env.state > 0 ? &topo_env.t : NULL;
    return topo_env.state;
}

rlGpuLink rl_gpu_link(int a, int b) {
    rlGpuLink l = {RL_LINK_UNKNOWN, 0, -1};
    const rlGpuTopology *t;
    int env = rl_gpu_topology_env(&t, NULL, 0);
    if (env > 0) {
        if (a >= 0 && b >= 0 && a < t->n && b < t->n) l = t->link[a][b];
        return l;
    }
    if (a == b) return (rlGpuLink){RL_LINK_SELF, 0, 1};
    nvmlDevice_t da, db;
    if (env < 0 || !nv_ready() || nv_device(a, &da) || nv_device(b, &db)) return l;
    int status = 1;
    if (nv.p2p(da, db, NVML_P2P_CAPS_INDEX_READ, &status) == 0) l.p2p = status == 0;
    status = 1;
    if (nv.p2p(da, db, NVML_P2P_CAPS_INDEX_NVLINK, &status) == 0 && status == 0) {
        l.kind = RL_LINK_NVLINK;
        l.nvlinks = nv_nvlinks(da);
        return l;
    }
    int level = -1;
    if (nv.ancestor(da, db, &level)) return l;
    /* NVML's levels: 0 internal, 10 single switch, 20 multiple switches,
     * 30 host bridge, 40 NUMA node, 50 system (across sockets). */
    l.kind = level <= 10 ? RL_LINK_PIX : level <= 20 ? RL_LINK_PXB : level <= 30 ? RL_LINK_PHB
           : level <= 40 ? RL_LINK_NODE : RL_LINK_SYS;
    return l;
}

void rl_gpu_link_name(rlGpuLink l, char *out, size_t n) {
    if (l.kind == RL_LINK_NVLINK) {
        snprintf(out, n, "NV%d", l.nvlinks);
        return;
    }
    for (size_t i = 0; i < sizeof(link_names) / sizeof(link_names[0]); i++)
        if (link_names[i].kind == l.kind) {
            snprintf(out, n, "%s", link_names[i].name);
            return;
        }
    snprintf(out, n, "?");
}

int rl_gpu_link_fast(int a, int b) {
    rlGpuLink l = rl_gpu_link(a, b);
    if (l.kind == RL_LINK_UNKNOWN) return -1;
    return l.kind == RL_LINK_SELF || l.kind == RL_LINK_NVLINK;
}

/* One matrix: cell(a, b) for every pair of devices. */
static void topo_print_matrix(FILE *f, const char *title, const int *devices, int n,
                              void (*cell)(int a, int b, char *out, size_t len)) {
    fprintf(f, "  %-6s", title);
    for (int j = 0; j < n; j++) fprintf(f, " GPU%-4d", devices[j]);
    fprintf(f, "\n");
    for (int i = 0; i < n; i++) {
        fprintf(f, "  GPU%-3d", devices[i]);
        for (int j = 0; j < n; j++) {
            char c[16];
            cell(devices[i], devices[j], c, sizeof(c));
            fprintf(f, " %-7s", c);
        }
        fprintf(f, "\n");
    }
}

static void topo_link_text(int a, int b, char *out, size_t len) {
    rl_gpu_link_name(rl_gpu_link(a, b), out, len);
}

static void topo_p2p_text(int a, int b, char *out, size_t len) {
    int p2p = rl_gpu_link(a, b).p2p;
    snprintf(out, len, "%s", a == b ? "X" : p2p > 0 ? "OK" : p2p == 0 ? "NS" : "?");
}

void rl_gpu_topology_print(FILE *f, const int *devices, int n) {
    char why[300];
    int env = rl_gpu_topology_env(NULL, why, sizeof(why));
    if (env < 0) fprintf(f, "  (%s; links unknown)\n", why);
    if (env > 0) fprintf(f, "  (from RL_GPU_TOPOLOGY, not NVML)\n");
    topo_print_matrix(f, "link", devices, n, topo_link_text);
    topo_print_matrix(f, "P2P", devices, n, topo_p2p_text);
    fprintf(f, "  (X self, NV# NVLink with # links, PIX/PXB one or more PCIe switches, PHB host "
               "bridge, NODE within a NUMA node, SYS across sockets: slowest; P2P: OK "
               "peer-to-peer reads work, NS not supported)\n");
}
