/* rope.h: the rotary embedding's per-dimension inverse frequencies, with
 * the scaling a config asks for, computed once on the host in double.
 *
 * Every backend rotates dimension i (and i + head_dim/2) of a head at
 * position p by the angle p * inv_freq[i]; scaled RoPE variants differ only
 * in that table and in a factor on cos and sin (YaRN's attention factor), so
 * both live here, once, and reach the backends through rope_init. */
#ifndef RL_ROPE_H
#define RL_ROPE_H

#include "kernels/config.h"

/* inv_freq[head_dim / 2] and the factor that multiplies cos and sin. */
void rl_rope_frequencies(const rlModelConfig *cfg, double *inv_freq, double *scale);

#endif
