#!/usr/bin/env python3
"""tests/peers/http-raw.py: raw-socket HTTP tests of strata's HTTP layer.

Usage: http-raw.py PATH/TO/strata-fake-serve [PATH/TO/strata]

Starts the real daemon path (server/daemon.c) with the FAKE generation
backend of tests/server/fake-gen.c on 127.0.0.1 and a free port, then checks
transport behaviour with raw sockets and http.client: error bodies, limits,
auth, SSE framing and keep-alives, slowloris, client disconnects, 200 mixed
concurrent requests, /metrics as Prometheus text, config errors (exit 2) and
SIGTERM draining (exit 0, which under ASan also means no leak).
Prints `RESULT http-raw: N passed, M failed`.
"""
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time

import strata_daemon as sd

BIN = sys.argv[1] if len(sys.argv) > 1 else "build/tests/strata-fake-serve"
STRATA = sys.argv[2] if len(sys.argv) > 2 else None
SHARED = sd.shared_dir()
KEY = "sk-test-key"
AUTH = b"Authorization: Bearer " + KEY.encode() + b"\r\n"  # header line for raw_post
results = sd.Results()
check = results.check


def start(*extra, env=None):
    return start_cmd([BIN, "--port", "0", *extra], env)


def start_cmd(cmd, env=None):
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env={**os.environ, **(env or {})})
    port = sd.wait_listening(proc, 30)
    if port is None:
        proc.kill()
        raise RuntimeError("daemon did not start: " + proc.stderr.read())
    log, _ = sd.drain_stderr(proc)
    return proc, port, log


def request(port, method, path, body=None, headers=None, key=KEY, timeout=20):
    h = dict(headers or {})
    if key:
        h["Authorization"] = "Bearer " + key
    return sd.request(port, method, path, body, h, timeout)


def error_shape_ok(data, etype=None):
    try:
        e = json.loads(data)["error"]
    except Exception:
        return False
    ok = all(k in e for k in ("message", "type", "param", "code")) and isinstance(e["message"], str)
    return ok and (etype is None or e["type"] == etype)


def raw(port, payload, read_timeout=5):
    s = socket.create_connection(("127.0.0.1", port), timeout=read_timeout)
    s.sendall(payload)
    out = b""
    try:
        while True:
            b = s.recv(65536)
            if not b:
                break
            out += b
    except (socket.timeout, ConnectionResetError):
        pass
    s.close()
    return out


def sse_events(data):
    return [blk for blk in data.decode().split("\n\n") if blk]


def status_json(port):
    st, _, d = request(port, "GET", "/status")
    return json.loads(d) if st == 200 else {}


def test_basics(port):
    st, h, d = request(port, "GET", "/health", key=None)
    check("health 200 without key", st == 200 and json.loads(d) == {"status": "ok"}, d)
    st, h, d = request(port, "GET", "/v1/models", key=None)
    check("models 401 without key", st == 401 and error_shape_ok(d, "authentication_error"), d)
    st, h, d = request(port, "GET", "/v1/models", key="sk-wrong")
    check("models 401 bad key", st == 401 and error_shape_ok(d, "authentication_error"), d)
    st, h, d = request(port, "GET", "/v1/models", key="sk-test-ke")  # a prefix of the key
    check("models 401 key prefix", st == 401, d)
    st, h, d = request(port, "GET", "/v1/models")
    ok = st == 200 and json.loads(d)["object"] == "list"
    check("models list", ok and json.loads(d)["data"][0]["id"] == "fake-model", d)
    st, h, d = request(port, "GET", "/v1/models/fake-model")
    check("model by id", st == 200 and json.loads(d)["id"] == "fake-model", d)
    st, h, d = request(port, "GET", "/v1/models/nope")
    check("unknown model 404", st == 404 and error_shape_ok(d), d)
    st, h, d = request(port, "GET", "/no/such/route")
    check("unknown route 404", st == 404 and error_shape_ok(d, "not_found_error"), d)
    st, h, d = request(port, "GET", "/v1/chat/completions")
    check("wrong method 405 + Allow", st == 405 and h.get("allow") == "POST" and error_shape_ok(d), h)
    st, h, d = request(port, "DELETE", "/health", key=None)
    check("wrong method on /health 405", st == 405 and h.get("allow") == "GET", h)
    body = json.dumps({"messages": []}).encode()
    st, h, d = request(port, "POST", "/v1/chat/completions", body=body,
                       headers={"Content-Type": "multipart/form-data; boundary=x"})
    check("wrong content type 400", st == 400 and error_shape_ok(d, "invalid_request_error") and
          b"multipart/form-data" in d, d)
    st, h, d = request(port, "POST", "/v1/chat/completions", body=b'{"messages": [',
                       headers={"Content-Type": "application/json"})
    check("malformed JSON 400", st == 400 and error_shape_ok(d, "invalid_request_error"), d)
    st, h, d = request(port, "POST", "/v1/chat/completions", body=b'[1,2]',
                       headers={"Content-Type": "application/json"})
    check("JSON array 400", st == 400 and error_shape_ok(d), d)
    st, h, d = request(port, "POST", "/v1/chat/completions", body=b'{"messages":[],"x":"\xff\xfe"}',
                       headers={"Content-Type": "application/json; charset=utf-8"})
    check("invalid UTF-8 400", st == 400 and b"UTF-8" in d and error_shape_ok(d), d)
    st, h, d = request(port, "POST", "/v1/chat/completions", body=b'{"x":"\xed\xa0\x80"}',
                       headers={"Content-Type": "application/json"})
    check("UTF-8 surrogate 400", st == 400 and error_shape_ok(d), d)
    st, h, d = request(port, "POST", "/v1/chat/completions", body={"stream": "yes", "messages": []})
    e = json.loads(d).get("error", {})
    check("backend validation error with param", st == 400 and e.get("param") == "stream", d)
    st, h, d = request(port, "POST", "/v1/chat/completions", body={"messages": [], "max_tokens": 4})
    j = json.loads(d) if st == 200 else {}
    check("chat non-stream 200", st == 200 and h.get("content-type") == "application/json" and
          j["choices"][0]["message"]["content"] == "tok0 tok1 tok2 tok3 ", d)
    st, h, d = request(port, "POST", "/v1/completions", body={"prompt": "hi", "max_tokens": 2})
    check("completion non-stream 200", st == 200 and json.loads(d)["choices"][0]["text"] == "tok0 tok1 ", d)


