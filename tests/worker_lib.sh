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

free_port() {
    local p
    while :; do
        p=$((20000 + RANDOM % 40000))
        (exec 3<>/dev/tcp/127.0.0.1/$p) 2>/dev/null || { echo $p; return; }
    done
}

# start_redis [redis-server options...]: (re)starts on $RPORT, data in $T/redis
start_redis() {
    [ -n "$RPORT" ] || RPORT=$(free_port)
    mkdir -p "$T/redis"
    redis-server --port "$RPORT" --bind 127.0.0.1 --dir "$T/redis" --save '' "$@" \
        > "$T/redis.log" 2>&1 &
    REDIS_PID=$!
    for _ in $(seq 100); do rcli PING 2>/dev/null | grep -q PONG && return; sleep 0.05; done
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
pending_count() { rcli XPENDING redlm:jobs redlm | head -1; }
