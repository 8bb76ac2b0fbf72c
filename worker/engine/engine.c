/* engine.c: the loop that turns requests into outputs (see engine.h).
 *
 * One step: answer requests that can never run, drop aborted ones, ask the
 * scheduler for plans and hand them to the ranks until the pipeline holds
 * one step per stage (one step in all without pipeline parallelism), then
 * wait for the oldest and walk its logit rows: prompt logprobs are stored,
 * sampled tokens appended, checked against EOS, stop ids, stop strings
 * (through the incremental detokenizer) and max_tokens, and streamed.  The
 * steps in flight are over disjoint requests, which the scheduler leaves
 * alone until their results are applied, so every stage works on one of
 * them while the others work on theirs.  The scheduler decides what runs;
 * this file never decides, it executes and reports. */
#include "worker/engine/engine.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "kernels/rng.h"
#include "sched/sched.h"
#include "worker/model/checkpoint.h"
#include "worker/model/modelcfg.h"
#include "worker/model/quant.h"
#include "worker/engine/adjust.h"
#include "worker/engine/layout.h"
#include "worker/engine/ranks.h"
#include "worker/engine/engine_plan.h"
#include "worker/engine/prompt.h"
#include "worker/lib/now.h"
#include "worker/lib/utf8.h"

void engine_options_init(rlEngineOptions *o) {
    memset(o, 0, sizeof(*o));
    o->backend = "cpu";
    o->load_format = "auto";
    o->dtype = "auto";
    o->block_size = 16;
    o->gpu_memory_utilization = 0.90;
    o->prefix_caching = 1;
    o->tp = o->pp = 1;
    o->stream_interval = 1;
    o->generation_config = "auto";
}

/* One sample's output state. */
typedef struct engSample {
    rlDetok *detok;
    int32_t *tokens;            /* not yet delivered */
    rlTokenLogprob *logprobs;   /* parallel to tokens when asked */
    int n_tokens, cap;          /* cap: room in both, grown as tokens come (a default
                                 * max_tokens may be the whole context) */
    char *text;                 /* not yet delivered */
    size_t text_len, text_cap;
    int n_generated;
    rlFinish finish;            /* NONE while running */
    int stop_string;            /* what ended it (stop_reason): 1 + its index in stop, */
    int stop_by_token;          /* or a stop_token_ids entry, stop_token; */
    int32_t stop_token;         /* neither for EOS and length */
    int dirty;                  /* has undelivered tokens this step */
} engSample;

typedef struct engReq {
    rlRequest *req;
    rlSchedReq *h;              /* NULL: answered with an error, never scheduled */
    const char *error_code;
    char *error_message;
    engSample *samples;
    int n_done;
    rlTokenLogprob *prompt_lp;  /* [n_prompt] when prompt_logprobs was asked */
    rlAdjust *adjust;           /* its logit adjustments, or NULL (adjust.c) */
    uint64_t seed;
    int aborted;
    double t_arrival, t_scheduled, t_first;
    struct engReq *prev, *next;
} engReq;

/* A step handed to the ranks and not applied yet: its plan, row specs and
 * results stay untouched until ranks_wait on its ticket returns. */
typedef struct engFlight {
    rlStep *plan;
    rlRowSpec *specs;
    rlRowResult *results;
    rlAdjBuf adj;               /* the rows' logit adjustments */
    uint64_t ticket;
    int samples;                /* sampling rows: requests that will want the next step */
} engFlight;

struct rlEngine {
    rlEngineOptions opt;
    rlModelConfig cfg;
    rlCheckpoint *ckpt;
    rlQuantDummy qdummy;        /* dummy weights of a quantized config */
    char quant[64];             /* rl_quant_name of the weights */
    char *served_name;          /* done events' `model`: --served-model-name's first name,
                                 * else --model as given (vLLM's answers name the first) */
    rlSamplingDefaults defaults; /* generation_config.json's, unless --generation-config vllm */
    char defaults_line[160];    /* engine_sampling_defaults */
    rlTokenizer *tok;
    rlChat *chat;               /* with tok: the model's chat template */
    rlPenTables pen_tables;     /* the backends' penalty tables (adjust.h) */
    rlRanks *ranks;
    rlSched *sched;
    int n_blocks;
    int max_rows;
    engFlight *flights;         /* [depth], a ring: n_flight of them from oldest on */
    int depth;                  /* most steps in flight: the pipeline's stages, or 2 on
                                 * asynchronous ranks without a pipeline (engine_may_submit) */
    int oldest, n_flight, max_flight;
    engReq *head, *tail;        /* every request not yet fully answered */
    uint64_t n_arrivals;
    uint64_t prompt_tokens, generation_tokens;
    double model_ms;
};

/* ---- the model over its ranks ---- */

/* KV bytes one token costs: on CPU all ranks share host memory, so the sum
 * over ranks; on GPUs each rank has its own, so the largest rank's share. */
static int engine_kv_bytes_per_token(const rlEngine *e, rlDtype dtype, size_t *out, rlError *err) {
    const rlEngineOptions *o = &e->opt;
    int n = o->tp * o->pp;
    rlShard *plan = calloc((size_t)n, sizeof(*plan));
    if (!plan) return rl_error(err, RL_EINTERNAL, "out of memory");
    int rc = rl_shard_plan(&e->cfg, o->tp, o->pp, o->pp_partition, plan, err);
    int cpu = !strcmp(o->backend, "cpu");
    *out = 0;
    for (int i = 0; !rc && i < n; i++) {
        size_t b = rl_model_kv_bytes_per_token(&e->cfg, &plan[i], cpu ? RL_F32 : dtype);
        *out = cpu ? *out + b : (b > *out ? b : *out);
    }
    free(plan);
    return rc;
}

static int engine_ranks_open(rlEngine *e, rlDtype dtype, rlError *err) {
    const rlEngineOptions *o = &e->opt;
    rlRanksOptions ro = {.cfg = e->cfg, .backend = o->backend, .dtype = dtype,
                         .threads = o->threads, .tp = o->tp, .pp = o->pp,
                         .pp_partition = o->pp_partition, .devices = o->devices,
                         .src = e->ckpt ? checkpoint_lookup
                                : e->cfg.quant.method ? quant_dummy_lookup : NULL,
                         .src_ctx = e->ckpt ? (void *)e->ckpt : (void *)&e->qdummy,
                         .dummy_seed = o->seed, .block_size = o->block_size,
                         .n_blocks = e->n_blocks, .max_tokens = o->max_num_batched_tokens,
                         .max_rows = e->max_rows, .nccl_timeout_s = o->nccl_timeout_s,
                         .collectives = o->collectives,
                         /* a GPU computes while this thread plans and lands steps;
                          * the CPU backend's threads are this machine's cores */
                         .thread = strcmp(o->backend, "cpu") != 0,
                         .gpu_memory_utilization = o->gpu_memory_utilization,
                         .quiet = o->tp * o->pp == 1 && !o->collectives,
                         .batch_invariant = o->batch_invariant,
                         .eager = o->enforce_eager};
    e->ranks = ranks_open(&ro, err);
    return e->ranks ? 0 : -1;
}

