#!/usr/bin/env bash
# test_generate_pipeline.sh: `redlm generate --pp 2` and `--pp 3` on CPU ranks
# keep one step per stage in flight, each over its own requests, and give
# what `--pp 1` (one step at a time) gives, bit for bit: the same tokens,
# text, finish reason and prompt logprobs for every result.  The runs take
# --batch-invariant: without it a pipeline cuts steps into other
# micro-batches, which moves the last bits of the logits and may flip a
# sampled token (test_generate_layouts checks that path within tolerances).
# That the steps overlapped is read from --stats: max_steps_in_flight must
# equal the stages.  Inputs: the greedy prompts of reference.json with
# scoring-only and seeded (n = 3) requests among them; many requests, three
# of them with n = 3, in a KV pool so small that requests are preempted
# while others are in flight; one request alone, which an idle pipeline
# starts at once (one step in flight).
set -euo pipefail
: "${REDLM:?}" "${FIXTURES:?}"
tmp=$(mktemp -d /tmp/redlm-pipeline.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

gen() {   # name, input, options...
    local name=$1 input=$2
    shift 2
    "$REDLM" generate --model "$dir" --threads 2 --input "$input" --output "$tmp/$name.jsonl" \
        --stats --batch-invariant "$@" 2> "$tmp/$name.err" || fail "$model $name: exit status: $(tail -3 "$tmp/$name.err")"
}
stat() { sed -n "s/.*$2=\([0-9]*\).*/\1/p" "$tmp/$1.err"; }
results() { jq -c '[.id, .index, .event, .finish_reason, .token_ids, .text, .prompt_logprobs]' "$tmp/$1.jsonl"; }
same() {   # pp run, base run
    results "$1" | cmp -s - <(results "$2") ||
        fail "$model $1 differs from $2: $(diff <(results "$1") <(results "$2") | head -c 600)"
}

for model in qwen2-tiny-gqa3 qwen2-tiny-hd128; do
    dir=$FIXTURES/models/$model
    layers=$(jq .num_hidden_layers "$dir/config.json")
    jq -c '.prompts[] | select(.ids | length <= 300)
           | {id: .name, prompt_ids: .ids, max_tokens: 16, temperature: 0, ignore_eos: true}' \
        "$dir/reference.json" > "$tmp/mixed.jsonl"
    jq -c '[.prompts[] | select(.ids | length <= 300)][:4][]
           | {id: "score-\(.name)", prompt_ids: .ids, max_tokens: 0, prompt_logprobs: 1}' \
        "$dir/reference.json" >> "$tmp/mixed.jsonl"
    echo '{"id":"s","prompt_ids":[5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21],"max_tokens":24,"temperature":0.9,"top_p":0.95,"top_k":50,"seed":7,"n":3,"ignore_eos":true}' \
        >> "$tmp/mixed.jsonl"
    for i in $(seq 1 24); do
        echo "{\"id\":\"g$i\",\"prompt_ids\":[$i,$((i * 7 % 2000)),$((i * 13 % 2000)),3,4],\"max_tokens\":40,\"temperature\":$((i % 2)),\"top_k\":20,\"seed\":$i,\"ignore_eos\":true}"
    done > "$tmp/many.jsonl"
    for i in 1 2 3; do   # samples of one request: forks, preempted and run side by side
        echo "{\"id\":\"n$i\",\"prompt_ids\":[$((i + 40)),$((i * 11 % 2000)),3,4,5,6],\"max_tokens\":40,\"temperature\":1,\"top_k\":20,\"seed\":$i,\"n\":3,\"ignore_eos\":true}"
    done >> "$tmp/many.jsonl"
    head -1 "$tmp/mixed.jsonl" > "$tmp/lone.jsonl"

    gen mixed-pp1 "$tmp/mixed.jsonl" --kv-cache-memory 32MiB
    gen tiny-pp1 "$tmp/many.jsonl" --kv-cache-memory 600KiB
    gen lone-pp1 "$tmp/lone.jsonl" --kv-cache-memory 32MiB
    [ "$(stat mixed-pp1 max_steps_in_flight)" = 1 ] || fail "$model --pp 1: more than one step in flight"
    for pp in 2 3; do
        [ "$pp" -le "$layers" ] || continue
        gen "mixed-pp$pp" "$tmp/mixed.jsonl" --kv-cache-memory 32MiB --pp "$pp"
        same "mixed-pp$pp" mixed-pp1
        [ "$(stat "mixed-pp$pp" max_steps_in_flight)" = "$pp" ] ||
            fail "$model --pp $pp: at most $(stat "mixed-pp$pp" max_steps_in_flight) steps in flight"

        gen "tiny-pp$pp" "$tmp/many.jsonl" --kv-cache-memory 600KiB --pp "$pp"
        same "tiny-pp$pp" tiny-pp1
        [ "$(stat "tiny-pp$pp" preemptions)" -ge 1 ] || fail "$model --pp $pp: no preemption in the tiny pool"
        [ "$(stat "tiny-pp$pp" max_steps_in_flight)" = "$pp" ] || fail "$model --pp $pp tiny: steps did not overlap"

        gen "lone-pp$pp" "$tmp/lone.jsonl" --kv-cache-memory 32MiB --pp "$pp"
        same "lone-pp$pp" lone-pp1
        [ "$(stat "lone-pp$pp" max_steps_in_flight)" = 1 ] || fail "$model --pp $pp: a lone request in several steps"
        echo "ok $model --pp $pp: $(wc -l < "$tmp/mixed-pp$pp.jsonl") + $(wc -l < "$tmp/tiny-pp$pp.jsonl") results as --pp 1, $pp steps in flight, $(stat "tiny-pp$pp" preemptions) preemptions"
    done
done
