#!/usr/bin/env python3
"""tests/peers/status-real.py: GET /status and GET /metrics of the REAL daemon
(`strata serve` on the shared stories260K.gguf) after a few requests.

Usage: status-real.py PATH/TO/strata

/status: every field present with its type and a plausible value (tokens
served grew by at least the usage the requests reported, sessions back to 0,
pool dispatches > 0 with --threads 2, threads source "cli", quant mix summing
to the GGUF's tensor count, NUMA node lists within the node count); a field
reported as null must have a note saying why. A second daemon started under
`taskset -c 0` (when more than one CPU is allowed) must say it is bound.
/metrics: parsed as Prometheus text (every line a comment or
`name{labels} value`, TYPE before samples, counters named *_total,
histogram buckets ascending in le and monotone, +Inf bucket == _count).
Prints `RESULT status-real: N passed, M failed`.
"""
import json
import math
import os
import re
import shutil
import signal
import struct
import subprocess
import sys
import time

import strata_daemon as sd

STRATA = sys.argv[1] if len(sys.argv) > 1 else "build/cli/strata"
SHARED = sd.shared_dir()
MODEL = os.path.join(SHARED, "models", "stories260K.gguf")
MODEL_ID = "stories260K"
SANITIZER_RE = sd.SANITIZER_RE
ISAS = {"ref", "avx2", "avx512", "avx512-vnni"}
results = sd.Results(limit=600)
check = results.check


def start(*extra, prefix=()):
    proc = subprocess.Popen([*prefix, STRATA, "serve", MODEL, "--port", "0", *extra], stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True, errors="replace")
    deadline = time.time() + 60
    port = sd.wait_listening(proc, 60)
    if port is None:
        proc.kill()
        raise SystemExit("strata serve did not start")
    sd.wait_health(port, 0.1, deadline=deadline)  # ready: /health 200
    return proc, port


def stop(proc, name):
    proc.send_signal(signal.SIGTERM)
    try:
        err = proc.stderr.read()
        rc = proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        err, rc = "", -9
    check(f"{name}: SIGTERM exit 0", rc == 0, rc)
    check(f"{name}: no sanitizer report", not SANITIZER_RE.search(err), err[-2000:])
    return err


def print_config(*args):
    env = {k: v for k, v in os.environ.items() if not k.startswith("STRATA_")}
    r = subprocess.run([STRATA, "serve", MODEL, "--print-config", *args], env=env,
                       capture_output=True, text=True, timeout=60)
    check(f"--print-config {' '.join(args)}: exit 0", r.returncode == 0, r.stderr)
    return {m.group(1): (m.group(2), m.group(3)) for m in
            re.finditer(r"^([a-z-]+)\s+= (\S*)\s+\((.*)\)$", r.stdout, re.M)}, r.stdout


