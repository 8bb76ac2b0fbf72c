#!/usr/bin/env bash
# test_outputs.sh: outputs that must not mislead (issue "the first hour"),
# one check each, all run even when one fails:
#   generate-keeps-output  a failed start (missing model: exit 3; no GPU:
#                          exit 6) or an interrupted run leaves an older
#                          --output as it was; SIGINT says what it kept,
#                          and while loading stops at once, leaving no
#                          temporary file
#   submit-stdout          submit --output - writes stdout, not a file "-"
#   submit-input-dir       submit --input DIR is an error, not "0 jobs"
#   submit-no-worker       submit warns within seconds when no live worker
#                          reads the stream; --timeout gives up saying counts
#   submit-progress        progress never shows negative or stale counts
#   code-once              an error message does not repeat its code
#   offline-fields         generate's results carry no seq / attempt
#   timing-ms              timings are whole milliseconds, not 17 digits
#   status-dead            status lists a killed worker apart, as dead, with
#                          its last heartbeat's age, not as a live instance
#   status-garbage         heartbeats holding control characters, over-long
#                          values, other types: one row each, no ESC or
#                          newline printed, rows by name; a --stream key
#                          that is not a stream is said so
source "$(dirname "$0")/worker_lib.sh"

failed=()
check() {   # check NAME FUNCTION: run it in a subshell, note a failure
    echo "--- $1"
    if ( BAD=0; "$2"; exit $BAD ); then echo "ok   $1"; else echo "FAIL $1"; failed+=("$1"); fi
}
bad() { echo "  $*" >&2; BAD=1; }
GEN=("$REDLM" generate --model "$MODEL" --threads 1)

