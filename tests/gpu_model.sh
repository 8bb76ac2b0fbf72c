#!/usr/bin/env bash
# gpu_model.sh: the whole model on the CUDA backend against Hugging Face's
# reference (tests/test_forward.c's checks with 16-bit tolerances: prompt
# logprobs within 0.05, greedy identical up to the first margin under 0.1,
# batched and chunked runs equal to the prompt run alone), in bf16 and fp16.
set -eu
RL_TEST_BACKEND=cuda RL_TEST_DTYPE=bf16 "$BUILD/tests/test_forward"
RL_TEST_BACKEND=cuda RL_TEST_DTYPE=fp16 "$BUILD/tests/test_forward"
