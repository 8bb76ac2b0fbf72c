#!/usr/bin/env bash
# test_generate_defaults.sh: a model's generation_config.json sampling
# defaults (as vLLM's --generation-config auto), through `redlm generate` on
# a copy of a fixture model whose file holds Qwen-like defaults:
#   - a request without the fields samples with the file's values (done's
#     `sampling` says so) and the start line names them;
#   - a request that sets them keeps its own;
#   - --generation-config vllm applies none: the protocol's defaults;
#   - a bad value in the file is refused naming the file and the key, an
#     EOS id past the vocabulary too (exit 3, at start).
set -euo pipefail
: "${REDLM:?}" "${FIXTURES:?}"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
cp -r "$FIXTURES/models/qwen2-tiny-gqa3" "$tmp/model"
cat > "$tmp/model/generation_config.json" <<'JSON'
{"bos_token_id": 2000, "eos_token_id": [2002], "do_sample": true,
 "temperature": 0.7, "top_p": 0.8, "top_k": 20, "repetition_penalty": 1.05}
JSON
cat > "$tmp/in.jsonl" <<'JSON'
{"id": "bare", "prompt": "Hello there", "max_tokens": 4, "seed": 1}
{"id": "own", "prompt": "Hello there", "max_tokens": 4, "temperature": 0, "top_p": 1, "top_k": -1, "min_p": 0.1, "repetition_penalty": 1}
JSON
run() { "$REDLM" generate --model "$tmp/model" --threads 2 --input "$tmp/in.jsonl" "$@"; }
run --output "$tmp/auto.jsonl" 2> "$tmp/auto.err"
grep -q "sampling defaults for fields a request leaves out (--generation-config auto): temperature=0.7 top_p=0.8 top_k=20 repetition_penalty=1.05" "$tmp/auto.err" ||
    fail "start line: $(grep sampling "$tmp/auto.err")"
sampling() { jq -c --arg id "$2" 'select(.id == $id) | .sampling' "$1"; }
[ "$(sampling "$tmp/auto.jsonl" bare)" = '{"temperature":0.7,"top_p":0.8,"top_k":20,"min_p":0,"repetition_penalty":1.05}' ] ||
    fail "defaults not applied: $(sampling "$tmp/auto.jsonl" bare)"
[ "$(sampling "$tmp/auto.jsonl" own)" = '{"temperature":0,"top_p":1,"top_k":0,"min_p":0.1,"repetition_penalty":1}' ] ||
    fail "own values overridden: $(sampling "$tmp/auto.jsonl" own)"
run --generation-config vllm --output "$tmp/vllm.jsonl" 2> "$tmp/vllm.err"
grep -q "(--generation-config vllm): none" "$tmp/vllm.err" || fail "vllm start line"
[ "$(sampling "$tmp/vllm.jsonl" bare)" = '{"temperature":1,"top_p":1,"top_k":0,"min_p":0,"repetition_penalty":1}' ] ||
    fail "vllm applied defaults: $(sampling "$tmp/vllm.jsonl" bare)"
# the unchanged fixture (no sampling keys) applies none
"$REDLM" generate --model "$FIXTURES/models/qwen2-tiny-gqa3" --threads 2 --input "$tmp/in.jsonl" \
    --output /dev/null 2> "$tmp/plain.err"
grep -q "(--generation-config auto): none" "$tmp/plain.err" || fail "fixture without defaults"
echo '{"temperature": -1}' > "$tmp/model/generation_config.json"
if run --output /dev/null 2> "$tmp/bad.err"; then fail "bad temperature accepted"; fi
grep -q 'generation_config.json: "temperature" must be a number in \[0, 1e+06\]' "$tmp/bad.err" ||
    fail "bad file: $(cat "$tmp/bad.err")"
run --generation-config vllm --output /dev/null 2> /dev/null || fail "vllm must ignore the file"
echo '{"eos_token_id": [2002, 151645]}' > "$tmp/model/generation_config.json"
rc=0; run --output /dev/null 2> "$tmp/eos.err" || rc=$?
[ $rc = 3 ] && grep -q 'generation_config.json: "eos_token_id" 151645 is past the vocabulary (vocab_size 2048' "$tmp/eos.err" ||
    fail "an EOS id past the vocabulary: exit $rc, $(cat "$tmp/eos.err")"
echo "generation_config.json defaults fill the fields a request leaves out, and only those"
