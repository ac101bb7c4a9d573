// tests/peers/sched-load.mjs: 1,000 short requests from 32 concurrent clients
// against the real `strata serve` daemon on stories260K (small --parallel and
// --queue so admission control answers some with 429), mixing completions and
// chat, streaming and not, shared prompt prefixes (prefix cache) and a few
// streams the client abandons mid-way (cancellation).
// Checks: every response is a 200 with text and usage, or a 429 with
// Retry-After; no other status, no connection errors; /status ends with 0
// active, 0 queued, no KV block in use and the pool fully accounted for; the
// prefix cache was hit; SIGTERM exits 0 with no sanitizer report (ASan's
// leak check runs at exit).
// Usage: node sched-load.mjs <strata binary> [n_requests] [n_clients]
// Prints `RESULT sched-load: N passed, M failed`; exits 1 on any failure.
import { startDaemon } from "./strata-daemon.mjs";

const strata = process.argv[2];
const N = Number(process.argv[3] || 1000);
const CLIENTS = Number(process.argv[4] || 32);
const shared = process.env.STRATA_SHARED_DIR || "../shared";
const modelPath = `${shared}/models/stories260K.gguf`;
const MODEL = "stories260K";

let passed = 0, failed = 0;
function check(name, ok, detail = "") {
  if (ok) passed++;
  else { failed++; console.log(`FAIL ${name} ${detail}`); }
}

const SYSTEM = "Once upon a time, there was a little girl named Lily. She loved to play outside in the park.";
const TAILS = [" One day", " She saw", " Her mom said", " The sun", " A big dog", " Tom came", " It was", " They"];

function requestBody(i) {
  const stream = i % 2 === 1;
  const max_tokens = 4 + (i % 5);
  if (i % 3 === 0)
    return { stream, body: { model: MODEL, messages: [{ role: "user", content: `${SYSTEM}${TAILS[i % 8]}` }],
      max_tokens, temperature: 0 }, route: "chat/completions" };
  return { stream, body: { model: MODEL, prompt: `${SYSTEM}${TAILS[i % 8]}`, max_tokens,
    temperature: i % 4 === 1 ? 0.8 : 0, seed: i }, route: "completions" };
}

async function one(base, i, stats) {
  const { stream, body, route } = requestBody(i);
  if (stream) body.stream = true;
  const abandon = stream && i % 37 === 5; // client goes away after the first chunk
  const ac = new AbortController();
  let res;
  try {
    res = await fetch(`${base}/v1/${route}`, { method: "POST", signal: ac.signal,
      headers: { "Content-Type": "application/json" }, body: JSON.stringify(body) });
  } catch (e) {
    stats.errors.push(`#${i} fetch: ${e.message}`);
    return;
  }
  if (res.status === 429) {
    stats.n429++;
    if (!res.headers.get("retry-after")) stats.errors.push(`#${i} 429 without Retry-After`);
    await res.text();
    // back off (shorter than Retry-After so the suite stays fast), then the next request
    await new Promise((r) => setTimeout(r, 200));
    return;
  }
  if (res.status !== 200) {
    stats.errors.push(`#${i} status ${res.status}: ${await res.text()}`);
    return;
  }
  if (!stream) {
    const j = await res.json();
    const text = route === "completions" ? j.choices?.[0]?.text : j.choices?.[0]?.message?.content;
    if (typeof text !== "string" || !j.usage || j.usage.completion_tokens < 1)
      stats.errors.push(`#${i} bad body ${JSON.stringify(j)}`);
    else {
      stats.ok++;
      stats.cached += j.usage.prompt_tokens_details?.cached_tokens ?? 0;
    }
    return;
  }
  // SSE: read until [DONE] (or abandon after the first chunk)
  const reader = res.body.getReader();
  const dec = new TextDecoder();
  let buf = "", done = false, chunks = 0;
  try {
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
        if (j.error) { stats.errors.push(`#${i} stream error ${data}`); return; }
        chunks++;
      }
      if (abandon && chunks >= 1) {
        ac.abort();
        stats.abandoned++;
        return;
      }
    }
  } catch (e) {
    if (!abandon) stats.errors.push(`#${i} stream: ${e.message}`);
    return;
  }
  if (!done || chunks < 2) stats.errors.push(`#${i} stream ended early (${chunks} chunks)`);
  else stats.ok++;
}

