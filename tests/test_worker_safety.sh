#!/usr/bin/env bash
# test_worker_safety.sh: hostile producers and bad settings.
#   1. reply_to outside --reply-prefix, or naming the job stream, answered
#      on the default reply stream and dead-lettered; a reply key holding a
#      string is never given a TTL (nor the job, dead-letter or victim keys):
#      a dead letter, an XACK and redlm:reply_write_errors_total instead
#   3. every entry with a readable id answered, whatever is bad in it (NaN,
#      ext types, duplicate keys, both json and msgpack, 3.7 billion array
#      elements declared in 20 bytes)
#   4. a second running job with an id answered duplicate_id; `submit`
#      refuses an input file with a repeated id at once
#   5. --dead / --cancel equal to the job stream refused; a refused login
#      (wrong, then rotated password) ends the worker within --redis-wait
#      with a message naming the user, reconnecting with backoff meanwhile;
#      a user whose ACL key patterns leave the reply streams out gets a
#      reply_refused dead letter per job, not an XACK with no answer; one
#      whose key patterns come to leave the dead-letter stream out holds
#      everything, acknowledging nothing, says which key, looks again less
#      and less often, and resumes once allowed; another worker takes what
#      it held; 100,000 tiny jobs leave the job stream trimmed; a worker
#      started over keys of another type stops naming the key; one whose
#      running hash turns into a string holds (nothing acknowledged
#      unanswered), and resumes once the key is deleted: each job one answer;
#      an ACL that denies a command the functions use holds it alike
#   6. a job whose entry is deleted from the job stream while it runs (XDEL,
#      a producer's MAXLEN, --jobs-maxlen) is still answered, once: neither
#      its worker's idle refresh nor another worker's idle claim takes the
#      entry (XCLAIM would drop it from the group, and the answer with it)
#   7. one whose entry is deleted while it runs on a worker killed with
#      SIGKILL gets a dead letter entry_deleted (naming the entry and the
#      job) from the worker that reaps it, and its XACK: it is not dropped
#      from the group unanswered
source "$(dirname "$0")/worker_lib.sh"

now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.2f", b - a }'; }

start_redis
MPORT=$(free_port)
start_worker w --metrics-port "$MPORT" --dead-maxlen 1000
W=$LAST_PID
up() { [ "$(rcli EXISTS redlm:instances:$1)" = 1 ]; }
wait_until 30 up w || fail "worker did not start"
got() { [ "$(rcli XLEN "redlm:reply:$1")" -gt 0 ] 2>/dev/null; }
# the error code in a reply stream, JSON or msgpack (msgpack jobs are answered in msgpack)
code_of() { rcli --raw XRANGE "redlm:reply:$1" - + | grep -aoE 'invalid_[a-z0-9]+|duplicate_id' | head -1; }

# 1. reply keys
rcli SET victim v > /dev/null
rcli SET redlm:reply:str v > /dev/null
rcli XADD redlm:jobs '*' json '{"id":"r-victim","prompt_ids":[1],"max_tokens":2,"reply_to":"victim"}' > /dev/null
rcli XADD redlm:jobs '*' json '{"id":"r-jobs","prompt_ids":[1],"max_tokens":2,"reply_to":"redlm:jobs"}' > /dev/null
rcli XADD redlm:jobs '*' json '{"id":"r-str","prompt_ids":[1],"max_tokens":2,"reply_to":"redlm:reply:str"}' > /dev/null
wait_until 20 got r-victim || fail "r-victim not answered on redlm:reply:r-victim"
wait_until 20 got r-jobs || fail "r-jobs not answered on redlm:reply:r-jobs"
[ "$(code_of r-victim)" = invalid_request ] || fail "r-victim: $(stream_json redlm:reply:r-victim)"
[ "$(code_of r-jobs)" = invalid_request ] || fail "r-jobs: $(stream_json redlm:reply:r-jobs)"
rcli XADD redlm:jobs '*' json '{"id":"r-bare","prompt_ids":[1],"max_tokens":2,"reply_to":"redlm:reply:"}' > /dev/null
wait_until 20 got r-bare || fail "r-bare not answered on redlm:reply:r-bare"
stream_json redlm:reply:r-bare | jq -r .error.message | grep -q "^reply_to 'redlm:reply:' is only the reply prefix" ||
    fail "r-bare: $(stream_json redlm:reply:r-bare)"
