# test_access.py — the serving surface a public deployment needs (issue 40,
# items 1-2): API keys (missing, wrong, right; the header, and a WebSocket's
# subprotocol token; /healthz and /metrics exempt; keys from the config file
# reloaded on SIGHUP), TLS with a certificate made by openssl (HTTPS and a WSS
# stream work, plain HTTP to the TLS port gets no answer, SIGHUP re-reads a
# renewed certificate), model names (404 model_not_found for an unknown one,
# aliases from models.alias, GET /v1/models/{id}), and llama.cpp's everyday
# endpoints: /health, /tokenize (+ with_pieces), /detokenize (round trip),
# /props.
import asyncio
import json
import os
import re
import shutil
import signal
import socket
import ssl
import subprocess
import tempfile
import time
import urllib.request

import specd_e2e
from specd_e2e import Server, check, main, recv_json

KEY, KEY2 = "k-test-0123456789", "second-key"


def ws_try(url, subprotocols, headers=None, ssl_ctx=None):
    """Opens a WebSocket; returns None on success (after one ping) or the refusal's text."""
    import websockets

    async def go():
        try:
            kw = {"subprotocols": subprotocols, "open_timeout": 15}
            if headers:
                kw["extra_headers"] = headers
            if ssl_ctx:
                kw["ssl"] = ssl_ctx
            async with websockets.connect(url, **kw) as ws:
                await ws.send(json.dumps({"type": "ping", "id": "p"}))
                m = await recv_json(ws, 15)
                return None if m.get("type") == "pong" else "no pong: %r" % m
        except Exception as e:  # noqa: BLE001 - the refusal is the answer
            return "%s: %s" % (type(e).__name__, e)
    return asyncio.run(go())


def keys(srv):
    st, hd, b = srv.http("GET", "/v1/models")
    check(st == 401 and json.loads(b)["error"]["code"] == "invalid_api_key", "no key: %d %r" % (st, b[:200]))
    check(hd.get("www-authenticate", "").startswith("Bearer"), "401 without WWW-Authenticate: %r" % hd)
    st, _, b = srv.http("GET", "/v1/models", headers={"Authorization": "Bearer wrong"})
    check(st == 401, "wrong key: %d" % st)
    st, _, b = srv.http("POST", "/v1/completions", {"prompt": "x", "max_tokens": 2}, headers={"Authorization": "Bearer " + KEY})
    check(st == 200, "right key: %d %r" % (st, b[:200]))
    st, _, b = srv.http("POST", "/tokenize", {"content": "x"}, headers={"Authorization": "Bearer " + KEY2})
    check(st == 200, "the config file's key: %d %r" % (st, b[:200]))
    for path in ("/tokenize", "/props", "/v1/models/x"):
        st, _, _ = srv.http("GET" if path != "/tokenize" else "POST", path, {"content": "x"} if path == "/tokenize" else None)
        check(st == 401, "%s without a key: %d" % (path, st))
    for path in ("/healthz", "/metrics", "/health"):
        st, _, _ = srv.http("GET", path)
        check(st == 200, "%s is exempt but answered %d" % (path, st))
    st, _, _ = srv.http("GET", "/")  # static pages need no key (they are not the API)
    check(st in (200, 404), "/ answered %d" % st)
    # WebSocket: refused without a key; the header or the subprotocol token opens it
    check(ws_try(srv.ws_url, ["specd.v1"]) is not None, "WebSocket without a key was accepted")
    r = ws_try(srv.ws_url, ["specd.v1"], headers={"Authorization": "Bearer " + KEY})
    check(r is None, "WebSocket with the header: %s" % r)
    r = ws_try(srv.ws_url, ["specd.v1", "specd.key." + KEY2])
    check(r is None, "WebSocket with the subprotocol token: %s" % r)
    check(ws_try(srv.ws_url, ["specd.v1", "specd.key.nope"]) is not None, "a wrong subprotocol token was accepted")


def reload_keys(srv, cfg_path):
    with open(cfg_path) as f:
        text = f.read()
    with open(cfg_path, "w") as f:
        f.write(text.replace(KEY2, "rotated-key"))
    os.kill(srv.proc.pid, signal.SIGHUP)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        st, _, _ = srv.http("POST", "/tokenize", {"content": "x"}, headers={"Authorization": "Bearer rotated-key"})
        if st == 200:
            break
        time.sleep(0.2)
    check(st == 200, "the rotated key was not taken after SIGHUP: %d" % st)
    st, _, _ = srv.http("POST", "/tokenize", {"content": "x"}, headers={"Authorization": "Bearer " + KEY2})
    check(st == 401, "the removed key still works after SIGHUP: %d" % st)
    st, _, _ = srv.http("GET", "/v1/models", headers={"Authorization": "Bearer " + KEY})
    check(st == 200, "the command line's key was lost on reload: %d" % st)