/* ---- opening ---- */

/* The CPU KV pool's default share of the machine's memory, and its bounds. */
#define ENGINE_KV_SHARE 16
#define ENGINE_KV_MIN ((size_t)64 << 20)
#define ENGINE_KV_MAX ((size_t)16 << 30)

static size_t engine_phys_bytes(void) {
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    return pages > 0 && page > 0 ? (size_t)pages * (size_t)page : (size_t)ENGINE_KV_SHARE << 30;
}

static size_t engine_default_kv_bytes(void) {
    size_t b = engine_phys_bytes() / ENGINE_KV_SHARE;
    return b < ENGINE_KV_MIN ? ENGINE_KV_MIN : b > ENGINE_KV_MAX ? ENGINE_KV_MAX : b;
}

static int engine_kv_blocks(rlEngine *e, rlDtype dtype, rlError *err) {
    const rlEngineOptions *o = &e->opt;
    (void)dtype;
    if (!strcmp(o->backend, "cuda")) {
        /* Before any weight is on a GPU: a layout that cannot fit stops
         * here with the plan.  The KV cache is then what each GPU has left
         * under gpu_memory_utilization once its weights are there (0: the
         * ranks measure it), unless --kv-cache-memory says how much. */
        long long planned;
        if (engine_check_plan(&e->cfg, o, stderr, &planned, err)) return -1;
        if (!o->kv_cache_memory) return 0;
    }
    size_t per_token;
    if (engine_kv_bytes_per_token(e, dtype, &per_token, err)) return -1;
    size_t per_block = per_token * (size_t)o->block_size;
    size_t budget = o->kv_cache_memory ? o->kv_cache_memory : engine_default_kv_bytes();
    /* By default never more than every sequence at full length needs. */
    size_t full = (size_t)o->max_num_seqs * (size_t)((o->max_model_len + o->block_size - 1) / o->block_size);
    size_t n = budget / per_block;
    if (!o->kv_cache_memory && n > full) n = full;
    if (!o->kv_cache_memory && n >= 1)
        /* The pool keeps freed blocks as a prefix cache, so the process grows
         * towards this size and stays there: said once, so that is not read
         * as a leak. */
        fprintf(stderr, "redlm: KV cache %.0f MiB (%zu blocks of %d tokens; 1/%d of this machine's %.1f GiB, "
                "at most what --max-num-seqs sequences of --max-model-len need); cached prefixes fill it, "
                "--kv-cache-memory sets it\n", (double)(n * per_block) / (1 << 20), n, o->block_size,
                ENGINE_KV_SHARE, (double)engine_phys_bytes() / (1 << 30));
    if (n < 1)
        return rl_error(err, RL_EMEMORY,
                        "--kv-cache-memory %zu bytes holds no KV block (one block of %d tokens "
                        "takes %zu bytes for this model and layout); give more", budget,
                        o->block_size, per_block);
    if (n > (size_t)1 << 30) n = (size_t)1 << 30;
    if (!strcmp(o->backend, "cpu") &&
        engine_check_host_memory(&e->cfg, o->tp, o->pp, o->pp_partition, n * per_block, err))
        return -1;
    return (int)n;
}

/* One prefill step of padding at start (rl_batch_pad_prefill), before the
 * decode sizes are planned, as vLLM's start-up profile run:
 * --max-num-batched-tokens new tokens in sequences of up to --max-model-len
 * (block 0 holds zeros there), every token a prompt-logprob row, so the head
 * and the sampler run their largest step too.  Two things follow: the step
 * buffer and scratch reach their largest before the decode graphs are
 * captured (a larger buffer later would clear them, backend_cuda.cu), and a
 * step that does not fit the GPU's memory stops the start, not a job.
 * 0.64 s for 16,384 tokens of a 7B model on an H100; scoring runs no faster
 * for it (kernels/PERF.md v42). */
static int engine_plan_prefill(rlEngine *e, rlError *err) {
    const rlEngineOptions *o = &e->opt;
    rlBatchPad pad = {0};
    rlBatch b;
    if (rl_batch_pad_prefill(&pad, o->max_num_batched_tokens, o->max_model_len, o->max_num_seqs,
                             e->max_rows, o->block_size, &b)) {
        rl_batch_pad_free(&pad);
        return rl_error(err, RL_EMEMORY, "out of memory planning a prefill step");
    }
    double t0 = now_ms();
    int rc = ranks_forward(e->ranks, &b, e->flights[0].results, err);
    rl_batch_pad_free(&pad);
    if (rc) return rl_error_wrap(err, "a prefill step of padding at start");
    fprintf(stderr, "redlm: a prefill step of %d tokens (%d logprob rows) run at start in %.2f s\n",
            b.n_tokens, b.n_rows, (now_ms() - t0) / 1e3);
    return 0;
}

/* On GPUs the first step of each batch size plans its products (cuBLASLt's
 * heuristic and a timing of its candidates: ~65 ms a size on 7B), and a
 * running set meets new sizes while requests wait.  Decode steps come padded
 * to rl_batch_bucket sizes (kernels/model.c), so one step of padding alone
 * per bucket up to --max-num-seqs, at start, takes all of that off the
 * requests' path. */
static int engine_plan_buckets(rlEngine *e, rlError *err) {
    int most = rl_batch_bucket(e->opt.max_num_seqs), n_sizes = 0, none = 0, rc = 0;
    rlBatch empty = {.seq_start = &none, .max_blocks = 1}, b;
    rlBatchPad pad = {0};
    double t0 = now_ms();
    for (int p = 1; !rc && p <= most && p <= e->opt.max_num_batched_tokens && p <= e->max_rows;
         p = rl_batch_bucket(p + 1), n_sizes++) {
        if (rl_batch_pad(&pad, &empty, p, &b)) rc = rl_error(err, RL_EMEMORY, "out of memory");
        else rc = ranks_forward(e->ranks, &b, e->flights[0].results, err);
    }
    rl_batch_pad_free(&pad);
    if (rc) return rl_error_wrap(err, "planning decode steps of padding");
    fprintf(stderr, "redlm: %d decode batch sizes (1-%d) planned in %.2f s\n", n_sizes,
            most, (now_ms() - t0) / 1e3);
    return 0;
}

