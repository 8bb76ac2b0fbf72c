#!/usr/bin/env bash
# test_worker_ops.sh: what operators do: run two instances on a slow model
# (both get work: a worker reads only what it can start), and SIGTERM one
# (its running jobs finish and are acknowledged; unread jobs stay for others,
# also when the worker is a two-stage pipeline with steps in flight).
source "$(dirname "$0")/worker_lib.sh"

# backpressure: two workers with room for 2 sequences each
N=16
start_redis
start_worker a --max-num-seqs 2 --claim-idle-ms 60000
start_worker b --max-num-seqs 2 --claim-idle-ms 60000
both_up() { [ "$(rcli EXISTS redlm:instances:a redlm:instances:b)" = 2 ]; }
wait_until 30 both_up || fail "workers did not start"
queue_jobs "$N" 300 ',"ignore_eos":true'
max_a=0 max_b=0
while ! all_acked "$N"; do
    info=$(rcli XINFO CONSUMERS redlm:jobs redlm)
    pa=$(echo "$info" | awk '$0 == "a" { getline; getline; print }')
    pb=$(echo "$info" | awk '$0 == "b" { getline; getline; print }')
    [ "${pa:-0}" -gt "$max_a" ] && max_a=$pa
    [ "${pb:-0}" -gt "$max_b" ] && max_b=$pb
    sleep 0.05
done
echo "most pending at once: a $max_a, b $max_b"
[ "$max_a" -gt 0 ] && [ "$max_b" -gt 0 ] || fail "one worker got no work (a $max_a, b $max_b)"
# 2 running, plus at most a couple finished and waiting for their XACK
[ "$max_a" -le 4 ] && [ "$max_b" -le 4 ] || fail "a worker read more than it could start (a $max_a, b $max_b)"
for p in "${PIDS[@]}"; do kill -TERM "$p"; wait "$p" || fail "worker exit status $?"; done
PIDS=()

# SIGTERM drain: w1 (two stages, so each of its 2 running jobs has a step
# in flight while the other's is computed) has 2 running, the rest unread;
# after SIGTERM the 2 finish (attempt 1, acknowledged) and w2 runs
# everything else
rcli DEL redlm:jobs redlm:reply:test > /dev/null
queue_jobs "$N" 200 ',"ignore_eos":true'
start_worker w1 --max-num-seqs 2 --claim-idle-ms 60000 --pp 2
W1=$LAST_PID
running() { [ "$(group entries-read)" -ge 3 ]; }
wait_until 30 running || fail "w1 never started"
kill -TERM "$W1"
wait "$W1" || fail "w1 exit status $?"
grep -q "SIGTERM" "$T/w1.log" || fail "w1 did not drain"
[ "$(group pending)" = 0 ] || fail "w1 left $(group pending) jobs pending"
read1=$(group entries-read)
[ "$read1" -lt "$N" ] || fail "w1 read every job"
start_worker w2 --claim-idle-ms 60000
wait_until 60 all_acked "$N" || fail "w2 did not finish the rest"
summary > "$T/got.jsonl"
[ "$(jq -s 'map(select(.dones == 1 and .attempt == 1)) | length' "$T/got.jsonl")" = "$N" ] ||
    fail "not every job done once at attempt 1"
# drained, not aborted: every job ran to its max_tokens
short=$(stream_json redlm:reply:test | jq -c 'select(.event == "done" and .finish_reason != "length") | {id, finish_reason}' | head -3)
[ -z "$short" ] || fail "jobs not run to the end: $short"
echo "ok: backpressure (both workers busy), SIGTERM drain (w1 finished $read1 jobs, w2 the rest)"
