#!/usr/bin/env bash
# test_worker_submit.sh: `redlm submit` against a worker: results in input
# order equal to `redlm generate`'s, ids assigned when missing, a bad line
# answered locally, and a resumed run (output cut mid-line) that submits
# only the jobs missing from the output.
source "$(dirname "$0")/worker_lib.sh"

start_redis
start_worker w
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
"$REDLM" generate --model "$MODEL" --threads 1 --input "$T/gen-in.jsonl" --output "$T/gen.jsonl" 2> "$T/gen.log" ||
    fail "generate failed"
diff <(jq -c '[.id, .index, .token_ids]' "$T/gen.jsonl") <(head -66 "$T/out.jsonl" | jq -c '[.id, .index, .token_ids]') > "$T/diff" ||
    fail "submit results differ from generate (or are out of order): $(head -4 "$T/diff")"

# resume: keep 20 lines and half of the 21st, as a killed run would leave it
head -20 "$T/out.jsonl" > "$T/resume.jsonl"
sed -n 21p "$T/out.jsonl" | head -c 30 >> "$T/resume.jsonl"
before=$(rcli XLEN redlm:jobs)
"$REDLM" submit --redis "$(URL)" --input "$T/in.jsonl" --output "$T/resume.jsonl" --window 8 2> "$T/submit2.log" ||
    fail "resumed submit failed"
sent=$(( $(rcli XLEN redlm:jobs) - before ))
done_before=$(head -20 "$T/out.jsonl" | jq -r .id | sort -u | wc -l)
[ "$sent" = $((60 - done_before)) ] || fail "resume submitted $sent jobs, want $((60 - done_before))"
diff <(jq -c '[.id, .index, .token_ids]' "$T/out.jsonl") <(jq -c '[.id, .index, .token_ids]' "$T/resume.jsonl") > "$T/diff" ||
    fail "resumed output differs: $(head -4 "$T/diff")"
echo "ok: submit in input order equal to generate; resume sent $sent of 60"
