/* layout.h: the parallel layout flags shared by `generate`, `worker`, `plan`.
 *
 *   --tp N --pp M [--devices 0,1,2 | 0-5] [--pp-layer-partition 14,14]
 *   [--nccl-timeout SECONDS] [--collectives auto|always]
 *
 * Rank i of a TP x PP layout is pipeline stage i / N, tensor rank i % N, and
 * runs on the i-th listed device: adjacent devices form a TP group, so list
 * devices joined by NVLink next to each other (`redlm doctor` shows the
 * topology; a TP group over a slow link is warned about at start). */
#ifndef RL_LAYOUT_H
#define RL_LAYOUT_H

#include "kernels/error.h"

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

/* If argv[*i] is a layout flag, consume it and its value (advancing *i past
 * them) and return 1; return 0 for any other argument, -1 on a bad value. */
int layout_parse_flag(rlLayout *l, int argc, char **argv, int *i, rlError *err);

/* Check the flags against each other and the model's layer count (0 to skip
 * that check): device count (RL_EDEVICE), partition length and sum
 * (RL_EUSAGE). */
int layout_check(const rlLayout *l, int num_layers, rlError *err);

/* "0-5", "0,2,4", "0-2,6,7" into out[]; at most max entries; no repeats. */
int layout_parse_list(const char *s, int *out, int max, int *n, const char *flag, rlError *err);

/* The devices the layout uses: the list given, else 0 .. tp*pp-1 (out has
 * tp*pp entries). */
void layout_devices(const rlLayout *l, int *out);

/* One line for logs: "tp 3 x pp 2 on devices 0,1,2,3,4,5". */
void layout_describe(const rlLayout *l, char *buf, int len);

#define LAYOUT_USAGE                                                                      \
    "  --tp N                   tensor-parallel ranks per stage (default 1)\n"            \
    "  --pp M                   pipeline stages (default 1)\n"                            \
    "  --devices LIST           GPUs in rank order, e.g. 0-5 or 0,1,4,5; adjacent ones\n"  \
    "                           form a TP group (default 0 .. tp*pp-1)\n"                 \
    "  --pp-layer-partition L   layers per stage, e.g. 14,14 (default balanced)\n"        \
    "  --nccl-timeout S         end the process when an NCCL step hangs S seconds\n"     \
    "                           (default 600)\n"                                          \
    "  --collectives MODE       auto (default): a 1x1 layout runs directly, with no\n"    \
    "                           communicator; always: every layout, 1x1 included, runs\n"  \
    "                           on rank threads with real communicators (NCCL on GPUs),\n" \
    "                           to check that path on one device\n"

#endif
