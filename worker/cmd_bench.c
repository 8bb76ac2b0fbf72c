/* cmd_bench.c: `redlm bench`: prefill and decode tokens/s of one backend on
 * a model shape, beside the memory-bandwidth floor measured in the same run.
 *
 * Decode at small batch reads every weight once per step, so its ceiling is
 * (bytes read per step) / (copy bandwidth); the table prints that floor next
 * to the measured step time, on the same machine, at the same moment.  The
 * timing loop drives rl_model_forward with hand-built batches and measures
 * the copy with the backend's own copy2d, so nothing in it is CPU-specific:
 * `--backend cuda` times the GPU the same way.  Each batch runs a short
 * untimed pass first (GEMM plans, buffers, graph captures), so the numbers
 * are a warmed-up engine's.  Weights are dummy unless a
 * checkpoint directory is given with --load-format auto.  --profile prints the
 * device time per operation kind of the prefill and of the decode steps
 * (backends that time their operations: CUDA, with graphs off).
 * --prompt-logprobs N makes the prefill a scoring run: every prompt token
 * but the last asks its successor's logprob and N alternatives, as a job
 * with prompt_logprobs N does, so the prefill rate is the scoring rate. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kernels/gpuclocks.h"
#include "kernels/model.h"
#include "worker/model/checkpoint.h"
#include "worker/model/quant.h"
#include "worker/commands.h"
#include "worker/engine/engine_flags.h"
#include "worker/engine/engine_plan.h"
#include "worker/lib/flags.h"
#include "worker/lib/now.h"

#define BENCH_MAX_BATCHES 8
#define BENCH_BLOCK 16
#define BENCH_COPY_REPS 7
#define BENCH_WARMUP_STEPS 3    /* eager, captured, replayed: every graph state once */

typedef struct benchOpts {
    const char *backend, *model, *load_format, *quantization;
    int threads, prompt_len, gen, max_tokens, json, profile;
    int prompt_logprobs;    /* -1: off; else the alternatives each prompt row asks */
    int invariant;          /* --batch-invariant: the engine's batch-invariant kernels */
    int eager;              /* --enforce-eager: no CUDA graphs (their share of a step) */
    int copy_mib;           /* the bandwidth copy: far larger than any cache */
    const char *leave_out;  /* --leave-out: kinds of work decode steps skip (model.h) */
    int clock_device;       /* the GPU whose clock and power the timed runs sample; -1: none */
    int batches[BENCH_MAX_BATCHES], n_batches;
} benchOpts;

typedef struct benchRow {
    int batch;
    double prefill_s, decode_s;      /* wall time of all prefill / decode steps */
    double floor_s;                  /* one decode step at the bandwidth floor */
    rlGpuClocks prefill_clk, decode_clk;   /* the GPU's clock and power meanwhile (n 0: none) */
} benchRow;

static int bench_cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Copy bandwidth (bytes read + written per second), median of several reps
 * of a copy far larger than any cache.  Both buffers are written first: on
 * the CPU a never-written source reads the kernel's one zero page, which
 * measured ~16 GB/s where the same copy of written memory ran at ~42. */
static int bench_bandwidth(rlBackend *be, size_t bytes, double *out, rlError *err) {
    void *a = be->ops->alloc(be, bytes, err), *b = a ? be->ops->alloc(be, bytes, err) : NULL;
    if (!a || !b) {
        if (a) be->ops->free(be, a);
        return -1;
    }
    double t[BENCH_COPY_REPS + 1];
    int rc = be->ops->fill_random(be, a, RL_F32, bytes / sizeof(float), 1, 1.0f, err);
    if (rc == 0) rc = be->ops->fill_random(be, b, RL_F32, bytes / sizeof(float), 2, 1.0f, err);
    for (int i = 0; i <= BENCH_COPY_REPS && rc == 0; i++) {   /* rep 0 warms the TLB and caches */
        double t0 = now_s();
        be->ops->copy2d(be, b, 0, a, 0, bytes, 1);
        rc = be->ops->sync(be, err);
        t[i] = now_s() - t0;
    }
    be->ops->free(be, a);
    be->ops->free(be, b);
    if (rc != 0) return -1;
    qsort(t + 1, BENCH_COPY_REPS, sizeof(double), bench_cmp);
    *out = 2.0 * bytes / t[1 + BENCH_COPY_REPS / 2];
    return 0;
}