def test_error_bodies_utf8(port):
    # An error message quoting bytes that are not UTF-8 (a URL id, jansson's
    # own text about half a character) still gets its JSON body: it used to
    # get no response at all (curl: "Empty reply").
    hj = {"Content-Type": "application/json"}
    for path in ("/v1/models/%ff", "/v1/models/" + "a" * 127 + "%C3%A9", "/v1/models/%C3"):
        try:
            st, _, d = request(port, "GET", path)
        except Exception as e:  # noqa: BLE001
            st, d = 0, repr(e).encode()
        check(f"GET {path[:24]}: 404 with a JSON body", st == 404 and error_shape_ok(d), (st, d[:200]))
    for body in (b'{"model":"\\\xc3\xa9"}', b'{"model":"x","messages":[\xc3\xa9]}'):
        try:
            st, _, d = request(port, "POST", "/v1/completions", body=body, headers=hj)
        except Exception as e:  # noqa: BLE001
            st, d = 0, repr(e).encode()
        ok = st == 400 and error_shape_ok(d) and json.loads(d)["error"]["code"] in ("invalid_json",)
        check(f"JSON error quoting a partial character {body[:16]!r}: 400 invalid_json", ok, (st, d[:200]))


def test_stream(port):
    st, h, d = request(port, "POST", "/v1/chat/completions",
                       body={"messages": [], "max_tokens": 3, "stream": True,
                             "stream_options": {"include_usage": True}})
    ev = sse_events(d)
    check("stream content type", st == 200 and h.get("content-type") == "text/event-stream", h)
    check("stream ends with [DONE]", ev and ev[-1] == "data: [DONE]", ev[-2:])
    datas = [json.loads(e[6:]) for e in ev if e.startswith("data: {")]
    text = "".join(c["choices"][0].get("delta", {}).get("content", "") for c in datas if c["choices"])
    check("stream deltas", text == "tok0 tok1 tok2 ", text)
    check("stream usage chunk", any("usage" in c for c in datas), datas[-1:])
    check("stream every event framed", all(e.startswith("data: ") or e.startswith(":") for e in ev), ev)


def test_keepalive(port):
    # parallel=2: two long jobs hold both slots; a third stream waits in the
    # queue and must receive ": keep-alive" comments (interval 200 ms).
    blockers = []
    for _ in range(2):
        t = threading.Thread(target=request, args=(port, "POST", "/v1/chat/completions"),
                             kwargs={"body": {"messages": [], "max_tokens": 12, "fake_delay_ms": 100}})
        t.start()
        blockers.append(t)
    time.sleep(0.3)
    st, h, d = request(port, "POST", "/v1/chat/completions",
                       body={"messages": [], "max_tokens": 2, "stream": True})
    ev = sse_events(d)
    n_ka = sum(1 for e in ev if e == ": keep-alive")
    first_data = next((i for i, e in enumerate(ev) if e.startswith("data:")), len(ev))
    check("keep-alive while queued", n_ka >= 2 and ev.index(": keep-alive") < first_data, ev[:4])
    check("queued stream completes", ev[-1] == "data: [DONE]", ev[-1:])
    for t in blockers:
        t.join()


def test_too_large(port):
    # Content-Length over the limit: answered before the body is read.
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + KEY.encode() +
              b"\r\nContent-Type: application/json\r\nContent-Length: 10485760\r\n\r\n")
    s.sendall(b"{" + b" " * 65536)
    resp = b""
    try:
        while b"\r\n\r\n" not in resp or len(resp) < 100:
            b = s.recv(65536)
            if not b:
                break
            resp += b
    except (socket.timeout, ConnectionResetError):
        pass
    s.close()
    check("10 MB body 413", resp.startswith(b"HTTP/1.1 413") and b"too_large" in resp, resp[:200])
    # Chunked body without Content-Length, over the limit: counted as it comes.
    big = b"{\"messages\":[],\"pad\":\"" + b"a" * (3 << 20) + b"\"}"
    chunk = b"%x\r\n" % len(big) + big + b"\r\n0\r\n\r\n"
    resp = raw(port, b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + KEY.encode() +
               b"\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n" + chunk, 10)
    check("chunked body over limit 413", resp.startswith(b"HTTP/1.1 413"), resp[:100])
    st, _, _ = request(port, "GET", "/health", key=None)
    check("alive after 413s", st == 200)


