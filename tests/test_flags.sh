#!/usr/bin/env bash
# test_flags.sh: the real binary under the flags people bring from vLLM
# (-tp, --tensor-parallel-size, --dtype bfloat16|half, --enable-prefix-caching,
# --kv-cache-memory-bytes, --served-model-name, --flag=value) and under bad
# flags: each bad one ends with one clear line and exit status 2, the same
# wording from every command.  Also --version / version and --help.
source "$(dirname "$0")/worker_lib.sh"

GEN=("$REDLM" generate --model "$MODEL" --threads 1 --kv-cache-memory 32MiB)
IDS=(--prompt-ids 1,2,3 --max-tokens 4)

# expect CODE PHRASE CMD...: exit status CODE and PHRASE in the output.
expect() {
    local code=$1 phrase=$2; shift 2
    local out rc
    out=$(timeout 60 "$@" 2>&1 </dev/null); rc=$?
    [ $rc = "$code" ] || fail "exit $rc, want $code: $*
$out"
    grep -qF -- "$phrase" <<<"$out" || fail "no '$phrase' in the output of: $*
$out"
    echo "ok   $code  $*"
}
# the token ids of the done events of a generate run (stdout only)
tokens() { timeout 60 "$@" 2>/dev/null </dev/null | jq -c '.token_ids'; }

# --- vLLM's spellings mean what ours do
want=$(tokens "${GEN[@]}" "${IDS[@]}" --tp 2 --dtype bf16)
[ -n "$want" ] || fail "the reference run gave no tokens"
for spelling in "--tensor-parallel-size 2 --dtype bfloat16" "-tp 2 --dtype=bf16" \
                "--tensor-parallel-size=2 --dtype bfloat16 -pp 1" "--tp=2 --pipeline-parallel-size=1"; do
    # shellcheck disable=SC2086
    got=$(tokens "${GEN[@]}" "${IDS[@]}" $spelling)
    [ "$got" = "$want" ] || fail "$spelling: $got, want $want"
    echo "ok   $spelling"
done
# the example of the issue, --model=DIR included
got=$(tokens "$REDLM" generate --tensor-parallel-size 2 --dtype bfloat16 --model="$MODEL" \
      --threads 1 "${IDS[@]}")
[ "$got" = "$want" ] || fail "--model=DIR: $got, want $want"
for spelling in "--dtype half" "--dtype float16" "--dtype fp16" "--dtype float32" "--dtype auto" \
                "--no-enable-prefix-caching" "--enable-prefix-caching" "--no-prefix-caching" \
                "--kv-cache-memory-bytes 33554432" "--kv-cache-memory=32MiB" \
                "--max-model-len 64 --max-num-seqs 4 --max-num-batched-tokens 32 --block-size 8" \
                "--gpu-memory-utilization 0.5 --seed 7 --load-format auto" \
                "--kv-cache-dtype auto --trust-remote-code --enforce-eager" "--kv-cache-dtype=auto" \
                "--tokenizer $MODEL"; do
    # shellcheck disable=SC2086
    expect 0 '"event":"done"' "${GEN[@]}" "${IDS[@]}" $spelling
done
# '-' is stdin
echo '{"id":"a","prompt_ids":[1,2],"max_tokens":2}' > "$T/one.jsonl"
out=$("${GEN[@]}" --input - --output - < "$T/one.jsonl") || fail "--input - --output -"
grep -q '"id":"a"' <<<"$out" || fail "--input -: $out"

# --- bad flags: one line, exit 2, from every command
expect 2 "redlm generate: unknown option --tensor-paralel-size (did you mean --tensor-parallel-size?)" \
    "${GEN[@]}" --tensor-paralel-size 2
expect 2 "redlm generate: unknown option --dtyp (did you mean --dtype?)" "${GEN[@]}" --dtyp=bf16
expect 2 "redlm generate: unknown option --no-enable-prefix-cache (did you mean --no-enable-prefix-caching?)" \
    "${GEN[@]}" --no-enable-prefix-cache
# vLLM's options redlm does not take: what to do instead, not a near flag
expect 2 "redlm generate: unknown option -dp: data parallelism in redlm is several instances: \`redlm launch --instances N\`" \
    "${GEN[@]}" -dp 2
expect 2 "redlm worker: unknown option --enable-chunked-prefill: redlm always prefills long prompts in chunks" \
    "$REDLM" worker --model "$MODEL" --redis redis://127.0.0.1:1 --enable-chunked-prefill
