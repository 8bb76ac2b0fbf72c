#!/usr/bin/env bash
# gpu_memory.sh: --gpu-memory-utilization as vLLM means it, on one GPU:
# each instance's share of the GPU's total memory (weights, activations,
# workspace and KV cache together), whatever other processes hold.
#   1. a worker at 0.30 on Qwen2.5-7B's shape (dummy weights): the memory
#      plan's share is 0.30 of the total and what the process holds (NVML)
#      stays under it; the KV cache is the rest of the share.
#   2. two `redlm worker` instances at 0.45 start on the GPU one after the
#      other and both answer a job; a third at 0.45 exits at once with
#      status 5 and the plan's message (its share is not free).
# Figures are printed; every bound is generous (1 % of the GPU).
source "$(dirname "$0")/skip_without_gpu.sh"
source "$(dirname "$0")/worker_lib.sh"
MODEL=$FIXTURES/configs/qwen2.5-7b.json
flags=(--backend cuda --load-format dummy --max-model-len 4096 --max-num-seqs 16)

# the GPU's total and what pid holds on it, in bytes (NVML through nvidia-smi)
gpu_total() { nvidia-smi --id=0 --query-gpu=memory.total --format=csv,noheader,nounits |
              awk '{ printf "%.0f\n", $1 * 1048576 }'; }
held_by() { nvidia-smi --id=0 --query-compute-apps=pid,used_memory --format=csv,noheader,nounits |
            awk -F', *' -v p="$1" '$1 == p { printf "%.0f\n", $2 * 1048576; f = 1 } END { if (!f) print 0 }'; }
# a number (GiB) after PATTERN in the memory plan a log printed
plan_gib() { sed -n "s/.*$2 *\([0-9][0-9.]*\).*/\1/p" "$1" | head -1; }
total=$(gpu_total)
[ "$total" -gt 0 ] || fail "nvidia-smi gives no memory total"

start_redis
up() { [ "$(rcli HGET "redlm:instances:$1" state)" = serving ]; }

echo "--- 1. a worker at --gpu-memory-utilization 0.30"
start_worker s "${flags[@]}" --gpu-memory-utilization 0.30
pid=$LAST_PID
wait_until 240 up s || fail "the instance at 0.30 did not start serving"
held=$(held_by "$pid")
kill -TERM "$pid"; wait "$pid" 2>/dev/null
grep -A5 "memory plan" "$T/s.log"
share=$(plan_gib "$T/s.log" "share"); kv=$(plan_gib "$T/s.log" "KV cache")
python3 - "$total" "$share" "$kv" "$held" <<'PY' || fail "the 0.30 instance's memory (above)"
import sys
total, share, kv, held = float(sys.argv[1]), float(sys.argv[2]) * 2**30, float(sys.argv[3]) * 2**30, float(sys.argv[4])
print(f"share {share / total:.4f} of the GPU ({share / 2**30:.2f} GiB), KV cache {kv / 2**30:.2f} GiB "
      f"= {kv / total:.3f} of the GPU, process holds {held / 2**30:.2f} GiB = {held / total:.3f} (NVML)")
ok = abs(share / total - 0.30) < 0.005 and 0 < held <= share + 0.01 * total and kv > 0
sys.exit(0 if ok else 1)
PY

echo "--- 2. two instances at 0.45 on one GPU, a third refused"
for w in a b; do
    start_worker "$w" "${flags[@]}" --gpu-memory-utilization 0.45
    eval "pid_$w=$LAST_PID"
    wait_until 240 up "$w" || fail "instance $w at 0.45 did not start serving"
    p=$(eval echo "\$pid_$w")
    h=$(held_by "$p")
    python3 -c "import sys; t, h = $total, $h; print('instance $w serving: holds %.2f GiB = %.3f of the GPU' % (h / 2**30, h / t)); sys.exit(0 if h <= (0.45 + 0.01) * t else 1)" ||
        fail "instance $w holds more than its 0.45 share"
done
start=$(date +%s)
"$REDLM" worker --model "$MODEL" --redis "$(URL)" --consumer c "${flags[@]}" \
    --gpu-memory-utilization 0.45 > "$T/c.log" 2>&1
rc=$?
took=$(( $(date +%s) - start ))
grep -h "asks for" "$T/c.log" | head -2
[ "$rc" = 5 ] || fail "a third instance at 0.45 exited $rc, want 5 (its share is not free)"
grep -q "only .* GiB is free" "$T/c.log" || fail "the third instance's message does not say what is free"
[ "$took" -le 60 ] || fail "the third instance took $took s to refuse, want at once"
echo "third instance refused with exit 5 after $took s"
job='{"id":"g","prompt_ids":[1,2,3],"max_tokens":4,"temperature":0,"ignore_eos":true}'
for i in 1 2; do rcli XADD redlm:jobs '*' json "${job/\"g\"/\"g$i\"}" > /dev/null; done
both_done() { stream_json redlm:reply:g1 | grep -q '"done"' && stream_json redlm:reply:g2 | grep -q '"done"'; }
wait_until 60 both_done || fail "the two instances did not answer their jobs"
echo "ok: instances a and b at 0.45 each answered; third refused"