generate_keeps_output() {
    echo '{"id":"a","prompt_ids":[1,2,3],"max_tokens":3}' > "$T/one.jsonl"
    echo "older results" > "$T/keep.jsonl"
    "$REDLM" generate --model "$T/nowhere" --input "$T/one.jsonl" --output "$T/keep.jsonl" 2> "$T/gk.err"
    rc=$?
    [ $rc = 3 ] || bad "missing model: exit $rc, want 3"
    [ "$(cat "$T/keep.jsonl")" = "older results" ] || bad "missing model: --output now holds '$(head -c 100 "$T/keep.jsonl")'"
    if ! command -v nvidia-smi > /dev/null; then
        "${GEN[@]}" --backend cuda --input "$T/one.jsonl" --output "$T/keep.jsonl" 2> "$T/gk.err"
        rc=$?
        [ $rc = 6 ] || bad "no GPU: exit $rc, want 6: $(cat "$T/gk.err")"
        [ "$(cat "$T/keep.jsonl")" = "older results" ] || bad "no GPU: --output now holds '$(head -c 100 "$T/keep.jsonl")'"
    fi
    ls "$T"/keep.jsonl.tmp* > /dev/null 2>&1 && bad "a temporary file was left: $(ls "$T"/keep.jsonl.tmp*)"
    # interrupted: long requests, SIGINT once the first results are out
    for i in $(seq 1 40); do
        echo "{\"id\":\"r$i\",\"prompt_ids\":[$i,2,3],\"max_tokens\":$((i * 40)),\"ignore_eos\":true}"
    done > "$T/long.jsonl"
    "${GEN[@]}" --input "$T/long.jsonl" --output "$T/keep.jsonl" --max-num-seqs 4 2> "$T/gk.err" &
    local pid=$! t0
    t0=$(date +%s)
    until ls "$T"/keep.jsonl.tmp* > /dev/null 2>&1 && [ -s "$(ls "$T"/keep.jsonl.tmp* | head -1)" ]; do
        kill -0 $pid 2> /dev/null || break
        [ $(( $(date +%s) - t0 )) -lt 60 ] || break
        sleep 0.05
    done
    kill -INT $pid
    wait $pid
    rc=$?
    [ $rc = 130 ] || bad "SIGINT: exit $rc, want 130: $(cat "$T/gk.err")"
    [ "$(cat "$T/keep.jsonl")" = "older results" ] || bad "SIGINT: --output now holds '$(head -c 100 "$T/keep.jsonl")'"
    local kept
    kept=$(sed -n 's/.*kept the results of the first \([0-9]*\) of 40.*/\1/p' "$T/gk.err")
    [ -n "$kept" ] || bad "SIGINT: no word of what was kept: $(cat "$T/gk.err")"
    [ "$(wc -l < "$T/keep.jsonl.partial" 2> /dev/null)" = "${kept:-x}" ] ||
        bad "SIGINT: said $kept kept, keep.jsonl.partial has $(wc -l < "$T/keep.jsonl.partial" 2>&1)"
    echo "  SIGINT kept $kept results in keep.jsonl.partial: $(cat "$T/gk.err")"
    # interrupted while loading (seconds of dummy weights): at once, saying so, no temporary left
    rm -f "$T/keep.jsonl.partial"
    "$REDLM" generate --model "$FIXTURES/configs/qwen2.5-0.5b.json" --load-format dummy --threads 1 \
        --input "$T/one.jsonl" --output "$T/keep.jsonl" 2> "$T/gl.err" &
    pid=$!
    until ls "$T"/keep.jsonl.tmp* > /dev/null 2>&1; do
        kill -0 $pid 2> /dev/null || break
        sleep 0.05
    done
    kill -INT $pid
    t0=$(date +%s%N)
    wait $pid
    rc=$?
    echo "  SIGINT while loading: exit $rc after $(( ($(date +%s%N) - t0) / 1000000 )) ms: $(tail -1 "$T/gl.err")"
    [ $rc = 130 ] || bad "SIGINT while loading: exit $rc, want 130: $(cat "$T/gl.err")"
    [ $(( ($(date +%s%N) - t0) / 1000000 )) -le 5000 ] || bad "SIGINT while loading: not at once"
    grep -q "interrupted (SIGINT) while starting: nothing was run; .*keep.jsonl is left as it was" "$T/gl.err" ||
        bad "SIGINT while loading: no word of it: $(cat "$T/gl.err")"
    [ "$(cat "$T/keep.jsonl")" = "older results" ] || bad "SIGINT while loading: --output now holds '$(head -c 100 "$T/keep.jsonl")'"
    ls "$T"/keep.jsonl.tmp* > /dev/null 2>&1 && bad "SIGINT while loading: a temporary file was left: $(ls "$T"/keep.jsonl.tmp*)"
    [ -e "$T/keep.jsonl.partial" ] && bad "SIGINT while loading: a .partial with nothing in it"
    return 0
}

submit_stdout() {
    (cd "$T" && timeout 60 "$REDLM" submit --redis "$(URL)" --input one.jsonl --output - > "$T/ss.out" 2> "$T/ss.err")
    rc=$?
    [ $rc = 0 ] || bad "exit $rc: $(cat "$T/ss.err")"
    [ -e "$T/-" ] && bad "wrote a file named '-'"
    [ "$(jq -r .event "$T/ss.out" 2> /dev/null)" = done ] || bad "stdout holds '$(head -c 200 "$T/ss.out")', want the done event"
    return 0
}

submit_input_dir() {
    local out rc
    out=$("$REDLM" submit --redis "$(URL)" --input "$T" --output "$T/dir.out" 2>&1)
    rc=$?
    [ $rc != 0 ] || bad "exit 0: $out"
    grep -q "is a directory" <<< "$out" || bad "no word of the directory: $out"
}

# On a stream no worker reads: the warning, then --timeout.
submit_no_worker() {
    local t0 warned=
    t0=$(date +%s%N)
    "$REDLM" submit --redis "$(URL)" --stream redlm:nobody --input "$T/one.jsonl" --output "$T/nw.out" \
        --timeout 8 2> "$T/nw.err" &
    local pid=$!
    while kill -0 $pid 2> /dev/null; do
        if [ -z "$warned" ] && grep -qs "no live worker" "$T/nw.err"; then
            warned=$(( ($(date +%s%N) - t0) / 1000000 ))
        fi
        sleep 0.05
    done
    wait $pid
    rc=$?
    echo "  warned after ${warned:-never} ms; $(grep timeout "$T/nw.err")"
    { [ -n "$warned" ] && [ "$warned" -le 5000 ]; } || bad "no warning within 5 s: $(cat "$T/nw.err")"
    [ $rc = 124 ] || bad "--timeout: exit $rc, want 124"
    grep -q "0 jobs answered.*1 jobs unanswered" "$T/nw.err" || bad "--timeout does not say the counts: $(cat "$T/nw.err")"
}

