/* fixture_paths.h: where a fixture model and its reference.json live.
 *
 * A model is named by its folder under tests/fixtures ("models/qwen2-tiny-
 * hd128", "models-quant/qwen2-tiny-gqa3-awq"); the tests read the copy
 * `make fixtures` makes in build/fixtures ($FIXTURES), where the files kept
 * compressed there (*.xz) are unpacked.  The table lists the
 * models the forward and layout tests run: the dense ones (Qwen2 at two
 * shapes, Qwen3, Qwen2 with YaRN, Llama 3), the mixtures of experts
 * (Qwen2-MoE with its shared expert, Qwen3-MoE) and every format of
 * models-quant/ (Qwen2's, and AWQ on Qwen3); test_forward also runs the
 * bundled model. */
#ifndef RL_TEST_FIXTURE_PATHS_H
#define RL_TEST_FIXTURE_PATHS_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const fixture_models[] = {
    "models/qwen2-tiny-hd128",          "models/qwen2-tiny-gqa3",
    "models/qwen3-tiny",                "models/qwen2-tiny-yarn",
    "models/llama-tiny",                "models/qwen2-moe-tiny",
    "models/qwen3-moe-tiny",
    "models-quant/qwen2-tiny-gqa3-awq", "models-quant/qwen2-tiny-hd128-gptq4",
    "models-quant/qwen2-tiny-gqa3-gptq8", "models-quant/qwen2-tiny-hd128-fp8block",
    "models-quant/qwen2-tiny-gqa3-fp8ch", "models-quant/qwen3-tiny-awq",
};
#define FIXTURE_N_MODELS (int)(sizeof(fixture_models) / sizeof(fixture_models[0]))

static inline void fixture_model_dir(char *out, size_t n, const char *name) {
    const char *root = getenv("FIXTURES");
    snprintf(out, n, "%s/%s", root ? root : "build/fixtures", name);
}

/* The bundled trained model: tests/fixtures/bundled/, which make unpacks
 * into $BUILD/models/ (the weights and reference are kept as .xz). */
#define FIXTURE_BUNDLED "qwen2-brown-5m"
static inline void fixture_bundled_dir(char *out, size_t n) {
    const char *build = getenv("BUILD");
    snprintf(out, n, "%s/models/" FIXTURE_BUNDLED, build ? build : "build");
}

/* How far a bf16 / fp16 GPU run may drift from a fixture's reference in
 * prompt logprobs: 0.05, but the mixtures of experts route a few (token,
 * layer) choices whose top-k gap is under ~1e-2 (qwen2-moe-tiny: 1089 of
 * 8732 choices, qwen3-moe-tiny: 910 of 7934) and bf16 rounding flips some
 * of them, each flip another MLP for that token.  tests/test_moe_rounding.c
 * measures it on the CPU with bf16 rounding emulated: 0.28 / 0.54 off the
 * reference, 0.021 / 0.027 with the routing held to the exact run's (the
 * dense fixtures' 0.025-0.038); the H200 gave 0.31-0.32 / 0.095-0.76 (which
 * ties flip depends on the order of every sum before them).  The bound is
 * the worst of those plus 0.1 (tests/gpu_model.sh repeats it); the check
 * that the GPU's MoE math is right is test_forward's test_routed, which
 * holds the routing to the fp32 run's and the prompt logprobs to 0.05
 * (the H200: 0.022 / 0.021). */
static inline double fixture_bf16_tolerance(const char *name) {
    if (strstr(name, "qwen2-moe-tiny")) return 0.41;
    if (strstr(name, "qwen3-moe-tiny")) return 0.86;
    return 0.05;
}

static inline void fixture_reference(char *out, size_t n, const char *name) {
    fixture_model_dir(out, n, name);
    snprintf(out + strlen(out), n - strlen(out), "/reference.json");
}

#endif
