#!/usr/bin/env bash
# gpu_kernels.sh: the CUDA op test on a GPU machine (a GPU that nvidia-smi
# lists but CUDA cannot use is a failure, not a skip); two runs on different
# random inputs.
set -eu
source "$(dirname "$0")/skip_without_gpu.sh"
RL_REQUIRE_GPU=1 "$BUILD/tests/test_cuda_ops"
RL_REQUIRE_GPU=1 RL_TEST_SEED=$(( $(date +%s) + 1 )) "$BUILD/tests/test_cuda_ops"
