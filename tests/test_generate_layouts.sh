#!/usr/bin/env bash
# test_generate_layouts.sh: `redlm generate --tp N --pp M` on CPU ranks, for
# every dense fixture model (Qwen2 at two shapes, Qwen3, YaRN, Llama 3) and the
# layouts 1x1, 2x1, 3x1, 4x1, 6x1, 1x2, 1x3, 3x2, 2x3 (each quantized fixture of
# models-quant/ at 1x1 and 3x2), every prompt of reference.json in one run, under the foundation's
# tolerances: prompt logprobs within 1e-3, the first generated token's top-5
# logprobs within 1e-3 of the log-softmax of last_logits (by rank, and for
# each id returned), greedy tokens equal to the reference up to its first
# margin under 1e-2; and greedy tokens equal to the 1x1 run up to the first
# margin under 1e-3.  A layout with more stages than the model has layers
# (the two-layer ones) must be refused with exit status 2 and a reason.
set -u
tmp=$(mktemp -d /tmp/redlm-layouts.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

# check_model FOLDER/NAME [LAYOUT...]: the layouts default to all nine above.
check_model() {
    local model=${1#*/} dir=$FIXTURES/$1 ref=$FIXTURES/$1/reference.json
    shift
    local layers layouts=("$@")
    [ ${#layouts[@]} -gt 0 ] || layouts=("1 1" "2 1" "3 1" "4 1" "6 1" "1 2" "1 3" "3 2" "2 3")
    layers=$(jq .num_hidden_layers "$dir/config.json")
    jq -c '.prompts[]
           | {id: .name, prompt_ids: .ids, max_tokens: 24, temperature: 0, ignore_eos: true,
              prompt_logprobs: 0, logprobs: 5}' "$ref" > "$tmp/in.jsonl"
    # ls: the reference's log-softmax of last_logits, top5 its five largest.
    jq -c '.prompts[]
           | (.last_logits | max) as $m
           | (.last_logits | map(. - $m | exp) | add | log + $m) as $lse
           | (.last_logits | map(. - $lse)) as $ls
           | {id: .name, plp: .prompt_logprobs, greedy, margin: .greedy_margin, ls: $ls,
              top5: ($ls | to_entries | sort_by(-.value) | .[:5] | map(.value))}' \
        "$ref" > "$tmp/ref.jsonl"
    for layout in "${layouts[@]}"; do
        set -- $layout
        local tp=$1 pp=$2 out=$tmp/$model-$1x$2.jsonl
        "$REDLM" generate --model "$dir" --threads 2 --kv-cache-memory 32MiB --tp "$tp" --pp "$pp" \
            --input "$tmp/in.jsonl" --output "$out" 2> "$tmp/err"
        local rc=$?
        if [ "$pp" -gt "$layers" ]; then
            [ $rc = 2 ] || fail "$model ${tp}x$pp: exit $rc for more stages than layers, want 2"
            grep -qi "stage\|layer" "$tmp/err" || fail "$model ${tp}x$pp: no reason: $(cat "$tmp/err")"
            echo "ok $model ${tp}x$pp refused: $(head -c 120 "$tmp/err")"
            continue
        fi
        [ $rc = 0 ] || fail "$model ${tp}x$pp: exit $rc: $(tail -3 "$tmp/err")"
        # One line per prompt that misses: worst prompt-logprob error, worst
        # first-token top-5 error, first greedy mismatch against the
        # reference within its reliable steps.
        bad=$(jq -sc --slurpfile ref "$tmp/ref.jsonl" '
            map({key: .id, value: .}) | from_entries as $got
            | $ref[] | . as $r | $got[$r.id] as $g
            | ([range(1; ($r.plp | length) + 1)]
               | map(($g.prompt_logprobs[.].logprob - $r.plp[. - 1]) | fabs) | max // 0) as $worst
            | ($g.logprobs[0].top) as $top
            | (if ($top | length) != 5 then 1e9 else
                 [range(0; 5) | ($top[.][1] - $r.top5[.]) | fabs,
                  ($top[] | (.[1] - $r.ls[.[0]]) | fabs)] | max end) as $top_worst
            | ([range(0; 24)] | map(select($r.margin[.] < 0.01)) | first // 24) as $n
            | ([range(0; $n)] | map(select($g.token_ids[.] != $r.greedy[.])) | first) as $mis
            | select($worst > 0.001 or $top_worst > 0.001 or $mis != null)
            | {id: $r.id, worst: $worst, top5_worst: $top_worst, greedy_mismatch_at: $mis}' "$out")
        [ -z "$bad" ] || fail "$model ${tp}x$pp against the reference: $bad"
        if [ "$tp$pp" != 11 ]; then
            bad=$(jq -sc --slurpfile base "$tmp/$model-1x1.jsonl" --slurpfile ref "$tmp/ref.jsonl" '
                map({key: .id, value: .token_ids}) | from_entries as $got
                | ($base | map({key: .id, value: .token_ids}) | from_entries) as $b
                | $ref[] | . as $r
                | ([range(0; 24)] | map(select($r.margin[.] < 0.001)) | first // 24) as $n
                | select($got[$r.id][:$n] != $b[$r.id][:$n]) | $r.id' "$out")
            [ -z "$bad" ] || fail "$model ${tp}x$pp: greedy tokens differ from 1x1 for $bad"
        fi
        echo "ok $model ${tp}x$pp"
    done
}

for cfg in "$FIXTURES"/models/*/config.json; do
    check_model "models/$(basename "$(dirname "$cfg")")"
done
# Every quantized format, dequantized at load: alone and cut on group boundaries.
for q in qwen2-tiny-gqa3-awq qwen2-tiny-hd128-gptq4 qwen2-tiny-gqa3-gptq8 \
         qwen2-tiny-hd128-fp8block qwen2-tiny-gqa3-fp8ch qwen3-tiny-awq; do
    check_model "models-quant/$q" "1 1" "3 2"
done
