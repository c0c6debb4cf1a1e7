#!/usr/bin/env bash
# A pool of models behind one server (--models, --model-dir): requests pick a
# model by name, models load on first use and are evicted least recently used
# under --pool-bytes (never while a request runs on them), answers are those
# of single-model servers, a missing model is a 404 listing the models, and
# --served-model-name renames them.
set -euo pipefail
bin=${HEARTH_BIN:?}; root=${HEARTH_ROOT:?}
. "$root/tests/e2e/lib/serve.sh"
tmp=$(mktemp -d)
trap 'stop_servers; rm -rf "$tmp"' EXIT
mkdir -p "$tmp/dir"
tiny_chat_model "$tmp/dir/tiny-llama"
tiny_chat_model "$tmp/dir/tiny-qwen" # the qwen3 fixture's weights, the same tokenizer
cp "$root/tests/fixtures/models/qwen3/config.json" "$root/tests/fixtures/models/qwen3/model.safetensors" "$tmp/dir/tiny-qwen/"
sed -i 's/"eos_token_id": 2/"eos_token_id": 370/' "$tmp/dir/tiny-qwen/config.json"
echo "not a model" >"$tmp/dir/notes.txt"
tiny_chat_model "$tmp/tiny-qwen2" # a third, outside the --model-dir
cp "$root/tests/fixtures/models/qwen2/config.json" "$root/tests/fixtures/models/qwen2/model.safetensors" "$tmp/tiny-qwen2/"
sed -i 's/"eos_token_id": 2/"eos_token_id": 370/' "$tmp/tiny-qwen2/config.json"
A=$tmp/dir/tiny-llama; B=$tmp/dir/tiny-qwen; C=$tmp/tiny-qwen2
common=(--threads 1 --batch 2 --ctx 4096)

# ask PORT MODEL KIND: one greedy chat, one greedy completion, one seeded sample
ask() {
    python3 - "$@" <<'PY'
import json, sys, urllib.request, urllib.error
port, model = sys.argv[1], sys.argv[2]
def post(path, body):
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", json.dumps(body).encode(),
                                 {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req) as r:
            return json.load(r)
    except urllib.error.HTTPError as e:
        sys.exit(f"HTTP {e.code}: {e.read().decode()}")
m = {} if model == "-" else {"model": model}
a = post("/v1/chat/completions", {**m, "messages": [{"role": "user", "content": "Hello there"}], "max_tokens": 8, "temperature": 0})
b = post("/v1/completions", {**m, "prompt": "The cat", "max_tokens": 8, "temperature": 0})
c = post("/v1/completions", {**m, "prompt": "Once upon", "max_tokens": 8, "temperature": 1.0, "seed": 5, "logprobs": True})
print(json.dumps([a["choices"][0]["message"]["content"], b["choices"][0]["text"],
                  [e["id"] for e in c["choices"][0]["logprobs"]["content"]]]))
PY
}
get() { curl -sf "http://127.0.0.1:$1$2"; }
jq_py() { python3 -c "import json,sys; o=json.load(sys.stdin); print($1)"; }

# the single-model servers' answers
start_server "$tmp/a.log" --model "$A" "${common[@]}"
want_a=$(ask "$SERVER_PORT" -)
start_server "$tmp/b.log" --model "$B" "${common[@]}"
want_b=$(ask "$SERVER_PORT" -)
[ "$want_a" != "$want_b" ] || { echo "FAIL: the two models answer alike; the test could not tell them apart"; exit 1; }

# a pool without a bound: lazy loading, and each model's size
start_server "$tmp/p.log" --models "$A,$B,$C" "${common[@]}"
port=$SERVER_PORT
loaded() { get "$port" /v1/models | jq_py "','.join(m['id'] for m in o['data'] if m['loaded'])"; }
[ "$(get "$port" /v1/models | jq_py "','.join(m['id'] for m in o['data'])")" = "tiny-llama,tiny-qwen,tiny-qwen2" ] ||
    { echo "FAIL: /v1/models: $(get "$port" /v1/models)"; exit 1; }
