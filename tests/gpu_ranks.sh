#!/usr/bin/env bash
# gpu_ranks.sh: tests/test_ranks.c's layouts on CUDA ranks (NCCL between
# them) with 16-bit tolerances: every layout that fits the visible GPUs
# (one GPU: 1x1 only; eight: all of 1x1 ... 2x3), in bf16.
set -eu
source "$(dirname "$0")/skip_without_gpu.sh"
RL_TEST_BACKEND=cuda RL_TEST_DTYPE=bf16 "$BUILD/tests/test_ranks"
