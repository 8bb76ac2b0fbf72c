#!/usr/bin/env bash
# test_worker_submit.sh: `redlm submit` against a worker: results in input
# order equal to `redlm generate`'s, ids assigned when missing, a bad line
# and ids the worker could not answer under answered locally, resumed runs
# (output cut mid-line, or between the two samples of an n = 2 job) that
# submit only the jobs missing from the output, replies holding U+0000,
# --window, the progress line on a terminal, a rerun while the stopped run's
# jobs still run, and workers under another --reply-prefix.  Workers and
# generate run --batch-invariant: the jobs beside a job (other in each run,
# and in a resumed one) would otherwise move its logits' last bits, which on
# some CPUs flips a near-tied greedy token or a draw.
source "$(dirname "$0")/worker_lib.sh"

GEN=("$REDLM" generate --model "$MODEL" --threads 1 --batch-invariant)
start_redis
start_worker w --batch-invariant
W=$LAST_PID
for i in $(seq 1 60); do
    if [ $((i % 10)) = 0 ]; then
        echo "{\"prompt_ids\":[$i,2],\"max_tokens\":5,\"temperature\":0.7,\"seed\":$i,\"n\":2}"
    else
        echo "{\"id\":\"s$i\",\"prompt_ids\":[$i,3,4],\"max_tokens\":$((i % 6 + 2)),\"temperature\":0,\"stream\":$([ $((i % 2)) = 0 ] && echo true || echo false)}"
    fi
done > "$T/in.jsonl"
echo 'not a request' >> "$T/in.jsonl"

"$REDLM" submit --redis "$(URL)" --input "$T/in.jsonl" --output "$T/out.jsonl" --window 8 2> "$T/submit.log" ||
    fail "submit failed: $(cat "$T/submit.log")"
[ "$(wc -l < "$T/out.jsonl")" = 67 ] || fail "want 67 result lines (60 + 6 second samples + 1 error), got $(wc -l < "$T/out.jsonl")"
tail -1 "$T/out.jsonl" | jq -e '.event == "error" and .error.code == "invalid_request"' > /dev/null || fail "bad line not answered"
jq -e -s 'map(select(.id | startswith("job"))) | length == 13' "$T/out.jsonl" > /dev/null || fail "ids not assigned"

# the same requests offline, with the same ids
head -60 "$T/in.jsonl" | jq -c --argjson ids "$(jq -s '[.[] | select(.index == 0 or .event == "error") | .id]' "$T/out.jsonl")" \
    '. + {id: $ids[input_line_number - 1]}' > "$T/gen-in.jsonl"
"${GEN[@]}" --input "$T/gen-in.jsonl" --output "$T/gen.jsonl" 2> "$T/gen.log" ||
    fail "generate failed"
diff <(jq -c '[.id, .index, .token_ids]' "$T/gen.jsonl") <(head -66 "$T/out.jsonl" | jq -c '[.id, .index, .token_ids]') > "$T/diff" ||
    fail "submit results differ from generate (or are out of order): $(head -4 "$T/diff")"

# resume: keep 20 lines and half of the 21st, as a killed run would leave it
head -20 "$T/out.jsonl" > "$T/resume.jsonl"
sed -n 21p "$T/out.jsonl" | head -c 30 >> "$T/resume.jsonl"
before=$(added redlm:jobs)
"$REDLM" submit --redis "$(URL)" --input "$T/in.jsonl" --output "$T/resume.jsonl" --window 8 2> "$T/submit2.log" ||
    fail "resumed submit failed"
sent=$(( $(added redlm:jobs) - before ))
done_before=$(head -20 "$T/out.jsonl" | jq -r .id | sort -u | wc -l)
[ "$sent" = $((60 - done_before)) ] || fail "resume submitted $sent jobs, want $((60 - done_before))"
diff <(jq -c '[.id, .index, .token_ids]' "$T/out.jsonl") <(jq -c '[.id, .index, .token_ids]' "$T/resume.jsonl") > "$T/diff" ||
    fail "resumed output differs: $(head -4 "$T/diff")"
# resume after a kill between the two samples of line 20's job (n = 2):
# that job's first sample is cut and the job runs again
head -21 "$T/out.jsonl" > "$T/resume2.jsonl"
[ "$(sed -n 21p "$T/out.jsonl" | jq -c '[.index, (.id | startswith("job"))]')" = '[0,true]' ] ||
    fail "line 21 of the output is not the first sample of line 20's job"
