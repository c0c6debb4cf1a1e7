#!/usr/bin/env python3
"""A stand-in for the Hugging Face hub on 127.0.0.1, for tests/e2e/hub.sh.

    hub_server.py PORTFILE REPO=DIR [REPO=DIR ...]

serves each DIR as model repo REPO at one commit (also named by the branch
"main" and the tag "v1") with the endpoints and headers hearth get uses, as
the hub sends them:

  GET  /api/models/{repo}/revision/{rev}   {"id", "sha", "siblings": [{"rfilename"}]}
  HEAD /{repo}/resolve/{rev}/{file}
       LFS files (*.safetensors, tokenizer.json): 302 to a second port (the
       "CDN"), with X-Linked-Etag (sha256), X-Linked-Size, X-Repo-Commit;
       other files: 307 to the relative /api/resolve-cache/models/... which
       answers with ETag (git blob sha1), Content-Length, X-Repo-Commit
  GET  the same, with Range: bytes=N- (206 + Content-Range)
  GET  /api/models/{repo}/tree/{rev}       huggingface_hub's file listing (its
       snapshot_download; tools/hfcompat/check.sh)

"old-org/tiny" was renamed "test-org/tiny": everything under it answers a
307 to the same path under the new name, as the hub does.

Errors: an unknown repo, or "org/private" without "Authorization: Bearer
secret": 401 X-Error-Code RepoNotFound; an unknown revision: 404
RevisionNotFound; a listed file that is not in DIR (a REPO=DIR whose DIR has
a file "MISSING" lists "missing.bin"): 404 EntryNotFound.

Faults and a request log through GET /_ctl?... :
  cut=NAME&times=N&at=B[&then=C]   the next N GETs of NAME's bytes stop
                          after B bytes (C after the first) and the
                          connection is closed
  corrupt=NAME&times=N    the next N GETs of NAME send one byte flipped
  busy=NAME&times=N       the next N GETs of NAME answer 503
  reset=1                 forget faults and the log
GET /_log: the requests, one JSON object each {method, path, range, auth,
cdn}. PORTFILE gets "HUB_PORT CDN_PORT" once both listen.
"""
import hashlib
import json
import os
import socket
import sys
import threading
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

COMMIT = "5d3c0e8a1f2b4c6d8e0f1a2b3c4d5e6f7a8b9c0d"
REVISIONS = {"main", "v1", COMMIT}
TOKEN = "secret"
RENAMED = {"old-org/tiny": "test-org/tiny"}

repos = {}  # repo -> {path: bytes}
faults = {"cut": {}, "corrupt": {}, "busy": {}}
log = []
lock = threading.Lock()
ports = {}


def is_lfs(path):
    return path.endswith(".safetensors") or path.endswith("tokenizer.json")