/* Sequences of the current run: prompt + generated ids, block tables. */
typedef struct benchSeqs {
    int n, len_max, max_blocks;
    int32_t *ids;          /* [n][len_max] */
    int32_t *tables;       /* [n][max_blocks] */
    int *cached;
} benchSeqs;

/* One step: `take[i]` new tokens of sequence i (0 = not in this step); the
 * last token of each sequence that reaches its prompt end samples greedily,
 * and with prompt_logprobs >= 0 every prompt token before it scores its
 * successor. */
static int bench_step(rlModel *m, benchSeqs *s, const int *take, int prompt_len,
                      int prompt_logprobs, rlRowResult *res, rlError *err) {
    int nt = 0, ns = 0, nr = 0;
    for (int i = 0; i < s->n; i++) nt += take[i];
    int32_t *tok = malloc((size_t)nt * 3 * sizeof(int32_t));
    int32_t *start = malloc(((size_t)s->n + 1) * sizeof(int32_t));
    int32_t *len = malloc((size_t)s->n * sizeof(int32_t));
    int32_t *tables = malloc((size_t)s->n * s->max_blocks * sizeof(int32_t));
    rlRowSpec *rows = calloc((size_t)nt, sizeof(rlRowSpec));
    int *row_seq = malloc((size_t)nt * sizeof(int));
    int rc = -1;
    if (!tok || !start || !len || !tables || !rows || !row_seq) {
        rl_error(err, RL_EMEMORY, "out of host memory building a benchmark step");
        goto out;
    }
    int32_t *pos = tok + nt, *slots = pos + nt;
    int t = 0;
    for (int i = 0; i < s->n; i++) {
        if (!take[i]) continue;
        const int32_t *bt = s->tables + (size_t)i * s->max_blocks;
        start[ns] = t;
        for (int p = s->cached[i]; p < s->cached[i] + take[i]; p++, t++) {
            tok[t] = s->ids[(size_t)i * s->len_max + p];
            pos[t] = p;
            slots[t] = bt[p / BENCH_BLOCK] * BENCH_BLOCK + p % BENCH_BLOCK;
            if (prompt_logprobs >= 0 && p + 1 < prompt_len) {
                rows[nr] = (rlRowSpec){.token = t, .target = s->ids[(size_t)i * s->len_max + p + 1],
                                       .n_top = prompt_logprobs, .top_p = 1};
                row_seq[nr++] = -1;
            }
        }
        len[ns] = s->cached[i] + take[i];
        memcpy(tables + (size_t)ns * s->max_blocks, bt, (size_t)s->max_blocks * sizeof(int32_t));
        if (len[ns] >= prompt_len) {
            rows[nr] = (rlRowSpec){.token = t - 1, .target = -1, .sample = 1, .top_p = 1};
            row_seq[nr++] = i;
        }
        ns++;
    }
    start[ns] = t;
    rlBatch b = {.n_seqs = ns, .n_tokens = nt, .tokens = tok, .positions = pos, .slots = slots,
                 .seq_start = start, .seq_len = len, .block_tables = tables,
                 .max_blocks = s->max_blocks, .n_rows = nr, .rows = rows};
    if (rl_model_forward(m, &b, res, err) != 0) goto out;
    for (int i = 0; i < s->n; i++) s->cached[i] += take[i];
    for (int r = 0; r < nr; r++) {
        int i = row_seq[r];
        if (i >= 0 && s->cached[i] < s->len_max) s->ids[(size_t)i * s->len_max + s->cached[i]] = res[r].token;
    }
    rc = 0;
out:
    free(tok), free(start), free(len), free(tables), free(rows), free(row_seq);
    return rc;
}

/* The most logit rows a step of `batch` sequences has: one a sequence, or
 * with prompt logprobs one a prompt token. */
static int bench_max_rows(const benchOpts *o, int batch) {
    return o->prompt_logprobs >= 0 && o->max_tokens > batch ? o->max_tokens : batch;
}

/* The timed run's (f's) sampler of the GPU's clock and power, started and
 * stopped outside the timed spans; NULL on the CPU or without NVML. */
static rlClockSampler *bench_clocks(const benchOpts *o, FILE *f) {
    return f && o->clock_device >= 0 ? rl_clock_sampler_start(o->clock_device) : NULL;
}

