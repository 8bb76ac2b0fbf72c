/* batch_pad.c: steps of padding.
 *
 * Graph replays and GEMM plans are made per batch size, so a decode step
 * runs padded to its rl_batch_bucket size (model.c), and the engine plans
 * each bucket at start on steps of padding alone, after one prefill step of
 * padding of its largest size (worker/engine/engine.c).  All build padding
 * here, the one definition of what a padding token is: id 0, storing
 * nothing (slot -1), its keys read from block 0; a decode padding sequence
 * is one such token at position 0 with a logit row that samples nothing. */
#include <stdlib.h>
#include <string.h>

#include "kernels/batch.h"

/* pad's arrays grown to hold ints int32s and rows row specs. */
static int pad_reserve(rlBatchPad *pad, size_t ints, int rows) {
    if (ints > pad->ints_cap) {
        int32_t *w = realloc(pad->ints, ints * sizeof *w);
        if (!w) return -1;
        pad->ints = w, pad->ints_cap = ints;
    }
    if (rows > pad->rows_cap) {
        rlRowSpec *r = realloc(pad->rows, (size_t)rows * sizeof *r);
        if (!r) return -1;
        pad->rows = r, pad->rows_cap = rows;
    }
    return 0;
}

int rl_batch_pad(rlBatchPad *pad, const rlBatch *b, int p, rlBatch *out) {
    int n = b->n_seqs, mb = b->max_blocks > 0 ? b->max_blocks : 1;
    if (pad_reserve(pad, (size_t)p * (5 + (size_t)mb) + 1, p)) return -1;
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

int rl_batch_pad_prefill(rlBatchPad *pad, int n_tokens, int max_len, int max_seqs, int max_rows,
                         int block_size, rlBatch *out) {
    int len = max_len > 0 && max_len < n_tokens ? max_len : n_tokens;
    if (len < 1 || max_seqs < 1 || block_size < 1) return -1;
    int n = (n_tokens + len - 1) / len;
    if (n > max_seqs) n = max_seqs, n_tokens = n * len;
    int rows = n_tokens < max_rows ? n_tokens : max_rows, mb = (len + block_size - 1) / block_size;
    if (pad_reserve(pad, (size_t)3 * n_tokens + 2 * (size_t)n + 1 + (size_t)n * mb, rows)) return -1;
    int32_t *tokens = pad->ints, *positions = tokens + n_tokens, *slots = positions + n_tokens,
            *seq_start = slots + n_tokens, *seq_len = seq_start + n + 1, *tables = seq_len + n;
    memset(tokens, 0, (size_t)n_tokens * sizeof *tokens);
    memset(tables, 0, (size_t)n * mb * sizeof *tables);
    for (int s = 0; s < n; s++) {
        seq_start[s] = s * len;
        seq_len[s] = (s + 1) * len <= n_tokens ? len : n_tokens - s * len;
        for (int i = 0; i < seq_len[s]; i++) positions[s * len + i] = i, slots[s * len + i] = -1;
    }
    seq_start[n] = n_tokens;
    for (int r = 0; r < rows; r++) pad->rows[r] = (rlRowSpec){.token = r, .target = 0, .top_p = 1};
    *out = (rlBatch){.n_seqs = n, .n_tokens = n_tokens, .tokens = tokens, .positions = positions,
                     .slots = slots, .seq_start = seq_start, .seq_len = seq_len,
                     .block_tables = tables, .max_blocks = mb, .n_rows = rows, .rows = pad->rows};
    return 0;
}

void rl_batch_pad_free(rlBatchPad *pad) {
    free(pad->ints);
    free(pad->rows);
    memset(pad, 0, sizeof *pad);
}