def test_startup():
    """What a start says (--log-level debug): the load's phases, then the
    model, the sizing and the template; --print-config resolves the same
    automatic values from the header alone, and /status agrees with both."""
    cfg, out = print_config()
    check("print-config: ctx-size from the model", cfg.get("ctx-size") == ("2048", "auto: the model's trained context"), cfg.get("ctx-size"))
    check("print-config: batch 512 by default", cfg.get("batch") == ("512", "auto: default 512 tokens a step"), cfg.get("batch"))
    check("print-config: kv-mem = parallel full contexts", cfg.get("kv-mem") ==
          ("5242880", "auto: parallel 4 x context 2048 positions: 512 blocks of 10240 bytes"), cfg.get("kv-mem"))
    check("print-config: the model's header line", re.search(
        r"^# model .*stories260K.gguf: llama, 293K parameters, 0\.001 GB of tensors, trained context 2048$", out, re.M), out[-800:])
    cfg, _ = print_config("--ctx-size", "100000", "--kv-mem", "100000", "--batch", "4096", "--parallel", "3")
    check("print-config: context cut to the pool", cfg.get("ctx-size") == ("144", "cli: cut to the KV pool's 144 positions"), cfg.get("ctx-size"))
    check("print-config: kv-mem in whole blocks", cfg.get("kv-mem") == ("92160", "cli: 9 blocks of 10240 bytes within 100000 asked"), cfg.get("kv-mem"))
    check("print-config: batch capped", cfg.get("batch") == ("512", "cli: 4096 asked, capped at 512 entries a forward pass"), cfg.get("batch"))
    _, out = print_config("--model", "/nonexistent/x.gguf")
    check("print-config: an unreadable model is a note, not a failure",
          re.search(r"^# model /nonexistent/x.gguf: .*shown as set\)$", out, re.M), out[-400:])
    # the daemon with the same options sizes itself the same way
    proc, port = start("--threads", "1", "--log-level", "debug", "--ctx-size", "100000", "--kv-mem", "100000",
                       "--parallel", "3")
    st = status(port)
    check("/status n_ctx = print-config's ctx-size", st.get("n_ctx") == 144, st.get("n_ctx"))
    check("/status KV blocks = print-config's", (st.get("kv_blocks") or {}).get("total") == 9, st.get("kv_blocks"))
    err = stop(proc, "sized daemon")
    check("start-up: the sizing line", "context 144 tokens (cut to the KV pool's 144 positions), 3 sessions, 512 tokens a step; "
          "KV pool 0.1 MiB (9 blocks of 10240 bytes within 100000 asked), 16 positions a block" in err, err[-1500:])
    proc, port = start("--threads", "1", "--log-level", "debug")
    err = stop(proc, "debug daemon")
    for phase in ("mapping weights", "copying weights"):
        check(f"start-up: load phase {phase} begins and ends",
              re.search(rf"loading: {phase}, [\d.]+ MB\n", err) and re.search(rf"loading: {phase} done, [\d.]+ MB in [\d.]+ s\n", err),
              err[:1500])
    check("start-up: the model line", re.search(
        r"model .*stories260K.gguf loaded in [\d.]+ s: llama, 293K parameters \(f32 100%\), 5 layers, dense\n", err), err[:2000])
    check("start-up: the template line", "chat template: ChatML fallback (no tokenizer.chat_template)" in err, err[:2000])
    check("start-up: kernels and weights", re.search(r"kernels \S+ \(CPU: \S+\), weights \w+", err), err[:2000])
    check("start-up: phases before the model line", err.find("copying weights done") < err.find("loaded in"), err[:2000])


def request(port, method, path, body=None):
    st, h, data = sd.request(port, method, path, body)
    return st, h.get("content-type"), data


def status(port):
    st, _, d = request(port, "GET", "/status")
    return json.loads(d) if st == 200 else {}


def gguf_tensor_count(path):
    with open(path, "rb") as f:
        head = f.read(24)
    magic, _version, n_tensors = struct.unpack("<4sIQ", head[:16])
    return n_tensors if magic == b"GGUF" else -1


def is_int(v):
    return isinstance(v, int) and not isinstance(v, bool)


def is_num(v):
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def run_requests(port):
    """Two completions, one streamed chat and a 404; returns summed usage."""
    prompt = completion = 0
    for i in range(2):
        st, _, d = request(port, "POST", "/v1/completions",
                           {"model": MODEL_ID, "prompt": f"Once upon a time {i}", "max_tokens": 12})
        check(f"completion {i} 200", st == 200, d[:300])
        if st == 200:
            u = json.loads(d)["usage"]
            prompt += u["prompt_tokens"]
            completion += u["completion_tokens"]
    st, _, d = request(port, "POST", "/v1/chat/completions",
                       {"model": MODEL_ID, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 8,
                        "stream": True, "stream_options": {"include_usage": True}})
    check("stream chat 200", st == 200, d[:300])
    for line in d.decode("utf-8", "replace").splitlines():
        if line.startswith("data: {") and '"usage"' in line:
            u = json.loads(line[6:]).get("usage")
            if u:
                prompt += u["prompt_tokens"]
                completion += u["completion_tokens"]
    st, _, _ = request(port, "GET", "/no-such-route")
    check("unknown route 404", st == 404, st)
    return prompt, completion


