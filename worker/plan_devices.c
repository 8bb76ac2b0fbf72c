/* plan_devices.c: the memory of real GPUs for a plan: each device's total
 * and what other processes already hold on it.
 *
 * The numbers come from NVML, which answers without creating a CUDA context
 * (a context would itself take memory the plan is measuring).  This build
 * has no NVML reader yet, so --devices says so and names the alternative. */
#include "plan.h"

int plan_read_devices(const int *devices, int n, rlPlanOptions *o, rlError *err) {
    (void)devices, (void)o;
    return rl_error(err, RL_EDEVICE,
                    "--devices: reading the memory of %d GPU%s needs NVML, which this build of "
                    "redlm does not read yet; plan for hypothetical GPUs instead with --gpus %d "
                    "--gpu-memory SIZE (nvidia-smi --query-gpu=memory.total,memory.used "
                    "--format=csv shows the sizes)", n, n > 1 ? "s" : "", n);
}
