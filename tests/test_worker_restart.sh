#!/usr/bin/env bash
# test_worker_restart.sh: redis-server restarted mid-run (appendonly yes):
# the worker reconnects, keeps the replies produced meanwhile, and every job
# completes exactly once (repeats of an event across the reconnect carry
# the same seq and are dropped by readers).
source "$(dirname "$0")/worker_lib.sh"

N=300
start_redis --appendonly yes --appendfsync always
queue_jobs "$N" 8
start_worker w --claim-idle-ms 1000 --max-num-seqs 16
W=$LAST_PID
started() { [ "$(rcli XLEN redlm:test:replies)" -ge 40 ]; }
wait_until 60 started || fail "no progress"
stop_redis
sleep 1
start_redis --appendonly yes --appendfsync always
echo "redis restarted with $(rcli XLEN redlm:test:replies) reply events stored"

wait_until 120 all_acked "$N" || fail "not finished: read $(group entries-read), pending $(group pending)"
summary > "$T/got.jsonl"
[ "$(wc -l < "$T/got.jsonl")" = "$N" ] || fail "replies for $(wc -l < "$T/got.jsonl") jobs, want $N"
bad=$(jq -c 'select(.dones != 1)' "$T/got.jsonl" | head -3)
[ -z "$bad" ] || fail "jobs without exactly one final done: $bad"
"$REDLM" generate --model "$MODEL" --threads 1 --input "$T/jobs.jsonl" --output "$T/gen.jsonl" 2> "$T/gen.log" ||
    fail "redlm generate failed"
diff <(jq -c '{id, token_ids}' "$T/gen.jsonl" | sort) <(jq -c '{id, token_ids}' "$T/got.jsonl" | sort) > "$T/diff" ||
    fail "tokens differ from redlm generate: $(head -4 "$T/diff")"
kill -0 "$W" || fail "worker died"
grep -q "is back" "$T/w.log" || fail "the worker never noticed the restart"
echo "ok: $N jobs across a redis-server restart"
