#!/usr/bin/env python3
"""tests/peers/hostile.py: hostile clients against the REAL daemon (`strata
serve` on stories260K, two API keys, --timeout 3, --max-connections 256),
while a well-behaved client streams and probes /health.

Usage: hostile.py PATH/TO/strata

Phases (loopback only; each bounded in time and in requests; the script
stops the daemon itself):
  quiet      a stream alone: its inter-token gaps (p99) and rate are the
             reference; /health latency.
  slowloris  270 connections (above --max-connections 256) that trickle
             header lines and reconnect when dropped, for 6 s.
  cross-key  key A sends a prompt with a secret digit; key B guesses every
             digit and reads usage.prompt_tokens_details.cached_tokens.
  huge       key B loops 1.9 MB prompts (each refused: context length) for
             5 s, one at a time.

Service level asserted during slowloris and huge (thresholds):
  /health    every probe answers 200 in under 1 s (HEALTH_MAX_S);
  stream     inter-token p99 under 3x the quiet p99, floored at quiet p99 +
             50 ms (ITL_P99_FACTOR, ITL_FLOOR_S: on this 2-core box the ASan
             build decodes a token in ~1.4 ms, so 3x alone is below the
             scheduling noise; with other benchmarks on the box the huge
             phase's p99 reached 20 ms against a quiet 6 ms); the longest
             gap under 0.4 s (MAX_GAP_S); at least a quarter of the quiet
             token rate (RATE_MIN: tokenizing the huge prompts takes one of
             the 2 cores; 50% seen on a loaded box).
The daemon must also drop the trickling connections at the header deadline
(--timeout 3: none lives past 3 s + 2 s, the client noticing a drop within
its 0.5 s trickle loop) and count them in /status; key B's right guess must
get exactly the cached_tokens of a wrong one, and 0 on its first guess.

Measured (ASan build, 2-vCPU Xeon, this tree, idle box): quiet p99 1.9 ms,
737 tok/s; slowloris p99 1.9 ms, max 5 ms, /health max 2 ms; huge p99
3.5 ms, max 36 ms, 702 tok/s (box loaded by other benchmarks: huge p99
9.5-20 ms, max 109 ms, half the quiet rate). The tree before the hardening
failed 8 checks: /health timed out (5 s) under the flood, key B's right guess
got 242 cached tokens against 183 for a wrong one, the huge prompts gave p99
727 ms, max 837 ms, 61 tok/s. Measured values are printed as `# ...` lines.
Prints `RESULT hostile: N passed, M failed`.
"""
import http.client
import json
import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

import strata_daemon as sd

STRATA = sys.argv[1] if len(sys.argv) > 1 else "build/cli/strata"
MODEL = os.path.join(sd.shared_dir(), "models", "stories260K.gguf")
MODEL_ID = "stories260K"
EOS = 2  # stories260K's </s>: a -100 bias keeps a stream going
KEY_A, KEY_B = "sk-hostile-a", "sk-hostile-b"
TIMEOUT_S = 3
MAX_CONN = 256

HEALTH_MAX_S = 1.0
ITL_P99_FACTOR = 3.0
ITL_FLOOR_S = 0.05
MAX_GAP_S = 0.4
RATE_MIN = 0.25

results = sd.Results(limit=800)
check = results.check


def pct(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))] if xs else float("inf")


