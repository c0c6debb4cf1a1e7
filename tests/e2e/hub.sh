#!/usr/bin/env bash
# hearth get against a stand-in hub on 127.0.0.1 (tests/e2e/hub_server.py):
# a fresh download whose connection is cut mid-file (resumed in-process), the
# cache laid out as huggingface_hub lays it out, a rerun that fetches
# nothing, a download cut for good and resumed by the next run, corrupted
# bytes detected (fresh: an error; a bad partial file: refetched), 401/404
# errors in one line, --include, a tag, a full disk; then the model used by
# name.
set -euo pipefail
bin=${HEARTH_BIN:?}
root=${HEARTH_ROOT:?}
fail() { echo "FAIL: $*"; exit 1; }
tmp=$(mktemp -d)
hub_pid=
trap '[ -n "$hub_pid" ] && kill "$hub_pid" 2>/dev/null; rm -rf "$tmp"' EXIT

# the repo: the llama fixture with a tokenizer, and a file one folder down
repo=$tmp/repo
mkdir -p "$repo/sub" "$tmp/broken"
cp "$root/tests/fixtures/models/llama/config.json" "$root/tests/fixtures/models/llama/model.safetensors" \
   "$root/tests/fixtures/serve/tokenizer.json" "$root/tests/fixtures/serve/tokenizer_config.json" "$repo/"
echo "a nested file" > "$repo/sub/notes.txt"
cp "$repo/config.json" "$tmp/broken/" && touch "$tmp/broken/MISSING"

python3 "$root/tests/e2e/hub_server.py" "$tmp/ports" test-org/tiny="$repo" \
    test-org/private="$repo" test-org/broken="$tmp/broken" &
hub_pid=$!
for _ in $(seq 200); do [ -f "$tmp/ports" ] && break; sleep 0.05; done
read -r hub_port _ < "$tmp/ports" || fail "stand-in hub did not start"
hub=http://127.0.0.1:$hub_port
commit=5d3c0e8a1f2b4c6d8e0f1a2b3c4d5e6f7a8b9c0d
export HF_ENDPOINT=$hub HF_HOME=$tmp/hf-home
unset HF_TOKEN HF_HUB_CACHE HUGGINGFACE_HUB_CACHE HF_HUB_OFFLINE HF_TOKEN_PATH
ctl() { curl -sf "$hub/_ctl?$1" >/dev/null; }
reqlog() { curl -sf "$hub/_log"; }
get() { HF_HUB_CACHE=$cache "$bin" get "$@"; }
check_err() { # want, then the command's arguments after "get"
    local want=$1; shift
    if get "$@" >"$tmp/out" 2>"$tmp/err"; then fail "expected failure: get $* (wanted: $want)"; fi
    [ "$(wc -l < "$tmp/err")" -eq 1 ] || fail "not one line: $(cat "$tmp/err")"
    grep -qF -- "$want" "$tmp/err" || fail "'$want' not in: $(cat "$tmp/err")"
}

# huggingface_hub's layout rules (docs/models.md "The cache's layout"),
# checked against the hub's own listing of the repo (its tree API: the
# oid, lfs.oid and size of every file):
#  1. refs/main holds the commit the hub names, 40 hex digits, no newline;
#  2. snapshots/ holds that commit's folder only; its folders are folders and
#     every file a symlink, relative: "../" per folder level, then
#     "../../blobs/<etag>";
#  3. <etag> is the file's ETag: the sha256 (lfs.oid) of an LFS file, else
#     the git blob sha1 (oid); the blob's bytes hash to it and have its size;
#  4. blobs/ holds exactly the blobs the snapshot links to, regular files;
#  5. no temporary or partial file anywhere (".incomplete", ".tmp"), and no
#     .no_exist (hearth never records missing files: it asks for listed files
#     only); CACHEDIR.TAG starts with the cache-directory signature.
check_layout() { # cache, files expected in the snapshot
    curl -sf "$hub/api/models/test-org/tiny/tree/main" >"$tmp/tree.json" || fail "tree listing"
    curl -sf "$hub/api/models/test-org/tiny/revision/main" >"$tmp/rev.json" || fail "revision listing"
    python3 - "$tmp/tree.json" "$tmp/rev.json" "$@" <<'EOF' || fail "layout"
import hashlib, json, os, stat, sys
tree, rev, cache, want = sys.argv[1], sys.argv[2], sys.argv[3], sorted(sys.argv[4:])
hub = {e["path"]: e for e in json.load(open(tree)) if e["type"] == "file"}
sha = json.load(open(rev))["sha"]
r = os.path.join(cache, "models--test-org--tiny")
commit = open(os.path.join(r, "refs/main")).read()                       # rule 1
assert commit == sha and len(commit) == 40 and all(c in "0123456789abcdef" for c in commit), commit
assert os.listdir(os.path.join(r, "snapshots")) == [commit], os.listdir(os.path.join(r, "snapshots"))
snap = os.path.join(r, "snapshots", commit)
got, linked = [], set()
for d, dirs, names in os.walk(snap):
    for n in dirs:                                                       # rule 2
        assert not os.path.islink(os.path.join(d, n)), n
    for n in names:
        p = os.path.join(d, n); rel = os.path.relpath(p, snap); got.append(rel)
        assert os.path.islink(p), rel
        t = os.readlink(p); etag = os.path.basename(t)
        assert t == "../" * rel.count("/") + "../../blobs/" + etag, (rel, t)
        e = hub[rel]                                                     # rule 3
        assert etag == (e["lfs"]["oid"] if "lfs" in e else e["oid"]), (rel, etag, e)
        data = open(p, "rb").read()
        h = hashlib.sha256(data).hexdigest() if "lfs" in e else \
            hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()
        assert h == etag and len(data) == e["size"], (rel, etag, h, len(data))
        linked.add(etag)
assert sorted(got) == want, (got, want)
blobs = os.path.join(r, "blobs")                                         # rule 4
assert set(os.listdir(blobs)) == linked, (os.listdir(blobs), linked)
for b in os.listdir(blobs):
    assert stat.S_ISREG(os.lstat(os.path.join(blobs, b)).st_mode), b
for d, dirs, names in os.walk(cache):                                    # rule 5
    assert ".no_exist" not in dirs, d
    for n in names:
        assert ".tmp" not in n and not n.endswith(".incomplete"), n
assert open(os.path.join(cache, "CACHEDIR.TAG")).read().startswith(
    "Signature: 8a477f597d28d172789f06886806bc55"), "CACHEDIR.TAG"
EOF
}
all_files="config.json model.safetensors sub/notes.txt tokenizer.json tokenizer_config.json"

