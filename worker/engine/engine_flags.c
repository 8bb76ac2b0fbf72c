/* engine_flags.c: declaring the engine's flags (see engine_flags.h). */
#include "worker/engine/engine_flags.h"

const rlFlagChoice engine_backends[] = {{"cpu", NULL, 0}, {"cuda", NULL, 0}, {NULL, NULL, 0}};
const rlFlagChoice engine_load_formats[] = {{"auto", NULL, 0}, {"dummy", NULL, 0},
                                            {NULL, NULL, 0}};
const rlFlagChoice engine_generation_configs[] = {{"auto", NULL, 0}, {"vllm", NULL, 0},
                                                 {NULL, NULL, 0}};
/* vLLM's names of its Marlin kernels for the same checkpoints are accepted
 * for their format: a vLLM command line runs as it is. */
const rlFlagChoice engine_quantizations[] = {
    {"awq", NULL, 0},        {"gptq", NULL, 0},          {"fp8", NULL, 0},
    {"awq_marlin", "awq", 0}, {"gptq_marlin", "gptq", 0}, {NULL, NULL, 0}};
const rlFlagChoice engine_dtypes[] = {
    {"auto", NULL, 0}, {"bf16", NULL, 0}, {"fp16", NULL, 0}, {"fp32", NULL, 0},
    {"bfloat16", "bf16", 0}, {"float16", "fp16", 0}, {"half", "fp16", 0},
    {"float32", "fp32", 0}, {"float", "fp32", 0}, {NULL, NULL, 0}};

void engine_flags_init(rlEngineFlags *f) {
    engine_options_init(&f->o);
    layout_init(&f->lay);
    f->kv_cache_dtype = "auto";
}

void engine_flags_add_vllm(rlFlags *fs, const char **kv_cache_dtype, int *trust_remote_code) {
    static const rlFlagChoice kv_dtypes[] = {{"auto", NULL, 0}, {NULL, NULL, 0}};
    flags_enum(fs, "--kv-cache-dtype", kv_cache_dtype, kv_dtypes,
               "the KV cache's type: auto, the model's dtype, is the\n"
               "only one in this version (vLLM's fp8 ones are refused)")
        ->refusal = "only auto (the KV cache in the model's dtype) is supported in this version; "
                    "drop the flag or give auto";
    flags_bool(fs, "--trust-remote-code", trust_remote_code,
               "accepted for vLLM command lines, with no effect: redlm\n"
               "runs no Python, so no code from the model directory");
}

void engine_flags_add_eager(rlFlags *fs, int *enforce_eager) {
    flags_bool(fs, "--enforce-eager", enforce_eager,
               "CUDA: run decode steps as launched kernels, not\n"
               "replayed CUDA graphs (slower at small batch; to rule\n"
               "graphs out when looking for a fault, or to time what\n"
               "they save), as vLLM's");
}

void engine_flags_add_limits(rlFlags *fs, int *block_size, double *gpu_memory_utilization,
                             int *max_num_seqs, int *max_num_batched_tokens, int *max_model_len) {
    flags_int(fs, "--block-size", block_size, 1, 1024, "N", "KV block size in tokens (default 16)");
    flags_double(fs, "--gpu-memory-utilization", gpu_memory_utilization, 0, 1, 1, "F",
                 "CUDA: share of each GPU's memory to use (default 0.90)");
    flags_int(fs, "--max-num-seqs", max_num_seqs, 1, 1 << 16, "N",
              "sequences per step (default: 1024 on GPUs of 70 GiB+\n"
              "but the A100, as vLLM; else and on the CPU 256;\n"
              "printed)");
    flags_int(fs, "--max-num-batched-tokens", max_num_batched_tokens, 1, 1 << 24, "N",
              "new tokens per step (default: chosen from the GPU and\n"
              "model as vLLM does, 16384 offline (generate) / 8192\n"
              "serving (worker, and plan) on GPUs of 70 GiB+, and\n"
              "printed; the CPU backend: 2048)");
    flags_int(fs, "--max-model-len", max_model_len, 1, 1 << 24, "N",
              "longest sequence, prompt + generation\n(default: the model's maximum)");
}

/* vLLM's engine options that redlm does not take, each with what a vLLM
 * command line should do instead (a near flag would mislead: -dp is not -tp). */
