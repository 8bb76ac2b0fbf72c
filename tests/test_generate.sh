#!/usr/bin/env bash
# test_generate.sh: `redlm generate` end to end on the fixture models.
#
# Greedy tokens match reference.json (up to the first step whose greedy
# margin is under 1e-2); scoring-only prompt logprobs match the reference;
# the shared-prefix prompts report the cached tokens their full blocks
# allow; under --batch-invariant, greedy and seeded tokens are identical
# with prefix caching off, one sequence at a time, tiny prefill chunks, and
# a KV pool so small that preemption happens many times, and seeded
# sampling does not depend on the batch (by default a schedule's other rows
# and chunks move the logits' last bits, as OpenBLAS sums another way for
# another row count and differs by CPU, which may flip a near-tied greedy
# token or a draw); text and chat prompts go through the tokenizer; a stop
# string taken from a batch's output cuts the same request, run alone,
# right before it (both under --batch-invariant); invalid lines get one
# error result each, naming its line whether the parser or the engine
# refused it.
set -euo pipefail
: "${REDLM:?}" "${FIXTURES:?}"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

for model in qwen2-tiny-gqa3 qwen2-tiny-hd128; do
    dir=$FIXTURES/models/$model
    ref=$dir/reference.json
    gen() { "$REDLM" generate --model "$dir" --threads 2 --kv-cache-memory 32MiB "$@"; }
    inv() { gen --batch-invariant "$@"; }

    # Greedy: every prompt of the reference in one batch.
    jq -c '.prompts[] | {id: .name, prompt_ids: .ids, max_tokens: 24, temperature: 0,
                         ignore_eos: true}' "$ref" > "$tmp/greedy.jsonl"
    gen --input "$tmp/greedy.jsonl" --output "$tmp/base.jsonl"
    [ "$(wc -l < "$tmp/base.jsonl")" = "$(wc -l < "$tmp/greedy.jsonl")" ] || fail "$model: result count"
    # Per prompt: the number of leading tokens that must match.
    jq -c --slurpfile got "$tmp/base.jsonl" '
        .prompts[] as $p
        | ($got[] | select(.id == $p.name) | .token_ids) as $t
        | ([range(0; 24) | select($p.greedy_margin[.] < 1e-2)] | first // 24) as $n
        | select($t[0:$n] != $p.greedy[0:$n]) | {name: $p.name, n: $n, got: $t[0:$n], want: $p.greedy[0:$n]}
    ' "$ref" > "$tmp/mismatch"
    [ -s "$tmp/mismatch" ] && { cat "$tmp/mismatch"; fail "$model: greedy tokens differ from reference.json"; }

    # Scoring only: prompt logprobs of every prompt (the long one spans many
    # steps of the per-step row budget) within 1e-3 of the reference.
    jq -c '.prompts[] | {id: .name, prompt_ids: .ids, max_tokens: 0, prompt_logprobs: 1}' "$ref" \
        > "$tmp/score.jsonl"
    gen --input "$tmp/score.jsonl" --output "$tmp/score.out"
    jq -c --slurpfile got "$tmp/score.out" '
        .prompts[] as $p
        | ($got[] | select(.id == $p.name) | .prompt_logprobs) as $lp
        | select(($lp | length) != ($p.ids | length) or $lp[0] != null
                 or ([range(1; $p.ids | length)
                      | ($lp[.].logprob - $p.prompt_logprobs[. - 1]) | fabs] | max // 0) > 1e-3)
        | $p.name' "$ref" > "$tmp/score.bad"
    [ -s "$tmp/score.bad" ] && { cat "$tmp/score.bad"; fail "$model: prompt logprobs differ from reference.json"; }

    # The shared-prefix family in order, one at a time: usage.cached_tokens is
    # exactly the full 16-token blocks an earlier prompt holds (the last
    # prompt token is always computed).
    jq -c '.prompts[] | select(.name | startswith("prefix")) | {id: .name, prompt_ids: .ids,
                         max_tokens: 4, temperature: 0, ignore_eos: true}' "$ref" > "$tmp/prefix.jsonl"
    gen --input "$tmp/prefix.jsonl" --output "$tmp/prefix.out" --max-num-seqs 1 --block-size 16
    cached=$(jq -r '"\(.id)=\(.usage.cached_tokens)"' "$tmp/prefix.out" | paste -sd' ')
    [ "$cached" = "prefix-base=0 prefix-half=96 prefix+1=192 prefix+10=192 prefix+40=192" ] \
        || fail "$model: cached tokens $cached"

    tokens() { jq -c '[.id, .index, .token_ids]' "$1"; }
    check_same() {   # name, input, reference tokens, options...: under --batch-invariant
        local name=$1 input=$2 want=$3; shift 3
        inv --input "$input" --output "$tmp/$name.jsonl" --stats "$@" 2> "$tmp/$name.err" \
            || { cat "$tmp/$name.err"; fail "$model $name: exit status"; }
        tokens "$tmp/$name.jsonl" | cmp -s - "$want" || fail "$model $name: tokens differ"
    }
    # The same prompts under other schedules (the 1,500-token one only costs time here).
    grep -v long-1500 "$tmp/greedy.jsonl" > "$tmp/short.jsonl"
    # Schedules do not depend on the model's shape: the second model only
    # repeats the preemption run below.
    if [ "$model" = qwen2-tiny-gqa3 ]; then
        inv --input "$tmp/short.jsonl" --output "$tmp/short.out"
        tokens "$tmp/short.out" > "$tmp/short.tok"
        check_same nocache "$tmp/short.jsonl" "$tmp/short.tok" --no-prefix-caching
        check_same oneseq "$tmp/short.jsonl" "$tmp/short.tok" --max-num-seqs 1
        check_same chunks "$tmp/short.jsonl" "$tmp/short.tok" --max-num-batched-tokens 40 --max-num-seqs 8
        check_same small "$tmp/short.jsonl" "$tmp/short.tok" --kv-cache-memory 1200KiB
    fi

    # Many short prompts with long outputs, greedy and seeded (n = 3), in a
    # pool of a few dozen blocks: running requests keep outgrowing it.  The
    # draws are over the whole vocabulary: under --batch-invariant a KV
    # recomputed after preemption is the decoded one bit for bit, so not even
    # the long tail's near-equal neighbours may swap.
    seeded='{"id":"s","prompt_ids":[5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21],"max_tokens":40,"temperature":0.9,"top_p":0.95,"seed":7,"n":3,"ignore_eos":true}'
    for i in $(seq 1 24); do
        echo "{\"id\":\"g$i\",\"prompt_ids\":[$i,$((i * 7 % 2000)),$((i * 13 % 2000)),3,4],\"max_tokens\":40,\"temperature\":$((i % 2)),\"seed\":$i,\"ignore_eos\":true}"
    done > "$tmp/many.jsonl"
    echo "$seeded" >> "$tmp/many.jsonl"
    inv --input "$tmp/many.jsonl" --output "$tmp/many.out"
    tokens "$tmp/many.out" > "$tmp/many.tok"
    check_same tiny "$tmp/many.jsonl" "$tmp/many.tok" --kv-cache-memory 600KiB
    preempt=$(sed -n 's/.*preemptions=\([0-9]*\).*/\1/p' "$tmp/tiny.err")
    [ "${preempt:-0}" -ge 10 ] || fail "$model: expected many preemptions with a tiny pool, got ${preempt:-none}"
    check_same tiny-nocache "$tmp/many.jsonl" "$tmp/many.tok" --kv-cache-memory 600KiB --no-prefix-caching
    # One sequence per step, greedy and seeded (the n = 3 request needs three
    # at once and is refused under --max-num-seqs 1, so it is left out).
    grep -v '"id":"s"' "$tmp/many.jsonl" > "$tmp/many1.jsonl"
    grep -v '^\["s",' "$tmp/many.tok" > "$tmp/many1.tok"
    check_same many-oneseq "$tmp/many1.jsonl" "$tmp/many1.tok" --max-num-seqs 1

    # Seeded sampling does not depend on the batch; the samples differ.
    echo "$seeded" > "$tmp/seeded.jsonl"
    inv --input "$tmp/seeded.jsonl" --output "$tmp/alone.jsonl"
    diff <(tokens "$tmp/alone.jsonl") <(grep '^\["s",' "$tmp/many.tok") > /dev/null \
        || fail "$model: seeded sampling depends on the batch"
    [ "$(jq -s 'map(.token_ids) | unique | length' "$tmp/alone.jsonl")" = 3 ] \
        || fail "$model: the 3 samples should differ"
done

# Text prompts go through the model's tokenizer: the same tokens as their ids.
dir=$FIXTURES/models/qwen2-tiny-gqa3
gen() { "$REDLM" generate --model "$dir" --threads 2 --kv-cache-memory 32MiB "$@"; }
inv() { gen --batch-invariant "$@"; }
head -3 "$FIXTURES/tokenizer-small/encode.jsonl" | jq -c '{id: "t", prompt: .text, max_tokens: 12, temperature: 0, ignore_eos: true}' > "$tmp/text.jsonl"
head -3 "$FIXTURES/tokenizer-small/encode.jsonl" | jq -c '{id: "t", prompt_ids: .ids, max_tokens: 12, temperature: 0, ignore_eos: true}' > "$tmp/ids.jsonl"
inv --input "$tmp/text.jsonl" --output "$tmp/text.out"
inv --input "$tmp/ids.jsonl" --output "$tmp/ids.out"
cmp -s <(jq -c '[.token_ids, .text, .usage.prompt_tokens]' "$tmp/text.out") \
       <(jq -c '[.token_ids, .text, .usage.prompt_tokens]' "$tmp/ids.out") || fail "text prompt != its ids"
echo '{"id":"chat","messages":[{"role":"user","content":"Hello"}],"max_tokens":4}' | gen > "$tmp/chat.out"
[ "$(jq -r .event "$tmp/chat.out")" = done ] || fail "chat request"

# A stop string from the middle of a greedy output: the text ends right
# before it, finish_reason "stop" (the output came from a batch of three,
# the stopped request runs alone: both under --batch-invariant).
line=$(sed -n 1p "$tmp/text.out")
full=$(jq -r .text <<< "$line")
stop=$(jq -r '.text | explode | .[6:9] | implode' <<< "$line")
want=${full%%"$stop"*}
jq -c --arg s "$stop" '.max_tokens = 12 | .stop = [$s]' <(sed -n 1p "$tmp/text.jsonl") | inv > "$tmp/stop.out"
[ "$(jq -r .finish_reason "$tmp/stop.out")" = stop ] || fail "stop string: finish_reason"
[ "$(jq -r .text "$tmp/stop.out")" = "$want" ] || fail "stop string: text '$(jq -r .text "$tmp/stop.out")' != '$want'"

# Invalid lines: one error each, in input order, while the others still run.
cat > "$tmp/bad.jsonl" <<'JSON'
{"id":"ok1","prompt_ids":[1,2,3],"max_tokens":2,"temperature":0}
not json
{"id":"dup","id":"dup","prompt_ids":[1]}
{"id":"typo","prompt_ids":[1],"temprature":0}
{"id":"vocab","prompt_ids":[1,99999]}
{"id":"long","prompt_ids":[1,2],"max_tokens":5000}
{"id":"two","prompt_ids":[1],"prompt":"x"}
{"id":"ok2","prompt_ids":[4,5],"max_tokens":3,"temperature":0,"n":2}
{"id":"score","prompt_ids":[4,5,6,7],"max_tokens":0,"prompt_logprobs":2}
JSON
printf '{"id":"utf8","prompt":"\xff"}\n' >> "$tmp/bad.jsonl"
echo '{"id":"many","prompt_ids":[1],"n":3}' >> "$tmp/bad.jsonl"
"$REDLM" generate --model "$dir" --input "$tmp/bad.jsonl" --output "$tmp/bad.out" --max-num-seqs 2
got=$(jq -r '[.id // "-", .event, (.error.code // .finish_reason)] | join(" ")' "$tmp/bad.out")
want="ok1 done length
- error invalid_encoding
dup error invalid_request
typo error invalid_request
vocab error invalid_request
long error prompt_too_long
two error invalid_request
ok2 done length
ok2 done length
score done length
utf8 error invalid_utf8
many error invalid_request"
[ "$got" = "$want" ] || { echo "$got"; fail "invalid lines"; }
# every refusal names its line, the parser's (not json, a typo) and the
# engine's (a token outside the vocabulary, a prompt too long, n over
# --max-num-seqs) alike
got=$(jq -r 'select(.event == "error") | .error.message | capture("^line (?<n>[0-9]+): ").n // "none"' "$tmp/bad.out" |
      paste -sd ' ')
[ "$got" = "2 3 4 5 6 7 10 11" ] || fail "error lines: $got; $(jq -c 'select(.event == "error") | .error.message' "$tmp/bad.out")"
[ "$(jq -c 'select(.id == "score") | [.token_ids, (.prompt_logprobs | length), .prompt_logprobs[0], (.prompt_logprobs[1].top | length)]' "$tmp/bad.out")" = '[[],4,null,2]' ] \
    || fail "score-only request"
# engine-side refusals name the field the producer gave
jq -e -s 'map(select(.id == "vocab"))[0].error.message | startswith("line 5: prompt_ids[1] = 99999 is outside")' \
    "$tmp/bad.out" > /dev/null || fail "vocab: $(jq -c 'select(.id == "vocab") | .error' "$tmp/bad.out")"
echo '{"id":"empty","prompt":""}' | "$REDLM" generate --model "$dir" --input - --output - 2> /dev/null |
    jq -e '.error.message | startswith("line 1: field '"'prompt'"' is empty")' > /dev/null || fail "empty prompt not named"
# without --served-model-name the one name is the --model path, said once
echo '{"id":"m","prompt_ids":[1],"model":"gpt-4o"}' | "$REDLM" generate --model "$dir" --input - --output - 2> /dev/null |
    jq -r .error.message | grep -qx "line 1: model 'gpt-4o' is not served here: this worker serves '$dir' (its --model; --served-model-name gives it other names)" ||
    fail "unknown model without --served-model-name"
echo "generate: all checks passed"
