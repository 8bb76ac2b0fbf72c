#!/usr/bin/env bash
# test_generate_stop.sh: how a sample ended and how its text is spelled,
# through `redlm generate` on a fixture model, greedy:
#   - stop_reason: the stop string or stop token id that ended it, null for
#     EOS and for length (vLLM's meaning);
#   - include_stop_str_in_output: the stop string stays in the text;
#   - min_tokens: no stop string ends a sample before that many tokens (vLLM
#     looks for them only after min_tokens);
#   - skip_special_tokens: true (the default) drops special added tokens'
#     text, false keeps it.
# The stop string comes from a request run alone, and the batch of eight
# must write its text again: both runs take --batch-invariant, since by
# default the rows beside a request move its logits' last bits, which may
# flip a near-tied greedy token on some CPUs.
source "$(dirname "$0")/generate_lib.sh"
gen() { "$REDLM" generate --model "$dir" --threads 2 --batch-invariant --input "$1" --output "$2" 2>/dev/null; }
base='"prompt": "Hello there", "max_tokens": 8, "temperature": 0'
echo "{\"id\": \"plain\", $base}" > "$tmp/plain.jsonl"
gen "$tmp/plain.jsonl" "$tmp/plain.out"
text=$(jq -r .text "$tmp/plain.out")
[ "${#text}" -ge 6 ] || fail "plain text too short: '$text'"
stop=${text:3:2}
pre=${text%%"$stop"*}
jq -nc --arg s "$stop" --argjson b "{$base}" '
  ($b + {id: "str", stop: ["zzzz", $s]}),
  ($b + {id: "keep", stop: $s, include_stop_str_in_output: true}),
  ($b + {id: "min", stop: $s, min_tokens: 8}),
  ($b + {id: "tok", logit_bias: {"1540": 100}, stop_token_ids: [1540]}),
  ($b + {id: "eos", logit_bias: {"2002": 100}}),
  ($b + {id: "len"}),
  ($b + {id: "skip", logit_bias: {"2001": 100}, max_tokens: 3}),
  ($b + {id: "noskip", logit_bias: {"2001": 100}, max_tokens: 3, skip_special_tokens: false})
' > "$tmp/in.jsonl"
gen "$tmp/in.jsonl" "$tmp/out.jsonl"
field() { jq -c --arg id "$1" "select(.id == \$id) | $2" "$tmp/out.jsonl"; }
[ "$(field str .stop_reason)" = "$(jq -nc --arg s "$stop" '$s')" ] || fail "stop string: $(field str .stop_reason)"
[ "$(field str .text)" = "$(jq -nc --arg s "$pre" '$s')" ] || fail "text before the stop: $(field str .text)"
[ "$(field keep .text)" = "$(jq -nc --arg s "$pre$stop" '$s')" ] || fail "kept stop: $(field keep .text)"
[ "$(field keep .stop_reason)" = "$(jq -nc --arg s "$stop" '$s')" ] || fail "kept stop reason"
[ "$(field min '[.finish_reason, .stop_reason, .text]')" = "$(jq -nc --arg t "$text" '["length", null, $t]')" ] ||
    fail "a stop string before min_tokens ended the sample: $(field min '[.finish_reason, .stop_reason, .text]')"
[ "$(field tok '[.finish_reason, .stop_reason]')" = '["stop",1540]' ] || fail "stop token: $(field tok '[.finish_reason, .stop_reason]')"
[ "$(field eos '[.finish_reason, .stop_reason]')" = '["stop",null]' ] || fail "eos: $(field eos '[.finish_reason, .stop_reason]')"
[ "$(field len '[.finish_reason, .stop_reason]')" = '["length",null]' ] || fail "length: $(field len '[.finish_reason, .stop_reason]')"
[ "$(field skip '[.token_ids, .text]')" = '[[2001,2001,2001],""]' ] || fail "skip: $(field skip '[.token_ids, .text]')"
[ "$(field noskip .text)" = '"<|im_start|><|im_start|><|im_start|>"' ] || fail "noskip: $(field noskip .text)"
echo "stop_reason names the stop string or id ('$stop', 1540), null for EOS and length; include_stop_str_in_output and skip_special_tokens spell the text"
