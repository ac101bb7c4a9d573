// bench/load.mjs: serving load benchmark: streaming requests against a running
// `strata serve` (release build) at 1, 4, 8, 16 and 32 concurrent clients.
// Per level: aggregate output tok/s (completion tokens of every request / wall
// time of the level), TTFT p50/p99 (request sent -> first content chunk),
// inter-token p50/p99 (gap between successive content chunks, divided by the
// tokens a chunk covers), and the error count (any non-200, any stream error).
// Run by hand, not in the suite:
//
//   build-s-rel/cli/strata gguf synth --preset llama-3.2-1b --type q4_k_m -o /tmp/l1b.gguf
//   node bench/load.mjs build-s-rel/cli/strata /tmp/l1b.gguf
//
// Env: CLIENTS=1,4,8,16,32  TOKENS=32 (max_tokens)  TEMP=0 (greedy)  REQS=3 (requests
// per client per level)  ROUNDS=1 (the levels run this many times in turn, so
// each round's 1-client and 8-client figures share a minute of this VM's
// memory bandwidth, which swings 37-110 GB/s; the ratios are printed per round
// and as the median over rounds)  STAGGER=0 (ms between the clients' first requests,
// so arrivals trickle into a running batch instead of coming in rounds)  THREADS=2  PARALLEL=32  CTX=2048  PORT (use a daemon
// already running there instead of starting one)  ISA (strata's `--isa`)
// LLAMA_SERVER=path (llama.cpp's llama-server, built from source outside the
// repository: started on the same model with -t THREADS -np LLAMA_NP (8) and
// CTX per slot, and every round runs the same levels against it right after
// strata's, so the two share the minute; its tokens are the usage chunk's
// completion_tokens where it sends one, else one per content chunk).
import { spawn } from "node:child_process";
import { appendFileSync } from "node:fs";

const strata = process.argv[2] || "build/cli/strata";
const model = process.argv[3];
const LEVELS = (process.env.CLIENTS || "1,4,8,16,32").split(",").map(Number);
const TOKENS = Number(process.env.TOKENS || 32);
const STAGGER = Number(process.env.STAGGER || 0); // ms between clients' first requests (desynchronized arrivals)
const TEMP = Number(process.env.TEMP || 0); // 0 = greedy; e.g. TEMP=1 for the SDKs' default sampling
const REQS = Number(process.env.REQS || 3);
const ROUNDS = Number(process.env.ROUNDS || 1);
const THREADS = process.env.THREADS || "2";
const PARALLEL = process.env.PARALLEL || String(Math.max(...LEVELS));
const CTX = process.env.CTX || "2048";
const ISA = process.env.ISA || "auto";
const LLAMA_SERVER = process.env.LLAMA_SERVER || "";
const LLAMA_NP = process.env.LLAMA_NP || "8";

function startDaemon() {
  return new Promise((resolve, reject) => {
    const args = ["serve", model, "--port", "0", "--threads", THREADS, "--parallel", PARALLEL,
      "--queue", "64", "--ctx-size", CTX, "--isa", ISA];
    const p = spawn(strata, args, { stdio: ["ignore", "ignore", "pipe"] });
    let log = "";
    const timer = setTimeout(() => reject(new Error(`daemon did not start: ${log}`)), 300000);
    p.stderr.on("data", (d) => {
      if (process.env.DAEMON_LOG) appendFileSync(process.env.DAEMON_LOG, d);
      log += d.toString();
      const m = log.match(/listening on http:\/\/127\.0\.0\.1:(\d+)/);
      if (m && /loaded/.test(log)) { clearTimeout(timer); resolve({ p, port: Number(m[1]) }); }
    });
    p.on("exit", (c) => { clearTimeout(timer); reject(new Error(`daemon exited ${c}: ${log}`)); });
  });
}

// llama-server on a free port (its own choice of port is not printed: take
// one from the kernel, then hand it over).
async function freePort() {
  const net = await import("node:net");
  return new Promise((resolve) => {
    const srv = net.createServer();
    srv.listen(0, "127.0.0.1", () => { const p = srv.address().port; srv.close(() => resolve(p)); });
  });
}

async function startLlamaServer() {
  const port = await freePort();
  const args = ["-m", model, "--host", "127.0.0.1", "--port", String(port), "-t", THREADS,
    "-np", LLAMA_NP, "-c", String(Number(CTX) * Number(LLAMA_NP))];
  const p = spawn(LLAMA_SERVER, args, { stdio: ["ignore", "ignore", "pipe"] });
  let log = "";
  p.stderr.on("data", (d) => { log += d.toString(); if (log.length > 1 << 20) log = log.slice(-65536); });
  const base = `http://127.0.0.1:${port}`;
  for (let i = 0; i < 600; i++) {
    if (p.exitCode !== null) throw new Error(`llama-server exited ${p.exitCode}: ${log.slice(-2000)}`);
    try { if ((await fetch(`${base}/health`)).status === 200) return { p, port }; } catch (e) { /* not yet */ }
    await new Promise((r) => setTimeout(r, 500));
  }
  p.kill("SIGKILL");
  throw new Error(`llama-server did not become healthy: ${log.slice(-2000)}`);
}

