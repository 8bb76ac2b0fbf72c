/* sample.h: one row of logits to a result, with the exact semantics every
 * backend must reproduce (kernels/README.md, "Sampling").  The CPU backend
 * calls it per row; a device backend may download logits and call it too. */
#ifndef RL_CPU_SAMPLE_H
#define RL_CPU_SAMPLE_H

#include "kernels/batch.h"
#include "kernels/error.h"

/* Checks a row's parameters (n_top, temperature, top_p, min_p, top_k,
 * target, penalties), its logit adjustments, adjs[adj0, adj0 + n_adj), and
 * the counts its penalty table starts from, fills[fill0, fill0 + n_fill). */
int rl_sample_check(const rlRowSpec *spec, const rlLogitAdj *adjs, const rlPenFill *fills,
                    int vocab, rlError *err);

/* Start penalty table pen ([vocab], RL_PEN values) over from spec's fills. */
void rl_sample_fill(uint32_t *pen, int vocab, const rlRowSpec *spec, const rlPenFill *fills);

/* The bytes of scratch rl_sample_row needs for spec (0: none). */
size_t rl_sample_scratch(const rlRowSpec *spec, int vocab);

/* One row's logits after its adjustments (the README's step 5): adj, a
 * copy of the raw row, gets the penalties of pen (the row's table, or NULL)
 * and the entries of adjs. */
void rl_sample_adjust(float *adj, const float *raw, int vocab, const rlRowSpec *spec,
                      const rlLogitAdj *adjs, const uint32_t *pen);

/* pen: the row's penalty table (spec->pen > 0), which the drawn token is
 * added to; else NULL.  scratch: rl_sample_scratch(spec, vocab) bytes.
 * Returns -1 (no error text) only when scratch is needed and NULL. */
int rl_sample_row(const float *logits, int vocab, const rlRowSpec *spec, const rlLogitAdj *adjs,
                  uint32_t *pen, rlRowResult *out, void *scratch);

#endif