expect 2 "redlm generate: unknown option --port: redlm serves no HTTP API" "${GEN[@]}" --port=8000
expect 2 "redlm worker: unknown option --served-model (did you mean --served-model-name?)" \
    "$REDLM" worker --model "$MODEL" --redis redis://127.0.0.1:1 --served-model x
expect 2 "redlm submit: unknown option --windw (did you mean --window?)" "$REDLM" submit --windw 3
expect 2 "redlm status: unknown option --gruop (did you mean --group?)" "$REDLM" status --gruop x
expect 2 "redlm plan: unknown option --gpu-memroy (did you mean --gpu-memory?)" \
    "$REDLM" plan --gpu-memroy 24GiB
expect 2 "redlm doctor: unknown option --verfy (did you mean --verify?)" "$REDLM" doctor --verfy x
expect 2 "redlm tokenize: unknown option --tokeniser (did you mean --tokenizer?)" \
    "$REDLM" tokenize --tokeniser x
expect 2 "redlm detokenize: unknown option --frobnicate (redlm detokenize --help lists the options)" \
    "$REDLM" detokenize --frobnicate
expect 2 "redlm bench: unknown option --prompt-length (did you mean --prompt-len?)" \
    "$REDLM" bench --prompt-length 3
expect 2 "redlm launch: unknown option --instance (did you mean --instances?)" \
    "$REDLM" launch --instance 2
expect 2 "redlm launch: unknown option --model (worker options go after --)" "$REDLM" launch --model x
expect 2 "redlm version: unknown option --short" "$REDLM" version --short
expect 2 "redlm: unknown command 'wrker' (did you mean 'worker'?)" "$REDLM" wrker
expect 2 "redlm: unknown command 'serve': redlm has no HTTP server; 'redlm worker' serves" "$REDLM" serve --model m
expect 2 "redlm generate: --backend 'rocm' is not a choice: give cpu or cuda" \
    "${GEN[@]}" "${IDS[@]}" --backend rocm
expect 2 "redlm bench: --backend 'rocm' is not a choice: give cpu or cuda" \
    "$REDLM" bench --model "$MODEL" --backend=rocm
expect 2 "--dtype 'int8' is not a choice: give auto, bf16, fp16 or fp32" "${GEN[@]}" --dtype int8
# vLLM's fp8 KV caches: refused by every command that takes the flag, saying what is
for kv in fp8 fp8_e4m3 fp8_e5m2; do
    expect 2 "redlm generate: --kv-cache-dtype '$kv': only auto (the KV cache in the model's dtype) is supported" \
        "${GEN[@]}" "${IDS[@]}" --kv-cache-dtype "$kv"
done
expect 2 "redlm worker: --kv-cache-dtype 'fp8': only auto" \
    "$REDLM" worker --model "$MODEL" --redis redis://127.0.0.1:1 --kv-cache-dtype fp8
expect 2 "redlm bench: --kv-cache-dtype 'fp8': only auto" "$REDLM" bench --model "$MODEL" --kv-cache-dtype fp8
expect 2 "redlm plan: --kv-cache-dtype 'fp8': only auto" "$REDLM" plan --model "$MODEL" --kv-cache-dtype=fp8
expect 0 "1 x TP1" "$REDLM" plan --model "$MODEL" --kv-cache-dtype auto --trust-remote-code --tp 1
# --served-model-name: an empty name (a stray comma) is refused, as a done event would name nothing
for names in ,tiny tiny, tiny,,alias; do
    expect 2 "--served-model-name '$names' has an empty name: give names separated by single commas" \
        "${GEN[@]}" "${IDS[@]}" --served-model-name "$names"
done
# --model is one name, commas and all: done events and a request's `model` use it whole
mkdir -p "$T/a,b" && cp -r "$MODEL"/. "$T/a,b/"
got=$(echo "{\"id\": \"c\", \"prompt_ids\": [1], \"max_tokens\": 1, \"model\": \"$T/a,b\"}" |
      timeout 60 "$REDLM" generate --model "$T/a,b" --threads 1 --kv-cache-memory 32MiB 2> /dev/null | jq -r .model)
