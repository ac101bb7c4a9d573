#!/usr/bin/env python3
"""tests/peers/profile-real.py: the routing profile's lifecycle through the
REAL daemon (`strata serve --expert-profile PATH`) on a synthesized tiny
qwen3moe (2 layers x 8 experts, top-2, `strata gguf synth`).

Usage: profile-real.py PATH/TO/strata

1. No file yet: /status expert_profile says "fresh", counts while serving
   (picks = routed tokens x 2 layers x top-2, and every forwarded token is
   routed: prompt tokens + generated - one per request, the warm-up not
   counted); SIGTERM saves PATH (SPRF v1, 2 x 8, counts summing to /status).
2. Restart: the file is loaded ("loaded N picks"), new requests add to it,
   SIGTERM saves the merged total.
3. --expert-profile-interval 1: a save happens while serving (no signal).
4. A corrupt file, a truncated one and one of another shape (3 x 8) are
   refused with a clear log line, kept as PATH.refused, and the daemon
   serves with a fresh profile that it saves to PATH.
5. A dense model: the option is reported off, no file is written.
Prints `RESULT profile-real: N passed, M failed`.
"""
import json
import os
import signal
import struct
import subprocess
import sys
import tempfile
import time

import strata_daemon as sd

STRATA = sys.argv[1] if len(sys.argv) > 1 else "build/cli/strata"
DENSE = os.path.join(sd.shared_dir(), "models", "stories260K.gguf")
N_LAYER, N_EXPERT, TOP_K = 2, 8, 2
results = sd.Results(limit=800)
check = results.check


def synth(path):
    subprocess.run([STRATA, "gguf", "synth", "--arch", "qwen3moe", "--n-embd", "64", "--n-layer", str(N_LAYER),
                    "--n-head", "4", "--n-head-kv", "2", "--head-dim", "16", "--n-ff", "128",
                    "--n-expert", str(N_EXPERT), "--n-expert-used", str(TOP_K), "--n-ff-exp", "64",
                    "--n-vocab", "512", "--ctx", "256", "--route-skew", "zipf:1.0", "--type", "f32",
                    "--seed", "3", "--out", path], check=True, stdout=subprocess.DEVNULL)


def start(model, *extra):
    proc = subprocess.Popen([STRATA, "serve", model, "--port", "0", "--threads", "1", *extra],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, errors="replace")
    port = sd.wait_listening(proc, 60)
    if port is None:
        proc.kill()
        raise SystemExit("strata serve did not start")
    log, reader = sd.drain_stderr(proc)
    check("ready", sd.wait_health(port, 0.05, deadline=time.time() + 60))
    return proc, port, log, reader


def stop(proc, reader, log, name):
    proc.send_signal(signal.SIGTERM)
    try:
        rc = proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        rc = -9
    reader.join(timeout=5)
    text = "".join(log)
    check(f"{name}: SIGTERM exit 0", rc == 0, rc)
    check(f"{name}: no sanitizer report", not sd.SANITIZER_RE.search(text), text[-2000:])
    return text


def status(port):
    st, _, d = sd.request(port, "GET", "/status")
    return json.loads(d) if st == 200 else {}


def profile_of(port):
    return status(port).get("expert_profile")


def complete(port, prompt, n):
    model_id = status(port).get("model", {}).get("id")
    st, _, d = sd.request(port, "POST", "/v1/completions",
                          {"model": model_id, "prompt": prompt, "max_tokens": n, "temperature": 0})
    check(f"completion '{prompt}' 200", st == 200, d[:300])
    return json.loads(d)["usage"] if st == 200 else {}


def settled(port, want_generated):
    """The /status after the scheduler published its last step."""
    deadline = time.time() + 10
    st = {}
    while time.time() < deadline:
        st = status(port)
        if st.get("tokens", {}).get("generated", 0) >= want_generated and st["sessions"]["active"] == 0:
            break
        time.sleep(0.05)
    return st