/* Prefill `batch` prompts (chunked to max_tokens per step), then decode gen
 * tokens; the profile (with --profile) goes to f, NULL: discarded. */
static int bench_batch(rlModel *m, const benchOpts *o, int batch, int gen, FILE *f,
                       benchRow *row, rlError *err) {
    benchSeqs s = {.n = batch, .len_max = o->prompt_len + o->gen};
    s.max_blocks = (s.len_max + BENCH_BLOCK - 1) / BENCH_BLOCK;
    s.ids = malloc((size_t)batch * s.len_max * sizeof(int32_t));
    s.tables = malloc((size_t)batch * s.max_blocks * sizeof(int32_t));
    s.cached = calloc((size_t)batch, sizeof(int));
    int *take = calloc((size_t)batch, sizeof(int));
    rlRowResult *res = calloc((size_t)bench_max_rows(o, batch), sizeof(rlRowResult));
    rlClockSampler *clk = NULL;
    int rc = -1;
    if (!s.ids || !s.tables || !s.cached || !take || !res) {
        rl_error(err, RL_EMEMORY, "out of host memory for a batch of %d", batch);
        goto out;
    }
    uint64_t x = 0x9e3779b97f4a7c15ULL * (uint64_t)(batch + 1);
    for (size_t i = 0; i < (size_t)batch * s.len_max; i++) {
        x = x * 6364136223846793005ULL + 1442695040888963407ULL;
        s.ids[i] = (int32_t)((x >> 33) % (uint64_t)m->cfg.vocab_size);
    }
    for (int i = 0; i < batch * s.max_blocks; i++) s.tables[i] = i;

    clk = bench_clocks(o, f);
    int prefill_steps = 0;
    double t0 = now_s();
    for (int i = 0; i < batch; prefill_steps++) {          /* whole prompts while they fit, else chunks */
        int budget = o->max_tokens;
        memset(take, 0, (size_t)batch * sizeof(int));
        for (; i < batch && budget > 0; budget -= take[i], i += s.cached[i] + take[i] == o->prompt_len) {
            int left = o->prompt_len - s.cached[i];
            take[i] = left < budget ? left : budget;
            if (take[i] < left) break;
        }
        if (bench_step(m, &s, take, o->prompt_len, o->prompt_logprobs, res, err) != 0) goto out;
    }
    double t1 = now_s();
    rl_clock_sampler_stop(clk, &row->prefill_clk);
    clk = bench_clocks(o, f);
    char label[64];
    if (o->profile && m->be->ops->profile_report) {
        snprintf(label, sizeof label, "prefill, batch %d x %d tokens", batch, o->prompt_len);
        m->be->ops->profile_report(m->be, f, label, prefill_steps);
    }
    for (int i = 0; i < batch; i++) take[i] = 1;
    double t2 = now_s();
    for (int g = 0; g < gen; g++)
        if (bench_step(m, &s, take, o->prompt_len, -1, res, err) != 0) goto out;
    double t3 = now_s();
    rl_clock_sampler_stop(clk, &row->decode_clk);
    clk = NULL;
    if (o->profile && m->be->ops->profile_report) {
        snprintf(label, sizeof label, "decode, batch %d", batch);
        m->be->ops->profile_report(m->be, f, label, gen);
    }
    row->batch = batch;
    row->prefill_s = t1 - t0;
    row->decode_s = t3 - t2;
    rc = 0;
out:
    if (clk) {
        rlGpuClocks unused;
        rl_clock_sampler_stop(clk, &unused);
    }
    free(s.ids), free(s.tables), free(s.cached), free(take), free(res);
    return rc;
}