[ -z "$(loaded)" ] || { echo "FAIL: loaded before first use: $(loaded)"; exit 1; }
[ "$(ask "$port" tiny-llama)" = "$want_a" ] || { echo "FAIL: pool answer of tiny-llama"; exit 1; }
bytes_a=$(get "$port" /stats | jq_py "o['pool']['loaded_bytes']")
[ "$(ask "$port" tiny-qwen)" = "$want_b" ] || { echo "FAIL: pool answer of tiny-qwen"; exit 1; }
bytes_ab=$(get "$port" /stats | jq_py "o['pool']['loaded_bytes']")
[ "$(loaded)" = "tiny-llama,tiny-qwen" ] || { echo "FAIL: loaded: $(loaded)"; exit 1; }
# /metrics: every model's info, and a sample of each engine series per loaded model
m=$(get "$port" /metrics)
for want in '^hearth_model_info{model="tiny-llama",loaded="true"} 1$' '^hearth_model_info{model="tiny-qwen2",loaded="false"} 1$' \
    '^hearth_requests_total{model="tiny-llama"} [1-9]' '^hearth_requests_total{model="tiny-qwen"} [1-9]'; do
    grep -q "$want" <<<"$m" || { echo "FAIL: /metrics lacks $want"; grep hearth_requests_total <<<"$m"; exit 1; }
done
! grep -q 'hearth_requests_total{model="tiny-qwen2"}' <<<"$m" || { echo "FAIL: /metrics has an unloaded model's series"; exit 1; }
bytes_b=$((bytes_ab - bytes_a))
[ "$(ask "$port" tiny-qwen2)" != "$want_a" ] || { echo "FAIL: tiny-qwen2 answers as tiny-llama"; exit 1; }
bytes_c=$(( $(get "$port" /stats | jq_py "o['pool']['loaded_bytes']") - bytes_ab ))
echo "pool: lazy loading; tiny-llama $bytes_a bytes, tiny-qwen $bytes_b bytes, tiny-qwen2 $bytes_c bytes"
# the 404 lists the models, in OpenAI's error shape
code=$(curl -s -o "$tmp/404" -w '%{http_code}' "http://127.0.0.1:$port/v1/completions" -d '{"model": "gpt-4", "prompt": "a"}')
python3 - "$code" "$tmp/404" <<'PY'
import json, sys
code, o = sys.argv[1], json.load(open(sys.argv[2]))
e = o["error"]
assert code == "404" and e["param"] == "model" and e["type"] == "invalid_request_error" and "code" in e, o
assert "'gpt-4'" in e["message"] and "'tiny-llama', 'tiny-qwen', 'tiny-qwen2'" in e["message"], e["message"]
PY
[ "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$port/v1/models/nope")" = 404 ] || { echo "FAIL: /v1/models/nope"; exit 1; }
get "$port" /v1/models/tiny-qwen | jq_py "o['id']" | grep -qx tiny-qwen || { echo "FAIL: /v1/models/tiny-qwen"; exit 1; }
echo "pool: a missing model is a 404 listing the models"

# a budget that holds one model: alternating requests evict, answers stay the same
budget=$(( (bytes_a > bytes_b ? bytes_a : bytes_b) + 1 ))
start_server "$tmp/q.log" --models "$A,$B" --pool-bytes "$budget" "${common[@]}"
port=$SERVER_PORT
for m in tiny-llama tiny-qwen tiny-llama tiny-qwen; do
    got=$(ask "$port" "$m")
    want=$want_a; [ "$m" = tiny-qwen ] && want=$want_b
    [ "$got" = "$want" ] || { echo "FAIL: $m after evictions: $got vs $want"; exit 1; }
    [ "$(loaded)" = "$m" ] || { echo "FAIL: loaded after a request to $m: $(loaded)"; exit 1; }
done
ev=$(get "$port" /stats | jq_py "o['pool']['evictions']")
[ "$ev" = 3 ] || { echo "FAIL: $ev evictions, want 3"; get "$port" /stats; exit 1; }
get "$port" /stats | python3 -c "
import json, sys
o = json.load(sys.stdin)
ms = {m['model']: m for m in o['models']}
assert not ms['tiny-llama']['loaded'] and ms['tiny-qwen']['loaded'], o['models']
assert ms['tiny-qwen']['requests']['served'] == 3 and ms['tiny-qwen']['tokens']['generated'] > 0, ms['tiny-qwen']
assert o['pool']['loaded_bytes'] <= o['pool']['budget_bytes'] and o['pool']['loads'] == 4, o['pool']
" || { echo "FAIL: /stats per model"; exit 1; }
echo "pool: 4 alternating requests under a one-model budget: 3 evictions, the single servers' answers"

