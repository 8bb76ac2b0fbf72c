/* adjust.h: a request's logit adjustments, the entries its sampling rows
 * carry to the backends' samplers (kernels/batch.h, rlLogitAdj): logit_bias,
 * the bans of bad_words and min_tokens, and the counts the repetition,
 * frequency and presence penalties read. */
#ifndef RL_ADJUST_H
#define RL_ADJUST_H

#include "kernels/batch.h"
#include "kernels/error.h"
#include "worker/request/request.h"
#include "worker/tokenizer/tokenizer.h"

typedef struct rlAdjust rlAdjust;

/* Growable storage of one step's entries: the rows' biases and bans, and
 * the counts their penalty tables start from. */
typedef struct rlAdjBuf {
    rlLogitAdj *v;
    int n, cap;
    rlPenFill *fills;
    int n_fills, fills_cap;
} rlAdjBuf;

/* The penalty tables of an engine's backends (kernels/batch.h), numbered
 * from 1: which are taken.  A sample takes one at its first sampling row
 * and keeps it, preempted or not, until its request is freed. */
typedef struct rlPenTables {
    unsigned char *taken;   /* [cap]: taken[t - 1] */
    int cap;
} rlPenTables;

/* *out = r's adjustments for its n samples over a vocabulary of vocab ids,
 * or NULL when r asks for none.  eos: the model's EOS ids (banned with the
 * stop ids before min_tokens); tables: where its samples take penalty
 * tables.  A logit_bias id outside the vocabulary fails with RL_EINPUT and
 * a message for the producer; bad_words need tok. */
int adjust_open(const rlRequest *r, const rlTokenizer *tok, int vocab, const int *eos, int n_eos,
                rlPenTables *tables, rlAdjust **out, rlError *err);
/* Sample `sample` generated tok. */
int adjust_count(rlAdjust *a, int sample, int32_t tok);
/* Append the entries of sample `sample`'s next row to buf, given what it
 * generated so far (gen[0..n_gen)); sets spec's adj0, n_adj, its penalty
 * table (taken and filled at its first row) and penalties. */
int adjust_row(rlAdjust *a, int sample, const int32_t *gen, int n_gen, rlRowSpec *spec,
               rlAdjBuf *buf);
/* Frees a and gives its penalty tables back. */
void adjust_free(rlAdjust *a);
void adjust_tables_free(rlPenTables *t);

#endif
