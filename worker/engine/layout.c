/* layout.c: declaring and checking the layout flags (see layout.h), in one
 * place so every command that opens ranks accepts the same spellings and
 * gives the same messages. */
#include "worker/engine/layout.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

void layout_init(rlLayout *l) {
    memset(l, 0, sizeof(*l));
    l->tp = 1;
    l->pp = 1;
    l->nccl_timeout_s = 600;
}

void layout_flags_add_shape(rlFlags *fs, int *tp, int *pp) {
    flags_int(fs, "--tp", tp, 1, RL_MAX_RANKS, "N", "tensor-parallel ranks per stage (default 1)")
        ->aliases = "-tp --tensor-parallel-size";
    flags_int(fs, "--pp", pp, 1, RL_MAX_RANKS, "M", "pipeline stages (default 1)")
        ->aliases = "-pp --pipeline-parallel-size";
}

void layout_flags_add_devices(rlFlags *fs, int *out, int max, int *n, const char *help) {
    flags_list(fs, "--devices", out, max, n, 0, 1023, 1, "LIST", help);
}

void layout_flags_add(rlFlags *fs, rlLayout *l) {
    static const rlFlagChoice collectives[] = {{"auto", NULL, 0}, {"always", NULL, 1}, {NULL}};
    layout_flags_add_shape(fs, &l->tp, &l->pp);
    layout_flags_add_devices(fs, l->devices, RL_MAX_RANKS, &l->n_devices,
                             "GPUs in rank order, e.g. 0-5 or 0,1,4,5; adjacent ones\n"
                             "form a TP group (default 0 .. tp*pp-1)");
    flags_list(fs, "--pp-layer-partition", l->partition, RL_MAX_RANKS, &l->n_partition, 1,
               100000, 0, "L", "layers per stage, e.g. 14,14 (default balanced)");
    flags_double(fs, "--nccl-timeout", &l->nccl_timeout_s, 0, 1, INFINITY, "S",
                 "end the process when an NCCL step hangs S seconds\n(default 600)");
    flags_enum_int(fs, "--collectives", &l->collectives, collectives,
                   "auto (default): a 1x1 layout runs directly, with no\n"
                   "communicator; always: every layout, 1x1 included, runs\n"
                   "on rank threads with real communicators (NCCL on GPUs),\n"
                   "to check that path on one device");
}

int layout_check(const rlLayout *l, int num_layers, rlError *err) {
    int n = l->tp * l->pp;
    if (n > RL_MAX_RANKS)
        return rl_error(err, RL_EUSAGE, "--tp %d x --pp %d is %d ranks; at most %d", l->tp,
                        l->pp, n, RL_MAX_RANKS);
    if (l->n_devices && l->n_devices != n)
        return rl_error(err, RL_EDEVICE,
                        "--tp %d x --pp %d needs %d GPUs but %d %s given in --devices: list one "
                        "device per rank (to run several instances over more devices, use "
                        "redlm launch)",
                        l->tp, l->pp, n, l->n_devices, l->n_devices == 1 ? "is" : "are");
    if (l->n_partition && l->n_partition != l->pp)
        return rl_error(err, RL_EUSAGE,
                        "--pp-layer-partition gives %d stage%s but --pp is %d: give one layer "
                        "count per stage", l->n_partition, l->n_partition == 1 ? "" : "s", l->pp);
    if (num_layers > 0 && l->pp > num_layers)
        return rl_error(err, RL_EUSAGE,
                        "--pp %d is more stages than the model's %d layers: every stage needs "
                        "at least one layer; use --pp %d or fewer",
                        l->pp, num_layers, num_layers);
    if (num_layers > 0 && l->n_partition) {
        int sum = 0;
        for (int s = 0; s < l->n_partition; s++) sum += l->partition[s];
        if (sum != num_layers)
            return rl_error(err, RL_EUSAGE,
                            "--pp-layer-partition adds up to %d layers but the model has %d: "
                            "give %d numbers summing to %d",
                            sum, num_layers, l->pp, num_layers);
    }
    return 0;
}

void layout_devices(const rlLayout *l, int *out) {
    for (int i = 0; i < l->tp * l->pp; i++) out[i] = l->n_devices ? l->devices[i] : i;
}

void layout_describe(const rlLayout *l, char *buf, int len) {
    int n = l->tp * l->pp, dev[RL_MAX_RANKS];
    layout_devices(l, dev);
    int off = snprintf(buf, (size_t)len, "tp %d x pp %d on device%s ", l->tp, l->pp,
                       n > 1 ? "s" : "");
    for (int i = 0; i < n && off > 0 && off < len; i++)
        off += snprintf(buf + off, (size_t)(len - off), "%s%d", i ? "," : "", dev[i]);
}
