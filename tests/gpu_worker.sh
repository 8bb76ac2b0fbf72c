#!/usr/bin/env bash
# gpu_worker.sh: one job end to end through Redis with `redlm worker
# --backend cuda`: the worker takes it from the stream, runs it on the GPU
# and replies with the same greedy tokens `redlm generate --backend cuda`
# gives for the same request.
source "$(dirname "$0")/skip_without_gpu.sh"
source "$(dirname "$0")/worker_lib.sh"

job='{"id":"gpu-1","prompt_ids":[1,2,3,4,5,6,7,8],"max_tokens":12,"temperature":0,"ignore_eos":true}'
echo "$job" > "$T/job.jsonl"
"$REDLM" generate --backend cuda --model "$MODEL" --input "$T/job.jsonl" --output "$T/want.jsonl" \
    2> "$T/generate.log" || fail "redlm generate --backend cuda"
tokens() { python3 -c 'import json, sys; print([t for l in sys.stdin for t in json.loads(l).get("token_ids", [])])'; }
want=$(grep -h . "$T/want.jsonl" | tokens)

start_redis
start_worker w1 --backend cuda
rcli XADD redlm:jobs '*' json "$job" >/dev/null
got_done() { stream_json redlm:reply:gpu-1 | grep -q '"event":"done"'; }
wait_until 60 got_done || fail "no done event for gpu-1"
got=$(stream_json redlm:reply:gpu-1 | tokens)
[ "$got" = "$want" ] || fail "worker tokens $got, generate $want"
echo "worker --backend cuda: job gpu-1 done, tokens $got"