dead_for() { rcli --raw XRANGE redlm:dead - + | grep -c "\"id\":\"$1\""; }
refused() { [ "$(dead_for r-str)" -ge 1 ]; }
wait_until 20 refused || fail "no dead letter for r-str"
for k in victim redlm:reply:str redlm:jobs redlm:dead; do
    ttl=$(rcli TTL "$k")
    [ "$ttl" = -1 ] || fail "$k has TTL $ttl"
done
[ "$(rcli GET redlm:reply:str)" = v ] || fail "the string under redlm:reply:str changed"
for id in r-victim r-jobs r-str; do [ "$(dead_for $id)" = 1 ] || fail "$id: $(dead_for $id) dead letters"; done
rcli --raw XRANGE redlm:dead - + | grep -q reply_refused || fail "the r-str dead letter does not say reply_refused"
metrics() { curl -s "http://127.0.0.1:$MPORT/metrics"; }
errors_metric() { metrics | awk '$1 == "redlm:reply_write_errors_total" { print $2 }'; }
wait_until 5 [ "$(errors_metric)" = 1 ] 2>/dev/null
[ "$(errors_metric)" = 1 ] || fail "redlm:reply_write_errors_total $(errors_metric), want 1"
echo "1. reply keys confined: victim TTLs -1, 4 dead letters, reply_write_errors_total 1"

# 3. a readable id is always answered
declare -A want3=([m-nan]=invalid_request [m-inf]=invalid_request [m-ext]=invalid_encoding
                  [m-dup]=invalid_request [j-dup]=invalid_request [both]=invalid_request
                  [m-huge]=invalid_encoding [j-big]=invalid_request [j-inf]=invalid_request
                  [j-deep]=invalid_encoding)
mp() { rcli -x XADD redlm:jobs '*' "$@" > /dev/null; }
# {"id":"m-nan","prompt_ids":[1],"temperature":NaN}
printf '\x83\xa2id\xa5m-nan\xaaprompt_ids\x91\x01\xabtemperature\xcb\x7f\xf8\x00\x00\x00\x00\x00\x00' | mp msgpack
printf '\x83\xa2id\xa5m-inf\xaaprompt_ids\x91\x01\xabtemperature\xca\x7f\x80\x00\x00' | mp msgpack
printf '\x82\xa2id\xa5m-ext\xaaprompt_ids\xd4\x01\x01' | mp msgpack
printf '\x83\xa2id\xa5m-dup\xaaprompt_ids\x91\x01\xaaprompt_ids\x91\x02' | mp msgpack
rcli XADD redlm:jobs '*' json '{"id":"j-dup","prompt_ids":[1],"prompt_ids":[2]}' > /dev/null
# numbers JSON can spell but no field can hold (jansson refuses the whole text)
rcli XADD redlm:jobs '*' json '{"seed":18446744073709551615,"id":"j-big","prompt_ids":[1]}' > /dev/null
rcli XADD redlm:jobs '*' json '{"id":"j-inf","prompt_ids":[1],"temperature":1e999}' > /dev/null
rcli XADD redlm:jobs '*' json "{\"metadata\":$(printf '[%.0s' {1..3000})$(printf ']%.0s' {1..3000}),\"id\":\"j-deep\"}" > /dev/null
printf '\x81\xa2id\xa4both' > "$T/both.mp"
rcli XADD redlm:jobs '*' json '{"id":"both","prompt_ids":[1]}' msgpack "$(cat "$T/both.mp")" > /dev/null
# an array declaring 0xdca54e00 = 3,701,820,928 elements, in 20 bytes
t0=$(now)
printf '\x82\xa2id\xa6m-huge\xaaprompt_ids\xdd\xdc\xa5\x4e\x00' | mp msgpack
for id in "${!want3[@]}"; do
    wait_until 20 got "$id" || fail "$id not answered"
    [ "$(code_of "$id")" = "${want3[$id]}" ] || fail "$id: got '$(code_of "$id")', want ${want3[$id]}"
done
echo "3. every readable id answered (${#want3[@]} entries); the 3.7e9-element array refused in $(since "$t0") s"
kill -0 "$W" || fail "worker died"
rss=$(awk '/VmHWM/ { print $2 }' /proc/$W/status)
[ "$rss" -lt 4000000 ] || fail "worker peak RSS ${rss} kB"

