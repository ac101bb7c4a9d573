#!/usr/bin/env python3
"""tests/deploy/test-notify.py: the real daemon speaks systemd's notify protocol.

usage: test-notify.py STRATA_EXE

Plays systemd: binds a unix datagram socket, starts `strata serve` on
stories260K with NOTIFY_SOCKET pointing at it, and checks the sequence
STATUS=loading... -> READY=1 (and /health 200 once READY arrived) ->
WATCHDOG=1 pings at half of WATCHDOG_USEC -> SIGTERM -> STOPPING=1 -> exit 0.
Also: an abstract '@' socket, WATCHDOG_PID naming another process (no
pings), and a failed start (STATUS=failed, no READY, non-zero exit).
Prints `RESULT notify: N passed, M failed`.
"""
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "peers"))
import strata_daemon as sd  # noqa: E402

STRATA = sys.argv[1]
SHARED = os.environ.get("STRATA_SHARED_DIR", "../shared")
MODEL = os.path.join(SHARED, "models", "stories260K.gguf")

results = sd.Results(verbose=True)
check = results.check


def recv_all(sock, until, timeout):
    """Receives datagrams until one contains `until` (or the timeout)."""
    msgs = []
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        sock.settimeout(max(0.01, end - time.monotonic()))
        try:
            data = sock.recv(4096).decode()
        except socket.timeout:
            break
        msgs.append(data)
        if until and until in data.split("\n"):
            break
    return msgs


def health(port):
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code
    except OSError:
        return -1


def start(notify_addr, extra_env, args=None):
    env = dict(os.environ)
    for k in ("NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID"):
        env.pop(k, None)
    env["NOTIFY_SOCKET"] = notify_addr
    env.update(extra_env)
    cmd = [STRATA, "serve", MODEL if args is None else args, "--port", "0",
           "--host", "127.0.0.1", "--threads", "1", "--ctx-size", "128"]
    return subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)


def run_normal(label, sock, addr, extra_env, expect_watchdog):
    p = start(addr, extra_env)
    try:
        run_checks(label, sock, p, expect_watchdog)
    finally:
        if p.poll() is None:  # never leave a daemon behind
            p.kill()
            p.communicate()


def run_checks(label, sock, p, expect_watchdog):
    msgs = recv_all(sock, "READY=1", 120)
    lines = [l for m in msgs for l in m.split("\n")]
    check(f"{label}: READY=1 received", "READY=1" in lines, repr(msgs))
    ready_at = next((i for i, l in enumerate(lines) if l == "READY=1"), len(lines))
    check(f"{label}: STATUS=loading... before READY=1",
          any(l.startswith("STATUS=loading model") for l in lines[:ready_at]), repr(lines))
    port = None
    for l in lines:
        m = re.match(r"STATUS=serving on [0-9.]+:(\d+)$", l)
        if m:
            port = int(m.group(1))
    check(f"{label}: STATUS names the port", port is not None, repr(lines))
    if port:
        check(f"{label}: /health 200 after READY=1", health(port) == 200)
    later = recv_all(sock, None, 0.6)  # 200 ms watchdog: expect pings at ~100 ms
    pings = sum(1 for m in later for l in m.split("\n") if l == "WATCHDOG=1")
    pings += sum(1 for l in lines if l == "WATCHDOG=1")
    if expect_watchdog:
        check(f"{label}: WATCHDOG=1 pings ({pings})", pings >= 3)
    else:
        check(f"{label}: no WATCHDOG=1 for another pid ({pings})", pings == 0)
    p.send_signal(signal.SIGTERM)
    msgs = recv_all(sock, "STOPPING=1", 60)
    lines = [l for m in msgs for l in m.split("\n")]
    check(f"{label}: STOPPING=1 after SIGTERM", "STOPPING=1" in lines, repr(msgs))
    try:
        out, err = p.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        p.kill()
        out, err = p.communicate()
    check(f"{label}: exit code 0", p.returncode == 0, f"rc={p.returncode} {err[-2000:]}")
    check(f"{label}: no sanitizer report", "ERROR: " not in err and "runtime error" not in err,
          err[-2000:])


def print_config(root, extra_env, args=()):
    env = {k: v for k, v in os.environ.items() if not k.startswith("STRATA_") or
           k == "STRATA_SHARED_DIR"}
    env.update(extra_env)
    r = subprocess.run([STRATA, "serve", "--print-config", "--sys-root", root, *args], env=env,
                       capture_output=True, text=True, timeout=60)
    m = re.search(r"^threads\s*=\s*(\d+)\s*\((\w+)(?:: [^)]*)?\)", r.stdout, re.M)
    return (int(m.group(1)), m.group(2)) if m else (r.returncode, r.stdout + r.stderr)


