/* engine_plan.c: the engine's options as the planner's (see engine_plan.h). */
#include "worker/engine/engine_plan.h"

#include <string.h>

#include "worker/plan/plan.h"

int engine_check_plan(const rlModelConfig *cfg, const rlEngineOptions *o, FILE *log,
                       long long *kv_blocks, rlError *err) {
    int tp = o->tp > 0 ? o->tp : 1, pp = o->pp > 0 ? o->pp : 1;
    int dev[RL_PLAN_MAX_GPUS], n = o->devices ? o->n_devices : tp * pp;
    if (n > RL_PLAN_MAX_GPUS || n < 1)
        return rl_error(err, RL_EUSAGE, "%d devices: give between 1 and %d", n, RL_PLAN_MAX_GPUS);
    if (plan_check_gpu_count(1, tp, pp, n, err)) return -1;
    for (int i = 0; i < n; i++) dev[i] = o->devices ? o->devices[i] : i;
    rlPlanOptions po;
    plan_options_init(&po, 0, 0);
    po.dtype = !strcmp(o->dtype, "fp16") ? RL_F16 : !strcmp(o->dtype, "fp32") ? RL_F32 : RL_BF16;
    po.max_model_len = o->max_model_len;
    po.max_num_seqs = o->max_num_seqs;
    po.max_num_batched_tokens = o->max_num_batched_tokens;
    po.block_size = o->block_size;
    po.gpu_memory_utilization = o->gpu_memory_utilization;
    if (plan_read_devices(dev, n, &po, err)) return -1;
    rlPlan p;
    int rc = plan_layout(cfg, &po, 1, tp, pp, &p, err);
    if (p.n_layouts) plan_print(log, &p);
    if (!rc) *kv_blocks = p.layouts[0].kv_blocks[0];
    plan_free(&p);
    return rc;
}
