#!/usr/bin/env bash
# test_max_tokens_default.sh: the max_tokens of a request that gives none,
# as vLLM picks it, through `redlm generate` and `redlm submit` + a worker
# (every request ignores EOS, so lengths are exact):
#   - chat (`messages`, and OpenAI Batch chat calls): the rest of the
#     context, --max-model-len minus the prompt;
#   - a prompt: the protocol's 256; an OpenAI completions call: 16;
#   - the model's generation_config.json max_new_tokens, when it has one,
#     for both (named in the start line); a request's own max_tokens wins,
#     above it too; --generation-config vllm ignores it;
#   - a default is cut to what the context leaves, and raised to min_tokens;
#     a prompt that fills the context is still prompt_too_long;
#   - the OpenAI answers name the served model (--served-model-name's first
#     name, else --model) whatever the call's `model` says, or when it says
#     none.
source "$(dirname "$0")/worker_lib.sh"
cp -r "$MODEL" "$T/model"
MODEL=$T/model
CHAT='"messages": [{"role": "user", "content": "Tell me"}], "ignore_eos": true, "temperature": 0'
TEXT='"prompt": "Hello there", "ignore_eos": true, "temperature": 0'
cat > "$T/in.jsonl" <<JSON
{"id": "chat", $CHAT}
{"id": "text", $TEXT}
{"id": "chat3", $CHAT, "max_tokens": 3}
{"id": "text9", $TEXT, "max_tokens": 9}
{"id": "min", $TEXT, "min_tokens": 300}
JSON
gen() { "$REDLM" generate --model "$MODEL" --threads 1 --kv-cache-memory 64MiB "$@"; }
# field FILE ID: "completion_tokens prompt_tokens finish_reason" of a done
field() { jq -r --arg id "$2" 'select(.id == $id) | "\(.usage.completion_tokens) \(.usage.prompt_tokens) \(.finish_reason)"' "$1"; }
# expect_len FILE ID N: the done of ID has N tokens, finish_reason length
expect_len() {
    local got; got=$(field "$1" "$2")
    [ "${got% *}" != "${got}" ] && [ "${got%% *}" = "$3" ] && [ "${got##* }" = length ] ||
        fail "$1: $2: '$got' (completion prompt finish), want $3 tokens"
}

# --- no max_new_tokens in the model: chat to the end of the context, prompts 256
gen --max-model-len 512 --input "$T/in.jsonl" --output "$T/plain.jsonl" 2> "$T/plain.log" ||
    fail "generate: $(tail -3 "$T/plain.log")"
read -r _ p _ <<<"$(field "$T/plain.jsonl" chat)"
expect_len "$T/plain.jsonl" chat $((512 - p))
expect_len "$T/plain.jsonl" text 256
expect_len "$T/plain.jsonl" chat3 3
expect_len "$T/plain.jsonl" text9 9
expect_len "$T/plain.jsonl" min 300
echo "defaults: chat $((512 - p)) tokens (512 - its $p-token prompt), prompt 256, min_tokens 300 raises it"
# a default is cut to the context: 256 does not fit 96
gen --max-model-len 96 --input "$T/in.jsonl" --output "$T/short.jsonl" 2> "$T/short.log" ||
    fail "generate --max-model-len 96: $(tail -3 "$T/short.log")"
read -r _ p _ <<<"$(field "$T/short.jsonl" text)"
expect_len "$T/short.jsonl" text $((96 - p))
read -r _ p _ <<<"$(field "$T/short.jsonl" chat)"
expect_len "$T/short.jsonl" chat $((96 - p))
# a prompt that fills the context leaves no default room: refused as before
ids=$(seq -s, 1 48)
echo "{\"id\": \"full\", \"prompt_ids\": [$ids]}" |
    gen --max-model-len 48 --input - --output "$T/full.jsonl" 2> /dev/null || true
[ "$(jq -r .error.code "$T/full.jsonl")" = prompt_too_long ] || fail "a full prompt: $(cat "$T/full.jsonl")"
# the refusals name what set the length: never "lower max_tokens" to a request that gave none
grep -q 'max_tokens (1, the least a request without max_tokens runs) is over --max-model-len 48; shorten the prompt"' \
    "$T/full.jsonl" || fail "a full prompt's message: $(cat "$T/full.jsonl")"
cat > "$T/min.jsonl" <<JSON
{"id": "long", "prompt_ids": [1, 2], "min_tokens": 100}
{"id": "big", "prompt_ids": [1, 2], "min_tokens": 60, "n": 4}
{"id": "own", "prompt_ids": [1, 2], "max_tokens": 100}
{"id": "score", "prompt_ids": [$(seq -s, 1 65)], "max_tokens": 0, "prompt_logprobs": 0}
JSON
gen --max-model-len 64 --kv-cache-memory 96KiB --input "$T/min.jsonl" --output "$T/min.out" 2> /dev/null || true
msg() { jq -r --arg id "$1" 'select(.id == $id) | .error.message' "$T/min.out"; }
[[ "$(msg long)" == *"+ min_tokens (100) is over --max-model-len 64; shorten the prompt or lower min_tokens" ]] ||
    fail "min_tokens past the context: $(msg long)"
[[ "$(msg big)" == *"+ min_tokens (60) x n (4) can never fit the KV cache"*"raise --kv-cache-memory or lower min_tokens" ]] ||
    fail "min_tokens past the KV cache: $(msg big)"
[[ "$(msg own)" == *"+ max_tokens (100) is over --max-model-len 64; shorten the prompt or lower max_tokens" ]] ||
    fail "max_tokens past the context: $(msg own)"
