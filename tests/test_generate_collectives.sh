#!/usr/bin/env bash
# test_generate_collectives.sh: `redlm generate --collectives always` runs a
# layout on rank threads with communicators even where it needs none (1x1 for
# both fixture models; the one-stage pipeline of TP 2 for gqa3), and must give
# the bits of the default run: every result line equal but for its timing.  A
# mode other than auto or always is refused with exit status 2 and a reason.
set -u
tmp=$(mktemp -d /tmp/redlm-collectives.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

gen() {
    local dir=$1 out=$2
    shift 2
    "$REDLM" generate --model "$dir" --threads 2 --kv-cache-memory 16MiB \
        --input "$tmp/in.jsonl" --output "$out" "$@" 2> "$out.err" ||
        fail "generate $* on $(basename "$dir"): exit $?: $(tail -3 "$out.err")"
    jq -c 'del(.timing)' "$out" | sort > "$out.cmp"
}

for case in "qwen2-tiny-hd128 1" "qwen2-tiny-gqa3 1" "qwen2-tiny-gqa3 2"; do
    set -- $case
    model=$1 tp=$2 dir=$FIXTURES/models/$model
    jq -c '.prompts[] | select(.ids | length <= 40)
           | {id: .name, prompt_ids: .ids, max_tokens: 12, temperature: 0, ignore_eos: true,
              prompt_logprobs: 2, logprobs: 2}' "$dir/reference.json" > "$tmp/in.jsonl"
    gen "$dir" "$tmp/auto" --tp "$tp"
    gen "$dir" "$tmp/always" --tp "$tp" --collectives always
    n=$(wc -l < "$tmp/auto.cmp")
    [ "$n" -gt 0 ] || fail "$model tp $tp: no results"
    cmp -s "$tmp/auto.cmp" "$tmp/always.cmp" ||
        fail "$model tp $tp: --collectives always differs from the default: " \
             "$(diff "$tmp/auto.cmp" "$tmp/always.cmp" | head -c 600)"
    echo "ok $model tp $tp: $n results bit-identical with --collectives always"
done

"$REDLM" generate --model "$FIXTURES/models/qwen2-tiny-gqa3" --collectives sometimes \
    --input /dev/null 2> "$tmp/err"
rc=$?
[ $rc = 2 ] || fail "--collectives sometimes: exit $rc, want 2"
grep -q "auto" "$tmp/err" && grep -q "always" "$tmp/err" ||
    fail "--collectives sometimes: no reason naming the modes: $(cat "$tmp/err")"
echo "ok --collectives sometimes refused: $(head -c 160 "$tmp/err")"