# 4. duplicate ids
rcli XADD redlm:jobs '*' json '{"id":"dup","prompt_ids":[1],"max_tokens":400,"ignore_eos":true,"stream":false}' > /dev/null
running() { [ "$(rcli HEXISTS redlm:jobs:running dup)" = 1 ]; }
wait_until 20 running || fail "dup never started"
rcli XADD redlm:jobs '*' json '{"id":"dup","prompt_ids":[2],"max_tokens":5}' > /dev/null
dup_done() { stream_json redlm:reply:dup | grep -q '"event":"done"'; }
wait_until 60 dup_done || fail "the first dup never finished"
ev=$(stream_json redlm:reply:dup)
[ "$(echo "$ev" | jq -r 'select(.event == "error") | .error.code')" = duplicate_id ] || fail "no duplicate_id: $ev"
[ "$(echo "$ev" | jq -s 'map(select(.event == "done")) | .[0].token_ids | length')" = 400 ] ||
    fail "the first dup did not run to the end: $ev"
[ "$(rcli HEXISTS redlm:jobs:running dup)" = 0 ] || fail "dup still marked running"
printf '%s\n' '{"id":"a","prompt_ids":[1]}' '{"id":"b","prompt_ids":[1]}' '{"id":"a","prompt_ids":[2]}' > "$T/dup.jsonl"
t0=$(now)
"$REDLM" submit --redis "$(URL)" --input "$T/dup.jsonl" --output "$T/dup-out.jsonl" 2> "$T/dup-submit.log" &&
    fail "submit accepted an input with a repeated id"
took=$(since "$t0")
grep -q "line 3 has the id 'a' of line 1" "$T/dup-submit.log" || fail "submit: $(cat "$T/dup-submit.log")"
awk -v t="$took" 'BEGIN { exit !(t < 5) }' || fail "submit took $took s to refuse"
echo "4. duplicate_id answered, the first job ran; submit refused the file in $took s"

# 5a. settings refused at start
"$REDLM" worker --model "$MODEL" --redis "$(URL)" --dead redlm:jobs 2> "$T/cfg.log" && fail "--dead redlm:jobs accepted"
grep -q "both 'redlm:jobs'" "$T/cfg.log" || fail "--dead redlm:jobs: $(cat "$T/cfg.log")"
"$REDLM" worker --model "$MODEL" --redis "$(URL)" --cancel redlm:dead 2> "$T/cfg.log" && fail "--cancel redlm:dead accepted"
"$REDLM" worker --model "$MODEL" --redis "$(URL)" --reply-prefix redlm: 2> "$T/cfg.log" &&
    fail "a reply prefix over the job stream accepted"

# 5b. 100,000 tiny jobs (refused at once: max_tokens -1), all replying to one stream
t0=$(now)
rcli EVAL "for i = 1, 100000 do redis.call('XADD', KEYS[1], '*', 'json', '{\"id\":\"t' .. i .. '\",\"prompt_ids\":[1],\"max_tokens\":-1,\"reply_to\":\"redlm:reply:bulk\"}') end return 1" 1 redlm:jobs > /dev/null
mem_before=$(rcli MEMORY USAGE redlm:jobs)
total=$(added redlm:jobs)
wait_until 300 all_acked "$total" || fail "bulk: read $(group entries-read) of $total, pending $(group pending)"
trimmed() { [ "$(rcli XLEN redlm:jobs)" -le 100 ]; }
wait_until 20 trimmed || fail "job stream not trimmed: XLEN $(rcli XLEN redlm:jobs)"
echo "5. 100,000 jobs answered and the job stream trimmed in $(since "$t0") s: XLEN $(rcli XLEN redlm:jobs)," \
     "$(rcli MEMORY USAGE redlm:jobs) bytes (was $mem_before); dead letters $(rcli XLEN redlm:dead) (--dead-maxlen 1000)"
[ "$(rcli XLEN redlm:dead)" -le 1200 ] || fail "dead letters not capped: $(rcli XLEN redlm:dead)"
[ "$(rcli XLEN redlm:reply:bulk)" = 100000 ] || fail "bulk replies: $(rcli XLEN redlm:reply:bulk)"
kill -TERM "$W"; wait "$W" || fail "worker exit status $?"
PIDS=()

