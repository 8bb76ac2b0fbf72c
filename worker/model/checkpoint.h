/* checkpoint.h: a Hugging Face Qwen2 model directory, opened and checked.
 *
 * checkpoint_open reads the config, maps every safetensors file read-only
 * and checks every tensor's name, dtype and shape against the config before
 * returning, so the model code can take tensors by name without
 * re-checking.  The mappings stay valid until checkpoint_close. */
#ifndef RL_CHECKPOINT_H
#define RL_CHECKPOINT_H

#include "kernels/config.h"
#include "kernels/error.h"
#include "kernels/model.h"

typedef struct rlCheckpoint rlCheckpoint;

/* Config only: a model directory or a config.json (for dummy weights). */
int checkpoint_read_config(const char *path, rlModelConfig *cfg, rlError *err);

/* Opens a model directory: config, generation config and every tensor
 * checked.  cfg->torch_dtype is set to the dtype the tensors are stored in
 * (which wins over the one config.json declares).  Errors are RL_EMODEL. */
rlCheckpoint *checkpoint_open(const char *dir, rlModelConfig *cfg, rlError *err);

/* rlTensorLookup-compatible (kernels/model.h): ctx is the rlCheckpoint *.
 * Serves the tensors of rl_model_expected_tensors(); out->data points into
 * the read-only mapping. */
int checkpoint_lookup(void *ctx, const char *name, rlTensorView *out, rlError *err);

void checkpoint_close(rlCheckpoint *c);

#endif