[ "$got" = "$T/a,b" ] || fail "a --model with a comma: done event model '$got', want '$T/a,b'"
# --tokenizer DIR: the tokenizer and chat template from another directory
mkdir "$T/notok"
for f in "$MODEL"/*; do case $f in *tokenizer*|*chat_template*) ;; *) ln -s "$f" "$T/notok/";; esac; done
want_text=$(timeout 60 "${GEN[@]}" --prompt "The jury said" --max-tokens 4 2>/dev/null)
got_text=$(timeout 60 "$REDLM" generate --model "$T/notok" --tokenizer "$MODEL" --threads 1 \
           --kv-cache-memory 32MiB --prompt "The jury said" --max-tokens 4 2>/dev/null)
[ -n "$want_text" ] && [ "$got_text" = "$want_text" ] || fail "--tokenizer: '$got_text', want '$want_text'"
echo "ok   --tokenizer: the same text from a model directory without a tokenizer"
expect 4 "'prompt' needs the model's tokenizer.json" \
    "$REDLM" generate --model "$T/notok" --threads 1 --kv-cache-memory 32MiB --prompt "The jury said"
expect 3 "--tokenizer $T/notok has no tokenizer.json: give the directory that holds" \
    "${GEN[@]}" "${IDS[@]}" --tokenizer "$T/notok"
expect 2 "--load-format 'pt' is not a choice: give auto or dummy" "${GEN[@]}" --load-format pt
expect 2 "--collectives 'never' is not a choice: give auto or always" "${GEN[@]}" --collectives never
expect 2 "redlm generate: --prompt-ids and --input cannot be given together" \
    "${GEN[@]}" "${IDS[@]}" --input "$T/one.jsonl"
expect 2 "--max-tokens only applies together with --prompt-ids" "${GEN[@]}" --max-tokens 3
expect 2 "--tensor-parallel-size '0' must be a whole number from 1 to 64" "${GEN[@]}" --tensor-parallel-size 0
expect 2 "--gpu-memory-utilization '1.5' must be a number above 0 and at most 1" \
    "${GEN[@]}" --gpu-memory-utilization 1.5
expect 2 "--max-num-seqs 'many' must be a whole number" "${GEN[@]}" --max-num-seqs many
expect 2 "--prompt-len 5000 + --gen 32 is 5032 tokens, over the model's context of 4096" \
    "$REDLM" bench --model "$FIXTURES/models/qwen2-tiny-gqa3/config.json" --prompt-len 5000
expect 0 "--dtype fp16: the CPU backend holds weights, activations and the KV cache in fp32" \
    "${GEN[@]}" "${IDS[@]}" --dtype half
# a stage count that is not --pp's: one message, not the first entry alone or a zero stage
expect 2 "--pp-layer-partition gives 2 stages but --pp is 1" "${GEN[@]}" "${IDS[@]}" \
    --pp-layer-partition 1,1
expect 2 "--pp-layer-partition gives 2 stages but --pp is 3" "${GEN[@]}" "${IDS[@]}" \
    --pp 3 --pp-layer-partition 1,1
expect 2 "--kv-cache-memory-bytes 4096: a number without a unit is bytes, and 4096 bytes is less than 1 MiB; did you mean 4096GiB?" \
    "${GEN[@]}" --kv-cache-memory-bytes 4096
expect 2 "--model needs a value" "$REDLM" generate --model
expect 2 "--input needs a value, but --output is an option" "${GEN[@]}" --input --output x
expect 2 "--enable-prefix-caching takes no value" "${GEN[@]}" --enable-prefix-caching=1
expect 2 "unexpected argument 'extra'" "${GEN[@]}" extra
expect 2 "redlm generate: --model is required" "$REDLM" generate --prompt-ids 1
expect 2 "redlm worker: --redis is required" "$REDLM" worker --model "$MODEL"
expect 2 "--model and --tokenizer cannot be given together" "$REDLM" tokenize --model a --tokenizer b
expect 2 "--verify only applies together with --model" "$REDLM" doctor --verify x
expect 2 "redlm plan: --gpu-memory '2MiB' is less than the least it can be, 1 GiB" \
    "$REDLM" plan --model "$MODEL" --gpu-memory 2MiB
expect 2 "--max-backlog '512KiB' is less than the least it can be" \
    "$REDLM" worker --model "$MODEL" --redis redis://127.0.0.1:1 --max-backlog 512KiB

# --- sizes: a bare number is bytes everywhere
CFG=$FIXTURES/configs/qwen2.5-7b.json
expect 2 "redlm plan: --gpus '6x24' must be a whole number from 1 to 64; the memory of each is --gpu-memory (six 24 GiB cards: --gpus 6 --gpu-memory 24GiB)" \
    "$REDLM" plan --model "$CFG" --gpus 6x24
expect 2 "redlm plan: --gpu-memory 24: a number without a unit is bytes, and 24 bytes is less than 1 MiB; did you mean 24GiB?" \
    "$REDLM" plan --model "$CFG" --gpu-memory 24
a=$("$REDLM" plan --model "$CFG" --gpus 2 --gpu-memory 24GiB --json) || fail "plan 24GiB"
b=$("$REDLM" plan --model "$CFG" --gpus 2 --gpu-memory 25769803776 --json) || fail "plan in bytes"
c=$("$REDLM" plan --model "$CFG" --gpus 2 --gpu-memory=24G --json) || fail "plan 24G"
[ "$a" = "$b" ] && [ "$a" = "$c" ] || fail "24GiB, 25769803776 and 24G plan differently"
d=$("$REDLM" plan --model "$CFG" --gpus 2 --gpu-memory 24GB --json) || fail "plan 24GB"
[ "$a" != "$d" ] || fail "24GB (decimal) plans like 24GiB"
expect 0 "1 x TP2" "$REDLM" plan --model "$CFG" --gpus 2 --gpu-memory 80GiB \
    --dtype bfloat16 -tp 2 -pp 1
expect 2 "--devices and --gpus cannot be given together" \
    "$REDLM" plan --model "$CFG" --devices 0-1 --gpus 2
# --tp or --pp alone checks that one layout, the other 1 (as generate takes it)
expect 0 "1 x TP2 " "$REDLM" plan --model "$CFG" --gpus 2 --tp 2
expect 0 "1 x TP1 PP2" "$REDLM" plan --model "$CFG" --gpus 2 --pp 2
expect 2 "--instances only applies together with --tp or --pp" \
    "$REDLM" plan --model "$CFG" --instances 2

# --- launch: vLLM's names for its own flags, and not for the workers
expect 0 "redlm worker --tp 2 --pp 1 --consumer n-0 --model m" \
    "$REDLM" launch --tensor-parallel-size 2 --name n --dry-run -- --model m --redis x
expect 2 "give --tp to launch, before --, not to the workers" \
    "$REDLM" launch --dry-run -- --model m -tp 2
expect 2 "give --pp to launch, before --, not to the workers" \
    "$REDLM" launch --dry-run -- --model m --pipeline-parallel-size=2
# --dry-run's lines read back by a shell as the same words
line=$("$REDLM" launch --dry-run --name 'a b' -- --model '/m/my model' --served-model-name "it's" --stream '') ||
    fail "launch --dry-run with spaces"
eval "set -- $line"
[ "$#" = 14 ] && [ "$8" = 'a b-0' ] && [ "${10}" = '/m/my model' ] && [ "${12}" = "it's" ] && [ "${14}" = '' ] ||
    fail "launch --dry-run does not quote: $line"
expect 2 "give --name PREFIX to launch, before --, not --consumer to the workers" \
    "$REDLM" launch --dry-run -- --model m --consumer=w

# --- --served-model-name reaches the heartbeat and redlm status
start_redis
start_worker sm --served-model-name qwen-tiny --kv-cache-memory-bytes 33554432
beat() { [ "$(rcli HGET redlm:instances:sm served_model_name)" = qwen-tiny ]; }
wait_until 20 beat || fail "no served_model_name in the heartbeat"
expect 0 "qwen-tiny" "$REDLM" status --redis "$(URL)"

# --- version and help
expect 0 "redlm " "$REDLM" --version
out=$("$REDLM" version) || fail "redlm version"
echo "$out"
grep -Eq '^redlm [0-9]+\.[0-9]+\.[0-9]+$' <<<"$out" || fail "no version line"
grep -Eq '^commit +([0-9a-f]{12}(-dirty)?|unknown)$' <<<"$out" || fail "no commit line"
grep -Eq '^cuda archs +[a-z0-9_, ]+$' <<<"$out" || fail "no cuda archs line"
grep -Eq '^backends +cpu( cuda)?$' <<<"$out" || fail "no backends line"
[ "$("$REDLM" -V)" = "$out" ] || fail "-V differs from version"
for cmd in generate worker submit status launch tokenize detokenize bench plan doctor version; do
    expect 0 "usage: redlm $cmd" "$REDLM" "$cmd" --help
done
expect 0 "--tp, -tp, --tensor-parallel-size N" "$REDLM" worker --help
expect 0 "--kv-cache-memory, --kv-cache-memory-bytes SIZE" "$REDLM" generate --help
expect 0 "--[no-]enable-prefix-caching" "$REDLM" generate -h
expect 0 "--prompt-ids and --input cannot be given together." "$REDLM" generate --help
echo "flags: all cases passed"