/* Anything at the path, so that a tokenizer.json that is a directory or a
 * dangling link is reported by the loader rather than taken as absent. */
static int path_exists(const char *path) {
    struct stat st;
    return lstat(path, &st) == 0;
}

/* ---- the model's sampling defaults (vLLM's --generation-config) ---- */

static int engine_open_defaults(rlEngine *e, rlError *err) {
    const char *mode = e->opt.generation_config ? e->opt.generation_config : "auto";
    if (strcmp(mode, "auto") && strcmp(mode, "vllm"))
        return rl_error(err, RL_EUSAGE, "--generation-config %s: expected auto or vllm", mode);
    if (!strcmp(mode, "auto") && modelcfg_sampling_defaults(e->opt.model, &e->defaults, err))
        return -1;
    const rlSamplingDefaults *d = &e->defaults;
    char *p = e->defaults_line, *end = p + sizeof(e->defaults_line);
    if (d->set & RL_DEFAULT_TEMPERATURE) p += snprintf(p, end - p, " temperature=%g", d->temperature);
    if (d->set & RL_DEFAULT_TOP_P) p += snprintf(p, end - p, " top_p=%g", d->top_p);
    if (d->set & RL_DEFAULT_TOP_K) p += snprintf(p, end - p, " top_k=%d", d->top_k);
    if (d->set & RL_DEFAULT_MIN_P) p += snprintf(p, end - p, " min_p=%g", d->min_p);
    if (d->set & RL_DEFAULT_REPETITION_PENALTY)
        p += snprintf(p, end - p, " repetition_penalty=%g", d->repetition_penalty);
    if (d->set & RL_DEFAULT_MAX_TOKENS) snprintf(p, end - p, " max_tokens=%d", d->max_tokens);
    if (!d->set) snprintf(e->defaults_line, sizeof(e->defaults_line), " none");
    fprintf(stderr, "redlm: sampling defaults for fields a request leaves out "
            "(--generation-config %s): %s\n", mode, e->defaults_line + 1);
    return 0;
}

/* A default fills a field only when the request did not set it. */
static void engine_apply_defaults(const rlSamplingDefaults *d, rlRequest *r) {
    unsigned fill = d->set;
    if ((fill & RL_DEFAULT_TEMPERATURE) && !(r->given & RL_GIVEN_TEMPERATURE))
        r->temperature = (float)d->temperature;
    if ((fill & RL_DEFAULT_TOP_P) && !(r->given & RL_GIVEN_TOP_P)) r->top_p = (float)d->top_p;
    if ((fill & RL_DEFAULT_TOP_K) && !(r->given & RL_GIVEN_TOP_K)) r->top_k = d->top_k;
    if ((fill & RL_DEFAULT_MIN_P) && !(r->given & RL_GIVEN_MIN_P)) r->min_p = (float)d->min_p;
    if ((fill & RL_DEFAULT_REPETITION_PENALTY) && !(r->given & RL_GIVEN_REPETITION_PENALTY))
        r->repetition_penalty = (float)d->repetition_penalty;
}

const char *engine_sampling_defaults(const rlEngine *e) { return e->defaults_line + 1; }

/* The max_tokens of a request that gave none, as vLLM picks it: the
 * model's max_new_tokens (generation_config.json), else for a chat
 * (`messages`) the rest of the context, as vLLM's and OpenAI's chat
 * completions, else the protocol's 256 (request_init); never more than
 * the context and the KV cache leave each of its n samples
 * (sched_max_tokens), so a default is never refused as too long where a
 * shorter one fits, nor less than its min_tokens or 1 (a prompt that
 * leaves no room is refused as too long). */
static void engine_default_max_tokens(const rlEngine *e, rlRequest *r) {
    if (r->given & RL_GIVEN_MAX_TOKENS) return;
    int room = sched_max_tokens(e->sched, r->n_prompt_ids, r->n);
    int m = e->defaults.set & RL_DEFAULT_MAX_TOKENS ? e->defaults.max_tokens
            : r->messages                           ? room
                                                    : r->max_tokens;
    if (m > room) m = room;
    if (m < r->min_tokens) m = r->min_tokens;
    r->max_tokens = m > 1 ? m : 1;
}

