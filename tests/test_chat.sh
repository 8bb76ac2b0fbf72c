#!/usr/bin/env bash
# test_chat.sh: chat templates from the command line and through Redis.
#
# `redlm tokenize` renders every line of qwen3-template.jsonl with the
# template beside the Qwen tokenizer and answers transformers' text and
# ids; a worker serving the Qwen3 fixture model with Qwen3's template
# answers `messages` jobs with tools, tool calls and tool results and
# `chat_template_kwargs`, its prompt being exactly the template's rendering
# (the prompt token count and logprobs of `redlm tokenize`'s ids); a job the
# template refuses (raise_exception) is answered invalid_request with the
# template's message; a model without a template says so at start and uses
# the Qwen2.5 fallback.
source "$(dirname "$0")/worker_lib.sh"
: "${FIXTURES:?}"

# 1. redlm tokenize against transformers' renderings
"$REDLM" tokenize --tokenizer "$FIXTURES/tokenizer-qwen/tokenizer.json" \
    --input "$FIXTURES/chat/qwen3-template.jsonl" --output "$T/rendered.jsonl"
[ "$(wc -l < "$T/rendered.jsonl")" = 120 ] || fail "tokenize: $(wc -l < "$T/rendered.jsonl") lines, not 120"
diffs=$(jq -c '{text, ids}' "$FIXTURES/chat/qwen3-template.jsonl" |
        paste -d '\t' - <(jq -c '{text, ids}' "$T/rendered.jsonl") | awk -F '\t' '$1 != $2' | wc -l)
[ "$diffs" = 0 ] || fail "tokenize: $diffs of 120 conversations differ from transformers'"
echo "tokenize: 120 of 120 conversations as transformers renders them"