static const rlFlagForeign engine_vllm_foreign[] = {
    {"--data-parallel-size -dp --data-parallel-size-local",
     "data parallelism in redlm is several instances: `redlm launch --instances N` splits a "
     "host's GPUs among N workers, and workers on other hosts join the same stream"},
    {"--enable-chunked-prefill --no-enable-chunked-prefill --max-num-partial-prefills "
     "--long-prefill-token-threshold",
     "redlm always prefills long prompts in chunks of --max-num-batched-tokens tokens a step; "
     "drop the flag"},
    {"--swap-space --cpu-offload-gb",
     "redlm keeps the weights and the KV cache on the GPUs (a preempted sequence is computed "
     "again); drop the flag, or spread the model over more GPUs (--tp / --pp)"},
    {"--host --port --api-key --root-path --uvicorn-log-level",
     "redlm serves no HTTP API: `redlm worker --redis URL` takes jobs from a Redis stream "
     "(its --metrics-port N serves Prometheus metrics)"},
    {"--revision --code-revision --tokenizer-revision --download-dir --hf-token",
     "redlm reads a local model directory: download that revision first (e.g. "
     "`huggingface-cli download MODEL --revision REV --local-dir DIR`) and give --model DIR"},
    {"--max-logprobs",
     "redlm returns up to 20 logprobs per token (logprobs, top_logprobs, prompt_logprobs), "
     "as OpenAI does; drop the flag"},
    {"--distributed-executor-backend --worker-cls",
     "redlm runs its tensor- and pipeline-parallel ranks itself; drop the flag"},
    {NULL, NULL},
};

void engine_flags_add(rlFlags *fs, rlEngineFlags *f) {
    rlEngineOptions *o = &f->o;
    fs->foreign = engine_vllm_foreign;
    flags_string(fs, "--model", &o->model, "DIR", "Hugging Face model directory")->required = 1;
    flags_string(fs, "--tokenizer", &o->tokenizer, "DIR",
                 "the tokenizer (tokenizer.json) and chat template\n"
                 "(tokenizer_config.json, chat_template.jinja) from DIR\n"
                 "instead of --model's (vLLM's --tokenizer)");
    flags_enum(fs, "--backend", &o->backend, engine_backends, "compute backend (default cpu)");
    flags_enum(fs, "--load-format", &o->load_format, engine_load_formats,
               "dummy: random weights from config.json");
    flags_enum(fs, "--quantization", &o->quantization, engine_quantizations,
               ENGINE_QUANTIZATION_HELP);
    flags_enum(fs, "--dtype", &o->dtype, engine_dtypes,
               "weight type (default auto: the config's);\n"
               "also bfloat16, float16, half, float32");
    flags_int(fs, "--threads", &o->threads, 1, 1 << 16, "N", "CPU threads (default: all cores)");
    flags_size(fs, "--kv-cache-memory", &o->kv_cache_memory, 1,
               "CPU KV cache size, e.g. 1GiB (a bare number is bytes)")
        ->aliases = "--kv-cache-memory-bytes";
    engine_flags_add_limits(fs, &o->block_size, &o->gpu_memory_utilization, &o->max_num_seqs,
                            &o->max_num_batched_tokens, &o->max_model_len);
    rlFlag *pc = flags_bool(fs, "--enable-prefix-caching", &o->prefix_caching,
                            "the prefix cache (default on)");
    pc->aliases = "--prefix-caching";
    pc->negatable = 1;
    flags_u64(fs, "--seed", &o->seed, "N", "seed for dummy weights and unseeded requests");
    flags_string(fs, "--served-model-name", &o->served_model_name, "NAME[,NAME...]",
                 "the name(s) a request's `model` may give (or --model as\ngiven; vLLM's names, "
                 "comma-separated here), in heartbeats\nand `redlm status` (default: --model)");
    flags_enum(fs, "--generation-config", &o->generation_config, engine_generation_configs,
               "auto: the model's generation_config.json sampling\n"
               "defaults fill the fields a request leaves out\n"
               "(as vLLM; default); vllm: none, the protocol's defaults");
    flags_bool(fs, "--batch-invariant", &o->batch_invariant,
               "bit-identical tokens and logprobs whatever else is\n"
               "in the batch and however a prompt is chunked, at a\n"
               "cost in speed (CPU: sgemm off; CUDA: one tiled GEMM,\n"
               "no cuBLAS, no decode attention kernel; TP over 2\n"
               "ranks: all-reduces as all-gathers and ordered sums)");
    engine_flags_add_eager(fs, &o->enforce_eager);
    engine_flags_add_vllm(fs, &f->kv_cache_dtype, &f->trust_remote_code);
    layout_flags_add(fs, &f->lay);
}

void engine_flags_finish(rlEngineFlags *f) {
    rlEngineOptions *o = &f->o;
    const rlLayout *lay = &f->lay;
    o->tp = lay->tp;
    o->pp = lay->pp;
    o->devices = lay->n_devices ? lay->devices : NULL;
    o->n_devices = lay->n_devices;
    o->pp_partition = lay->n_partition ? lay->partition : NULL;
    o->n_pp_partition = lay->n_partition;
    o->nccl_timeout_s = lay->nccl_timeout_s;
    o->collectives = lay->collectives;
}