let modelId = "";
const WORDS = ["river", "castle", "robot", "garden", "storm", "violin", "desert", "lantern"];

async function streamOne(base, id, out) {
  const prompt = `Request ${id}: write a short story about a ${WORDS[id % 8]} and a ${WORDS[(id * 3 + 1) % 8]}.`;
  const t0 = performance.now();
  let res;
  try {
    res = await fetch(`${base}/v1/completions`, { method: "POST",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify({ model: modelId, prompt, max_tokens: TOKENS, temperature: TEMP, stream: true,
        stream_options: { include_usage: true } }) });
  } catch (e) { out.errors++; return; }
  if (res.status !== 200) { out.errors++; await res.text(); return; }
  const reader = res.body.getReader();
  const dec = new TextDecoder();
  let buf = "", last = 0, done = false, got = 0, chunks = 0;
  while (!done) {
    const { value, done: eof } = await reader.read();
    if (eof) break;
    buf += dec.decode(value, { stream: true });
    let k;
    while ((k = buf.indexOf("\n\n")) >= 0) {
      const ev = buf.slice(0, k);
      buf = buf.slice(k + 2);
      if (!ev.startsWith("data: ")) continue;
      const data = ev.slice(6);
      if (data === "[DONE]") { done = true; break; }
      const j = JSON.parse(data);
      if (j.error) { out.errors++; return; }
      if (j.usage) { out.tokens += j.usage.completion_tokens; got = j.usage.completion_tokens; }
      if (!j.choices?.length || !j.choices[0].text) continue;
      chunks++;
      const now = performance.now();
      if (!last) out.ttft.push(now - t0);
      else out.itl.push(now - last);
      last = now;
    }
  }
  if (!got && chunks) { out.tokens += chunks; got = chunks; out.counted = true; }
  if (!done || !got) out.errors++;
}

// Scheduler counters from /metrics (strata_sched_*): name{label} -> value.
async function schedMetrics(base) {
  const text = await (await fetch(`${base}/metrics`)).text();
  const m = {};
  for (const line of text.split("\n")) {
    const r = line.match(/^(strata_sched_[a-z_]+(?:\{[^}]*\})?) ([0-9.eE+-]+)$/);
    if (r) m[r[1]] = Number(r[2]);
  }
  return m;
}

// Per-step breakdown of a level from two /metrics snapshots.
function stepLine(a, b, secs) {
  const d = (k) => (b[k] ?? 0) - (a[k] ?? 0);
  const steps = d("strata_sched_steps_total");
  if (!steps) return "  (no strata_sched_* metrics)";
  const ms = (ph) => (1000 * d(`strata_sched_seconds_total{phase="${ph}"}`) / steps).toFixed(1);
  const busy = ["forward", "sample", "emit", "other"]
    .reduce((t, ph) => t + d(`strata_sched_seconds_total{phase="${ph}"}`), 0);
  return `  ${steps} steps, ${(d('strata_sched_step_tokens_total{kind="decode"}') / steps).toFixed(2)} decode + ` +
    `${(d('strata_sched_step_tokens_total{kind="prefill"}') / steps).toFixed(2)} prefill tokens/step; ms/step: ` +
    `forward ${ms("forward")} sample ${ms("sample")} emit ${ms("emit")} other ${ms("other")}; ` +
    `scheduler busy ${(100 * busy / secs).toFixed(0)}% of the level`;
}

function pct(a, p) {
  if (!a.length) return NaN;
  const s = [...a].sort((x, y) => x - y);
  return s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))];
}

// One pass over the levels against base; rows tagged with who served them.
async function runLevels(base, who, round, strataMetrics) {
  const rows = [];
  for (const c of LEVELS) {
    const out = { tokens: 0, ttft: [], itl: [], errors: 0, counted: false };
    const m0 = strataMetrics ? await schedMetrics(base) : null;
    const t0 = performance.now();
    await Promise.all(Array.from({ length: c }, async (_, k) => {
      if (STAGGER) await new Promise((r) => setTimeout(r, k * STAGGER));
      for (let r = 0; r < REQS; r++) await streamOne(base, round * 100000 + c * 1000 + k * REQS + r, out);
    }));
    const secs = (performance.now() - t0) / 1000;
    const r = { who, c, tok_s: out.tokens / secs, ttft50: pct(out.ttft, 50), ttft99: pct(out.ttft, 99),
      itl50: pct(out.itl, 50), itl99: pct(out.itl, 99), errors: out.errors, tokens: out.tokens, secs,
      counted: out.counted };
    rows.push(r);
    console.log(`${who.padEnd(12)} clients ${String(c).padStart(2)}: ${r.tok_s.toFixed(1).padStart(6)} tok/s  ` +
      `TTFT p50 ${r.ttft50.toFixed(0)} ms p99 ${r.ttft99.toFixed(0)} ms  ` +
      `ITL p50 ${r.itl50.toFixed(0)} ms p99 ${r.itl99.toFixed(0)} ms  errors ${r.errors}  ` +
      `(${r.tokens} tokens in ${r.secs.toFixed(1)} s${r.counted ? ", counted from chunks" : ""})`);
    if (strataMetrics) console.log(stepLine(m0, await schedMetrics(base), secs));
  }
  return rows;
}