# 2. The Qwen3 fixture model (Qwen3ForCausalLM) with Qwen3's chat template.
M=$T/model
mkdir -p "$M"
for f in "$FIXTURES"/models/qwen3-tiny/*; do ln -s "$f" "$M/"; done
cp "$FIXTURES/tokenizer-qwen/tokenizer_config.json" "$M/"
tools='[{"type":"function","function":{"name":"get_weather","description":"Weather for a city",
  "parameters":{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}}}]'
msgs='[{"role":"system","content":"Answer briefly."},
  {"role":"user","content":"Weather in Oslo?"},
  {"role":"assistant","content":"","reasoning_content":"Call the tool.",
   "tool_calls":[{"id":"c1","type":"function","function":{"name":"get_weather","arguments":{"city":"Oslo"}}}]},
  {"role":"tool","content":"{\"temp\": -3}","tool_call_id":"c1"},
  {"role":"user","content":"And in Rome? ☀"}]'
job=$(jq -cn --argjson m "$msgs" --argjson t "$tools" \
      '{id:"chat-1", messages:$m, tools:$t, chat_template_kwargs:{enable_thinking:false},
        max_tokens:4, temperature:0, prompt_logprobs:0, stream:false}')
# The prompt the job must run: the template's rendering, tokenized.
jq -cn --argjson m "$msgs" --argjson t "$tools" '{messages:$m, tools:$t, enable_thinking:false}' |
    "$REDLM" tokenize --model "$M" > "$T/expect.json"
want_text=$(jq -r .text "$T/expect.json")
[[ $want_text == *'<tool_call>'*'"arguments": {"city": "Oslo"}'*'<tool_response>'*'<think>'*'</think>'* ]] ||
    fail "tokenize: unexpected rendering: $want_text"
want_n=$(jq '.ids | length' "$T/expect.json")

MODEL=$M
start_redis
start_worker w1
W=$LAST_PID
wait_until 30 grep -q "chat_template of $M/tokenizer_config.json" "$T/w1.log" || fail "no chat template log line"
rcli XADD redlm:jobs '*' json "$job" > /dev/null
# The same conversation as OpenAI's clients send it: content null and the
# arguments a compact JSON string.  As vLLM does, content becomes "" and the
# arguments an object, so the template writes the same tokens (Qwen3's
# fails on a None content and would print the string as it is).
job2=$(echo "$job" | jq -c '.id = "chat-2" | .messages[2].content = null |
                            .messages[2].tool_calls[0].function.arguments = "{\"city\":\"Oslo\"}"')
rcli XADD redlm:jobs '*' json "$job2" > /dev/null
got_done() { stream_json "redlm:reply:$1" | grep -q '"event":"\(done\|error\)"'; }
for id in chat-1 chat-2; do
    wait_until 30 got_done $id || fail "$id: no answer"
    ev=$(stream_json redlm:reply:$id)
    [ "$(echo "$ev" | jq -r .event)" = done ] || fail "$id: $ev"
    [ "$(echo "$ev" | jq .usage.prompt_tokens)" = "$want_n" ] ||
        fail "$id: prompt_tokens $(echo "$ev" | jq .usage.prompt_tokens), the template's rendering has $want_n"
    # prompt_logprobs name every prompt token: the ids are the rendering's.
    got_ids=$(echo "$ev" | jq -c '[.prompt_logprobs[1:][] | .id]')
    [ "$got_ids" = "$(jq -c '.ids[1:]' "$T/expect.json")" ] || fail "$id: prompt ids differ from the rendering's"
done
echo "worker: messages with tools answered on the template's $want_n prompt tokens"
kill -TERM "$W"
wait "$W" 2>/dev/null

# 3. A template that raises: the job's error carries the template's message.
printf '{"chat_template": "{%% if messages[0].role != \\"system\\" %%}{{ raise_exception(\\"a system message must come first\\") }}{%% endif %%}{{ messages[0].content }}"}' \
    > "$M/tokenizer_config.json"
start_worker w2
wait_until 30 grep -q "chat_template of" "$T/w2.log" || fail "w2: no chat template log line"
rcli XADD redlm:jobs '*' json '{"id":"raise-1","messages":[{"role":"user","content":"hi"}],"max_tokens":2}' > /dev/null
wait_until 30 got_done raise-1 || fail "raise-1: no answer"
ev=$(stream_json redlm:reply:raise-1)
[ "$(echo "$ev" | jq -r .error.code)" = invalid_request ] || fail "raise-1: $ev"
[[ $(echo "$ev" | jq -r .error.message) == *"a system message must come first"* ]] || fail "raise-1: $ev"
kill -TERM "$LAST_PID"
wait "$LAST_PID" 2>/dev/null

# 4. A template the interpreter lacks: the worker starts, says so, and
# answers messages jobs with the construct's name (prompt jobs still run).
printf '{"chat_template": "{%% for m in messages %%}{{ m.content | wordcount }}{%% endfor %%}"}' > "$M/tokenizer_config.json"
start_worker w3
wait_until 30 grep -q "filter 'wordcount' is not supported" "$T/w3.log" || fail "w3: no warning about the template"
rcli XADD redlm:jobs '*' json '{"id":"lack-1","messages":[{"role":"user","content":"hi"}],"max_tokens":2}' > /dev/null
rcli XADD redlm:jobs '*' json '{"id":"lack-2","prompt":"hi","max_tokens":2}' > /dev/null
wait_until 30 got_done lack-1 || fail "lack-1: no answer"
wait_until 30 got_done lack-2 || fail "lack-2: no answer"
[[ $(stream_json redlm:reply:lack-1 | jq -r .error.message) == *"filter 'wordcount'"* ]] ||
    fail "lack-1: $(stream_json redlm:reply:lack-1)"
[ "$(stream_json redlm:reply:lack-2 | jq -r 'select(.event == "done") | .finish_reason')" = length ] ||
    fail "lack-2: $(stream_json redlm:reply:lack-2)"
kill -TERM "$LAST_PID"
wait "$LAST_PID" 2>/dev/null

# 5. No template at all: the log says the Qwen2.5 fallback is used.
rm "$M/tokenizer_config.json"
echo '{"id":"fb","messages":[{"role":"user","content":"hi"}],"max_tokens":1,"temperature":0}' |
    "$REDLM" generate --model "$M" --threads 1 --kv-cache-memory 32MiB --input - --output "$T/fb.jsonl" 2> "$T/fb.log"
grep -q "built-in Qwen2.5 ChatML template" "$T/fb.log" || fail "fallback: no log line: $(cat "$T/fb.log")"
want=$(echo '{"messages":[{"role":"user","content":"hi"}]}' | "$REDLM" tokenize --model "$M" | jq '.ids | length')
[ "$(jq .usage.prompt_tokens "$T/fb.jsonl")" = "$want" ] || fail "fallback: $(cat "$T/fb.jsonl")"
echo "test_chat.sh: all passed"