# 5c. logins: a wrong password ends the start after --redis-wait; a rotated
# one ends a running worker after --redis-wait, with backoff meanwhile
rcli ACL SETUSER alice on '>secret-1' '~*' '&*' '+@all' > /dev/null
t0=$(now)
"$REDLM" worker --model "$MODEL" --redis "redis://alice:wrong-pw@127.0.0.1:$RPORT" --redis-wait 2 2> "$T/auth.log" &&
    fail "a wrong password was accepted"
grep -q "user 'alice'" "$T/auth.log" || fail "the message does not name the user: $(cat "$T/auth.log")"
grep -q "wrong-pw" "$T/auth.log" && fail "the message shows the password"
echo "   wrong password: exit after $(since "$t0") s (--redis-wait 2): $(tail -1 "$T/auth.log" | cut -c1-160)"
"$REDLM" worker --model "$MODEL" --redis "redis://alice:secret-1@127.0.0.1:$RPORT" --consumer al --threads 1 \
    --redis-wait 3 > "$T/al.log" 2>&1 &
AL=$!
PIDS+=("$AL")
wait_until 30 up al || fail "worker al did not start"
conns0=$(rcli INFO stats | awk -F: '/^total_connections_received/ { print $2 + 0 }')
t0=$(now)
rcli ACL SETUSER alice resetpass '>secret-2' > /dev/null
rcli CLIENT KILL USER alice > /dev/null
gone() { ! kill -0 "$AL" 2>/dev/null; }
wait_until 20 gone || fail "the worker kept running with a rotated password"
wait "$AL"; rc=$?
took=$(since "$t0")
conns=$(( $(rcli INFO stats | awk -F: '/^total_connections_received/ { print $2 + 0 }') - conns0 ))
[ "$rc" = 8 ] || fail "exit status $rc after the password rotated, want 8"
grep -q "user 'alice'" "$T/al.log" || fail "no message naming the user: $(tail -3 "$T/al.log")"
grep -q "secret-" "$T/al.log" && fail "a password in the log"
[ "$conns" -le 40 ] || fail "$conns connections in $took s: no backoff"
echo "   rotated password: exit 8 after $took s (--redis-wait 3), $conns connection attempts meanwhile"
rcli ACL SETUSER bob on '>pw' '~redlm:jobs*' '~redlm:dead' '~redlm:cancel' '~redlm:instances:*' '+@all' > /dev/null
"$REDLM" worker --model "$MODEL" --redis "redis://bob:pw@127.0.0.1:$RPORT" --consumer bob --threads 1 \
    > "$T/bob.log" 2>&1 &
BOB=$!
PIDS+=("$BOB")
wait_until 30 up bob || fail "worker bob did not start"
rcli XADD redlm:jobs '*' json '{"id":"acl","prompt_ids":[1],"max_tokens":2}' > /dev/null
wait_until 20 eval '[ "$(dead_for acl)" = 1 ]' || fail "no dead letter for acl: $(tail -2 "$T/bob.log")"
rcli --raw XRANGE redlm:dead - + | grep -a '"id":"acl"' -A 2 | grep -q reply_refused ||
    fail "the acl dead letter does not say reply_refused: $(rcli --raw XRANGE redlm:dead - + | grep -a -A 2 '"id":"acl"')"
wait_until 10 eval '[ "$(pending_count)" = 0 ]' || fail "acl still pending"
kill -TERM "$BOB"; wait "$BOB" || fail "bob exit status $?"
echo "   reply streams outside the user's keys: a reply_refused dead letter"

# 5d. carl's ACL loses the dead-letter stream while it runs "held1"; "held2"
# (bad: max_tokens -1) comes meanwhile; fixer, a worker allowed everything,
# takes both once carl has left them idle
rcli ACL SETUSER carl on '>pw' '~redlm:*' '+@all' > /dev/null
CPORT=$(free_port)
"$REDLM" worker --model "$MODEL" --redis "redis://carl:pw@127.0.0.1:$RPORT" --consumer carl --threads 1 \
    --claim-idle-ms 1500 --metrics-port "$CPORT" > "$T/carl.log" 2>&1 &
