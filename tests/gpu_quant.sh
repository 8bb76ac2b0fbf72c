#!/usr/bin/env bash
# gpu_quant.sh: quantized checkpoints kept quantized on the CUDA backend
# (kernels/cuda/qlinear.cu over wq.h's kernels), on the path the caller's
# RL_CUDA_GENERIC picks, as every GPU test: the default one (FP8 W8A8
# through cuBLASLt at prefill on sm_89+) or RL_CUDA_GENERIC=1 (every large
# batch dequantizes to 16 bits, W8A16 / W4A16).  scripts/gpu-check runs
# the GPU tests once on each.
#   - test_cuda_qlinear: random int4 / int8 / FP8 layers (groups, act-order,
#     block / channel / tensor scales, static input scale) at 1 to 300 rows
#     against a float64 host reference;
#   - test_forward (fp16, the checkpoints' dtype, and bf16) and test_ranks
#     (1x1 on one GPU) on every models-quant/ fixture: prompt logprobs
#     within 0.05 of reference.json for AWQ and GPTQ in fp16 (0.1 in bf16),
#     FP8 within FP8_TOL (test_forward.c says why) with the measured error
#     printed; greedy tokens up to the first low-margin step;
#   - `redlm generate` end to end on each (--dtype auto: fp16), the same bounds;
#   - --load-format dummy --quantization awq|gptq|fp8 at the Qwen2.5-7B
#     shape: the bytes the quantized layers hold on the device equal what
#     the memory plan counts (rl_quant_linear_bytes).
set -eu
source "$(dirname "$0")/skip_without_gpu.sh"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo "## RL_CUDA_GENERIC=${RL_CUDA_GENERIC:-0}"
RL_REQUIRE_GPU=1 "$BUILD/tests/test_cuda_qlinear"
RL_TEST_BACKEND=cuda RL_TEST_DTYPE=fp16 RL_TEST_ONLY=quant "$BUILD/tests/test_forward"
RL_TEST_BACKEND=cuda RL_TEST_DTYPE=bf16 RL_TEST_ONLY=quant "$BUILD/tests/test_forward"
RL_TEST_BACKEND=cuda RL_TEST_DTYPE=fp16 RL_TEST_ONLY=quant "$BUILD/tests/test_ranks"
for cfg in "$FIXTURES"/models-quant/*/config.json; do
    dir=$(dirname "$cfg") model=$(basename "$(dirname "$cfg")")
    python3 - "$dir/reference.json" > "$tmp/in.jsonl" <<'PY'
import json, sys
for p in json.load(open(sys.argv[1]))["prompts"]:
    print(json.dumps({"id": p["name"], "prompt_ids": p["ids"], "max_tokens": 24,
                      "temperature": 0, "prompt_logprobs": 0, "ignore_eos": True}))
PY
    "$REDLM" generate --backend cuda --model "$dir" --input "$tmp/in.jsonl" \
        --output "$tmp/out.jsonl" 2> "$tmp/err" || { cat "$tmp/err"; exit 1; }
    grep -h "FP8 W8A8" "$tmp/err" || true
    python3 - "$dir/reference.json" "$tmp/out.jsonl" "$model" <<'PY'
import json, sys
ref = json.load(open(sys.argv[1]))["prompts"]
got = {r["id"]: r for r in map(json.loads, open(sys.argv[2])) if r.get("event") == "done"}
tol = 1.0 if "fp8" in sys.argv[3] else 0.05   # FP8: W8A8 at prefill, test_forward.c's FP8_TOL
bad, worst = 0, 0.0
for p in ref:
    g = got.get(p["name"])
    if g is None:
        print("FAIL:", sys.argv[3], p["name"], "has no result"); bad = 1; continue
    n = next((i for i, m in enumerate(p["greedy_margin"][:24]) if m < max(0.1, tol)), 24)
    d = max([abs(g["prompt_logprobs"][i + 1]["logprob"] - lp)
             for i, lp in enumerate(p["prompt_logprobs"])] or [0])
    worst = max(worst, d)
    if g["token_ids"][:n] != p["greedy"][:n] or d > tol:
        print("FAIL:", sys.argv[3], p["name"], "greedy", g["token_ids"][:n], "want",
              p["greedy"][:n], "prompt logprob diff %.4f (bound %g)" % (d, tol)); bad = 1
print("  %s: %d prompts, prompt logprobs within %.4f (bound %g)" % (sys.argv[3], len(ref), worst, tol))
sys.exit(bad)
PY
done

# The memory plan's bytes for quantized layers against what the GPU holds.
for q in awq gptq fp8; do
    "$REDLM" bench --backend cuda --load-format dummy --model "$FIXTURES/configs/qwen2.5-7b.json" \
        --quantization $q --batch 1 --prompt-len 16 --gen 4 --json > "$tmp/b.json" 2> "$tmp/err" ||
        { cat "$tmp/err"; exit 1; }
    python3 - "$tmp/b.json" $q <<'PY'
import json, sys
b = json.load(open(sys.argv[1]))
held, plan = b["quant_bytes_held"], b["quant_bytes_planned"]
print("  dummy 7B %s (%s): quantized layers hold %d bytes, the plan counts %d (%+.3f %%)" %
      (sys.argv[2], b["quantization"], held, plan, 100.0 * (held - plan) / plan))
sys.exit(0 if held == plan else 1)
PY
done
