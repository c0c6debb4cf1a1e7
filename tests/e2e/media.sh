#!/usr/bin/env bash
# Media intake (docs/images.md) against a stand-in image host on 127.0.0.1
# (tests/e2e/media_server.mjs), through `hearth media`, which loads a URL the
# way the server loads an image_url part: loopback refused by default and
# allowed with --allow-private-media or --media-allow-host; a redirect from
# an allowed host to a private address refused (every hop is checked); the
# size limit with and without Content-Length; the time limit; redirect
# loops, non-http schemes, non-image replies. Then the server: an image_url
# or input_audio part to a model without vision is a 400 that names the
# modality, and /v1/models lists each model's modalities.
set -euo pipefail
bin=${HEARTH_BIN:?}; root=${HEARTH_ROOT:?}
. "$root/tests/e2e/lib/serve.sh"
fail() { echo "FAIL: $*"; exit 1; }
tmp=$(mktemp -d)
host_pid=
trap '[ -n "$host_pid" ] && kill "$host_pid" 2>/dev/null; stop_servers; rm -rf "$tmp"' EXIT

# a 5x3 RGB PNG, made with the standard library
python3 - "$tmp/img.png" <<'PY'
import struct, sys, zlib
w, h = 5, 3
raw = b''.join(b'\0' + bytes((x * 7 + y * 3) % 256 for x in range(w * 3)) for y in range(h))
def chunk(t, d):
    return struct.pack('>I', len(d)) + t + d + struct.pack('>I', zlib.crc32(t + d) & 0xffffffff)
open(sys.argv[1], 'wb').write(b'\x89PNG\r\n\x1a\n' + chunk(b'IHDR', struct.pack('>IIBBBBB', w, h, 8, 2, 0, 0, 0))
                              + chunk(b'IDAT', zlib.compress(raw)) + chunk(b'IEND', b''))
PY
node "$root/tests/e2e/media_server.mjs" "$tmp/port" "$tmp/img.png" &
host_pid=$!
for _ in $(seq 200); do [ -s "$tmp/port" ] && break; sleep 0.05; done
read -r port < "$tmp/port" || fail "stand-in image host did not start"
lo=http://127.0.0.1:$port
named=http://localhost:$port

ok() { # want, then `hearth media` arguments
    local want=$1; shift
    "$bin" media "$@" >"$tmp/out" 2>"$tmp/err" || fail "media $*: $(cat "$tmp/err")"
    grep -qF -- "$want" "$tmp/out" || fail "'$want' not in: $(cat "$tmp/out")"
}
refused() { # want, then `hearth media` arguments: exit 1, one line naming it
    local want=$1; shift
    if "$bin" media "$@" >"$tmp/out" 2>"$tmp/err"; then fail "expected failure: media $*"; fi
    [ "$(wc -l < "$tmp/err")" -eq 1 ] || fail "not one line: $(cat "$tmp/err")"
    grep -qF -- "$want" "$tmp/err" || fail "'$want' not in: $(cat "$tmp/err")"
}

# the guard: loopback refused by default, by name and by literal
refused "resolves to the loopback address 127.0.0.1" --url "$lo/img.png"
refused "the loopback address" --url "$named/img.png"
refused "the loopback address" --url "http://[::1]:$port/img.png"
refused "the private address" --url "http://[::ffff:10.0.0.1]:$port/img.png"
refused "the link-local address" --url "http://169.254.169.254/latest/meta-data/"
refused "the unspecified address 0.0.0.0" --url "http://0.0.0.0:$port/img.png"
ok "png 5x3 " --url "$lo/img.png" --allow-private-media
ok "png 5x3 " --url "$named/img.png" --media-allow-host localhost
echo "media: loopback refused by default, allowed by flag and by host"

# redirects: each hop checked; from an allowed host to a loopback address refused
refused "'127.0.0.1' resolves to the loopback address 127.0.0.1" \
    --media-allow-host localhost --url "$named/redirect?to=$lo/img.png"
refused "the link-local address" --media-allow-host localhost \
    --url "$named/redirect?to=http://169.254.169.254/"
ok "png 5x3 " --media-allow-host localhost --url "$named/redirect?to=/img.png"
ok "png 5x3 " --allow-private-media --url "$lo/redirect?to=$lo/redirect%3Fto%3D%2Fimg.png"
refused "more than 5 redirects" --allow-private-media --url "$lo/loop"
refused "not supported yet: 'file' URLs" --allow-private-media --url "$lo/redirect?to=file:///etc/passwd"
refused "not supported yet: 'file' URLs" --url "file:///etc/passwd"
echo "media: redirects re-checked hop by hop"

# limits and replies
refused "larger than 1048576 bytes" --allow-private-media --media-max-mb 1 --url "$lo/big"
refused "larger than 1048576 bytes" --allow-private-media --media-max-mb 1 --url "$lo/big-chunked"
t0=$(date +%s.%N)
refused "longer than its time limit (1 s)" --allow-private-media --media-timeout 1 --url "$lo/slow"
t1=$(date +%s.%N)
python3 -c "import sys; d = $t1 - $t0; sys.exit(0 if d < 3.5 else 1)" || fail "the 1 s limit took $t1 - $t0"
refused "content type is 'text/html', not an image" --allow-private-media --url "$lo/html"
refused "answered HTTP 404" --allow-private-media --url "$lo/missing"
refused "bad base64" --url "data:image/png;base64,iVBO!"
refused "not an image hearth reads" --url "data:image/png;base64,aGVsbG8="
echo "media: size (with and without Content-Length) and time limits, replies checked"

# the server: a model without vision or audio names the modality
start_server "$tmp/serve.log" --threads 1 || fail "server did not start"
api=http://127.0.0.1:$SERVER_PORT
curl -sf "$api/v1/models" | python3 -c '
import json, sys
m = json.load(sys.stdin)["data"][0]
assert m["modalities"] == ["text"], m' || fail "/v1/models modalities"
chat() { curl -s -o "$tmp/body" -w '%{http_code}' "$api/v1/chat/completions" -H 'Content-Type: application/json' -d "$1"; }
code=$(chat '{"messages": [{"role": "user", "content": [{"type": "text", "text": "what is this?"},
       {"type": "image_url", "image_url": {"url": "'"$lo"'/img.png"}}]}]}')
[ "$code" = 400 ] || fail "image_url to a text model: HTTP $code $(cat "$tmp/body")"
grep -qF "messages.0.content.1: the model 'hearth-demo' does not accept images" "$tmp/body" ||
    fail "image refusal: $(cat "$tmp/body")"
code=$(chat '{"messages": [{"role": "user", "content": [{"type": "input_audio",
       "input_audio": {"data": "UklGRg==", "format": "wav"}}]}]}')
[ "$code" = 400 ] || fail "input_audio: HTTP $code"
grep -qF "messages.0.content.0: the model 'hearth-demo' does not accept audio (input_audio parts); its input is text only" \
    "$tmp/body" || fail "audio: $(cat "$tmp/body")"
code=$(chat '{"messages": [{"role": "user", "content": "still serving?"}], "max_tokens": 2}')
[ "$code" = 200 ] || fail "a text request after the refusals: HTTP $code"
echo "media: a text-only model refuses image_url and input_audio naming the modality"