before=$(added redlm:jobs)
"$REDLM" submit --redis "$(URL)" --input "$T/in.jsonl" --output "$T/resume2.jsonl" --window 8 2> "$T/submit3.log" ||
    fail "resumed submit (half a job) failed: $(cat "$T/submit3.log")"
sent2=$(( $(added redlm:jobs) - before ))
[ "$sent2" = $((60 - done_before)) ] || fail "resume after half a job submitted $sent2 jobs, want $((60 - done_before))"
diff <(jq -c '[.id, .index, .token_ids]' "$T/out.jsonl") <(jq -c '[.id, .index, .token_ids]' "$T/resume2.jsonl") > "$T/diff" ||
    fail "output resumed after half a job differs: $(head -4 "$T/diff")"
# a rerun with every line answered in the output reads on through them:
# each window of them waited a second for replies that never come (30 s
# here at --window 2)
cp "$T/out.jsonl" "$T/all.jsonl"
before=$(added redlm:jobs)
t0=$(date +%s.%N)
timeout 60 "$REDLM" submit --redis "$(URL)" --input "$T/in.jsonl" --output "$T/all.jsonl" --window 2 \
    2> "$T/submit-all.log" || fail "rerun with every line answered: exit $? $(cat "$T/submit-all.log")"
secs=$(echo "$t0 $(date +%s.%N)" | awk '{ printf "%.2f", $2 - $1 }')
[ "$(added redlm:jobs)" = "$before" ] && cmp -s "$T/out.jsonl" "$T/all.jsonl" ||
    fail "rerun with every line answered submitted jobs or changed the output"
awk -v s="$secs" 'BEGIN { exit !(s < 5) }' || fail "rerun with every line answered took $secs s"
echo "rerun with all 61 lines answered: $secs s"

# ids the worker cannot answer under (not a string, empty, holding U+0000,
# too long) are answered locally: sent, they got a dead letter alone and
# submit waited for their answers for ever
{ printf '%s\n' '{"id":5,"prompt_ids":[1],"max_tokens":1}' '{"id":"","prompt_ids":[1],"max_tokens":1}' \
      '{"id":null,"prompt_ids":[1],"max_tokens":1}' '{"id":"a\u0000b","prompt_ids":[1],"max_tokens":1}'
  printf '{"id":"%s","prompt_ids":[1],"max_tokens":1}\n' "$(head -c 2000 /dev/zero | tr '\0' x)"
  echo '{"id":"ok","prompt_ids":[1],"max_tokens":1}'
  # a repeated key, refused as generate and the worker refuse it (sent
  # again as one object, the last value won)
  echo '{"id":"twice","prompt_ids":[1],"max_tokens":1,"max_tokens":2}'; } > "$T/bad-ids.jsonl"
timeout 30 "$REDLM" submit --redis "$(URL)" --input "$T/bad-ids.jsonl" --output "$T/bad-ids-out.jsonl" \
    2> "$T/submit-ids.log" || fail "submit with unreadable ids: exit $? $(cat "$T/submit-ids.log")"
jq -e -s 'length == 7 and all(.[:5][]; .error.code == "invalid_request" and (.error.message | contains("field '"'id'"'")))
          and .[5].event == "done" and (.[6].error.message | contains("duplicate object key"))' \
    "$T/bad-ids-out.jsonl" > /dev/null || fail "unreadable ids: $(jq -c '{id, error}' "$T/bad-ids-out.jsonl" | cut -c1-200)"

# a generated text holding U+0000 (token 188 is byte 0 of the fixture's
# byte-level vocab), streamed and not: through submit and through a resume
printf '%s\n' '{"id":"nul-s","prompt_ids":[141,11,7,9],"max_tokens":12,"temperature":0,"stream":true}' \
    '{"id":"nul-d","prompt_ids":[141,11,7,9],"max_tokens":12,"temperature":0,"stream":false}' > "$T/nul.jsonl"
"${GEN[@]}" --input "$T/nul.jsonl" --output "$T/nul-gen.jsonl" 2>> "$T/gen.log" ||
    fail "generate failed"
jq -e -s 'length == 2 and all(.text | contains("\u0000"))' "$T/nul-gen.jsonl" > /dev/null ||
    fail "the fixture's replies no longer hold U+0000: $(cat "$T/nul-gen.jsonl")"
