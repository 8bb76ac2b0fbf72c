#!/usr/bin/env bash
# gpu_invariant.sh: --batch-invariant on the CUDA backend (kernels/cuda/
# README.md says how).  The same 64 requests (tests/invariant_lib.sh: one
# prompt of 1,200 tokens among them) in one batch of 64, alone (one
# sequence a step, prompts in 37-token chunks) and in a drifting batch (7
# sequences at most, 100 tokens a step) give bit-identical tokens, logprobs
# and prompt logprobs, on fixtures that take every invariant path: the
# bundled Qwen2 (dense, head dim 64: the prefill attention kernel for every
# step), Qwen3 AWQ (int4 dequantized every step, head dim 96: the tiled
# attention kernel unsplit, fp16), the two mixtures of experts (the grouped
# expert GEMMs for every step, the shared expert; head dims 32 and 64) and
# Qwen2 FP8 block-scaled at head dim 128 (no W8A8).  Then qwen3-moe-tiny's
# batch again on the tile GEMM's other K loops: the same bits.  For the bundled model
# the runs without the flag are counted (not asserted) and both batch runs
# timed, start-up included: the flag's cost on a tiny model (the 7B shape's
# is `redlm bench --batch-invariant`, kernels/cuda/README.md).
source "$(dirname "$0")/skip_without_gpu.sh"
source "$(dirname "$0")/generate_lib.sh"
source "$(dirname "$0")/invariant_lib.sh"
inv_requests "$tmp/in.jsonl"
bundled=$PWD/$BUILD/models/qwen2-brown-5m
for model in "$bundled" "$FIXTURES"/models-quant/qwen3-tiny-awq \
             "$FIXTURES"/models/qwen2-moe-tiny "$FIXTURES"/models/qwen3-moe-tiny \
             "$FIXTURES"/models-quant/qwen2-tiny-hd128-fp8block; do
    name=$(basename "$model")
    inv_runs "$name" "$model" --backend cuda
    echo "  $name: batch ($(inv_steps "$name-batch") steps), alone ($(inv_steps "$name-alone")" \
         "steps) and drifting ($(inv_steps "$name-drift") steps) bit-identical over 64 requests"
done
# The tile GEMM's K loops and tiles give the same bits (cuda_tile_gemm.cuh):
# the plain loop everywhere, 4 stages everywhere (gpu_kernels.sh runs 8
# everywhere on test_cuda_ops' shapes), both on the 64 x 64 tile, against
# the default's 8 stages up to 128 rows and 128 x 128 tiles above.
moe=$FIXTURES/models/qwen3-moe-tiny
for v in RL_CUDA_TILE_PIPE=0 RL_CUDA_TILE_PIPE=4; do
    export "$v"
    inv_run var "$moe" --backend cuda --batch-invariant
    unset "${v%%=*}"
    cmp -s "$tmp/qwen3-moe-tiny-batch.res" "$tmp/var.res" ||
        fail "$v changes qwen3-moe-tiny's results ($(inv_differ qwen3-moe-tiny-batch var) requests)"
done
echo "  RL_CUDA_TILE_PIPE=0 and =4 (the tile GEMM's other loops, on the 64 x 64 tile)" \
     "bit-identical to the default"
inv_run plain "$bundled" --backend cuda
inv_run plain-alone "$bundled" --backend cuda --max-num-seqs 1 --max-num-batched-tokens 37
echo "  without --batch-invariant $(inv_differ plain plain-alone) of 64 differ between the batch" \
     "and alone (qwen2-brown-5m)"
echo "  cost (qwen2-brown-5m, the batch of 64, start-up included):" \
     "$(cat "$tmp/qwen2-brown-5m-batch.secs") s with --batch-invariant," \
     "$(cat "$tmp/plain.secs") s without"
