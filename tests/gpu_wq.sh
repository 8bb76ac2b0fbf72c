#!/usr/bin/env bash
# gpu_wq.sh: the quantized-weight kernels on a GPU machine (a GPU CUDA
# cannot use is a failure, not a skip); two runs on different random layers,
# the second with the kernels behind switches until measured: the decode
# GEMV's strip counter (PERF.md v47) and the A8 GEMV rounding x four
# groups at a time, at up to 8 rows (v50).
set -eu
source "$(dirname "$0")/skip_without_gpu.sh"
RL_REQUIRE_GPU=1 "$BUILD/tests/test_cuda_wq"
RL_WQ_COUNTER=1 RL_WQ_A8_GROUPS=4 RL_WQ_A8_ROWS=8 RL_REQUIRE_GPU=1 RL_TEST_SEED=$(( $(date +%s) + 1 )) "$BUILD/tests/test_cuda_wq"