[[ "$(msg score)" == *"(65 tokens) + max_tokens (0) is over --max-model-len 64; shorten the prompt" ]] ||
    fail "a scoring prompt past the context: $(msg score)"

# --- generation_config.json's max_new_tokens: the default of both, a request's own wins
jq '. + {"max_new_tokens": 5}' "$FIXTURES/models/qwen2-tiny-gqa3/generation_config.json" \
    > "$MODEL/generation_config.json"
gen --max-model-len 512 --input "$T/in.jsonl" --output "$T/gc.jsonl" 2> "$T/gc.log" ||
    fail "generate with max_new_tokens: $(tail -3 "$T/gc.log")"
grep -q "(--generation-config auto): max_tokens=5" "$T/gc.log" ||
    fail "start line: $(grep 'sampling defaults' "$T/gc.log")"
expect_len "$T/gc.jsonl" chat 5
expect_len "$T/gc.jsonl" text 5
expect_len "$T/gc.jsonl" chat3 3
expect_len "$T/gc.jsonl" text9 9
gen --max-model-len 512 --generation-config vllm --input "$T/in.jsonl" --output "$T/vllm.jsonl" 2> /dev/null ||
    fail "generate --generation-config vllm"
expect_len "$T/vllm.jsonl" text 256
echo "max_new_tokens 5: the default of chat and prompt, the requests' 3 and 9 kept; none with --generation-config vllm"
echo '{"max_new_tokens": 0}' > "$MODEL/generation_config.json"
if gen --input "$T/in.jsonl" --output /dev/null 2> "$T/bad.log"; then fail "max_new_tokens 0 accepted"; fi
grep -q 'generation_config.json: "max_new_tokens" must be a number in \[1, ' "$T/bad.log" ||
    fail "bad max_new_tokens: $(cat "$T/bad.log")"
echo '{"max_new_tokens": 2.5}' > "$MODEL/generation_config.json"
if gen --input "$T/in.jsonl" --output /dev/null 2> "$T/bad.log"; then fail "max_new_tokens 2.5 accepted"; fi
grep -q '"max_new_tokens" must be a whole number; fix the file, or start with --generation-config vllm' "$T/bad.log" || fail "bad max_new_tokens: $(cat "$T/bad.log")"
cp "$FIXTURES/models/qwen2-tiny-gqa3/generation_config.json" "$MODEL/"

# --- OpenAI Batch calls through generate and submit + a worker
cat > "$T/batch.jsonl" <<JSON
{"custom_id": "c", "method": "POST", "url": "/v1/chat/completions", "body": {$CHAT}}
{"custom_id": "t", "method": "POST", "url": "/v1/completions", "body": {$TEXT}}
{"custom_id": "a", "method": "POST", "url": "/v1/chat/completions", "body": {$CHAT, "model": "alias", "max_tokens": 2}}
JSON
# answer FILE ID: "completion_tokens prompt_tokens finish_reason model"
answer() {
    jq -r --arg id "$2" 'select(.custom_id == $id) | .response.body
        | "\(.usage.completion_tokens) \(.usage.prompt_tokens) \(.choices[0].finish_reason) \(.model)"' "$1"
}
check_batch() {   # FILE MODEL-NAME
    local c p f m
    read -r c p f m <<<"$(answer "$1" c)"
    [ "$c" = $((96 - p)) ] && [ "$f" = length ] && [ "$m" = "$2" ] ||
        fail "$1: chat call without max_tokens: $c $p $f $m, want $((96 - p)) tokens from $2"
    read -r c p f m <<<"$(answer "$1" t)"
    [ "$c" = 16 ] && [ "$m" = "$2" ] || fail "$1: completions call without max_tokens: $c $f $m"
    read -r c p f m <<<"$(answer "$1" a)"
    [ "$c" = 2 ] && [ "$m" = "$2" ] || fail "$1: a call naming an alias: $c $m, want 2 tokens from $2"
}
gen --max-model-len 96 --served-model-name tiny,alias --input "$T/batch.jsonl" --output "$T/batch-gen.jsonl" \
    2> "$T/batch-gen.log" || fail "generate a batch: $(tail -3 "$T/batch-gen.log")"
check_batch "$T/batch-gen.jsonl" tiny
# without --served-model-name the name is --model as given (and a call may name it)
sed 's/"alias"/"'"${MODEL//\//\\/}"'"/' "$T/batch.jsonl" > "$T/batch-model.jsonl"
gen --max-model-len 96 --input "$T/batch-model.jsonl" --output "$T/batch-model.out" 2> /dev/null ||
    fail "generate a batch without --served-model-name"
check_batch "$T/batch-model.out" "$MODEL"
start_redis
start_worker w --max-model-len 96 --served-model-name tiny,alias --kv-cache-memory 64MiB
"$REDLM" submit --redis "$(URL)" --input "$T/batch.jsonl" --output "$T/batch-sub.jsonl" --timeout 120 \
    2> "$T/submit.log" || fail "submit: $(cat "$T/submit.log")"
check_batch "$T/batch-sub.jsonl" tiny
# and the done events of our own schema name it too
rcli XADD redlm:jobs '*' json "{\"id\": \"own\", \"prompt\": \"Hi\", \"max_tokens\": 1}" > /dev/null
done_model() { rcli XRANGE redlm:reply:own - + | grep -o '"model":"[^"]*"'; }
answered() { done_model > /dev/null; }
wait_until 30 answered || fail "no model in the done event"
[ "$(done_model)" = '"model":"tiny"' ] || fail "done event: $(done_model)"
echo "batch: a chat call without max_tokens runs to the end of the context, completions 16, answers name the served model"