CARL=$!
PIDS+=("$CARL")
wait_until 30 up carl || fail "worker carl did not start"
e1=$(rcli XADD redlm:jobs '*' json '{"id":"held1","prompt_ids":[1,2],"max_tokens":2000,"ignore_eos":true,"stream":false}')
runs_held1() { [ "$(rcli HGET redlm:jobs:running held1)" = "$e1" ]; }
wait_until 20 runs_held1 || fail "carl did not start held1"
rcli ACL SETUSER carl resetkeys '~redlm:jobs*' '~redlm:reply:*' '~redlm:cancel' '~redlm:instances:*' > /dev/null
rcli CONFIG RESETSTAT > /dev/null
e2=$(rcli XADD redlm:jobs '*' json '{"id":"held2","prompt_ids":[1],"max_tokens":-1}')
said() { grep -q "Redis refuses this worker's writes: user 'carl' may not write redlm:dead (its ACL key patterns leave it out: NOPERM" "$T/carl.log"; }
wait_until 10 said || fail "carl did not say which key: $(tail -3 "$T/carl.log")"
sleep 8 # carl looks again after 1, 2 and 4 s
refused=$(rcli INFO commandstats | awk -F'[=,]' '/^cmdstat_fcall:/ { print $8 + 0 }')
[ "$refused" -le 8 ] || fail "$refused FCALLs refused in 8 s: no backoff"
pend=$(rcli XPENDING redlm:jobs redlm - + 10)
echo "$pend" | grep -qx "$e1" || fail "held1 not left pending: $pend"
[ "$(rcli XLEN redlm:reply:held1)" = 0 ] || fail "held1 answered while carl's writes are refused"
[ "$(dead_for held2)" = 0 ] || fail "a dead letter for held2 from carl"
kill -0 "$CARL" || fail "carl stopped"
# operators see it: the heartbeat, `redlm status`, the metrics
carl_state() { rcli HGET redlm:instances:carl state; }
carl_held() { curl -s "http://127.0.0.1:$CPORT/metrics" | awk '$1 == "redlm:writes_held" { print $2 }'; }
[ "$(carl_state)" = held ] || fail "carl's heartbeat says $(carl_state)"
[ "$(carl_held)" = 1 ] || fail "redlm:writes_held $(carl_held) while carl holds"
st=$("$REDLM" status --redis "$(URL)")
echo "$st" | grep -q '^carl  *held ' || fail "status has no held row for carl: $st"
echo "$st" | grep -q "carl holds: Redis refuses its writes (may not write redlm:dead: NOPERM" ||
    fail "status does not say why carl holds: $st"
start_worker fixer --claim-idle-ms 1500
FIXER=$LAST_PID
both_done() { stream_json redlm:reply:held1 | grep -q '"event":"done"' && [ "$(dead_for held2)" = 1 ] &&
              [ "$(pending_count)" = 0 ]; }
# 2,000 tokens again, on fixer (under ASan on two busy cores, some 30 s)
wait_until 120 both_done || fail "fixer did not answer held1 and held2: $(rcli XPENDING redlm:jobs redlm - + 10); $(tail -3 "$T/fixer.log")"
[ "$(stream_json redlm:reply:held1 | jq -sc 'map({event, attempt})')" = '[{"event":"done","attempt":2}]' ] ||
    fail "held1: $(stream_json redlm:reply:held1 | jq -c '{event, attempt}')"
[ "$(stream_json redlm:reply:held2 | jq -r .error.code)" = invalid_request ] || fail "held2: $(stream_json redlm:reply:held2)"
kill -TERM "$FIXER"; wait "$FIXER" || fail "fixer exit status $?"
rcli ACL SETUSER carl '~redlm:dead' > /dev/null
resumed() { grep -q "Redis accepts this worker's writes again" "$T/carl.log"; }
wait_until 40 resumed || fail "carl did not resume: $(tail -2 "$T/carl.log")"
wait_until 5 eval '[ "$(carl_state)" = serving ] && [ "$(carl_held)" = 0 ]' ||
    fail "carl resumed, but its heartbeat says $(carl_state), redlm:writes_held $(carl_held)"
"$REDLM" status --redis "$(URL)" | grep -q "carl holds" && fail "status still says carl holds"
rcli XADD redlm:jobs '*' json '{"id":"after","prompt_ids":[1],"max_tokens":2}' > /dev/null
wait_until 20 eval 'stream_json redlm:reply:after | grep -q done' || fail "no answer after carl resumed"
[ "$(stream_json redlm:reply:held1 | wc -l)" = 1 ] || fail "held1 answered twice: $(stream_json redlm:reply:held1 | jq -c '{event, attempt}')"
kill -TERM "$CARL"; wait "$CARL" || fail "carl exit status $?"
echo "   the dead-letter stream outside carl's keys: nothing acknowledged, $refused FCALLs refused in 8 s;" \
     "fixer answered held1 and held2; carl resumed"

