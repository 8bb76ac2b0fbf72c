#!/usr/bin/env bash
# test_generate_invariant.sh: --batch-invariant (CPU backend).  The same 64
# requests (greedy and seeded, logprobs, prompt logprobs, shared prefixes,
# prompts of 5 to 300 tokens, outputs of 6 to 40) run in one batch of 64,
# alone (one sequence a step, prompts in 37-token chunks) and in a drifting
# batch (7 sequences at most, 100 tokens a step, requests ending at every
# step) must give bit-identical tokens, logprobs and prompt logprobs.
# Without the flag the runs differ in the last bits (counted, not asserted);
# the flag's cost on the batch run is printed.
source "$(dirname "$0")/generate_lib.sh"
awk 'BEGIN { srand(23); for (i = 0; i < 64; i++) {
    n = 5 + int(rand() * 296); printf "{\"id\":\"r%d\",\"prompt_ids\":[", i
    for (j = 0; j < n; j++) printf "%s%d", (j ? "," : ""), (j < 40 && i % 4 == 0) ? j + 7 : int(rand() * 2000)
    printf "],\"max_tokens\":%d,\"temperature\":%s,\"seed\":%d,\"logprobs\":2%s,\"ignore_eos\":true}\n",
        6 + (i * 7) % 35, (i % 3 ? "0.8" : "0"), i, (i % 5 == 0 ? ",\"prompt_logprobs\":1" : "") } }' \
    > "$tmp/in.jsonl"
run() {   # name, options...
    local name=$1; shift
    local t0 t1
    t0=$(date +%s.%N)
    "$REDLM" generate --model "$dir" --threads 2 --input "$tmp/in.jsonl" --output "$tmp/$name.out" \
        --stats "$@" 2> "$tmp/$name.err" || { cat "$tmp/$name.err"; fail "$name: exit status"; }
    t1=$(date +%s.%N)
    jq -c 'del(.timing)' "$tmp/$name.out" > "$tmp/$name.res"
    echo "$t0 $t1" | awk '{ printf "%.2f", $2 - $1 }' > "$tmp/$name.secs"
}
run batch --batch-invariant
run alone --batch-invariant --max-num-seqs 1 --max-num-batched-tokens 37
run drift --batch-invariant --max-num-seqs 7 --max-num-batched-tokens 100
steps() { sed -n 's/.* steps=\([0-9]*\) .*/\1/p' "$tmp/$1.err"; }
[ "$(wc -l < "$tmp/batch.res")" = 64 ] || fail "64 results expected"
for name in alone drift; do
    cmp -s "$tmp/batch.res" "$tmp/$name.res" ||
        fail "--batch-invariant: $name differs from the batch ($(diff "$tmp/batch.res" "$tmp/$name.res" | grep -c '^<') requests)"
done
run plain
run plain-alone --max-num-seqs 1 --max-num-batched-tokens 37
differ=$(paste -d'\n' "$tmp/plain.res" "$tmp/plain-alone.res" | paste - - | awk -F'\t' '$1 != $2' | wc -l)
echo "--batch-invariant: batch ($(steps batch) steps), alone ($(steps alone) steps) and drifting" \
     "($(steps drift) steps) bit-identical over 64 requests; without it $differ of 64 differ" \
     "between the batch and alone"
echo "cost: the batch of 64 in $(cat "$tmp/batch.secs") s with --batch-invariant," \
     "$(cat "$tmp/plain.secs") s without"
