# invariant_lib.sh: what the --batch-invariant tests share (sourced after
# generate_lib.sh): the 64 requests, a run of them, and the comparison
# (tests/test_generate_invariant.sh on the CPU, tests/gpu_invariant.sh on
# CUDA).  The requests: greedy and seeded, logprobs, prompt logprobs,
# shared prefixes, prompts of 5 to 300 tokens and one of 1,200 (many
# attention key tiles, chunked differently by each run), outputs of 6 to
# 40 tokens, ids below 2,000 (every fixture's vocabulary holds them).

# inv_requests FILE
inv_requests() {
    awk 'BEGIN { srand(23); for (i = 0; i < 64; i++) {
        n = i == 63 ? 1200 : 5 + int(rand() * 296); printf "{\"id\":\"r%d\",\"prompt_ids\":[", i
        for (j = 0; j < n; j++) printf "%s%d", (j ? "," : ""), (j < 40 && i % 4 == 0) ? j + 7 : int(rand() * 2000)
        printf "],\"max_tokens\":%d,\"temperature\":%s,\"seed\":%d,\"logprobs\":2%s,\"ignore_eos\":true}\n",
            6 + (i * 7) % 35, (i % 3 ? "0.8" : "0"), i, (i % 5 == 0 ? ",\"prompt_logprobs\":1" : "") } }' \
        > "$1"
}

# inv_run NAME MODEL OPTIONS...: the requests of $tmp/in.jsonl through
# `redlm generate`; $tmp/NAME.res holds the results without timings,
# $tmp/NAME.secs the wall time, $tmp/NAME.err the log (with --stats).
inv_run() {
    local name=$1 model=$2 t0 t1
    shift 2
    t0=$(date +%s.%N)
    "$REDLM" generate --model "$model" --input "$tmp/in.jsonl" --output "$tmp/$name.out" \
        --stats "$@" 2> "$tmp/$name.err" || { cat "$tmp/$name.err"; fail "$name: exit status"; }
    t1=$(date +%s.%N)
    # python3, not jq: GPU machines carry python3 only (tests/gpu_model.sh).
    python3 -c 'import json, sys
for line in open(sys.argv[1]):
    r = json.loads(line)
    r.pop("timing", None)
    print(json.dumps(r, separators=(",", ":")))' "$tmp/$name.out" > "$tmp/$name.res"
    echo "$t0 $t1" | awk '{ printf "%.2f", $2 - $1 }' > "$tmp/$name.secs"
}

# inv_runs PREFIX MODEL OPTIONS...: the three runs that must agree: one
# batch of 64; alone (one sequence a step, prompts in 37-token chunks); a
# drifting batch (7 sequences at most, 100 tokens a step, requests ending
# at every step).  Fails naming the run and how many requests differ.
inv_runs() {
    local p=$1 model=$2 name
    shift 2
    inv_run "$p-batch" "$model" --batch-invariant "$@"
    inv_run "$p-alone" "$model" --batch-invariant --max-num-seqs 1 --max-num-batched-tokens 37 "$@"
    inv_run "$p-drift" "$model" --batch-invariant --max-num-seqs 7 --max-num-batched-tokens 100 "$@"
    # Every request finished: runs that agree on 64 errors prove nothing.
    [ "$(grep -c '"event":"done"' "$tmp/$p-batch.res")" = 64 ] ||
        fail "$p: 64 finished results expected: $(grep -v '"event":"done"' "$tmp/$p-batch.res" |
                                                  head -c 300)"
    for name in alone drift; do
        cmp -s "$tmp/$p-batch.res" "$tmp/$p-$name.res" ||
            fail "--batch-invariant ($p): $name differs from the batch" \
                 "($(inv_differ "$p-batch" "$p-$name") requests)"
    done
}

# inv_steps NAME: the steps a run took (--stats).
inv_steps() { sed -n 's/.* steps=\([0-9]*\) .*/\1/p' "$tmp/$1.err"; }

# inv_differ A B: how many of the requests differ between two runs.
inv_differ() {
    paste -d'\n' "$tmp/$1.res" "$tmp/$2.res" | paste - - | awk -F'\t' '$1 != $2' | wc -l
}