# 5e. keys of another type: at the start, the worker stops naming the
# key.  While two run, the running hash SET to a string: tw1's XACK (after
# its answer), then tw2's start are refused; each time the worker holds,
# the entry left pending and kept fresh (the other worker, claiming after
# the same 1.5 s, does not run tw1 again), nothing acknowledged
# unanswered; once the key is deleted each is answered, once; then the
# same for a dead letter refused by a dead-letter stream of another type
rcli SET redlm:jobs:running not-a-hash > /dev/null
rc=0; "$REDLM" worker --model "$MODEL" --redis "$(URL)" --consumer typed0 --threads 1 > "$T/typed0.log" 2>&1 || rc=$?
[ $rc = 8 ] || fail "a worker over a running hash of another type: exit $rc"
grep -q "redlm:jobs:running holds a string where this pool keeps a hash .*DEL it" "$T/typed0.log" ||
    fail "the start did not name the key: $(tail -2 "$T/typed0.log")"
rcli DEL redlm:jobs:running > /dev/null
start_worker typed --claim-idle-ms 1500
TYPED=$LAST_PID
start_worker typed2 --claim-idle-ms 1500
TYPED2=$LAST_PID
wait_until 30 up typed || fail "worker typed did not start"
wait_until 30 up typed2 || fail "worker typed2 did not start"
typed_state() { rcli HGET redlm:instances:typed state; rcli HGET redlm:instances:typed2 state; }
holds() { typed_state | grep -qx held; }
done_count() { stream_json "redlm:reply:$1" | grep -c '"event":"done"'; }
e1=$(rcli XADD redlm:jobs '*' json '{"id":"tw1","prompt_ids":[1,2],"max_tokens":2000,"ignore_eos":true}')
wait_until 20 eval '[ "$(rcli HGET redlm:jobs:running tw1)" = "$e1" ]' || fail "tw1 did not start"
rcli DEL redlm:jobs:running > /dev/null
rcli SET redlm:jobs:running not-a-hash > /dev/null
wait_until 120 holds || fail "no worker holds after tw1's XACK: $(tail -3 "$T/typed.log")"
{ rcli HGET redlm:instances:typed held; rcli HGET redlm:instances:typed2 held; } |
    grep -q "redlm:jobs:running holds a string" || fail "no heartbeat names the key"
sleep 3 # twice the other worker's --claim-idle-ms
[ "$(done_count tw1)" = 1 ] || fail "tw1 held without its answer"
rcli XPENDING redlm:jobs redlm - + 10 | grep -qx "$e1" || fail "tw1 acknowledged while its XACK was refused"
rcli DEL redlm:jobs:running > /dev/null
wait_until 60 eval '[ "$(pending_count)" = 0 ]' || fail "tw1 not acknowledged after the key was deleted"
rcli SET redlm:jobs:running not-a-hash > /dev/null
e2=$(rcli XADD redlm:jobs '*' json '{"id":"tw2","prompt_ids":[3],"max_tokens":2}')
wait_until 30 holds || fail "no worker holds after tw2's start: $(tail -3 "$T/typed.log")"
sleep 1
rcli XPENDING redlm:jobs redlm - + 10 | grep -qx "$e2" || fail "tw2 not left pending"
[ "$(done_count tw2)" = 0 ] || fail "tw2 answered while its start was refused"
rcli DEL redlm:jobs:running > /dev/null
typed_done() { [ "$(pending_count)" = 0 ] && [ "$(done_count tw2)" = 1 ]; }
wait_until 90 typed_done || fail "tw2 not answered after the key was deleted: $(rcli XPENDING redlm:jobs redlm - + 10); $(tail -3 "$T/typed.log")"
[ "$(done_count tw1)" = 1 ] || fail "tw1 answered $(done_count tw1) times"
wait_until 5 eval '[ "$(typed_state | sort -u)" = serving ]' || fail "the states: $(typed_state)"
# the dead-letter stream SET to a string: a failed job's dead letter is
# refused; its worker holds (the job kept fresh: not failed again by the
# other), and writes it once the key is deleted
rcli DEL redlm:dead > /dev/null
rcli SET redlm:dead not-a-stream > /dev/null
e3=$(rcli XADD redlm:jobs '*' json '{"id":"tw3","prompt_ids":[3],"max_tokens":-1}')
wait_until 30 holds || fail "no worker holds after tw3's dead letter: $(tail -3 "$T/typed.log")"
{ rcli HGET redlm:instances:typed held; rcli HGET redlm:instances:typed2 held; } |
    grep -q "redlm:dead holds a string where this pool keeps a stream" || fail "no heartbeat names redlm:dead"
