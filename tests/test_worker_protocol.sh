#!/usr/bin/env bash
# test_worker_protocol.sh: the worker as producers see it: redis-cli as the
# producer, JSON and msgpack entries, every kind of malformed entry (one
# error event where an id exists, one dead-letter copy, the worker alive),
# cancel, status and metrics, and jobs claimed from a dead consumer (one
# re-run with attempt 2, one over --max-deliveries).
source "$(dirname "$0")/worker_lib.sh"

start_redis
# a consumer that died holding two jobs: dl-1 delivered twice, dl-2 once
rcli XGROUP CREATE redlm:jobs redlm 0 MKSTREAM > /dev/null
id1=$(rcli XADD redlm:jobs '*' json '{"id":"dl-1","prompt_ids":[1],"max_tokens":2}')
rcli XADD redlm:jobs '*' json '{"id":"dl-2","prompt_ids":[2],"max_tokens":2}' > /dev/null
rcli XREADGROUP GROUP redlm ghost COUNT 2 STREAMS redlm:jobs '>' > /dev/null
rcli XCLAIM redlm:jobs redlm ghost 0 "$id1" > /dev/null
MPORT=$(free_port)
start_worker w1 --metrics-port "$MPORT" --claim-idle-ms 500 --max-deliveries 2
W=$LAST_PID
got_event() { [ "$(rcli XLEN "redlm:reply:$1")" -gt 0 ]; }
wait_until 20 got_event dl-1 || fail "dl-1 never answered"
ev=$(stream_json redlm:reply:dl-1)
[ "$(echo "$ev" | jq -r '"\(.attempt) \(.error.code)"')" = "3 too_many_deliveries" ] || fail "dl-1: $ev"
wait_until 20 got_event dl-2 || fail "dl-2 never claimed"
[ "$(stream_json redlm:reply:dl-2 | jq -r 'select(.event == "done") | .attempt')" = 2 ] ||
    fail "dl-2: $(stream_json redlm:reply:dl-2)"

# a good job from redis-cli, read back with XRANGE
rcli XADD redlm:jobs '*' json '{"id":"cli-1","prompt_ids":[1,2,3],"max_tokens":10,"temperature":0}' >/dev/null
got_done() { stream_json "redlm:reply:$1" | grep -q '"event":"done"'; }
wait_until 20 got_done cli-1 || fail "no done event for cli-1"
ev=$(stream_json redlm:reply:cli-1)
[ "$(echo "$ev" | jq -s 'map(.token_ids | length) | add')" = 10 ] || fail "cli-1: not 10 tokens: $ev"
[ "$(echo "$ev" | jq -s 'map(.seq)' -c)" = "[0,1]" ] || fail "cli-1: seq not 0,1 (chunk of 8, done): $ev"
[ "$(echo "$ev" | jq -r 'select(.event == "done") | .finish_reason')" = length ] || fail "cli-1 finish"
ttl=$(rcli TTL redlm:reply:cli-1)
[ "$ttl" -gt 86000 ] || fail "reply stream TTL $ttl"

# a msgpack job: {"id":"mp-ok","prompt_ids":[1,2],"max_tokens":3,"temperature":0} -> msgpack replies
printf '\x84\xa2id\xa5mp-ok\xaaprompt_ids\x92\x01\x02\xaamax_tokens\x03\xabtemperature\x00' |
    rcli -x XADD redlm:jobs '*' msgpack >/dev/null
has_msgpack() { rcli --raw XRANGE redlm:reply:mp-ok - + | grep -q '^msgpack$'; }
wait_until 20 has_msgpack || fail "no msgpack reply for mp-ok"

# malformed entries: id -> expected code (no readable id: dead letter only;
# x sends both a json and a msgpack field, its id read from the json)
long_id=$(printf 'x%.0s' $(seq 300))
long_prompt=$(printf "1,%.0s" $(seq 4100))1
declare -A want=(
    [bad-type]=invalid_request [bad-unknown]=invalid_request [bad-none]=invalid_request
    [bad-two]=invalid_request [bad-neg]=invalid_request [bad-huge]=invalid_request
    [$long_id]=invalid_request [bad-utf8]=invalid_utf8 [bad-deadline]=deadline_exceeded
    [bad-long]=prompt_too_long [mp-bad]=invalid_request [bad-real]=invalid_request
    [bad-nul]=invalid_request [x]=invalid_request)
