#!/usr/bin/env bash
# test_metrics.sh: a worker's /metrics as Prometheus and its operators see
# it.  The pool's size is there before the first job; hundreds of HTTP
# clients that connect and send nothing (the worker limited to 128 open
# files, as a small ulimit -n) neither take the descriptors the worker's
# Redis reconnects need nor stop it answering jobs; after good and refused
# jobs the exposition parses with the Prometheus client library, every
# family with one HELP and one TYPE line before its samples.  A port in
# use is refused before the model is read.
# (tests/test_metrics.c has the endpoint's methods, paths and time-outs.)
source "$(dirname "$0")/worker_lib.sh"

PY=/usr/bin/python3
$PY -c 'import prometheus_client' 2>/dev/null || fail "python3-prometheus-client is missing: make deps"
start_redis
MPORT=$(free_port)
(ulimit -n 128; exec "$REDLM" worker --model "$MODEL" --redis "$(URL)" --consumer m --threads 1 \
    --metrics-port "$MPORT" > "$T/m.log" 2>&1) &
W=$!
PIDS+=("$W")
up() { [ "$(rcli EXISTS redlm:instances:m)" = 1 ]; }
wait_until 30 up || fail "worker did not start"
metric() { curl -s "http://127.0.0.1:$MPORT/metrics" | awk -v n="redlm:$1" '$1 == n { print $2 }'; }
total=$(metric kv_blocks_total)
[ "${total:-0}" -gt 0 ] || fail "redlm:kv_blocks_total before any job is '$total'"
echo "before any job: redlm:kv_blocks_total $total"
[ "$(metric 'model_info{quantization="none"}')" = 1 ] || fail "no redlm:model_info once the model is loaded"

# 300 idle HTTP clients held while Redis drops the worker's connections
$PY - "$MPORT" 300 15 > "$T/idle.log" 2>&1 <<'PY' &
import socket, sys, time
port, n, hold = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
held = []
for _ in range(n):
    try:
        held.append(socket.create_connection(("127.0.0.1", port), timeout=2))
    except OSError:
        pass
print("holding", len(held), flush=True)
time.sleep(hold)
PY
IDLE=$!
PIDS+=("$IDLE")
holding() { grep -q holding "$T/idle.log"; }
wait_until 20 holding || fail "the idle clients did not start: $(cat "$T/idle.log")"
sleep 0.5
fds=$(ls /proc/$W/fd | wc -l)
echo "$(cat "$T/idle.log") idle connections: the worker has $fds open files (limit 128)"
[ "$fds" -le 100 ] || fail "the worker has $fds open files"
rcli CLIENT KILL TYPE normal > /dev/null
rcli XADD redlm:jobs '*' json '{"id":"m1","prompt_ids":[1,2,3],"max_tokens":4,"temperature":0}' > /dev/null
done_m1() { stream_json redlm:reply:m1 | grep -q '"event":"done"'; }
wait_until 10 done_m1 || fail "no answer while idle HTTP clients were held: $(tail -3 "$T/m.log")"
kill "$IDLE" 2>/dev/null

# the exposition after good and refused jobs
rcli XADD redlm:jobs '*' json '{"id":"m2","prompt_ids":[4,5],"max_tokens":3,"n":2,"temperature":0.5}' > /dev/null
rcli XADD redlm:jobs '*' json '{"id":"m3","prompt_ids":[1],"max_tokens":-1}' > /dev/null
dones() { stream_json "redlm:reply:$1" | jq -s 'map(select(.event == "done")) | length'; }
wait_until 10 eval '[ "$(dones m2)" = 2 ]' || fail "m2 not done: $(stream_json redlm:reply:m2)"
wait_until 10 eval '[ "$(metric request_errors_total\{code=\"invalid_request\"\})" = 1 ]' ||
    fail "the refused job is not counted"
curl -s "http://127.0.0.1:$MPORT/metrics" > "$T/metrics.txt"
$PY - "$T/metrics.txt" <<'PY' || fail "the exposition (above) is not valid Prometheus text"
import re, sys
from prometheus_client.parser import text_string_to_metric_families
text = open(sys.argv[1]).read()
fams = list(text_string_to_metric_families(text))
name_re = re.compile(r'^[a-zA-Z_:][a-zA-Z0-9_:]*$')
seen = {}
for line in text.splitlines():
    if line.startswith("# "):
        kind, name = line.split()[1:3]
        assert kind in ("HELP", "TYPE"), line
        assert (name, kind) not in seen, "second %s for %s" % (kind, name)
        seen[(name, kind)] = 1
    else:
        name = re.split(r'[{ ]', line)[0]
        base = re.sub(r'_(bucket|sum|count)$', '', name)
        assert (name, "TYPE") in seen or (base, "TYPE") in seen, "no TYPE before " + line
for f in fams:
    assert name_re.match(f.name), f.name
    assert f.documentation, "no HELP for " + f.name
    assert f.type in ("counter", "gauge", "histogram"), (f.name, f.type)
    if f.type == "histogram":
        b = [(s.labels["le"], s.value) for s in f.samples if s.name.endswith("_bucket")]
        assert b[-1][0] == "+Inf", f.name
        assert all(x[1] <= y[1] for x, y in zip(b, b[1:])), "buckets not cumulative: " + f.name
        count = [s.value for s in f.samples if s.name.endswith("_count")][0]
        assert b[-1][1] == count, f.name
print("%d families parse; e2e count %g" % (len(fams), [s.value for f in fams for s in f.samples
      if s.name == "redlm:e2e_request_latency_seconds_count"][0]))
PY
# a --metrics-port in use is found before the weights are read
"$REDLM" worker --model "$T/nowhere" --redis "$(URL)" --metrics-port "$MPORT" > "$T/port.log" 2>&1
rc=$?
[ $rc = 2 ] && grep -q "cannot serve metrics on port $MPORT" "$T/port.log" ||
    fail "a second worker on the same --metrics-port: exit $rc, $(cat "$T/port.log")"

kill -TERM "$W"
wait "$W" || fail "worker exit status $?"
echo "ok: kv_blocks_total $total before any job, $fds open files under 300 idle HTTP clients, the exposition parses"