def read_profile(path):
    """(n_layer, n_expert, counts) of a saved profile, or None."""
    try:
        data = open(path, "rb").read()
    except OSError:
        return None
    if len(data) < 16:
        return None
    magic, version, nl, ne = struct.unpack("<4sIII", data[:16])
    if magic != b"SPRF" or version != 1 or len(data) != 16 + 8 * nl * ne:
        return None
    return nl, ne, list(struct.unpack(f"<{nl * ne}Q", data[16:]))


def log_line(text):
    return next((l for l in text.splitlines() if "expert profile" in l), "")


def serve_some(port, prompts):
    """Runs the prompts; returns (tokens forwarded through the model, last /status)."""
    n_gen = 0
    before = status(port).get("tokens", {})
    for p in prompts:
        n_gen += complete(port, p, 6).get("completion_tokens", 0)
    st = settled(port, before.get("generated", 0) + n_gen)
    prompt = st["tokens"]["prompt"] - before.get("prompt", 0)
    gen = st["tokens"]["generated"] - before.get("generated", 0)
    return prompt + gen - len(prompts), st  # a request's last token is never fed back


def main():
    tmp = tempfile.mkdtemp(prefix="strata-profile-")
    model = os.path.join(tmp, "moe.gguf")
    synth(model)
    path = os.path.join(tmp, "routing.prof")

    # 1. fresh: count, save at SIGTERM
    proc, port, log, reader = start(model, "--expert-profile", path)
    p = profile_of(port) or {}
    check("fresh: /status expert_profile", p.get("path") == path and p.get("active") is True and
          p.get("state", "").startswith("fresh") and p.get("picks") == 0 and p.get("saves") == 0 and
          p.get("last_save") is None, p)
    routed, st = serve_some(port, ["Once upon a time", "The cat"])
    p = st.get("expert_profile") or {}
    check("fresh: picks = routed tokens x layers x top-k",
          routed > 0 and p.get("picks") == routed * N_LAYER * TOP_K and p.get("tokens") == routed, (routed, p))
    picks1 = p.get("picks", 0)
    check("fresh: nothing saved before the interval", not os.path.exists(path))
    text = stop(proc, reader, log, "fresh")
    check("fresh: log line says fresh", "fresh" in log_line(text), log_line(text))
    prof = read_profile(path)
    check("fresh: saved at SIGTERM (SPRF v1, 2 x 8)", prof is not None and prof[:2] == (N_LAYER, N_EXPERT), prof)
    if prof:
        check("fresh: file counts = /status picks", sum(prof[2]) == picks1, (sum(prof[2]), picks1))
        per_layer = [sum(prof[2][l * N_EXPERT:(l + 1) * N_EXPERT]) for l in range(N_LAYER)]
        check("fresh: every layer routed every token top-k times",
              per_layer == [picks1 // N_LAYER] * N_LAYER, per_layer)
    check("fresh: no temporary file left", not os.path.exists(path + ".tmp"))

    # 2. reload: merged, totals keep growing
    proc, port, log, reader = start(model, "--expert-profile", path)
    p = profile_of(port) or {}
    check("reload: loaded", p.get("state", "").startswith(f"loaded {picks1} picks") and
          p.get("loaded_picks") == picks1 and p.get("picks") == picks1, p)
    routed, st = serve_some(port, ["A dog"])
    picks2 = (st.get("expert_profile") or {}).get("picks", 0)
    check("reload: counts add to the loaded ones", picks2 == picks1 + routed * N_LAYER * TOP_K, (picks1, picks2))
    text = stop(proc, reader, log, "reload")
    check("reload: log line", f"loaded {picks1} picks" in log_line(text), log_line(text))
    prof = read_profile(path)
    check("reload: saved the merged total", prof is not None and sum(prof[2]) == picks2, prof and sum(prof[2]))

    # 3. periodic save while serving
    proc, port, log, reader = start(model, "--expert-profile", path, "--expert-profile-interval", "1")
    routed, st = serve_some(port, ["Hello"])
    deadline = time.time() + 15
    p = {}
    while time.time() < deadline:
        p = profile_of(port) or {}
        if p.get("saves", 0) >= 1:
            break
        time.sleep(0.1)
    picks3 = p.get("picks", 0)
    check("periodic: saved while idle after serving", p.get("saves", 0) >= 1 and p.get("last_save") and
          p.get("last_save_age_s", 99) < 15 and p.get("save_error") is None, p)
    prof = read_profile(path)
    check("periodic: the file has the counts, daemon still running",
          proc.poll() is None and prof is not None and sum(prof[2]) == picks3, prof and sum(prof[2]))
    stop(proc, reader, log, "periodic")

    # 4. refused files: corrupt, truncated, another shape
    good = open(path, "rb").read()
    bad_files = {
        "corrupt": (b"not a profile at all, just text\n", "bad header"),
        "truncated": (good[:16 + 8 * 5], "truncated"),
        "shape": (struct.pack("<4sIII", b"SPRF", 1, 3, N_EXPERT) + b"\x01" * (8 * 3 * N_EXPERT),
                  f"it counts 3 layers x {N_EXPERT} experts, the model has {N_LAYER} x {N_EXPERT}"),
    }
    for name, (data, why) in bad_files.items():
        with open(path, "wb") as f:
            f.write(data)
        if os.path.exists(path + ".refused"):
            os.unlink(path + ".refused")
        proc, port, log, reader = start(model, "--expert-profile", path)
        p = profile_of(port) or {}
        check(f"{name}: refused, fresh profile", p.get("state", "").startswith("refused") and why in p["state"] and
              p.get("active") is True and p.get("picks") == 0 and p.get("loaded_picks") == 0, p)
        check(f"{name}: kept aside", open(path + ".refused", "rb").read() == data and not os.path.exists(path))
        routed, st = serve_some(port, ["Once"])
        picks = (st.get("expert_profile") or {}).get("picks", 0)
        text = stop(proc, reader, log, name)
        line = log_line(text)
        check(f"{name}: log line names the file and the reason",
              path in line and "refused" in line and why in line and "fresh" in line, line)
        prof = read_profile(path)
        check(f"{name}: the fresh profile saved", prof is not None and prof[:2] == (N_LAYER, N_EXPERT) and
              sum(prof[2]) == picks == routed * N_LAYER * TOP_K, (prof and sum(prof[2]), picks, routed))

    # 5. a dense model: off, nothing written
    dense_path = os.path.join(tmp, "dense.prof")
    proc, port, log, reader = start(DENSE, "--expert-profile", dense_path)
    p = profile_of(port) or {}
    check("dense: off", p.get("active") is False and p.get("state", "").startswith("off"), p)
    complete(port, "Once", 4)
    stop(proc, reader, log, "dense")
    check("dense: no file", not os.path.exists(dense_path))

    # --print-config shows the options and their sources
    r = subprocess.run([STRATA, "serve", model, "--expert-profile", path, "--print-config"], capture_output=True,
                       text=True)
    check("print-config: expert-profile (cli)",
          any(l.startswith("expert-profile ") and path in l and "(cli)" in l for l in r.stdout.splitlines()),
          r.stdout)
    check("print-config: expert-profile-interval (default 60)",
          any(l.startswith("expert-profile-interval") and " 60 " in l and "(default)" in l
              for l in r.stdout.splitlines()), r.stdout)
    # without the option /status says null with a note
    proc, port, log, reader = start(model)
    st = status(port)
    check("no option: expert_profile null with a note", st.get("expert_profile", 1) is None and
          isinstance((st.get("notes") or {}).get("expert_profile"), str), st.get("notes"))
    stop(proc, reader, log, "no option")
    subprocess.run(["rm", "-rf", tmp], check=False)
    return results.report("profile-real")


if __name__ == "__main__":
    sys.exit(main())
