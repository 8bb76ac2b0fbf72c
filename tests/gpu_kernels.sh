#!/usr/bin/env bash
# gpu_kernels.sh: the CUDA op test on a GPU machine (a GPU that nvidia-smi
# lists but CUDA cannot use is a failure, not a skip); two runs on different
# random inputs, then the tile GEMM's other loops and tile.
set -eu
source "$(dirname "$0")/skip_without_gpu.sh"
RL_REQUIRE_GPU=1 "$BUILD/tests/test_cuda_ops"
RL_REQUIRE_GPU=1 RL_TEST_SEED=$(( $(date +%s) + 1 )) "$BUILD/tests/test_cuda_ops"
# The tile GEMM's K loops (cuda_tile_gemm.cuh), each one alone on the
# 64 x 64 tile for --batch-invariant's products (gpu_invariant.sh runs the
# expert GEMMs on the pipelined one, end to end).  The default run above
# holds the 128 x 128 tile of its 300-row calls to float64 and to the 1-,
# 7- and 64-row calls on the 64 x 64 tile.
for pipe in 0 4 8; do
    RL_REQUIRE_GPU=1 RL_CUDA_TILE_PIPE=$pipe "$BUILD/tests/test_cuda_ops" test_matmul_invariant
done
