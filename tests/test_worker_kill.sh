#!/usr/bin/env bash
# test_worker_kill.sh: two workers, 1,000 jobs, one worker SIGKILLed mid-run:
# the other claims its jobs, every job gets exactly one done from its final
# attempt, with the tokens `redlm generate` gives (both --batch-invariant, so
# the batches a job ran in cannot move a bit), and nothing stays pending.
source "$(dirname "$0")/worker_lib.sh"

N=${N_JOBS:-1000}
start_redis
start_worker a --claim-idle-ms 1500 --stream-interval 4 --batch-invariant
A=$LAST_PID
start_worker b --claim-idle-ms 1500 --stream-interval 4 --batch-invariant
B=$LAST_PID
both_up() { [ "$(rcli EXISTS redlm:instances:a redlm:instances:b)" = 2 ]; }
wait_until 30 both_up || fail "workers did not start"
# half streamed in chunks of 4, half one done; greedy so every run agrees;
# 24-28 tokens each, so the run is still going when the kill comes
queue_jobs "$N" 24 ',"ignore_eos":true'

a_pending() { rcli XINFO CONSUMERS redlm:jobs redlm | awk '$0 == "a" { getline; getline; print }'; }
mid_run() { [ "$(rcli XLEN redlm:reply:test)" -ge $((N / 4)) ] && [ "$(a_pending)" -gt 0 ]; }
wait_until 60 mid_run || fail "no progress: $(rcli XLEN redlm:reply:test) reply events, a holds $(a_pending)"
kill -KILL "$A"
echo "killed worker a holding $(a_pending) jobs, $(rcli XLEN redlm:reply:test) reply events so far"

# every entry read by the group and none pending: all acknowledged
every_job_done "$N"
# no reconnect here, so not even a repeat of an event: one done event, as written
repeated=$(stream_json redlm:reply:test | jq -sc 'group_by(.id)[] | (map(.attempt) | max) as $m
    | map(select(.attempt == $m and .event == "done")) | select(length != 1) | {id: .[0].id, dones: length}' | head -3)
[ -z "$repeated" ] || fail "jobs with a repeated final done: $repeated"
retried=$(jq -s 'map(select(.attempt > 1)) | length' "$T/got.jsonl")
[ "$retried" -gt 0 ] || fail "no job was claimed from the killed worker (attempt > 1)"

# the same requests offline
same_as_generate
kill -0 "$B" || fail "worker b died"
echo "ok: $N jobs, $retried re-run after the kill (attempt > 1), tokens equal to redlm generate"