const med = (a) => { const s = [...a].sort((x, y) => x - y), n = s.length;
  return n % 2 ? s[(n - 1) / 2] : (s[n / 2 - 1] + s[n / 2]) / 2; };

async function main() {
  let daemon = null, port = Number(process.env.PORT || 0), llama = null;
  if (!port) {
    if (!model) throw new Error("usage: node bench/load.mjs STRATA MODEL.gguf (or PORT=...)");
    daemon = await startDaemon();
    port = daemon.port;
  }
  // the model id the daemon serves
  const base = `http://127.0.0.1:${port}`;
  const models = await (await fetch(`${base}/v1/models`)).json();
  modelId = models.data[0].id;
  const st0 = await (await fetch(`${base}/status`)).json();
  console.log(`strata: kernels ${st0.kernels?.isa} (CPU: ${st0.kernels?.detected}), weights ` +
    `${st0.kernels?.weights_layout}, ${st0.threads?.effective ?? THREADS} threads, --parallel ${PARALLEL}`);
  await streamOne(base, 999, { tokens: 0, ttft: [], itl: [], errors: 0 }); // warm-up
  let lbase = "";
  if (LLAMA_SERVER) {
    llama = await startLlamaServer();
    lbase = `http://127.0.0.1:${llama.port}`;
    console.log(`llama-server: ${LLAMA_SERVER} -t ${THREADS} -np ${LLAMA_NP} -c ${Number(CTX) * Number(LLAMA_NP)}`);
    await streamOne(lbase, 999, { tokens: 0, ttft: [], itl: [], errors: 0 });
  }
  const rows = [], ratios = [];
  for (let round = 0; round < ROUNDS; round++) {
    if (ROUNDS > 1) console.log(`-- round ${round + 1} of ${ROUNDS}`);
    const sr = await runLevels(base, "strata", round, true);
    const lr = lbase ? await runLevels(lbase, "llama-server", round, false) : [];
    rows.push(...sr, ...lr);
    const s1 = sr.find((r) => r.c === 1), s8 = sr.find((r) => r.c === 8), l8 = lr.find((r) => r.c === 8);
    if (s1 && s8) {
      const q = { agg: s8.tok_s / s1.tok_s, itl: s8.itl99 / s1.itl99, vsl: l8 ? s8.tok_s / l8.tok_s : NaN };
      ratios.push(q);
      console.log(`  round ${round + 1}: strata 8 clients vs 1: aggregate x${q.agg.toFixed(2)} (target >= 3), ` +
        `p99 ITL x${q.itl.toFixed(2)}` + (l8 ? `; strata 8 vs llama-server 8: x${q.vsl.toFixed(2)} (target >= 2)` : ""));
    }
  }
  console.log("\n| server | clients | tok/s | TTFT p50 (ms) | TTFT p99 (ms) | ITL p50 (ms) | ITL p99 (ms) | errors |");
  console.log("|---|---:|---:|---:|---:|---:|---:|---:|");
  for (const r of rows)
    console.log(`| ${r.who} | ${r.c} | ${r.tok_s.toFixed(1)} | ${r.ttft50.toFixed(0)} | ${r.ttft99.toFixed(0)} | ` +
      `${r.itl50.toFixed(0)} | ${r.itl99.toFixed(0)} | ${r.errors} |`);
  if (ratios.length)
    console.log(`\nover ${ratios.length} round(s), medians: strata 8 clients vs 1 x${med(ratios.map((r) => r.agg)).toFixed(2)} ` +
      `(${ratios.map((r) => r.agg.toFixed(2)).join(" ")}; target >= 3)` +
      (lbase ? `, strata 8 vs llama-server 8 x${med(ratios.map((r) => r.vsl)).toFixed(2)} ` +
        `(${ratios.map((r) => r.vsl.toFixed(2)).join(" ")}; target >= 2)` : "") +
      `, p99 ITL 8 vs 1 x${med(ratios.map((r) => r.itl)).toFixed(2)} (target <= 3)`);
  if (llama) llama.p.kill("SIGTERM");
  if (daemon) daemon.p.kill("SIGTERM");
}

main().catch((e) => { console.error(e); process.exit(1); });
