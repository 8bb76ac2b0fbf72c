#!/usr/bin/env bash
# gpu_wq.sh: the quantized-weight kernels on a GPU machine (a GPU CUDA
# cannot use is a failure, not a skip); two runs on different random layers,
# the second with the decode GEMV's strip counter.
set -eu
source "$(dirname "$0")/skip_without_gpu.sh"
RL_REQUIRE_GPU=1 "$BUILD/tests/test_cuda_wq"
RL_WQ_COUNTER=1 RL_REQUIRE_GPU=1 RL_TEST_SEED=$(( $(date +%s) + 1 )) "$BUILD/tests/test_cuda_wq"