/* -1: go on; else the exit status (help printed, or a bad flag). */
static int bench_parse(int argc, char **argv, benchOpts *o) {
    *o = (benchOpts){.backend = "cpu", .load_format = "dummy", .prompt_len = 512, .gen = 32,
                     .max_tokens = 2048, .batches = {1, 8}, .n_batches = 2, .copy_mib = 256,
                     .prompt_logprobs = -1, .clock_device = -1};
    rlFlags fs;
    flags_init(&fs, "bench", "usage: redlm bench --model DIR|config.json [options]\n");
    flags_string(&fs, "--model", &o->model, "DIR",
                 "a model directory, or a config.json with --load-format\n"
                 "dummy (e.g. tests/fixtures/configs/qwen2.5-0.5b.json)")->required = 1;
    flags_enum(&fs, "--backend", &o->backend, engine_backends, "compute backend (default cpu)");
    flags_enum(&fs, "--load-format", &o->load_format, engine_load_formats,
               "dummy (default): random weights; auto: the checkpoint's");
    flags_enum(&fs, "--quantization", &o->quantization, engine_quantizations,
               ENGINE_QUANTIZATION_HELP);
    flags_int(&fs, "--threads", &o->threads, 1, 1 << 16, "N", "CPU threads (default: all cores)");
    flags_int(&fs, "--prompt-len", &o->prompt_len, 1, 1 << 24, "N",
              "prompt tokens per sequence (default 512)");
    flags_int(&fs, "--gen", &o->gen, 1, 1 << 24, "N", "decode steps (default 32)");
    flags_list(&fs, "--batch", o->batches, BENCH_MAX_BATCHES, &o->n_batches, 1, 4096, 0, "B,B",
               "batch sizes, e.g. 1,8 (default)");
    flags_int(&fs, "--max-num-batched-tokens", &o->max_tokens, 1, 1 << 24, "N",
              "prefill tokens per step (default 2048)");
    flags_int(&fs, "--copy-mib", &o->copy_mib, 1, 65536, "N",
              "the bandwidth copy's size, well above the last-level\ncache (default 256)");
    flags_int(&fs, "--prompt-logprobs", &o->prompt_logprobs, 0, RL_MAX_TOP, "N",
              "score the prompts: each prompt token's logprob and N\n"
              "alternatives, as prompt_logprobs N (default: off)");
    flags_bool(&fs, "--json", &o->json, "one JSON object instead of the table");
    flags_bool(&fs, "--profile", &o->profile,
               "device time per operation kind (CUDA, with graphs off)");
    flags_bool(&fs, "--batch-invariant", &o->invariant,
               "time the batch-invariant kernels (generate's and\nworker's --batch-invariant)");
    flags_string(&fs, "--leave-out", &o->leave_out, "KINDS",
                 "time decode steps without some of each layer's work,\n"
                 "e.g. attention,o_proj (also norm, qkv_proj, rope,\n"
                 "gate_up_proj, swiglu, down_proj, router, experts):\n"
                 "what each costs inside a graphed step; the tokens\n"
                 "are wrong meanwhile");
    engine_flags_add_eager(&fs, &o->eager);
    const char *kv_cache_dtype = "auto";   /* the only choice: nothing to keep */
    int trust_remote_code = 0;
    engine_flags_add_vllm(&fs, &kv_cache_dtype, &trust_remote_code);
    return flags_main(&fs, argc, argv);
}

/* The model as the backend holds it: a backend with upload_quant (CUDA)
 * keeps quantized layers quantized, so a decode step reads their packed
 * values, scales and zeros; the CPU holds them dequantized, and its floor
 * counts dense bytes. */
static rlModelConfig bench_held(const rlModelConfig *cfg, const rlBackend *be) {
    rlModelConfig held = *cfg;
    if (!be->ops->upload_quant) held.quant.method = RL_QUANT_NONE;
    return held;
}

/* The weight bytes a decode step of `batch` sequences reads: every weight
 * but the embedding table (one row of it), unless that table is also the LM
 * head; of a mixture of experts only the experts the batch's tokens touch
 * (rl_model_read_bytes), so the batch-1 floor is attention + the chosen
 * experts + the shared expert + the router + the LM head. */
static size_t bench_step_bytes(const rlModelConfig *held, const rlShard *s, rlDtype wd,
                               int batch) {
    size_t bytes = rl_model_read_bytes(held, s, wd, batch);
    if (!held->tie_word_embeddings && s->pp_rank == 0)
        bytes -= (size_t)held->vocab_size * held->hidden_size * rl_dtype_size(wd);
    return bytes;
}