rlEngine *engine_open(const rlEngineOptions *opt, rlError *err) {
    rlEngine *e = calloc(1, sizeof(*e));
    if (!e) {
        rl_error(err, RL_EINTERNAL, "out of memory");
        return NULL;
    }
    e->opt = *opt;
    rlEngineOptions *o = &e->opt;
    if (o->stream_interval < 1) o->stream_interval = 1;
    if (!o->model) {
        rl_error(err, RL_EUSAGE, "no model given: pass --model DIR");
        goto fail;
    }
    /* --served-model-name's names are comma-separated, --model is one name
     * (a directory may hold a comma); none may be empty, as a done event
     * or a request's `model` would then name nothing. */
    const char *names = o->served_model_name ? o->served_model_name : o->model;
    size_t first = o->served_model_name ? strcspn(names, ",") : strlen(names);
    if (o->served_model_name && (!first || strstr(names, ",,") || names[strlen(names) - 1] == ',')) {
        rl_error(err, RL_EUSAGE, "--served-model-name '%s' has an empty name: give names "
                 "separated by single commas, e.g. --served-model-name qwen,qwen-7b", names);
        goto fail;
    }
    if (!(e->served_name = strndup(names, first))) {
        rl_error(err, RL_EINTERNAL, "out of memory");
        goto fail;
    }
    if (!utf8_valid(names, strlen(names), NULL)) {
        rl_error(err, RL_EUSAGE, "the model's name '%s' (--served-model-name, else --model) is not "
                 "valid UTF-8, and every done event names it: give --served-model-name NAME",
                 names);
        goto fail;
    }
    if (o->block_size < 1 || o->block_size > 1024 || o->max_num_seqs < 0 ||
        o->max_num_batched_tokens < 0) {
        rl_error(err, RL_EUSAGE, "--block-size, --max-num-seqs and --max-num-batched-tokens "
                                 "must be positive (block size at most 1024)");
        goto fail;
    }
    if (!strcmp(o->load_format, "dummy")) {
        if (checkpoint_read_config(o->model, &e->cfg, err)) goto fail;
    } else if (!strcmp(o->load_format, "auto")) {
        if (!(e->ckpt = checkpoint_open(o->model, &e->cfg, err))) goto fail;
    } else {
        rl_error(err, RL_EUSAGE, "--load-format %s: expected auto or dummy", o->load_format);
        goto fail;
    }
    if (quant_apply_flag(&e->cfg, o->quantization, !e->ckpt, err)) goto fail;
    quant_dummy_init(&e->qdummy, &e->cfg, o->seed);
    rl_quant_name(&e->cfg.quant, e->quant, sizeof(e->quant));
    if (e->cfg.quant.method)
        fprintf(stderr, "redlm: %s%s weights, %s\n", e->ckpt ? "" : "dummy ", e->quant,
                strcmp(o->backend, "cpu") ? "kept quantized on the GPU"
                                          : "dequantized to fp32 at load (the CPU backend's path)");
    if (o->max_model_len <= 0 || o->max_model_len > e->cfg.max_position_embeddings) {
        if (o->max_model_len > e->cfg.max_position_embeddings) {
            rl_error(err, RL_EUSAGE, "--max-model-len %d is over the model's "
                     "max_position_embeddings (%d)", o->max_model_len,
                     e->cfg.max_position_embeddings);
            goto fail;
        }
        o->max_model_len = e->cfg.max_position_embeddings;
    }
    if (o->tp < 1 || o->pp < 1) {
        rl_error(err, RL_EUSAGE, "--tp and --pp must be at least 1");
        goto fail;
    }
    /* The layout's own checks (worker/engine/layout.c), with the model's layers. */
    rlLayout lay;
    layout_init(&lay);
    lay.tp = o->tp, lay.pp = o->pp, lay.n_devices = o->devices ? o->n_devices : 0;
    if (o->pp_partition) {
        lay.n_partition = o->n_pp_partition > 0 ? o->n_pp_partition : o->pp;
        if (lay.n_partition > RL_MAX_RANKS) lay.n_partition = RL_MAX_RANKS;
        memcpy(lay.partition, o->pp_partition, sizeof(int) * (size_t)lay.n_partition);
    }
    if (layout_check(&lay, e->cfg.num_layers, err)) goto fail;
    if (engine_open_defaults(e, err)) goto fail;
    /* --tokenizer DIR (vLLM's): the tokenizer and chat template from there;
     * without it a model directory with no tokenizer.json takes ids only. */
    const char *tok_dir = o->tokenizer ? o->tokenizer : o->model;
    char path[4096];
    snprintf(path, sizeof(path), "%s/tokenizer.json", tok_dir);
    if (o->tokenizer && !path_exists(path)) {
        rl_error(err, RL_EMODEL, "--tokenizer %s has no tokenizer.json: give the directory that holds "
                 "the model's tokenizer.json (and its tokenizer_config.json), as vLLM's --tokenizer", tok_dir);
        goto fail;
    }
    if (path_exists(path)) {
        if (!(e->tok = tokenizer_load(path, err)) || !(e->chat = chat_open(tok_dir, err))) goto fail;
        /* vLLM's rule too: a prompt holding such an id is refused, not the start
         * (most prompts may never use them); said once, here, so a tokenizer of
         * another model is not found one refused request at a time. */
        if (tokenizer_vocab_size(e->tok) > e->cfg.vocab_size)
            fprintf(stderr, "redlm: warning: %s has token ids up to %d but config.json's "
                    "vocab_size is %d: prompts that tokenize to ids %d and above are refused "
                    "(is tokenizer.json from another model?)\n", path,
                    tokenizer_vocab_size(e->tok) - 1, e->cfg.vocab_size, e->cfg.vocab_size);
        fprintf(stderr, "redlm: %s\n", chat_describe(e->chat));
    }

    if ((!o->max_num_seqs || !o->max_num_batched_tokens) &&
        engine_default_batch(&e->cfg, o, stderr, err))
        goto fail;
    rlDtype dtype = RL_BF16;
    if (modelcfg_dtype(&e->cfg, e->opt.dtype, &dtype, err)) goto fail;
    if (!strcmp(o->backend, "cpu") && o->dtype && strcmp(o->dtype, "auto") &&
        strcmp(o->dtype, "fp32"))
        fprintf(stderr, "redlm: --dtype %s: the CPU backend holds weights, activations and the KV "
                "cache in fp32 (the reference path); --dtype sets them on --backend cuda\n",
                o->dtype);
    int n_blocks = e->n_blocks = engine_kv_blocks(e, dtype, err);
    if (n_blocks < 0) goto fail;
    rlSchedConfig sc = {.block_size = o->block_size, .max_num_seqs = o->max_num_seqs,
                        .max_num_batched_tokens = o->max_num_batched_tokens,
                        .max_model_len = o->max_model_len, .prefix_caching = o->prefix_caching,
                        .pipeline_depth = o->pp};
    e->max_rows = sched_config_max_rows(&sc);
    if (engine_ranks_open(e, dtype, err)) goto fail;
    n_blocks = sc.n_blocks = e->n_blocks = ranks_n_blocks(e->ranks);
    e->sched = sched_create(&sc);
    e->depth = o->pp > 1 ? o->pp : ranks_async(e->ranks) ? 2 : 1;
    e->flights = calloc((size_t)e->depth, sizeof(*e->flights));
    int ok = e->sched && e->flights;
    for (int i = 0; ok && i < e->depth; i++) {
        engFlight *f = &e->flights[i];
        f->plan = sched_step_create(e->sched);
        f->specs = calloc((size_t)e->max_rows, sizeof(*f->specs));
        f->results = calloc((size_t)e->max_rows, sizeof(*f->results));
        ok = f->plan && f->specs && f->results;
    }
    if (!ok) {
        rl_error(err, RL_EMEMORY, "out of memory setting up the scheduler for %d KV blocks",
                 n_blocks);
        goto fail;
    }
    if (!strcmp(o->backend, "cuda") && (engine_plan_prefill(e, err) || engine_plan_buckets(e, err)))
        goto fail;
    return e;
fail:
    engine_close(e);
    return NULL;
}

/* ---- requests ---- */

static void sample_free(engSample *s) {
    if (s->detok) detok_free(s->detok);
    free(s->tokens);
    free(s->logprobs);
    free(s->text);
}

static void ereq_free(rlEngine *e, engReq *q) {
    if (q->prev) q->prev->next = q->next;
    else e->head = q->next;
    if (q->next) q->next->prev = q->prev;
    else e->tail = q->prev;
    if (q->h) sched_remove(e->sched, q->h);
    if (q->samples)
        for (int i = 0; i < q->req->n; i++) sample_free(&q->samples[i]);
    free(q->samples);
    free(q->prompt_lp);
    adjust_free(q->adjust);
    free(q->error_message);
    request_free(q->req);
    free(q->req);
    free(q);
}

