#!/usr/bin/env bash
# test_launch.sh: scripts/launch-instances with three CPU instances on one
# stream: distinct consumer names in one group, every instance takes jobs,
# every job gets its done and is acknowledged, and SIGTERM to the launcher
# stops all three cleanly (exit 0, no worker left); Ctrl-C at a terminal
# (SIGINT to the process group) lets running jobs finish; a launcher killed with
# SIGKILL takes its workers along; instances that cannot start end the
# launcher with their exit status.
source "$(dirname "$0")/worker_lib.sh"

N=${N_JOBS:-45}
start_redis

# One job at a time per instance, so no instance can take the whole stream.
scripts/launch-instances --redlm "$REDLM" --instances 3 --name lt --devices 0-5 -- \
    --model "$MODEL" --redis "$(URL)" --threads 1 --max-num-seqs 1 > "$T/launch.log" 2>&1 &
L=$!
PIDS+=("$L")
three() { [ "$(pgrep -P "$L" -c)" = 3 ]; }
wait_until 10 three || fail "launch-instances did not start three workers"
WORKERS=$(pgrep -P "$L")
for w in $WORKERS; do PIDS+=("$w"); done
serving() { [ "$(grep -c 'serving redlm:jobs' "$T/launch.log")" = 3 ]; }
wait_until 20 serving || fail "the three workers did not start serving"

# Jobs long enough (96 tokens each) that the sampling below sees who holds them.
for i in $(seq 1 "$N"); do
    echo "{\"id\":\"l$i\",\"prompt_ids\":[$((i % 89 + 1)),$((i * 5 % 61 + 1))],\"max_tokens\":96,\"temperature\":0,\"ignore_eos\":true,\"stream\":false,\"reply_to\":\"redlm:reply:test\"}"
done | jq -r '"XADD redlm:jobs * json " + (tojson | tojson)' | rcli > /dev/null

# Sample which consumers hold jobs while the stream drains.
seen=()
group() { rcli XINFO GROUPS redlm:jobs | awk -v k="$1" '$0 == k { getline; print }'; }
end=$(( $(date +%s) + 120 ))
while [ "$(group entries-read)" != "$N" ] || [ "$(group pending)" != 0 ]; do
    [ "$(date +%s)" -lt "$end" ] || fail "not finished: read $(group entries-read), pending $(group pending)"
    for c in $(rcli XPENDING redlm:jobs redlm - + 10 | awk 'NR % 4 == 2'); do
        [[ " ${seen[*]} " == *" $c "* ]] || seen+=("$c")
    done
    sleep 0.05
