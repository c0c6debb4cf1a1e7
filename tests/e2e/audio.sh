#!/usr/bin/env bash
# Qwen2-Audio clips through the server on a random model made here
# (tests/e2e/lib/qwen2_audio.py: the qwen2 fixture's text model, a
# Whisper-style encoder of 16 mels, Qwen2-Audio's chat template). An
# input_audio part places <|AUDIO|> x the clip's encoder rows between
# <|audio_bos|> and <|audio_eos|> (0.5 s: 50 mel frames, 12 tokens; 1.2 s:
# 120 frames, 30 tokens); the repeat comes from the prompt cache with the
# same output; two different clips sent together (batched) answer as each
# alone, logprobs included; hearth generate --audio answers as the server;
# bad base64, bytes that are not a WAV, a clip past 30 s, a 44.1 kHz clip, a
# non-wav format, audio token text without a clip and audio to a text-only
# model are 400s in the API's error shape.
set -euo pipefail
bin=${HEARTH_BIN:?}; root=${HEARTH_ROOT:?}
. "$root/tests/e2e/lib/serve.sh"
fail() { echo "FAIL: $*"; exit 1; }
tmp=$(mktemp -d)
trap 'stop_servers; rm -rf "$tmp"' EXIT
gen=$root/tests/e2e/lib/qwen2_audio.py
python3 "$gen" model "$root" "$tmp/m"
python3 "$gen" wav "$tmp/a0.wav" 0.5 16000 1 16
python3 "$gen" wav "$tmp/a1.wav" 1.2 16000 2 24 int 2
python3 "$gen" wav "$tmp/long.wav" 30.5 16000 1 8
python3 "$gen" wav "$tmp/cd.wav" 0.5 44100 1 16
start_server "$tmp/serve.log" --model "$tmp/m" --threads 2 || fail "server did not start: $(tail -3 "$tmp/serve.log")"
api=http://127.0.0.1:$SERVER_PORT
curl -sf "$api/v1/models" | python3 -c '
import json, sys
m = json.load(sys.stdin)["data"][0]
assert m["modalities"] == ["text", "audio"], m' || fail "/v1/models modalities"
body() { # wav file, format, out
    python3 - "$1" "$2" >"$3" <<'PY'
import base64, json, sys
data = base64.b64encode(open(sys.argv[1], "rb").read()).decode() if sys.argv[1] != "-" else "not base64!"
print(json.dumps({"messages": [{"role": "user", "content": [
    {"type": "input_audio", "input_audio": {"data": data, "format": sys.argv[2]}},
    {"type": "text", "text": "what is this"}]}],
    "max_tokens": 6, "temperature": 0, "logprobs": True, "top_logprobs": 2}))
PY
}
chat() { curl -s -o "$2" -w '%{http_code}' "$api/v1/chat/completions" -H 'Content-Type: application/json' -d @"$1"; }
for i in 0 1; do
    body "$tmp/a$i.wav" wav "$tmp/req$i"
    code=$(chat "$tmp/req$i" "$tmp/first$i"); [ "$code" = 200 ] || fail "clip $i: HTTP $code $(cat "$tmp/first$i")"
done
code=$(chat "$tmp/req1" "$tmp/again1"); [ "$code" = 200 ] || fail "clip 1 again: HTTP $code"
# both at once: one batch
chat "$tmp/req0" "$tmp/both0" >"$tmp/code0" & p0=$!
chat "$tmp/req1" "$tmp/both1" >"$tmp/code1" & p1=$!
wait $p0 $p1
[ "$(cat "$tmp/code0")$(cat "$tmp/code1")" = 200200 ] || fail "batched: HTTP $(cat "$tmp/code0") $(cat "$tmp/code1")"
python3 - "$tmp" <<'PY' || fail "token counts, cache, or batched != alone"
import json, sys
t = sys.argv[1]
a, b, c, b0, b1 = (json.load(open(f"{t}/{n}")) for n in ("first0", "first1", "again1", "both0", "both1"))
pa, pb = a["usage"]["prompt_tokens"], b["usage"]["prompt_tokens"]
assert pb - pa == 30 - 12, (pa, pb)  # 1.2 s: 120 frames -> 60 -> 30 tokens; 0.5 s: 50 -> 25 -> 12
msg = lambda r: r["choices"][0]["message"]["content"]
lp = lambda r: [(x["token"], x["logprob"]) for x in r["choices"][0]["logprobs"]["content"]]
assert msg(b) == msg(c) and lp(b) == lp(c), (b, c)
cached = (c["usage"].get("prompt_tokens_details") or {}).get("cached_tokens", 0)
assert cached > 0, c["usage"]
for alone, both in ((a, b0), (b, b1)):
    assert msg(alone) == msg(both), (alone, both)
    for (ta, la), (tb, lb) in zip(lp(alone), lp(both)):
        assert ta == tb and abs(la - lb) < 1e-5, (ta, la, tb, lb)
