/* plan_devices.c: the memory of real GPUs for a plan: each device's total,
 * what is free and what other processes hold on it (NVML's process list, so
 * the driver's own reservation is no process), from NVML (kernels/gpuinfo.c),
 * which answers without creating a CUDA context (a context would itself take
 * memory the plan is measuring), with each one's memory bandwidth and the
 * links between them.  Run it before this process touches a GPU. */
#include "kernels/gpuinfo.h"
#include "worker/plan/plan.h"

int plan_read_devices(const int *devices, int n, rlPlanOptions *o, rlError *err) {
    rlGpuHost host;
    char why[256];
    if (rl_gpu_probe(&host, why, sizeof(why)))
        return rl_error(err, RL_EDEVICE,
                        "cannot read the memory of %d GPU%s: %s. Install the NVIDIA driver "
                        "(`nvidia-smi` checks it), plan for hypothetical GPUs with `redlm plan "
                        "--gpus %d --gpu-memory SIZE`, or run with --backend cpu",
                        n, n == 1 ? "" : "s", why, n);
    if (n > RL_PLAN_MAX_GPUS)
        return rl_error(err, RL_EUSAGE, "--devices lists %d GPUs; at most %d", n,
                        RL_PLAN_MAX_GPUS);
    for (int i = 0; i < n; i++) {
        if (devices[i] < 0 || devices[i] >= host.count)
            return rl_error(err, RL_EDEVICE,
                            "--devices names GPU %d but %d %s visible (numbered 0-%d); choose "
                            "among them, and check CUDA_VISIBLE_DEVICES", devices[i], host.count,
                            host.count == 1 ? "is" : "are", host.count - 1);
        const rlGpu *g = &host.gpus[devices[i]];
        o->gpu_total[i] = (size_t)g->total;
        o->gpu_used[i] = (size_t)g->others;
        o->gpu_free[i] = (size_t)g->free;
        o->gpu_ordinal[i] = devices[i];
        o->gpu_bandwidth[i] = g->bandwidth;
    }
    o->n_gpus = n;
    /* The links the cost model ranks layouts by: NVML's, or RL_GPU_TOPOLOGY's. */
    rlGpuTopology t = {.n = n < RL_GPU_MAX ? n : RL_GPU_MAX};
    for (int i = 0; i < t.n; i++)
        for (int j = 0; j < t.n; j++) t.link[i][j] = rl_gpu_link(devices[i], devices[j]);
    plan_set_links(o, RL_PLAN_LINK_NVLINK, NULL);
    plan_set_topology(o, &t, rl_gpu_topology_env(NULL, NULL, 0) > 0 ? "from RL_GPU_TOPOLOGY"
                                                                   : "from NVML");
    return 0;
}
