#!/usr/bin/env bash
# test_startup.sh: every way a start can fail ends in one clear message and
# its own exit status (kernels/error.h), from each command that can hit it:
# broken model files (config, shards, tokenizer), a plan that does not fit,
# more ranks than devices, an unreachable Redis.  Each case runs under a time
# limit, so a hang fails.
source "$(dirname "$0")/worker_lib.sh"

GOOD=$FIXTURES/models/qwen2-tiny-gqa3
CONFIGS=$FIXTURES/configs

# expect CODE PHRASE CMD...: exit status CODE and PHRASE in the output.
expect() {
    local code=$1 phrase=$2; shift 2
    local out rc
    out=$(timeout 30 "$@" 2>&1); rc=$?
    [ $rc = 124 ] && fail "hung (30 s): $*"
    [ $rc = "$code" ] || fail "exit $rc, want $code: $*
$out"
    grep -qF -- "$phrase" <<<"$out" || fail "no '$phrase' in the output of: $*
$out"
    echo "ok   $code  $*"
}

# broken copy NAME: a fresh copy of the good model in $T/NAME
copy() { rm -rf "$T/$1"; cp -r "$GOOD" "$T/$1"; echo "$T/$1"; }
SHARD=model-00002-of-00002.safetensors

start_redis
GEN=("$REDLM" generate --threads 1 --prompt-ids 1,2,3 --max-tokens 2)
WORK=("$REDLM" worker --threads 1 --redis "$(URL)" --redis-wait 2)

# --- the good model starts (the cases below differ from it by one fault)
expect 0 '"event":"done"' "${GEN[@]}" --model "$GOOD"
expect 0 "0 fail" "$REDLM" doctor --model "$GOOD"
# doctor names the format of a quantized checkpoint and of a quantized config
expect 0 "fp16, quantized gptq int4 g64" "$REDLM" doctor --model "$FIXTURES/models-quant/qwen2-tiny-hd128-gptq4"
expect 0 "fp16, quantized awq int4 g128" "$REDLM" doctor --model "$CONFIGS/qwen2.5-72b-awq.json"
# vLLM's Marlin names stand for their format; a format the checkpoint is not is refused
expect 0 '"event":"done"' "${GEN[@]}" --model "$FIXTURES/models-quant/qwen2-tiny-hd128-gptq4" \
    --quantization gptq_marlin
expect 2 "or give --quantization gptq" "${GEN[@]}" \
    --model "$FIXTURES/models-quant/qwen2-tiny-hd128-gptq4" --quantization awq_marlin

# --- model directory missing
for cmd in GEN WORK; do
    eval "c=(\"\${$cmd[@]}\")"
    expect 3 "does not exist" "${c[@]}" --model "$T/nowhere"
done
expect 3 "does not exist" "$REDLM" plan --model "$T/nowhere"
expect 3 "does not exist" "$REDLM" doctor --model "$T/nowhere"

# --- config.json missing
M=$(copy noconfig); rm "$M/config.json"
expect 3 "config.json" "${GEN[@]}" --model "$M"
expect 3 "config.json" "$REDLM" doctor --model "$M"

# --- a shard named by the index is missing
M=$(copy noshard); rm "$M/$SHARD"
expect 3 "is missing from" "${GEN[@]}" --model "$M"
expect 3 "is missing from" "${WORK[@]}" --model "$M"
expect 3 "is missing from" "$REDLM" doctor --model "$M"

# --- a shard truncated (an interrupted download)
M=$(copy truncated); truncate -s 100000 "$M/$SHARD"
expect 3 "is truncated" "${GEN[@]}" --model "$M"
expect 3 "is truncated" "${WORK[@]}" --model "$M"
expect 3 "is truncated" "$REDLM" doctor --model "$M"

# --- a shard's header overwritten
M=$(copy corrupt); printf 'GARBAGE!GARBAGE!' | dd of="$M/$SHARD" bs=1 seek=8 conv=notrunc status=none
expect 3 "corrupt safetensors header" "${GEN[@]}" --model "$M"
expect 3 "corrupt safetensors header" "$REDLM" doctor --model "$M"