# A bad first line (answered locally) and a long first job: progress must
# count jobs as they finish, never below zero in flight.
submit_progress() {
    {
        echo 'not json'
        echo '{"id":"long","prompt_ids":[5,6,7],"max_tokens":3000,"ignore_eos":true}'
        for i in $(seq 1 30); do echo "{\"id\":\"s$i\",\"prompt_ids\":[$i,2],\"max_tokens\":2}"; done
    } > "$T/prog.jsonl"
    timeout 120 script -qec "'$REDLM' submit --redis '$(URL)' --input '$T/prog.jsonl' --output '$T/prog.out'" \
        /dev/null > "$T/prog.log"
    rc=$?
    [ $rc = 0 ] || bad "exit $rc: $(tail -c 300 "$T/prog.log")"
    tr '\r' '\n' < "$T/prog.log" | grep 'in flight' > "$T/prog.lines"
    grep -q -- '-[0-9]' "$T/prog.lines" && bad "negative count: $(grep -- '-[0-9]' "$T/prog.lines" | head -1)"
    # before the long job is done (something still in flight), the short ones count
    local most
    most=$(awk -F', ' '$2 + 0 > 0 { print $1 + 0 }' "$T/prog.lines" | sort -n | tail -1)
    echo "  most done while the long job ran: ${most:-none} of 32; last: $(tail -1 "$T/prog.lines")"
    [ "${most:-0}" -ge 20 ] || bad "progress stale: at most ${most:-0} done while jobs were in flight"
    grep -q '^32/32 done, 0 in flight, 1 errors' "$T/prog.lines" || bad "final line: $(tail -1 "$T/prog.lines")"
}

code_once() {
    printf '%s\n' '{"id":"a","prompt_ids":[1],"max_token":5}' '{"id":"b","prompt_ids":[1],"max_tokens":-1}' |
        "${GEN[@]}" > "$T/co.out" 2> "$T/co.err"
    local n
    n=$(jq -r 'select(.event == "error") | .error.code as $c | select(.error.message | contains($c)) | .id' "$T/co.out" | wc -l)
    [ "$(jq -r 'select(.event == "error") | .id' "$T/co.out" | wc -l)" = 2 ] || bad "want 2 error results: $(cat "$T/co.out" "$T/co.err")"
    [ "$n" = 0 ] || bad "the code repeated in the message: $(jq -c .error "$T/co.out")"
    jq -c .error "$T/co.out" | head -1 | sed 's/^/  /'
}

offline_fields() {
    "${GEN[@]}" --prompt-ids 1,2,3 --max-tokens 3 > "$T/of.out" 2> "$T/of.err" || bad "generate failed: $(cat "$T/of.err")"
    jq -e 'has("seq") or has("attempt")' "$T/of.out" > /dev/null && bad "offline result has Redis fields: $(cat "$T/of.out")"
    jq -e 'has("event") and has("token_ids")' "$T/of.out" > /dev/null || bad "no result: $(cat "$T/of.out")"
}

timing_ms() {
    jq -e '.timing | to_entries | all(.value | type == "number" and . == floor)' "$T/of.out" > /dev/null ||
        bad "timings not whole ms: $(jq -c .timing "$T/of.out")"
    grep -Eq '[0-9]\.[0-9]{6,}' <<< "$(jq -c .timing "$T/of.out")" && bad "long fraction: $(jq -c .timing "$T/of.out")"
    echo "  $(jq -c .timing "$T/of.out")"
}

