/* comm.h: collectives between the ranks of one process.
 *
 * The model calls these without knowing what carries the bytes: NCCL between
 * GPU ranks, shared memory between CPU ranks (threads).  A communicator is one
 * group (a TP group, or the pipeline's stages); a group of one rank makes
 * every call a no-op, so a 1x1 layout costs nothing.  Buffers are the
 * backend's device pointers. */
#ifndef RL_COMM_H
#define RL_COMM_H

#include <stddef.h>

#include "config.h"
#include "error.h"

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

#endif