sleep 3 # twice the other worker's --claim-idle-ms
rcli XPENDING redlm:jobs redlm - + 10 | grep -qx "$e3" || fail "tw3 acknowledged without its dead letter"
rcli DEL redlm:dead > /dev/null
wait_until 60 eval '[ "$(pending_count)" = 0 ] && [ "$(dead_for tw3)" = 1 ]' ||
    fail "tw3's dead letter not written after the key was deleted: $(tail -3 "$T/typed.log")"
[ "$(stream_json redlm:reply:tw3 | grep -c '"event":"error"')" = 1 ] || fail "tw3 answered $(stream_json redlm:reply:tw3 | grep -c '"event":"error"') times"
wait_until 5 eval '[ "$(typed_state | sort -u)" = serving ]' || fail "the states: $(typed_state)"
kill -TERM "$TYPED" "$TYPED2"; wait "$TYPED" "$TYPED2" || fail "typed exit status $?"
echo "   keys of another type: the start refused (exit 8) naming the key; a refused XACK, start and" \
     "dead letter held, nothing acknowledged unanswered; each job answered once"

# 5f. an ACL that denies a command the functions use (HGET): the start is
# refused; the worker holds, keeping the job (fresh, its delivery count 1,
# not failed as too_many_deliveries), says it once, and starts it once
# the command is allowed: one answer, attempt 1
rcli ACL SETUSER dana on '>pw' '~*' '&*' '+@all' '-hget' > /dev/null
"$REDLM" worker --model "$MODEL" --redis "redis://dana:pw@127.0.0.1:$RPORT" --consumer dana --threads 1 \
    --claim-idle-ms 1500 > "$T/dana.log" 2>&1 &