# 1. fresh, with the LFS file's connection cut twice at 100 KB (resumed with
#    Range) and another file answering 503 twice (retried)
cache=$tmp/c1
ctl "reset=1&cut=model.safetensors&times=2&at=100000"
ctl "busy=tokenizer.json&times=2"
out=$(HF_TOKEN=secret get test-org/tiny 2>"$tmp/err") || fail "fresh get: $(cat "$tmp/err")"
[ "$out" = "$cache/models--test-org--tiny/snapshots/$commit" ] || fail "printed '$out'"
[ ! -s "$tmp/err" ] || fail "not quiet without a terminal: $(cat "$tmp/err")"
check_layout "$cache" $all_files
log=$(reqlog)
grep -q '"range": "bytes=200000-"' <<<"$log" || fail "no resumed Range request: $log"
tok=$(sha256sum "$repo/tokenizer.json" | cut -d' ' -f1)
[ "$(grep -o "\"/repos/$tok" <<<"$log" | wc -l)" -eq 3 ] || fail "503s not retried: $log"
python3 -c 'import json,sys; assert all(not e["auth"] for e in json.load(sys.stdin) if e["cdn"])' \
    <<<"$log" || fail "the token went to the CDN"
[ -f "$cache/CACHEDIR.TAG" ] || fail "no CACHEDIR.TAG"

# 2. again: every file is cached, only the listing is asked for
ctl "reset=1"
get test-org/tiny >/dev/null 2>&1 || fail "second get"
[ "$(reqlog | grep -o '"method"' | wc -l)" -eq 1 ] || fail "cached files fetched again: $(reqlog)"

