/* batch_check.c: is a step's batch consistent with a KV cache?
 *
 * A device backend indexes its KV memory with the batch's slots and block
 * tables inside kernels, where a bad index is a memory fault that takes the
 * whole GPU context down; checking on the host first turns a scheduler bug
 * into an error message. */
#include "kernels/batch.h"

int rl_batch_check(const rlBatch *b, int n_blocks, int block_size, rlError *err) {
    if (b->n_seqs < 0 || b->n_tokens < 0 || b->n_rows < 0 || b->max_blocks < 0 ||
        b->seq_start[0] != 0 || b->seq_start[b->n_seqs] != b->n_tokens)
        return rl_error(err, RL_EINPUT,
                        "invalid step: %d sequences, %d tokens, %d rows; seq_start must run "
                        "from 0 to the token count", b->n_seqs, b->n_tokens, b->n_rows);
    for (int s = 0; s < b->n_seqs; s++) {
        int t0 = b->seq_start[s], t1 = b->seq_start[s + 1], len = b->seq_len[s];
        int need = (len + block_size - 1) / block_size;
        if (t1 < t0 || len < t1 - t0 || need > b->max_blocks)
            return rl_error(err, RL_EINPUT,
                            "invalid step: sequence %d has %d new tokens, KV length %d, "
                            "%d blocks per table", s, t1 - t0, len, b->max_blocks);
        const int32_t *bt = b->block_tables + (size_t)s * b->max_blocks;
        for (int i = 0; i < need; i++)
            if (bt[i] < 0 || bt[i] >= n_blocks)
                return rl_error(err, RL_EINPUT,
                                "invalid step: sequence %d's block %d is %d, outside the "
                                "cache's %d blocks", s, i, bt[i], n_blocks);
        for (int t = t0; t < t1; t++) {
            int pos = b->positions[t];
            if (pos < len - (t1 - t0) || pos >= len ||
                (b->slots[t] != -1 &&
                 b->slots[t] != bt[pos / block_size] * block_size + pos % block_size))
                return rl_error(err, RL_EINPUT,
                                "invalid step: token %d of sequence %d at position %d (KV "
                                "length %d) has slot %d, not its block table's", t, s, pos,
                                len, b->slots[t]);
        }
    }
    for (int r = 0; r < b->n_rows; r++) {
        const rlRowSpec *row = &b->rows[r];
        if (row->token < 0 || row->token >= b->n_tokens)
            return rl_error(err, RL_EINPUT, "invalid step: logit row %d points at token %d of %d",
                            r, row->token, b->n_tokens);
        if (row->n_adj < 0 || (row->n_adj > 0 && (row->adj0 < 0 || !b->adjs ||
                                                  row->adj0 > b->n_adjs - row->n_adj)))
            return rl_error(err, RL_EINPUT, "invalid step: logit row %d's adjustments %d..%d "
                            "are outside the step's %d", r, row->adj0, row->adj0 + row->n_adj,
                            b->n_adjs);
        if (row->pen < 0 || row->pen > RL_MAX_PEN ||
            (row->pen_fill && (row->pen == 0 || row->n_fill < 0 || row->fill0 < 0 ||
                               (row->n_fill > 0 && !b->pen_fills) ||
                               row->fill0 > b->n_pen_fills - row->n_fill)))
            return rl_error(err, RL_EINPUT, "invalid step: logit row %d's penalty table %d (filled "
                            "from %d..%d of the step's %d counts) is not one of 1..%d", r,
                            row->pen, row->fill0, row->fill0 + row->n_fill, b->n_pen_fills,
                            RL_MAX_PEN);
    }
    return 0;
}