def test_slowloris(port, timeout_s):
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout_s + 10)
    s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + KEY.encode() +
              b"\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"mess")
    t0 = time.time()
    # While the slow client hangs, the server keeps serving others.
    st, _, _ = request(port, "GET", "/health", key=None)
    check("serves while a slow client hangs", st == 200)
    closed = False
    try:
        d = s.recv(4096)
        closed = True  # EOF (b"") or an error response, either way the server gave up
    except socket.timeout:
        pass
    except ConnectionResetError:
        closed = True
    dt = time.time() - t0
    s.close()
    check("slow body dropped after timeout", closed and dt < timeout_s + 5, f"closed={closed} dt={dt:.1f}")
    # slow headers too
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout_s + 10)
    s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n")
    t0 = time.time()
    try:
        s.recv(4096)
    except (socket.timeout, ConnectionResetError):
        pass
    dt = time.time() - t0
    s.close()
    check("slow headers dropped after timeout", dt < timeout_s + 5, f"dt={dt:.1f}")


def test_header_slowloris(port, timeout_s):
    # Request headers trickled a line every 0.4 s never idle for --timeout
    # (MHD's timeout is per read): they kept a connection for as long as the
    # client liked (40 s seen at --timeout 5). The whole header block must be
    # in within --timeout of the accept.
    s = socket.create_connection(("127.0.0.1", port), timeout=1)
    s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n")
    t0 = time.time()
    closed = False
    try:
        while time.time() - t0 < timeout_s + 6:
            s.sendall(b"X-Slow: 1\r\n")
            try:
                if s.recv(4096) == b"":
                    closed = True
                    break
            except socket.timeout:
                pass
            time.sleep(0.4)
    except (ConnectionResetError, BrokenPipeError):
        closed = True
    dt = time.time() - t0
    s.close()
    check("trickled headers: closed at the header deadline", closed and dt < timeout_s + 1.5,
          f"closed={closed} dt={dt:.1f}")
    # the same on a kept-alive connection: the next request's headers are due
    # within --timeout of the end of the last one
    s = socket.create_connection(("127.0.0.1", port), timeout=2)
    s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
    first = s.recv(4096)
    s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n")
    t0 = time.time()
    closed = False
    s.settimeout(1)
    try:
        while time.time() - t0 < timeout_s + 6:
            s.sendall(b"X-Slow: 1\r\n")
            try:
                if s.recv(4096) == b"":
                    closed = True
                    break
            except socket.timeout:
                pass
    except (ConnectionResetError, BrokenPipeError):
        closed = True
    dt = time.time() - t0
    s.close()
    check("trickled headers on a kept-alive connection: closed at the deadline",
          first.startswith(b"HTTP/1.1 200") and closed and dt < timeout_s + 1.5, f"closed={closed} dt={dt:.1f}")


def test_framing(port):
    # Framing a proxy could read differently (request smuggling) is refused
    # with one 400 and the connection closed; a malformed Content-Length got
    # its status line and headers written twice by libmicrohttpd.
    post = b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n" + AUTH + b"Content-Type: application/json\r\n"
    cases = [
        ("two different Content-Length", post + b"Content-Length: 2\r\nContent-Length: 12\r\n\r\n{}"),
        ("Transfer-Encoding with Content-Length",
         post + b"Content-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n"),
        ("Content-Length -1", post + b"Content-Length: -1\r\n\r\n{}"),
        ("Content-Length 1e3", post + b"Content-Length: 1e3\r\n\r\n{}"),
        ("Transfer-Encoding gzip", post + b"Transfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n"),
        ("space before the colon", post + b"Content-Length : 2\r\n\r\n{}"),
        ("obsolete line folding", post + b"X-A: 1\r\n  folded\r\nContent-Length: 2\r\n\r\n{}"),
    ]
    for name, payload in cases:
        r = raw(port, payload)
        head, _, body = r.partition(b"\r\n\r\n")
        ok = (r.startswith(b"HTTP/1.1 400") and r.count(b"HTTP/1.1 ") == 1 and b"connection: close" in head.lower()
              and error_shape_ok(body))
        check(f"framing: {name}: one 400 with a JSON body, closed", ok, r[:300])
    # identical duplicates are one length (RFC 9112 6.3): served
    b = b'{"messages":[],"max_tokens":1}'
    r = raw(port, post + b"Content-Length: %d\r\nContent-Length: %d\r\nConnection: close\r\n\r\n" % (len(b), len(b)) + b)
    check("framing: the same Content-Length twice is served", r.startswith(b"HTTP/1.1 200"), r[:200])
    # a later request on a kept-alive connection is checked too
    for name, second in (
            ("TE + CL", b"Content-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n"),
            ("two different CL", b"Content-Length: 2\r\nContent-Length: 3\r\n\r\n{}"),
            ("space before the colon", b"Content-Length : 2\r\nContent-Length: 2\r\n\r\n{}")):
        s = socket.create_connection(("127.0.0.1", port), timeout=5)
        s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
        first = s.recv(4096)
        s.sendall(post + second)
        out = b""
        try:
            while True:
                b = s.recv(65536)
                if not b:
                    break
                out += b
        except (socket.timeout, ConnectionResetError):
            pass
        s.close()
        head, _, body = out.partition(b"\r\n\r\n")
        check(f"framing: {name} on a kept-alive connection: 400, closed",
              first.startswith(b"HTTP/1.1 200") and out.startswith(b"HTTP/1.1 400") and b"invalid_header" in body
              and b"connection: close" in head.lower(), out[:300])


