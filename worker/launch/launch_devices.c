/* launch_devices.c: which GPUs the instances run on.  The list is --devices,
 * or every GPU NVML sees; launch_assign is the one place that decides which
 * instance gets which of them. */
#include <stdio.h>

#include "kernels/gpuinfo.h"
#include "worker/launch/launch.h"

void launch_assign(rlLaunch *l) {
    /* In list order: instance k takes the k-th run of tp*pp devices. */
    int n = l->instances * l->tp * l->pp;
    for (int i = 0; i < n; i++) l->assigned[i] = l->devices[i];
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
