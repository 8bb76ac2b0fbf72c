#!/usr/bin/env bash
# test_tokenizer.sh: `redlm tokenize` / `redlm detokenize` as a user runs
# them: stdin/stdout defaults, blank lines, and clear errors naming the
# line for bad input.  (Exactness on the fixtures is in test_tokenizer.c.)
set -u
REDLM=${REDLM:-build/redlm}
TOK=${FIXTURES:-tests/fixtures}/tokenizer-small/tokenizer.json
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }

# expect STATUS PATTERN -- command...: exit status and a stderr pattern
# (input by redirection, never a pipe: in a pipe it is a subshell, and its
# failures would not count)
expect() {
    local want=$1 pat=$2; shift 3
    "$@" >"$tmp/out" 2>"$tmp/err"
    local rc=$?
    [ $rc = "$want" ] || fail "$* exited $rc, not $want: $(cat "$tmp/err")"
    grep -q -- "$pat" "$tmp/err" || fail "$*: stderr lacks '$pat': $(cat "$tmp/err")"
}

printf '{"text": "Hello world"}\n\n{"text": "<|im_start|>hi"}\n' | "$REDLM" tokenize --tokenizer "$TOK" >"$tmp/ids" ||
    fail "tokenize from stdin"
[ "$(wc -l <"$tmp/ids")" = 2 ] || fail "blank line not skipped: $(cat "$tmp/ids")"
grep -q '^{"ids": \[2001, ' "$tmp/ids" || fail "special token not one id: $(cat "$tmp/ids")"
"$REDLM" detokenize --tokenizer "$TOK" --input "$tmp/ids" --output - >"$tmp/text" || fail "detokenize"
[ "$(sed -n 2p "$tmp/text")" = '{"text": "<|im_start|>hi"}' ] || fail "round trip: $(cat "$tmp/text")"

mkdir -p "$tmp/model" && cp "$TOK" "$tmp/model/tokenizer.json"
echo '{"text": "x"}' | "$REDLM" tokenize --model "$tmp/model" >/dev/null || fail "--model DIR"

expect 4 'stdin line 2: needs "text"' -- "$REDLM" tokenize --tokenizer "$TOK" < <(printf '{"text": "ok"}\n{"text": 5}\n')
expect 4 'stdin line 2: not a JSON object' -- "$REDLM" tokenize --tokenizer "$TOK" < <(printf '{"text": "ok"}\n{"text": "a"\n')
expect 4 'line 1' -- "$REDLM" tokenize --tokenizer "$TOK" < <(printf '{"text": "\\ud800"}\n')
expect 4 'stdin line 1: ids\[1\]' -- "$REDLM" detokenize --tokenizer "$TOK" < <(printf '{"ids": [1, "x"]}\n')
expect 4 'ids\[1\] = -3 is not a token id' -- "$REDLM" detokenize --tokenizer "$TOK" < <(printf '{"ids": [1, -3]}\n')
expect 4 'ids\[1\] = 99999999 is not a token id of this tokenizer (0\.\.' -- "$REDLM" detokenize --tokenizer "$TOK" < <(printf '{"ids": [1, 99999999]}\n')
# a messages line is checked as a job's messages are, not rendered as it comes
expect 4 'stdin line 1: messages\[0\] must be an object' -- "$REDLM" tokenize --tokenizer "$TOK" < <(printf '{"messages": [1, 2]}\n')
expect 4 "field 'messages' must be a non-empty array" -- "$REDLM" tokenize --tokenizer "$TOK" < <(printf '{"messages": "hi"}\n')
expect 4 "messages\[0\] needs 'content'" -- "$REDLM" tokenize --tokenizer "$TOK" < <(printf '{"messages": [{"role": "user"}]}\n')
expect 4 "chat_template_kwargs" -- "$REDLM" tokenize --tokenizer "$TOK" < <(printf '{"messages": [{"role": "user", "content": "x"}], "chat_template_kwargs": 5, "enable_thinking": true}\n')
expect 2 'exactly one of' -- "$REDLM" tokenize </dev/null
expect 2 'unknown option' -- "$REDLM" tokenize --tokenizer "$TOK" --frobnicate 1 </dev/null
expect 2 'bench' -- "$REDLM" detokenize --tokenizer "$TOK" --bench 3 </dev/null
expect 9 'cannot open' -- "$REDLM" tokenize --tokenizer "$tmp/none.json" </dev/null
echo '{"type": "BPE"}' >"$tmp/bad.json"
expect 3 'no "model"' -- "$REDLM" tokenize --tokenizer "$tmp/bad.json" </dev/null
"$REDLM" tokenize --help | grep -q -- '--bench' || fail "--help"
echo '{"text": "abc"}' | "$REDLM" tokenize --tokenizer "$TOK" --bench 2 | grep -q '"bytes_per_s"' || fail "--bench"

[ $fails = 0 ] && echo "test_tokenizer.sh: all passed"
[ $fails = 0 ]