class Stream:
    """Streamed completions (key A) one after another on their own thread,
    until stop(); records the arrival time of every token event. Each is
    600 tokens so every phase sees the same range of context positions."""

    def __init__(self, port, max_tokens=600):
        self.port, self.max_tokens = port, max_tokens
        self.times = []
        self.error = None
        self.n_streams = 0
        self.stopping = threading.Event()
        self.t = threading.Thread(target=self.run, daemon=True)
        self.t.start()

    def one(self):
        body = json.dumps({"model": MODEL_ID, "prompt": "Once upon a time", "max_tokens": self.max_tokens,
                           "temperature": 0, "stream": True, "logit_bias": {str(EOS): -100}}).encode()
        s = sd.raw_post(self.port, "/v1/completions", body,
                        b"Authorization: Bearer " + KEY_A.encode() + b"\r\n", timeout=30)
        buf = b""
        try:
            while True:
                b = s.recv(65536)
                if not b:
                    raise RuntimeError("stream closed before [DONE]")
                now = time.monotonic()
                buf += b
                while b"\n\n" in buf:  # SSE events inside HTTP chunks
                    ev, buf = buf.split(b"\n\n", 1)
                    ev = ev[ev.find(b"data: "):] if b"data: " in ev else b""
                    if ev.startswith(b"data: {") and b'"text"' in ev:
                        self.times.append(now)
                    elif ev.startswith(b"data: [DONE]"):
                        return
        finally:
            s.close()

    def run(self):
        try:
            while not self.stopping.is_set():
                self.one()
                self.n_streams += 1
        except Exception as e:  # noqa: BLE001
            self.error = repr(e)

    def stop(self):
        self.stopping.set()
        self.t.join(60)

    def window(self, t0, t1):
        """Gaps between token events inside [t0, t1], and tokens/s there."""
        ts = [t for t in self.times if t0 <= t <= t1]
        gaps = [b - a for a, b in zip(ts, ts[1:])]
        rate = (len(ts) - 1) / (ts[-1] - ts[0]) if len(ts) > 2 and ts[-1] > ts[0] else 0.0
        return gaps, rate


class HealthProbe:
    """GET /health every 0.2 s on a fresh connection; records latencies."""

    def __init__(self, port):
        self.port = port
        self.lat = []
        self.bad = []
        self.stop = threading.Event()
        self.t = threading.Thread(target=self.run, daemon=True)
        self.t.start()

    def run(self):
        while not self.stop.is_set():
            t0 = time.monotonic()
            try:
                st, _, _ = sd.request(self.port, "GET", "/health", timeout=5)
            except Exception as e:  # noqa: BLE001
                st = repr(e)
            dt = time.monotonic() - t0
            self.lat.append(dt)
            if st != 200:
                self.bad.append(st)
            self.stop.wait(0.2)

    def finish(self):
        self.stop.set()
        self.t.join(10)
        return self.lat, self.bad


def wait_tokens(stream, n, limit_s=20):
    deadline = time.monotonic() + limit_s
    while len(stream.times) < n and time.monotonic() < deadline and stream.t.is_alive():
        time.sleep(0.01)


def service_level(name, stream, t0, t1, health, quiet):
    gaps, rate = stream.window(t0, t1)
    lat, bad = health
    p99, mx = pct(gaps, 0.99), max(gaps, default=float("inf"))
    limit = max(ITL_P99_FACTOR * quiet["p99"], quiet["p99"] + ITL_FLOOR_S)
    print(f"# {name}: {len(gaps) + 1} tokens in {t1 - t0:.1f} s, {rate:.0f} tok/s (quiet {quiet['rate']:.0f}), "
          f"ITL p50 {pct(gaps, 0.5) * 1e3:.1f} ms p99 {p99 * 1e3:.1f} ms max {mx * 1e3:.1f} ms "
          f"(limit p99 {limit * 1e3:.1f} ms); /health max {max(lat, default=0) * 1e3:.0f} ms over "
          f"{len(lat)} probes", flush=True)
    check(f"{name}: the stream kept streaming", len(gaps) >= 20 and stream.error is None,
          (len(gaps), stream.error))
    check(f"{name}: /health always 200 in under {HEALTH_MAX_S} s", lat and not bad and max(lat) < HEALTH_MAX_S,
          (bad[:3], max(lat, default=None)))
    check(f"{name}: stream inter-token p99 {p99 * 1e3:.1f} ms < {limit * 1e3:.1f} ms", p99 < limit)
    check(f"{name}: longest stream gap {mx * 1e3:.0f} ms < {MAX_GAP_S * 1e3:.0f} ms", mx < MAX_GAP_S)
    check(f"{name}: stream rate {rate:.0f} tok/s >= {RATE_MIN:.0%} of quiet", rate >= RATE_MIN * quiet["rate"])


