/* comm.h: collectives between the ranks of one process.
 *
 * The model calls these without knowing what carries the bytes: NCCL between
 * GPU ranks, shared memory between CPU ranks (threads).  A communicator is one
 * group (a TP group, or the pipeline's stages).  A group of one rank has
 * no communicator unless the set is asked for every group (every_group), so
 * a 1x1 layout normally costs nothing; with every_group it runs its
 * collectives for real (an all-reduce of one rank is a copy), which lets one
 * device check the multi-rank path.  Buffers are the backend's device
 * pointers. */
#ifndef RL_COMM_H
#define RL_COMM_H

#include <stddef.h>

#include "kernels/config.h"
#include "kernels/error.h"

typedef struct rlComm rlComm;

typedef struct rlCommOps {
    int (*all_reduce_sum)(rlComm *c, void *buf, size_t n, rlDtype dtype, rlError *err);
    /* recv = concatenation of every rank's send (each n elements), in rank order */
    int (*all_gather)(rlComm *c, const void *send, void *recv, size_t n, rlDtype dtype,
                      rlError *err);
    int (*broadcast)(rlComm *c, void *buf, size_t bytes, int root, rlError *err);
    int (*send)(rlComm *c, const void *buf, size_t bytes, int peer, rlError *err);
    int (*recv)(rlComm *c, void *buf, size_t bytes, int peer, rlError *err);
    void (*destroy)(rlComm *c);
} rlCommOps;

struct rlComm {
    const rlCommOps *ops;
    int rank, size;
    void *impl;
};

/* The communicators of a whole tp x pp layout.  Rank i is pp_rank = i / tp,
 * tp_rank = i % tp: its TP group is the tp ranks of its stage (ordered by
 * tp_rank), its pipeline chain the pp ranks with its tp_rank (ordered by
 * stage).  A set is made once in the caller's thread; each rank then joins
 * from the thread that will use its communicators, because NCCL binds a
 * communicator to the device current in that thread. */
typedef struct rlCommSet rlCommSet;

typedef struct rlCommSetOps {
    /* *tp and *pp are NULL for groups of one rank, unless every_group. */
    int (*join)(rlCommSet *s, int rank, rlComm **tp, rlComm **pp, rlError *err);
    /* A rank failed: every rank blocked in (or later entering) a collective
     * returns an error instead of waiting for it forever. */
    void (*abort)(rlCommSet *s);
    /* After every rank's thread has stopped using its communicators. */
    void (*destroy)(rlCommSet *s);
} rlCommSetOps;

struct rlCommSet {
    const rlCommSetOps *ops;
    int tp, pp;
    int every_group;    /* set before any join: groups of one rank get communicators too */
    void *impl;
};

/* Threads of this process exchanging host memory (CPU ranks). */
rlCommSet *rl_comm_shm_create(int tp, int pp, rlError *err);

/* NCCL between GPU ranks (kernels/cuda/comm_nccl.c; CUDA builds only).
 * devices[i] is rank i's CUDA ordinal.  A watchdog ends the process with a
 * diagnosis when an init or a collective hangs longer than timeout_s. */
rlCommSet *rl_comm_nccl_create(int tp, int pp, const int *devices, double timeout_s,
                               rlError *err);

#endif