/* Refuse q at the next step with code and a message. */
static int ereq_refuse(engReq *q, const char *code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int ereq_refuse(engReq *q, const char *code, const char *fmt, ...) {
    char msg[RL_ERROR_LEN];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    q->error_code = code;
    q->error_message = strdup(msg);
    return 0;
}

/* Prompt text or chat -> ids, when the model has a tokenizer. */
static int ereq_tokenize(rlEngine *e, engReq *q, rlError *err) {
    rlRequest *r = q->req;
    if (r->prompt_ids) return 0;
    if (!e->tok)
        return ereq_refuse(q, "invalid_request",
                           "'%s' needs the model's tokenizer.json, which this model directory "
                           "lacks; send prompt_ids instead", r->prompt ? "prompt" : "messages");
    if (!prompt_fill_ids(e->tok, e->chat, r, err)) return 0;
    if (err->code != RL_EINPUT) return -1;
    /* The tokenizer marks bad UTF-8 with its code as a prefix: the code goes
     * in the event's code, the rest in its message. */
    static const char UTF8[] = "invalid_utf8: ";
    int utf8 = !strncmp(err->msg, UTF8, sizeof(UTF8) - 1);
    return ereq_refuse(q, utf8 ? "invalid_utf8" : "invalid_request", "%s",
                       err->msg + (utf8 ? sizeof(UTF8) - 1 : 0));
}


/* Whether name is one of --served-model-name's comma-separated names (vLLM
 * takes several: a request may give any of them). */
static int engine_serves(const char *names, const char *name) {
    size_t n = strlen(name);
    for (const char *p = names;; p++) {
        const char *end = strchr(p, ',');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        if (len == n && !memcmp(p, name, n)) return 1;
        if (!end) return 0;
        p = end;
    }
}
static int ereq_check(rlEngine *e, engReq *q) {
    const rlRequest *r = q->req;
    int V = e->cfg.vocab_size;
    /* Named by the field the producer gave: ids it sent, or text the
     * tokenizer turned into ids (a tokenizer of another model may hold ids
     * past the model's vocabulary; the start said so). */
    int sent_ids = !r->prompt && !r->messages;
    if (r->n_prompt_ids < 1)
        return ereq_refuse(q, "invalid_request", "field '%s' is empty: give at least one token",
                           r->prompt ? "prompt" : r->messages ? "messages" : "prompt_ids");
    for (int i = 0; i < r->n_prompt_ids; i++)
        if (r->prompt_ids[i] >= V)
            return ereq_refuse(q, "invalid_request",
                               sent_ids ? "prompt_ids[%d] = %d is outside the model's vocabulary "
                                          "(0..%d)"
                                        : "the prompt's token %2$d (at %1$d), from the tokenizer, "
                                          "is outside the model's vocabulary (0..%3$d)",
                               i, r->prompt_ids[i], V - 1);
    for (int i = 0; i < r->n_stop_token_ids; i++)
        if (r->stop_token_ids[i] >= V)
            return ereq_refuse(q, "invalid_request",
                               "stop_token_ids[%d] = %d is outside the model's vocabulary "
                               "(0..%d)", i, r->stop_token_ids[i], V - 1);
    if (r->n_stop > 0 && !e->tok)
        return ereq_refuse(q, "invalid_request",
                           "'stop' strings need the model's tokenizer.json to detokenize; use "
                           "stop_token_ids instead");
    if (r->n > e->opt.max_num_seqs)
        return ereq_refuse(q, "invalid_request", "n = %d is over --max-num-seqs %d", r->n,
                           e->opt.max_num_seqs);
    const char *served = e->opt.served_model_name ? e->opt.served_model_name : e->opt.model;
    if (r->model && !(e->opt.served_model_name && engine_serves(served, r->model)) &&
        strcmp(r->model, e->opt.model)) {
        if (!e->opt.served_model_name)
            return ereq_refuse(q, "invalid_request",
                               "model '%.200s' is not served here: this worker serves '%.200s' (its "
                               "--model; --served-model-name gives it other names)", r->model, served);
        return ereq_refuse(q, "invalid_request",
                           "model '%.200s' is not served here: this worker serves '%.200s' "
                           "(--served-model-name; also '%.200s', its --model)", r->model, served,
                           e->opt.model);
    }
    return 0;
}

/* Room for one more undelivered token (and its logprob). */
static int sample_reserve(engSample *s, int logprobs) {
    if (s->n_tokens < s->cap) return 0;
    int cap = s->cap ? s->cap * 2 : 16;
    int32_t *t = realloc(s->tokens, (size_t)cap * sizeof(*t));
    if (t) s->tokens = t;
    rlTokenLogprob *lp = logprobs ? realloc(s->logprobs, (size_t)cap * sizeof(*lp)) : NULL;
    if (lp) s->logprobs = lp;
    if (!t || (logprobs && !lp)) return -1;
    s->cap = cap;
    return 0;
}

static int ereq_start(rlEngine *e, engReq *q, rlError *err) {
    rlRequest *r = q->req;
    engine_default_max_tokens(e, r);
    rlError aerr = {0};
    if (adjust_open(r, e->tok, e->cfg.vocab_size, e->cfg.eos_ids, e->cfg.n_eos, &e->pen_tables,
                    &q->adjust, &aerr)) {
        if (aerr.code != RL_EINPUT) return rl_error(err, aerr.code, "%s", aerr.msg);
        return ereq_refuse(q, "invalid_request", "%s", aerr.msg);
    }
    q->samples = calloc((size_t)r->n, sizeof(*q->samples));
    if (!q->samples) return rl_error(err, RL_EINTERNAL, "out of memory");
    for (int i = 0; i < r->n; i++) {
        engSample *s = &q->samples[i];
        /* logprobs asked: a list from the start, [] when no token comes */
        if (sample_reserve(s, r->logprobs >= 0)) return rl_error(err, RL_EINTERNAL, "out of memory");
        unsigned flags = (r->skip_special_tokens ? RL_DETOK_SKIP_SPECIAL : 0) |
                         (r->include_stop_str_in_output ? RL_DETOK_KEEP_STOP : 0);
        if (e->tok && !(s->detok = detok_create(e->tok, r->stop, r->n_stop, flags, err)))
            return -1;
        if (s->detok) detok_min_tokens(s->detok, r->min_tokens);
    }
    if (r->prompt_logprobs >= 0 &&
        !(q->prompt_lp = calloc((size_t)r->n_prompt_ids, sizeof(rlTokenLogprob))))
        return rl_error(err, RL_EINTERNAL, "out of memory");
    rlSchedParams p = {.prompt = r->prompt_ids, .n_prompt = r->n_prompt_ids, .n = r->n,
                       .max_tokens = r->max_tokens, .priority = r->priority,
                       .deadline_ms = r->deadline_ms, .prompt_logprobs = r->prompt_logprobs >= 0,
                       .user = q};
    /* A refusal names what set the length: the request's max_tokens, its
     * min_tokens raising a default, or a default that found no room. */
    int given = r->given & RL_GIVEN_MAX_TOKENS;
    int by_min = !given && r->min_tokens > 1 && r->max_tokens == r->min_tokens;
    const char *what = by_min ? "min_tokens" : "max_tokens";
    const char *note = given || by_min ? "" : ", the least a request without max_tokens runs";
    const char *lower = (given || by_min) && r->max_tokens > 0 ? " or lower " : "";
    switch (sched_add(e->sched, &p, &q->h)) {
    case RL_SCHED_OK: return 0;
    case RL_SCHED_ENOMEM: return rl_error(err, RL_EINTERNAL, "out of memory queueing a request");
    case RL_SCHED_TOO_LONG:
        return ereq_refuse(q, "prompt_too_long",
                           "prompt (%d tokens) + %s (%d%s) is over --max-model-len %d; "
                           "shorten the prompt%s%s", r->n_prompt_ids, what, r->max_tokens, note,
                           e->opt.max_model_len, lower, *lower ? what : "");
    case RL_SCHED_TOO_BIG:
        return ereq_refuse(q, "prompt_too_long",
                           "prompt (%d tokens) + %s (%d%s) x n (%d) can never fit the KV "
                           "cache (%d blocks of %d tokens); raise --kv-cache-memory%s%s",
                           r->n_prompt_ids, what, r->max_tokens, note, r->n, e->n_blocks,
                           e->opt.block_size, lower, *lower ? what : "");
    default:
        return ereq_refuse(q, "invalid_request", "the request cannot be scheduled");
    }
}

int engine_add(rlEngine *e, rlRequest *req, rlError *err) {
    engReq *q = calloc(1, sizeof(*q));
    if (!q) {
        request_free(req);
        free(req);
        return rl_error(err, RL_EINTERNAL, "out of memory");
    }
    q->req = req;
    engine_apply_defaults(&e->defaults, req);
    q->t_arrival = now_ms();
    uint64_t arrival = e->n_arrivals++;
    q->seed = req->has_seed ? req->seed : rl_mix64(e->opt.seed ^ rl_mix64(arrival));
    q->prev = e->tail;
    if (e->tail) e->tail->next = q;
    else e->head = q;
    e->tail = q;
    if (ereq_tokenize(e, q, err) || (!q->error_code && ereq_check(e, q)) ||
        (!q->error_code && ereq_start(e, q, err))) {
        ereq_free(e, q);
        return -1;
    }
    if (q->error_code && q->h) {
        sched_remove(e->sched, q->h);
        q->h = NULL;
    }
    return 0;
}

int engine_abort(rlEngine *e, const char *id) {
    for (engReq *q = e->head; q; q = q->next)
        if (q->req->id && !strcmp(q->req->id, id) && !q->aborted && !q->error_code) {
            q->aborted = 1;
            return 0;
        }
    return -1;
}

/* ---- outputs ---- */

static int sample_text_append(engSample *s, const char *t, size_t n) {
    if (s->text_len + n + 1 > s->text_cap) {
        size_t cap = s->text_cap ? s->text_cap * 2 : 256;
        while (cap < s->text_len + n + 1) cap *= 2;
        char *p = realloc(s->text, cap);
        if (!p) return -1;
        s->text = p;
        s->text_cap = cap;
    }
    memcpy(s->text + s->text_len, t, n);
    s->text_len += n;
    s->text[s->text_len] = 0;
    return 0;
}

static void emit_error(engReq *q, const char *code, const char *msg, rlOutputFn fn, void *ctx) {
    rlOutput o = {.kind = RL_OUT_ERROR, .req = q->req, .error_code = code, .error_message = msg};
    fn(ctx, &o);
}

/* Deliver what sample i holds (a chunk, or its done event) and clear it. */
static void emit_sample(const rlEngine *e, engReq *q, int i, rlOutputKind kind, rlOutputFn fn,
                        void *ctx) {
    engSample *s = &q->samples[i];
    const rlRequest *r = q->req;
    double now = now_ms();
    rlOutput o = {.kind = kind, .req = r, .index = i, .token_ids = s->tokens,
                  .n_tokens = s->n_tokens, .text = s->text ? s->text : "",
                  .text_len = s->text_len, .logprobs = s->logprobs, .tokenizer = e->tok,
                  .model = e->served_name};
    if (kind == RL_OUT_DONE) {
        o.finish = s->finish;
        o.stop_str = s->stop_string ? r->stop[s->stop_string - 1] : NULL;
        o.stop_by_token = s->stop_by_token;
        o.stop_token = s->stop_token;
        o.prompt_logprobs = q->prompt_lp;
        o.n_prompt = r->n_prompt_ids;
        o.prompt_tokens = r->n_prompt_ids;
        o.completion_tokens = s->n_generated;
        o.cached_tokens = q->h ? q->h->cached_tokens : 0;
        o.queued_ms = q->t_scheduled > 0 ? q->t_scheduled - q->t_arrival : now - q->t_arrival;
        o.first_token_ms = q->t_first > 0 ? q->t_first - q->t_arrival : 0;
        o.total_ms = now - q->t_arrival;
    }
    fn(ctx, &o);
    s->n_tokens = 0;
    s->text_len = 0;
    s->dirty = 0;
}

static int sample_finish(rlEngine *e, engReq *q, int i, rlFinish f, rlOutputFn fn, void *ctx,
                         rlError *err) {
    engSample *s = &q->samples[i];
    s->finish = f;
    if (s->detok) {
        size_t n;
        const char *t = detok_finish(s->detok, &n);
        if (sample_text_append(s, t, n)) return rl_error(err, RL_EINTERNAL, "out of memory");
    }
    emit_sample(e, q, i, RL_OUT_DONE, fn, ctx);
    if (q->h) sched_finish_seq(e->sched, q->h, i);
    q->n_done++;
    return 0;
}

/* 1: an EOS id, 2: one of stop_token_ids (a stop_reason, as vLLM: EOS first), 0: neither. */
static int is_stop_token(const rlEngine *e, const rlRequest *r, int32_t tok) {
    if (!r->ignore_eos)
        for (int i = 0; i < e->cfg.n_eos; i++)
            if (e->cfg.eos_ids[i] == tok) return 1;
    for (int i = 0; i < r->n_stop_token_ids; i++)
        if (r->stop_token_ids[i] == tok) return 2;
    return 0;
}

static void logprob_fill(rlTokenLogprob *lp, int32_t id, float logprob, const rlRowResult *res) {
    lp->id = id;
    lp->logprob = logprob;
    lp->n_top = res->n_top;
    memcpy(lp->top_ids, res->top_ids, sizeof(lp->top_ids));
    memcpy(lp->top_logprobs, res->top_logprobs, sizeof(lp->top_logprobs));
}

/* A sampled token for sample i: append, check every stop condition. */
static int sample_push(rlEngine *e, engReq *q, int i, const rlRowResult *res, rlOutputFn fn,
                       void *ctx, rlError *err) {
    engSample *s = &q->samples[i];
    const rlRequest *r = q->req;
    int32_t tok = res->token;
    if (sample_reserve(s, r->logprobs >= 0)) return rl_error(err, RL_EINTERNAL, "out of memory");
    if (s->logprobs) logprob_fill(&s->logprobs[s->n_tokens], tok, res->token_logprob, res);
    s->tokens[s->n_tokens++] = tok;
    s->n_generated++;
    e->generation_tokens++;
    if (adjust_count(q->adjust, i, tok)) return rl_error(err, RL_EINTERNAL, "out of memory");
    if (q->t_first == 0) q->t_first = now_ms();
    if (sched_append(e->sched, q->h, i, tok)) return rl_error(err, RL_EINTERNAL, "out of memory");
    rlFinish f = RL_FINISH_NONE;
    /* Before min_tokens no id ends a sample, as vLLM's stop check: they are
     * banned then (adjust.c), but a row that bans every token samples the
     * raw row (kernels/README.md), which may give one. */
    int stop = s->n_generated < r->min_tokens ? 0 : is_stop_token(e, r, tok);
    if (stop) {
        f = RL_FINISH_STOP;   /* the stop token's own text is not part of the output */
        s->stop_by_token = stop == 2;
        s->stop_token = tok;
    } else if (s->detok) {
        size_t n;
        if (detok_push(s->detok, tok, &s->stop_string, err)) return -1;
        const char *t = detok_take(s->detok, &n);
        if (sample_text_append(s, t, n)) return rl_error(err, RL_EINTERNAL, "out of memory");
        if (s->stop_string) f = RL_FINISH_STOP;
    }
    if (!f && s->n_generated >= r->max_tokens) f = RL_FINISH_LENGTH;
    if (f) return sample_finish(e, q, i, f, fn, ctx, err);
    s->dirty = 1;
    return 0;
}

/* ---- the step ---- */

static int row_spec(const rlSchedRow *row, rlRowSpec *spec, rlAdjBuf *adj) {
    engReq *q = row->req->user;
    const rlRequest *r = q->req;
    memset(spec, 0, sizeof(*spec));
    spec->token = row->token;
    spec->top_p = 1.0f;
    if (row->kind == RL_ROW_PROMPT) {
        spec->target = row->target;
        spec->n_top = r->prompt_logprobs;
        return 0;
    }
    spec->target = -1;
    spec->n_top = r->logprobs > 0 ? r->logprobs : 0;
    spec->sample = 1;
    spec->temperature = r->temperature;
    spec->top_p = r->top_p;
    spec->min_p = r->min_p;
    spec->top_k = r->top_k;
    spec->seed = q->seed;
    spec->sample_index = (uint32_t)row->seq;
    spec->step = (uint32_t)row->step;
    const rlSchedSeq *seq = &row->req->seqs[row->seq];
    int n_gen = seq->n_tokens - r->n_prompt_ids;
    if (n_gen > row->step) n_gen = row->step;
    if (n_gen < 0) n_gen = 0;
    return adjust_row(q->adjust, row->seq, seq->tokens + r->n_prompt_ids, n_gen, spec, adj);
}

/* Refused and aborted requests are answered before anything is planned; an
 * abort of a request in flight waits for its step's results. */
static int engine_answer_pending(rlEngine *e, rlOutputFn fn, void *ctx, rlError *err) {
    for (engReq *q = e->head, *next; q; q = next) {
        next = q->next;
        if (q->error_code) {
            emit_error(q, q->error_code, q->error_message ? q->error_message : "out of memory",
                       fn, ctx);
            ereq_free(e, q);
        } else if (q->aborted && !(q->h && q->h->in_flight)) {
            for (int i = 0; i < q->req->n; i++)
                if (q->samples[i].finish == RL_FINISH_NONE &&
                    sample_finish(e, q, i, RL_FINISH_ABORT, fn, ctx, err))
                    return -1;
            ereq_free(e, q);
        }
    }
    return 0;
}

/* Plan a step over the requests not in flight and hand it to the ranks
 * without waiting: 1 when a step went out, 0 when there was nothing to run. */
static int engine_submit(rlEngine *e, rlOutputFn fn, void *ctx, rlError *err) {
    engFlight *f = &e->flights[(e->oldest + e->n_flight) % e->depth];
    rlStep *p = f->plan;
    if (sched_step(e->sched, now_wall_ms(), p))
        return rl_error(err, RL_EINTERNAL, "out of memory planning a step");
    for (int i = 0; i < p->n_expired; i++) {
        engReq *q = p->expired[i]->user;
        emit_error(q, "deadline_exceeded", "the request's deadline_ms passed before it started",
                   fn, ctx);
        ereq_free(e, q);
    }
    if (p->n_seqs == 0) return 0;

    double now = now_ms();
    for (int i = 0; i < p->n_seqs; i++) {
        engReq *q = p->seq_req[i]->user;
        if (q->t_scheduled == 0) q->t_scheduled = now;
        /* Prompt tokens computed (recomputation after preemption included). */
        int start = p->positions[p->seq_start[i]];
        int end = p->seq_len[i] < q->req->n_prompt_ids ? p->seq_len[i] : q->req->n_prompt_ids;
        if (end > start) e->prompt_tokens += (uint64_t)(end - start);
    }
    f->adj.n = f->adj.n_fills = f->samples = 0;
    for (int i = 0; i < p->n_rows; i++) {
        if (row_spec(&p->rows[i], &f->specs[i], &f->adj))
            return rl_error(err, RL_EINTERNAL, "out of memory building logit adjustments");
        f->samples += p->rows[i].kind == RL_ROW_SAMPLE;
    }
    rlBatch b = {.n_seqs = p->n_seqs, .n_tokens = p->n_tokens, .tokens = p->tokens,
                 .positions = p->positions, .slots = p->slots, .seq_start = p->seq_start,
                 .seq_len = p->seq_len, .block_tables = p->block_tables,
                 .max_blocks = p->max_blocks, .n_rows = p->n_rows, .rows = f->specs,
                 .n_adjs = f->adj.n, .adjs = f->adj.v, .n_pen_fills = f->adj.n_fills,
                 .pen_fills = f->adj.fills};
    double t0 = now_ms();
    if (ranks_submit(e->ranks, &b, f->results, &f->ticket, err)) return -1;
    e->model_ms += now_ms() - t0;
    sched_in_flight(e->sched, p);
    if (++e->n_flight > e->max_flight) e->max_flight = e->n_flight;
    return 1;
}

/* Wait for the oldest step in flight and apply its results. */
static int engine_land(rlEngine *e, rlOutputFn fn, void *ctx, rlError *err) {
    engFlight *f = &e->flights[e->oldest];
    double t0 = now_ms();
    if (ranks_wait(e->ranks, f->ticket, err)) return -1;
    e->model_ms += now_ms() - t0;
    e->oldest = (e->oldest + 1) % e->depth;
    e->n_flight--;
    const rlStep *p = f->plan;
    sched_landed(e->sched, p);

    for (int i = 0; i < p->n_rows; i++) {
        const rlSchedRow *row = &p->rows[i];
        engReq *q = row->req->user;
        if (row->kind == RL_ROW_PROMPT) {
            logprob_fill(&q->prompt_lp[row->position + 1], row->target,
                         f->results[i].target_logprob, &f->results[i]);
        } else if (q->samples[row->seq].finish == RL_FINISH_NONE &&
                   sample_push(e, q, row->seq, &f->results[i], fn, ctx, err)) {
            return -1;
        }
    }
    /* Scoring only: done once the whole prompt is computed. */
    for (int i = 0; i < p->n_seqs; i++) {
        engReq *q = p->seq_req[i]->user;
        if (q->req->max_tokens > 0 || q->h->seqs[p->seq_index[i]].n_computed < q->req->n_prompt_ids)
            continue;
        for (int k = 0; k < q->req->n; k++)
            if (q->samples[k].finish == RL_FINISH_NONE &&
                sample_finish(e, q, k, RL_FINISH_LENGTH, fn, ctx, err))
                return -1;
    }
    for (int i = 0; i < p->n_rows; i++) {
        const rlSchedRow *row = &p->rows[i];
        engReq *q = row->req->user;
        const engSample *sm = &q->samples[row->seq];
        if (row->kind == RL_ROW_SAMPLE && q->req->stream && sm->dirty &&
            sm->n_tokens >= e->opt.stream_interval)
            emit_sample(e, q, row->seq, RL_OUT_CHUNK, fn, ctx);
    }
    for (engReq *q = e->head, *next; q; q = next) {
        next = q->next;
        if (q->h && q->n_done == q->req->n) ereq_free(e, q);
    }
    return 0;
}

/* Whether another step may go out before the oldest lands.  A pipeline
 * takes one per stage (the scheduler gives each its share of the
 * requests).  Without one, on asynchronous ranks, a second step goes out
 * only while every step in flight samples nothing (prompt chunks: prefill,
 * scoring): their requests have nothing to run until they land, so the
 * next step, over other requests, is planned now and the ranks start it
 * the moment they finish, while this thread applies the last results
 * (scoring's host work was 9 % of a run, PERF.md v37).  A step that samples
 * holds the running decodes; planning past it would split them into two
 * smaller batches, each reading every weight. */
static int engine_may_submit(const rlEngine *e) {
    if (e->n_flight >= e->depth) return 0;
    if (e->opt.pp > 1) return 1;
    for (int i = 0; i < e->n_flight; i++)
        if (e->flights[(e->oldest + i) % e->depth].samples) return 0;
    return 1;
}

int engine_step(rlEngine *e, rlOutputFn fn, void *ctx, rlError *err) {
    if (engine_answer_pending(e, fn, ctx, err)) return -1;
    int rc = 1;
    while (engine_may_submit(e) && (rc = engine_submit(e, fn, ctx, err)) > 0) continue;
    if (rc < 0) return -1;
    return e->n_flight ? engine_land(e, fn, ctx, err) : 0;
}

int engine_has_work(const rlEngine *e) { return e->head != NULL; }

int engine_free_slots(const rlEngine *e) { return sched_free_seqs(e->sched); }

void engine_stats(const rlEngine *e, rlEngineStats *st) {
    rlSchedStats s;
    sched_stats(e->sched, &s);
    st->running = s.running;
    st->waiting = s.waiting;
    st->preempted = (int)s.preemptions;
    st->kv_blocks_used = s.blocks.used;
    st->kv_blocks_free = s.blocks.free;
    st->kv_blocks_cached = s.blocks.cached;
    st->kv_blocks_total = s.blocks.total;
    st->prefix_hit_tokens = s.prefix_hit_tokens;
    st->prefix_query_tokens = s.prefix_query_tokens;
    st->prompt_tokens = e->prompt_tokens;
    st->generation_tokens = e->generation_tokens;
    st->steps_in_flight = e->n_flight;
    st->max_steps_in_flight = e->max_flight;
    st->model_seconds = e->model_ms / 1e3;
}

const char *engine_quantization(const rlEngine *e) { return e->quant; }

void engine_close(rlEngine *e) {
    if (!e) return;
    /* First: closing the ranks finishes the steps in flight, which read
     * their plans. */
    if (e->ranks) ranks_close(e->ranks);
    while (e->head) ereq_free(e, e->head);
    sched_free(e->sched);
    for (int i = 0; e->flights && i < e->depth; i++) {
        sched_step_free(e->flights[i].plan);
        free(e->flights[i].specs);
        free(e->flights[i].results);
        free(e->flights[i].adj.v);
        free(e->flights[i].adj.fills);
    }
    free(e->flights);
    adjust_tables_free(&e->pen_tables);
    if (e->tok) tokenizer_free(e->tok);
    chat_free(e->chat);
    if (e->ckpt) checkpoint_close(e->ckpt);
    quant_dummy_free(&e->qdummy);
    free(e->served_name);
    free(e);
}
