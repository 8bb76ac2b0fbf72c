#!/usr/bin/env bash
# test_worker_pause.sh: a worker frozen (SIGSTOP) for 30 s while holding 6
# long jobs, then woken (SIGCONT): another worker takes the jobs once the
# frozen one's heartbeat is gone, and the frozen one, awake, writes nothing
# more for them (its writes are fenced in Redis).  Each job ends with
# exactly one final done, from its highest attempt; in each reply stream the
# attempts only go up, so no event of the frozen worker lands after its jobs
# were claimed.
source "$(dirname "$0")/worker_lib.sh"

PAUSE=${PAUSE_S:-30}
start_redis
start_worker a --stream-interval 4
A=$LAST_PID
up() { [ "$(rcli EXISTS redlm:instances:$1)" = 1 ]; }
wait_until 30 up a || fail "worker a did not start"
for i in 1 2 3 4 5 6; do
    rcli XADD redlm:jobs '*' json "{\"id\":\"p$i\",\"prompt_ids\":[$i,2,3],\"max_tokens\":600,\"ignore_eos\":true,\"temperature\":0}" > /dev/null
done
a_pending() { rcli XINFO CONSUMERS redlm:jobs redlm | awk '$0 == "a" { getline; getline; print }'; }
all_streaming() {
    [ "$(a_pending)" = 6 ] || return 1
    for i in 1 2 3 4 5 6; do [ "$(rcli XLEN redlm:reply:p$i)" -gt 0 ] || return 1; done
}
wait_until 60 all_streaming || fail "a is not running the 6 jobs (holds $(a_pending))"
kill -STOP "$A"
t_stop=$(date +%s.%N)
start_worker b --stream-interval 4
wait_until 30 up b || fail "worker b did not start"
b_holds() { [ "$(a_pending)" = 0 ] || [ -z "$(a_pending)" ]; }
wait_until 40 b_holds || fail "the jobs of the frozen worker were not taken (a holds $(a_pending))"
t_taken=$(date +%s.%N)
echo "frozen worker's 6 jobs taken $(awk -v a="$t_stop" -v b="$t_taken" 'BEGIN { printf "%.1f", b - a }') s after SIGSTOP (heartbeat TTL 10 s)"
sleep "$(awk -v a="$t_stop" -v n="$(date +%s.%N)" -v p="$PAUSE" 'BEGIN { d = p - (n - a); print (d > 0 ? d : 0) }')"
kill -CONT "$A"
wait_until 120 all_acked 6 || fail "not finished: read $(group entries-read), pending $(group pending)"
sleep 2 # whatever a still had to say, it has said by now
for i in 1 2 3 4 5 6; do
    ev=$(stream_json "redlm:reply:p$i")
    dones=$(echo "$ev" | jq -s 'map(select(.event == "done")) | length')
    [ "$dones" = 1 ] || fail "p$i: $dones final done events"
    echo "$ev" | jq -se '(map(select(.event == "done"))[0].attempt) == (map(.attempt) | max)' > /dev/null ||
        fail "p$i: the done is not from the highest attempt: $(echo "$ev" | jq -c '[.attempt, .event]' | tr -d '\n')"
    echo "$ev" | jq -se '[.[].attempt] as $a | $a == ($a | sort)' > /dev/null ||
        fail "p$i: attempts go down in the stream (an event of the frozen worker after the claim): $(echo "$ev" | jq -c .attempt | tr -d '\n')"
    [ "$(echo "$ev" | jq -s 'map(.attempt) | max')" -ge 2 ] || fail "p$i was never taken from the frozen worker"
    [ "$(echo "$ev" | jq -s 'map(select(.event == "done"))[0].token_ids | length' )" -ge 1 ] || fail "p$i: empty done"
done
kill -0 "$A" || fail "worker a died"
grep -q "stopping it" "$T/a.log" || fail "worker a never noticed it lost its jobs"
echo "the woken worker stopped $(grep -c "stopping it" "$T/a.log") jobs whose writes were fenced out"
echo "ok: SIGSTOP ${PAUSE} s + SIGCONT: 6 jobs, each one final done from its highest attempt, attempts only rising"