done
[ ${#seen[@]} = 3 ] || fail "jobs were held by ${#seen[@]} consumers (${seen[*]}), want lt-0 lt-1 lt-2"
consumers=$(rcli XINFO CONSUMERS redlm:jobs redlm | awk '/^name$/ { getline; print }' | sort | tr '\n' ' ')
[ "$consumers" = "lt-0 lt-1 lt-2 " ] || fail "consumer group members: $consumers"
dones=$(stream_json redlm:reply:test | jq -s 'map(select(.event == "done")) | map(.id) | unique | length')
[ "$dones" = "$N" ] || fail "$dones jobs have a done event, want $N"

kill -TERM "$L"
wait_until 30 eval '! kill -0 '"$L"' 2>/dev/null' || fail "launch-instances still running after SIGTERM"
wait "$L"
rc=$?
[ $rc = 0 ] || fail "launch-instances exited $rc after SIGTERM"
for w in $WORKERS; do kill -0 "$w" 2>/dev/null && fail "worker $w still running"; done
# Ctrl-C at a terminal: SIGINT to the launcher's whole process group.  The
# workers drain (one SIGTERM from the launcher), they do not take the
# terminal's SIGINT plus the launcher's SIGTERM as "stop now".
setsid "$REDLM" launch --instances 2 --name cc -- --model "$MODEL" --redis "$(URL)" --threads 1 \
    --max-num-seqs 1 --drain-timeout 150 > "$T/cc.log" 2>&1 &
L=$!   # setsid runs it in place: a background job of a script leads no group
PIDS+=("$L")
leads() { [ "$(ps -o pgid= "$L" | tr -d ' ')" = "$L" ]; }
wait_until 5 leads || fail "the launcher ($L) does not lead its own process group"
both() { [ "$(grep -c 'serving redlm:jobs' "$T/cc.log")" = 2 ]; }
wait_until 20 both || fail "the two workers did not start serving"
for w in $(pgrep -P "$L"); do PIDS+=("$w"); done
# More jobs than the two take at once: a 3,000-token job of this model
# ends within a second, so with two jobs alone a loaded machine could poll
# past the moment both ran.  Each worker takes one at a time
# (--max-num-seqs 1) and the rest wait in the stream, so both stay busy
# for seconds; every job a worker took must be finished after Ctrl-C, and
# the ones no worker took (past the group's last delivered entry) stay for
# the next worker.
untaken() {
    local last
    last=$(rcli XINFO GROUPS redlm:jobs | awk '/^last-delivered-id$/ { getline; print }')
    rcli XRANGE redlm:jobs "($last" + | grep -c '^json$'
}
for i in $(seq 1 12); do
    rcli XADD redlm:jobs '*' json "{\"id\":\"cc$i\",\"prompt_ids\":[$i,7],\"max_tokens\":3000,\"ignore_eos\":true,\"stream\":false,\"reply_to\":\"redlm:reply:cc\"}" > /dev/null
done
running() { [ "$(rcli XINFO CONSUMERS redlm:jobs redlm | awk '/^pending$/ { getline; n += $1 == 1 } END { print n + 0 }')" = 2 ]; }
wait_until 30 running || fail "the two workers did not each take a job"
kill -INT -- "-$L"
# Under ASan on a loaded machine a job takes far longer: the drain gets
# room enough that only a worker that stopped at once (or never) fails.
wait_until 180 eval '! kill -0 '"$L"' 2>/dev/null' || fail "the launcher still runs 180 s after Ctrl-C"
grep -q "second signal" "$T/cc.log" && fail "Ctrl-C made the workers stop at once: $(grep signal "$T/cc.log")"
ntaken=$(( 12 - $(untaken) ))
n=$(stream_json redlm:reply:cc | jq -s 'map(select(.event == "done" and .finish_reason == "length")) | length')
[ "$ntaken" -ge 2 ] && [ "$n" = "$ntaken" ] || fail "after Ctrl-C $n of the $ntaken jobs taken were finished"
left=$(rcli XPENDING redlm:jobs redlm | head -1)
[ "$left" = 0 ] || fail "$left jobs still pending after the drain"
echo "Ctrl-C on the launcher's process group: both workers drained their running job" \
     "($ntaken jobs taken, all finished; $((12 - ntaken)) left in the stream)"
rcli XTRIM redlm:jobs MAXLEN 0 > /dev/null   # the next set starts on an empty stream

# A launcher killed with SIGKILL (the OOM killer, kill -9) takes its set
# along: orphaned instances would hold their GPUs from the next set.
scripts/launch-instances --redlm "$REDLM" --instances 2 --name orphan -- \
    --model "$MODEL" --redis "$(URL)" --threads 1 > "$T/orphan.log" 2>&1 &
L=$!
PIDS+=("$L")
two() { [ "$(grep -c 'serving redlm:jobs' "$T/orphan.log")" = 2 ]; }
wait_until 20 two || fail "the two workers did not start serving"
WORKERS=$(pgrep -P "$L")
for w in $WORKERS; do PIDS+=("$w"); done
kill -KILL "$L"
t0=$(date +%s.%N)
ended() { for w in $WORKERS; do kill -0 "$w" 2>/dev/null && return 1; done; return 0; }
wait_until 15 ended || fail "workers $WORKERS still running after their launcher was killed"
took=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.2f", b - a }')
echo "launcher killed with SIGKILL: its 2 workers ended ${took} s later"

# Instances that cannot start end the launcher with their status (3: model).
scripts/launch-instances --redlm "$REDLM" --instances 2 --name bad -- \
    --model "$T/nowhere" --redis "$(URL)" > "$T/bad.log" 2>&1
rc=$?
[ $rc = 3 ] || fail "launch-instances with a missing model exited $rc, want 3"
grep -q "ended on its own" "$T/bad.log" || fail "no word that an instance ended on its own"

echo "ok: $N jobs over 3 instances (${seen[*]}), all done and acknowledged; SIGTERM stopped all"