def git_sha1(data):
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def load(spec):
    repo, d = spec.split("=", 1)
    files = {}
    for root, _, names in os.walk(d):
        for n in names:
            p = os.path.join(root, n)
            rel = os.path.relpath(p, d)
            with open(p, "rb") as f:
                files[rel] = f.read()
    if "MISSING" in files:
        del files["MISSING"]
        files["missing.bin"] = None
    repos[repo] = files


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    cdn = False

    def log_message(self, *a):
        pass

    def reply(self, status, headers=(), body=b""):
        self.send_response(status)
        for k, v in headers:
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def error(self, status, code, msg, extra=()):
        self.reply(status, [("X-Error-Code", code), ("X-Error-Message", msg),
                            ("Content-Type", "application/json")] + list(extra),
                   json.dumps({"error": msg}).encode())

    def record(self):
        with lock:
            log.append({"method": self.command, "path": self.path,
                        "range": self.headers.get("Range"),
                        "auth": self.headers.get("Authorization"), "cdn": self.cdn})

    def repo_ok(self, repo):
        if repo not in repos or (repo.endswith("/private") and
                                 self.headers.get("Authorization") != "Bearer " + TOKEN):
            self.error(401, "RepoNotFound", "Repository not found")
            return False
        return True

    def send_bytes(self, name, data, extra=()):
        """200 or 206 for data, with the faults armed for name."""
        start = 0
        rng = self.headers.get("Range")
        if rng and rng.startswith("bytes=") and rng.endswith("-"):
            start = int(rng[6:-1])
            if start >= len(data) and len(data):
                self.reply(416, [("Content-Range", "bytes */%d" % len(data))])
                return
        base = os.path.basename(name) if self.command == "GET" else None
        with lock:
            cut = faults["cut"].get(base)
            if cut and cut[0] > 0:
                cut[0] -= 1
                at, cut[1] = cut[1], cut[2]
            else:
                cut = None
            bad = faults["corrupt"].get(base, 0)
            if bad:
                faults["corrupt"][base] = bad - 1
            busy = faults["busy"].get(base, 0)
            if busy:
                faults["busy"][base] = busy - 1
        if busy:
            self.reply(503, [("Retry-After", "0")], b"busy")
            return
        if bad:
            data = bytes([data[0] ^ 0xff]) + data[1:]
        body = data[start:]
        self.send_response(206 if start else 200)
        for k, v in extra:
            self.send_header(k, v)
        if start:
            self.send_header("Content-Range", "bytes %d-%d/%d" % (start, len(data) - 1, len(data)))
        self.send_header("Accept-Ranges", "bytes")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command == "HEAD":
            return
        if cut:
            self.wfile.write(body[:at])
            self.wfile.flush()
            self.connection.shutdown(socket.SHUT_RDWR)
            self.close_connection = True
            return
        self.wfile.write(body)

    def do_HEAD(self):
        self.do_GET()

    def do_GET(self):
        url = urllib.parse.urlsplit(self.path)
        parts = url.path.split("/")
        if not url.path.startswith("/_"):
            self.record()
        if self.cdn:
            sha = parts[-1]
            for files in repos.values():
                for name, data in files.items():
                    if data is not None and hashlib.sha256(data).hexdigest() == sha:
                        return self.send_bytes(name, data, [("ETag", '"%s"' % sha)])
            return self.reply(404)
        if url.path == "/_ctl":
            q = dict(urllib.parse.parse_qsl(url.query))
            with lock:
                if "reset" in q:
                    faults["cut"].clear()
                    faults["corrupt"].clear()
                    faults["busy"].clear()
                    log.clear()
                if "cut" in q:
                    at = int(q.get("at", 1000))
                    faults["cut"][q["cut"]] = [int(q.get("times", 1)), at, int(q.get("then", at))]
                if "corrupt" in q:
                    faults["corrupt"][q["corrupt"]] = int(q.get("times", 1))
                if "busy" in q:
                    faults["busy"][q["busy"]] = int(q.get("times", 1))
            return self.reply(200, body=b"ok")
        if url.path == "/_log":
            with lock:
                return self.reply(200, body=json.dumps(log).encode())
        for old, new in RENAMED.items():  # a renamed repo: a relative redirect
            for pre in ("/api/models/", "/"):
                if url.path.startswith(pre + old + "/"):
                    loc = pre + new + url.path[len(pre + old):]
                    return self.reply(307, [("Location", loc)])
        if url.path.startswith("/api/models/") and len(parts) >= 7 and parts[5] == "revision":
            repo = parts[3] + "/" + parts[4]
            rev = urllib.parse.unquote("/".join(parts[6:]))
            if not self.repo_ok(repo):
                return
            if rev not in REVISIONS:
                return self.error(404, "RevisionNotFound", "Invalid rev id: " + rev)
            info = {"_id": "0" * 24, "id": repo, "modelId": repo, "sha": COMMIT,
                    "private": repo.endswith("/private"), "tags": [],
                    "siblings": [{"rfilename": n} for n in sorted(repos[repo])]}
            return self.reply(200, [("Content-Type", "application/json")],
                              json.dumps(info).encode())
        if url.path.startswith("/api/models/") and len(parts) >= 7 and parts[5] == "tree":
            # huggingface_hub's list_repo_tree (snapshot_download uses it)
            repo = parts[3] + "/" + parts[4]
            if not self.repo_ok(repo):
                return
            entries, dirs = [], set()
            for name, data in sorted(repos[repo].items()):
                if data is None:
                    continue
                d = os.path.dirname(name)
                while d and d not in dirs:
                    dirs.add(d)
                    entries.append({"type": "directory", "oid": "0" * 40, "size": 0, "path": d})
                    d = os.path.dirname(d)
                e = {"type": "file", "oid": git_sha1(data), "size": len(data), "path": name}
                if is_lfs(name):
                    e["lfs"] = {"oid": hashlib.sha256(data).hexdigest(), "size": len(data),
                                "pointerSize": 134}
                entries.append(e)
            return self.reply(200, [("Content-Type", "application/json")],
                              json.dumps(entries).encode())
        if url.path.startswith("/api/resolve-cache/models/") and len(parts) >= 8:
            repo = parts[4] + "/" + parts[5]
            name = urllib.parse.unquote("/".join(parts[7:]))
            if not self.repo_ok(repo):
                return
            data = repos[repo].get(name)
            if data is None:
                return self.error(404, "EntryNotFound", "Entry not found",
                                  [("X-Repo-Commit", COMMIT)])
            return self.send_bytes(name, data, [("ETag", '"%s"' % git_sha1(data)),
                                                ("X-Repo-Commit", COMMIT)])
        if len(parts) >= 6 and parts[3] == "resolve":
            repo = parts[1] + "/" + parts[2]
            rev = urllib.parse.unquote(parts[4])
            name = urllib.parse.unquote("/".join(parts[5:]))
            if not self.repo_ok(repo):
                return
            if rev not in REVISIONS:
                return self.error(404, "RevisionNotFound", "Invalid rev id: " + rev)
            data = repos[repo].get(name)
            if data is None:
                return self.error(404, "EntryNotFound", "Entry not found",
                                  [("X-Repo-Commit", COMMIT)])
            if is_lfs(name):
                sha = hashlib.sha256(data).hexdigest()
                loc = "http://127.0.0.1:%d/repos/%s?X-Amz-Signature=x" % (ports["cdn"], sha)
                return self.reply(302, [("Location", loc), ("X-Repo-Commit", COMMIT),
                                        ("X-Linked-Etag", '"%s"' % sha),
                                        ("X-Linked-Size", str(len(data))),
                                        ("ETag", '"%s"' % git_sha1(data))])
            loc = "/api/resolve-cache/models/%s/%s/%s" % (repo, COMMIT, urllib.parse.quote(name))
            return self.reply(307, [("Location", loc), ("X-Repo-Commit", COMMIT)])
        self.reply(404, body=b"not found")


class CdnHandler(Handler):
    cdn = True


class Server(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request, client_address):
        pass  # a client that hangs up on a cut connection is expected


def main():
    for spec in sys.argv[2:]:
        load(spec)
    hub = Server(("127.0.0.1", 0), Handler)
    cdn = Server(("127.0.0.1", 0), CdnHandler)
    ports["hub"], ports["cdn"] = hub.server_address[1], cdn.server_address[1]
    threading.Thread(target=cdn.serve_forever, daemon=True).start()
    tmp = sys.argv[1] + ".tmp"
    with open(tmp, "w") as f:
        f.write("%d %d\n" % (ports["hub"], ports["cdn"]))
    os.rename(tmp, sys.argv[1])
    hub.serve_forever()


if __name__ == "__main__":
    main()