timeout 60 "$REDLM" submit --redis "$(URL)" --input "$T/nul.jsonl" --output "$T/nul-out.jsonl" 2> "$T/submit-nul.log" ||
    fail "submit with U+0000 in the replies: exit $?"
same() { diff <(jq -c '[.id, .token_ids, .text]' "$1") <(jq -c '[.id, .token_ids, .text]' "$2") > "$T/diff"; }
same "$T/nul-gen.jsonl" "$T/nul-out.jsonl" || fail "U+0000 replies differ from generate: $(head -4 "$T/diff")"
head -1 "$T/nul-out.jsonl" > "$T/nul-resume.jsonl"
before=$(added redlm:jobs)
timeout 60 "$REDLM" submit --redis "$(URL)" --input "$T/nul.jsonl" --output "$T/nul-resume.jsonl" 2>> "$T/submit-nul.log" ||
    fail "resumed submit with U+0000 in the output: exit $?"
[ $(( $(added redlm:jobs) - before )) = 1 ] || fail "resume after a U+0000 result sent $(( $(added redlm:jobs) - before )) jobs, want 1"
same "$T/nul-gen.jsonl" "$T/nul-resume.jsonl" || fail "resumed U+0000 output differs: $(head -4 "$T/diff")"

# --window 4: with no worker on its stream, submit puts out exactly 4 jobs
# and waits; once a worker runs them, jobs out minus results written never
# exceeds 4 (the queue length is read first, so it is never overstated)
for i in $(seq 1 20); do
    echo "{\"id\":\"win$i\",\"prompt_ids\":[$i,5],\"max_tokens\":40,\"ignore_eos\":true,\"temperature\":0}"
done > "$T/win.jsonl"
"$REDLM" submit --redis "$(URL)" --stream redlm:win --input "$T/win.jsonl" --output "$T/win-out.jsonl" --window 4 \
    2> "$T/submit-win.log" &
SUB=$!
PIDS+=("$SUB")
queued() { [ "$(added redlm:win)" = "$1" ]; }
wait_until 20 queued 4 || fail "submit --window 4 queued $(added redlm:win) jobs"
sleep 0.5
queued 4 || fail "submit --window 4 queued $(added redlm:win) jobs with none answered"
start_worker w-win --stream redlm:win --batch-invariant
end=$(( $(date +%s) + 60 ))
while [ "$(wc -l < "$T/win-out.jsonl")" -lt 20 ]; do
    out=$(added redlm:win)
    written=$(wc -l < "$T/win-out.jsonl")
    [ $((out - written)) -le 4 ] || fail "$out jobs queued and $written results written: over --window 4"
    [ "$(date +%s)" -lt "$end" ] || fail "submit --window 4 wrote $written of 20 results"
    sleep 0.02
done
wait "$SUB" || fail "submit --window 4 failed: $(cat "$T/submit-win.log")"
"${GEN[@]}" --input "$T/win.jsonl" --output "$T/win-gen.jsonl" 2>> "$T/gen.log" ||
    fail "generate failed"
same "$T/win-gen.jsonl" "$T/win-out.jsonl" || fail "--window 4 results differ from generate: $(head -4 "$T/diff")"

# the progress line (done, in flight, rate, ETA) goes to a terminal only
grep -q 'in flight' "$T/submit.log" && fail "progress line written to a file: $(head -c 300 "$T/submit.log")"
script -qec "'$REDLM' submit --redis '$(URL)' --input '$T/win.jsonl' --output '$T/tty-out.jsonl' --window 4" \
    /dev/null > "$T/tty.log" || fail "submit on a terminal failed: $(tail -c 300 "$T/tty.log")"
grep -aq '20/20 done, 0 in flight, 0 errors, 0 skipped, [0-9.]* jobs/s' "$T/tty.log" ||
    fail "no progress line on a terminal: $(tr '\r' '\n' < "$T/tty.log" | tail -3)"
same "$T/win-gen.jsonl" "$T/tty-out.jsonl" || fail "results on a terminal differ: $(head -4 "$T/diff")"