def test_busy_port(port):
    # A second daemon on a busy port must fail its start (SO_REUSEPORT let it
    # listen, and the kernel split the requests between the two).
    r = subprocess.run([BIN, "--port", str(port)], capture_output=True, text=True, timeout=30)
    check("second daemon on a busy port exits 1, never listening",
          r.returncode == 1 and "in use" in r.stderr and "listening on" not in r.stderr, r.stderr[-500:])
    st, _, _ = request(port, "GET", "/health", key=None)
    check("the first daemon still serves", st == 200)


def wait_freed(port):
    """Polls /status (5 s at most) until no session is active and no HTTP
    request pending; returns (freed, the last status)."""
    deadline = time.time() + 5
    st = {}
    while time.time() < deadline:
        st = status_json(port)
        if st.get("sessions", {}).get("active") == 0 and st["sessions"]["http_pending"] == 0:
            return True, st
        time.sleep(0.05)
    return False, st


def test_disconnect(port):
    before = status_json(port).get("tokens", {}).get("generated", 0)
    body = json.dumps({"messages": [], "max_tokens": 200, "fake_delay_ms": 50, "stream": True}).encode()
    s = sd.raw_post(port, "/v1/chat/completions", body, AUTH, timeout=10)
    sd.read_events(s, 3)
    mid = status_json(port)
    check("session active mid-stream", mid.get("sessions", {}).get("active", 0) >= 1, mid.get("sessions"))
    s.close()
    ok, st = wait_freed(port)
    check("disconnect frees the session", ok, st.get("sessions"))
    tokens = st.get("tokens", {}).get("generated", 10**9) - before
    check("disconnect cancelled generation early", tokens < 150, tokens)
    _, _, m = request(port, "GET", "/metrics")
    mm = re.search(rb"strata_client_disconnects_total (\d+)", m)
    check("disconnect counted in /metrics", mm and int(mm.group(1)) >= 1, m[:0])


def test_disconnect_waiting(port):
    # A non-stream request whose client leaves while it is generating: the
    # suspended connection is noticed by the ticker and the job cancelled.
    before = status_json(port).get("tokens", {}).get("generated", 0)
    body = json.dumps({"messages": [], "max_tokens": 200, "fake_delay_ms": 50}).encode()
    s = sd.raw_post(port, "/v1/chat/completions", body, AUTH, timeout=10)
    time.sleep(0.5)
    s.close()
    ok, st = wait_freed(port)
    check("non-stream disconnect frees the session", ok, st.get("sessions"))
    gen = st.get("tokens", {}).get("generated", 10**9) - before
    check("non-stream disconnect cancelled early", gen < 150, gen)


def test_mixed(port, n=200):
    kinds = [
        ("GET", "/health", None, None, 200),
        ("GET", "/v1/models", None, KEY, 200),
        ("POST", "/v1/chat/completions", {"messages": [], "max_tokens": 3, "fake_delay_ms": 1}, KEY, 200),
        ("POST", "/v1/chat/completions", {"messages": [], "max_tokens": 3, "stream": True, "fake_delay_ms": 1}, KEY, 200),
        ("POST", "/v1/completions", {"prompt": "x", "max_tokens": 2, "fake_delay_ms": 1}, KEY, 200),
        ("POST", "/v1/chat/completions", b"{bad json", KEY, 400),
        ("GET", "/nowhere", None, KEY, 404),
        ("GET", "/v1/models", None, "sk-bad", 401),
        ("GET", "/metrics", None, KEY, 200),
    ]
    results = [None] * n
    def worker(i):
        m, p, b, k, want = kinds[i % len(kinds)]
        h = {"Content-Type": "application/json"} if isinstance(b, bytes) else None
        try:
            st, hh, d = request(port, m, p, body=b, headers=h, key=k, timeout=60)
            ok = st == want
            if ok and want == 200 and b is not None and isinstance(b, dict) and b.get("stream"):
                ok = d.endswith(b"data: [DONE]\n\n")
            results[i] = ok or (st, d[:100])
        except Exception as e:  # noqa: BLE001
            results[i] = repr(e)
    threads = []
    # 25 clients at a time (the box has 2 cores shared with the ASan build)
    for start_i in range(0, n, 25):
        batch = [threading.Thread(target=worker, args=(i,)) for i in range(start_i, min(n, start_i + 25))]
        for t in batch:
            t.start()
        for t in batch:
            t.join()
        threads += batch
    bad = [r for r in results if r is not True]
    check(f"{n} mixed requests", not bad, bad[:3])
    st, _, _ = request(port, "GET", "/health", key=None)
    check("health after mixed load", st == 200)