async function main() {
  const d = await startDaemon(strata, modelPath, ["--parallel", "8", "--queue", "20", "--ctx-size", "256",
    "--kv-block", "16", "--request-timeout", "120"]);
  const base = `http://127.0.0.1:${d.port}`;
  const stats = { ok: 0, n429: 0, abandoned: 0, cached: 0, errors: [] };
  let next = 0;
  const t0 = Date.now();
  const clients = [];
  for (let c = 0; c < CLIENTS; c++)
    clients.push((async () => {
      for (let i = next++; i < N; i = next++) {
        await one(base, i, stats);
      }
    })());
  await Promise.all(clients);
  const secs = (Date.now() - t0) / 1000;
  console.log(`${N} requests, ${CLIENTS} clients, ${secs.toFixed(1)} s: ${stats.ok} ok, ` +
    `${stats.n429} x 429, ${stats.abandoned} abandoned, ${stats.errors.length} errors, ` +
    `${stats.cached} cached prompt tokens`);
  check("no errors", stats.errors.length === 0, stats.errors.slice(0, 5).join(" | "));
  check("all accounted", stats.ok + stats.n429 + stats.abandoned + stats.errors.length === N);
  check("a fair share succeeds", stats.ok >= N / 5, `${stats.ok} ok`);
  check("admission control answered 429", stats.n429 > 0);
  check("prefix cache used", stats.cached > 0);

  // the scheduler settles: nothing active or queued, every block back
  let st = null;
  for (let k = 0; k < 100; k++) {
    st = await (await fetch(`${base}/status`)).json();
    if (st.sessions.active === 0 && st.sessions.queued === 0 && st.kv_blocks.used === 0) break;
    await new Promise((r) => setTimeout(r, 100));
  }
  check("status: 0 active", st.sessions.active === 0, JSON.stringify(st.sessions));
  check("status: 0 queued", st.sessions.queued === 0);
  check("status: no block in use", st.kv_blocks.used === 0 &&
    st.kv_blocks.free + st.kv_blocks.cached === st.kv_blocks.total, JSON.stringify(st.kv_blocks));
  check("status: prefix hits", st.prefix_cache.hits > 0 && st.prefix_cache.hit_rate > 0,
    JSON.stringify(st.prefix_cache));
  check("status: tokens", st.tokens.generated >= stats.ok * 4, JSON.stringify(st.tokens));

  // /metrics: the same pool and cache figures as gauges, plus the step counters
  const text = await (await fetch(`${base}/metrics`)).text();
  const metric = (name) => {
    const line = text.split("\n").find((l) => l.startsWith(`${name} `));
    return line === undefined ? NaN : Number(line.slice(name.length + 1));
  };
  const used = metric('strata_kv_blocks{state="used"}'), free = metric('strata_kv_blocks{state="free"}');
  const cachedB = metric('strata_kv_blocks{state="cached"}'), total = metric("strata_kv_blocks_total");
  check("metrics: kv blocks match /status", used === st.kv_blocks.used && free === st.kv_blocks.free &&
    cachedB === st.kv_blocks.cached && total === st.kv_blocks.total,
    `${used}/${free}/${cachedB}/${total} vs ${JSON.stringify(st.kv_blocks)}`);
  check("metrics: prefix lookups = hits + misses", metric("strata_prefix_cache_lookups_total") ===
    st.prefix_cache.hits + st.prefix_cache.misses && metric("strata_prefix_cache_hits_total") ===
    st.prefix_cache.hits, text.match(/^strata_prefix.*$/gm)?.join(" "));
  check("metrics: sessions", metric("strata_sessions_active") === 0 &&
    metric("strata_sessions_waiting") === 0);
  const steps = metric("strata_sched_steps_total");
  const dec = metric('strata_sched_step_tokens_total{kind="decode"}');
  const pre = metric('strata_sched_step_tokens_total{kind="prefill"}');
  check("metrics: steps and tokens per step", steps > 0 && pre === st.tokens.prompt &&
    dec > 0 && dec <= st.tokens.generated && (dec + pre) / steps >= 1,
    `steps ${steps} decode ${dec} prefill ${pre} tokens ${JSON.stringify(st.tokens)}`);
  check("metrics: forward time", metric('strata_sched_seconds_total{phase="forward"}') > 0 &&
    metric("strata_sched_tokens_per_step") >= 0);

  // clean exit (ASan leak check at exit)
  const code = await new Promise((resolve) => { d.p.removeAllListeners("exit"); d.p.on("exit", resolve); d.p.kill("SIGTERM"); });
  check("SIGTERM exit 0", code === 0, `exit ${code}`);
  check("no sanitizer report", !/Sanitizer|runtime error/.test(d.log()), d.log().slice(-2000));
}

main().catch((e) => { failed++; console.log(`FAIL exception ${e.stack}`); }).finally(() => {
  console.log(`RESULT sched-load: ${passed} passed, ${failed} failed`);
  process.exit(failed ? 1 : 0);
});
