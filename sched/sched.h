/* sched.h: continuous batching over a paged KV cache.
 *
 * The scheduler decides, once per step, which tokens of which sequences run:
 * every running decode first (one token each), then chunks of the running
 * requests' prompts, then waiting requests in order of priority and arrival
 * while the step's sequence and token budgets and the KV pool allow (chunked
 * prefill: a long prompt spreads over steps, so decodes are never starved).  It owns
 * block numbers and never memory; its step plan is a plain struct of arrays
 * that maps one to one onto kernels/batch.h's rlBatch.
 *
 * Samples of one request (n > 1) are sequences sharing the prompt's full
 * blocks.  The prompt's last, partial block is where they diverge, so each
 * sample past the first gets its own copy of it; the copy is made by
 * recomputing those few tokens (under block_size) into a fresh block, which
 * keeps block copies off the backend interface.
 *
 * When the pool runs dry the youngest running request is preempted: its
 * blocks are freed and it is requeued, to be recomputed later from its
 * tokens (output unchanged: sampling is keyed by seed, sample and step).
 *
 * A caller running a pipeline keeps several steps in flight, each over its
 * own requests: it marks a step's requests in flight when it hands the step
 * to the model and lands them when it applies the results.  Meanwhile later
 * steps never plan, preempt or free them, so their blocks (referenced, hence
 * never evicted from the prefix cache) stay exactly as the step saw them,
 * and each step has its own plan storage.  A later step may still hit blocks
 * registered by a step in flight: the model runs steps in order, so at every
 * stage their KV is written before the later step reads it.
 *
 * Pure C over libc: no I/O, no device code.  Functions returning int give 0
 * on success and -1 when out of memory. */
#ifndef RL_SCHED_H
#define RL_SCHED_H

#include <stdint.h>

#include "sched/block.h"

typedef struct rlSchedConfig {
    int block_size;
    int n_blocks;               /* KV pool size in blocks */
    int max_num_seqs;           /* sequences per step */
    int max_num_batched_tokens; /* new tokens per step */
    int max_model_len;          /* prompt + generated tokens of one sequence */
    int prefix_caching;
    int max_prompt_rows;        /* prompt-logprob rows per step (0: one per token);
                                 * a step has at most this + max_num_seqs rows */
    int pipeline_depth;         /* steps the caller keeps in flight; each then takes
                                 * about 1/depth of the sequences (0 or 1: one step
                                 * at a time, each taking all it can) */
} rlSchedConfig;

/* Logit rows one step may hold under cfg: one per sequence for sampling,
 * plus max_prompt_rows (at most max_num_batched_tokens; 0: that many).
 * The one rule the scheduler plans by, the engine sizes its logits by and
 * the memory plan counts. */
int sched_config_max_rows(const rlSchedConfig *cfg);


typedef enum rlReqState {
    RL_REQ_WAITING = 0,     /* not started yet */
    RL_REQ_RUNNING,         /* holds blocks, scheduled every step */
    RL_REQ_PREEMPTED,       /* requeued; recomputed when readmitted */
    RL_REQ_FINISHED         /* every sample finished, or expired */
} rlReqState;

typedef enum rlSeqState {
    RL_SEQ_ACTIVE = 0,      /* runs whenever it has tokens not yet computed */
    RL_SEQ_FORK_WAIT,       /* a later sample waiting for the first one's prompt blocks */
    RL_SEQ_AWAIT_TOKEN,     /* forked; its first token comes from the first sample's logits */
    RL_SEQ_FINISHED
} rlSeqState;

/* One sample of a request.  Read-only outside sched.  Both arrays grow as
 * the sample runs (a queued one holds its prompt's worth), so a pointer
 * into them lasts only until the next sched_step or sched_append. */
typedef struct rlSchedSeq {
    rlSeqState state;
    int32_t *tokens;        /* prompt, then the generated tokens */
    int n_tokens, cap_tokens;
    int n_computed;         /* tokens whose KV is in the blocks */
    int32_t *blocks;        /* block table */
    int n_blocks, cap_blocks;
} rlSchedSeq;

/* What the scheduler needs to know of a request. */
typedef struct rlSchedParams {
    const int32_t *prompt;
    int n_prompt;
    int n;                  /* samples */
    int max_tokens;         /* 0: score the prompt only */
    int priority;           /* lower first (vLLM's order) */
    int64_t deadline_ms;    /* not started after this (0: none) */
    int prompt_logprobs;    /* wants a logit row at every prompt position */
    void *user;
} rlSchedParams;

/* A request.  Read-only outside sched. */
typedef struct rlSchedReq {
    rlReqState state;
    int n_prompt, n, max_tokens, priority, prompt_logprobs;
    int64_t deadline_ms;
    uint64_t arrival;       /* admission order */
    void *user;
    rlSchedSeq *seqs;       /* [n] */
    int forked;             /* the first tokens of all samples were asked for */
    int started;            /* admitted at least once */
    int expired;            /* its deadline passed before it started */
    int plp_done;           /* prompt positions [0, plp_done) have their logit rows */
    int cached_tokens;      /* prefix-cache hit at the first admission */
    int n_preemptions;
    int all_index;          /* position in the scheduler's list of every request */
    uint64_t planned_step;  /* the last step with a sequence of it in the plan */
    int in_flight;          /* in a step whose results are not applied yet */
} rlSchedReq;