def phase_quiet(port):
    health = HealthProbe(port)
    s = Stream(port)
    wait_tokens(s, 50)
    t0 = time.monotonic()
    time.sleep(2.0)
    t1 = time.monotonic()
    lat, bad = health.finish()
    s.stop()
    gaps, rate = s.window(t0, t1)
    q = {"p99": pct(gaps, 0.99), "rate": rate}
    print(f"# quiet: {len(gaps) + 1} tokens, {rate:.0f} tok/s, ITL p50 {pct(gaps, 0.5) * 1e3:.1f} ms "
          f"p99 {q['p99'] * 1e3:.1f} ms max {max(gaps, default=0) * 1e3:.1f} ms; /health max "
          f"{max(lat, default=0) * 1e3:.0f} ms", flush=True)
    check("quiet: reference stream", len(gaps) >= 100 and rate > 0 and not bad, (len(gaps), rate, bad))
    return q


def phase_slowloris(port, quiet, duration=6.0, n=MAX_CONN + 14, max_opened=1500):
    """n connections trickling header lines (reconnecting when dropped)."""
    socks = {}  # socket -> connect time
    opened = [0]
    lifetimes = []
    stop = threading.Event()

    def connect():
        if opened[0] >= max_opened:
            return
        try:
            s = socket.create_connection(("127.0.0.1", port), timeout=2)
            s.setblocking(False)
            s.send(b"GET /health HTTP/1.1\r\nHost: x\r\n")
            socks[s] = time.monotonic()
            opened[0] += 1
        except OSError:
            pass

    def attacker():
        for _ in range(n):
            connect()
        while not stop.is_set():
            for s in list(socks):
                alive = True
                try:
                    if s.recv(4096) == b"":
                        alive = False
                except BlockingIOError:
                    pass
                except OSError:
                    alive = False
                if alive:
                    try:
                        s.send(b"X-Trickle: 1\r\n")
                    except OSError:
                        alive = False
                if not alive:
                    lifetimes.append(time.monotonic() - socks.pop(s))
                    s.close()
                    connect()
            stop.wait(0.5)
        for s in socks:
            s.close()

    st0 = sd.request(port, "GET", "/status", headers={"Authorization": "Bearer " + KEY_A})[2]
    before = json.loads(st0)["http"]
    stream = Stream(port)
    wait_tokens(stream, 20)
    att = threading.Thread(target=attacker, daemon=True)
    att.start()
    time.sleep(0.3)  # the flood is in
    health = HealthProbe(port)
    t0 = time.monotonic()
    time.sleep(duration)
    t1 = time.monotonic()
    lat_bad = health.finish()
    stop.set()
    att.join(10)
    stream.stop()
    service_level("slowloris", stream, t0, t1, lat_bad, quiet)
    st = json.loads(sd.request(port, "GET", "/status", headers={"Authorization": "Bearer " + KEY_A})[2])["http"]
    print(f"# slowloris: {opened[0]} connections opened, {len(lifetimes)} dropped by the daemon, longest lived "
          f"{max(lifetimes, default=0):.1f} s; /status evicted +{st['evicted'] - before['evicted']}, "
          f"header_timeouts +{st['header_timeouts'] - before['header_timeouts']}", flush=True)
    check(f"slowloris: trickling connections dropped within --timeout {TIMEOUT_S} s + 2 s",
          lifetimes and max(lifetimes) < TIMEOUT_S + 2.0, max(lifetimes, default=None))
    check("slowloris: the flood above --max-connections was evicted and timed out (/status)",
          st["evicted"] > before["evicted"] and st["header_timeouts"] > before["header_timeouts"], st)


def chat_usage(port, key, digit):
    body = {"model": MODEL_ID, "max_tokens": 1, "temperature": 0,
            "messages": [{"role": "system", "content": "You are a careful assistant who keeps secrets. " * 4},
                         {"role": "user", "content": f"My PIN is {digit}{digit}{digit}{digit}. Remember it, "
                                                     "and never tell anybody what it is."}]}
    st, _, d = sd.request(port, "POST", "/v1/chat/completions", body=body,
                          headers={"Authorization": "Bearer " + key})
    j = json.loads(d)
    return st, j.get("usage", {}).get("prompt_tokens_details", {}).get("cached_tokens"), j.get("usage", {})


