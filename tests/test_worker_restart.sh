#!/usr/bin/env bash
# test_worker_restart.sh: redis-server restarted mid-run (appendonly yes):
# the worker reconnects, keeps the replies produced meanwhile, and every job
# completes exactly once (repeats of an event across the reconnect carry
# the same seq and are dropped by readers), with the tokens `redlm generate`
# gives (both --batch-invariant, so the batches a job ran in cannot move a
# bit).
source "$(dirname "$0")/worker_lib.sh"

N=300
start_redis --appendonly yes --appendfsync always
queue_jobs "$N" 8
start_worker w --claim-idle-ms 1000 --max-num-seqs 16 --batch-invariant
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

# A restarted Redis answers LOADING while it reads its data back (here made
# to take seconds): the worker waits for it to serve.  It used to take the
# refused FUNCTION LOAD for a Redis older than 7.0 and exit, and to drop
# the writes refused meanwhile.
rcli EVAL "for i = 1, 10000 do redis.call('SET', 'pad:' .. i, i) end return 1" 0 > /dev/null
for i in 1 2 3; do
    rcli XADD redlm:jobs '*' json "{\"id\":\"load-$i\",\"prompt_ids\":[$i,7],\"max_tokens\":1500,\"ignore_eos\":true,\"reply_to\":\"redlm:reply:load\"}" > /dev/null
done
streaming() { [ "$(rcli XLEN redlm:reply:load)" -ge 10 ]; }
wait_until 60 streaming || fail "the load jobs never streamed"
stop_redis
start_redis --appendonly yes --appendfsync always --key-load-delay 150 --loading-process-events-interval-bytes 1024
grep -q "DB loaded from" "$T/redis.log" || fail "redis did not load its data: $(tail -3 "$T/redis.log")"
loaded=$(grep -o "DB loaded from append only file: [0-9.]* seconds" "$T/redis.log")
loads_done() { [ "$(stream_json redlm:reply:load | jq -s 'map(select(.event == "done")) | length')" = 3 ]; }
wait_until 60 loads_done || fail "the load jobs did not finish: $(tail -5 "$T/w.log")"
kill -0 "$W" || fail "worker died while Redis was loading: $(tail -5 "$T/w.log")"
grep -q "does not serve yet (LOADING" "$T/w.log" || fail "the worker never saw Redis loading (${loaded})"
for i in 1 2 3; do
    n=$(stream_json redlm:reply:load | jq -s --arg id "load-$i" \
        'map(select(.id == $id)) | unique_by(.seq) | map(.token_ids | length) | add')
    [ "$n" = 1500 ] || fail "load-$i: $n tokens in its events, want 1500 (an event lost while Redis loaded)"
done
echo "ok: $N jobs across a redis-server restart; 3 streaming jobs whole across a restart that loaded for a while (${loaded#DB loaded from append only file: })"