def check_notes(st):
    notes = st.get("notes")
    check("notes is an object", isinstance(notes, dict), notes)
    notes = notes if isinstance(notes, dict) else {}
    for k, v in st.items():
        if v is None:
            check(f"null {k} has a note", isinstance(notes.get(k), str) and notes[k], notes)
    for k in ("expert_store", "arena"):
        check(f"{k} absent: null with a note", k in st and st[k] is None and isinstance(notes.get(k), str))
    return notes


def check_status(st, before, usage, threads):
    notes = check_notes(st)
    check("status ok", st.get("status") == "ok" and st.get("ready") is True and st.get("draining") is False, st)
    m = st.get("model") or {}
    check("model.id", m.get("id") == MODEL_ID, m)
    path = m.get("path")
    check("model.path: the GGUF path, or null with a note",
          (isinstance(path, str) and os.path.samefile(path, MODEL)) or
          (path is None and isinstance(notes.get("model.path"), str)), (path, notes))
    check("architecture", st.get("architecture") == "llama", st.get("architecture"))
    qm = st.get("quant_mix")
    if qm is None:
        check("quant_mix null has a note", isinstance(notes.get("quant_mix"), str), notes)
    else:
        ok = isinstance(qm, dict) and qm and all(
            isinstance(v, dict) and is_int(v.get("tensors")) and v["tensors"] > 0 and is_int(v.get("bytes")) and
            v["bytes"] >= 0 for v in qm.values())
        check("quant_mix: type -> {tensors, bytes}", ok, qm)
        if ok:
            check("quant_mix tensors sum to the GGUF tensor count",
                  sum(v["tensors"] for v in qm.values()) == gguf_tensor_count(MODEL), qm)
            check("quant_mix bytes within the file", 0 < sum(v["bytes"] for v in qm.values()) <=
                  os.path.getsize(MODEL), qm)
    check("n_ctx", is_int(st.get("n_ctx")) and st["n_ctx"] > 0, st.get("n_ctx"))
    th = st.get("threads") or {}
    check("threads.effective", th.get("effective") == threads, th)
    check("threads.source cli", th.get("source") == "cli", th)
    pd = st.get("pool_dispatches")
    check("pool_dispatches grew and > 0", is_int(pd) and pd > 0 and pd > before["pool_dispatches"],
          (before.get("pool_dispatches"), pd))
    kv = st.get("kv") or {}
    check("kv used/total", is_int(kv.get("used")) and is_int(kv.get("total")) and 0 <= kv["used"] <= kv["total"] and
          kv["total"] > 0, kv)
    for k in ("bytes_used", "bytes_total"):
        check(f"kv.{k} int or noted null", (is_int(kv.get(k)) and kv[k] >= 0) or
              (k in kv and kv[k] is None and isinstance(notes.get("kv.bytes"), str)), (kv, notes))
    if is_int(kv.get("bytes_used")) and is_int(kv.get("bytes_total")):
        check("kv bytes_used <= bytes_total, total > 0", kv["bytes_used"] <= kv["bytes_total"] and
              kv["bytes_total"] > 0, kv)
    ses = st.get("sessions") or {}
    check("sessions back to 0", ses.get("active") == 0 and ses.get("queued") == 0, ses)
    tok, tok0 = st.get("tokens") or {}, before.get("tokens") or {}
    # the scheduler counts prompt tokens it prefilled: those served from the
    # prefix cache (prefix_cache.cached_tokens) are not prefilled again
    cached = (st.get("prefix_cache") or {}).get("cached_tokens", 0) - \
        (before.get("prefix_cache") or {}).get("cached_tokens", 0)
    check("tokens.prompt + cached grew by the usage", is_int(tok.get("prompt")) and
          tok["prompt"] - tok0.get("prompt", 0) + cached >= usage[0] > 0, (tok0, tok, cached, usage))
    check("tokens.generated grew by the usage", is_int(tok.get("generated")) and
          tok["generated"] - tok0.get("generated", 0) >= usage[1] > 0, (tok0, tok, usage))
    check("recent_tok_s > 0 just after a generation", is_num(st.get("recent_tok_s")) and
          st["recent_tok_s"] > 0, st.get("recent_tok_s"))
    pc = st.get("prefix_cache") or {}
    check("prefix_cache counters", is_int(pc.get("hits")) and is_int(pc.get("misses")) and
          pc["hits"] + pc["misses"] >= 3 and is_num(pc.get("hit_rate")) and 0 <= pc["hit_rate"] <= 1, pc)
    k = st.get("kernels") or {}
    check("kernels.isa", k.get("isa") in ISAS and k.get("detected") in ISAS, k)
    check_numa(st, notes)
    http = st.get("http") or {}
    check("http.requests counted", is_int(http.get("requests")) and http["requests"] >= 5, http)


