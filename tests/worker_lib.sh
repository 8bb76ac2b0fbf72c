# worker_lib.sh: helpers for the Redis worker tests (sourced, not run).
#
# Each test gets its own redis-server on a free port with a temporary
# directory, and every process started here is stopped on exit, whatever
# way the test ends.
set -u
MODEL=${MODEL:-$FIXTURES/models/qwen2-tiny-gqa3}
T=$(mktemp -d /tmp/redlm-worker-test.XXXXXX)
PIDS=()
RPORT=
REDIS_PID=

cleanup() {
    for p in "${PIDS[@]}"; do kill -KILL "$p" 2>/dev/null; done
    [ -n "$REDIS_PID" ] && kill -KILL "$REDIS_PID" 2>/dev/null
    wait 2>/dev/null
    rm -rf "$T"
}
trap cleanup EXIT

fail() { echo "FAIL: $*" >&2; for f in "$T"/*.log; do [ -f "$f" ] && { echo "--- $f" >&2; tail -20 "$f" >&2; }; done; exit 1; }

# A port nothing listens on, below the kernel's range for outgoing
# connections (which may take a port at any moment without listening on it).
free_port() {
    local p low
    low=$(cut -f1 /proc/sys/net/ipv4/ip_local_port_range 2>/dev/null || echo 32768)
    while :; do
        p=$((20000 + RANDOM % (low - 20000)))
        (exec 3<>/dev/tcp/127.0.0.1/$p) 2>/dev/null || { echo $p; return; }
    done
}

# start_redis [redis-server options...]: (re)starts on $RPORT, data in $T/redis.
# A first start whose port was taken in the meantime (another test run on
# the same host) tries a fresh port; a restart keeps its port.
start_redis() {
    local tries=1
    [ -n "$RPORT" ] || { RPORT=$(free_port); tries=5; }
    mkdir -p "$T/redis"
    for _ in $(seq $tries); do
        redis-server --port "$RPORT" --bind 127.0.0.1 --dir "$T/redis" --save '' "$@" \
            > "$T/redis.log" 2>&1 &
        REDIS_PID=$!
        # Ours is up once its own log says so (a PONG alone could come from
        # another server on a port taken in the meantime).
        for _ in $(seq 100); do
            grep -q "Ready to accept connections" "$T/redis.log" &&
                rcli PING 2>/dev/null | grep -q PONG && return
            kill -0 "$REDIS_PID" 2>/dev/null || break
            sleep 0.05
        done
        grep -q "Address already in use" "$T/redis.log" || break
        wait "$REDIS_PID" 2>/dev/null
        RPORT=$(free_port)
    done
    fail "redis-server did not start"
}
stop_redis() { kill -TERM "$REDIS_PID"; wait "$REDIS_PID" 2>/dev/null; REDIS_PID=; }
rcli() { redis-cli -p "$RPORT" "$@"; }
URL() { echo "redis://127.0.0.1:$RPORT"; }

# start_worker NAME [worker options...]: sets LAST_PID
start_worker() {
    local name=$1; shift
    "$REDLM" worker --model "$MODEL" --redis "$(URL)" --consumer "$name" --threads 1 "$@" \
        > "$T/$name.log" 2>&1 &
    LAST_PID=$!
    PIDS+=("$LAST_PID")
}

# wait_until SECONDS COMMAND...: poll until the command succeeds
wait_until() {
    local limit=$1; shift
    local end=$(( $(date +%s) + limit ))
    while ! "$@"; do
        [ "$(date +%s)" -ge "$end" ] && return 1
        sleep 0.1
    done
}

# the JSON payloads of a stream, one per line
stream_json() { rcli --raw XRANGE "$1" - + | awk 'p { print; p = 0 } /^json$/ { p = 1 }'; }
# entries ever added to a stream (XLEN shrinks as workers trim what is acknowledged)
added() { rcli XINFO STREAM "$1" | awk '$0 == "entries-added" { getline; print }'; }
pending_count() { rcli XPENDING redlm:jobs redlm | head -1; }

# queue_jobs N MAX_TOKENS [,"more":"fields"]: jobs j1..jN (max_tokens
# MAX_TOKENS + i % 5, every other one streamed), greedy, all replying to
# redlm:reply:test; the requests are kept in $T/jobs.jsonl
queue_jobs() {
    local n=$1 mt=$2 extra=${3:-} st
    for i in $(seq 1 "$n"); do
        st=false; [ $((i % 2)) = 0 ] && st=true
        echo "{\"id\":\"j$i\",\"prompt_ids\":[$((i % 97 + 1)),$((i * 7 % 50 + 1)),3],\"max_tokens\":$((mt + i % 5)),\"temperature\":0,\"stream\":$st$extra}"
    done > "$T/jobs.jsonl"
    jq -r '"XADD redlm:jobs * json " + (. + {reply_to: "redlm:reply:test"} | tojson | tojson)' "$T/jobs.jsonl" |
        rcli > /dev/null
    [ "$(added redlm:jobs)" = "$n" ] || fail "queued $(added redlm:jobs) jobs, want $n"
}

# per job: the events of its highest attempt, repeats dropped, in seq order
summary() {
    rcli --raw XRANGE redlm:reply:test - + | awk 'p { print; p = 0 } /^json$/ { p = 1 }' |
        jq -sc 'group_by(.id)[] | (map(.attempt) | max) as $m | map(select(.attempt == $m))
                | unique_by(.seq) | sort_by(.seq)
                | {id: .[0].id, attempt: $m, dones: map(select(.event == "done")) | length,
                   token_ids: map(.token_ids) | add}'
}

# every_job_done N: wait until the group has read and acknowledged all N
# jobs, then each must have exactly one final done in its highest attempt;
# the per-job summary is left in $T/got.jsonl
every_job_done() {
    local n=$1 bad
    wait_until 120 all_acked "$n" || fail "not finished: read $(group entries-read), pending $(group pending)"
    summary > "$T/got.jsonl"
    [ "$(wc -l < "$T/got.jsonl")" = "$n" ] || fail "replies for $(wc -l < "$T/got.jsonl") jobs, want $n"
    bad=$(jq -c 'select(.dones != 1)' "$T/got.jsonl" | head -3)
    [ -z "$bad" ] || fail "jobs without exactly one final done: $bad"
}

# same_as_generate: the tokens in $T/got.jsonl are those `redlm generate`
# gives for the same requests ($T/jobs.jsonl) offline.  Both sides run
# --batch-invariant (start the workers with it): otherwise the other jobs in
# a job's steps, which differ between the two and between attempts, move its
# logits' last bits, and on some CPUs that flips a near-tied greedy token.
same_as_generate() {
    "$REDLM" generate --model "$MODEL" --threads 1 --batch-invariant --input "$T/jobs.jsonl" --output "$T/gen.jsonl" \
        2> "$T/gen.log" || fail "redlm generate failed"
    diff <(jq -c '{id, token_ids}' "$T/gen.jsonl" | sort) <(jq -c '{id, token_ids}' "$T/got.jsonl" | sort) \
        > "$T/diff" || fail "tokens differ from redlm generate: $(head -4 "$T/diff")"
}

# a field of the group's XINFO GROUPS row (pending, entries-read, lag ...)
group() { rcli XINFO GROUPS redlm:jobs | awk -v k="$1" '$0 == k { getline; v = $0 } END { print v == "" ? 0 : v }'; }
all_acked() { [ "$(group entries-read)" = "$1" ] && [ "$(group pending)" = 0 ]; }