def endpoints(srv):
    h = {"Authorization": "Bearer " + KEY}
    st, _, b = srv.http("GET", "/health", headers=h)
    check(st == 200 and json.loads(b) == {"status": "ok"}, "/health: %d %r" % (st, b))
    st, _, b = srv.http("GET", "/v1/models", headers=h)
    ids = [m["id"] for m in json.loads(b)["data"]]
    check(ids == ["stories260K.gguf", "tiny-stories", "story"], "/v1/models lists %r" % ids)
    for mid, want in (("stories260K.gguf", 200), ("tiny-stories", 200), ("gpt-4o", 404)):
        st, _, b = srv.http("GET", "/v1/models/" + mid, headers=h)
        check(st == want, "/v1/models/%s: %d %r" % (mid, st, b[:200]))
        if st == 200:
            check(json.loads(b)["id"] == mid and json.loads(b)["object"] == "model", "/v1/models/%s: %r" % (mid, b))
    for mid, want in (("gpt-4o", 404), ("story", 200), ("stories260K.gguf", 200)):
        st, _, b = srv.http("POST", "/v1/chat/completions", {"model": mid, "messages": [{"role": "user", "content": "hi"}],
                                                             "max_tokens": 2}, headers=h)
        check(st == want, "chat with model %r: %d %r" % (mid, st, b[:200]))
        if st == 404:
            check(json.loads(b)["error"]["code"] == "model_not_found", "unknown model: %r" % b)
    text = "Once upon a time, Lily saw a big red ball."
    st, _, b = srv.http("POST", "/tokenize", {"content": text}, headers=h)
    toks = json.loads(b)["tokens"]
    check(st == 200 and all(isinstance(t, int) for t in toks) and len(toks) > 3, "/tokenize: %d %r" % (st, b[:200]))
    st, _, b = srv.http("POST", "/tokenize", {"content": text, "with_pieces": True, "add_special": True}, headers=h)
    pieces = json.loads(b)["tokens"]
    check(st == 200 and pieces[0]["id"] == 1 and [p["id"] for p in pieces[1:]] == toks, "/tokenize with BOS and pieces: %r" % pieces[:3])
    check("".join(p["piece"] for p in pieces[1:]).strip() == text, "pieces do not spell the text: %r" % pieces)
    st, _, b = srv.http("POST", "/detokenize", {"tokens": toks}, headers=h)
    check(st == 200 and json.loads(b)["content"].strip() == text, "/detokenize round trip: %d %r" % (st, b[:200]))
    st, _, b = srv.http("POST", "/detokenize", {"tokens": [1, 99999999]}, headers=h)
    check(st == 400 and "tokens[1]" in json.loads(b)["error"]["message"], "bad token id: %d %r" % (st, b[:200]))
    st, _, b = srv.http("POST", "/tokenize", {"content": 5}, headers=h)
    check(st == 400, "/tokenize with a number: %d" % st)
    st, _, b = srv.http("GET", "/props", headers=h)
    p = json.loads(b)
    check(st == 200 and p["n_ctx"] > 0 and p["default_generation_settings"]["n_ctx"] == p["n_ctx"] and
          "speculation" in p and p["speculation"]["draft"] is True and "chat_template" in p, "/props: %r" % p)


def cors(srv):
    h = {"Authorization": "Bearer " + KEY}
    pre = {"Origin": "https://app.example", "Access-Control-Request-Method": "POST",
           "Access-Control-Request-Headers": "authorization, content-type"}
    st, hd, _ = srv.http("OPTIONS", "/v1/chat/completions", headers=pre)
    check(st == 204 and hd.get("access-control-allow-origin") == "https://app.example" and
          "POST" in hd.get("access-control-allow-methods", "") and
          "authorization" in hd.get("access-control-allow-headers", "").lower(), "allowed preflight: %d %r" % (st, hd))
    st, hd, _ = srv.http("OPTIONS", "/v1/chat/completions", headers=dict(pre, Origin="https://evil.example"))
    check(st == 403 and "access-control-allow-origin" not in hd, "foreign preflight: %d %r" % (st, hd))
    st, hd, _ = srv.http("POST", "/v1/completions", {"prompt": "x", "max_tokens": 2},
                         headers=dict(h, Origin="https://app.example"))
    check(st == 200 and hd.get("access-control-allow-origin") == "https://app.example", "CORS answer: %d %r" % (st, hd))
    st, hd, _ = srv.http("GET", "/v1/models", headers=dict(h, Origin="https://evil.example"))
    check("access-control-allow-origin" not in hd, "a foreign origin got CORS headers: %r" % hd)