# least recently *used*: with room for two, A B A C evicts B, whatever
# /stats and the server's health poll (every second) looked at meanwhile
pair=$(( bytes_a + bytes_b > bytes_a + bytes_c ? bytes_a + bytes_b : bytes_a + bytes_c ))
pair=$(( pair > bytes_b + bytes_c ? pair : bytes_b + bytes_c ))
start_server "$tmp/r.log" --models "$A,$B,$C" --pool-bytes $((pair + 1)) "${common[@]}"
p3=$SERVER_PORT
for m in tiny-llama tiny-qwen tiny-llama; do
    curl -sf "http://127.0.0.1:$p3/v1/completions" -d "{\"model\": \"$m\", \"prompt\": \"a\", \"max_tokens\": 1}" >/dev/null
    get "$p3" /stats >/dev/null
done
sleep 1.2
curl -sf "http://127.0.0.1:$p3/v1/completions" -d '{"model": "tiny-qwen2", "prompt": "a", "max_tokens": 1}' >/dev/null
got=$(get "$p3" /v1/models | jq_py "','.join(m['id'] for m in o['data'] if m['loaded'])")
[ "$got" = "tiny-llama,tiny-qwen2" ] || { echo "FAIL: LRU evicted the wrong model: loaded $got"; exit 1; }
echo "pool: least recently used goes first"

# a model's grammar mask cache counts in the budget: with room for exactly
# tiny-llama and tiny-qwen, a structured answer from tiny-llama grows its
# cache and tiny-qwen (idle) is evicted when it ends
start_server "$tmp/g.log" --models "$A,$B" --pool-bytes $((bytes_a + bytes_b)) "${common[@]}"
p4=$SERVER_PORT
for m in tiny-qwen tiny-llama; do
    curl -sf "http://127.0.0.1:$p4/v1/completions" -d "{\"model\": \"$m\", \"prompt\": \"a\", \"max_tokens\": 1}" >/dev/null
done
[ "$(get "$p4" /stats | jq_py "(o['pool']['loaded'], o['pool']['evictions'])")" = "(2, 0)" ] ||
    { echo "FAIL: both should fit: $(get "$p4" /stats | jq_py "o['pool']")"; exit 1; }
curl -sf "http://127.0.0.1:$p4/v1/chat/completions" -d '{"model": "tiny-llama", "max_tokens": 20,
    "messages": [{"role": "user", "content": "hi"}], "response_format": {"type": "json_schema", "json_schema":
    {"name": "x", "schema": {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}}}}' >/dev/null
get "$p4" /stats | python3 -c "
import json, sys
o, a = json.load(sys.stdin), $bytes_a
g = {m['model']: m.get('grammar_cache_bytes', 0) for m in o['models']}['tiny-llama']
assert g > 0 and o['pool']['loaded_bytes'] == a + g, (g, o['pool'])
assert o['pool']['loaded'] == 1 and o['pool']['evictions'] == 1, o['pool']
print(f'pool: a {g}-byte grammar mask cache counted in the budget: the idle model evicted')
" || { echo "FAIL: the mask cache is not counted"; exit 1; }

# never evicted while a request runs on it: a long stream on tiny-llama, then tiny-qwen
# (4 choices of 4000 tokens: one alone, with the vector softmax, could end
# on a loaded machine before tiny-qwen had loaded and answered)
curl -sfN "http://127.0.0.1:$port/v1/completions" -H 'Content-Type: application/json' \
    -d '{"model": "tiny-llama", "prompt": "a", "max_tokens": 4000, "n": 4, "stream": true, "logit_bias": {"370": -100}}' >"$tmp/long.out" &
long=$!
for _ in $(seq 100); do grep -q '^data: {' "$tmp/long.out" 2>/dev/null && break; sleep 0.05; done
got=$(curl -sf "http://127.0.0.1:$port/v1/completions" -H 'Content-Type: application/json' \
    -d '{"model": "tiny-qwen", "prompt": "The cat", "max_tokens": 8, "temperature": 0}' | jq_py "o['choices'][0]['text']")
