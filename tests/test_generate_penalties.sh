#!/usr/bin/env bash
# test_generate_penalties.sh: the OpenAI / vLLM sampling fields through
# `redlm generate` on a fixture model, greedy, with a logit_bias strong
# enough that one token would repeat forever:
#   - logit_bias alone: that token every step;
#   - frequency_penalty: it repeats until its count outweighs the bias;
#   - repetition_penalty: it never repeats (it is in the output after once);
#   - presence_penalty below the bias's margin: no change;
#   - bad_words: the greedy first word never appears;
#   - min_tokens with that token as a stop id: no stop before min_tokens;
#   - model, logit_bias and penalties refused with the field named.
set -euo pipefail
: "${REDLM:?}" "${FIXTURES:?}"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
dir=$FIXTURES/models/qwen2-tiny-gqa3
base='"prompt": "Hello there", "max_tokens": 8, "temperature": 0'
cat > "$tmp/in.jsonl" <<JSON
{"id": "plain", $base}
{"id": "bias", $base, "logit_bias": {"1540": 6}}
{"id": "freq", $base, "logit_bias": {"1540": 6}, "frequency_penalty": 1}
{"id": "rep", $base, "logit_bias": {"1540": 6}, "repetition_penalty": 3}
{"id": "pres", $base, "logit_bias": {"1540": 6}, "presence_penalty": 1}
{"id": "bad", $base, "bad_words": ["when"]}
{"id": "min", $base, "logit_bias": {"1540": 6}, "stop_token_ids": [1540], "min_tokens": 3}
{"id": "nomin", $base, "logit_bias": {"1540": 6}, "stop_token_ids": [1540]}
{"id": "model", $base, "model": "other-model"}
{"id": "served", $base, "model": "tiny"}
{"id": "vocab", $base, "logit_bias": {"4096": 1}}
{"id": "range", $base, "presence_penalty": 3}
JSON
"$REDLM" generate --model "$dir" --threads 2 --served-model-name tiny --input "$tmp/in.jsonl" \
    --output "$tmp/out.jsonl"
ids() { jq -c --arg id "$1" 'select(.id == $id) | .token_ids' "$tmp/out.jsonl"; }
field() { jq -r --arg id "$1" "select(.id == \$id) | $2" "$tmp/out.jsonl"; }
[ "$(ids bias)" = "[1540,1540,1540,1540,1540,1540,1540,1540]" ] || fail "bias: $(ids bias)"
freq=$(ids freq)
[ "$(jq '[.[] | select(. == 1540)] | length' <<<"$freq")" -ge 2 ] &&
    [ "$(jq '[.[] | select(. == 1540)] | length' <<<"$freq")" -lt 8 ] || fail "frequency: $freq"
rep=$(ids rep)
[ "$(jq '.[0]' <<<"$rep")" = 1540 ] && [ "$(jq '[.[] | select(. == 1540)] | length' <<<"$rep")" = 1 ] ||
    fail "repetition: $rep"
[ "$(ids pres)" = "$(ids bias)" ] || fail "presence: $(ids pres)"
first=$(jq '.[0]' <<<"$(ids plain)")
[ "$(field bad '.text | test("when")')" = false ] || fail "bad_words: $(field bad .text)"
[ "$(jq --argjson f "$first" 'index($f)' <<<"$(ids bad)")" = null ] || fail "bad_words ids: $(ids bad)"
[ "$(field nomin .usage.completion_tokens)" = 1 ] || fail "stop id without min_tokens"
[ "$(field min .usage.completion_tokens)" = 4 ] && [ "$(field min .finish_reason)" = stop ] ||
    fail "min_tokens: $(field min .usage.completion_tokens) tokens"
field model .error.message | grep -q "model 'other-model' is not served here: this worker serves 'tiny'" ||
    fail "model: $(field model .error.message)"
[ "$(field served .event)" = done ] || fail "served name refused"
field vocab .error.message | grep -q "logit_bias names token 4096, outside the model's vocabulary" ||
    fail "vocab: $(field vocab .error.message)"
field range .error.message | grep -q "'presence_penalty' must be a number in \[-2, 2\]" ||
    fail "range: $(field range .error.message)"
echo "penalties, logit_bias, bad_words, min_tokens and model behave as vLLM defines them"
