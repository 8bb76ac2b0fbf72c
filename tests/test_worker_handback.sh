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
D=$LAST_PID
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
# a worker restarted under its own name (a fixed --consumer, or host:pid in
# a container, where the pid is 1 again) takes what its previous process
# held at its first look, not after claim-idle
kill -TERM "$D"; wait "$D" || fail "d exit status $?"
start_worker e --claim-idle-ms $IDLE
E=$LAST_PID
wait_until 30 up e || fail "e did not start"
queue_long r 2 3000
wait_until 30 has e 2 || fail "e does not hold the 2 jobs: $(holds e)"
kill -KILL "$E"
wait "$E" 2>/dev/null
start_worker e --claim-idle-ms $IDLE
t_restart=$(now)
# both entries delivered a second time, to the new process
retaken() { [ "$(rcli XPENDING redlm:jobs redlm - + 10 e | awk 'NR % 4 == 0 && $0 == 2' | wc -l)" = 2 ]; }
wait_until 20 retaken || fail "the restarted e did not take its previous process's jobs: $(rcli XPENDING redlm:jobs redlm - + 10)"
took3=$(since "$t_restart")
echo "restarted under the same name: e took its 2 jobs back $took3 s after its start (claim-idle: 600 s)"
awk -v t="$took3" 'BEGIN { exit !(t < 10) }' || fail "took $took3 s"
for i in 1 2; do rcli XADD redlm:cancel '*' id "r$i" > /dev/null; done
wait_until 60 all_acked 9 || fail "e did not finish its jobs"
for id in r1 r2; do
    [ "$(stream_json "redlm:reply:$id" | jq -r 'select(.event == "done") | .attempt')" = 2 ] ||
        fail "$id: $(stream_json "redlm:reply:$id" | jq -c '{event, attempt}' | tr '\n' ' ')"
done

for id in h1 h2 h3 k1 k2 k3 k4; do
    n=$(stream_json "redlm:reply:$id" | jq -s 'map(select(.event == "done")) | length')
    [ "$n" = 1 ] || fail "$id: $n done events"
done

# Redis frozen while f stops: the hand-back waits at most 5 s, not for ever
start_worker f --drain-timeout 1
F=$LAST_PID
wait_until 30 up f || fail "f did not start"
kill -STOP "$REDIS_PID"
t_term=$(now)
kill -TERM "$F"
wait_until 30 eval '! kill -0 '"$F"' 2>/dev/null'
stopped=$?
took4=$(since "$t_term")
kill -CONT "$REDIS_PID"
[ $stopped = 0 ] || fail "f still running $took4 s after SIGTERM with Redis frozen"
wait "$F" || fail "f exit status $?"
echo "Redis frozen: f exited $took4 s after SIGTERM"
awk -v t="$took4" 'BEGIN { exit !(t < 15) }' || fail "took $took4 s"
grep -q "did not answer" "$T/f.log" || fail "f did not say why it stopped without Redis: $(tail -2 "$T/f.log")"
echo "ok: SIGKILL -> jobs taken ${took} s after the heartbeat went stale; drain timeout -> taken ${took2} s after exit; restart under the same name -> taken ${took3} s after start; Redis frozen -> exit ${took4} s after SIGTERM"