[ "$got" = "$(echo "$want_b" | jq_py "o[1]")" ] || { echo "FAIL: tiny-qwen beside a running tiny-llama: $got"; exit 1; }
during=$(loaded)
kill -0 "$long" 2>/dev/null || { echo "FAIL: the long request ended too soon to test"; exit 1; }
wait "$long"
tail -2 "$tmp/long.out" | grep -qx 'data: \[DONE\]' || { echo "FAIL: the long stream was cut: $(tail -c 300 "$tmp/long.out")"; exit 1; }
# tiny-qwen was loaded over the budget beside it, and evicted once idle
# (loads 4 + 1 (tiny-llama) + 1, evictions 3 + 1 + 1)
[ "$during" = "tiny-llama" ] || { echo "FAIL: loaded during the long request: $during"; exit 1; }
[ "$(loaded)" = "tiny-llama" ] || { echo "FAIL: after it: $(loaded)"; exit 1; }
get "$port" /stats | jq_py "(o['pool']['loads'], o['pool']['evictions'])" | grep -qx '(6, 5)' ||
    { echo "FAIL: loads/evictions: $(get "$port" /stats | jq_py "o['pool']")"; exit 1; }
echo "pool: a model in use is not evicted (the other loads over the budget and goes once idle)"

# --model-dir and --served-model-name
start_server "$tmp/d.log" --model-dir "$tmp/dir" "${common[@]}"
[ "$(get "$SERVER_PORT" /v1/models | jq_py "','.join(m['id'] for m in o['data'])")" = "tiny-llama,tiny-qwen" ] ||
    { echo "FAIL: --model-dir: $(get "$SERVER_PORT" /v1/models)"; exit 1; }
[ "$(ask "$SERVER_PORT" tiny-qwen)" = "$want_b" ] || { echo "FAIL: --model-dir answer"; exit 1; }
start_server "$tmp/n.log" --models "$A,$B" --served-model-name small,big "${common[@]}"
[ "$(get "$SERVER_PORT" /v1/models | jq_py "','.join(m['id'] for m in o['data'])")" = "small,big" ] ||
    { echo "FAIL: --served-model-name: $(get "$SERVER_PORT" /v1/models)"; exit 1; }
[ "$(ask "$SERVER_PORT" big)" = "$want_b" ] && [ "$(ask "$SERVER_PORT" tiny-llama)" = "$want_a" ] &&
    [ "$(ask "$SERVER_PORT" "$B")" = "$want_b" ] ||
    { echo "FAIL: names, old names and paths"; exit 1; }
[ "$(ask "$SERVER_PORT" -)" = "$want_a" ] || { echo "FAIL: default_model is the first"; exit 1; }
start_server "$tmp/s.log" --model "$A" --served-model-name alpha,beta "${common[@]}"
[ "$(get "$SERVER_PORT" /v1/models | jq_py "o['data'][0]['id']")" = alpha ] && [ "$(ask "$SERVER_PORT" beta)" = "$want_a" ] ||
    { echo "FAIL: --served-model-name on one model"; exit 1; }
echo "pool: --model-dir, --served-model-name"

# the flags' errors: one line, exit 1
bad() {
    if "$bin" serve --port 0 "$@" 2>"$tmp/err"; then echo "FAIL: accepted: $*"; exit 1; fi
    [ "$(wc -l <"$tmp/err")" = 1 ] && grep -q "^hearth: " "$tmp/err" || { echo "FAIL: $*: $(cat "$tmp/err")"; exit 1; }
}
bad --models "$A,$A"
grep -q "two models are called 'tiny-llama'" "$tmp/err" || { echo "FAIL: $(cat "$tmp/err")"; exit 1; }
bad --models "$A,$tmp/nope"
bad --models "$A,$B" --served-model-name x
bad --model "$A" --models "$A,$B"
bad --model "$A" --pool-bytes 1G
bad --models "$A,$B" --draft-model "$A"
bad --model-dir "$tmp/dir/notes.txt"
echo "pool: ok"
