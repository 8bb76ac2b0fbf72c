/* moe_chunks.h: which expert and which 16-byte chunk of its row a lane of
 * moe.cu's down-projection GEMV (moe_down_gemv_kernel) reads.  One output's
 * k expert rows are mc = m / 8 chunks each; a block's lanes stride over the
 * k * mc chunks of all of them at once, chunk c being chunk c % mc of expert
 * c / mc's row, and a lane steps to its next chunk with a compare instead of
 * a division.  Plain C (RL_HD from rng.h), so tests/test_moe_chunks.c checks
 * the stepping on the CPU. */
#ifndef RL_CUDA_MOE_CHUNKS_H
#define RL_CUDA_MOE_CHUNKS_H

#include "kernels/rng.h"

typedef struct rlMoeChunk {
    int j;  /* the token's j-th expert */
    int q;  /* chunk q of its row, 0 <= q < mc */
} rlMoeChunk;

/* Chunk c of the rows. */
static inline RL_HD rlMoeChunk moe_chunk_at(int c, int mc) {
    rlMoeChunk p = {c / mc, c % mc};
    return p;
}

/* The chunk `stride` chunks past p, where step = moe_chunk_at(stride, mc):
 * p.q + step.q < 2 mc, so one carry is enough. */
static inline RL_HD rlMoeChunk moe_chunk_next(rlMoeChunk p, rlMoeChunk step, int mc) {
    p.j += step.j, p.q += step.q;
    if (p.q >= mc) p.q -= mc, p.j++;
    return p;
}

#endif
