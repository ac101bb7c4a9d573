#!/usr/bin/env python3
"""tests/peers/numa-real.py: --numa end to end on the real models.

  numa-real.py STRATA

- Greedy outputs are identical bit for bit with --numa off, auto, node:0 and
  split (split on this one-node machine runs two logical row groups), with
  the weight arena and with the weights left in the file (--no-repack: the
  page-cache placement path), and on a simulated two-node machine
  (HWLOC_SYNTHETIC "pack:2 numa:1 core:1 pu:1": CPU 0 is node 0, CPU 1 is
  node 1, so split really binds the caller and the worker to different
  CPUs, and the file placement drops and re-reads the far half).
- The real single-node path says "1 node: nothing to bind".
- Bad --numa values exit 2 with a message naming --numa.
- `strata numa-check` prints the topology, the model's pages and the
  decision, on the real machine and on simulated ones.
- `strata serve --numa split`: /status shows the decision, the groups and
  the placement; --print-config knows the option; the start-up log has the
  numa line.
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(__file__))
import strata_daemon as sd  # noqa: E402

STRATA = sys.argv[1]
MODELS = os.path.join(sd.shared_dir(), "models")
STORIES = os.path.join(MODELS, "stories260K.gguf")
TINY = os.path.join(MODELS, "llama-2-tiny-random.gguf")
res = sd.Results(limit=600)
check = res.check


def env_with(**kv):
    e = dict(os.environ)
    for k in ("HWLOC_SYNTHETIC", "HWLOC_XMLFILE", "STRATA_NUMA"):
        e.pop(k, None)
    e.update(kv)
    return e


def run(model, mode, extra=(), env=None, n=48):
    r = subprocess.run([STRATA, "run", "-m", model, "-p", "Once upon a time", "-n", str(n), "--temp", "0",
                        "--ignore-eos",
                        "-t", "2", "--numa", mode, "--json", *extra],
                       capture_output=True, text=True, env=env or env_with(), timeout=300)
    return r


def ids_of(r):
    """The generated ids and text (the JSON's timings differ run to run)."""
    try:
        j = json.loads(r.stdout)
        return (j["prompt_ids"], j["ids"], j["text"])
    except (ValueError, KeyError):
        return None


# a tiny MoE (qwen3moe, 8 experts top-2): expert stacks are cut per expert
TMP = tempfile.mkdtemp(prefix="strata-numa-")
MOE = os.path.join(TMP, "moe.gguf")
subprocess.run([STRATA, "gguf", "synth", "--arch", "qwen3moe", "--n-embd", "64", "--n-layer", "2",
                "--n-head", "4", "--n-head-kv", "2", "--head-dim", "16", "--n-ff", "128",
                "--n-expert", "8", "--n-expert-used", "2", "--n-ff-exp", "64", "--n-vocab", "512",
                "--ctx", "256", "--type", "q8_0", "--seed", "5", "--out", MOE], check=True,
               stdout=subprocess.DEVNULL)

for model in (STORIES, TINY, MOE):
    name = os.path.basename(model)
    for extra in ((), ("--no-repack",)):
        tag = f"{name}{' ' + extra[0] if extra else ''}"
        base = run(model, "off", extra)
        check(f"{tag}: --numa off runs", base.returncode == 0, base.stderr[-600:])
        check(f"{tag}: no sanitizer report", not sd.SANITIZER_RE.search(base.stderr), base.stderr[-600:])
        for mode in ("auto", "node:0", "split"):
            r = run(model, mode, extra)
            check(f"{tag}: --numa {mode} runs", r.returncode == 0, r.stderr[-600:])
            check(f"{tag}: --numa {mode} output identical to off", ids_of(r) == ids_of(base) and ids_of(r),
                  f"{r.stdout[:300]!r} vs {base.stdout[:300]!r}")
            check(f"{tag}: --numa {mode} says what it did", "strata run: numa:" in r.stderr, r.stderr[-600:])
        r = run(model, "split", extra, env=env_with(HWLOC_SYNTHETIC="pack:2 numa:1 core:1 pu:1"))
        check(f"{tag}: simulated 2-node split runs", r.returncode == 0, r.stderr[-600:])
        check(f"{tag}: simulated 2-node split identical", ids_of(r) == ids_of(base), r.stdout[:300])
        check(f"{tag}: simulated split bound both nodes",
              "1 threads on node 0" in r.stderr and "1 on node 1" in r.stderr, r.stderr[-800:])
        if extra:
            check(f"{tag}: simulated split placed the file's pages",
                  "placement page cache" in r.stderr, r.stderr[-800:])
        else:
            check(f"{tag}: split first-touched the arena", "placement first touch (arena)" in r.stderr,
                  r.stderr[-800:])
        r = run(model, "auto", extra, env=env_with(HWLOC_SYNTHETIC="pack:2 numa:1 core:1 pu:1"))
        check(f"{tag}: simulated 2-node auto identical", r.returncode == 0 and ids_of(r) == ids_of(base),
              r.stderr[-600:])
        # 1 CPU a node for 2 threads: auto binds nothing rather than oversubscribe
        check(f"{tag}: simulated auto never fewer CPUs than threads", "nothing bound" in r.stderr, r.stderr[-600:])

# the MoE under split: experts divided whole between the two groups (the
# division's line), and with the expert store its slots laid out per group
# (two logical halves here), the greedy ids those of --numa off
r = run(MOE, "split")
check("moe split: the MoE division reported", "MoE division:" in r.stderr and " calls; picks " in r.stderr,
      r.stderr[-800:])
XS = dict(STRATA_EXPERT_STORE="on", STRATA_EXPERT_RAM=str(6 * 3 * 12288))  # 6 of the 16 experts
base = run(MOE, "off", env=env_with(**XS))
check("moe store off: runs", base.returncode == 0 and "expert store" in base.stderr, base.stderr[-600:])
r = run(MOE, "split", env=env_with(**XS))
check("moe store split: runs", r.returncode == 0, r.stderr[-600:])
check("moe store split: identical ids", ids_of(r) == ids_of(base) and ids_of(r), r.stdout[:300])
check("moe store split: slots per node", "expert store slots 3 / 3 on nodes 0 / 0" in r.stderr,
      r.stderr[-800:])
check("moe store split: no sanitizer report", not sd.SANITIZER_RE.search(r.stderr), r.stderr[-600:])

# a binding the kernel refuses (a simulated node whose CPUs this machine does
# not have: EINVAL, as a container's EPERM): the run goes on unbound, says so,
# and computes the same ids
base = run(STORIES, "off")
r = run(STORIES, "node:1", env=env_with(HWLOC_SYNTHETIC="pack:2 numa:1 core:64 pu:1"))
check("refused binding: runs", r.returncode == 0, r.stderr[-600:])
check("refused binding: says refused and unbound", "refused" in r.stderr and "unbound" in r.stderr, r.stderr[-600:])
check("refused binding: identical ids", ids_of(r) == ids_of(base), r.stdout[:300])

# the real single-node machine (every machine here has one node)
nodes = [d for d in os.listdir("/sys/devices/system/node") if d.startswith("node")] \
    if os.path.isdir("/sys/devices/system/node") else ["node0"]
r = run(STORIES, "auto")
if len(nodes) == 1:
    check("real 1 node: auto says nothing to bind", "1 node: nothing to bind" in r.stderr, r.stderr[-600:])
    check("real 1 node: nothing placed", "placement none" in r.stderr, r.stderr[-600:])

for bad in ("bogus", "node:99", "node:x", "node:1"):
    r = run(STORIES, bad, n=2)
    if bad == "node:1" and len(nodes) > 1:
        continue
    check(f"--numa {bad} exits 2", r.returncode == 2, f"{r.returncode} {r.stderr[-300:]}")
    check(f"--numa {bad} names --numa", "--numa" in r.stderr, r.stderr[-300:])
    check(f"--numa {bad} no sanitizer report", not sd.SANITIZER_RE.search(r.stderr), r.stderr[-600:])

# numa-check
r = subprocess.run([STRATA, "numa-check", STORIES, "--mb", "16", "--threads", "2"], capture_output=True,
                   text=True, env=env_with(), timeout=300)
check("numa-check runs", r.returncode == 0, r.stderr[-600:])
check("numa-check topology", "topology:" in r.stdout and "node 0:" in r.stdout, r.stdout)
check("numa-check model pages", "sampled pages cached" in r.stdout, r.stdout)
check("numa-check bandwidth", "read bandwidth" in r.stdout and "from node 0: 1 thread" in r.stdout, r.stdout)
if len(nodes) == 1:
    check("numa-check: 1 node: nothing to bind", "1 node: nothing to bind" in r.stdout, r.stdout)
r = subprocess.run([STRATA, "numa-check", STORIES, "--threads", "4", "--place", "--numa", "split", "--no-bandwidth"],
                   capture_output=True, text=True, env=env_with(), timeout=300)
check("numa-check --place", r.returncode == 0 and "place_file_pages (forced, 4 threads)" in r.stdout,
      r.stdout + r.stderr[-300:])
sims = {
    "pack:2 numa:1 core:8 pu:2": ("--numa auto with 8 threads", "physical cores"),
    "pack:4 numa:1 core:4 pu:1": ("4 nodes", "node 3: 4 cores"),
}
for desc, (a, b) in sims.items():
    r = subprocess.run([STRATA, "numa-check", "--threads", "8", "--no-bandwidth"], capture_output=True, text=True,
                       env=env_with(HWLOC_SYNTHETIC=desc), timeout=120)
    check(f"numa-check simulated {desc}", r.returncode == 0 and a in r.stdout and b in r.stdout
          and "[simulated by hwloc]" in r.stdout, r.stdout + r.stderr[-300:])
r = subprocess.run([STRATA, "numa-check", "--threads", "4", "--numa", "split", "--no-bandwidth"], capture_output=True,
                   text=True, env=env_with(HWLOC_SYNTHETIC="pack:2 numa:1 core:8 pu:2"), timeout=120)
check("numa-check simulated split", "4 threads on node 0" not in r.stdout and "2 on node 1" in r.stdout,
      r.stdout)
xml = os.path.join(os.path.dirname(__file__), "..", "engine", "host", "topo-2node-gpu1.xml")
r = subprocess.run([STRATA, "numa-check", "--threads", "4", "--gpu", "0", "--no-bandwidth"], capture_output=True,
                   text=True, env=env_with(HWLOC_XMLFILE=xml), timeout=120)
check("numa-check simulated GPU on node 1", r.returncode == 0 and "gpu pci 0000:41:00.0: node 1" in r.stdout
      and "GPU in use is local to node 1" in r.stdout, r.stdout + r.stderr[-300:])
r = subprocess.run([STRATA, "numa-check", "--gpu", "3", "--no-bandwidth"], capture_output=True, text=True,
                   env=env_with(HWLOC_XMLFILE=xml), timeout=120)
check("numa-check --gpu out of range exits 2", r.returncode == 2, r.stderr)
r = subprocess.run([STRATA, "numa-check", "--numa", "nope"], capture_output=True, text=True, env=env_with())
check("numa-check bad mode exits 2", r.returncode == 2 and "--numa" in r.stderr, r.stderr)

# the daemon: --print-config, start-up line, /status
r = subprocess.run([STRATA, "serve", STORIES, "--print-config", "--numa", "split"], capture_output=True, text=True,
                   env=env_with(), timeout=120)
check("print-config shows numa", "numa" in r.stdout and "split" in r.stdout, r.stdout[-800:])
proc = subprocess.Popen([STRATA, "serve", STORIES, "--port", "0", "--threads", "2", "--numa", "split"],
                        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env_with())
try:
    log = []
    port = None
    while True:
        line = proc.stderr.readline()
        if not line:
            break
        log.append(line)
        m = sd.LISTENING_RE.search(line)
        if m:
            port = int(m.group(1))
            break
    check("serve --numa split starts", port is not None, "".join(log)[-800:])
    rest, reader = sd.drain_stderr(proc)
    if port:
        check("serve health", sd.wait_health(port, 0.2, tries=200))
        allg = log + rest
        check("start-up numa line", any("strata serve: numa:" in ln and "split" in ln for ln in allg),
              "".join(allg)[-1500:])
        st, _, body = sd.request(port, "GET", "/status")
        numa = json.loads(body).get("numa") or {}
        check("/status numa.mode split", numa.get("mode") == "split", json.dumps(numa))
        check("/status numa.decision", "split" in (numa.get("decision") or ""), json.dumps(numa))
        groups = numa.get("groups") or []
        check("/status numa.groups two", len(groups) == 2 and sum(g["threads"] for g in groups) == 2,
              json.dumps(numa))
        pl = numa.get("placement") or {}
        check("/status numa.placement", pl.get("how") in ("first touch (arena)", "page cache")
              and pl.get("bytes_first_touched", 0) + pl.get("bytes_moved", 0) + pl.get("bytes_filled", 0) >= 0,
              json.dumps(numa))
        check("/status numa.topology", (numa.get("topology") or {}).get("cpus", 0) >= 1, json.dumps(numa))
        st, _, body = sd.request(port, "POST", "/v1/completions",
                                 {"model": "stories260K", "prompt": "Once upon a time", "max_tokens": 8, "temperature": 0})
        check("completion under split", st == 200, body[:300])
finally:
    proc.terminate()
    try:
        proc.wait(30)
    except subprocess.TimeoutExpired:
        proc.kill()
shutil.rmtree(TMP, ignore_errors=True)
sys.exit(res.report("numa-real"))
