# Sourced by the end-to-end tests that need a running server.
#   tiny_chat_model DIR      the llama fixture + the tiny tokenizer and ChatML
#                            template (fixtures/serve), <|im_end|> (370) as EOS
#   start_server LOG ARGS... starts `hearth serve --port 0 ARGS...` in the
#                            background; sets SERVER_PID and SERVER_PORT (waits
#                            SERVER_WAIT_S seconds, default 10, for it to listen)
#   start_verb VERB LOG ARGS... the same for another verb (`hearth route`)
#   stop_servers             kills every server started (for traps)
SERVER_PIDS=()

tiny_chat_model() {
    mkdir -p "$1"
    cp "$HEARTH_ROOT/tests/fixtures/models/llama/config.json" \
       "$HEARTH_ROOT/tests/fixtures/models/llama/model.safetensors" \
       "$HEARTH_ROOT/tests/fixtures/serve/tokenizer.json" \
       "$HEARTH_ROOT/tests/fixtures/serve/tokenizer_config.json" "$1/"
    sed -i 's/"eos_token_id": 2/"eos_token_id": 370/' "$1/config.json"
}

start_server() { start_verb serve "$@"; }

start_verb() {
    local verb=$1 log=$2; shift 2
    : >"$log"
    "$HEARTH_BIN" "$verb" --port 0 "$@" 2>"$log" &
    SERVER_PID=$!
    SERVER_PIDS+=("$SERVER_PID")
    SERVER_PORT=
    for _ in $(seq $((${SERVER_WAIT_S:-10} * 20))); do
        SERVER_PORT=$(sed -n 's/.*listening on http:\/\/.*:\([0-9]*\)$/\1/p' "$log")
        [ -n "$SERVER_PORT" ] && return 0
        sleep 0.05
    done
    echo "hearth $verb did not start:"; cat "$log"
    return 1
}

stop_servers() {
    if [ ${#SERVER_PIDS[@]} -gt 0 ]; then
        kill "${SERVER_PIDS[@]}" 2>/dev/null || true # some may have exited already
    fi
}

# wait_running PORT: until the server on PORT has a generation running
# (/stats requests.active), at most 5 s; so that a request sent next queues
# behind it however fast the machine is
wait_running() {
    for _ in $(seq 100); do
        curl -s "http://127.0.0.1:$1/stats" |
            python3 -c 'import json,sys; sys.exit(json.load(sys.stdin)["requests"]["active"] < 1)' &&
            return 0
        sleep 0.05
    done
    echo "wait_running: no generation started on port $1"
    return 1
}

# queue_long PORT BODY: three /v1/completions requests with BODY (long
# generations) sent at once, so that on a --batch 1 server a request sent
# next waits behind them however long wait_running took to see the first
# one start; their pids in LONG_PIDS (wait "${LONG_PIDS[@]}")
queue_long() {
    LONG_PIDS=()
    for _ in 1 2 3; do
        curl -sf "http://127.0.0.1:$1/v1/completions" -H 'Content-Type: application/json' \
            -d "$2" >/dev/null &
        LONG_PIDS+=($!)
    done
    wait_running "$1"
}