def cross_site(srv):
    """A page of another site may send a text/plain POST without a preflight: refused."""
    h = {"Authorization": "Bearer " + KEY}
    body = json.dumps({"prompt": "x", "max_tokens": 2}).encode()
    for path in ("/v1/completions", "/v1/chat/completions"):
        st, _, b = srv.http("POST", path, body, headers=dict(h, **{"Content-Type": "text/plain", "Origin": "https://evil.example"}))
        check(st == 403 and json.loads(b)["error"]["code"] == "origin_not_allowed", "%s foreign text/plain: %d %r" % (path, st, b[:200]))
        st, _, b = srv.http("POST", path, body, headers=dict(h, **{"Content-Type": "text/plain"}))
        check(st == 415 and json.loads(b)["error"]["code"] == "unsupported_media_type", "%s text/plain: %d %r" % (path, st, b[:200]))
        st, _, b = srv.http("POST", path, body, headers=dict(h, **{"Content-Type": "application/x-www-form-urlencoded"}))
        check(st == 415, "%s form-encoded: %d" % (path, st))
    st, _, _ = srv.http("POST", "/v1/completions", body, headers=dict(h, **{"Content-Type": "application/json; charset=utf-8"}))
    check(st == 200, "application/json with a charset: %d" % st)
    st, _, _ = srv.http("POST", "/v1/completions", body,
                        headers=dict(h, **{"Content-Type": "text/plain", "Origin": "https://app.example"}))
    check(st == 200, "a listed origin's text/plain POST: %d" % st)
    st, _, _ = srv.http("POST", "/v1/completions", body,
                        headers=dict(h, **{"Content-Type": "application/json", "Origin": "http://127.0.0.1:%d" % srv.port}))
    check(st == 200, "same-host page: %d" % st)


def make_cert(d, name):
    cert, key = os.path.join(d, name + ".pem"), os.path.join(d, name + ".key")
    r = subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", key, "-out", cert,
                        "-days", "2", "-subj", "/CN=" + name], capture_output=True, timeout=60)
    check(r.returncode == 0, "openssl: %s" % r.stderr[-300:])
    return cert, key


def peer_cn(port):
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        with ctx.wrap_socket(s) as t:
            der = t.getpeercert(binary_form=True)
    r = subprocess.run(["openssl", "x509", "-inform", "DER", "-noout", "-subject"], input=der, capture_output=True, timeout=30)
    return r.stdout.decode()


def tls(tmp):
    if not shutil.which("openssl"):
        check(False, "the openssl command is needed (tests/deps.sh installs it)")
        return
    cert, key = make_cert(tmp, "first")
    old = specd_e2e.READY_RE
    specd_e2e.READY_RE = re.compile(r"serving on https://([0-9.]+):([0-9]+)/ \(WebSocket wss://")
    try:
        with Server(extra=["--tls-cert", cert, "--tls-key", key]) as srv:
            ctx = ssl.create_default_context()
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
            url = "https://127.0.0.1:%d" % srv.port
            rq = urllib.request.Request(url + "/v1/completions", method="POST", headers={"Content-Type": "application/json"},
                                        data=json.dumps({"prompt": "Once", "max_tokens": 4, "stream": True}).encode())
            with urllib.request.urlopen(rq, context=ctx, timeout=30) as r:
                body = r.read().decode()
            check(r.status == 200 and "data: [DONE]" in body, "HTTPS stream: %d %r" % (r.status, body[:200]))
            r = ws_try("wss://127.0.0.1:%d/v1/stream" % srv.port, ["specd.v1"], ssl_ctx=ctx)
            check(r is None, "WSS: %s" % r)
            # plain HTTP to the TLS port: no HTTP answer
            try:
                got = specd_e2e.raw_exchange(srv.port, b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", timeout=3)
            except ConnectionResetError:
                got = b"(reset)" 
            check(not got.startswith(b"HTTP/"), "plain HTTP got an HTTP answer on the TLS port: %r" % got[:80])
            check("first" in peer_cn(srv.port), "the first certificate is not served")
            # a renewed certificate in the same files: taken on SIGHUP
            new_cert, new_key = make_cert(tmp, "renewed")
            shutil.copy(new_cert, cert)
            shutil.copy(new_key, key)
            os.kill(srv.proc.pid, signal.SIGHUP)
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline and "renewed" not in peer_cn(srv.port):
                time.sleep(0.2)
            check("renewed" in peer_cn(srv.port), "SIGHUP did not load the renewed certificate")
    finally:
        specd_e2e.READY_RE = old


def run():
    with tempfile.TemporaryDirectory() as tmp:
        keyfile = os.path.join(tmp, "keys.txt")
        with open(keyfile, "w") as f:
            f.write("# API keys\n" + KEY2 + "\n")
        cfg = ("server:\n  api_key_file: %s\n  cors_origins: https://app.example\nmodels:\n  alias: tiny-stories, story\n"
               % keyfile)
        with Server(config=cfg, extra=["--api-key", KEY]) as srv:
            keys(srv)
            endpoints(srv)
            cors(srv)
            cross_site(srv)
            cfg_path = os.path.join(srv.dir, "config.yaml")
            with open(cfg_path, "w") as f:
                f.write("server:\n  api_keys: %s\nmodels:\n  alias: tiny-stories, story\n" % KEY2)
            with open(keyfile, "w") as f:
                f.write("")
            os.kill(srv.proc.pid, signal.SIGHUP)
            time.sleep(1)
            reload_keys(srv, cfg_path)
        tls(tmp)


if __name__ == "__main__":
    main(run)