def check_numa(st, notes):
    n = st.get("numa")
    if n is None:
        check("numa null has a note", isinstance(notes.get("numa"), str), notes)
        return None
    nodes = n.get("nodes")
    check("numa.nodes >= 1", is_int(nodes) and nodes >= 1, n)
    sysdir = "/sys/devices/system/node"
    if os.path.isdir(sysdir) and is_int(nodes):
        n_sys = len([d for d in os.listdir(sysdir) if re.fullmatch(r"node\d+", d)])
        check("numa.nodes <= sysfs nodes", n_sys == 0 or nodes <= n_sys, (nodes, n_sys))
    for key in ("cpubind_nodes", "threads_on_nodes"):
        v = n.get(key)
        check(f"numa.{key} node list", isinstance(v, list) and v and
              all(is_int(x) and 0 <= x < 1024 for x in v), n)
    mb = n.get("membind")
    check("numa.membind policy + nodes", mb is None or (isinstance(mb.get("policy"), str) and
                                                        isinstance(mb.get("nodes"), list)), mb)
    check("numa.bound bool, binding consistent", isinstance(n.get("bound"), bool) and
          n.get("binding") in ("unbound", "cpus", "memory", "cpus+memory") and
          (n["binding"] == "unbound") == (not n["bound"]), n)
    return n


SAMPLE_RE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{([a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\]|\\.)*"'
                       r'(?:,[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\]|\\.)*")*)?\})? (\S+)$')