DANA=$!
PIDS+=("$DANA")
wait_until 30 up dana || fail "worker dana did not start"
e1=$(rcli XADD redlm:jobs '*' json '{"id":"dj1","prompt_ids":[1],"max_tokens":2}')
wait_until 20 eval '[ "$(rcli HGET redlm:instances:dana state)" = held ]' || fail "dana does not hold: $(tail -2 "$T/dana.log")"
sleep 8 # 1 + 2 + 4 s of looks, each resume refused again
p=$(rcli XPENDING redlm:jobs redlm - + 10 | paste -sd ' ')
[ "$(echo "$p" | awk '{ print $1, $2, $4 }')" = "$e1 dana 1" ] || fail "dj1 pending as: $p"
[ "$(rcli XLEN redlm:reply:dj1)" = 0 ] || fail "dj1 answered while its start is refused"
[ "$(grep -c "Redis refuses this worker's writes" "$T/dana.log")" = 1 ] || fail "the hold said $(grep -c "Redis refuses this worker's writes" "$T/dana.log") times"
rcli ACL SETUSER dana '+hget' > /dev/null
wait_until 60 eval 'stream_json redlm:reply:dj1 | grep -q "\"event\":\"done\""' || fail "dj1 not answered once allowed: $(tail -2 "$T/dana.log")"
[ "$(stream_json redlm:reply:dj1 | jq -sc 'map({event, attempt})')" = '[{"event":"done","attempt":1}]' ] ||
    fail "dj1: $(stream_json redlm:reply:dj1 | jq -c '{event, attempt}')"
wait_until 10 eval '[ "$(pending_count)" = 0 ]' || fail "dj1 not acknowledged"
kill -TERM "$DANA"; wait "$DANA" || fail "dana exit status $?"
echo "   a command the functions use denied by ACL: held, the job kept at delivery 1, answered once when allowed"

# 6. x (refreshing every 0.5 s) frozen while running "del", its entry
# deleted meanwhile, and y (claim-idle 1 s) looking at the idle entry
rcli MONITOR > "$T/monitor.txt" 2> /dev/null &
PIDS+=("$!")
start_worker x --claim-idle-ms 1500
X=$LAST_PID
wait_until 30 up x || fail "x did not start"
e=$(rcli XADD redlm:jobs '*' json '{"id":"del","prompt_ids":[1,2],"max_tokens":4000,"ignore_eos":true,"stream":false}')
held() { rcli XPENDING redlm:jobs redlm - + 1 x | grep -qx "$e"; }
wait_until 20 held || fail "x did not take del: $(rcli XPENDING redlm:jobs redlm - + 10)"
kill -STOP "$X"
rcli XDEL redlm:jobs "$e" > /dev/null
start_worker y --claim-idle-ms 1000
Y=$LAST_PID
looked() { grep -q "\"redlm_claim_v[0-9]*\".*\"$e\"" "$T/monitor.txt"; }
wait_until 30 looked || fail "y never looked at the idle entry $e"
kill -CONT "$X"
del_done() { [ "$(pending_count)" = 0 ]; }
# 4,000 tokens keep x busy past the freeze on a fast machine; under ASan on
# two busy cores they take over a minute
wait_until 300 del_done || fail "del still pending: $(rcli XPENDING redlm:jobs redlm - + 10)"
ev=$(stream_json redlm:reply:del | jq -c '{event, attempt, n: (.token_ids | length)}')
[ "$ev" = '{"event":"done","attempt":1,"n":4000}' ] || fail "del: $ev; x: $(grep del "$T/x.log" | tail -2)"
grep -q "\"redlm_refresh_v[0-9]*\".*\"$e\"" "$T/monitor.txt" || echo "   (del finished before x's first refresh)"
echo "6. a job whose entry was deleted while it ran answered once, attempt 1"
kill -TERM "$X" "$Y"; wait "$X" "$Y" || fail "x or y exit status $?"

# 7. k killed (SIGKILL) while running "gone", whose entry is deleted; s reaps it
start_worker k
K=$LAST_PID
wait_until 30 up k || fail "k did not start"
e=$(rcli XADD redlm:jobs '*' json '{"id":"gone","prompt_ids":[1,2],"max_tokens":4000,"ignore_eos":true,"stream":false}')
runs_gone() { [ "$(rcli HGET redlm:jobs:running gone)" = "$e" ]; }
wait_until 20 runs_gone || fail "k did not start gone: $(rcli XPENDING redlm:jobs redlm - + 10)"
kill -KILL "$K"; wait "$K" 2>/dev/null
rcli XDEL redlm:jobs "$e" > /dev/null
t0=$(now)
start_worker s
S=$LAST_PID
# the value after a field name in the newest dead letter
dead_field() { rcli --raw XREVRANGE redlm:dead + - COUNT 1 | awk -v f="$1" 'p { print; exit } $0 == f { p = 1 }'; }
dead_gone() { [ "$(dead_field entry)" = "$e" ]; }
# k's heartbeat lives 10 s after its last beat
wait_until 30 dead_gone || fail "no dead letter for the deleted entry $e: $(dead_field error); s: $(tail -3 "$T/s.log")"
took=$(since "$t0")
[ "$(dead_field error | jq -r .code)" = entry_deleted ] || fail "dead letter: $(dead_field error)"
dead_field error | jq -r .message | grep -q "^entry $e was deleted from redlm:jobs .*consumer k.* ran job 'gone'" ||
    fail "dead letter message: $(dead_field error)"
[ "$(dead_field stream)" = redlm:jobs ] && [ "$(dead_field consumer)" = s ] && [ "$(dead_field attempt)" = 1 ] ||
    fail "dead letter: $(rcli --raw XREVRANGE redlm:dead + - COUNT 1 | paste -sd ' ')"
[ "$(pending_count)" = 0 ] || fail "still pending: $(rcli XPENDING redlm:jobs redlm - + 10)"
[ "$(rcli HEXISTS redlm:jobs:running gone)" = 0 ] || fail "gone still marked running"
grep -q "entry $e was deleted from redlm:jobs.*dead letter entry_deleted written to redlm:dead" "$T/s.log" ||
    fail "s did not say so: $(tail -3 "$T/s.log")"
[ "$(rcli XLEN redlm:reply:gone)" = 0 ] || fail "gone was run again: $(stream_json redlm:reply:gone | head -2)"
echo "7. a deleted entry of a killed worker dead-lettered (entry_deleted) and acknowledged $took s after the kill"
kill -TERM "$S"; wait "$S" || fail "s exit status $?"
echo "ok: reply keys, readable ids, duplicate ids, settings, logins, trimming, deleted entries, of dead workers too"
