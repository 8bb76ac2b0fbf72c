/* sample.h: one row of logits to a result, with the exact semantics every
 * backend must reproduce (kernels/README.md, "Sampling").  The CPU backend
 * calls it per row; a device backend may download logits and call it too. */
#ifndef RL_CPU_SAMPLE_H
#define RL_CPU_SAMPLE_H

#include "kernels/batch.h"
#include "kernels/error.h"

/* Checks a row's parameters (n_top, temperature, top_p, min_p, top_k, target). */
int rl_sample_check(const rlRowSpec *spec, int vocab, rlError *err);

/* scratch: vocab ints, used only when the row samples with temperature > 0.
 * Returns -1 (no error text) only when scratch is needed and NULL. */
int rl_sample_row(const float *logits, int vocab, const rlRowSpec *spec, rlRowResult *out,
                  int *scratch);

#endif