# 3. cut for good (5 tries that get nothing): one line, exit 1, the partial file kept, no ref
cache=$tmp/c3
ctl "reset=1&cut=model.safetensors&times=6&at=300000&then=0"
check_err "download interrupted at" test-org/tiny
grep -q "run again to resume" "$tmp/err" || fail "no hint: $(cat "$tmp/err")"
ls "$cache"/models--test-org--tiny/blobs/*.incomplete >/dev/null || fail "no partial file kept"
[ ! -e "$cache/models--test-org--tiny/refs/main" ] || fail "ref written for a partial snapshot"
[ ! -e "$cache/models--test-org--tiny/snapshots/$commit/model.safetensors" ] || fail "link to a partial blob"
ctl "reset=1"
get test-org/tiny >/dev/null 2>"$tmp/err" || fail "resume: $(cat "$tmp/err")"
reqlog | grep '"range": "bytes=' >/dev/null || fail "the next run did not resume"
check_layout "$cache" $all_files

# 4. corrupted bytes: a fresh download fails (nothing kept), the next succeeds;
#    a partial file with wrong bytes is refetched from byte 0 in the same run
cache=$tmp/c4
ctl "reset=1&corrupt=model.safetensors&times=1"
check_err "model.safetensors': sha256 mismatch" test-org/tiny
! ls "$cache"/models--test-org--tiny/blobs/e65ff* >/dev/null 2>&1 || fail "a bad blob was kept"
ctl "reset=1&corrupt=tokenizer_config.json&times=1"
check_err "tokenizer_config.json': git sha1 mismatch" test-org/tiny
ctl "reset=1"
get test-org/tiny >/dev/null 2>&1 || fail "get after a corrupted download"
check_layout "$cache" $all_files
cache=$tmp/c4b
sha=$(sha256sum "$repo/model.safetensors" | cut -d' ' -f1)
mkdir -p "$cache/models--test-org--tiny/blobs"
head -c 5000 /dev/urandom > "$cache/models--test-org--tiny/blobs/$sha.incomplete"
ctl "reset=1"
get test-org/tiny >/dev/null 2>"$tmp/err" || fail "bad partial file: $(cat "$tmp/err")"
check_layout "$cache" $all_files

# 5. errors, one line each
cache=$tmp/c5
check_err "repository 'test-org/nothere' not found, or it is private or gated: set HF_TOKEN (HTTP 401)" test-org/nothere
check_err "repository 'test-org/private' not found, or it is private or gated: set HF_TOKEN (HTTP 401)" test-org/private
HF_TOKEN=wrong check_err "HF_TOKEN has no access to it (HTTP 401)" test-org/private
echo secret > "$tmp/token"
HF_TOKEN_PATH=$tmp/token get test-org/private >/dev/null 2>&1 || fail "token from HF_TOKEN_PATH"
check_err "'test-org/tiny' has no revision 'v9' on the hub (HTTP 404)" test-org/tiny@v9
check_err "'test-org/broken' has no file 'missing.bin'" test-org/broken
[ ! -e "$cache/models--test-org--broken/snapshots/$commit/missing.bin" ] || fail "missing file linked"
check_err "not a repo id" org/a/b
check_err "which model?" --revision main
check_err "no file of 'test-org/tiny' at main matches --include" test-org/tiny --include '*.gguf'
HF_HUB_OFFLINE=1 check_err "HF_HUB_OFFLINE" test-org/tiny
HF_ENDPOINT=http://127.0.0.1:1 check_err "127.0.0.1:1" test-org/tiny
# a full disk: a file size limit makes the blob's writes fail the same way
cache=$tmp/c6
( ulimit -f 200; check_err "disk full writing" test-org/tiny ) || exit 1
grep -q "run again to resume" "$tmp/err" || fail "no resume hint on a full disk"
[ ! -e "$cache/models--test-org--tiny/refs/main" ] || fail "ref written after a full disk"

# 6. --include (repeatable, '*' crosses '/'), a tag, and the commit itself
cache=$tmp/c7
get test-org/tiny --include '*.json' --include 'sub/*' >/dev/null 2>&1 || fail "--include"
[ "$(cd "$cache/models--test-org--tiny/snapshots/$commit" && find . -type l | sort | tr '\n' ' ')" = \
  "./config.json ./sub/notes.txt ./tokenizer.json ./tokenizer_config.json " ] || fail "--include picked wrong files"
get test-org/tiny@v1 >/dev/null 2>&1 || fail "@v1"
[ "$(cat "$cache/models--test-org--tiny/refs/v1")" = "$commit" ] || fail "refs/v1"
get test-org/tiny --revision $commit >/dev/null 2>&1 || fail "--revision COMMIT"
[ ! -e "$cache/models--test-org--tiny/refs/$commit" ] || fail "a ref named by a commit"

# a renamed repo: the listing and the files follow the hub's relative redirects
get old-org/tiny --include config.json >/dev/null 2>"$tmp/err" || fail "renamed repo: $(cat "$tmp/err")"
[ -L "$cache/models--old-org--tiny/snapshots/$commit/config.json" ] || fail "renamed repo not stored"

# 7. the downloaded model by name
cache=$tmp/c1
out=$(HF_HUB_CACHE=$cache "$bin" generate --model test-org/tiny --prompt-tokens 1,2,3 --max-tokens 3 2>/dev/null) \
    || fail "generate --model test-org/tiny"
want=$("$bin" generate --model "$repo" --prompt-tokens 1,2,3 --max-tokens 3 2>/dev/null)
[ "$out" = "$want" ] || fail "by name '$out', by path '$want'"
out=$(HF_HUB_CACHE=$cache "$bin" tokenize --model "test-org/tiny@$commit" --text hi) || fail "@COMMIT"
out=$(HF_HUB_CACHE=$cache "$bin" ls) || fail "ls"
grep -q "^test-org/tiny  *${commit:0:12} main  *5 .* yes: llama, safetensors$" <<<"$out" || fail "ls: $out"
# 8. served by name: /v1/models calls it ORG/NAME; a request may name it so
source "$root/tests/e2e/lib/serve.sh"
trap '[ -n "$hub_pid" ] && kill "$hub_pid" 2>/dev/null; stop_servers; rm -rf "$tmp"' EXIT
HF_HUB_CACHE=$cache start_server "$tmp/serve.log" --model test-org/tiny --threads 1
curl -sf "http://127.0.0.1:$SERVER_PORT/v1/models" | grep '"id": *"test-org/tiny"' >/dev/null || fail "/v1/models id"
for m in test-org/tiny "test-org/tiny@$commit"; do
    curl -sf "http://127.0.0.1:$SERVER_PORT/v1/completions" -d "{\"model\": \"$m\", \"prompt\": \"a\", \"max_tokens\": 2}" \
        | grep '"model": *"'"$m"'"' >/dev/null || fail "request naming $m"
done
code=$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$SERVER_PORT/v1/completions" \
       -d '{"model": "test-org/other", "prompt": "a", "max_tokens": 2}')
[ "$code" = 404 ] || fail "another model's name: HTTP $code"
echo "hub: ok"
