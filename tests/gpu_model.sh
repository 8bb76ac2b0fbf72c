#!/usr/bin/env bash
# gpu_model.sh: the whole model on the CUDA backend against Hugging Face's
# reference (tests/test_forward.c's checks with 16-bit tolerances: prompt
# logprobs within 0.05, greedy identical up to the first margin under 0.1,
# batched and chunked runs equal to the prompt run alone), in bf16 and fp16,
# for every fixture model (tests/fixture_paths.h: Qwen2, Qwen3, YaRN,
# Llama 3, and the mixtures of experts within their measured bounds, whose
# routing follows the 16-bit rounding near a tie, and within 0.05 with the
# routing held to the fp32 CPU backend's; and the quantized ones, kept
# quantized: tests/gpu_quant.sh runs those again on both paths with redlm
# generate).
set -eu
source "$(dirname "$0")/skip_without_gpu.sh"
RL_TEST_BACKEND=cuda RL_TEST_DTYPE=bf16 "$BUILD/tests/test_forward"
RL_TEST_BACKEND=cuda RL_TEST_DTYPE=fp16 "$BUILD/tests/test_forward"

# `redlm generate --backend cuda` end to end (engine, scheduler, KV cache
# sized by the memory plan, --dtype): prompt logprobs within 0.05 of the
# reference and greedy tokens equal up to the first margin under 0.1.
# (python3 rather than jq: GPU machines carry python3.)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for cfg in "$FIXTURES"/models/*/config.json; do
    dir=$(dirname "$cfg") model=$(basename "$(dirname "$cfg")")
    ref=$dir/reference.json
    python3 - "$ref" > "$tmp/in.jsonl" <<'PY'
import json, sys
for p in json.load(open(sys.argv[1]))["prompts"]:
    print(json.dumps({"id": p["name"], "prompt_ids": p["ids"], "max_tokens": 24,
                      "temperature": 0, "prompt_logprobs": 0, "ignore_eos": True}))
PY
    # A mixture of experts routes by the 16-bit hidden state: near a tie the
    # other expert wins (measured: fixture_bf16_tolerance, tests/fixture_paths.h).
    case $model in
        qwen2-moe-tiny) tol=0.41 ;;
        qwen3-moe-tiny) tol=0.86 ;;
        *) tol=0.05 ;;
    esac
    # The second run without CUDA graphs (--enforce-eager): the same kernels launched.
    for flags in "--dtype bf16" "--dtype auto --enforce-eager"; do
        # shellcheck disable=SC2086
        "$REDLM" generate --backend cuda $flags --model "$dir" --input "$tmp/in.jsonl" \
            --output "$tmp/out.jsonl" 2> "$tmp/err" || { cat "$tmp/err"; exit 1; }
        python3 - "$ref" "$tmp/out.jsonl" "$model $flags" "$tol" <<'PY'
import json, sys
ref = json.load(open(sys.argv[1]))["prompts"]
got = {r["id"]: r for r in map(json.loads, open(sys.argv[2])) if r.get("event") == "done"}
bad = 0
for p in ref:
    g = got.get(p["name"])
    if g is None:
        print("FAIL:", sys.argv[3], p["name"], "has no result"); bad = 1; continue
    tol = float(sys.argv[4])
    n = next((i for i, m in enumerate(p["greedy_margin"][:24]) if m < max(0.1, tol)), 24)
    d = max([abs(g["prompt_logprobs"][i + 1]["logprob"] - lp)
             for i, lp in enumerate(p["prompt_logprobs"])] or [0])
    if g["token_ids"][:n] != p["greedy"][:n] or d > tol:
        print("FAIL:", sys.argv[3], p["name"], "greedy", g["token_ids"][:n], "want",
              p["greedy"][:n], "prompt logprob diff %.4f" % d); bad = 1
    else:
        print("  %s %s: greedy %d tokens equal, prompt logprobs within %.4f" %
              (sys.argv[3], p["name"], n, d))
sys.exit(bad)
PY
    done
done

# Scoring a 1,000-token prompt: one step, its 999 rows through the head 256
# at a time, against the same prompt in 100-token chunks (each step's rows
# in one slice): the scored tokens' logprobs within 16-bit chunking noise.
dir=$FIXTURES/models/qwen2-tiny-gqa3
python3 -c '
import json, random
r = random.Random(11)
print(json.dumps({"id": "score", "prompt_ids": [r.randrange(2000) for _ in range(1000)],
                  "max_tokens": 0, "prompt_logprobs": 3}))' > "$tmp/score.jsonl"
for b in 2048 100; do
    "$REDLM" generate --backend cuda --model "$dir" --max-num-batched-tokens $b \
        --input "$tmp/score.jsonl" --output "$tmp/score-$b.jsonl" 2> "$tmp/err" ||
        { cat "$tmp/err"; exit 1; }
done
python3 - "$tmp/score-2048.jsonl" "$tmp/score-100.jsonl" <<'PY'
import json, sys
a, b = (json.loads(open(f).readline())["prompt_logprobs"] for f in sys.argv[1:3])
assert len(a) == len(b) == 1000 and a[0] is None, "1,000 prompt logprobs expected"
d = max(abs(x["logprob"] - y["logprob"]) for x, y in zip(a[1:], b[1:]))
same = all(x["id"] == y["id"] for x, y in zip(a[1:], b[1:]))
print("  scoring 1,000 tokens in one step vs 100-token chunks: logprobs within %.4f" % d)
sys.exit(0 if same and d < 0.05 else 1)
PY
