#!/usr/bin/env bash
# gpu_wq.sh: the quantized-weight kernels on a GPU machine (a GPU CUDA
# cannot use is a failure, not a skip); two runs on different random layers
# (up to 8 rows on the decode GEMV), then one with RL_WQ_GEMV=0 (every row
# count on the mma kernel), so a failure names its path.
set -eu
source "$(dirname "$0")/skip_without_gpu.sh"
RL_REQUIRE_GPU=1 "$BUILD/tests/test_cuda_wq"
RL_REQUIRE_GPU=1 RL_TEST_SEED=$(( $(date +%s) + 1 )) "$BUILD/tests/test_cuda_wq"
echo "gpu_wq: every m on the mma kernel (RL_WQ_GEMV=0)"
RL_REQUIRE_GPU=1 RL_WQ_GEMV=0 "$BUILD/tests/test_cuda_wq"
