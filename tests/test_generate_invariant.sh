#!/usr/bin/env bash
# test_generate_invariant.sh: --batch-invariant (CPU backend).  The same 64
# requests (tests/invariant_lib.sh) run in one batch of 64, alone (one
# sequence a step, prompts in 37-token chunks) and in a drifting batch (7
# sequences at most, 100 tokens a step, requests ending at every step) must
# give bit-identical tokens, logprobs and prompt logprobs.  Without the flag
# the runs differ in the last bits (counted, not asserted); the flag's cost
# on the batch run is printed.  tests/gpu_invariant.sh does the same on CUDA;
# here, CUDA with 3 or more TP ranks is refused at start (before any GPU is
# touched), with the reason and what to do.
source "$(dirname "$0")/generate_lib.sh"
source "$(dirname "$0")/invariant_lib.sh"
inv_requests "$tmp/in.jsonl"
inv_runs cpu "$dir" --threads 2
inv_run plain "$dir" --threads 2
inv_run plain-alone "$dir" --threads 2 --max-num-seqs 1 --max-num-batched-tokens 37
echo "--batch-invariant: batch ($(inv_steps cpu-batch) steps), alone ($(inv_steps cpu-alone) steps)" \
     "and drifting ($(inv_steps cpu-drift) steps) bit-identical over 64 requests; without it" \
     "$(inv_differ plain plain-alone) of 64 differ between the batch and alone"
echo "cost: the batch of 64 in $(cat "$tmp/cpu-batch.secs") s with --batch-invariant," \
     "$(cat "$tmp/plain.secs") s without"
rc=0
"$REDLM" generate --model "$dir" --backend cuda --tp 3 --batch-invariant --input "$tmp/in.jsonl" \
    --output "$tmp/tp3.out" 2> "$tmp/tp3.err" || rc=$?
[ $rc = 2 ] && grep -q -- "--batch-invariant on --backend cuda takes --tp 1 or 2" "$tmp/tp3.err" ||
    fail "--backend cuda --tp 3 --batch-invariant: exit $rc, want 2 and the reason: $(cat "$tmp/tp3.err")"
echo "refused: $(cat "$tmp/tp3.err")"
