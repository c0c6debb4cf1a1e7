#!/usr/bin/env bash
# The web chat UI end to end: `serve --no-ui` answers 404 at / and the API
# still works; the embedded files come with their content types, the CSP and
# ETags (304 on a match); then Debian's headless Chromium, driven by
# puppeteer-core (tests/e2e/ui_test.mjs), chats with the demo model.
# Screenshots (1280x800 and 390x844, light and dark) land in
# $HEARTH_UI_SHOTS, default <build dir>/ui-screenshots.
set -euo pipefail
bin=${HEARTH_BIN:?}; root=${HEARTH_ROOT:?}
. "$root/tests/e2e/lib/serve.sh"
chromium=${HEARTH_CHROMIUM:-/usr/bin/chromium}
if [ ! -x "$chromium" ]; then
    echo "FAIL: no Chromium at $chromium: the UI test needs Debian's chromium package"
    echo "      (tools/apt-packages.txt; 'make deps' installs it, or set HEARTH_CHROMIUM)"
    exit 1
fi
if [ ! -f "$root/.deps/npm/node_modules/puppeteer-core/package.json" ]; then
    echo "FAIL: puppeteer-core is not installed in $root/.deps/npm ('make deps' installs it)"
    exit 1
fi
shots=${HEARTH_UI_SHOTS:-$(dirname "$bin")/ui-screenshots}
tmp=$(mktemp -d)
trap 'stop_servers; rm -rf "$tmp"' EXIT
get() { curl --noproxy '*' -s -o /dev/null -w '%{http_code}' "$@"; }
fail() { echo "FAIL: $*"; exit 1; }

# --no-ui: nothing at / or /ui/*, the API unchanged
start_server "$tmp/noui.log" --model "$root/models/hearth-demo" --no-ui --threads 1
base=http://127.0.0.1:$SERVER_PORT
[ "$(get "$base/")" = 404 ] || fail "--no-ui: GET / is not a 404"
[ "$(get "$base/ui/app.js")" = 404 ] || fail "--no-ui: GET /ui/app.js is not a 404"
[ "$(get "$base/health")" = 200 ] || fail "--no-ui: /health"
kill "$SERVER_PID"; wait "$SERVER_PID" || true
echo "ui: --no-ui gives 404 at / and /ui/app.js"

start_server "$tmp/ui.log" --model "$root/models/hearth-demo" --threads 1
base=http://127.0.0.1:$SERVER_PORT
curl --noproxy '*' -sD "$tmp/h" -o "$tmp/index.html" "$base/"
grep -qi '^content-type: text/html; charset=utf-8' "$tmp/h" || fail "/ content type"
grep -qi "^content-security-policy: default-src 'none'; script-src 'self'" "$tmp/h" || fail "/ has no strict CSP"
etag=$(sed -n 's/^[Ee][Tt][Aa][Gg]: \(.*\)\r$/\1/p' "$tmp/h")
[ -n "$etag" ] || fail "/ has no ETag"
[ "$(get -H "If-None-Match: $etag" "$base/")" = 304 ] || fail "If-None-Match with the ETag is not a 304"
[ "$(get -H 'If-None-Match: "other"' "$base/")" = 200 ] || fail "another ETag is not a 200"
for f in app.js:text/javascript markdown.js:text/javascript style.css:text/css icon.svg:image/svg+xml; do
    ct=$(curl --noproxy '*' -s -o /dev/null -w '%{content_type}' "$base/ui/${f%%:*}")
    case "$ct" in "${f#*:}"*) ;; *) fail "/ui/${f%%:*}: content type '$ct'" ;; esac
done
[ "$(get "$base/ui/nope.js")" = 404 ] || fail "an unknown /ui/ file is not a 404"
grep -q 'https\?://' "$tmp/index.html" && fail "index.html names an external address"
echo "ui: content types, CSP, ETag and 304"

node "$root/tests/e2e/ui_test.mjs" "$base" "$root" "$shots" "$chromium"
