// tests/peers/xstore-real.mjs: the expert store through the real daemon, with
// the official openai SDK as the client, on a synthesized qwen3moe (4 layers,
// 16 experts top-4, Q4_K_M, zipf-skewed router; 8 MiB, written in ~1 s).
// Checks:
// - the same greedy completions with --expert-store on (a 1 MiB tier: 7 slots
//   of 140 KiB for 64 experts, so nearly every pick evicts; io_uring+direct
//   with registered buffers and without, pread+buffered; the side-thread
//   router lookahead at depth 1 and 2) from 4 concurrent streams as with
//   --expert-store off one request at a time;
// - --expert-store auto (a fake cgroup memory.max through --sys-root): on,
//   every expert warm at load and no miss, when the model does not fit the
//   budget; off (null with the rule as the note) when it does;
// - /status expert_store reports the mode, slots, hits/misses per layer, bytes
//   read and the latency histogram; /metrics has strata_expert_store_*; with
//   the store off /status says why (null with a note);
// - bad values stop start-up naming the option (exit 2): --expert-store
//   maybe, --expert-io nope, a budget below one token's experts;
// - the model file truncated under the daemon: the request fails with a
//   clear message (not a crash, not a hang), streams too; /health, /status
//   and /v1/models keep answering; SIGTERM exits 0 (ASan checks leaks).
// Usage: node xstore-real.mjs <strata binary>
// Prints `RESULT xstore-real: N passed, M failed`; exits 1 on any failure.
import { execFileSync, spawnSync } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import OpenAI from "openai";
import { startDaemon } from "./strata-daemon.mjs";

const strata = process.argv[2];
let passed = 0, failed = 0;
function check(name, ok, detail = "") {
  if (ok) passed++;
  else { failed++; console.log(`FAIL ${name} ${typeof detail === "string" ? detail : JSON.stringify(detail)}`); }
}

const dir = fs.mkdtempSync(path.join(os.tmpdir(), "strata-xstore-"));
const model = path.join(dir, "moe.gguf");
const MODEL = "moe";
execFileSync(strata, ["gguf", "synth", "--arch", "qwen3moe", "--type", "q4_k_m", "--n-embd", "256",
  "--n-layer", "4", "--n-head", "4", "--n-head-kv", "2", "--head-dim", "64", "--n-ff", "512",
  "--n-vocab", "1000", "--n-expert", "16", "--n-expert-used", "4", "--n-ff-exp", "256",
  "--route-skew", "zipf:1.0", "--seed", "7", "--out", model], { stdio: "ignore" });

const PROMPTS = ["hello world", "the quick brown fox jumps over", "a b c d e f g h", "once upon a time"];
const spawned = [];

async function stopped(d) {
  const code = await new Promise((r) => { d.p.removeAllListeners("exit"); d.p.on("exit", (c) => r(c)); d.p.kill("SIGTERM"); });
  return code;
}

async function getJson(port, route) {
  const r = await fetch(`http://127.0.0.1:${port}${route}`);
  return { status: r.status, body: route === "/metrics" ? await r.text() : await r.json() };
}

async function streamText(client, prompt, model = MODEL) {
  const s = await client.completions.create({ model, prompt, max_tokens: 12, temperature: 0, stream: true });
  let text = "";
  for await (const c of s) text += c.choices?.[0]?.text ?? "";
  return text;
}