typedef enum rlRowKind {
    RL_ROW_PROMPT = 0,      /* logprob of the next prompt token (prompt_logprobs) */
    RL_ROW_SAMPLE           /* draw the next token of sample `seq` */
} rlRowKind;

typedef struct rlSchedRow {
    rlRowKind kind;
    int32_t token;          /* index into the plan's flat token batch */
    rlSchedReq *req;
    int32_t seq;            /* SAMPLE: the sample the token goes to */
    int32_t step;           /* SAMPLE: index of the token among that sample's generated ones */
    int32_t position;       /* PROMPT: the prompt position the row is at */
    int32_t target;         /* PROMPT: the prompt token at position + 1 */
} rlSchedRow;

/* One step: what the scheduler chose to run now (not the memory plan of
 * worker/plan/).  The arrays belong to the step (sched_step_create) and keep what
 * sched_step wrote until the next sched_step into the same step; the first
 * seven map onto rlBatch's fields of the same names. */
typedef struct rlStep {
    int32_t n_seqs, n_tokens, n_rows, max_blocks;
    int32_t *tokens;        /* [n_tokens] */
    int32_t *positions;     /* [n_tokens] */
    int32_t *slots;         /* [n_tokens] block * block_size + offset */
    int32_t *seq_start;     /* [n_seqs + 1] */
    int32_t *seq_len;       /* [n_seqs] KV length after the step */
    int32_t *block_tables;  /* [n_seqs * max_blocks]; max_blocks is this step's widest table */
    rlSchedRow *rows;       /* [n_rows] */
    rlSchedReq **seq_req;   /* [n_seqs] whose sequence each is ... */
    int32_t *seq_index;     /* [n_seqs] ... and which sample */
    rlSchedReq **expired;   /* requests whose deadline passed before they started */
    int n_expired, cap_expired;
    int n_preempted;        /* requests preempted while building this step */
} rlStep;

typedef struct rlSchedStats {
    int running, waiting;           /* requests */
    int running_seqs;
    uint64_t preemptions;           /* since creation */
    rlBlockCounts blocks;
    uint64_t prefix_hit_tokens;     /* tokens served from the prefix cache */
    uint64_t prefix_query_tokens;   /* tokens looked up */
} rlSchedStats;

typedef struct rlSched rlSched;

/* NULL when out of memory or the config is unusable (a zero size). */
rlSched *sched_create(const rlSchedConfig *cfg);
void sched_free(rlSched *s);   /* also frees every request still held */

/* Blocks a request of this shape needs to run alone to the end. */
int sched_blocks_needed(const rlSched *s, int n_prompt, int n, int max_tokens);
/* The largest max_tokens sched_add takes for a prompt of n_prompt tokens
 * and n samples: what max_model_len leaves, and what the whole pool holds
 * (sched_blocks_needed); 0 when not one token fits. */
int sched_max_tokens(const rlSched *s, int n_prompt, int n);

typedef enum rlSchedAdd {
    RL_SCHED_OK = 0,
    RL_SCHED_ENOMEM = -1,
    RL_SCHED_TOO_LONG = -2,     /* prompt + max_tokens over max_model_len */
    RL_SCHED_TOO_BIG = -3,      /* can never fit the whole pool */
    RL_SCHED_TOO_WIDE = -4,     /* n over max_num_seqs */
    RL_SCHED_EMPTY = -5         /* no prompt token */
} rlSchedAdd;

/* Queue a request (the prompt is copied).  *out is the scheduler's handle. */
rlSchedAdd sched_add(rlSched *s, const rlSchedParams *p, rlSchedReq **out);

/* Storage for one step (rlStep), sized for s: one per step the caller keeps
 * in flight.  NULL when out of memory. */
rlStep *sched_step_create(const rlSched *s);
void sched_step_free(rlStep *p);

/* Build the next step into step at time now_ms (for deadlines), leaving out
 * requests in flight.  Expired requests are listed in the step, finished;
 * the caller answers them and removes them. */
int sched_step(rlSched *s, int64_t now_ms, rlStep *step);

/* The requests of step are in flight: until sched_landed on the same step,
 * no step plans, preempts or frees them, and the caller neither appends to,
 * finishes nor removes them, nor touches the step. */
void sched_in_flight(rlSched *s, const rlStep *step);
/* Its results are back: the step's requests are the caller's again. */
void sched_landed(rlSched *s, const rlStep *step);

/* The token a SAMPLE row drew for sample seq: appended to it (past the
 * request's max_tokens it is dropped).  -1 when out of memory. */
int sched_append(rlSched *s, rlSchedReq *r, int seq, int32_t token);
/* Sample seq is done (stop or length): its blocks go back to the pool. */
void sched_finish_seq(rlSched *s, rlSchedReq *r, int seq);
/* Forget a request (finished, aborted or expired) and free it. */
void sched_remove(rlSched *s, rlSchedReq *r);

int sched_has_work(const rlSched *s);
/* Rows a step may hold: what the engine sizes its logits for. */
int sched_max_rows(const rlSched *s);
/* How many more sequences could be admitted now. */
int sched_free_seqs(const rlSched *s);
void sched_stats(const rlSched *s, rlSchedStats *st);

/* Cross-check every reference count against the block tables and the pool's
 * counters; 0 when consistent (tests call this after every step). */
int sched_check(const rlSched *s);

#endif
