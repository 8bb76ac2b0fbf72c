/* batch.h: one forward step's input, as the engine hands it to the model.
 *
 * A step is one flat batch of new tokens from many sequences at mixed
 * positions: prompt chunks and single decode tokens together.  It is a plain
 * struct of arrays so a device backend can stage it in one transfer and a
 * captured CUDA graph can replay over the same buffers.  The scheduler owns
 * block numbers; the backend owns the KV memory they index. */
#ifndef RL_BATCH_H
#define RL_BATCH_H

#include <stdint.h>

#include "kernels/error.h"

#define RL_MAX_TOP 20

/* One token of a row whose logit moves before sampling: the request's
 * logit_bias or a ban (bad words, min_tokens).  A row lists each id at most
 * once; ids not listed keep their logit. */
typedef struct rlLogitAdj {
    int32_t id;
    float bias;           /* added first; -INFINITY bans the token */
} rlLogitAdj;

/* The penalties' counts live with the backend that samples, one table per
 * sequence (numbered from 1): for every token id, the times it was
 * generated and whether it is in the prompt, packed as RL_PEN(count,
 * in_prompt).  The sampler adds the token it draws to its row's table, so a
 * running sequence sends nothing per step; a row with pen_fill = 1 first
 * starts its table over from rlBatch.pen_fills (a new sequence: its prompt,
 * and what it generated if anything). */
#define RL_MAX_PEN 65536
#define RL_PEN(count, in_prompt) ((uint32_t)(count) << 1 | (uint32_t)((in_prompt) != 0))
typedef struct rlPenFill {
    int32_t id;
    int32_t count;        /* times generated */
    int32_t in_prompt;    /* 1: in the prompt (repetition) */
} rlPenFill;

/* What to do with one row of logits (the output at one token of the batch). */
typedef struct rlRowSpec {
    int32_t token;        /* index into the flat batch whose logits these are */
    int32_t target;       /* token id whose logprob to report (prompt scoring), or -1 */
    int32_t n_top;        /* top alternatives wanted, 0..RL_MAX_TOP */
    int32_t sample;       /* 1: draw a token from this row */
    float temperature;    /* 0 = greedy */
    float top_p;          /* (0, 1]; 1 = off */
    float min_p;          /* [0, 1); 0 = off */
    int32_t top_k;        /* 0 = off */
    uint64_t seed;        /* counter-based RNG key ... */
    uint32_t sample_index;/* ... with the sample (n > 1) index ... */
    uint32_t step;        /* ... and the generated-token index */
    int32_t adj0, n_adj;  /* this row's entries of rlBatch.adjs (n_adj 0: none) */
    int32_t pen;          /* its sequence's penalty table (rlPenFill), from 1; 0: none */
    int32_t pen_fill;     /* 1: the table starts over from rlBatch.pen_fills[fill0 ..) */
    int32_t fill0, n_fill;
    float repetition;     /* > 0; 1 = off: prompt and generated tokens */
    float frequency;      /* per generated occurrence */
    float presence;       /* once for a generated token */
} rlRowSpec;

/* The result for one row: logprobs are log-softmax of the raw logits
 * (before temperature and filtering), as Hugging Face and vLLM report them. */
typedef struct rlRowResult {
    int32_t token;                  /* sampled token (rows with sample = 1) */
    float token_logprob;            /* its logprob */
    float target_logprob;           /* logprob of rlRowSpec.target */
    int32_t n_top;
    int32_t top_ids[RL_MAX_TOP];    /* highest logprobs first */
    float top_logprobs[RL_MAX_TOP];
} rlRowResult;

typedef struct rlBatch {
    int32_t n_seqs;
    int32_t n_tokens;
    const int32_t *tokens;        /* [n_tokens] token ids */
    const int32_t *positions;     /* [n_tokens] absolute positions */
    const int32_t *slots;         /* [n_tokens] KV slot: block * block_size + offset;
                                   * -1: a padding token, nothing stored */
    const int32_t *seq_start;     /* [n_seqs + 1] each sequence's first token in the batch */
    const int32_t *seq_len;       /* [n_seqs] KV length after this step (cached + new) */
    const int32_t *block_tables;  /* [n_seqs * max_blocks] */
    int32_t max_blocks;
    int32_t n_rows;               /* logit rows wanted */
    const rlRowSpec *rows;        /* [n_rows] */
    int32_t n_adjs;
    const rlLogitAdj *adjs;       /* [n_adjs], the rows' logit adjustments */
    int32_t n_pen_fills;
    const rlPenFill *pen_fills;   /* [n_pen_fills], counts the rows' tables start from */
} rlBatch;

/* 0 when every index of b stays inside a KV cache of n_blocks blocks of
 * block_size tokens (slots match block tables, positions end at seq_len,
 * rows point at batch tokens); else an RL_EINPUT error naming the first fault. */
int rl_batch_check(const rlBatch *b, int n_blocks, int block_size, rlError *err);

/* Host storage a padded step's arrays live in (zeroed to start). */
typedef struct rlBatchPad {
    int32_t *ints;
    size_t ints_cap;
    rlRowSpec *rows;
    int rows_cap;
} rlBatchPad;

/* *out = b's sequences (each one decode token with one logit row, or none
 * at all) followed by padding up to p sequences (batch_pad.c), its arrays in
 * pad, valid until the next call with pad.  -1 when out of memory. */
int rl_batch_pad(rlBatchPad *pad, const rlBatch *b, int p, rlBatch *out);
/* *out = a prefill step of padding alone: n_tokens tokens in sequences of up
 * to max_len (at most max_seqs of them, fewer tokens if those cannot hold
 * them all), each from position 0, every token a logit row scoring token 0
 * (up to max_rows rows), its arrays in pad as above.  -1 when out of memory
 * or given no room. */
int rl_batch_pad_prefill(rlBatchPad *pad, int n_tokens, int max_len, int max_seqs, int max_rows,
                         int block_size, rlBatch *out);
void rl_batch_pad_free(rlBatchPad *pad);

/* The bucket a batch of n rows is padded or planned for: powers of two up
 * to 16, then two per octave (24, 32, 48, 64, 96 ...), so a batch never
 * carries more than half again its own rows. */
static inline int rl_batch_bucket(int n) {
    int b = 1;
    while (b < n)
        if (b < 16) b *= 2;
        else if (b & (b - 1)) b = b / 3 * 4;    /* 24 -> 32, 48 -> 64 */
        else b = b / 2 * 3;                     /* 16 -> 24, 32 -> 48 */
    return b;
}

#endif