def parse_metrics(text):
    """Returns (types, samples {name: [(labels dict, value)]}, errors)."""
    types, samples, errors = {}, {}, []
    for line in text.split("\n")[:-1] if text.endswith("\n") else ["<no final newline>"]:
        if line.startswith("#"):
            parts = line.split(" ", 3)
            if len(parts) >= 3 and parts[1] == "TYPE":
                if parts[2] in types:
                    errors.append(f"TYPE twice: {line}")
                types[parts[2]] = parts[3] if len(parts) > 3 else ""
            elif not (len(parts) >= 3 and parts[1] == "HELP"):
                errors.append(f"bad comment: {line}")
            continue
        m = SAMPLE_RE.match(line)
        if not m:
            errors.append(f"bad line: {line!r}")
            continue
        name, labels, value = m.group(1), m.group(3), m.group(4)
        try:
            v = float(value)
        except ValueError:
            errors.append(f"bad value: {line}")
            continue
        base = re.sub(r"_(bucket|sum|count)$", "", name)
        if name not in types and base not in types:
            errors.append(f"sample before its TYPE: {line}")
        lab = dict(re.findall(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"', labels or ""))
        samples.setdefault(name, []).append((lab, v))
    return types, samples, errors


def value(samples, name, **labels):
    for lab, v in samples.get(name, []):
        if all(lab.get(k) == x for k, x in labels.items()):
            return v
    return None


def check_metrics(port, st):
    code, ctype, d = request(port, "GET", "/metrics")
    check("metrics 200 text/plain", code == 200 and ctype and ctype.startswith("text/plain"), (code, ctype))
    types, samples, errors = parse_metrics(d.decode("utf-8", "replace"))
    check("metrics parse", not errors, errors[:5])
    for name, t in types.items():
        check(f"{name}: type known", t in ("counter", "gauge", "histogram"), t)
        if t == "counter":
            check(f"{name}: counter named *_total", name.endswith("_total"))
        if t == "histogram":
            check(f"{name}: histogram named *_seconds", name.endswith("_seconds"))
            b = samples.get(name + "_bucket", [])
            les = [math.inf if lab.get("le") == "+Inf" else float(lab.get("le", "nan")) for lab, _ in b]
            vals = [v for _, v in b]
            check(f"{name}: le ascending, ends +Inf", les and les == sorted(les) and les[-1] == math.inf and
                  len(set(les)) == len(les), les)
            check(f"{name}: buckets monotone", all(a <= c for a, c in zip(vals, vals[1:])), vals)
            check(f"{name}: +Inf == _count, _sum present", vals and value(samples, name + "_count") == vals[-1] and
                  value(samples, name + "_sum") is not None and value(samples, name + "_sum") >= 0)
    req = lambda route, status: value(samples, "strata_http_requests_total", route=route, status=status)
    check("requests: 2 completions 200", (req("/v1/completions", "200") or 0) >= 2, samples.get(
        "strata_http_requests_total"))
    check("requests: chat 200", (req("/v1/chat/completions", "200") or 0) >= 1)
    check("requests: 404 counted", (req("other", "404") or 0) >= 1)
    check("tokens in/out", (value(samples, "strata_tokens_prompt_total") or 0) > 0 and
          (value(samples, "strata_tokens_completion_total") or 0) > 0)
    check("queue depth 0 (gauge)", types.get("strata_queue_depth") == "gauge" and
          value(samples, "strata_queue_depth") == 0)
    check("active sessions 0 (gauge)", types.get("strata_sessions_active") == "gauge" and
          value(samples, "strata_sessions_active") == 0)
    check("TTFT observed 3 times", (value(samples, "strata_time_to_first_token_seconds_count") or 0) >= 3)
    check("inter-token observed", (value(samples, "strata_inter_token_seconds_count") or 0) > 0)
    hits, misses = value(samples, "strata_prefix_cache_hits_total"), value(samples, "strata_prefix_cache_misses_total")
    check("prefix cache counters match /status", hits is not None and misses is not None and
          hits >= st["prefix_cache"]["hits"] and misses >= st["prefix_cache"]["misses"], (hits, misses))
    pd = value(samples, "strata_pool_dispatches_total")
    check("pool dispatches >= /status's", pd is not None and pd >= st["pool_dispatches"] > 0, (pd,))
    check("ready 1", value(samples, "strata_ready") == 1)


def main():
    threads = 2
    proc, port = start("--threads", str(threads))
    try:
        before = status(port)
        check("status before: pool_dispatches int", is_int(before.get("pool_dispatches")), before)
        usage = run_requests(port)
        st = {}
        deadline = time.time() + 10
        while time.time() < deadline:  # the scheduler publishes after its step
            st = status(port)
            if (st.get("sessions") or {}).get("active") == 0 and st.get("tokens", {}).get("generated", 0) >= \
                    before.get("tokens", {}).get("generated", 0) + usage[1]:
                break
            time.sleep(0.05)
        check_status(st, before, usage, threads)
        if st:
            check_metrics(port, st)
        # the rate is over the last 5 s: idle past that, it reads 0 (it
        # used to keep the last step's rate while nothing ran)
        time.sleep(5.3)
        idle = status(port).get("recent_tok_s")
        check("recent_tok_s 0 after 5 s idle", idle == 0, idle)
    finally:
        stop(proc, "daemon")

    # A daemon pinned to one CPU must not call itself unbound.
    allowed = len(os.sched_getaffinity(0))
    if shutil.which("taskset") and allowed > 1:
        cpu = min(os.sched_getaffinity(0))
        proc, port = start("--threads", "1", prefix=("taskset", "-c", str(cpu)))
        try:
            n = check_numa(status(port), {})
            check("taskset -c: numa says bound to cpus", n is not None and n.get("bound") is True and
                  "cpus" in n.get("binding", ""), n)
        finally:
            stop(proc, "pinned daemon")
    else:
        print("note: one CPU allowed (or no taskset): pinned-daemon check skipped", flush=True)

    try:
        test_startup()
    except Exception as e:  # noqa: BLE001
        check("test_startup", False, repr(e))
    return results.report("status-real")


if __name__ == "__main__":
    sys.exit(main())
