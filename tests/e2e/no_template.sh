#!/usr/bin/env bash
# A model without a chat template (a base model; a GGUF without
# tokenizer.chat_template) still serves: /v1/completions answers, chat
# requests get a 400 naming the missing template, and --chat-template (text
# or a file) / --chat-template-file gives one: the same answers as the model
# that ships that template.
set -euo pipefail
bin=${HEARTH_BIN:?}; root=${HEARTH_ROOT:?}
. "$root/tests/e2e/lib/serve.sh"
tmp=$(mktemp -d)
trap 'stop_servers; rm -rf "$tmp"' EXIT
tiny_chat_model "$tmp/chat"
tiny_chat_model "$tmp/base"
python3 - "$tmp" <<'PY'
import json, sys
tmp = sys.argv[1]
p = f"{tmp}/base/tokenizer_config.json"
c = json.load(open(p))
open(f"{tmp}/template.jinja", "w").write(c.pop("chat_template"))
json.dump(c, open(p, "w"))
PY
"$bin" convert --model "$tmp/base" --out "$tmp/base.gguf" --gguf F32 >/dev/null
post() { # PORT PATH BODY -> "STATUS BODY"
    curl -s -o "$tmp/body" -w '%{http_code}' "http://127.0.0.1:$1$2" \
        -H 'Content-Type: application/json' -d "$3"
    echo " $(cat "$tmp/body")"
}
chat='{"messages": [{"role": "user", "content": "Hello there"}], "max_tokens": 8, "temperature": 0}'
comp='{"prompt": "The cat", "max_tokens": 8, "temperature": 0}'
answer() { python3 -c "import json,sys; o=json.loads(sys.argv[1].split(' ',1)[1]); c=o['choices'][0]; print(c.get('text', c.get('message', {}).get('content')))" "$1"; }

start_server "$tmp/chat.log" --model "$tmp/chat" --threads 1
want_chat=$(post "$SERVER_PORT" /v1/chat/completions "$chat")
want_comp=$(post "$SERVER_PORT" /v1/completions "$comp")
[ "${want_chat%% *}" = 200 ] && [ "${want_comp%% *}" = 200 ] || { echo "FAIL: reference server: $want_chat"; exit 1; }

for model in "$tmp/base" "$tmp/base.gguf"; do
    start_server "$tmp/base.log" --model "$model" --threads 1
    got=$(post "$SERVER_PORT" /v1/completions "$comp")
    [ "${got%% *}" = 200 ] && [ "$(answer "$got")" = "$(answer "$want_comp")" ] ||
        { echo "FAIL: $model: completions: $got"; cat "$tmp/base.log"; exit 1; }
    got=$(post "$SERVER_PORT" /v1/chat/completions "$chat")
    echo "$got" | grep -q '^400 .*has no chat template.*--chat-template' &&
        echo "$got" | grep -q '"param": "messages"' ||
        { echo "FAIL: $model: chat without a template: $got"; exit 1; }
    got=$(post "$SERVER_PORT" /v1/messages '{"max_tokens": 4, "messages": [{"role": "user", "content": "hi"}]}')
    echo "$got" | grep -q '^400 .*"type": "error".*no chat template' ||
        { echo "FAIL: $model: /v1/messages without a template: $got"; exit 1; }
    grep -q 'no chat template' "$tmp/base.log" || { echo "FAIL: no warning at start"; exit 1; }
    echo "no_template: $(basename "$model"): completions 200, chat 400"
done

# the template given by flag: as a file, as text, by --chat-template-file
for flag in "--chat-template $tmp/template.jinja" "--chat-template-file $tmp/template.jinja" "text"; do
    if [ "$flag" = text ]; then
        set -- --chat-template "$(cat "$tmp/template.jinja")"
    else
        set -- $flag
    fi
    for model in "$tmp/base" "$tmp/base.gguf"; do
        start_server "$tmp/flag.log" --model "$model" --threads 1 "$@"
        got=$(post "$SERVER_PORT" /v1/chat/completions "$chat")
        [ "${got%% *}" = 200 ] && [ "$(answer "$got")" = "$(answer "$want_chat")" ] ||
            { echo "FAIL: $model ${flag%% *}: $got vs $want_chat"; cat "$tmp/flag.log"; exit 1; }
    done
    echo "no_template: ${flag%% *}: chat answers as the model that ships the template"
done
if "$bin" serve --model "$tmp/base" --chat-template x --chat-template-file "$tmp/template.jinja" 2>"$tmp/err"; then
    echo "FAIL: both template flags accepted"; exit 1
fi
grep -q 'not both' "$tmp/err" || { echo "FAIL: $(cat "$tmp/err")"; exit 1; }
if "$bin" serve --model "$tmp/base" --chat-template-file "$tmp/nope.jinja" 2>"$tmp/err"; then
    echo "FAIL: missing template file accepted"; exit 1
fi
[ "$(wc -l <"$tmp/err")" = 1 ] || { echo "FAIL: not one line: $(cat "$tmp/err")"; exit 1; }
echo "no_template: ok"
