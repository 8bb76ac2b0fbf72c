#!/usr/bin/env bash
# test_openai_batch.sh: an OpenAI Batch file (tests/fixtures/openai/
# batch.jsonl: 200 calls, chat and completions, some with logprobs or n = 2,
# 20 bad) through `redlm generate` and through `redlm submit` + a worker:
# one output line per input line in input order, each call's answer a
# chat.completion or text_completion with usage and logprobs in OpenAI's
# shape, every bad line answered with response null and error {code,
# message}; both front doors write the same file (but for `created`), bit
# for bit: both run --batch-invariant, since the calls beside a call (other
# through each door) would otherwise move its logits' last bits, and on some
# CPUs flip a sampled or near-tied token.
# Then every answer body is typed with the openai package's TypeScript
# declarations (tsc --noEmit --strict on typed literals, so a wrong or extra
# field fails); without them (make deps installs them with npm) that part
# is reported skipped (exit 77) after the rest has passed.
source "$(dirname "$0")/worker_lib.sh"
IN=$FIXTURES/openai/batch.jsonl
NODE=$PWD/build/node/node_modules
GEN=("$REDLM" generate --model "$MODEL" --threads 1 --batch-invariant --served-model-name tiny)

"${GEN[@]}" --input "$IN" --output "$T/gen.jsonl" 2> "$T/gen.log" || fail "generate failed: $(tail -3 "$T/gen.log")"

