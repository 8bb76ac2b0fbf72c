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

#endif
