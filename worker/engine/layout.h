/* layout.h: the parallel layout flags shared by `generate`, `worker`, `bench`
 * and (--tp, --pp, --devices) `plan`, `launch` and `doctor`.
 *
 *   --tp N --pp M [--devices 0,1,2 | 0-5] [--pp-layer-partition 14,14]
 *   [--nccl-timeout SECONDS] [--collectives auto|always]
 *   (vLLM's -tp / --tensor-parallel-size and -pp / --pipeline-parallel-size
 *   are the same flags as --tp and --pp)
 *
 * Rank i of a TP x PP layout is pipeline stage i / N, tensor rank i % N, and
 * runs on the i-th listed device: adjacent devices form a TP group, so list
 * devices joined by NVLink next to each other (`redlm doctor` shows the
 * topology; a TP group over a slow link is warned about at start). */
#ifndef RL_LAYOUT_H
#define RL_LAYOUT_H

#include "kernels/error.h"
#include "worker/lib/flags.h"

#define RL_MAX_RANKS 64

typedef struct rlLayout {
    int tp, pp;
    int devices[RL_MAX_RANKS];
    int n_devices;                  /* 0: devices 0 .. tp*pp-1 */
    int partition[RL_MAX_RANKS];
    int n_partition;                /* 0: balanced */
    double nccl_timeout_s;
    int collectives;                /* 1: --collectives always */
} rlLayout;

void layout_init(rlLayout *l);

/* Declare the layout flags, bound to l (RL_MAX_RANKS devices at most). */
void layout_flags_add(rlFlags *fs, rlLayout *l);
/* --tp and --pp with their vLLM spellings (-tp, --tensor-parallel-size,
 * -pp, --pipeline-parallel-size), for commands that keep them elsewhere
 * (`plan`, `launch`). */
void layout_flags_add_shape(rlFlags *fs, int *tp, int *pp);
/* --devices LIST ("0-5", "0,1,4,5"), at most max devices, each once. */
void layout_flags_add_devices(rlFlags *fs, int *out, int max, int *n, const char *help);

/* Check the flags against each other and the model's layer count (0 to skip
 * that check): device count (RL_EDEVICE), partition length and sum
 * (RL_EUSAGE). */
int layout_check(const rlLayout *l, int num_layers, rlError *err);

/* The devices the layout uses: the list given, else 0 .. tp*pp-1 (out has
 * tp*pp entries). */
void layout_devices(const rlLayout *l, int *out);

/* One line for logs: "tp 3 x pp 2 on devices 0,1,2,3,4,5". */
void layout_describe(const rlLayout *l, char *buf, int len);

#endif