status_dead() {   # runs in check's subshell: its workers are stopped here, not by cleanup
    start_worker st-live
    local live=$LAST_PID
    trap "kill -KILL $live 2> /dev/null" EXIT
    start_worker st-dead
    local dead=$LAST_PID
    wait_until 30 eval '[ "$(rcli EXISTS redlm:instances:st-live redlm:instances:st-dead)" = 2 ]' ||
        bad "workers did not start"
    kill -KILL "$dead"
    wait "$dead" 2> /dev/null
    sleep 6.5   # the last heartbeat is now over 5 s old
    "$REDLM" status --redis "$(URL)" > "$T/status.out" 2>&1 || bad "status failed: $(cat "$T/status.out")"
    sed 's/^/  /' "$T/status.out"
    awk '/^dead instances/ { d = 1 } !d && /^st-dead /' "$T/status.out" | grep -q . && bad "the killed worker is listed as live"
    awk '/^dead instances/ { d = 1 } d' "$T/status.out" | grep -Eq '^st-dead +last heartbeat [0-9]+ s ago' ||
        bad "the killed worker is not listed apart as dead with its heartbeat's age"
    awk '/^dead instances/ { d = 1 } !d && /^st-live /' "$T/status.out" | grep -q . || bad "the live worker is not listed as live"
}

status_garbage() {
    local beat=redlm:instances:
    rcli HSET "${beat}g-b" stream redlm:jobs running "$(printf '1\033[2J\nforged-row 9 9')" \
        layout "$(printf 'L%.0s' $(seq 300))" > /dev/null
    rcli HSET "${beat}g-a" stream redlm:jobs model "$(printf 'm\rx')" > /dev/null
    rcli HSET "$(printf '%sg-c\033[31m' "$beat")" stream redlm:jobs > /dev/null
    rcli SET "${beat}g-str" x > /dev/null
    rcli HSET "${beat}g-nottl" stream redlm:jobs > /dev/null
    for k in g-a g-b g-str; do rcli EXPIRE "$beat$k" 8 > /dev/null; done
    rcli EXPIRE "$(printf '%sg-c\033[31m' "$beat")" 8 > /dev/null
    "$REDLM" status --redis "$(URL)" > "$T/sg.out" 2>&1 || bad "status failed: $(cat "$T/sg.out")"
    sed 's/^/  /' "$T/sg.out" | cut -c1-120
    LC_ALL=C grep -q $'[\x01-\x09\x0b-\x1f\x7f]' "$T/sg.out" && bad "control characters printed: $(cat -A "$T/sg.out" | grep g-)"
    grep -q '^forged-row' "$T/sg.out" && bad "a heartbeat's newline forged a row"
    [ "$(grep -c '^g-' "$T/sg.out")" = 3 ] || bad "want one row each for g-a, g-b, g-c"
    [ "$(grep -o '^g-[a-c]' "$T/sg.out" | tr -d '\n')" = g-ag-bg-c ] || bad "rows not by name"
    [ "$(awk '/^g-b/ { print length($0) }' "$T/sg.out")" -lt 150 ] || bad "g-b's 300-byte layout printed whole"
    rcli SET not-a-stream x > /dev/null
    "$REDLM" status --redis "$(URL)" --stream not-a-stream > "$T/sg.out" 2>&1
    rc=$?
    [ $rc = 2 ] || bad "--stream naming a string: exit $rc, want 2"
    grep -q "not-a-stream is not a stream" "$T/sg.out" || bad "--stream naming a string: $(cat "$T/sg.out")"
    rcli DEL "${beat}g-a" "${beat}g-b" "$(printf '%sg-c\033[31m' "$beat")" "${beat}g-str" "${beat}g-nottl" not-a-stream > /dev/null
}

start_redis
check generate-keeps-output generate_keeps_output
start_worker out-w
wait_until 30 eval '[ "$(rcli EXISTS redlm:instances:out-w)" = 1 ]' || fail "worker did not start"
check submit-stdout submit_stdout
check submit-input-dir submit_input_dir
check submit-no-worker submit_no_worker
check submit-progress submit_progress
check code-once code_once
check offline-fields offline_fields
check timing-ms timing_ms
check status-dead status_dead
check status-garbage status_garbage

[ ${#failed[@]} = 0 ] || fail "${#failed[@]} of 10 checks failed: ${failed[*]}"
echo "ok: all 10 checks"
