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
started() { [ "$(rcli XLEN redlm:reply:test)" -ge 40 ]; }
wait_until 60 started || fail "no progress"
stop_redis
sleep 1
start_redis --appendonly yes --appendfsync always
echo "redis restarted with $(rcli XLEN redlm:reply:test) reply events stored"

every_job_done "$N"
same_as_generate
kill -0 "$W" || fail "worker died"
grep -q "is back" "$T/w.log" || fail "the worker never noticed the restart"
echo "ok: $N jobs across a redis-server restart"
