/* modelcfg.h: a Hugging Face config.json (+ generation_config.json) read
 * into an rlModelConfig, with every value checked.
 *
 * Separate from the weights so --load-format dummy can size a model from a
 * config file alone, and so a bad config is reported before any shard is
 * touched. */
#ifndef RL_MODELCFG_H
#define RL_MODELCFG_H

#include "kernels/config.h"
#include "kernels/error.h"

/* path: a model directory (its config.json and, when present, its
 * generation_config.json) or a config file; a file named config.json also
 * picks up the generation_config.json beside it.  Errors are RL_EMODEL. */
int modelcfg_load(const char *path, rlModelConfig *cfg, rlError *err);

/* The sampling defaults a model ships in its generation_config.json, which
 * vLLM applies (`--generation-config auto`) to the fields a request leaves
 * out.  Kept apart from rlModelConfig: they shape requests, not the model. */
enum {
    RL_DEFAULT_TEMPERATURE = 1 << 0,
    RL_DEFAULT_TOP_P = 1 << 1,
    RL_DEFAULT_TOP_K = 1 << 2,
    RL_DEFAULT_MIN_P = 1 << 3,
    RL_DEFAULT_REPETITION_PENALTY = 1 << 4,
    RL_DEFAULT_MAX_TOKENS = 1 << 5,
};
typedef struct rlSamplingDefaults {
    unsigned set;               /* RL_DEFAULT_*: the ones the file gives */
    double temperature, top_p, min_p, repetition_penalty;
    int top_k;                  /* 0: off (the file's -1 or 0) */
    int max_tokens;             /* the file's max_new_tokens (vLLM's name for it: max_tokens) */
} rlSamplingDefaults;

/* path as for modelcfg_load; no generation_config.json is no defaults. */
int modelcfg_sampling_defaults(const char *path, rlSamplingDefaults *d, rlError *err);

/* The weight type a --dtype name (auto, bf16, fp16, fp32) means for this
 * model: auto is the checkpoint's own, except that fp32 checkpoints run in
 * bf16.  The one home of that rule, for the engine and `plan`. */
int modelcfg_dtype(const rlModelConfig *cfg, const char *name, rlDtype *out, rlError *err);

#endif
