#!/usr/bin/env bash
# Listening on IPv6: --host ::1 (loopback, IPv6 only), --host [::1], and
# --host :: (dual stack: IPv6 and IPv4 clients). Skipped, saying why, on a
# machine without IPv6 loopback.
set -euo pipefail
bin=${HEARTH_BIN:?}; root=${HEARTH_ROOT:?}
. "$root/tests/e2e/lib/serve.sh"
if ! python3 -c 'import socket; socket.socket(socket.AF_INET6).bind(("::1", 0))' 2>/dev/null; then
    echo "skip: this machine cannot bind ::1 (no IPv6 loopback)"
    exit 0
fi
tmp=$(mktemp -d)
trap 'stop_servers; rm -rf "$tmp"' EXIT
start6() { # LOG HOST: a server on HOST (one thread); sets PORT
    start_server "$1" --threads 1 --host "$2" || exit 1
    PORT=$SERVER_PORT
}
ask() { curl -sf -g "http://$1/v1/completions" -H 'Content-Type: application/json' \
        -d '{"prompt": "The cat", "max_tokens": 4, "temperature": 0}' |
        python3 -c 'import json,sys; print(json.load(sys.stdin)["choices"][0]["text"])'; }

start6 "$tmp/a.log" ::1
grep -q 'listening on http://\[::1\]:' "$tmp/a.log" || { echo "FAIL: URL not bracketed"; cat "$tmp/a.log"; exit 1; }
a=$(ask "[::1]:$PORT")
curl -sf -g "http://[::1]:$PORT/health" >/dev/null || { echo "FAIL: /health on ::1"; exit 1; }
if curl -sf -m 2 "http://127.0.0.1:$PORT/health" >/dev/null 2>&1; then
    echo "FAIL: --host ::1 answered on 127.0.0.1"; exit 1
fi
echo "ipv6: ::1 answers on IPv6 only"

start6 "$tmp/b.log" "[::1]"
curl -sf -g "http://[::1]:$PORT/health" >/dev/null || { echo "FAIL: --host [::1]"; exit 1; }

start6 "$tmp/c.log" ::
b=$(ask "[::1]:$PORT")
c=$(ask "127.0.0.1:$PORT")
[ "$a" = "$b" ] && [ "$b" = "$c" ] || { echo "FAIL: answers differ: '$a' '$b' '$c'"; exit 1; }
echo "ipv6: :: answers IPv6 and IPv4 clients (dual stack)"

if "$bin" serve --port 0 --host ::zz 2>"$tmp/err"; then echo "FAIL: bad host accepted"; exit 1; fi
grep -q "not an IPv4 or IPv6 address" "$tmp/err" || { echo "FAIL: $(cat "$tmp/err")"; exit 1; }
echo "ipv6: ok"