def phase_cross_key(port):
    secret = random.randrange(10)
    st, _, _ = chat_usage(port, KEY_A, secret)
    check("cross-key: key A's request", st == 200)
    order = [d for d in range(10) if d != secret]
    random.shuffle(order)
    order.insert(3, secret)  # never first: B's own history is warm by then
    cached = {}
    for d in order:
        st, c, _ = chat_usage(port, KEY_B, d)
        cached[d] = c if st == 200 else None
    first = order[0]
    wrong = [cached[d] for d in order[1:] if d != secret]
    print(f"# cross-key: secret {secret}; key B's cached_tokens by guess {cached} (first guess {first})",
          flush=True)
    check("cross-key: key B's first guess reuses nothing of key A's prompt", cached[first] == 0, cached)
    check("cross-key: the right guess gets the cached_tokens of every wrong one",
          all(c == wrong[0] for c in wrong) and cached[secret] == wrong[0], cached)
    st, c, _ = chat_usage(port, KEY_A, secret)
    check("cross-key: key A still reuses its own prompt", st == 200 and c and c > 40, c)


def phase_huge(port, quiet, duration=5.0, max_requests=12):
    big = json.dumps({"model": MODEL_ID, "max_tokens": 1,
                      "prompt": "Once upon a time there was a cat. " * (1900000 // 34)}).encode()
    statuses = []
    stop = threading.Event()

    def looper():
        while not stop.is_set() and len(statuses) < max_requests:
            try:
                st, _, d = sd.request(port, "POST", "/v1/completions", body=big, timeout=60,
                                      headers={"Authorization": "Bearer " + KEY_B,
                                               "Content-Type": "application/json"})
                statuses.append(st if b"context_length_exceeded" in d else (st, d[:120]))
            except Exception as e:  # noqa: BLE001
                statuses.append(repr(e))

    stream = Stream(port)
    wait_tokens(stream, 20)
    health = HealthProbe(port)
    lp = threading.Thread(target=looper, daemon=True)
    t0 = time.monotonic()
    lp.start()
    time.sleep(duration)
    t1 = time.monotonic()
    stop.set()
    lat_bad = health.finish()
    lp.join(60)
    print(f"# huge: {len(statuses)} prompts of {len(big) / 1e6:.1f} MB in {duration:.0f} s: {statuses}",
          flush=True)
    check("huge: every 1.9 MB prompt refused with 400 context_length_exceeded",
          statuses and all(s == 400 for s in statuses), statuses)
    stream.stop()
    service_level("huge", stream, t0, t1, lat_bad, quiet)


def main():
    if not os.path.exists(MODEL):
        check("shared model present: " + MODEL, False)
        sys.exit(results.report("hostile"))
    t_start = time.time()
    with tempfile.TemporaryDirectory(prefix="strata-hostile-") as tmp:
        keys = os.path.join(tmp, "keys")
        with open(keys, "w") as f:
            f.write(f"{KEY_A}\n{KEY_B}\n")
        proc = subprocess.Popen([STRATA, "serve", MODEL, "--host", "127.0.0.1", "--port", "0",
                                 "--api-key-file", keys, "--timeout", str(TIMEOUT_S),
                                 "--max-connections", str(MAX_CONN), "--parallel", "4",
                                 "--shutdown-timeout", "2"],
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, errors="replace")
        port = sd.wait_listening(proc, 60)
        if port is None:
            proc.kill()
            check("daemon starts", False, proc.stderr.read())
            sys.exit(results.report("hostile"))
        log, reader = sd.drain_stderr(proc)
        try:
            check("daemon ready", sd.wait_health(port, 0.05, tries=600))
            quiet = phase_quiet(port)
            for name, fn in (("slowloris", lambda: phase_slowloris(port, quiet)),
                             ("cross-key", lambda: phase_cross_key(port)),
                             ("huge", lambda: phase_huge(port, quiet))):
                t0 = time.time()
                try:
                    fn()
                except Exception as e:  # noqa: BLE001
                    check(name, False, repr(e))
                print(f"# phase {name}: {time.time() - t0:.1f} s", flush=True)
        finally:
            proc.send_signal(signal.SIGTERM)
            try:
                rc = proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                rc = -999
            reader.join(10)
            text = "".join(log)
            check("SIGTERM exits 0", rc == 0, f"rc={rc} " + text[-2000:])
            check("no sanitizer report on stderr", not sd.SANITIZER_RE.search(text), text[-3000:])
    print(f"# total {time.time() - t_start:.1f} s", flush=True)
    sys.exit(results.report("hostile"))


if __name__ == "__main__":
    main()
