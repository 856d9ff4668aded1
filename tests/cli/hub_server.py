#!/usr/bin/python3
"""hub_server.py — a loopback stand-in for the Hugging Face hub, for the pull
tests (no network here). Serves ROOT/OWNER/NAME/... with the hub's URL layout:

  GET  /api/models/OWNER/NAME/tree/main?recursive=true   JSON listing (lfs.oid = sha256)
  GET  /OWNER/NAME/resolve/main/PATH    302 to /cdn/... with x-linked-etag / x-linked-size
  GET  /cdn/OWNER/NAME/PATH             the bytes, with Range support and an ETag

Faults for the tests, set per file name with flags or at run time through
POST /_control (JSON): cut (close the connection after N bytes, once),
corrupt (flip a byte in what is served while the listing keeps the true hash),
page_size (page the listing, next page in a Link header as the hub does),
throttle (bytes/s), no_range (ignore Range, answer 200). A repo with a
.token file is gated: it wants "Authorization: Bearer <that token>".
Every request is appended to --log as one JSON line. Prints the port.
"""
import argparse, hashlib, json, os, sys, threading, time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlparse, unquote

ap = argparse.ArgumentParser()
ap.add_argument("--root", required=True)
ap.add_argument("--log", required=True)
ap.add_argument("--port-file")
args = ap.parse_args()

state = {"cut": {}, "corrupt": set(), "throttle": 0, "no_range": False, "page_size": 0}
lock = threading.Lock()
sha_cache = {}


