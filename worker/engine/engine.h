/* engine.h: the loop that turns requests into outputs.
 *
 * One engine owns a model (all its ranks), the scheduler, the tokenizer and
 * detokenizers.  Callers add requests and call engine_step() until no work is
 * left; every step delivers outputs through the callback: new tokens and text
 * of streamed requests once --stream-interval of them are ready (the done
 * output carries the rest), then one final output per sample (done or error).
 * The API is single-threaded: the Redis worker runs it on its own thread and
 * hands requests and outputs across with queues. */
#ifndef RL_ENGINE_H
#define RL_ENGINE_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/batch.h"
#include "kernels/error.h"
#include "worker/request/request.h"

typedef struct rlEngineOptions {
    const char *model;          /* model directory, or a config.json with load_format dummy */
    const char *tokenizer;      /* directory of tokenizer.json and the chat template (NULL: model) */
    const char *backend;        /* "cpu" (default) or "cuda" */
    const char *load_format;    /* "auto" (default) or "dummy" */
    const char *quantization;   /* "awq", "gptq", "fp8" for dummy weights, or NULL: the config's */
    const char *dtype;          /* "auto" (from config), "bf16", "fp16", "fp32" */
    int threads;                /* CPU threads, 0 = all cores */
    int block_size;             /* KV block size in tokens, default 16 */
    size_t kv_cache_memory;     /* CPU: bytes of KV cache, 0 = default */
    double gpu_memory_utilization; /* CUDA: default 0.90 */
    int max_num_seqs;           /* 0 (default): chosen at open from the GPUs, as vLLM
                                 * does (engine_default_batch); the CPU's 256 */
    int max_num_batched_tokens; /* 0 (default): chosen at open from the GPU and model,
                                 * as vLLM does (engine_default_batch) */
    int offline;                /* redlm generate: vLLM's offline (LLM class) defaults */
    int batch_invariant;        /* --batch-invariant: a token's numbers independent of the
                                 * batch and of the prompt's chunking (CPU; CUDA up to --tp 2) */
    int enforce_eager;          /* --enforce-eager: CUDA decode steps without graphs */
    int max_model_len;          /* default: max_position_embeddings */
    int prefix_caching;         /* default 1 */
    int tp, pp;                 /* default 1, 1 */
    const int *pp_partition;    /* layers per stage, or NULL */
    int n_pp_partition;         /* its entries (layout_check wants pp of them) */
    const int *devices;         /* CUDA device ordinals, or NULL for 0..tp*pp-1 */
    int n_devices;
    double nccl_timeout_s;      /* CUDA ranks: a hung collective ends the process; 0 = default */
    int collectives;            /* 1: rank threads and communicators even at 1x1 (--collectives) */
    uint64_t seed;              /* dummy weights and unseeded requests */
    const char *served_model_name; /* what a request's `model` must name (NULL: model) */
    int stream_interval;        /* a streamed sample's chunk waits for this many tokens, default 1 */
    const char *generation_config; /* "auto" (default): the model's generation_config.json
                                    * sampling defaults fill what a request leaves out;
                                    * "vllm": none, the protocol's defaults */
} rlEngineOptions;

void engine_options_init(rlEngineOptions *o);

typedef enum rlFinish { RL_FINISH_NONE = 0, RL_FINISH_STOP, RL_FINISH_LENGTH, RL_FINISH_ABORT } rlFinish;

typedef enum rlOutputKind { RL_OUT_CHUNK, RL_OUT_DONE, RL_OUT_ERROR } rlOutputKind;

typedef struct rlTokenLogprob {
    int32_t id;
    float logprob;
    int32_t n_top;
    int32_t top_ids[RL_MAX_TOP];
    float top_logprobs[RL_MAX_TOP];
} rlTokenLogprob;

struct rlTokenizer;

typedef struct rlOutput {
    rlOutputKind kind;
    const rlRequest *req;           /* the request (id, encoding choices, user handle) */
    int index;                      /* sample 0..n-1 */
    const int32_t *token_ids;       /* chunk: stream_interval or more tokens since the last
                                     * output; done: the rest */
    int n_tokens;
    const char *text;               /* the matching text, complete UTF-8 */
    size_t text_len;
    const rlTokenLogprob *logprobs; /* n_tokens entries when logprobs were asked, else NULL */
    const struct rlTokenizer *tokenizer; /* spells the logprobs' ids (token_text) */
    /* done only */
    const char *model;              /* the served model's name (done's `model`), or NULL */
    rlFinish finish;
    const char *stop_str;           /* stop_reason: the stop string that ended it, */
    int stop_by_token;              /* or (when set) the stop token id; else null */
    int32_t stop_token;
    const rlTokenLogprob *prompt_logprobs; /* n_prompt entries (entry 0 unused) or NULL */
    int n_prompt;
    int prompt_tokens, completion_tokens, cached_tokens;
    double queued_ms, first_token_ms, total_ms;
    /* error only */
    const char *error_code;         /* worker/redis/PROTOCOL.md's codes */
    const char *error_message;
} rlOutput;

typedef void (*rlOutputFn)(void *ctx, const rlOutput *out);

typedef struct rlEngineStats {
    int running, waiting, preempted;
    int kv_blocks_used, kv_blocks_free, kv_blocks_cached, kv_blocks_total;
    uint64_t prefix_hit_tokens, prefix_query_tokens;
    uint64_t prompt_tokens, generation_tokens;
    int steps_in_flight;        /* handed to the ranks, results not applied yet */
    int max_steps_in_flight;    /* the most at once so far (up to --pp) */
    double model_seconds;       /* spent in the ranks (handing steps over, waiting for
                                 * them); the rest of a run is the host's own work */
} rlEngineStats;

typedef struct rlEngine rlEngine;

rlEngine *engine_open(const rlEngineOptions *opt, rlError *err);
/* Takes ownership of req (also on failure).  A request that can never run
 * (bad prompt, too long) is answered with an error output at the next step. */
int engine_add(rlEngine *e, rlRequest *req, rlError *err);
/* Abort a waiting or running request by id (finish "abort"); 0 if found.
 * A request in flight is answered once its step's results are back. */
int engine_abort(rlEngine *e, const char *id);
/* Run one step: plan steps and hand them to the model until --pp of them
 * (over disjoint requests) are in flight, then apply the oldest one's
 * results (sample, emit).  With --pp 1 that is one whole step at a time.
 * Returns 0 on success. */
int engine_step(rlEngine *e, rlOutputFn fn, void *ctx, rlError *err);
int engine_has_work(const rlEngine *e);
/* How many more requests could start now (for backpressure). */
int engine_free_slots(const rlEngine *e);
void engine_stats(const rlEngine *e, rlEngineStats *st);
/* The sampling defaults requests get from the model, as a line:
 * "temperature=0.7 top_k=20", or "none" (no file, or --generation-config vllm). */
const char *engine_sampling_defaults(const rlEngine *e);
/* How the model's weights are stored: "none", "awq int4 g128", ... */
const char *engine_quantization(const rlEngine *e);

void engine_close(rlEngine *e);

#endif
