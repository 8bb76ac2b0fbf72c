#!/usr/bin/env bash
# test_generate_score.sh: prompt logprobs at prefill speed.  A 1,000-token
# prompt scored (max_tokens 0, prompt_logprobs 3) runs in one step under the
# default token budget, its 999 rows through the head a slice of 256 at a
# time, and gives the logprobs and alternatives of the same prompt fed in
# 100-token chunks (each step's rows in one slice); a scored request beside
# a generating one changes neither beyond float noise (OpenBLAS's sgemm may
# sum a row in another order when the step holds more rows), and with
# --batch-invariant not at all.
source "$(dirname "$0")/generate_lib.sh"
ids=$(awk 'BEGIN { srand(11); for (i = 0; i < 1000; i++) printf "%s%d", (i ? "," : ""), int(rand() * 2000) }')
echo "{\"id\":\"score\",\"prompt_ids\":[$ids],\"max_tokens\":0,\"prompt_logprobs\":3}" > "$tmp/score.jsonl"
run() {   # name, input, options...
    local name=$1 input=$2; shift 2
    "$REDLM" generate --model "$dir" --threads 2 --input "$input" --output "$tmp/$name.out" \
        --stats "$@" 2> "$tmp/$name.err" || { cat "$tmp/$name.err"; fail "$name: exit status"; }
}
steps() { sed -n 's/.* steps=\([0-9]*\) .*/\1/p' "$tmp/$1.err"; }
run whole "$tmp/score.jsonl"
run chunked "$tmp/score.jsonl" --max-num-batched-tokens 100
[ "$(steps whole)" -le 2 ] || fail "1,000 scored tokens took $(steps whole) steps"
[ "$(steps chunked)" -ge 10 ] || fail "100-token chunks took only $(steps chunked) steps"
[ "$(jq '.prompt_logprobs | length' "$tmp/whole.out")" = 1000 ] || fail "prompt_logprobs length"
[ "$(jq '[.prompt_logprobs[] | select(. != null)] | length' "$tmp/whole.out")" = 999 ] ||
    fail "not every prompt token scored"
# same_scores A B WHAT: the scored request of runs A and B has the same ids
# and alternatives, logprobs within float noise.
same_scores() {
    local r
    for r in "$1" "$2"; do
        jq -r 'select(.id == "score") | .prompt_logprobs[1:][] |
               [.id, .logprob, (.top | map(.[0] | tostring) | join(" "))] | @tsv' \
            "$tmp/$r.out" > "$tmp/$r.tsv"
    done
    paste "$tmp/$1.tsv" "$tmp/$2.tsv" | awk -F'\t' -v what="$3" '
        $1 != $4 || ($2 - $5 > 1e-4 || $5 - $2 > 1e-4) { bad++; if (bad < 4) print "row " NR ": " $0 }
        $3 != $6 { alt++ }
        { d = $2 - $5; if (d < 0) d = -d; if (d > max) max = d }
        END { printf "%s: %d rows, largest logprob difference %.2e, %d alternatives ordered differently\n",
                     what, NR, max, alt
              exit bad > 0 || alt > 5 || NR != 999 }' || fail "$3: the scores differ"
}
same_scores whole chunked "whole prompt against 100-token chunks"
# same_greedy A B: the generating request of runs A and B has the same
# greedy tokens up to the first step whose top-2 margin in A is under 1e-3
# (float noise may flip a closer one).
same_greedy() {
    local n
    n=$(jq -n --slurpfile a "$tmp/$1.out" --slurpfile b "$tmp/$2.out" '
        ($a[] | select(.id == "gen")) as $x | ($b[] | select(.id == "gen")) as $y
        | ([range(0; $x.logprobs | length) | select($x.logprobs[.].top[0][1] - $x.logprobs[.].top[1][1] < 1e-3)]
           | first // ($x.token_ids | length)) as $n
        | if $x.token_ids[:$n] == $y.token_ids[:$n] then $n else -1 end') || fail "$1 or $2: no generation"
    [ "$n" -ge 0 ] || fail "generation changes beside a scored prompt: $(jq -c 'select(.id == "gen") | .token_ids' "$tmp/$1.out" "$tmp/$2.out")"
    echo "generation alone against beside a scored prompt: the first $n greedy tokens equal"
}
# Beside a generating request: the same scores, and the generation unchanged.
echo '{"id":"gen","prompt":"Hello there","max_tokens":16,"temperature":0,"logprobs":2}' > "$tmp/gen.jsonl"
cat "$tmp/score.jsonl" "$tmp/gen.jsonl" > "$tmp/both.jsonl"
run gen "$tmp/gen.jsonl"
run both "$tmp/both.jsonl"
same_scores whole both "alone against beside a generating request"
same_greedy gen both
# --batch-invariant: bit-identical alone and beside it, and the same scores.
run whole_inv "$tmp/score.jsonl" --batch-invariant
run gen_inv "$tmp/gen.jsonl" --batch-invariant
run both_inv "$tmp/both.jsonl" --batch-invariant
[ "$(jq -c 'select(.id == "score") | .prompt_logprobs' "$tmp/both_inv.out")" = \
  "$(jq -c .prompt_logprobs "$tmp/whole_inv.out")" ] ||
    fail "--batch-invariant: scores change beside a generating request"
[ "$(jq -c 'select(.id == "gen") | del(.timing)' "$tmp/both_inv.out")" = \
  "$(jq -c 'del(.timing)' "$tmp/gen_inv.out")" ] ||
    fail "--batch-invariant: generation changes beside a scored prompt"
same_scores whole whole_inv "default against --batch-invariant"
echo "a 1,000-token prompt scored in $(steps whole) step(s) (chunked: $(steps chunked)), the same logprobs"
