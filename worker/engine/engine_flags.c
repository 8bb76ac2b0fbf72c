/* engine_flags.c: parsing the engine's flags (see engine_flags.h). */
#include "worker/engine/engine_flags.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

const char engine_flags_help[] =
    "  --backend cpu|cuda            compute backend (default cpu)\n"
    "  --load-format auto|dummy      dummy: random weights from config.json\n"
    "  --dtype auto|bf16|fp16|fp32   weight type (default: the config's)\n"
    "  --threads N                   CPU threads (default: all cores)\n"
    "  --block-size N                KV block size in tokens (default 16)\n"
    "  --kv-cache-memory BYTES       CPU KV cache size, e.g. 1GiB\n"
    "  --gpu-memory-utilization F    CUDA: fraction of GPU memory (default 0.90)\n"
    "  --max-num-seqs N              sequences per step (default 256)\n"
    "  --max-num-batched-tokens N    tokens per step (default 2048)\n"
    "  --max-model-len N             prompt + generation limit\n"
    "  --no-prefix-caching           turn the prefix cache off\n"
    "  --seed N                      seed for dummy weights and unseeded requests\n"
    LAYOUT_USAGE;

static int engine_flags_int(const char *flag, const char *v, long lo, long hi, long *out, rlError *err) {
    char *end;
    errno = 0;
    long x = strtol(v, &end, 10);
    if (errno || end == v || *end || x < lo || x > hi)
        return rl_error(err, RL_EUSAGE, "%s: '%s' is not a whole number from %ld to %ld", flag, v, lo, hi);
    *out = x;
    return 0;
}

/* "1GiB", "512MiB", "1000000" */
static int engine_flags_bytes(const char *flag, const char *v, size_t *out, rlError *err) {
    char *end;
    errno = 0;
    double x = strtod(v, &end);
    double mul = 1;
    if (!strcmp(end, "KiB")) mul = 1024.0;
    else if (!strcmp(end, "MiB")) mul = 1024.0 * 1024;
    else if (!strcmp(end, "GiB")) mul = 1024.0 * 1024 * 1024;
    else if (*end) end = NULL;
    if (errno || !end || end == v || x < 0)
        return rl_error(err, RL_EUSAGE, "%s: '%s' is not a size (bytes, or a number with KiB, MiB or GiB)",
                        flag, v);
    *out = (size_t)(x * mul);
    return 0;
}

void engine_flags_init(rlEngineFlags *f) {
    engine_options_init(&f->o);
    layout_init(&f->lay);
}

void engine_flags_finish(rlEngineFlags *f) {
    rlEngineOptions *o = &f->o;
    const rlLayout *lay = &f->lay;
    o->tp = lay->tp;
    o->pp = lay->pp;
    o->devices = lay->n_devices ? lay->devices : NULL;
    o->n_devices = lay->n_devices;
    o->pp_partition = lay->n_partition ? lay->partition : NULL;
    o->nccl_timeout_s = lay->nccl_timeout_s;
    o->collectives = lay->collectives;
}

int engine_flags_parse(int argc, char **argv, int *i, rlEngineFlags *f, rlError *err) {
    /* The layout owns --tp and --pp along with --devices. */
    int next = *i, known = layout_parse_flag(&f->lay, argc, argv, &next, err);
    if (known) {
        if (known > 0) *i = next - 1;
        return known;
    }
    rlEngineOptions *o = &f->o;
    const char *a = argv[*i];
    if (!strcmp(a, "--no-prefix-caching")) {
        o->prefix_caching = 0;
        return 1;
    }
    static const char *valued[] = {"--model", "--backend", "--load-format", "--dtype", "--threads",
                                   "--block-size", "--kv-cache-memory", "--gpu-memory-utilization",
                                   "--max-num-seqs", "--max-num-batched-tokens", "--max-model-len",
                                   "--seed"};
    size_t k = 0;
    while (k < sizeof(valued) / sizeof(valued[0]) && strcmp(a, valued[k])) k++;
    if (k == sizeof(valued) / sizeof(valued[0])) return 0;
    if (*i + 1 >= argc) return rl_error(err, RL_EUSAGE, "%s needs a value", a);
    const char *v = argv[++*i];
    long x = 0;
    if (!strcmp(a, "--model")) o->model = v;
    else if (!strcmp(a, "--backend")) o->backend = v;
    else if (!strcmp(a, "--load-format")) o->load_format = v;
    else if (!strcmp(a, "--dtype")) o->dtype = v;
    else if (!strcmp(a, "--kv-cache-memory")) return engine_flags_bytes(a, v, &o->kv_cache_memory, err) ? -1 : 1;
    else if (!strcmp(a, "--gpu-memory-utilization")) {
        char *end;
        o->gpu_memory_utilization = strtod(v, &end);
        if (end == v || *end || o->gpu_memory_utilization <= 0 || o->gpu_memory_utilization > 1)
            return rl_error(err, RL_EUSAGE, "%s: '%s' must be a fraction in (0, 1]", a, v);
    } else if (!strcmp(a, "--seed")) {
        char *end;
        errno = 0;
        unsigned long long s = strtoull(v, &end, 10);
        if (errno || end == v || *end) return rl_error(err, RL_EUSAGE, "--seed: '%s' is not a whole number", v);
        o->seed = s;
    } else {
        if (engine_flags_int(a, v, 1, 1L << 30, &x, err)) return -1;
        if (!strcmp(a, "--threads")) o->threads = (int)x;
        else if (!strcmp(a, "--block-size")) o->block_size = (int)x;
        else if (!strcmp(a, "--max-num-seqs")) o->max_num_seqs = (int)x;
        else if (!strcmp(a, "--max-num-batched-tokens")) o->max_num_batched_tokens = (int)x;
        else o->max_model_len = (int)x;
    }
    return 1;
}