print("audio: %d and %d prompt tokens, %d cached on the repeat, batched == alone" % (pa, pb, cached))
PY
expect400() { # request file, what the message must say, label
    code=$(chat "$1" "$tmp/err"); [ "$code" = 400 ] || fail "$3: HTTP $code $(cat "$tmp/err")"
    python3 - "$tmp/err" "$2" <<'PY' || fail "$3: $(cat "$tmp/err")"
import json, sys
e = json.load(open(sys.argv[1]))["error"]
assert e["type"] == "invalid_request_error" and sys.argv[2] in e["message"], e
PY
}
body - wav "$tmp/bad64"; expect400 "$tmp/bad64" "bad base64" "bad base64"
printf 'RIFX not a wave file at all' >"$tmp/junk.bin"; body "$tmp/junk.bin" wav "$tmp/junk"
expect400 "$tmp/junk" "not a WAV file" "not a WAV"
body "$tmp/long.wav" wav "$tmp/longreq"; expect400 "$tmp/longreq" "at most 30 s" "too long"
body "$tmp/cd.wav" wav "$tmp/cdreq"; expect400 "$tmp/cdreq" "44100 Hz" "44.1 kHz"
body "$tmp/a0.wav" mp3 "$tmp/mp3"; expect400 "$tmp/mp3" "format 'mp3'" "mp3"
printf '{"messages": [{"role": "user", "content": "<|AUDIO|> hi"}], "max_tokens": 2}' >"$tmp/stray"
code=$(chat "$tmp/stray" "$tmp/err"); [ "$code" = 400 ] || fail "audio token text without a clip: HTTP $code $(cat "$tmp/err")"
gen_msgs='[{"role": "user", "content": [{"type": "input_audio", "input_audio": {"data": "", "format": "wav"}}, {"type": "text", "text": "what is this"}]}]'
"$bin" generate --model "$tmp/m" --messages "$gen_msgs" --audio "$tmp/a1.wav" --max-tokens 6 --temp 0 --json \
    --threads 2 >"$tmp/gen.json" 2>"$tmp/gen.err" || fail "generate --audio: $(cat "$tmp/gen.err")"
python3 - "$tmp/gen.json" "$tmp/first1" <<'PY' || fail "generate --audio answers otherwise than the server"
import json, sys
g, s = (json.load(open(p)) for p in sys.argv[1:])
assert g["text"] == s["choices"][0]["message"]["content"], (g["text"], s)
assert len(g["prompt_tokens"]) == s["usage"]["prompt_tokens"], (g, s["usage"])
PY
"$bin" generate --model "$tmp/m" --chat hi --audio "$tmp/cd.wav" --max-tokens 2 >/dev/null 2>"$tmp/gen.err" &&
    fail "generate --audio with a 44.1 kHz clip succeeded"
grep -q "44100 Hz" "$tmp/gen.err" || fail "generate --audio 44.1 kHz: $(cat "$tmp/gen.err")"
stop_servers
# a text-only model: 400 naming the modality
mkdir "$tmp/t"
for f in models/qwen2/config.json models/qwen2/model.safetensors serve/tokenizer.json serve/tokenizer_config.json; do
    ln -s "$root/tests/fixtures/$f" "$tmp/t/"
done
start_server "$tmp/serve2.log" --model "$tmp/t" --threads 2 ||
    fail "text server did not start: $(tail -3 "$tmp/serve2.log")"
api=http://127.0.0.1:$SERVER_PORT
expect400 "$tmp/req0" "does not accept audio (input_audio parts)" "text-only model"
echo "audio: ok"
