"""tests/peers/strata_daemon.py: helpers shared by the Python test scripts
that drive a `strata serve` daemon (http-raw, http-real, status-real, notify).

Import it from a script's own directory (tests/peers) or add that directory
to sys.path first (tests/deploy). Not thread-safe: Results counts from the
main thread of one test script.
"""
import http.client
import json
import os
import re
import socket
import threading
import time

SANITIZER_RE = re.compile(r"AddressSanitizer|LeakSanitizer|UndefinedBehaviorSanitizer|runtime error:")
LISTENING_RE = re.compile(r"listening on http://(?:[0-9.]+|\[[0-9a-fA-F:]+\]|[A-Za-z0-9.-]+):(\d+)")


def shared_dir():
    """$STRATA_SHARED_DIR, else the ../shared next to the repository."""
    return os.environ.get("STRATA_SHARED_DIR") or os.path.join(os.path.dirname(__file__), "..", "..", "..", "shared")


class Results:
    """A pass/fail counter; report() prints `RESULT <name>: N passed, M failed`."""

    def __init__(self, limit=None, verbose=False):
        self.passed = 0
        self.failed = 0
        self.limit = limit  # truncate FAIL details to this many characters
        self.verbose = verbose  # print an `ok   <name>` line for each pass

    def check(self, name, cond, detail=""):
        if cond:
            self.passed += 1
            if self.verbose:
                print(f"ok   {name}")
        else:
            self.failed += 1
            text = str(detail) if self.limit is None else str(detail)[:self.limit]
            print(f"FAIL {name} {text}", flush=True)

    def report(self, name):
        print(f"RESULT {name}: {self.passed} passed, {self.failed} failed", flush=True)
        return 1 if self.failed else 0


def wait_listening(proc, timeout):
    """Reads proc's stderr (text mode) until the "listening on" line; returns
    the port, or None when stderr ends or the timeout passes first."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        line = proc.stderr.readline()
        if not line:
            break
        m = LISTENING_RE.search(line)
        if m:
            return int(m.group(1))
    return None


def drain_stderr(proc):
    """Keeps draining proc's stderr into a list so the daemon never blocks on a
    full pipe; returns (log lines, the reader thread)."""
    log = []
    reader = threading.Thread(target=lambda: log.extend(proc.stderr), daemon=True)
    reader.start()
    return log, reader


def wait_health(port, interval, tries=None, deadline=None):
    """Polls GET /health (503 until the weights are warm) until it answers 200,
    for `tries` attempts or until the time.time() `deadline`."""
    n = 0
    while (tries is None or n < tries) and (deadline is None or time.time() < deadline):
        n += 1
        try:
            if request(port, "GET", "/health")[0] == 200:
                return True
        except OSError:
            pass
        time.sleep(interval)
    return False


def request(port, method, path, body=None, headers=None, timeout=60):
    """One request on a fresh connection; a non-bytes body is sent as JSON.
    Returns (status, {lower-case header: value}, body bytes)."""
    h = dict(headers or {})
    if body is not None and not isinstance(body, bytes):
        body = json.dumps(body).encode()
        h.setdefault("Content-Type", "application/json")
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    c.request(method, path, body=body, headers=h)
    r = c.getresponse()
    data = r.read()
    c.close()
    return r.status, dict((k.lower(), v) for k, v in r.getheaders()), data


def raw_post(port, path, body, headers=b"", timeout=20):
    """Sends `POST <path>` with the JSON body (bytes) and extra header lines
    (bytes, each ending in \\r\\n) on a fresh socket; returns the open socket
    (the caller closes it, typically mid-answer to test a disconnect)."""
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    s.sendall(b"POST %s HTTP/1.1\r\nHost: x\r\n%sContent-Type: application/json\r\n"
              b"Content-Length: %d\r\n\r\n" % (path.encode(), headers, len(body)) + body)
    return s


def read_events(s, n):
    """Reads from s until n `data: ` events have arrived or the peer closes;
    returns the bytes read."""
    got = b""
    while got.count(b"data: ") < n:
        b = s.recv(4096)
        if not b:
            break
        got += b
    return got
