#!/usr/bin/env bash
# test_worker_handback.sh: nothing waits for claim-idle (--claim-idle-ms is
# 10 minutes here).  A worker killed with SIGKILL holding jobs: another has
# them within 2 s of its heartbeat going stale, and the dead consumer is
# removed from the group once it holds nothing.  A worker whose
# --drain-timeout ends with jobs unfinished hands them back: another has
# them within a second or two of its exit.  A worker told to stop while
# Redis is frozen (SIGSTOP) still exits, its hand-back given up after 5 s.
# (Bounds asserted: 5 s, 15 s for the frozen Redis; the measured figures
# are printed.)
source "$(dirname "$0")/worker_lib.sh"

now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.2f", b - a }'; }
holds() { rcli XINFO CONSUMERS redlm:jobs redlm | awk -v c="$1" '$0 == c { getline; getline; print }'; }
has() { [ "$(holds "$1")" = "$2" ]; }
up() { [ "$(rcli EXISTS redlm:instances:$1)" = 1 ]; }
stale() { [ "$(rcli EXISTS redlm:instances:$1)" = 0 ]; }
queue_long() {
    for i in $(seq 1 "$2"); do
        rcli XADD redlm:jobs '*' json "{\"id\":\"$1$i\",\"prompt_ids\":[$i,4],\"max_tokens\":$3,\"ignore_eos\":true,\"stream\":false}" > /dev/null
    done
}

start_redis
IDLE=600000
start_worker a --claim-idle-ms $IDLE
A=$LAST_PID
wait_until 30 up a || fail "a did not start"
queue_long k 4 3000
wait_until 30 has a 4 || fail "a does not hold the 4 jobs: $(holds a)"
start_worker b --claim-idle-ms $IDLE
B=$LAST_PID
wait_until 30 up b || fail "b did not start"
kill -KILL "$A"
wait_until 20 stale a || fail "a's heartbeat never went stale"
t_stale=$(now)
wait_until 10 has b 4 || fail "b does not have a's jobs: a $(holds a), b $(holds b)"
took=$(since "$t_stale")
echo "after SIGKILL: b had a's 4 jobs $took s after a's heartbeat went stale"
awk -v t="$took" 'BEGIN { exit !(t < 5) }' || fail "took $took s"
gone() { [ -z "$(holds a)" ]; }
wait_until 10 gone || fail "dead consumer a still in the group: $(rcli XINFO CONSUMERS redlm:jobs redlm | tr '\n' ' ')"
for i in 1 2 3 4; do rcli XADD redlm:cancel '*' id "k$i" > /dev/null; done # long enough: done
wait_until 60 all_acked 4 || fail "b did not finish a's jobs"

kill -TERM "$B"; wait "$B" || fail "b exit status $?"

# drain timeout: c stops with its jobs unfinished and hands them back to d
start_worker c --claim-idle-ms $IDLE --drain-timeout 1
C=$LAST_PID
wait_until 30 up c || fail "c did not start"
queue_long h 3 3000
wait_until 30 has c 3 || fail "c does not hold the 3 jobs: $(holds c)"
start_worker d --claim-idle-ms $IDLE
wait_until 30 up d || fail "d did not start"
kill -TERM "$C"
wait "$C" || fail "c exit status $?"
t_exit=$(now)
grep -q "handing 3 unfinished jobs back" "$T/c.log" || fail "c did not hand its jobs back: $(tail -3 "$T/c.log")"
wait_until 10 has d 3 || fail "d does not have c's jobs: c $(holds c), d $(holds d)"
took2=$(since "$t_exit")
echo "after --drain-timeout 1: d had c's 3 jobs $took2 s after c exited"
awk -v t="$took2" 'BEGIN { exit !(t < 5) }' || fail "took $took2 s"
for i in 1 2 3; do rcli XADD redlm:cancel '*' id "h$i" > /dev/null; done
wait_until 60 all_acked 7 || fail "d did not finish c's jobs"
for id in h1 h2 h3 k1 k2 k3 k4; do
    n=$(stream_json "redlm:reply:$id" | jq -s 'map(select(.event == "done")) | length')
    [ "$n" = 1 ] || fail "$id: $n done events"
done

# Redis frozen while e stops: the hand-back waits at most 5 s, not for ever
start_worker e --drain-timeout 1
E=$LAST_PID
wait_until 30 up e || fail "e did not start"
kill -STOP "$REDIS_PID"
t_term=$(now)
kill -TERM "$E"
wait_until 30 eval '! kill -0 '"$E"' 2>/dev/null'
stopped=$?
took3=$(since "$t_term")
kill -CONT "$REDIS_PID"
[ $stopped = 0 ] || fail "e still running $took3 s after SIGTERM with Redis frozen"
wait "$E" || fail "e exit status $?"
echo "Redis frozen: e exited $took3 s after SIGTERM"
awk -v t="$took3" 'BEGIN { exit !(t < 15) }' || fail "took $took3 s"
grep -q "did not answer" "$T/e.log" || fail "e did not say why it stopped without Redis: $(tail -2 "$T/e.log")"
echo "ok: SIGKILL -> jobs taken ${took} s after the heartbeat went stale; drain timeout -> taken ${took2} s after exit; Redis frozen -> exit ${took3} s after SIGTERM"
