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

/* The weight type a --dtype name (auto, bf16, fp16, fp32) means for this
 * model: auto is the checkpoint's own, except that fp32 checkpoints run in
 * bf16.  The one home of that rule, for the engine and `plan`. */
int modelcfg_dtype(const rlModelConfig *cfg, const char *name, rlDtype *out, rlError *err);

#endif
