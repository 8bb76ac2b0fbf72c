#!/usr/bin/env bash
# gpu_nccl.sh: the NCCL path on one GPU.  A 1x1 layout normally runs with no
# communicator; `--collectives always` runs it on a rank thread with NCCL
# communicators of one rank, the code every multi-GPU layout uses.  Checks:
#   1. tests/test_model_comm.c on CUDA: through an NCCL communicator of one
#      rank the model makes 1 + 2 x layers all-reduces and 1 gather per step
#      and gives the bits it gives with no communicator;
#   2. for both fixture models, `redlm generate --backend cuda` with and
#      without `--collectives always`: token ids equal, prompt logprobs and
#      sampled-token logprobs within 1e-6; only the `always` run initialises
#      NCCL, and it says so (version, rank, device), as does NCCL's own log.
# Every failure says what differed and where its logs are.
set -u
source "$(dirname "$0")/skip_without_gpu.sh"
tmp=$(mktemp -d /tmp/redlm-gpu-nccl.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
TOL=1e-6

command -v nvidia-smi >/dev/null && nvidia-smi -L | head -1
echo "NCCL_NVLS_ENABLE=${NCCL_NVLS_ENABLE:-(unset)}" \
     "CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES:-(unset)}"

echo "--- 1. the model through an NCCL communicator of one rank"
RL_TEST_BACKEND=cuda timeout 120 "$BUILD/tests/test_model_comm" ||
    fail "test_model_comm on CUDA (exit $?): the model through a one-rank NCCL communicator" \
         "did not run every collective, or changed the results (see its output above)"

# gen NAME MODEL [FLAGS]: results in $tmp/NAME.jsonl, stderr in $tmp/NAME.err
gen() {
    local name=$1 dir=$2
    shift 2
    timeout 120 "$REDLM" generate --model "$dir" --backend cuda --gpu-memory-utilization 0.2 \
        --nccl-timeout 60 --input "$tmp/in.jsonl" --output "$tmp/$name.jsonl" "$@" \
        2> "$tmp/$name.err"
    local rc=$?
    if [ $rc != 0 ]; then
        echo "--- stderr of generate $*:" >&2
        tail -20 "$tmp/$name.err" >&2
        fail "$name: redlm generate --backend cuda $* exited $rc (stderr above)"
    fi
}

echo "--- 2. redlm generate --backend cuda, with and without --collectives always"
for model in qwen2-tiny-hd128 qwen2-tiny-gqa3; do
    dir=$FIXTURES/models/$model
    jq -c '.prompts[] | select(.ids | length <= 64)
           | {id: .name, prompt_ids: .ids, max_tokens: 16, temperature: 0, ignore_eos: true,
              prompt_logprobs: 1, logprobs: 1}' "$dir/reference.json" > "$tmp/in.jsonl"
    gen "$model-auto" "$dir"
    NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT NCCL_DEBUG_FILE="$tmp/$model-nccl.%p.log" \
        gen "$model-always" "$dir" --collectives always

    if grep -q "NCCL .*initialised" "$tmp/$model-auto.err"; then
        fail "$model: the default 1x1 run initialised NCCL; it should run with no communicator"
    fi
    want="NCCL [0-9]+\.[0-9]+\.[0-9]+ initialised for rank 0 on GPU [0-9]+: TP communicator"
    line=$(grep -E "$want rank 0 of 1" "$tmp/$model-always.err")
    [ -n "$line" ] || {
        tail -20 "$tmp/$model-always.err" >&2
        fail "$model: --collectives always did not report an NCCL communicator of one rank" \
             "(stderr above): the run did not go through NCCL"
    }
    echo "$model: $line"
    if cat "$tmp/$model"-nccl.*.log 2>/dev/null | grep -q "Init COMPLETE"; then
        echo "$model: NCCL's own log: $(cat "$tmp/$model"-nccl.*.log | grep -m1 "Init COMPLETE" |
                                       sed 's/^.*NCCL INFO //')"
    else
        echo "$model: note: no 'Init COMPLETE' in NCCL's INFO log (this NCCL may ignore" \
             "NCCL_DEBUG_FILE); redlm's line above comes from NCCL's own calls"
    fi

    # Per result line: token ids equal, worst logprob difference within TOL.
    report=$(jq -n --slurpfile a "$tmp/$model-auto.jsonl" --slurpfile b "$tmp/$model-always.jsonl" \
                   --argjson tol "$TOL" '
        def key: "\(.id)/\(.index)";
        def lps: [(.prompt_logprobs // [])[], (.logprobs // [])[] | select(. != null)];
        ($b | map({key: key, value: .}) | from_entries) as $bb
        | [$a[] | . as $x | $bb[$x | key] as $y
           | if $y == null then {key: ($x | key), missing: true}
             else {key: ($x | key),
                   tokens_equal: ($x.token_ids == $y.token_ids),
                   ids_equal: ([$x | lps[] | .id] == [$y | lps[] | .id]),
                   worst: (($x | lps) as $p | ($y | lps) as $q
                           | [range(0; [$p, $q] | map(length) | min)]
                           | map(($p[.].logprob - $q[.].logprob) | fabs) | max // 0)}
             end]
        | {n: length, n_b: ($b | length),
           worst: (map(.worst // 0) | max),
           bad: map(select(.missing or (.tokens_equal | not) or (.ids_equal | not)
                           or .worst > $tol))}')
    n=$(jq .n <<< "$report")
    [ "$n" -gt 0 ] && [ "$n" = "$(jq .n_b <<< "$report")" ] ||
        fail "$model: $n results without --collectives, $(jq .n_b <<< "$report") with it"
    [ "$(jq '.bad | length' <<< "$report")" = 0 ] ||
        fail "$model: --collectives always differs from the default run (tolerance $TOL):" \
             "$(jq -c '.bad[:5]' <<< "$report")"
    echo "ok $model: $n results, token ids equal, worst logprob difference $(jq .worst <<< "$report")"
done