check_output() {
    local out=$1
    [ "$(wc -l < "$out")" = 200 ] || fail "$out: $(wc -l < "$out") lines for 200 calls"
    # in input order: each line's custom_id is its call's
    diff <(jq -R -r 'fromjson? // {} | .custom_id // "-"' "$IN") \
        <(jq -r '.custom_id // "-"' "$out") > "$T/diff" || fail "$out: not in input order: $(head -4 "$T/diff")"
    local errors
    errors=$(jq -s 'map(select(.error != null)) | length' "$out")
    [ "$errors" = 20 ] || fail "$out: $errors errors, want the 20 bad lines"
    jq -e -s 'all(.[]; if .error != null
                       then .response == null and (.error.code | type == "string") and (.error.message | length > 0)
                       else .response.status_code == 200 and .error == null and .id == "batch_req_" + .custom_id
                            and (.response.request_id | type == "string") end)' "$out" > /dev/null ||
        fail "$out: an answer or an error is not in the batch output shape"
    # every good call answers in its API's shape, n choices, usage adding up
    jq -R -c 'fromjson? // null' "$IN" | paste -d'\n' - "$out" | jq -s -e '
        [range(0; length; 2) as $i | {in: (.[$i]), out: (.[$i + 1])}]
        | map(select(.out.error == null)) | length == 180 and all(.[];
            .in.body as $b | .out.response.body as $r
            | ($r.object == (if .in.url == "/v1/chat/completions" then "chat.completion" else "text_completion" end))
            and ($r.choices | length) == ($b.n // 1) and $r.model == "tiny"
            and $r.usage.total_tokens == $r.usage.prompt_tokens + $r.usage.completion_tokens
            and all($r.choices[]; (.finish_reason == "stop" or .finish_reason == "length")
                and (if $b.logprobs == null or $b.logprobs == false then .logprobs == null
                     elif $r.object == "chat.completion"
                     then (.logprobs.content | length) > 0
                          and all(.logprobs.content[]; (.top_logprobs | length) <= ($b.top_logprobs // 0)
                                                        and (.bytes | length) >= (.token | length))
                     else (.logprobs.tokens | length) > 0
                          and (.logprobs.tokens | length) == (.logprobs.token_logprobs | length)
                          and (.logprobs.tokens | length) == (.logprobs.text_offset | length)
                          # offsets count characters (jq length), as OpenAI and vLLM do
                          and .logprobs.text_offset
                              == ([0] + [foreach .logprobs.tokens[] as $t (0; . + ($t | length))])[:-1]
                          # the sampled token is always among top_logprobs: up to k + 1 entries
                          and (.logprobs as $l | [range(0; $l.tokens | length) as $j
                               | $l.top_logprobs[$j][$l.tokens[$j]] == $l.token_logprobs[$j]
                                 and ($l.top_logprobs[$j] | length) <= $b.logprobs + 1] | all) end)))' \
        > /dev/null || fail "$out: an answer is not its call's shape"
}
check_output "$T/gen.jsonl"
# the 9th call's two samples are the sampled kind (seeded), and differ
jq -e -s '.[0].response.body.choices | length == 2' "$T/gen.jsonl" > /dev/null || fail "n = 2 not answered"

start_redis
start_worker w --served-model-name tiny --batch-invariant
"$REDLM" submit --redis "$(URL)" --input "$IN" --output "$T/sub.jsonl" --window 32 2> "$T/submit.log" ||
    fail "submit failed: $(cat "$T/submit.log")"
check_output "$T/sub.jsonl"
# the same file but for created
same() { cmp -s <(jq -c 'del(.response.body.created)' "$1") <(jq -c 'del(.response.body.created)' "$2"); }
same "$T/gen.jsonl" "$T/sub.jsonl" || fail "submit's output differs from generate's"
# a rerun with the same output finds every call answered
"$REDLM" submit --redis "$(URL)" --input "$IN" --output "$T/sub.jsonl" 2> "$T/submit2.log" || fail "rerun failed"
grep -q "0 jobs in .* 200 already done" "$T/submit2.log" || fail "rerun: $(cat "$T/submit2.log")"
# --input-format redlm reads the same lines as our requests: each refused
"$REDLM" generate --model "$MODEL" --threads 1 --input-format redlm --input "$IN" --output "$T/ours.jsonl" \
    2> /dev/null || fail "generate --input-format redlm failed"
jq -e -s 'length == 200 and all(.[]; .event == "error")' "$T/ours.jsonl" > /dev/null ||
    fail "--input-format redlm did not read the lines as our requests"
echo "generate and submit: 200 lines each, 180 answers, 20 errors, identical"

# a hand-made file: CRLF endings, a blank line (no call: skipped, the lines
# after it keep their numbers), a last line without a newline, a
# completions max_tokens of null (OpenAI's default, 16 tokens)
call() { printf '{"custom_id":"%s","method":"POST","url":"/v1/completions","body":{"prompt":"hi","temperature":0,%s}}' "$1" "$2"; }
{ call e1 '"max_tokens":null'; printf '\r\n\r\n'; echo 'not json'; call e3 '"max_tokens":2'; } > "$T/edge.jsonl"
"${GEN[@]}" --input "$T/edge.jsonl" --output "$T/edge-gen.jsonl" 2> /dev/null ||
    fail "generate refused the edge file"
"$REDLM" submit --redis "$(URL)" --input "$T/edge.jsonl" --output "$T/edge-sub.jsonl" 2> /dev/null ||
    fail "submit refused the edge file"
for f in edge-gen edge-sub; do
    jq -e -s 'length == 3 and .[0].response.body.usage.completion_tokens == 16
              and (.[1].error.message | startswith("line 3: "))
              and .[2].response.body.usage.completion_tokens == 2' "$T/$f.jsonl" > /dev/null ||
        fail "$f: $(cat "$T/$f.jsonl")"
done
same "$T/edge-gen.jsonl" "$T/edge-sub.jsonl" || fail "the edge file: submit's output differs from generate's"
# custom_ids must be unique (OpenAI refuses such a file whole): both front
# doors refuse it before running anything, naming the lines
{ call d1 '"max_tokens":1'; echo; call d2 '"max_tokens":1'; echo; call d1 '"max_tokens":2'; echo; } > "$T/dup.jsonl"
for cmd in "generate --model $MODEL --threads 1" "submit --redis $(URL)"; do
    rm -f "$T/dup-out.jsonl"
    $REDLM $cmd --input "$T/dup.jsonl" --output "$T/dup-out.jsonl" 2> "$T/dup.log" &&
        fail "$cmd ran a file with a repeated custom_id"
    grep -q "line 3 has the custom_id 'd1' of line 1" "$T/dup.log" || fail "$cmd: $(cat "$T/dup.log")"
    [ ! -s "$T/dup-out.jsonl" ] || fail "$cmd wrote answers for a refused file"
done
# from standard input (no check up front) a repeat is answered in its line,
# whether or not the first call still runs
"$REDLM" submit --redis "$(URL)" --input - --output "$T/dup-stdin.jsonl" --window 2 < "$T/dup.jsonl" 2> /dev/null ||
    fail "submit from stdin failed"
jq -e -s 'length == 3 and .[0].error == null and .[1].error == null
          and (.[2].error.message | startswith("line 3 has the custom_id of line 1"))' "$T/dup-stdin.jsonl" > /dev/null ||
    fail "a repeated custom_id from stdin: $(jq -c '{custom_id, error}' "$T/dup-stdin.jsonl")"
# a custom_id too long for the job's id is refused in its line (the worker
# cannot answer a job whose id is over 1,024 bytes: submit waited for ever)
{ call "$(head -c 2000 /dev/zero | tr '\0' x)" '"max_tokens":1'; echo; call l2 '"max_tokens":1'; echo; } > "$T/long.jsonl"
timeout 30 "$REDLM" submit --redis "$(URL)" --input "$T/long.jsonl" --output "$T/long-out.jsonl" 2> /dev/null ||
    fail "submit with a 2,000-byte custom_id: exit $?"
jq -e -s 'length == 2 and (.[0].error.message | startswith("line 1: custom_id is 2000 bytes")) and .[1].error == null' \
    "$T/long-out.jsonl" > /dev/null || fail "a 2,000-byte custom_id: $(jq -c .error "$T/long-out.jsonl")"
echo "blank lines, CRLF, a last line without newline, max_tokens null: the same through both; repeated and too long custom_ids refused"

# OpenAI's own types
if [ ! -x "$NODE/.bin/tsc" ] || [ ! -d "$NODE/openai" ]; then
    echo "SKIP: the openai and typescript npm packages are not in build/node (make deps installs them)"
    exit 77
fi
ln -s "$NODE" "$T/node_modules"
typecheck() {   # typecheck FILE.ts OUTPUT.jsonl
    { echo "import type { ChatCompletion } from 'openai/resources/chat/completions';"
      echo "import type { Completion } from 'openai/resources/completions';"
      jq -r 'select(.response != null) | .response.body
             | "export const r\(input_line_number): \(if .object == "chat.completion" then "ChatCompletion"
                                                      else "Completion" end) = \(tojson);"' "$2"; } > "$1"
    "$NODE/.bin/tsc" --noEmit --strict --skipLibCheck --module esnext --moduleResolution bundler --target es2022 "$1" > "$1.log" 2>&1
}
typecheck "$T/answers.ts" "$T/gen.jsonl" || fail "tsc refuses the answers: $(head -20 "$T/answers.ts.log")"
# the check bites: a finish_reason outside OpenAI's and an extra field fail
jq -c 'if .response != null then .response.body.choices[0].finish_reason = "abort" else . end' "$T/gen.jsonl" \
    | head -1 > "$T/wrong1.jsonl"
jq -c 'if .response != null then .response.body.timing = {} else . end' "$T/gen.jsonl" | head -1 > "$T/wrong2.jsonl"
for w in wrong1 wrong2; do
    ! typecheck "$T/$w.ts" "$T/$w.jsonl" || fail "tsc took a wrong body ($w)"
done
echo "tsc --strict: $(jq -s 'map(select(.response != null)) | length' "$T/gen.jsonl") answer bodies typed as ChatCompletion / Completion"
