/* sample.h: one row of logits to a result, with the exact semantics every
 * backend must reproduce (kernels/README.md, "Sampling").  The CPU backend
 * calls it per row; a device backend may download logits and call it too. */
#ifndef RL_CPU_SAMPLE_H
#define RL_CPU_SAMPLE_H

#include "kernels/batch.h"
#include "kernels/error.h"

/* Checks a row's parameters (n_top, temperature, top_p, min_p, top_k,
 * target, penalties) and its logit adjustments, adjs[adj0, adj0 + n_adj). */
int rl_sample_check(const rlRowSpec *spec, const rlLogitAdj *adjs, int vocab, rlError *err);

/* The bytes of scratch rl_sample_row needs for spec (0: none). */
size_t rl_sample_scratch(const rlRowSpec *spec, int vocab);

/* One row's logits after its adjustments (rl_sample_adjust: the
 * README's step 5), in place on a copy of the row. */
void rl_sample_adjust(float *logits, const rlRowSpec *spec, const rlLogitAdj *adjs);

/* scratch: rl_sample_scratch(spec, vocab) bytes.  Returns -1 (no error text)
 * only when scratch is needed and NULL. */
int rl_sample_row(const float *logits, int vocab, const rlRowSpec *spec, const rlLogitAdj *adjs,
                  rlRowResult *out, void *scratch);

#endif