def parse_prometheus(text):
    """Minimal Prometheus text-format 0.0.4 parser; returns {name: [(labels, value)]}."""
    samples = {}
    types = {}
    line_re = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{([a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\]|\\.)*"'
                         r'(?:,[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\]|\\.)*")*)?\})? ([-+]?[0-9.eE+-]+|\+Inf|NaN)$')
    for ln in text.splitlines():
        if not ln:
            continue
        if ln.startswith("# HELP ") or ln.startswith("# TYPE "):
            parts = ln.split(" ", 3)
            if len(parts) < 4:
                raise ValueError("bad comment: " + ln)
            if parts[1] == "TYPE":
                if parts[3] not in ("counter", "gauge", "histogram", "summary", "untyped"):
                    raise ValueError("bad type: " + ln)
                types[parts[2]] = parts[3]
            continue
        if ln.startswith("#"):
            continue
        m = line_re.match(ln)
        if not m:
            raise ValueError("bad sample: " + ln)
        samples.setdefault(m.group(1), []).append((m.group(3) or "", float(m.group(4))))
    return types, samples


def test_metrics(port):
    st, h, d = request(port, "GET", "/metrics")
    check("metrics 200 text/plain", st == 200 and h.get("content-type", "").startswith("text/plain"), h)
    try:
        types, samples = parse_prometheus(d.decode())
        ok = True
    except ValueError as e:
        ok = False
        print(e)
    check("metrics parse as Prometheus text", ok)
    if not ok:
        return
    for hist in ("strata_time_to_first_token_seconds", "strata_inter_token_seconds"):
        b = samples.get(hist + "_bucket", [])
        vals = [v for _, v in b]
        cnt = samples.get(hist + "_count", [("", -1)])[0][1]
        check(f"{hist} cumulative", types.get(hist) == "histogram" and vals == sorted(vals) and
              b and 'le="+Inf"' in b[-1][0] and vals[-1] == cnt and cnt > 0, b[-2:])
    req = samples.get("strata_http_requests_total", [])
    check("requests by route and status", any('route="/v1/chat/completions",status="200"' in l for l, _ in req) and
          any('status="404"' in l for l, _ in req), req[:3])
    check("tokens counters", samples.get("strata_tokens_completion_total", [("", 0)])[0][1] > 0)
    check("queue depth gauge", "strata_queue_depth" in samples and types.get("strata_queue_depth") == "gauge")
    check("cache counters", "strata_prefix_cache_hits_total" in samples)
    st = status_json(port)
    check("status fields", all(k in st for k in ("model", "architecture", "quant_mix", "n_ctx", "threads",
                                                   "pool_dispatches", "kv", "sessions", "tokens", "recent_tok_s")), st)


def test_config_errors():
    r = subprocess.run([BIN, "--port", "70000"], capture_output=True, text=True, timeout=30)
    check("bad port exits 2", r.returncode == 2 and "0..65535" in r.stderr, r.stderr)
    r = subprocess.run([BIN, "--print-config", "--port", "1234"], capture_output=True, text=True, timeout=30,
                       env={**os.environ, "STRATA_THREADS": "3"})
    check("print-config", r.returncode == 0 and re.search(r"port\s+= 1234\s+\(cli\)", r.stdout) and
          re.search(r"threads\s+= 3\s+\(env\)", r.stdout) and re.search(r"pool-spin\s+= 4000\s+\(default\)", r.stdout), r.stdout)
    r = subprocess.run([BIN, "--help"], capture_output=True, text=True, timeout=30)
    check("help from the table", r.returncode == 0 and "--max-body" in r.stdout and "STRATA_POOL_SPIN" in r.stdout)
    r = subprocess.run([BIN, "--api-key-file", "/nonexistent/keys"], capture_output=True, text=True, timeout=30)
    check("missing key file exits 2", r.returncode == 2 and "api-key-file" in r.stderr, r.stderr)
    # a FIFO as the key file blocked fopen() for ever, SIGTERM already blocked
    fifo = f"/tmp/strata-http-raw-keyfifo-{os.getpid()}"
    os.mkfifo(fifo)
    try:
        r = subprocess.run([BIN, "--api-key-file", fifo], capture_output=True, text=True, timeout=20)
        check("FIFO key file exits 2 at once", r.returncode == 2 and "not a regular file" in r.stderr, r.stderr)
    except subprocess.TimeoutExpired:
        check("FIFO key file exits 2 at once", False, "still blocked after 20 s")
    finally:
        os.unlink(fifo)