static void bench_print(const benchOpts *o, const rlModel *m, double bw, size_t step_bytes,
                        const benchRow *rows, int n) {
    /* the file name, or the directory's for a model dir or its config.json */
    char name[256];
    snprintf(name, sizeof(name), "%s", o->model);
    size_t len = strlen(name);
    while (len > 1 && name[len - 1] == '/') name[--len] = 0;
    char *slash = strrchr(name, '/');
    if (slash && !strcmp(slash + 1, "config.json") && slash != name) {
        *slash = 0;
        slash = strrchr(name, '/');
    }
    const char *base = slash ? slash + 1 : name;
    rlModelConfig held = bench_held(&m->cfg, m->be);
    size_t wb = rl_model_weight_bytes(&held, &m->shard, m->be->weight_dtype);
    /* Quantized layers: the bytes the backend holds, beside the plan's count. */
    size_t q_held = m->quant_bytes,
           q_plan = m->quant_bytes ? rl_model_linear_bytes(&held, &m->shard, m->be->weight_dtype) : 0;
    char quant[64];
    rl_quant_name(&m->cfg.quant, quant, sizeof(quant));
    const char *how = !m->cfg.quant.method ? "" : m->quant_bytes ? ", quantized " : ", dequantized from ";
    if (o->json) {
        printf("{\"backend\":\"%s\",\"model\":\"%s\",\"weights\":\"%s\",\"quantization\":\"%s\","
               "\"weight_bytes\":%zu,\"decode_bytes_per_step\":%zu,\"bandwidth_bytes_per_s\":%.0f,"
               "\"quant_bytes_held\":%zu,\"quant_bytes_planned\":%zu,"
               "\"batch_invariant\":%s,\"leave_out\":\"%s\",\"prompt_len\":%d,"
               "\"prompt_logprobs\":%d,\"gen\":%d,\"results\":[",
               m->be->ops->name, base, rl_dtype_name(m->be->weight_dtype), quant, wb, step_bytes,
               bw, q_held, q_plan, o->invariant ? "true" : "false",
               o->leave_out ? o->leave_out : "", o->prompt_len, o->prompt_logprobs, o->gen);
        for (int i = 0; i < n; i++) {
            const rlGpuClocks *p = &rows[i].prefill_clk, *d = &rows[i].decode_clk;
            printf("%s{\"batch\":%d,\"prefill_tokens_per_s\":%.1f,\"decode_tokens_per_s\":%.2f,"
                   "\"decode_ms_per_step\":%.3f,\"floor_ms_per_step\":%.3f",
                   i ? "," : "", rows[i].batch,
                   rows[i].batch * (double)o->prompt_len / rows[i].prefill_s,
                   rows[i].batch * (double)o->gen / rows[i].decode_s,
                   1e3 * rows[i].decode_s / o->gen, 1e3 * rows[i].floor_s);
            if (p->n && d->n)
                printf(",\"prefill_sm_mhz\":%u,\"prefill_watts\":%.0f,\"decode_sm_mhz\":%u,"
                       "\"decode_watts\":%.0f", p->median_mhz, p->watts, d->median_mhz, d->watts);
            printf("}");
        }
        printf("]}\n");
        return;
    }
    printf("backend %s%s%s, %s (%s weights%s%s%s, %.2f GB; a decode step reads %.2f GB of them)\n",
           m->be->ops->name, o->invariant ? " (batch-invariant)" : "",
           o->eager && !strcmp(m->be->ops->name, "cuda") ? " (eager: no CUDA graphs)" : "", base,
           rl_dtype_name(m->be->weight_dtype), how, m->cfg.quant.method ? quant : "",
           m->cfg.quant.method && !m->quant_bytes ? " at load" : "", wb / 1e9, step_bytes / 1e9);
    if (o->leave_out)
        printf("decode steps leave out %s in every layer: their tokens are wrong, their times "
               "show what that work costs\n", o->leave_out);
    if (m->quant_bytes)
        printf("quantized layers: %zu bytes held on the device, %zu counted by the memory plan "
               "(%s)\n", q_held, q_plan, q_held == q_plan ? "equal" : "they differ");
    if (m->cfg.num_experts) {
        /* The batch-1 floor's parts: the chosen experts, the LM head, the rest. */
        size_t none = rl_model_read_bytes(&held, &m->shard, m->be->weight_dtype, 0);
        size_t chosen = rl_model_read_bytes(&held, &m->shard, m->be->weight_dtype, 1) - none;
        size_t head = (size_t)m->cfg.vocab_size * m->cfg.hidden_size *
                      rl_dtype_size(m->be->weight_dtype);
        printf("batch-1 floor: the %d chosen experts of %d per layer %.3f GB + LM head %.3f GB + "
               "attention, router, shared expert and norms %.3f GB = %.3f GB a step\n",
               m->cfg.num_experts_per_tok, m->cfg.num_experts, chosen / 1e9, head / 1e9,
               (step_bytes - chosen - head) / 1e9, step_bytes / 1e9);
    }
    printf("memory bandwidth (copy, bytes read + written): %.1f GB/s, median of %d\n", bw / 1e9,
           BENCH_COPY_REPS);
    if (o->prompt_logprobs >= 0)
        printf("prompt %d tokens, each scored (prompt_logprobs %d), %d generated\n\n",
               o->prompt_len, o->prompt_logprobs, o->gen);
    else
        printf("prompt %d tokens, %d generated\n\n", o->prompt_len, o->gen);
    printf("%5s %14s %13s %14s %15s %9s\n", "batch", "prefill tok/s", "decode tok/s",
           "decode ms/step", "floor ms/step", "x floor");
    for (int i = 0; i < n; i++) {
        double step = rows[i].decode_s / o->gen;
        printf("%5d %14.1f %13.2f %14.2f %15.2f %9.2f\n", rows[i].batch,
               rows[i].batch * (double)o->prompt_len / rows[i].prefill_s,
               rows[i].batch * (double)o->gen / rows[i].decode_s, 1e3 * step,
               1e3 * rows[i].floor_s, step / rows[i].floor_s);
    }
    /* The GPU's clock while each row ran: a rate compares to another only
     * at the same clock, and a GPU at its power limit runs lower. */
    for (int i = 0, said = 0; i < n; i++) {
        const rlGpuClocks *p = &rows[i].prefill_clk, *d = &rows[i].decode_clk;
        if (!p->n || !d->n) continue;
        if (!said++)
            printf("\nthe GPU meanwhile (NVML, every %d ms; top SM clock %u MHz, power limit %.0f "
                   "W):\n", RL_CLOCK_PERIOD_MS, p->top_mhz, p->cap_watts);
        printf("%5d  prefill SM clock %u MHz median (%u-%u), %.0f W; decode %u MHz (%u-%u), "
               "%.0f W\n", rows[i].batch, p->median_mhz, p->min_mhz, p->max_mhz, p->watts,
               d->median_mhz, d->min_mhz, d->max_mhz, d->watts);
    }
}