try {
  // ---- the reference: store off, one request at a time
  const off = await startDaemon(strata, model, ["--expert-store", "off", "--parallel", "4"], spawned);
  const cOff = new OpenAI({ baseURL: `http://127.0.0.1:${off.port}/v1`, apiKey: "x", maxRetries: 0 });
  const want = [];
  for (const p of PROMPTS) {
    const r = await cOff.completions.create({ model: MODEL, prompt: p, max_tokens: 12, temperature: 0 });
    want.push(r.choices[0].text);
  }
  check("reference texts", want.every((t) => typeof t === "string" && t.length > 0), want);
  const stOff = (await getJson(off.port, "/status")).body;
  check("store off: null with a note", stOff.expert_store === null &&
    /--expert-store off/.test(stOff.notes?.expert_store ?? ""), stOff.notes);
  check("store off: exit 0", (await stopped(off)) === 0);

  // ---- the store on, a tiny tier, 4 concurrent streams
  for (const [io, direct, fixed, depth, mode] of [["io_uring", "on", "on", "1", "io_uring+direct"],
    ["io_uring", "on", "off", "2", "io_uring+direct"], ["pread", "off", "auto", "1", "pread+buffered"]]) {
    const d = await startDaemon(strata, model, ["--expert-store", "on", "--expert-ram", "1m",
      "--expert-io", io, "--expert-direct", direct, "--expert-fixed", fixed, "--expert-prefetch", depth,
      "--parallel", "4"], spawned);
    const fixedOn = fixed === "on";
    check(`${mode} fixed ${fixed}: start-up log names the mode`, new RegExp(`expert store: on .*${mode.replace("+", "\\+")}, queue depth \\d+ \\([^)]+\\), registered buffers ${fixedOn ? "on" : "off"} \\([^)]+\\), 7 slots`).test(d.log()), d.log());
    const c = new OpenAI({ baseURL: `http://127.0.0.1:${d.port}/v1`, apiKey: "x", maxRetries: 0 });
    for (let round = 0; round < 2; round++) {
      const got = await Promise.all(PROMPTS.map((p) => streamText(c, p)));
      for (let i = 0; i < PROMPTS.length; i++)
        check(`${mode} round ${round} stream ${i}: same greedy text`, got[i] === want[i], `${JSON.stringify(got[i])} vs ${JSON.stringify(want[i])}`);
    }
    const st = (await getJson(d.port, "/status")).body.expert_store;
    check(`${mode}: /status expert_store`, st && st.on === true && st.mode === mode && st.slots === 7 &&
      st.slots_used === 7 && st.misses > 0 && st.evictions > 0 && st.read_errors === 0 &&
      st.bytes_read > 0 && st.reads > 0 && st.layers?.length === 4 && st.fixed_buffers === fixedOn, st);
    check(`${mode} prefetch ${depth}: counters`, st && st.prefetch && st.prefetch.useful + st.prefetch.wasted <= st.prefetch.issued &&
      st.prefetch.recall >= 0 && st.prefetch.recall <= 1 && st.prefetch.precision >= 0 && st.prefetch.precision <= 1, st?.prefetch);
    check(`${mode}: /status queue depth from the device`, st && st.queue_depth >= 4 && st.queue_depth <= 256 &&
      /nr_requests|default 64/.test(st.queue_rule), st && `${st.queue_depth} ${st.queue_rule}`);
    check(`${mode}: per-layer counts add up`, st && st.layers.reduce((a, l) => a + l.hits + l.misses, 0) === st.hits + st.misses, st?.layers);
    check(`${mode}: latency histogram counts every read`, st && st.read_latency_us.buckets.reduce((a, b) => a + b.count, 0) === st.reads, st?.read_latency_us);
    const m = (await getJson(d.port, "/metrics")).body;
    check(`${mode}: /metrics`, new RegExp(`strata_expert_store_capacity_bytes\\{mode="${mode.replace("+", "\\+")}"\\} ${st?.capacity_bytes}`).test(m) &&
      /strata_expert_store_read_seconds_count [1-9]/.test(m) &&
      new RegExp(`strata_expert_store_queue_depth ${st?.queue_depth}\n`).test(m) &&
      /strata_expert_store_picks_total\{layer="3",result="miss"\} [1-9]/.test(m), m.split("\n").filter((l) => /expert_store/.test(l)).slice(0, 8).join(" | "));
    check(`${mode}: exit 0`, (await stopped(d)) === 0);
  }

  // ---- auto: on when the model does not fit the budget (a fake cgroup v2
  // tree: memory.max 64 MiB < 8 MiB of weights + KV + the 256 MiB margin),
  // off when it does (64 GiB)
  for (const [limit, on] of [[64 << 20, true], [64 * 2 ** 30, false]]) {
    const root = path.join(dir, `root-${on}`);
    fs.mkdirSync(path.join(root, "proc/self"), { recursive: true });
    fs.mkdirSync(path.join(root, "sys/fs/cgroup"), { recursive: true });
    fs.writeFileSync(path.join(root, "proc/self/cgroup"), "0::/\n");
    fs.writeFileSync(path.join(root, "proc/self/mountinfo"), "31 23 0:28 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw\n");
    fs.writeFileSync(path.join(root, "sys/fs/cgroup/memory.max"), `${limit}\n`);
    const d = await startDaemon(strata, model, ["--sys-root", root, "--parallel", "2"], spawned);
    const st = (await getJson(d.port, "/status")).body;
    if (on)
      check("auto: on past the budget", st.expert_store?.on === true && /^auto: on/.test(st.expert_store.rule) &&
        st.expert_store.slots === 64 && st.expert_store.warm_bytes > 0, st.expert_store);
    else
      check("auto: off when it fits", st.expert_store === null && /^auto: off .*fit the/.test(st.notes?.expert_store ?? ""), st.notes);
    const c = new OpenAI({ baseURL: `http://127.0.0.1:${d.port}/v1`, apiKey: "x", maxRetries: 0 });
    const r = await c.completions.create({ model: MODEL, prompt: PROMPTS[2], max_tokens: 12, temperature: 0 });
    check(`auto ${on ? "on" : "off"}: same text`, r.choices[0].text === want[2], r.choices[0].text);
    if (on) {
      const st2 = (await getJson(d.port, "/status")).body.expert_store;
      check("auto on: every expert warm, no miss", st2?.misses === 0 && st2.hits > 0 && st2.bytes_read === 0, st2);
    }
    check(`auto ${on ? "on" : "off"}: exit 0`, (await stopped(d)) === 0);
  }

  // ---- bad values stop start-up, naming the option
  for (const [args, re] of [[["--expert-store", "maybe"], /--expert-store: 'maybe' is not one of auto\|on\|off/],
                            [["--expert-store", "on", "--expert-io", "nope"], /--expert-io: 'nope'/],
                            [["--expert-store", "on", "--expert-ram", "100k"], /holds 0 experts; one token needs 4/]]) {
    const r = spawnSync(strata, ["serve", model, "--port", "0", "--threads", "1", ...args], { encoding: "utf8", timeout: 60000 });
    check(`refused: ${args.join(" ")}`, r.status !== 0 && r.status !== null && re.test(r.stderr), `${r.status} ${r.stderr}`);
  }

  // ---- the file truncated under the daemon
  const copy = path.join(dir, "copy.gguf");
  fs.copyFileSync(model, copy);
  const d = await startDaemon(strata, copy, ["--expert-store", "on", "--expert-ram", "1m", "--expert-io", "pread"], spawned);
  const c = new OpenAI({ baseURL: `http://127.0.0.1:${d.port}/v1`, apiKey: "x", maxRetries: 0 });
  const ok = await c.completions.create({ model: "copy", prompt: PROMPTS[0], max_tokens: 12, temperature: 0 });
  check("copy serves before", ok.choices[0].text === want[0], ok.choices[0].text);
  // one byte: the skeleton's few pages read from the mapping stay inside the file
  fs.truncateSync(copy, fs.statSync(copy).size - 1);
  for (let i = 0; i < 2; i++) {
    let err = null;
    try {
      await c.completions.create({ model: "copy", prompt: PROMPTS[1 + i], max_tokens: 12, temperature: 0 });
    } catch (e) { err = e; }
    check(`truncated: request ${i} fails with a clear message`, err && err.status >= 500 &&
      /changed under the daemon/.test(err.message), err ? `${err.status} ${err.message}` : "no error");
  }
  let serr = null;
  try { await streamText(new OpenAI({ baseURL: `http://127.0.0.1:${d.port}/v1`, apiKey: "x", maxRetries: 0 }), PROMPTS[3], "copy"); }
  catch (e) { serr = e; }
  check("truncated: a stream ends with the error", serr && /changed under the daemon/.test(String(serr.message ?? serr)), String(serr));
  check("truncated: /health", (await fetch(`http://127.0.0.1:${d.port}/health`)).status === 200);
  const st = (await getJson(d.port, "/status")).body;
  check("truncated: /status counts the errors", st.expert_store?.read_errors >= 3, st.expert_store);
  check("truncated: /v1/models", (await getJson(d.port, "/v1/models")).status === 200);
  check("truncated: exit 0", (await stopped(d)) === 0);
} catch (e) {
  check("no exception", false, e.stack || String(e));
} finally {
  for (const p of spawned) if (p.exitCode === null) p.kill("SIGKILL");
  fs.rmSync(dir, { recursive: true, force: true });
}
console.log(`RESULT xstore-real: ${passed} passed, ${failed} failed`);
process.exit(failed ? 1 : 0);