# --- tokenizer.json damaged, or not a tokenizer redlm can run
M=$(copy badtokenizer); echo '["not", "a tokenizer"]' > "$M/tokenizer.json"
expect 3 "download tokenizer.json again" "${GEN[@]}" --model "$M"
expect 3 "download tokenizer.json again" "${WORK[@]}" --model "$M"
expect 3 "download tokenizer.json again" "$REDLM" doctor --model "$M"
jq '.model.type = "WordPiece"' "$GOOD/tokenizer.json" > "$M/tokenizer.json"
expect 3 "model type WordPiece is not supported" "${GEN[@]}" --model "$M"
expect 3 "model type WordPiece is not supported" "$REDLM" doctor --model "$M"

# a tokenizer.json that is a directory is a broken download, not "no tokenizer"
rm "$M/tokenizer.json"; mkdir "$M/tokenizer.json"
expect 9 "tokenizer.json is not a regular file" "${GEN[@]}" --model "$M"
expect 9 "tokenizer.json is not a regular file" "$REDLM" doctor --model "$M"

# --- generation_config.json's sampling defaults out of range
M=$(copy badgenconfig); jq '.temperature = -1' "$GOOD/generation_config.json" > "$M/generation_config.json"
expect 3 '"temperature" must be a number' "${GEN[@]}" --model "$M"
expect 3 '"temperature" must be a number' "$REDLM" doctor --model "$M"

# --- tokenizer_config.json cut short (its chat template is read at start)
M=$(copy badtokconfig); printf '{"chat_template": ' > "$M/tokenizer_config.json"
expect 3 "download tokenizer_config.json again" "${GEN[@]}" --model "$M"
expect 3 "download tokenizer_config.json again" "$REDLM" doctor --model "$M"
echo '{"chat_template": 5}' > "$M/tokenizer_config.json"
expect 3 "chat_template must be a string" "$REDLM" doctor --model "$M"

# --- a shard unreadable (root reads everything: then run as nobody)
M=$(copy unreadable); chmod 000 "$M/$SHARD"
AS=()
if [ "$(id -u)" = 0 ]; then
    chmod 755 "$T"; chmod -R a+rX "$M"; chmod 000 "$M/$SHARD"
    AS=(setpriv --reuid=nobody --regid=nogroup --clear-groups)
fi
if [ "$(id -u)" != 0 ] || command -v setpriv >/dev/null; then
    expect 3 "permission denied" "${AS[@]}" "${GEN[@]}" --model "$M"
    expect 3 "permission denied" "${AS[@]}" "$REDLM" doctor --model "$M"
    chmod 644 "$M/$SHARD"; chmod 000 "$M/tokenizer.json"
    expect 3 "tokenizer.json cannot be read: permission denied" "${AS[@]}" "${GEN[@]}" --model "$M"
    expect 3 "tokenizer.json cannot be read: permission denied" "${AS[@]}" "$REDLM" doctor --model "$M"
else
    echo "skip unreadable shard: running as root without setpriv"
fi
chmod 644 "$M/$SHARD"

