/* launch_devices.c: which GPUs the instances run on.  The list is --devices,
 * or every GPU NVML sees; launch_assign is the one place that decides which
 * instance gets which of them.
 *
 * A TP group all-reduces twice per layer, so its GPUs should share the
 * fastest links there are: each group is placed where its slowest link is
 * fastest (an NVLink island before a PCIe switch, a switch before the host
 * bridge, the sockets' link last), taking devices in list order among
 * equals, so with no topology known (no NVML) the list order stands.
 * RL_GPU_TOPOLOGY stands in for NVML (kernels/gpuinfo.h). */
#include <stdio.h>

#include "kernels/gpuinfo.h"
#include "worker/launch/launch.h"

/* Lower is faster; unknown links rank last. */
static int launch_link_rank(int a, int b) {
    rlGpuLink l = rl_gpu_link(a, b);
    if (l.kind == RL_LINK_UNKNOWN) return 99;
    int rank = l.kind == RL_LINK_SELF ? 0 : (int)l.kind;
    return l.p2p == 0 ? rank + 10 : rank;
}

/* The tp free devices (by index into l->devices) whose slowest link is the
 * fastest, seeded by each free device in list order; -1 rank when fewer. */
static int launch_best_group(const rlLaunch *l, const int *used, int *group) {
    int tp = l->tp, best = -1;
    for (int seed = 0; seed < l->n_devices; seed++) {
        if (used[seed]) continue;
        int g[RL_MAX_RANKS], n = 1, worst = 0, taken[RL_MAX_RANKS] = {0};
        g[0] = seed;
        taken[seed] = 1;
        while (n < tp) {
            /* the free device nearest to every member so far */
            int pick = -1, pick_rank = 0;
            for (int d = 0; d < l->n_devices; d++) {
                if (used[d] || taken[d]) continue;
                int r = 0;
                for (int m = 0; m < n; m++) {
                    int x = launch_link_rank(l->devices[g[m]], l->devices[d]);
                    if (x > r) r = x;
                }
                if (pick < 0 || r < pick_rank) pick = d, pick_rank = r;
            }
            if (pick < 0) return -1;
            g[n++] = pick;
            taken[pick] = 1;
            if (pick_rank > worst) worst = pick_rank;
        }
        if (best < 0 || worst < best) {
            best = worst;
            for (int m = 0; m < tp; m++) group[m] = g[m];
        }
    }
    return best;
}

/* One line per TP group placed by a known topology: its GPUs, slowest link. */
static void launch_say_group(const rlLaunch *l, int k) {
    const int *g = &l->assigned[k * l->tp];
    int worst = 0, wa = g[0], wb = g[1];
    for (int a = 0; a < l->tp; a++)
        for (int b = a + 1; b < l->tp; b++) {
            int r = launch_link_rank(g[a], g[b]);
            if (r > worst) worst = r, wa = g[a], wb = g[b];
        }
    if (worst == 99) return; /* no topology: the list order, nothing to say */
    char list[256] = "", name[16];
    for (int m = 0, off = 0; m < l->tp && off < (int)sizeof(list) - 8; m++)
        off += snprintf(list + off, sizeof(list) - (size_t)off, "%s%d", m ? "," : "", g[m]);
    rl_gpu_link_name(rl_gpu_link(wa, wb), name, sizeof(name));
    fprintf(stderr, "redlm launch: instance %d stage %d: TP group on GPUs %s, slowest link %s\n",
            k / l->pp, k % l->pp, list, name);
}

void launch_assign(rlLaunch *l) {
    int groups = l->instances * l->pp, used[RL_MAX_RANKS] = {0};
    for (int k = 0; k < groups; k++) {
        int g[RL_MAX_RANKS];
        if (launch_best_group(l, used, g) < 0) break; /* cannot happen: counts checked */
        for (int m = 0; m < l->tp; m++) {
            l->assigned[k * l->tp + m] = l->devices[g[m]];
            used[g[m]] = 1;
        }
        if (l->tp > 1) launch_say_group(l, k);
    }
}

int launch_devices(rlLaunch *l, rlError *err) {
    if (!l->cuda) {
        if (l->n_devices)
            fprintf(stderr, "redlm launch: CPU workers (no --backend cuda): --devices ignored\n");
        return 0;
    }
    if (!l->n_devices) {
        rlGpuHost host;
        char why[256];
        if (rl_gpu_probe(&host, why, sizeof(why)) || host.count == 0)
            return rl_error(err, RL_EDEVICE, "no --devices given and no GPU found (%s); list "
                            "the devices, or drop --backend cuda for CPU workers",
                            host.count == 0 ? why : "NVML lists none");
        for (; l->n_devices < host.count && l->n_devices < RL_MAX_RANKS; l->n_devices++)
            l->devices[l->n_devices] = l->n_devices;
    }
    int need = l->instances * l->tp * l->pp;
    if (l->n_devices < need)
        return rl_error(err, RL_EUSAGE, "%d instances of tp %d x pp %d need %d devices, but %d "
                        "are listed; use fewer instances or a smaller layout", l->instances,
                        l->tp, l->pp, need, l->n_devices);
    if (l->n_devices > need)
        fprintf(stderr, "redlm launch: warning: %d listed devices stay unused\n",
                l->n_devices - need);
    launch_assign(l);
    return 0;
}
