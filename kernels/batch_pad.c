/* batch_pad.c: a decode step padded to more sequences.
 *
 * Graph replays and GEMM plans are made per batch size, so a decode step
 * runs padded to its rl_batch_bucket size (model.c), and the engine plans
 * each bucket at start on steps of padding alone (worker/engine/engine.c).  Both
 * build padding here, the one definition of what a padding sequence is: one
 * token (id 0) at position 0 that stores nothing (slot -1), attends to
 * block 0 and has a logit row that samples nothing. */
#include <stdlib.h>
#include <string.h>

#include "kernels/batch.h"

int rl_batch_pad(rlBatchPad *pad, const rlBatch *b, int p, rlBatch *out) {
    int n = b->n_seqs, mb = b->max_blocks > 0 ? b->max_blocks : 1;
    size_t ints = (size_t)p * (5 + (size_t)mb) + 1;
    if (ints > pad->ints_cap) {
        int32_t *w = realloc(pad->ints, ints * sizeof *w);
        if (!w) return -1;
        pad->ints = w, pad->ints_cap = ints;
    }
    if (p > pad->rows_cap) {
        rlRowSpec *r = realloc(pad->rows, (size_t)p * sizeof *r);
        if (!r) return -1;
        pad->rows = r, pad->rows_cap = p;
    }
    int32_t *tokens = pad->ints, *positions = tokens + p, *slots = positions + p,
            *seq_len = slots + p, *seq_start = seq_len + p, *tables = seq_start + p + 1;
    if (n > 0) {
        memcpy(tokens, b->tokens, (size_t)n * sizeof *tokens);
        memcpy(positions, b->positions, (size_t)n * sizeof *positions);
        memcpy(slots, b->slots, (size_t)n * sizeof *slots);
        memcpy(seq_len, b->seq_len, (size_t)n * sizeof *seq_len);
        memcpy(tables, b->block_tables, (size_t)n * mb * sizeof *tables);
        memcpy(pad->rows, b->rows, (size_t)n * sizeof *pad->rows);
    }
    memset(tables + (size_t)n * mb, 0, (size_t)(p - n) * mb * sizeof *tables);
    for (int s = 0; s <= p; s++) seq_start[s] = s;
    for (int s = n; s < p; s++) {
        tokens[s] = positions[s] = 0;
        slots[s] = -1;
        seq_len[s] = 1;
        pad->rows[s] = (rlRowSpec){.token = s, .target = -1, .top_p = 1};
    }
    *out = (rlBatch){.n_seqs = p, .n_tokens = p, .tokens = tokens, .positions = positions,
                     .slots = slots, .seq_start = seq_start, .seq_len = seq_len,
                     .block_tables = tables, .max_blocks = mb, .n_rows = p, .rows = pad->rows,
                     .n_adjs = b->n_adjs, .adjs = b->adjs,
                     .n_pen_fills = b->n_pen_fills, .pen_fills = b->pen_fills};
    return 0;
}

void rl_batch_pad_free(rlBatchPad *pad) {
    free(pad->ints);
    free(pad->rows);
    memset(pad, 0, sizeof *pad);
}
