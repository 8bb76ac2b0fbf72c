/* engine_flags.h: the engine's command-line flags, declared in one place so
 * `redlm generate`, `redlm worker` and `redlm bench` accept the same ones
 * (with vLLM's spellings), and `plan` the sizing ones. */
#ifndef RL_ENGINE_FLAGS_H
#define RL_ENGINE_FLAGS_H

#include "kernels/error.h"
#include "worker/engine/engine.h"
#include "worker/engine/layout.h"
#include "worker/lib/flags.h"

/* The engine's options and the layout flags (--tp, --pp, --devices, ...)
 * they point into: keep the struct alive as long as the options. */
typedef struct rlEngineFlags {
    rlEngineOptions o;
    rlLayout lay;
    const char *kv_cache_dtype; /* "auto", the one choice (engine_flags_add_vllm) */
    int trust_remote_code;      /* accepted, no effect */
} rlEngineFlags;

void engine_flags_init(rlEngineFlags *f);
/* Declare --model (required) and the engine's and the layout's flags,
 * bound to f.  The strings stored point into argv. */
void engine_flags_add(rlFlags *fs, rlEngineFlags *f);
/* The flags that size a run (--block-size, --gpu-memory-utilization,
 * --max-num-seqs, --max-num-batched-tokens, --max-model-len), bound to the
 * given fields: the engine's, or `plan`'s. */
void engine_flags_add_limits(rlFlags *fs, int *block_size, double *gpu_memory_utilization,
                             int *max_num_seqs, int *max_num_batched_tokens, int *max_model_len);
/* vLLM's --kv-cache-dtype and --trust-remote-code, so a vLLM command line
 * runs as it is (generate, worker, bench, plan).  The KV cache is kept in
 * the model's dtype: `auto` is the one choice, fp8 and the others are
 * refused saying so.  No model code is ever run (redlm runs no Python), so
 * --trust-remote-code changes nothing. */
void engine_flags_add_vllm(rlFlags *fs, const char **kv_cache_dtype, int *trust_remote_code);
/* vLLM's --enforce-eager: CUDA decode steps without graphs (generate,
 * worker, bench). */
void engine_flags_add_eager(rlFlags *fs, int *enforce_eager);
/* Copy the parsed layout into f->o; call once, after the parse. */
void engine_flags_finish(rlEngineFlags *f);

/* The choices of --backend (cpu, cuda), --load-format (auto, dummy) and
 * --dtype (auto, bf16, fp16, fp32, and vLLM's spellings of them), for
 * commands that keep them elsewhere (`bench`, `plan`). */
extern const rlFlagChoice engine_backends[];
extern const rlFlagChoice engine_load_formats[];
extern const rlFlagChoice engine_dtypes[];
extern const rlFlagChoice engine_generation_configs[];
/* --quantization (awq, gptq, fp8) and its help, for `bench` too. */
extern const rlFlagChoice engine_quantizations[];
#define ENGINE_QUANTIZATION_HELP                                                  \
    "dummy weights in that format (default: the config's\n"                       \
    "quantization_config, which a checkpoint must match);\n"                      \
    "kept quantized on CUDA, dequantized on the CPU;\n"                          \
    "also vLLM's awq_marlin, gptq_marlin"

#endif
