#!/usr/bin/env bash
# test_generate_invariant.sh: --batch-invariant (CPU backend).  The same 64
# requests (tests/invariant_lib.sh) run in one batch of 64, alone (one
# sequence a step, prompts in 37-token chunks) and in a drifting batch (7
# sequences at most, 100 tokens a step, requests ending at every step) must
# give bit-identical tokens, logprobs and prompt logprobs.  Without the flag
# the runs differ in the last bits (counted, not asserted); the flag's cost
# on the batch run is printed.  At --tp 3 (all-reduces as an all-gather and
# a sum in rank order) the batch and the drifting batch agree too.
# tests/gpu_invariant.sh does the same on CUDA.
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
# Over 3 TP ranks the all-reduces become an all-gather and a sum in rank
# order (rl_model_invariant_reduce, what CUDA needs for NCCL): the batch and
# the drifting batch still agree.
inv_run tp3-batch "$dir" --threads 2 --tp 3 --batch-invariant
inv_run tp3-drift "$dir" --threads 2 --tp 3 --batch-invariant --max-num-seqs 7 \
    --max-num-batched-tokens 100
cmp -s "$tmp/tp3-batch.res" "$tmp/tp3-drift.res" ||
    fail "--batch-invariant --tp 3: the drifting batch differs from the batch" \
         "($(inv_differ tp3-batch tp3-drift) requests)"
echo "--tp 3: batch and drifting batch bit-identical ($(cat "$tmp/tp3-batch.secs") s," \
     "$(cat "$tmp/tp3-drift.secs") s)"
