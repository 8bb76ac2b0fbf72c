/* engine_plan.h: a GPU start's memory plan, checked before anything heavy.
 *
 * The engine builds the planner's options from its own (the planner never
 * knows the engine), so a start that cannot fit stops in seconds with its
 * cause instead of after minutes of loading weights. */
#ifndef RL_ENGINE_PLAN_H
#define RL_ENGINE_PLAN_H

#include <stdio.h>

#include "kernels/config.h"
#include "kernels/error.h"
#include "worker/engine/engine.h"
#include "worker/plan/plan.h"

/* The memory plan (plan.h) for o's TP x PP layout on the real free memory
 * of its devices, printed to log.  RL_EMEMORY with the plan's numbers and
 * the flags to change when it does not fit; RL_EDEVICE when the GPUs cannot
 * be read or are fewer than the ranks.  Runs before any weight is loaded,
 * and before this process creates a CUDA context.  *kv_blocks: the KV
 * blocks every rank has room for. */
int engine_check_plan(const rlModelConfig *cfg, const rlEngineOptions *o, FILE *log,
                      long long *kv_blocks, rlError *err);

/* The CPU backend holds every rank's weights in this process as fp32
 * (quantized layers dequantized at load), beside kv_bytes of KV cache.
 * RL_EMEMORY, with the numbers and what to do, when that is more than the
 * memory the kernel says is available (MemAvailable, or the cgroup's
 * limit when lower): the start stops before the first weight instead of
 * being killed by the OOM killer halfway through loading. */
int engine_check_host_memory(const rlModelConfig *cfg, int tp, int pp, const int *partition,
                             size_t kv_bytes, rlError *err);

/* The --max-num-seqs and --max-num-batched-tokens a start without them
 * gets (0 in o: not given), filled into o and each printed to log with its
 * reason.  As vLLM's EngineArgs picks them: on GPUs of 70 GiB or more other
 * than the A100, 1024 sequences and 16384 new tokens a step offline
 * (o->offline), 8192 serving; else 256 and 8192 / 2048; the step halved
 * (not under 2048) while its activations would take more than an eighth
 * of what the weights leave of a rank's share.  The CPU backend: 256 and
 * 2048.  RL_EDEVICE when the GPUs cannot be read. */
int engine_default_batch(const rlModelConfig *cfg, rlEngineOptions *o, FILE *log, rlError *err);
/* vLLM's --max-num-seqs for devices (real or hypothetical) of type gpu_name;
 * *rule: the rule, in words. */
int engine_max_num_seqs_vllm(const rlPlanOptions *devices, const char *gpu_name,
                             const char **rule);
/* vLLM's value before any halving, for the devices of a plan's options
 * (real or hypothetical) of type gpu_name; *rule: the rule, in words. */
int engine_batched_tokens_vllm(const rlPlanOptions *devices, const char *gpu_name, int offline,
                               const char **rule);
/* The device type of devices dev[0..n) for the rule above: a name NVML
 * gives ("NVIDIA A100-SXM4-80GB"), an A100's where any is one; "GPU"
 * where none can be read. */
void engine_gpu_name(const int *dev, int n, char *name, size_t len);
/* The same rule on the devices of a plan's options (real or hypothetical),
 * gpu_name the device type (an A100 takes the smaller defaults). */
int engine_batched_tokens_for(const rlModelConfig *cfg, const rlEngineOptions *o,
                              const rlPlanOptions *devices, const char *gpu_name, char *why,
                              size_t why_len);

#endif
