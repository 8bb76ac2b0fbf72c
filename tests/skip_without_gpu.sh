# skip_without_gpu.sh: sourced first by every tests/gpu_*.sh.  Without a GPU the test
# cannot run: it is skipped (exit 77, counted apart by tests/run), except
# under RL_REQUIRE_GPU=1 (make test-gpu, the GPU check), where a machine
# without a usable GPU is a failure.
if ! nvidia-smi -L 2>/dev/null | grep -q '^GPU '; then
    if [ -n "${RL_REQUIRE_GPU:-}" ]; then
        echo "FAIL: no GPU (nvidia-smi -L lists none) and RL_REQUIRE_GPU is set" >&2
        exit 1
    fi
    echo "skipped: no GPU (nvidia-smi -L lists none)"
    exit 77
fi
