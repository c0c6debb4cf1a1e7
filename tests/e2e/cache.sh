#!/usr/bin/env bash
# hearth ls and gc over a Hugging Face cache laid out here: two revisions of
# a model (main and an older one no ref names), an unloadable revision, a
# blob nothing links to, partial downloads (one being written: its lock
# held), a ref to a missing snapshot; --dry-run removes nothing, gc removes
# exactly those, and the model still loads by name.
set -euo pipefail
bin=${HEARTH_BIN:?}
root=${HEARTH_ROOT:?}
fail() { echo "FAIL: $*"; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export HF_HUB_CACHE=$tmp/hub
r=$HF_HUB_CACHE/models--org--tiny
new=1111111111111111111111111111111111111111
old=2222222222222222222222222222222222222222
bad=3333333333333333333333333333333333333333
mkdir -p "$r/blobs" "$r/refs/refs/pr" "$r/snapshots/$new/sub" "$r/snapshots/$old" "$r/snapshots/$bad" \
         "$HF_HUB_CACHE/.locks/models--org--tiny" "$HF_HUB_CACHE/datasets--org--data/blobs"
blob() { # file -> its sha256, stored as a blob
    local h; h=$(sha256sum "$1" | cut -d' ' -f1); cp "$1" "$r/blobs/$h"; echo "$h"
}
fx=$root/tests/fixtures/models/llama
cfg=$(blob "$fx/config.json"); w=$(blob "$fx/model.safetensors")
echo old > "$tmp/o"; oldcfg=$(blob "$tmp/o")
sed 's/"model_type": *"llama"/"model_type": "mamba"/' "$fx/config.json" > "$tmp/m"; badcfg=$(blob "$tmp/m")
echo orphan > "$tmp/x"; orphan=$(blob "$tmp/x")
echo nested > "$tmp/n"; nested=$(blob "$tmp/n")
ln -s "../../blobs/$cfg" "$r/snapshots/$new/config.json"
ln -s "../../blobs/$w" "$r/snapshots/$new/model.safetensors"
ln -s "../../../blobs/$nested" "$r/snapshots/$new/sub/n.txt"
ln -s "../../blobs/$oldcfg" "$r/snapshots/$old/config.json"
ln -s "../../blobs/$w" "$r/snapshots/$old/model.safetensors"   # shared with main: kept
ln -s "../../blobs/$badcfg" "$r/snapshots/$bad/config.json"
ln -s "../../blobs/$w" "$r/snapshots/$bad/model.safetensors"
printf %s $new > "$r/refs/main"
printf %s $bad > "$r/refs/refs/pr/1"
printf %s 4444444444444444444444444444444444444444 > "$r/refs/gone"
head -c 1000 /dev/zero > "$r/blobs/aaaa.incomplete"
head -c 2000 /dev/zero > "$r/blobs/bbbb.incomplete"
touch -d '2020-01-01' "$r/blobs/$oldcfg"
# a download in progress holds bbbb's lock (here: this shell)
exec 9>"$HF_HUB_CACHE/.locks/models--org--tiny/bbbb.lock"
flock 9

out=$("$bin" ls) || fail "ls"
grep -q "^org/tiny  *111111111111 main  *3 .* yes: llama, safetensors" <<<"$out" || fail "main row: $out"
grep -q "^org/tiny  *222222222222 -  *2 .* no: " <<<"$out" || fail "old row: $out"
grep -q "^org/tiny  *333333333333 refs/pr/1 .* no: .*mamba" <<<"$out" || fail "unloadable row: $out"
grep -q "^hearth-demo .* yes: llama" <<<"$out" || fail "demo row: $out"
"$bin" ls --json | python3 -c '
import json, sys
o = json.load(sys.stdin)
m = {(x["name"], x.get("commit")): x for x in o["models"]}
main = m[("org/tiny", "1" * 40)]
assert main["refs"] == ["main"] and main["loadable"] and main["files"] == 3, main
assert not m[("org/tiny", "3" * 40)]["loadable"]
assert o["dangling_refs"] == 1 and o["partial_bytes"] == 1000, o
' || fail "ls --json"

# --dry-run: the list, nothing removed
before=$(cd "$HF_HUB_CACHE" && find . | sort)
out=$("$bin" gc --dry-run) || fail "gc --dry-run"
grep -q "would remove org/tiny .*old revision .*snapshots/$old" <<<"$out" || fail "old snapshot: $out"
grep -q "ref to a missing snapshot.*refs/gone" <<<"$out" || fail "dangling ref: $out"
grep -q "blob no kept revision uses .*blobs/$oldcfg" <<<"$out" || fail "old blob: $out"
grep -q "blob no kept revision uses .*blobs/$orphan" <<<"$out" || fail "orphan blob: $out"
grep -q "partial download .*1000 B.*aaaa.incomplete" <<<"$out" || fail "partial: $out"
! grep -q "bbbb\|snapshots/$bad\|snapshots/$new\|blobs/$w\|blobs/$badcfg\|datasets" <<<"$out" || fail "too much: $out"
grep -q "would free: 5 items, $((1000 + 4 + 7)) bytes" <<<"$out" || fail "total: $out"
[ "$(cd "$HF_HUB_CACHE" && find . | sort)" = "$before" ] || fail "--dry-run removed something"

# gc: removes exactly those
"$bin" gc >/dev/null || fail "gc"
[ ! -e "$r/snapshots/$old" ] && [ ! -e "$r/refs/gone" ] && [ ! -e "$r/blobs/$oldcfg" ] &&
    [ ! -e "$r/blobs/$orphan" ] && [ ! -e "$r/blobs/aaaa.incomplete" ] || fail "not removed"
[ -e "$r/blobs/bbbb.incomplete" ] && [ -e "$r/snapshots/$bad/config.json" ] && [ -e "$r/blobs/$w" ] &&
    [ -e "$HF_HUB_CACHE/datasets--org--data/blobs" ] || fail "removed too much"
out=$("$bin" gc --dry-run) && grep -q "would free: 0 items" <<<"$out" || fail "gc left: $out"
"$bin" generate --model org/tiny --prompt-tokens 1,2 --max-tokens 2 >/dev/null 2>&1 || fail "main broke"
"$bin" generate --model org/tiny@refs/pr/1 --prompt-tokens 1 --max-tokens 1 2>"$tmp/err" && fail "mamba loaded"
grep -q "mamba" "$tmp/err" || fail "unloadable revision: $(cat "$tmp/err")"

# errors
"$bin" gc org/none 2>"$tmp/err" && fail "gc of a missing model"
[ "$(wc -l < "$tmp/err")" -eq 1 ] || fail "gc error not one line"
HF_HUB_CACHE=$tmp/nothing "$bin" ls | grep "0 models" >/dev/null || fail "ls of a missing cache"
echo "cache: ok"
