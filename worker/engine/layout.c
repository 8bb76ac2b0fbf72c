/* layout.c: parsing and checking the layout flags (see layout.h), in one
 * place so every command that opens ranks accepts the same spellings and
 * gives the same messages. */
#include "worker/engine/layout.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void layout_init(rlLayout *l) {
    memset(l, 0, sizeof(*l));
    l->tp = 1;
    l->pp = 1;
    l->nccl_timeout_s = 600;
}

static int layout_int(const char *s, long lo, long hi, long *out) {
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi) return -1;
    *out = v;
    return 0;
}

int layout_parse_list(const char *s, int *out, int max, int *n, const char *flag, rlError *err) {
    *n = 0;
    const char *p = s;
    while (*p) {
        char *end;
        errno = 0;
        long a = strtol(p, &end, 10), b = a;
        if (errno || end == p || a < 0 || a > 1023) goto bad;
        p = end;
        if (*p == '-') {
            b = strtol(++p, &end, 10);
            if (errno || end == p || b < a || b > 1023) goto bad;
            p = end;
        }
        if (*p == ',') {
            if (!*++p) goto bad;
        } else if (*p) {
            goto bad;
        }
        for (long v = a; v <= b; v++) {
            if (*n == max)
                return rl_error(err, RL_EUSAGE, "%s '%s' lists more than %d entries", flag, s,
                                max);
            for (int k = 0; k < *n; k++)
                if (out[k] == v)
                    return rl_error(err, RL_EUSAGE,
                                    "%s '%s' lists %ld twice: each entry may appear once",
                                    flag, s, v);
            out[(*n)++] = (int)v;
        }
    }
    if (*n == 0) goto bad;
    return 0;
bad:
    return rl_error(err, RL_EUSAGE,
                    "%s '%s' is not a list of numbers: write e.g. 0,1,2 or 0-5 or 0-2,6", flag,
                    s);
}

/* Layer partitions are numbers, not ranges: "14,14" is 14 then 14. */
static int layout_parse_partition(rlLayout *l, const char *s, rlError *err) {
    l->n_partition = 0;
    char buf[512];
    snprintf(buf, sizeof(buf), "%s", s);
    for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok;
         tok = strtok_r(NULL, ",", &save)) {
        long v;
        if (layout_int(tok, 1, 100000, &v) || l->n_partition == RL_MAX_RANKS)
            return rl_error(err, RL_EUSAGE,
                            "--pp-layer-partition '%s' must be one positive layer count per "
                            "stage, e.g. 14,14", s);
        l->partition[l->n_partition++] = (int)v;
    }
    if (!l->n_partition)
        return rl_error(err, RL_EUSAGE, "--pp-layer-partition is empty; e.g. 14,14");
    return 0;
}

int layout_parse_flag(rlLayout *l, int argc, char **argv, int *i, rlError *err) {
    static const char *flags[] = {"--tp", "--pp", "--devices", "--pp-layer-partition",
                                  "--nccl-timeout", "--collectives"};
    const char *arg = argv[*i], *val = NULL;
    int which = -1;
    for (int k = 0; k < 6; k++) {
        size_t len = strlen(flags[k]);
        if (strncmp(arg, flags[k], len)) continue;
        if (arg[len] == '=') val = arg + len + 1;
        else if (arg[len]) continue;
        which = k;
        break;
    }
    if (which < 0) return 0;
    if (!val) {
        if (*i + 1 >= argc) return rl_error(err, RL_EUSAGE, "%s needs a value", flags[which]);
        val = argv[++*i];
    }
    (*i)++;
    long v;
    double d;
    char *end;
    switch (which) {
    case 0:
    case 1:
        if (layout_int(val, 1, RL_MAX_RANKS, &v))
            return rl_error(err, RL_EUSAGE, "%s '%s' must be a whole number from 1 to %d",
                            flags[which], val, RL_MAX_RANKS);
        *(which ? &l->pp : &l->tp) = (int)v;
        return 1;
    case 2:
        return layout_parse_list(val, l->devices, RL_MAX_RANKS, &l->n_devices, "--devices", err)
                   ? -1 : 1;
    case 3:
        return layout_parse_partition(l, val, err) ? -1 : 1;
    case 4:
        d = strtod(val, &end);
        if (end == val || *end || !(d > 0))
            return rl_error(err, RL_EUSAGE, "--nccl-timeout '%s' must be a positive number of "
                            "seconds", val);
        l->nccl_timeout_s = d;
        return 1;
    default:
        if (strcmp(val, "auto") && strcmp(val, "always"))
            return rl_error(err, RL_EUSAGE, "--collectives '%s' must be auto (a 1x1 layout runs "
                            "without communicators) or always (every layout runs through its "
                            "rank threads and communicators)", val);
        l->collectives = !strcmp(val, "always");
        return 1;
    }
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
