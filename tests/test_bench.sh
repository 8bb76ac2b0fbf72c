#!/usr/bin/env bash
# test_bench.sh: `redlm bench` runs end to end on a tiny model (dummy weights
# from a config, and real ones from a checkpoint) and prints its table/JSON,
# with --batch-invariant, --prompt-logprobs (a scoring prefill) and
# --leave-out too; bad options fail with a usage error.  Timing numbers are
# not checked.
set -euo pipefail
m=$FIXTURES/models/qwen2-tiny-gqa3
fail() { echo "test_bench: $*" >&2; exit 1; }

out=$("$REDLM" bench --model "$m/config.json" --load-format dummy --threads 2 \
      --prompt-len 20 --gen 3 --batch 1,3 --max-num-batched-tokens 32 --copy-mib 16 --json)
echo "$out"
[[ $out == *'"results":[{"batch":1,'*'{"batch":3,'* ]] || fail "JSON lacks the two batch rows"
[[ $out == *'"bandwidth_bytes_per_s":'* ]] || fail "JSON lacks the bandwidth"

out=$("$REDLM" bench --model "$m" --load-format auto --prompt-len 8 --gen 2 --batch 2 --copy-mib 16)
echo "$out"
[[ $out == *"x floor"* ]] || fail "table header missing"
[[ $out == *'"batch_invariant":true'* || $out == *"(batch-invariant)"* ]] &&
    fail "batch-invariant without --batch-invariant"

# --batch-invariant: the engine's invariant kernels timed, and said so.
out=$("$REDLM" bench --model "$m" --load-format auto --prompt-len 8 --gen 2 --batch 2 --copy-mib 16 \
      --threads 2 --batch-invariant)
[[ $out == *"backend cpu (batch-invariant),"* ]] || fail "--batch-invariant: table header: $out"
out=$("$REDLM" bench --model "$m" --load-format auto --prompt-len 8 --gen 2 --batch 2 --copy-mib 16 \
      --threads 2 --batch-invariant --json)
[[ $out == *'"batch_invariant":true'* ]] || fail "--batch-invariant: JSON: $out"

# --prompt-logprobs: every prompt token scored in the prefill, in chunks
# smaller than a prompt too, and said so.
out=$("$REDLM" bench --model "$m" --load-format auto --prompt-len 24 --gen 2 --batch 1,3 --copy-mib 16 \
      --threads 2 --max-num-batched-tokens 16 --prompt-logprobs 3)
[[ $out == *"prompt 24 tokens, each scored (prompt_logprobs 3), 2 generated"* ]] ||
    fail "--prompt-logprobs: table: $out"
out=$("$REDLM" bench --model "$m" --load-format auto --prompt-len 24 --gen 2 --batch 2 --copy-mib 16 \
      --threads 2 --prompt-logprobs 0 --json)
[[ $out == *'"prompt_logprobs":0,'* ]] || fail "--prompt-logprobs: JSON: $out"

# --leave-out: decode steps without the named work, said in the table and
# the JSON; the MoE kinds on a mixture of experts.
out=$("$REDLM" bench --model "$m" --load-format auto --prompt-len 8 --gen 2 --batch 2 --copy-mib 16 \
      --threads 2 --leave-out attention,o_proj)
[[ $out == *"decode steps leave out attention,o_proj in every layer"* ]] || fail "--leave-out: table: $out"
out=$("$REDLM" bench --model "$FIXTURES/models/qwen3-moe-tiny" --load-format auto --prompt-len 8 --gen 2 \
      --batch 2 --copy-mib 16 --threads 2 --leave-out router,experts,norm --json)
[[ $out == *'"leave_out":"router,experts,norm",'*'"results":[{"batch":2,'* ]] || fail "--leave-out: JSON: $out"

# scripts/bench-leave-out: the whole step, then each kind the model has.
out=$(REDLM="$REDLM" scripts/bench-leave-out --model "$FIXTURES/models/qwen3-moe-tiny" --backend cpu \
      --load-format auto --prompt-len 8 --gen 2 --batch 2 --copy-mib 16 --threads 2)
[[ $out == *"whole step: "*" ms (first and last run), "*" layers"*"attention "*"experts "* ]] ||
    fail "bench-leave-out: $out"

set +e
err=$("$REDLM" bench --model "$m" --leave-out attention,mlp 2>&1); rc=$?
[ $rc = 2 ] && [[ $err == *"unknown kind 'mlp' (kinds: norm, qkv_proj,"* ]] ||
    fail "--leave-out mlp: rc $rc, $err"
err=$("$REDLM" bench --model "$m" --prompt-logprobs 21 2>&1); rc=$?
[ $rc = 2 ] || fail "--prompt-logprobs 21 accepted (rc $rc)"
err=$("$REDLM" bench --load-format dummy 2>&1); rc=$?
[ $rc = 2 ] && [[ $err == *"--model is required"* ]] || fail "missing --model: rc $rc, $err"
err=$("$REDLM" bench --model "$m" --batch 0 2>&1); rc=$?
[ $rc = 2 ] || fail "--batch 0 accepted (rc $rc)"
err=$("$REDLM" bench --model /nonexistent --load-format auto 2>&1); rc=$?
[ $rc = 3 ] || fail "missing model dir: rc $rc, $err"
# --profile on the CPU says it has nothing to show
err=$("$REDLM" bench --model "$m" --prompt-len 8 --gen 2 --batch 1 --copy-mib 16 --profile 2>&1 >/dev/null); rc=$?
[ $rc = 0 ] && [[ $err == *"--profile"*"CUDA"* ]] || fail "--profile on the CPU: rc $rc, '$err'"
echo "test_bench: ok"