def threads_source_checks(tmp):
    """Effective threads and their source, through --print-config on a fake cgroup v2 tree."""
    root = os.path.join(tmp, "root")
    os.makedirs(os.path.join(root, "proc/self"))
    os.makedirs(os.path.join(root, "sys/fs/cgroup"))
    with open(os.path.join(root, "proc/self/cgroup"), "w") as f:
        f.write("0::/\n")
    with open(os.path.join(root, "proc/self/mountinfo"), "w") as f:
        f.write("31 22 0:28 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n")
    with open(os.path.join(root, "sys/fs/cgroup/cpu.max"), "w") as f:
        f.write("100000 100000\n")  # one CPU of quota
    check("threads from cgroup quota", print_config(root, {}) == (1, "cgroup"),
          repr(print_config(root, {})))
    check("threads from env", print_config(root, {"STRATA_THREADS": "3"}) == (3, "env"))
    check("threads from cli", print_config(root, {"STRATA_THREADS": "3"}, ["--threads", "5"])
          == (5, "cli"))
    conf = os.path.join(tmp, "strata.conf")
    with open(conf, "w") as f:
        f.write("threads = 2\n")
    check("threads from file", print_config(root, {}, ["--config", conf]) == (2, "file"))
    with open(os.path.join(root, "sys/fs/cgroup/cpu.max"), "w") as f:
        f.write("max 100000\n")
    n_aff = len(os.sched_getaffinity(0))
    check("threads from affinity", print_config(root, {}) ==
          (min(32, max(1, n_aff - 1)), "affinity"), repr(print_config(root, {})))
    # the rule that produced the number, beside its source
    env = {k: v for k, v in os.environ.items() if not k.startswith("STRATA_")}
    out = subprocess.run([STRATA, "serve", "--print-config", "--sys-root", root], env=env,
                         capture_output=True, text=True, timeout=60).stdout
    want = f"(affinity: {n_aff} CPUs in the affinity mask, {'minus 1' if n_aff > 1 else 'at least 1'})"
    check("threads rule: affinity", any(l.startswith("threads ") and l.endswith(want)
                                        for l in out.splitlines()), out[:600])
    with open(os.path.join(root, "sys/fs/cgroup/cpu.max"), "w") as f:
        f.write("100000 100000\n")  # 1 CPU of quota
    out = subprocess.run([STRATA, "serve", "--print-config", "--sys-root", root], env=env,
                         capture_output=True, text=True, timeout=60).stdout
    if n_aff >= 2:
        check("threads rule: cgroup", "(cgroup: cgroup CPU quota 1.00 -> 1 CPUs, at least 1)" in out and
              f"# CPUs 1 (cgroup): affinity mask {n_aff}, cgroup quota 1.00" in out, out[-600:])
    # no memory.max and no meminfo in this tree: the budget is unknown
    check("limits printed", "# memory budget unknown: cgroup limit none, MemAvailable unknown" in out,
          out[-300:])


def main():
    with tempfile.TemporaryDirectory(prefix="strata-threads-") as tmp:
        threads_source_checks(tmp)
    if not os.path.exists(MODEL):
        print(f"missing {MODEL} (set STRATA_SHARED_DIR)")
        print("RESULT notify: 0 passed, 1 failed")
        return 1
    with tempfile.TemporaryDirectory(prefix="strata-notify-") as tmp:
        path = os.path.join(tmp, "notify.sock")
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        sock.bind(path)
        run_normal("path socket", sock, path, {"WATCHDOG_USEC": "200000"}, True)

        # a failed start: no READY, a STATUS=failed line, non-zero exit
        p = start(path, {}, os.path.join(tmp, "missing.gguf"))
        try:
            p.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            p.kill()
            p.communicate()
        lines = [l for m in recv_all(sock, None, 0.5) for l in m.split("\n")]
        check("failed start: no READY=1", "READY=1" not in lines, repr(lines))
        check("failed start: STATUS=failed", any(l.startswith("STATUS=failed") for l in lines),
              repr(lines))
        check("failed start: non-zero exit", p.returncode not in (0, None), str(p.returncode))
        sock.close()

    name = f"strata-notify-{os.getpid()}"
    asock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    asock.bind("\0" + name)
    run_normal("abstract socket", asock, "@" + name,
               {"WATCHDOG_USEC": "200000", "WATCHDOG_PID": "1"}, False)
    asock.close()
    return results.report("notify")


if __name__ == "__main__":
    sys.exit(main())