def test_cors():
    """--cors-origin: the preflight (OPTIONS) is answered before auth, with the
    CORS headers only for an allowed Origin; every response carries
    X-Request-Id (unique), and those for an allowed Origin the
    Access-Control-Allow-Origin header; without --cors-origin no CORS headers."""
    ok_origin, bad_origin = "http://localhost:3000", "http://evil.example"
    proc, port, _ = start("--api-key", KEY, "--cors-origin", f"{ok_origin}, http://other:1")
    try:
        pre = {"Origin": ok_origin, "Access-Control-Request-Method": "POST",
               "Access-Control-Request-Headers": "authorization, content-type"}
        st, h, d = request(port, "OPTIONS", "/v1/chat/completions", headers=pre, key=None)
        check("preflight 204 before auth", st == 204 and
              h.get("access-control-allow-origin") == ok_origin and
              "POST" in h.get("access-control-allow-methods", "") and
              h.get("access-control-allow-headers") == "authorization, content-type" and
              h.get("access-control-max-age") == "600", (st, h))
        st, h, d = request(port, "OPTIONS", "/v1/chat/completions", key=None,
                           headers={**pre, "Origin": bad_origin})
        check("preflight from another origin: no CORS headers", st == 204 and
              "access-control-allow-origin" not in h, h)
        st, h, d = request(port, "OPTIONS", "/health", key=None)
        check("OPTIONS without Origin: 204 with Allow", st == 204 and
              h.get("allow") == "GET, HEAD, OPTIONS", h)
        ids = set()
        for path, key in (("/v1/models", KEY), ("/v1/models", None), ("/health", None)):
            st, h, d = request(port, "GET", path, key=key, headers={"Origin": ok_origin})
            check(f"GET {path} ({'key' if key else 'no key'}): CORS and request id",
                  h.get("access-control-allow-origin") == ok_origin and
                  h.get("vary") == "Origin" and "X-Request-Id" in h.get("access-control-expose-headers", "") and
                  re.fullmatch(r"req-[0-9a-f]{16}", h.get("x-request-id", "")) is not None, (st, h))
            ids.add(h.get("x-request-id"))
        st, h, d = request(port, "GET", "/v1/models", headers={"Origin": bad_origin})
        check("a response to another origin has no CORS headers", st == 200 and
              "access-control-allow-origin" not in h and "x-request-id" in h, h)
        ids.add(h.get("x-request-id"))
        body = json.dumps({"model": "fake-model", "messages": [{"role": "user", "content": "hi"}],
                           "stream": True}).encode()
        s = sd.raw_post(port, "/v1/chat/completions", body,
                        AUTH + f"Origin: {ok_origin}\r\n".encode())
        head = b""
        s.settimeout(10)
        while b"\r\n\r\n" not in head:
            chunk = s.recv(4096)
            if not chunk:
                break
            head += chunk
        s.close()
        hl = head.lower()
        check("SSE response: CORS and request id", b"access-control-allow-origin: " +
              ok_origin.encode() in hl and b"x-request-id: req-" in hl, head[:300])
        check("request ids are unique", len(ids) == 4, ids)
    finally:
        proc.kill()
        proc.wait()
    proc, port, _ = start()
    try:
        st, h, d = request(port, "GET", "/health", key=None, headers={"Origin": ok_origin})
        check("no --cors-origin: no CORS headers", "access-control-allow-origin" not in h and
              "x-request-id" in h, h)
    finally:
        proc.kill()
        proc.wait()