def sha256(path):
    st = os.stat(path)
    key = (path, st.st_size, st.st_mtime)
    if key not in sha_cache:
        h = hashlib.sha256()
        with open(path, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
        sha_cache[key] = h.hexdigest()
    return sha_cache[key]


def log(entry):
    with lock, open(args.log, "a") as f:
        f.write(json.dumps(entry) + "\n")


class H(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.0"

    def log_message(self, *a):
        pass

    def send(self, code, body=b"", ctype="application/json", headers=()):
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        for k, v in headers:
            self.send_header(k, v)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def repo_dir(self, owner, name):
        d = os.path.join(args.root, owner, name)
        return d if os.path.isdir(d) else None

    def authorized(self, d):
        tf = os.path.join(d, ".token")
        if not os.path.exists(tf):
            return True
        want = open(tf).read().strip()
        return self.headers.get("Authorization", "") == "Bearer " + want

    def do_POST(self):
        if self.path == "/_control":
            n = int(self.headers.get("Content-Length", "0"))
            c = json.loads(self.rfile.read(n) or b"{}")
            with lock:
                if "cut" in c:
                    state["cut"].update(c["cut"])
                if "corrupt" in c:
                    state["corrupt"] = set(c["corrupt"])
                if "throttle" in c:
                    state["throttle"] = c["throttle"]
                if "no_range" in c:
                    state["no_range"] = c["no_range"]
                if "page_size" in c:
                    state["page_size"] = c["page_size"]
            return self.send(200, b"{}")
        self.send(404, b"{}")

    def do_HEAD(self):
        self.do_GET()

    def do_GET(self):
        u = urlparse(self.path)
        parts = [unquote(p) for p in u.path.split("/") if p]
        log({"method": self.command, "path": u.path, "range": self.headers.get("Range"),
             "auth": self.headers.get("Authorization")})
        if len(parts) >= 6 and parts[:2] == ["api", "models"] and parts[4:6] == ["tree", "main"]:
            return self.listing(parts[2], parts[3], u.query)
        if len(parts) >= 5 and parts[2:4] == ["resolve", "main"]:
            d = self.repo_dir(parts[0], parts[1])
            rel = "/".join(parts[4:])
            f = os.path.join(d, rel) if d else None
            if not d or not self.authorized(d):
                return self.send(401 if d else 404, b'{"error":"Repository not found"}')
            if not os.path.isfile(f):
                return self.send(404, b'{"error":"Entry not found"}')
            return self.send(302, b"", headers=[("Location", "/cdn/%s/%s/%s" % (parts[0], parts[1], rel)),
                                                ("x-linked-etag", '"%s"' % sha256(f)),
                                                ("x-linked-size", str(os.path.getsize(f)))])
        if len(parts) >= 4 and parts[0] == "cdn":
            d = self.repo_dir(parts[1], parts[2])
            rel = "/".join(parts[3:])
            if not d or not os.path.isfile(os.path.join(d, rel)):
                return self.send(404, b"not found", "text/plain")
            return self.blob(os.path.join(d, rel), os.path.basename(rel))
        self.send(404, b'{"error":"not found"}')

    def listing(self, owner, name, query=""):
        d = self.repo_dir(owner, name)
        if not d:
            return self.send(404, b'{"error":"Repository not found"}')
        if not self.authorized(d):
            return self.send(401, b'{"error":"Invalid credentials"}')
        out = []
        for base, dirs, files in os.walk(d):
            dirs.sort()
            for fn in sorted(files):
                if fn.startswith("."):
                    continue
                p = os.path.join(base, fn)
                rel = os.path.relpath(p, d)
                size = os.path.getsize(p)
                e = {"type": "file", "oid": hashlib.sha1(rel.encode()).hexdigest(), "size": size, "path": rel}
                if fn.endswith(".gguf"):
                    e["lfs"] = {"oid": sha256(p), "size": size, "pointerSize": 134}
                out.append(e)
        ps = state["page_size"]
        if not ps:
            return self.send(200, json.dumps(out).encode())
        q = dict(kv.split("=", 1) for kv in query.split("&") if "=" in kv)
        at = int(q.get("cursor", "0"))
        hdrs = []
        if at + ps < len(out):  # the hub's paging: an absolute next link
            hdrs.append(("Link", '<http://127.0.0.1:%d/api/models/%s/%s/tree/main?recursive=true&cursor=%d>; rel="next"'
                         % (self.server.server_address[1], owner, name, at + ps)))
        self.send(200, json.dumps(out[at:at + ps]).encode(), headers=hdrs)

    def blob(self, path, fname):
        size = os.path.getsize(path)
        start, code = 0, 200
        rng = self.headers.get("Range")
        with lock:
            no_range = state["no_range"]
            cut = state["cut"].pop(fname, None)
            corrupt = fname in state["corrupt"]
            throttle = state["throttle"]
        if rng and not no_range and rng.startswith("bytes="):
            a = rng[6:].split("-")[0]
            start = int(a) if a else 0
            if start >= size:
                return self.send(416, b"", "text/plain", [("Content-Range", "bytes */%d" % size)])
            code = 206
        self.send_response(code)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", str(size - start))
        self.send_header("ETag", '"%s"' % sha256(path))
        self.send_header("Accept-Ranges", "bytes")
        if code == 206:
            self.send_header("Content-Range", "bytes %d-%d/%d" % (start, size - 1, size))
        self.end_headers()
        if self.command == "HEAD":
            return
        with open(path, "rb") as f:
            f.seek(start)
            pos, sent = start, 0
            t0 = time.monotonic()
            while pos < size:
                chunk = bytearray(f.read(min(16384, size - pos)))
                if corrupt and pos <= size // 2 < pos + len(chunk):
                    chunk[size // 2 - pos] ^= 0xFF
                if cut is not None and sent + len(chunk) > cut:
                    self.wfile.write(chunk[: max(0, cut - sent)])
                    self.wfile.flush()
                    self.connection.shutdown(2)  # drop the connection mid-body
                    return
                try:
                    self.wfile.write(chunk)
                except (BrokenPipeError, ConnectionResetError):
                    return
                pos += len(chunk)
                sent += len(chunk)
                if throttle:
                    ahead = sent / throttle - (time.monotonic() - t0)
                    if ahead > 0:
                        time.sleep(ahead)


srv = ThreadingHTTPServer(("127.0.0.1", 0), H)
srv.daemon_threads = True
port = srv.server_address[1]
if args.port_file:
    with open(args.port_file + ".tmp", "w") as f:
        f.write(str(port))
    os.rename(args.port_file + ".tmp", args.port_file)
print(port, flush=True)
srv.serve_forever()
