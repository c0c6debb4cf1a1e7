#!/usr/bin/env bash
# Is hearth's cache huggingface_hub's? Run where huggingface_hub is installed
# (the accelerator machine has it with transformers), from the source tree:
#   bash tools/hfcompat/check.sh HEARTH_CACHE.tar OUT_DIR
# HEARTH_CACHE.tar: a cache `hearth get test-org/tiny` filled from
# tests/e2e/hub_server.py serving tests/e2e/hub.sh's repo (make it with
# tools/hfcompat/make-cache.sh). This downloads the same repo from the same
# stand-in hub with huggingface_hub's snapshot_download, compares the two
# caches file by file (refs, link targets, blob names and bytes), has
# huggingface_hub read hearth's cache (scan_cache_dir, hf_hub_download and
# snapshot_download offline), and leaves huggingface_hub's cache in
# OUT_DIR/hf-cache.tar for hearth to read back (hearth ls, --model by name).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
tar_in=$(realpath "$1"); out=$(realpath "$2")
tmp=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null; rm -rf "$tmp"' EXIT
bash "$root/tools/hfcompat/repo.sh" "$tmp/repo"
python3 "$root/tests/e2e/hub_server.py" "$tmp/ports" test-org/tiny="$tmp/repo" &
for _ in $(seq 200); do [ -f "$tmp/ports" ] && break; sleep 0.05; done
read -r port _ < "$tmp/ports"
mkdir -p "$tmp/hearth" && tar -xf "$tar_in" -C "$tmp/hearth"
HF_ENDPOINT=http://127.0.0.1:$port HF_HUB_DISABLE_TELEMETRY=1 HF_HUB_DISABLE_XET=1 \
python3 - "$tmp/hearth" "$tmp/hf" <<'PY'
import os, sys, huggingface_hub as hh
hearth, hf = sys.argv[1], sys.argv[2]
print("huggingface_hub", hh.__version__)
snap = hh.snapshot_download("test-org/tiny", cache_dir=hf)
print("snapshot_download:", snap)

def tree(cache):
    r = os.path.join(cache, "models--test-org--tiny")
    out = {}
    for d, dirs, files in os.walk(r):
        for n in files:
            p = os.path.join(d, n)
            rel = os.path.relpath(p, r)
            if rel.startswith(".") or rel.split("/")[0] not in ("refs", "snapshots", "blobs"):
                continue  # huggingface_hub's own caches (e.g. trees/), not the layout
            if os.path.islink(p):
                out[rel] = ("link", os.readlink(p))
            else:
                out[rel] = ("file", open(p, "rb").read())
    return out

a, b = tree(hf), tree(hearth)
for k in sorted(set(a) | set(b)):
    if a.get(k) != b.get(k):
        print("DIFFERENT:", k, "huggingface_hub:", str(a.get(k))[:80], "hearth:", str(b.get(k))[:80])
        sys.exit(1)
print("identical: %d entries (refs, snapshot links, blobs)" % len(a))
info = hh.scan_cache_dir(hearth)
assert not info.warnings, info.warnings
(repo,) = [r for r in info.repos if r.repo_id == "test-org/tiny"]
(rev,) = repo.revisions
assert rev.refs == frozenset({"main"}) and rev.nb_files == 5, (rev.refs, rev.nb_files)
hfinfo = hh.scan_cache_dir(hf)
(hrepo,) = [r for r in hfinfo.repos if r.repo_id == "test-org/tiny"]
assert repo.size_on_disk == hrepo.size_on_disk, (repo.size_on_disk, hrepo.size_on_disk)
print("scan_cache_dir(hearth's cache): no warnings, refs", sorted(rev.refs), rev.nb_files, "files",
      repo.size_on_disk, "bytes (the same as huggingface_hub's)")
p = hh.hf_hub_download("test-org/tiny", "sub/notes.txt", cache_dir=hearth, local_files_only=True)
assert open(p).read() == "a nested file\n", p
s = hh.snapshot_download("test-org/tiny", cache_dir=hearth, local_files_only=True)
assert s.startswith(hearth), s
print("hf_hub_download / snapshot_download offline from hearth's cache:", s)
PY
tar -cf "$out/hf-cache.tar" -C "$tmp/hf" .
echo "hfcompat: ok"