# bad ARGS... / bad_stdin ARGS... < PAYLOAD: XADD, keeping the entry's id
bad_entries=()
bad() { bad_entries+=("$(rcli XADD redlm:jobs '*' "$@")"); }
bad_stdin() { bad_entries+=("$(rcli -x XADD redlm:jobs '*' "$@")"); }
bad json 'not json'
bad_stdin msgpack < <(printf '\xc1')
bad prompt hello
bad json '{"id":"x"}' msgpack '\x80'
bad json '{"id":"bad-type","prompt_ids":"1,2"}'
bad json '{"id":"bad-unknown","prompt_ids":[1],"max_token":3}'
bad json '{"id":"bad-none","max_tokens":3}'
bad json '{"id":"bad-two","prompt":"a","prompt_ids":[1]}'
bad json '{"id":"bad-neg","prompt_ids":[1],"max_tokens":-1}'
bad json '{"id":"bad-huge","prompt_ids":[1],"max_tokens":9223372036854775807}'
bad json '{"id":"bad-real","prompt_ids":[1],"top_k":1e300}'
bad json '{"id":"bad-nul","prompt":"a\u0000b"}'
bad json "{\"id\":\"$long_id\",\"prompt_ids\":[1]}"
bad_stdin json < <(printf '{"id":"bad-utf8","prompt":"caf\xe9"}')
bad json '{"id":"bad-deadline","prompt_ids":[1],"deadline_ms":1000}'
bad json "{\"id\":\"bad-long\",\"prompt_ids\":[$long_prompt],\"max_tokens\":1}"
bad_stdin msgpack < <(printf '\x82\xa2id\xa6mp-bad\xaaprompt_ids\xa1x')
[ ${#bad_entries[@]} = $(( ${#want[@]} + 3 )) ] || fail "queued ${#bad_entries[@]} malformed entries"
n_bad=$(( ${#bad_entries[@]} + 1 )) # + dl-1
dead_full() { [ "$(rcli XLEN redlm:dead)" -ge "$n_bad" ]; }
wait_until 20 dead_full || fail "dead letters: $(rcli XLEN redlm:dead), want $n_bad"
for id in "${!want[@]}"; do
    key="redlm:reply:$id"
    if [ "$id" = mp-bad ]; then
        n=$(rcli XLEN "$key")
        [ "$n" = 1 ] || fail "mp-bad: $n events"
        continue
    fi
    ev=$(stream_json "$key")
    [ "$(echo "$ev" | wc -l)" = 1 ] || fail "$id: want one event, got: $ev"
    code=$(echo "$ev" | jq -r '.event + " " + .error.code')
    [ "$code" = "error ${want[$id]}" ] || fail "$id: got '$code', want error ${want[$id]}: $ev"
done
[ "$(rcli XLEN redlm:dead)" = "$n_bad" ] || fail "dead letters: $(rcli XLEN redlm:dead), want exactly $n_bad"
# one dead letter per malformed entry, naming it, with the entry's payload
dead_entries=$(rcli --raw XRANGE redlm:dead - + | awk '$0 == "entry" { getline; print }')
for e in "${bad_entries[@]}"; do
    [ "$(grep -cxF "$e" <<< "$dead_entries")" = 1 ] || fail "entry $e: not exactly one dead letter"
done
rcli --raw XRANGE redlm:dead - + | grep -q '^not json$' || fail "dead letter lacks the entry's payload"
kill -0 "$W" || fail "worker died"

# cancel: a long generation stopped with finish_reason abort
rcli XADD redlm:jobs '*' json '{"id":"long-1","prompt_ids":[1],"max_tokens":60,"ignore_eos":true,"stream":true}' >/dev/null
rcli XADD redlm:jobs '*' json '{"id":"long-2","prompt_ids":[5],"max_tokens":4000,"ignore_eos":true}' >/dev/null
wait_until 20 got_done long-1 || fail "long-1 not done"
started() { [ "$(rcli XLEN redlm:reply:long-2)" -gt 0 ]; }
wait_until 20 started || fail "long-2 never streamed"
rcli XADD redlm:cancel '*' id long-2 >/dev/null
wait_until 20 got_done long-2 || fail "long-2 not aborted"
reason=$(stream_json redlm:reply:long-2 | jq -r 'select(.event == "done") | .finish_reason')
[ "$reason" = abort ] || fail "long-2 finish_reason $reason"

# a cancel that overtakes its job: the job is answered abort without running
rcli XADD redlm:cancel '*' id early > /dev/null
sleep 0.5
rcli XADD redlm:jobs '*' json '{"id":"early","prompt_ids":[1],"max_tokens":50,"n":2}' > /dev/null
wait_until 20 got_done early || fail "early not answered"
[ "$(stream_json redlm:reply:early | jq -c '[.index, .finish_reason, (.token_ids | length)]' | tr -d '\n')" = \
  '[0,"abort",0][1,"abort",0]' ] || fail "early: $(stream_json redlm:reply:early)"

# a cancel key of another type stops cancels only while it is one: the
# worker keeps reading it, and cancels work again once it is a stream
rcli DEL redlm:cancel > /dev/null
rcli SET redlm:cancel oops > /dev/null
failing() { grep -q "reading redlm:cancel failed: WRONGTYPE" "$T/w1.log"; }
wait_until 20 failing || fail "the worker never read the string redlm:cancel"
rcli DEL redlm:cancel > /dev/null
rcli XADD redlm:jobs '*' json '{"id":"long-3","prompt_ids":[6],"max_tokens":4000,"ignore_eos":true}' >/dev/null
started3() { [ "$(rcli XLEN redlm:reply:long-3)" -gt 0 ]; }
wait_until 20 started3 || fail "long-3 never streamed"
sleep 1.5   # past a retry, so the worker reads the new cancel stream from its start
rcli XADD redlm:cancel '*' id long-3 >/dev/null
wait_until 20 got_done long-3 || fail "long-3 not aborted"
reason=$(stream_json redlm:reply:long-3 | jq -r 'select(.event == "done") | .finish_reason')
[ "$reason" = abort ] || fail "long-3 finish_reason $reason after the cancel key was a string for a while"

# status and metrics
st=$("$REDLM" status --redis "$(URL)") || fail "status failed"
echo "$st" | grep -q '^w1 ' || fail "status has no row for w1: $st"
echo "$st" | grep -q 'pending 0 ' || fail "status: pending not 0: $st"
metrics=$(curl -s "http://127.0.0.1:$MPORT/metrics") || fail "no metrics"
echo "$metrics" | grep -q '^redlm:request_errors_total{code="invalid_request"} 12$' || fail "metrics: $(echo "$metrics" | grep errors_total)"
echo "$metrics" | grep -q '^redlm:e2e_request_latency_seconds_count [1-9]' || fail "metrics: no latency"
for m in num_requests_running num_requests_waiting kv_blocks_used prefix_cache_hits_total \
         time_to_first_token_seconds_count time_per_output_token_seconds_count; do
    echo "$metrics" | grep -q "^redlm:$m [0-9]" || fail "metrics: no redlm:$m"
done
for m in prompt_tokens_total generation_tokens_total; do
    echo "$metrics" | grep -q "^redlm:$m [1-9]" || fail "metrics: redlm:$m not counted"
done
[ "$(pending_count)" = 0 ] || fail "entries left pending: $(rcli XPENDING redlm:jobs redlm)"

# SIGTERM with nothing running: exits promptly and removes its heartbeat
kill -TERM "$W"
wait "$W" || fail "worker exit status $?"
[ "$(rcli EXISTS redlm:instances:w1)" = 0 ] || fail "heartbeat left behind"
echo "ok: protocol, malformed entries ($n_bad dead letters), msgpack, cancel, status, metrics"
