/* ranks.h: the model spread over a TP x PP layout of ranks, behind one call.
 *
 * The engine sees one forward per step; this hides how many ranks compute it
 * (threads of this process, one per CPU rank or GPU), how weights were
 * sharded, and how the collectives and pipeline hand-offs are carried. */
#ifndef RL_RANKS_H
#define RL_RANKS_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/batch.h"
#include "kernels/config.h"
#include "kernels/error.h"
#include "kernels/model.h"

typedef struct rlRanksOptions {
    rlModelConfig cfg;
    const char *backend;        /* "cpu" or "cuda" */
    rlDtype dtype;              /* device weight/activation dtype (CUDA); CPU computes in fp32 */
    int threads;                /* CPU threads in all (split over CPU ranks) */
    int tp, pp;
    const int *pp_partition;    /* layers per stage or NULL */
    const int *devices;         /* tp*pp CUDA ordinals or NULL for 0.. */
    rlTensorLookup src;         /* NULL: dummy weights */
    void *src_ctx;
    uint64_t dummy_seed;
    int block_size;
    int n_blocks;               /* KV blocks per rank (every rank holds every block's slice);
                                 * 0: as many as every rank's device holds once its weights
                                 * are loaded (GPU backends; see ranks_n_blocks) */
    double gpu_memory_utilization; /* with n_blocks 0: share of each GPU to use, 0 = 0.90 */
    int max_tokens;             /* most new tokens in one step */
    int max_rows;               /* most logit rows in one step */
    int micro_batches;          /* pipeline micro-batches per step, 0 = automatic */
    double nccl_timeout_s;      /* CUDA ranks: a hung NCCL init or collective ends the
                                 * process after this long, 0 = 600 s */
    int collectives;            /* 1: rank threads and communicators for every group, even
                                 * of one rank, so a 1x1 layout runs the multi-rank path
                                 * (NCCL on one GPU); 0: a 1x1 layout runs in the caller,
                                 * or with `thread` on a thread of its own */
    int thread;                 /* 1: a 1x1 layout runs on a rank thread of its own too
                                 * (without communicators), so ranks_submit returns while
                                 * the device computes and the caller can work meanwhile */
    int quiet;                  /* 0: print each rank's share of the model at open */
    int batch_invariant;        /* rlBackendOptions.batch_invariant */
    int eager;                  /* rlBackendOptions.eager */
} rlRanksOptions;

typedef struct rlRanks rlRanks;

rlRanks *ranks_open(const rlRanksOptions *o, rlError *err);
/* One step over all ranks; fills out[0 .. b->n_rows). */
int ranks_forward(rlRanks *r, const rlBatch *b, rlRowResult *out, rlError *err);

/* The same step without waiting, so a pipeline holds several steps (of
 * disjoint sequences) at once and no stage idles between them: submit returns
 * a ticket; b's arrays and out must stay untouched until ranks_wait on that
 * ticket (or a later one) returns.  Steps complete in submission order.
 * ranks_forward is submit + wait. */
int ranks_submit(rlRanks *r, const rlBatch *b, rlRowResult *out, uint64_t *ticket, rlError *err);
int ranks_wait(rlRanks *r, uint64_t ticket, rlError *err);
/* 1 when ranks_submit returns before its step is computed (rank threads):
 * a caller then gains from planning the next step, or applying the last
 * one's results, while the ranks compute. */
int ranks_async(const rlRanks *r);
/* The KV blocks every rank holds: n_blocks as given, or as found. */
int ranks_n_blocks(const rlRanks *r);
void ranks_close(rlRanks *r);

#endif
