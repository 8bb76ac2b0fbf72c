#!/usr/bin/env bash
# gpu_kernels.sh: the CUDA op test on a GPU machine, where "no GPU" is a
# failure rather than a skip; two runs on different random inputs.
set -eu
RL_REQUIRE_GPU=1 "$BUILD/tests/test_cuda_ops"
RL_REQUIRE_GPU=1 RL_TEST_SEED=$(( $(date +%s) + 1 )) "$BUILD/tests/test_cuda_ops"
