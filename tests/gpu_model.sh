#!/usr/bin/env bash
# gpu_model.sh: the whole model on the CUDA backend against Hugging Face's
# reference (tests/test_forward.c's checks with 16-bit tolerances: prompt
# logprobs within 0.05, greedy identical up to the first margin under 0.1,
# batched and chunked runs equal to the prompt run alone), in bf16 and fp16.
set -eu
RL_TEST_BACKEND=cuda RL_TEST_DTYPE=bf16 "$BUILD/tests/test_forward"
RL_TEST_BACKEND=cuda RL_TEST_DTYPE=fp16 "$BUILD/tests/test_forward"

# `redlm generate --backend cuda` end to end (engine, scheduler, KV cache
# sized by the memory plan, --dtype): prompt logprobs within 0.05 of the
# reference and greedy tokens equal up to the first margin under 0.1.
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for model in qwen2-tiny-gqa3 qwen2-tiny-hd128; do
    dir=$FIXTURES/models/$model
    ref=$dir/reference.json
    jq -c '.prompts[] | {id: .name, prompt_ids: .ids, max_tokens: 24, temperature: 0,
                         prompt_logprobs: 0, ignore_eos: true}' "$ref" > "$tmp/in.jsonl"
    for dtype in bf16 auto; do
        "$REDLM" generate --backend cuda --dtype $dtype --model "$dir" --input "$tmp/in.jsonl" \
            --output "$tmp/out.jsonl" 2> "$tmp/err" || { cat "$tmp/err"; exit 1; }
        jq -c --slurpfile got "$tmp/out.jsonl" '
            def abs: if . < 0 then -. else . end;
            .prompts[] as $p
            | ($got[] | select(.id == $p.name)) as $g
            | ([range(0; 24) | select($p.greedy_margin[.] < 0.1)] | first // 24) as $n
            | ([range(0; $p.prompt_logprobs | length)
                | ($g.prompt_logprobs[. + 1].logprob - $p.prompt_logprobs[.]) | abs] | max // 0) as $d
            | select($g.token_ids[0:$n] != $p.greedy[0:$n] or $d > 0.05)
            | {name: $p.name, n: $n, got: $g.token_ids[0:$n], want: $p.greedy[0:$n], logprob_diff: $d}
        ' "$ref" > "$tmp/bad"
        [ "$(jq -s length "$tmp/out.jsonl")" = "$(wc -l < "$tmp/in.jsonl")" ] ||
            { echo "FAIL: $model --dtype $dtype: result count"; exit 1; }
        [ -s "$tmp/bad" ] && { cat "$tmp/bad"; echo "FAIL: $model --dtype $dtype: differs from reference.json"; exit 1; }
        echo "generate --backend cuda --dtype $dtype, $model: matches reference.json"
    done
done
