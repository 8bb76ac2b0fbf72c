#!/usr/bin/env bash
# test_request_decode.sh: both front doors give a bad request line the same
# error code.  tests/fixtures/requests/bad.tsv ("code<TAB>line") is run
# through `redlm generate` (one error result per line, in order) and, as
# `json` stream entries, through `redlm worker` (one dead letter per entry,
# carrying the error); test_request_decode.c runs it through the decoder
# itself.
source "$(dirname "$0")/worker_lib.sh"
table=$FIXTURES/requests/bad.tsv
cut -f1 "$table" > "$T/want"
cut -f2- "$table" > "$T/lines.jsonl"
n=$(wc -l < "$T/want")

"$REDLM" generate --model "$MODEL" --threads 1 --input "$T/lines.jsonl" --output "$T/gen.jsonl" ||
    fail "generate failed"
jq -r '.event + " " + .error.code' "$T/gen.jsonl" > "$T/gen.codes"
sed 's/^/error /' "$T/want" | diff - "$T/gen.codes" > "$T/gen.diff" ||
    fail "generate: codes differ from the table: $(cat "$T/gen.diff")"

start_redis
start_worker w1
W=$LAST_PID
entries=()
while IFS= read -r line; do
    entries+=("$(printf '%s' "$line" | rcli -x XADD redlm:jobs '*' json)")
done < "$T/lines.jsonl"
[ ${#entries[@]} = "$n" ] || fail "queued ${#entries[@]} entries, want $n"
dead_full() { [ "$(rcli XLEN redlm:dead)" -ge "$n" ]; }
wait_until 30 dead_full || fail "dead letters: $(rcli XLEN redlm:dead), want $n"
# entry id -> error code, from each dead letter's `entry` and `error` fields
rcli --raw XRANGE redlm:dead - + |
    awk '$0 == "entry" { getline; e = $0 } $0 == "error" { getline; c = $0 }
         $0 == "attempt" { print e "\t" c }' |
    while IFS=$'\t' read -r e c; do printf '%s %s\n' "$e" "$(jq -r .code <<< "$c")"; done > "$T/dead"
for i in "${!entries[@]}"; do
    got=$(awk -v e="${entries[$i]}" '$1 == e { print $2 }' "$T/dead")
    want=$(sed -n "$((i + 1))p" "$T/want")
    [ "$got" = "$want" ] || fail "worker: line $((i + 1)) got '$got', want $want"
done
kill -0 "$W" || fail "worker died"
echo "request_decode: $n bad lines, the same code through generate and the worker"