def test_hosts():
    """--host takes an IPv6 literal (bare or in brackets) and a host name;
    the listening line puts an IPv6 address in brackets."""
    for host, family, addr in (("::1", socket.AF_INET6, "::1"), ("[::1]", socket.AF_INET6, "::1"),
                               ("localhost", socket.AF_INET, "127.0.0.1")):
        proc = subprocess.Popen([BIN, "--port", "0", "--host", host], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
        try:
            line = ""
            deadline = time.time() + 20
            while time.time() < deadline and "listening on" not in line:
                line = proc.stderr.readline()
                if not line:
                    break
            m = re.search(r"listening on http://(\S+):(\d+)", line)
            check(f"--host {host}: listening line", m is not None and
                  (family == socket.AF_INET or m.group(1) == "[::1]"), line)
            if not m:
                continue
            got = b""
            for _ in range(100):  # the fake backend may still be loading: 503 until ready
                with socket.socket(family, socket.SOCK_STREAM) as c:
                    c.settimeout(5)
                    c.connect((addr, int(m.group(2))))
                    c.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
                    got = b""
                    while True:
                        d = c.recv(4096)
                        if not d:
                            break
                        got += d
                if got.startswith(b"HTTP/1.1 200"):
                    break
                time.sleep(0.05)
            check(f"--host {host}: /health over {'IPv6' if family == socket.AF_INET6 else 'IPv4'}",
                  got.startswith(b"HTTP/1.1 200"), got[:80])
        finally:
            proc.kill()
            proc.wait()
    r = subprocess.run([BIN, "--port", "0", "--host", "no-such-host.invalid"], capture_output=True,
                       text=True, timeout=30)
    check("unresolvable --host exits 1 with the name", r.returncode != 0 and
          "no-such-host.invalid" in r.stderr and "listening on" not in r.stderr, r.stderr[-300:])


def test_key_file():
    path = f"/tmp/strata-http-raw-keys-{os.getpid()}"
    with open(path, "w") as f:
        f.write("# keys\nsk-one\n\n  sk-two  \n")
    proc, port, log = start("--api-key-file", path, "--parallel", "1", "--queue", "0",
                            "--max-connections", "6", "--shutdown-timeout", "1")
    rc = None
    try:
        a = request(port, "GET", "/v1/models", key="sk-one")[0]
        b = request(port, "GET", "/v1/models", key="sk-two")[0]
        c = request(port, "GET", "/v1/models", key="sk-three")[0]
        check("several keys from a file", (a, b, c) == (200, 200, 401), (a, b, c))
        # queue 0, parallel 1: a second concurrent request gets 429
        out = {}
        def long_stream():
            out["r"] = request(port, "POST", "/v1/chat/completions", key="sk-one", timeout=30,
                               body={"messages": [], "max_tokens": 200, "fake_delay_ms": 50, "stream": True})
        t = threading.Thread(target=long_stream)
        t.start()
        time.sleep(0.4)
        st, _, d = request(port, "POST", "/v1/chat/completions", key="sk-one", body={"messages": []})
        check("queue full 429", st == 429 and error_shape_ok(d, "rate_limit_error"), d)
        # connection limit 6: the long stream holds one; 5 idle sockets (no
        # request yet) fill the rest. A 7th client is still served: the idle
        # socket that has waited longest is dropped to make room, so 6 stay
        # open; the busy stream is never dropped. (Before, the 7th waited in
        # the backlog, and 270 idle sockets locked /health out.)
        socks = []
        for _ in range(5):
            socks.append(socket.create_connection(("127.0.0.1", port), timeout=5))
            time.sleep(0.05)  # distinct ages: socks[0] has waited longest
        time.sleep(0.3)
        served = False
        try:
            so = socket.create_connection(("127.0.0.1", port), timeout=5)
            so.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            served = so.recv(4096).startswith(b"HTTP/1.1 200")
            so.close()
        except OSError:
            pass
        closed = []
        for so in socks:
            so.settimeout(0.5)
            try:
                closed.append(so.recv(1) == b"")
            except socket.timeout:
                closed.append(False)
            except OSError:
                closed.append(True)
            so.close()
        check("at the connection limit a new client is served", served)
        check("connection limit kept: the longest-waiting idle socket made room",
              closed[0] and sum(closed) == 1, closed)
        time.sleep(0.3)
        check("serving after connection flood", request(port, "GET", "/health", key=None)[0] == 200)
        # SIGTERM with a long stream in flight: drain deadline 1 s, then cancel
        t0 = time.time()
        proc.send_signal(signal.SIGTERM)
        t.join(30)
        rc = proc.wait(timeout=30)
        dt = time.time() - t0
        d = out.get("r", (0, {}, b""))[2]
        n_tok = d.count(b'"content"')
        check("shutdown deadline cancels long work", dt < 6 and 0 < n_tok < 200, (dt, n_tok))
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            rc = proc.wait(timeout=30)
        os.unlink(path)
    check("key-file daemon exits 0", rc == 0, "".join(log)[-2000:])


def test_sigterm(proc, port, log):
    # A stream in flight when SIGTERM arrives finishes (drain), then exit 0.
    out = {}
    def stream():
        try:
            out["r"] = request(port, "POST", "/v1/chat/completions",
                               body={"messages": [], "max_tokens": 10, "fake_delay_ms": 60, "stream": True})
        except Exception as e:  # noqa: BLE001
            out["r"] = (0, {}, repr(e).encode())
    t = threading.Thread(target=stream)
    t.start()
    time.sleep(0.2)
    proc.send_signal(signal.SIGTERM)
    t.join(30)
    st, _, d = out.get("r", (0, {}, b""))
    check("in-flight stream drains on SIGTERM", st == 200 and d.endswith(b"data: [DONE]\n\n"), d[-80:])
    try:
        rc = proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        rc = -999
    check("SIGTERM exits 0 (no ASan error or leak)", rc == 0, f"rc={rc} " + "".join(log)[-3000:])
    refused = False
    try:
        request(port, "GET", "/health", key=None, timeout=2)
    except OSError:
        refused = True
    check("not accepting after exit", refused)


def test_strata_serve():
    """`strata serve` itself: exit codes, model check, answers, SIGTERM."""
    r = subprocess.run([STRATA, "serve", "--port", "0"], capture_output=True, text=True, timeout=30)
    check("strata serve without a model exits 2", r.returncode == 2 and "no model" in r.stderr, r.stderr)
    r = subprocess.run([STRATA, "serve", "--port", "0", "/nonexistent/m.gguf"], capture_output=True,
                       text=True, timeout=30)
    check("strata serve with a missing model exits 1", r.returncode == 1 and "m.gguf" in r.stderr, r.stderr)
    # A FIFO as the model: refused at once (open() blocked forever, SIGTERM ignored)
    fifo = f"/tmp/strata-http-raw-fifo-{os.getpid()}"
    os.mkfifo(fifo)
    try:
        r = subprocess.run([STRATA, "serve", "--port", "0", fifo], capture_output=True, text=True, timeout=20)
        check("strata serve with a FIFO model exits 1", r.returncode == 1 and "not a regular file" in r.stderr,
              r.stderr[-500:])
    except subprocess.TimeoutExpired:
        check("strata serve with a FIFO model exits 1", False, "still blocked after 20 s")
    finally:
        os.unlink(fifo)
    r = subprocess.run([STRATA, "serve", "--ctx-size", "-5"], capture_output=True, text=True, timeout=30)
    check("strata serve bad option exits 2", r.returncode == 2 and "ctx-size" in r.stderr, r.stderr)
    model = os.path.join(SHARED, "models", "stories260K.gguf")
    if not os.path.exists(model):
        check("shared model present: " + model, False)
        return
    global BIN
    saved, BIN = BIN, STRATA
    try:
        proc, port, log = start_cmd([STRATA, "serve", model, "--port", "0"])
        try:
            st = 0
            for _ in range(200):
                st, _, d = request(port, "GET", "/health", key=None)
                if st == 200:
                    break
                time.sleep(0.05)
            check("strata serve health 200", st == 200)
            # OpenAI requires "model": the id is the file's basename without .gguf
            st, _, d = request(port, "POST", "/v1/chat/completions",
                               body={"model": "stories260K", "max_tokens": 4,
                                     "messages": [{"role": "user", "content": "Once"}]})
            ok = st == 200 and json.loads(d)["choices"][0]["message"]["content"] != ""
            check("strata serve chat answers 200 or an OpenAI 503", ok or (st == 503 and error_shape_ok(d)), d)
            st, _, d = request(port, "POST", "/v1/chat/completions", body={"messages": []})
            check("strata serve chat without model 400", st == 400 and
                  json.loads(d)["error"]["param"] == "model", d)
        finally:
            proc.send_signal(signal.SIGTERM)
            rc = proc.wait(timeout=60)
        check("strata serve SIGTERM exits 0", rc == 0, "".join(log)[-2000:])
    finally:
        BIN = saved


def test_web():
    """The embedded page: /, /app.js, /style.css with their types, no key
    needed (the page asks for it), an ETag that answers 304, a CSP; HEAD;
    other methods 405; unknown files 404; --web-ui false turns it off."""
    proc, port, _ = start("--api-key", KEY)
    try:
        types = {"/": "text/html", "/index.html": "text/html", "/app.js": "text/javascript",
                 "/style.css": "text/css"}
        for path, ctype in types.items():
            st, h, d = request(port, "GET", path, key=None)
            check(f"GET {path} 200 {ctype} without a key", st == 200 and
                  h.get("content-type", "").startswith(ctype) and len(d) > 100 and
                  "script-src 'self'" in h.get("content-security-policy", "") and
                  h.get("x-content-type-options") == "nosniff" and h.get("cache-control") == "no-cache",
                  (st, h))
            etag = h.get("etag", "")
            st, h2, d2 = request(port, "GET", path, key=None, headers={"If-None-Match": etag})
            check(f"GET {path} If-None-Match: 304, no body", re.fullmatch(r'"[0-9a-f]{16}"', etag) and
                  st == 304 and d2 == b"" and h2.get("etag") == etag, (etag, st, h2, d2[:40]))
        st, h, d = request(port, "GET", "/", key=None)
        check("the page names its script and sheet, no other host",
              b'src="/app.js"' in d and b'href="/style.css"' in d and b"http" not in d.lower().replace(
                  b'http-equiv', b''), d[:200])
        st, h, d = request(port, "HEAD", "/app.js", key=None)
        check("HEAD /app.js: 200, no body", st == 200 and d == b"", (st, d[:40]))
        st, h, d = request(port, "POST", "/", body=b"{}", key=None)
        check("POST / is 405 with Allow", st == 405 and "GET" in h.get("allow", ""), (st, h))
        st, h, d = request(port, "GET", "/secret.html", key=None)
        check("an unknown file is 404", st == 404 and error_shape_ok(d), (st, d))
        st, h, d = request(port, "GET", "/../index.html", key=None)
        check("a path outside the table is 404", st in (400, 404), st)
        st, h, d = request(port, "GET", "/metrics")
        _, samples = parse_prometheus(d.decode())
        web = {lab: v for lab, v in samples.get("strata_http_requests_total", []) if 'route="web"' in lab}
        check("page requests counted as route web, 304s too",
              web.get('route="web",status="200"', 0) >= 6 and web.get('route="web",status="304"') == 4, web)
    finally:
        proc.kill()
        proc.wait()
    for flag in ("--no-web-ui", "--web-ui=false"):
        proc, port, _ = start(flag)
        try:
            st, h, d = request(port, "GET", "/", key=None)
            check(f"{flag}: GET / is 404", st == 404 and error_shape_ok(d), (st, d[:60]))
            st, h, d = request(port, "GET", "/health", key=None)
            check(f"{flag}: the API still answers", st == 200, st)
        finally:
            proc.kill()
            proc.wait()


def main():
    timeout_s = 2
    proc, port, log = start("--api-key", KEY, "--timeout", str(timeout_s), "--parallel", "2",
                            "--queue", "256", "--keepalive-ms", "200", "--shutdown-timeout", "10",
                            env={"STRATA_FAKE_LOAD_MS": "1000"})
    try:
        # the fake backend "loads" for 1 s (STRATA_FAKE_LOAD_MS): /health says 503
        n_503 = 0
        for _ in range(200):
            st, _, d = request(port, "GET", "/health", key=None)
            if st == 200:
                break
            check("health while loading is an OpenAI error", st == 503 and error_shape_ok(d, "server_error"), d)
            n_503 += 1
            time.sleep(0.05)
        check("health 503 while loading, then 200", n_503 > 0 and st == 200, (n_503, st))
        for fn in (test_basics, test_error_bodies_utf8, test_stream, test_keepalive, test_too_large,
                   lambda p: test_slowloris(p, timeout_s), lambda p: test_header_slowloris(p, timeout_s),
                   test_framing, test_busy_port, test_disconnect, test_disconnect_waiting,
                   test_mixed, test_metrics):
            try:
                fn(port)
            except Exception as e:  # noqa: BLE001
                check(getattr(fn, "__name__", "test"), False, repr(e))
        test_sigterm(proc, port, log)
    finally:
        if proc.poll() is None:
            proc.kill()
    for fn in (test_config_errors, test_key_file, test_hosts, test_cors, test_web) + ((test_strata_serve,) if STRATA else ()):
        try:
            fn()
        except Exception as e:  # noqa: BLE001
            check(fn.__name__, False, repr(e))
    sys.exit(results.report("http-raw"))


if __name__ == "__main__":
    main()