# a run stopped (here by --timeout) while its jobs still run, rerun at once
# with the same output: the jobs still running are submitted again once
# they are done, not written as duplicate_id errors.  The worker is frozen
# (SIGSTOP) from the moment the short jobs are written until the rerun has
# queued its jobs, so that the long ones still run when the worker reads the
# rerun's, however fast this machine runs them (the frozen worker's heartbeat
# goes stale meanwhile, and the rerun warns of it).
for i in 1 2 3 4; do
    echo "{\"id\":\"stop-$i\",\"prompt_ids\":[$i,9],\"max_tokens\":$((i <= 2 ? 4 : 1500)),\"ignore_eos\":true,\"temperature\":0}"
done > "$T/stop.jsonl"
"$REDLM" submit --redis "$(URL)" --input "$T/stop.jsonl" --output "$T/stop-out.jsonl" --timeout 1 2> "$T/stop1.log" &
STOP1=$!
short_written() { [ "$(cat "$T/stop-out.jsonl" 2> /dev/null | wc -l)" -ge 2 ]; }
wait_until 30 short_written || fail "the short jobs were not written: $(cat "$T/stop1.log")"
kill -STOP "$W"
wait "$STOP1"
[ $? = 124 ] || fail "submit --timeout 1 did not stop with 124: $(cat "$T/stop1.log")"
running() { [ "$(rcli HLEN redlm:jobs:running)" -ge 1 ]; }
running || fail "no job left running by the stopped run (the test needs one)"
before=$(added redlm:jobs)
timeout 60 "$REDLM" submit --redis "$(URL)" --input "$T/stop.jsonl" --output "$T/stop-out.jsonl" 2> "$T/stop2.log" &
STOP2=$!
requeued() { [ "$(added redlm:jobs)" -ge $((before + 2)) ]; }
wait_until 20 requeued
met=$?
kill -CONT "$W"
[ "$met" = 0 ] || fail "the rerun queued no job: $(cat "$T/stop2.log")"
wait "$STOP2" || fail "the rerun failed: $(cat "$T/stop2.log")"
grep -q "is running from an earlier submission" "$T/stop2.log" || fail "the rerun met no running job: $(cat "$T/stop2.log")"
jq -e -s 'length == 4 and all(.[]; .event == "done" and (.token_ids | length) == (if (.id | ltrimstr("stop-") | tonumber) <= 2 then 4 else 1500 end))' \
    "$T/stop-out.jsonl" > /dev/null || fail "the rerun's output: $(jq -c '{id, event, error}' "$T/stop-out.jsonl")"

# workers answering under another --reply-prefix: submit makes its reply
# stream under the prefix their heartbeats announce (under redlm:reply: every
# job was refused and answered where submit never read: it waited for ever)
start_worker w-app --stream redlm:app --reply-prefix app:reply: --batch-invariant
up_app() { [ "$(rcli HGET redlm:instances:w-app reply_prefix)" = app:reply: ]; }
wait_until 30 up_app || fail "w-app's heartbeat does not announce its reply prefix"
timeout 30 "$REDLM" submit --redis "$(URL)" --stream redlm:app --input "$T/win.jsonl" --output "$T/app-out.jsonl" \
    2> "$T/submit-app.log" || fail "submit to workers under app:reply: failed: $(tail -3 "$T/submit-app.log")"
same "$T/win-gen.jsonl" "$T/app-out.jsonl" || fail "results under app:reply: differ: $(head -4 "$T/diff")"
timeout 5 "$REDLM" submit --redis "$(URL)" --stream redlm:app --input "$T/win.jsonl" --output - \
    --reply-prefix other: > /dev/null 2> "$T/submit-other.log"
grep -q "live workers of redlm:app answer under 'app:reply:'" "$T/submit-other.log" ||
    fail "no warning for a --reply-prefix the workers do not use: $(cat "$T/submit-other.log")"

# a job stream key of another type: said so, exit 8
rcli SET str:jobs not-a-stream > /dev/null
rc=0; echo '{"id":"s1","prompt":"x","max_tokens":1}' | "$REDLM" submit --redis "$(URL)" --stream str:jobs --input - \
    --output "$T/str.out" 2> "$T/submit-str.log" || rc=$?
[ $rc = 8 ] && grep -q "str:jobs is not a stream (the key holds another type" "$T/submit-str.log" ||
    fail "a job stream of another type: exit $rc, $(cat "$T/submit-str.log")"

echo "ok: submit in input order equal to generate; resume sent $sent of 60; U+0000 in replies; --window 4; progress; another reply prefix; a stream key of another type"