int cmd_bench(int argc, char **argv) {
    benchOpts o;
    rlError err = {0};
    rlModelConfig cfg;
    rlCheckpoint *ck = NULL;
    rlBackend *be = NULL;
    rlModel m = {0};
    rlQuantDummy qdummy = {0};
    benchRow rows[BENCH_MAX_BATCHES];
    int rc = bench_parse(argc, argv, &o);
    if (rc >= 0) return rc;

    int dummy = !strcmp(o.load_format, "dummy");
    if (dummy ? checkpoint_read_config(o.model, &cfg, &err) != 0
              : !(ck = checkpoint_open(o.model, &cfg, &err)))
        goto fail;
    if (quant_apply_flag(&cfg, o.quantization, dummy, &err)) goto fail;
    if ((long long)o.prompt_len + o.gen > cfg.max_position_embeddings) {
        rl_error(&err, RL_EUSAGE, "--prompt-len %d + --gen %d is %lld tokens, over the model's "
                 "context of %d (max_position_embeddings, or its rope scaling's): give a shorter "
                 "--prompt-len", o.prompt_len, o.gen, (long long)o.prompt_len + o.gen,
                 cfg.max_position_embeddings);
        goto fail;
    }
    unsigned leave_out = 0;
    if (o.leave_out && rl_model_leave_out_parse(o.leave_out, &leave_out, &err) != 0) {
        rl_error_wrap(&err, "--leave-out %s", o.leave_out);
        goto fail;
    }
    quant_dummy_init(&qdummy, &cfg, 1);
    rlBackendOptions bo = {.threads = o.threads, .dtype = RL_BF16, .profile = o.profile,
                           .batch_invariant = o.invariant, .eager = o.eager};
    /* --backend is cpu or cuda: the flag's choices */
    be = strcmp(o.backend, "cuda") ? rl_backend_cpu_create(&bo, &err)
                                   : rl_backend_cuda_create(&bo, &err);
    if (!be) goto fail;
    if (o.profile && !be->ops->profile_report)
        fprintf(stderr, "redlm bench: --profile times CUDA operations; the %s backend has none to "
                "show\n", be->ops->name);
    if (!strcmp(o.backend, "cuda")) {
        o.clock_device = bo.device;
        /* The GPU's two ceilings, measured now, before the model takes its memory. */
        double copy_bw, gemm;
        if (rl_cuda_ceilings(bo.device, &copy_bw, &gemm, &err) != 0) goto fail;
        fprintf(o.json ? stderr : stdout,
                "GPU ceilings, measured now: copy %.2f TB/s (bytes read + written), bf16 GEMM "
                "8192^3 %.0f TFLOP/s\n", copy_bw / 1e12, gemm / 1e12);
    }

    int max_batch = 1;
    for (int i = 0; i < o.n_batches; i++)
        if (o.batches[i] > max_batch) max_batch = o.batches[i];
    int len = o.prompt_len + o.gen, max_tokens = o.max_tokens;
    if (max_tokens < max_batch) max_tokens = max_batch;   /* a decode step of every sequence */
    rlShard shard;
    if (rl_shard_plan(&cfg, 1, 1, NULL, &shard, &err) != 0 ||
        (!strcmp(o.backend, "cpu") &&
         engine_check_host_memory(&cfg, 1, 1, NULL,
                                  rl_model_kv_bytes_per_token(&cfg, &shard, RL_F32) *
                                      (size_t)max_batch * (size_t)len, &err)) ||
        rl_model_init(&m, &cfg, &shard, be, NULL, NULL,
                      ck ? checkpoint_lookup : cfg.quant.method ? quant_dummy_lookup : NULL,
                      ck ? (void *)ck : (void *)&qdummy, 1, max_tokens,
                      bench_max_rows(&o, max_batch), &err) != 0 ||
        be->ops->kv_init(be, shard.n_layers, max_batch * ((len + BENCH_BLOCK - 1) / BENCH_BLOCK),
                         BENCH_BLOCK, shard.n_kv_heads, cfg.head_dim, &err) != 0)
        goto fail;
    m.leave_out = leave_out;

    if (!be->ops->copy2d) {
        rl_error(&err, RL_EINTERNAL, "the %s backend has no copy2d to measure bandwidth with",
                 be->ops->name);
        goto fail;
    }
    double bw;
    if (bench_bandwidth(be, (size_t)o.copy_mib << 20, &bw, &err) != 0) goto fail;
    rlModelConfig held = bench_held(&cfg, be);
    size_t step_bytes = bench_step_bytes(&held, &shard, be->weight_dtype, 1);
    size_t kv_token = rl_model_kv_bytes_per_token(&cfg, &shard, be->act_dtype);
    for (int i = 0; i < o.n_batches; i++) {
        /* A short untimed pass first: plans each GEMM shape, sizes buffers
         * and captures the decode graphs, as any long-running worker has. */
        benchRow warm;
        int warm_gen = o.gen < BENCH_WARMUP_STEPS ? o.gen : BENCH_WARMUP_STEPS;
        if (bench_batch(&m, &o, o.batches[i], warm_gen, NULL, &warm, &err) != 0 ||
            bench_batch(&m, &o, o.batches[i], o.gen, stdout, &rows[i], &err) != 0)
            goto fail;
        /* mean context over the decode steps, every sequence's cache read once */
        double ctx = o.prompt_len + o.gen / 2.0;
        size_t weights = bench_step_bytes(&held, &shard, be->weight_dtype, o.batches[i]);
        rows[i].floor_s = (weights + o.batches[i] * ctx * kv_token) / bw;
    }
    bench_print(&o, &m, bw, step_bytes, rows, o.n_batches);
    rl_model_free(&m);
    be->ops->destroy(be);
    if (ck) checkpoint_close(ck);
    quant_dummy_free(&qdummy);
    return 0;
fail:
    fprintf(stderr, "redlm bench: %s\n", err.msg);
    quant_dummy_free(&qdummy);
    rl_model_free(&m);
    if (be) be->ops->destroy(be);
    if (ck) checkpoint_close(ck);
    return err.code ? (int)err.code : 1;
}
