#!/usr/bin/env bash
# test_demo.sh: `make demo`'s script as a newcomer runs it.  It must exit 0,
# print valid UTF-8, go through its narrated steps, and the text the model
# generated (its "  > " lines, each a JSON string; not the narration, ids or
# timings) must be at least 80 % letters, spaces or punctuation: words from
# the bundled trained model, not byte noise.
set -u
cd "$(dirname "$0")/.."
T=$(mktemp -d /tmp/redlm-demo-test.XXXXXX)
trap 'rm -rf "$T"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

start=$(date +%s)
scripts/demo > "$T/out" 2> "$T/err"
rc=$?
cat "$T/out"
[ $rc = 0 ] || { cat "$T/err" >&2; fail "scripts/demo exited $rc"; }
iconv -f UTF-8 -t UTF-8 "$T/out" > /dev/null || fail "the demo's output is not valid UTF-8"
for want in "== 2. Two workers" "  > " "deliberately bad job" '"code":"invalid_request"' \
            "claimed it" "attempt 2 finished it" "== 8. redlm status"; do
    grep -qF -- "$want" "$T/out" || fail "the demo's output lacks '$want'"
done

# The continuations, decoded from their JSON strings and joined.
grep -oP '^  > \K"(?:[^"\\]|\\.)*"' "$T/out" > "$T/strings"
n=$(wc -l < "$T/strings")
[ "$n" -ge 10 ] || fail "only $n generated texts in the demo's output"
jq -j . "$T/strings" > "$T/text" || fail "a generated text is not a JSON string"
read -r good total < <(perl -CSD -0777 -ne 'my $g = () = /[\p{L}\p{P}\s]/g; print $g, " ", length, "\n"' "$T/text")
pct=$((100 * good / (total > 0 ? total : 1)))
echo "generated text: $n pieces, $total characters, $pct % letters, spaces or punctuation"
[ "$total" -ge 500 ] || fail "only $total characters of generated text"
[ "$pct" -ge 80 ] || fail "generated text is $pct % letters, spaces or punctuation, want >= 80: $(head -c 300 "$T/text")"
echo "ok: demo exit 0 in $(( $(date +%s) - start )) s, valid UTF-8, $pct % of its generated text letters, spaces or punctuation"
