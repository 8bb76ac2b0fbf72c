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
#     nor with every id a stop id (the sampler then draws from the raw row,
#     and the id it draws must not end the sample early);
#   - model, logit_bias and penalties refused with the field named;
#   - the penalties' counts, which live in the sampler's tables, give the
#     same tokens however the requests are scheduled: all at once, one at a
#     time, preempted over and over in a tiny KV pool (with and without
#     prefix caching), over two pipeline stages with steps in flight and
#     over two tensor-parallel ranks (each sampling with its own tables).
#     These runs take --batch-invariant: by default a schedule's other rows
#     move the logits' last bits (OpenBLAS sums another way for another row
#     count, and differs by CPU), which may flip a near-tied greedy token or
#     a draw, so only the counts could make them differ.  --tp 2 still sums
#     each row-parallel product in two halves, so its last bits differ from
#     one rank's, but with the flag no OpenBLAS runs: that arithmetic is the
#     same on every CPU, and --tp 1 to 4 give these tokens alike.
source "$(dirname "$0")/generate_lib.sh"
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
{"id": "minall", $base, "stop_token_ids": [$(seq -s, 0 2047)], "min_tokens": 3}
{"id": "model", $base, "model": "other-model"}
{"id": "served", $base, "model": "tiny"}
{"id": "alias", $base, "model": "qwen-tiny"}
{"id": "part", $base, "model": "tin"}
{"id": "vocab", $base, "logit_bias": {"4096": 1}}
{"id": "range", $base, "presence_penalty": 3}
JSON
"$REDLM" generate --model "$dir" --threads 2 --served-model-name tiny,qwen-tiny --input "$tmp/in.jsonl" \
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
[ "$(field minall .usage.completion_tokens)" = 3 ] && [ "$(field minall .finish_reason)" = stop ] ||
    fail "min_tokens, every id a stop id: $(field minall .usage.completion_tokens) tokens"
field model .error.message | grep -q "model 'other-model' is not served here: this worker serves 'tiny,qwen-tiny'" ||
    fail "model: $(field model .error.message)"
[ "$(field served .event)" = done ] || fail "served name refused"
[ "$(field alias .event)" = done ] || fail "the second served name refused (vLLM takes any of them)"
[ "$(field part .event)" = error ] || fail "a part of a served name taken"
field vocab .error.message | grep -q "logit_bias names token 4096, outside the model's vocabulary" ||
    fail "vocab: $(field vocab .error.message)"
field range .error.message | grep -q "'presence_penalty' must be a number in \[-2, 2\]" ||
    fail "range: $(field range .error.message)"

# Requests sharing a prompt prefix (cached), greedy and seeded (top_k:
# --tp 2's last bits must not reorder the long tail), with penalties strong
# enough to steer every step.
for i in $(seq 1 16); do
    pen='"repetition_penalty":1.3,"frequency_penalty":0.6,"presence_penalty":0.4'
    [ $((i % 3)) = 0 ] && pen='"frequency_penalty":1.5,"logit_bias":{"7":3}'
    echo "{\"id\":\"p$i\",\"prompt_ids\":[5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,$i,$((i * 7 % 2000)),3],\"max_tokens\":40,\"temperature\":$((i % 2)),\"top_k\":20,\"seed\":$i,\"ignore_eos\":true,$pen}"
done > "$tmp/pen.jsonl"
echo '{"id":"n3","prompt_ids":[5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21],"max_tokens":40,"temperature":0.9,"top_k":50,"seed":7,"n":3,"ignore_eos":true,"repetition_penalty":1.5,"presence_penalty":0.8}' >> "$tmp/pen.jsonl"
pen_run() {   # name, input, options...
    local name=$1 input=$2; shift 2
    "$REDLM" generate --model "$dir" --threads 2 --batch-invariant --input "$input" --output "$tmp/$name.out" \
        --stats "$@" 2> "$tmp/$name.err" || { cat "$tmp/$name.err"; fail "$name: exit status"; }
    jq -c '[.id, .index, .token_ids]' "$tmp/$name.out" > "$tmp/$name.tok"
}
pen_run batch "$tmp/pen.jsonl"
[ "$(jq -s 'map(.token_ids) | unique | length' "$tmp/batch.out")" -ge 17 ] || fail "penalised outputs alike"
grep -v '"id":"n3"' "$tmp/pen.jsonl" > "$tmp/pen1.jsonl"
grep -v '^\["n3",' "$tmp/batch.tok" > "$tmp/batch1.tok"
pen_run oneseq "$tmp/pen1.jsonl" --max-num-seqs 1
cmp -s "$tmp/oneseq.tok" "$tmp/batch1.tok" || fail "penalties: one at a time differs from the batch"
for run in "tiny --kv-cache-memory 600KiB" "tiny-nocache --kv-cache-memory 600KiB --no-prefix-caching" \
           "pp2 --pp 2" "tp2 --tp 2"; do
    set -- $run
    name=$1; shift
    pen_run "$name" "$tmp/pen.jsonl" "$@"
    cmp -s "$tmp/$name.tok" "$tmp/batch.tok" || fail "penalties: $name differs from the batch"
done
preempt=$(sed -n 's/.*preemptions=\([0-9]*\).*/\1/p' "$tmp/tiny.err")
[ "${preempt:-0}" -ge 5 ] || fail "penalties: expected preemptions in the tiny pool, got ${preempt:-none}"
echo "penalised requests: the same tokens at once, one at a time, through $preempt preemptions" \
     "and over 2 pipeline stages or 2 tensor ranks"
echo "penalties, logit_bias, bad_words, min_tokens and model behave as vLLM defines them"