# --- checksums: right, then one file changed after the manifest was made
M=$(copy verify)
(cd "$M" && sha256sum ./*.safetensors | sed 's| \./| |') > "$T/sha256sums"
expect 0 "matches" "$REDLM" doctor --model "$M" --verify "$T/sha256sums"
printf 'X' | dd of="$M/$SHARD" bs=1 seek=$(( $(stat -c %s "$M/$SHARD") - 1 )) conv=notrunc status=none
expect 3 "the manifest says" "$REDLM" doctor --model "$M" --verify "$T/sha256sums"
# the hub's model API answer: {"siblings": [{"rfilename", "lfs": {"sha256"}}]}
(cd "$GOOD" && sha256sum ./*.safetensors) |
    jq -R 'split("  ./") | {rfilename: .[1], lfs: {sha256: .[0]}}' | jq -s '{siblings: .}' > "$T/hub.json"
expect 0 "matches" "$REDLM" doctor --model "$GOOD" --verify "$T/hub.json"
echo '{"model-00001-of-00002.safetensors": "00"}' > "$T/bad.json"
expect 3 "the manifest says" "$REDLM" doctor --model "$GOOD" --verify "$T/bad.json"

# --- a plan that does not fit
expect 5 "weights alone need" "$REDLM" plan --model "$CONFIGS/qwen2.5-72b.json" --gpus 6 --gpu-memory 24GiB
expect 5 "weights alone need" "$REDLM" plan --model "$CONFIGS/qwen2.5-14b.json" --gpu-memory 24GiB --tp 1 --pp 1
expect 5 "less than one --max-model-len 32768 sequence" \
    "$REDLM" plan --model "$CONFIGS/qwen2.5-14b.json" --gpus 2 --gpu-memory 21GiB --tp 2 --pp 1 --max-model-len 32768
expect 0 "For throughput" "$REDLM" plan --model "$CONFIGS/qwen2.5-7b.json" --gpus 6 --gpu-memory 24GiB --max-model-len 8192
# Without --max-num-batched-tokens, plan counts the step a worker on such
# GPUs starts with (8192 from 70 GiB, 2048 below), so its KV figures are
# the worker's.
expect 0 "--max-num-batched-tokens 8192: as \`redlm worker\` would start" \
    "$REDLM" plan --model "$CONFIGS/qwen2.5-7b.json" --gpu-memory 141GiB
expect 0 "--max-num-batched-tokens 2048: as \`redlm worker\` would start" \
    "$REDLM" plan --model "$CONFIGS/qwen2.5-7b.json" --gpus 6 --gpu-memory 24GiB
expect 0 "--max-num-batched-tokens 4096, --block-size 16" \
    "$REDLM" plan --model "$CONFIGS/qwen2.5-7b.json" --gpu-memory 141GiB --max-num-batched-tokens 4096
# The worker runs the plan of its own layout on its GPUs' free memory before
# any weight is loaded: 72B at TP 1 stops there, in seconds (without a
# driver, at reading the GPUs' memory).
if nvidia-smi >/dev/null 2>&1; then
    expect 5 "weights alone need" "${WORK[@]}" --backend cuda --load-format dummy \
        --model "$CONFIGS/qwen2.5-72b.json"
else
    expect 6 "cannot read the memory of 1 GPU" "${WORK[@]}" --backend cuda --load-format dummy \
        --model "$CONFIGS/qwen2.5-72b.json"
fi
out=$("$REDLM" plan --model "$CONFIGS/qwen2.5-7b.json" --gpus 6 --gpu-memory 24GiB --json) || fail "plan --json"
[ "$(jq '.layouts | length' <<<"$out")" -ge 10 ] || fail "plan --json: too few layouts"
[ "$(jq -r '.throughput.layout' <<<"$out")" != null ] || fail "plan --json: no throughput pick"

# --- the CPU backend holds fp32 weights in this process: a model or KV cache
# larger than the memory available stops before loading, not at the OOM killer
jq '.num_hidden_layers = 4000' "$CONFIGS/qwen2.5-72b.json" >"$T/huge.json"
for cmd in GEN WORK; do
    eval "c=(\"\${$cmd[@]}\")"
    expect 5 "the CPU backend holds the weights as fp32" "${c[@]}" --load-format dummy \
        --model "$T/huge.json"
done
expect 5 "the CPU backend holds the weights as fp32" "$REDLM" bench --model "$T/huge.json"
expect 5 "give a smaller --kv-cache-memory" "${GEN[@]}" --model "$GOOD" --kv-cache-memory 64TiB

# --- a tokenizer with ids past the model's vocab_size (another model's): said at
# start, and a prompt using them is refused by name
M=$(copy bigtok)
cp "$FIXTURES/tokenizer-qwen/tokenizer.json" "$M/tokenizer.json"
expect 4 "tokenizer.json has token ids up to 151668 but config.json's vocab_size is 2048" \
    "$REDLM" generate --threads 1 --model "$M" --prompt "Hello world" --max-tokens 2

# --- a quantized mixture of experts is not run, from its config or from the flag
MOE=$FIXTURES/models/qwen3-moe-tiny
jq '.quantization_config = {"quant_method": "awq", "bits": 4, "group_size": 32, "version": "gemm", "zero_point": true}' \
    "$MOE/config.json" >"$T/moe-awq.json"
expect 3 "a quantized mixture of experts" "$REDLM" bench --model "$T/moe-awq.json"
expect 3 "a quantized mixture of experts" "$REDLM" plan --model "$T/moe-awq.json"
for q in awq gptq fp8; do
    expect 2 "--quantization: a quantized mixture of experts" \
        "$REDLM" bench --model "$MOE/config.json" --quantization $q
done
expect 2 "(drop --quantization)" "${GEN[@]}" --load-format dummy --model "$MOE/config.json" \
    --quantization fp8

# --- more ranks than devices
expect 6 "needs 3 GPUs but 2 are given: give --gpus 3, or lower --tp / --pp" \
    "$REDLM" plan --model "$CONFIGS/qwen2.5-7b.json" --gpus 2 --gpu-memory 80GiB --tp 3 --pp 1
expect 6 "need 4 GPUs but 1 is given: give --gpus 4, or lower --instances / --tp / --pp" \
    "$REDLM" plan --model "$CONFIGS/qwen2.5-7b.json" --instances 2 --tp 2
expect 6 "" "$REDLM" doctor --devices 0-7
if ! nvidia-smi >/dev/null 2>&1; then
    expect 6 "cannot read the memory of 6 GPUs" "$REDLM" plan --model "$CONFIGS/qwen2.5-7b.json" --devices 0-5
fi
expect 6 "--tp 2 x --pp 1 needs 2 GPUs but 1 is given in --devices" \
    "${GEN[@]}" --model "$GOOD" --backend cuda --tp 2 --devices 0
if ! nvidia-smi >/dev/null 2>&1; then
    expect 6 "cannot read the memory of 2 GPUs" "${GEN[@]}" --model "$GOOD" --backend cuda --tp 2
    expect 6 "--backend cpu" "${GEN[@]}" --model "$GOOD" --backend cuda
fi

# --- Redis unreachable: the worker stops in seconds with the address
P=$(free_port)
expect 8 "127.0.0.1:$P" "$REDLM" worker --threads 1 --model "$GOOD" --redis "redis://127.0.0.1:$P" --redis-wait 0
expect 8 "127.0.0.1:$P" "$REDLM" doctor --redis "redis://127.0.0.1:$P"
# ... and SIGTERM while it waits (or loads) ends the start at once, saying so
"$REDLM" worker --threads 1 --model "$GOOD" --redis "redis://127.0.0.1:$P" --redis-wait 30 \
    2> "$T/wait.err" &
pid=$!
sleep 1
kill -TERM $pid
t0=$(date +%s%N)
wait $pid
rc=$?
ms=$(( ($(date +%s%N) - t0) / 1000000 ))
[ $rc = 143 ] || fail "SIGTERM while waiting for Redis: exit $rc, want 143: $(cat "$T/wait.err")"
[ $ms -le 5000 ] || fail "SIGTERM while waiting for Redis: exit after $ms ms"
grep -qF "redlm worker: interrupted (SIGTERM) while starting: no job was taken" "$T/wait.err" ||
    fail "SIGTERM while waiting for Redis: no word of it: $(cat "$T/wait.err")"
echo "ok   143  SIGTERM while waiting for Redis, after $ms ms"
expect 0 "answers PING" "$REDLM" doctor --redis "$(URL)"
# ... and the worker's keys: one of another type fails, naming it (the
# worker itself would stop on it)
rcli SET pool:jobs:running not-a-hash > /dev/null
expect 8 "pool:jobs:running holds a string where the worker keeps a hash" \
    "$REDLM" doctor --redis "$(URL)" --stream pool:jobs
expect 8 "pool:jobs:running holds a string" \
    "$REDLM" worker --threads 1 --model "$GOOD" --redis "$(URL)" --stream pool:jobs
expect 0 "redlm:jobs, redlm:jobs:running and redlm:dead are free or of their types" "$REDLM" doctor --redis "$(URL)"
rcli DEL pool:jobs:running > /dev/null

echo "startup: all cases passed"
