#!/usr/bin/env bash
# hearth get test-org/tiny from the stand-in hub into a fresh cache, as a tar
# for tools/hfcompat/check.sh:  make-cache.sh HEARTH_BIN OUT.tar
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
bin=$(realpath "$1"); out=$(realpath -m "$2")
tmp=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null; rm -rf "$tmp"' EXIT
bash "$root/tools/hfcompat/repo.sh" "$tmp/repo"
python3 "$root/tests/e2e/hub_server.py" "$tmp/ports" test-org/tiny="$tmp/repo" &
for _ in $(seq 200); do [ -f "$tmp/ports" ] && break; sleep 0.05; done
read -r port _ < "$tmp/ports"
HF_ENDPOINT=http://127.0.0.1:$port HF_HUB_CACHE=$tmp/cache "$bin" get test-org/tiny >/dev/null
tar -cf "$out" -C "$tmp/cache" .
