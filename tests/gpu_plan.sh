#!/usr/bin/env bash
# gpu_plan.sh: redlm plan's per-GPU numbers against the CUDA backend's own
# accounting (7B and 14B dummy weights, two settings each, within 5 %), and
# `redlm plan --devices` / `redlm doctor` on the real GPUs.
set -eu
source "$(dirname "$0")/skip_without_gpu.sh"
RL_REQUIRE_GPU=1 "$BUILD/tests/test_plan_gpu"
"$REDLM" plan --model "$FIXTURES/configs/qwen2.5-14b.json" --devices 0 --max-model-len 8192
"$REDLM" doctor --model "$FIXTURES/models/qwen2-tiny-gqa3" --devices 0
