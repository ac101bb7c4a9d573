// server/web/app.js: the daemon's page: a chat panel on its own streaming
// API (POST /v1/chat/completions, SSE) and live figures from /status and
// /metrics. The API key, when the daemon wants one, is asked once and kept in
// this variable only (never in storage).
"use strict";

let apiKey = "";
let modelId = "";
let history = []; // {role, content} of the conversation so far
let abort = null; // AbortController of the stream in flight
let lastMetrics = null; // {t, requests, steps} of the previous scrape

const $ = (id) => document.getElementById(id);

function headers(json) {
  const h = {};
  if (json) h["Content-Type"] = "application/json";
  if (apiKey) h["Authorization"] = "Bearer " + apiKey;
  return h;
}

// Resolves once the user has given a key (the daemon answered 401).
function askKey() {
  return new Promise((resolve) => {
    const d = $("key-dialog");
    if (d.open) {
      d.addEventListener("close", () => resolve(), { once: true });
      return;
    }
    $("key").value = "";
    d.addEventListener("close", () => {
      apiKey = $("key").value.trim();
      resolve();
    }, { once: true });
    d.showModal();
  });
}

// fetch that asks for the key on 401 and tries again.
async function api(path, opts = {}) {
  for (let attempt = 0; attempt < 3; attempt++) {
    const r = await fetch(path, { ...opts, headers: headers(!!opts.body) });
    if (r.status !== 401) return r;
    await askKey();
  }
  throw new Error("the API key was refused");
}

function fmt(x, digits = 1) {
  return Number.isFinite(x) ? x.toFixed(digits) : "–";
}

// Prometheus text -> {name{labels}: value} for the lines we read.
function parseMetrics(text) {
  const m = {};
  for (const line of text.split("\n")) {
    if (!line || line[0] === "#") continue;
    const i = line.lastIndexOf(" ");
    m[line.slice(0, i)] = Number(line.slice(i + 1));
  }
  return m;
}

function sum(m, prefix) {
  let s = 0;
  for (const k in m) if (k.startsWith(prefix)) s += m[k];
  return s;
}

async function refresh() {
  try {
    const st = await (await api("/status")).json();
    modelId = st.model?.id || modelId;
    $("model").textContent = `${modelId} · ${st.architecture ?? "?"} · ctx ${st.n_ctx ?? "?"}`;
    $("state").className = "dot " + (st.status === "ok" ? "ok" : "bad");
    $("state").title = st.status;
    $("f-toks").textContent = fmt(st.recent_tok_s);
    $("f-sessions").textContent = String(st.sessions?.active ?? "–");
    $("f-queue").textContent = String(st.sessions?.queued ?? "–");
    const kb = st.kv_blocks;
    $("f-kv").textContent = kb ? `${kb.used} used · ${kb.cached} cached / ${kb.total}` : "–";
    $("f-prefix").textContent = st.prefix_cache ? fmt(100 * st.prefix_cache.hit_rate, 0) + "%" : "–";
    $("f-threads").textContent = st.threads ? `${st.threads.effective} (${st.threads.source})` : "–";
    $("f-isa").textContent = st.kernels ? st.kernels.isa : "–";
    $("f-weights").textContent = st.kernels?.weights_layout ?? "–";
    const tiers = [];
    for (const [name, v] of [["expert store", st.expert_store], ["GPU arena", st.arena]])
      if (v && typeof v === "object") tiers.push(`${name}: ${JSON.stringify(v)}`);
    $("tiers").textContent = tiers.join("\n");
    const m = parseMetrics(await (await api("/metrics")).text());
    const now = performance.now() / 1000;
    const cur = { t: now, requests: sum(m, "strata_http_requests_total"),
                  steps: m["strata_sched_steps_total"] ?? 0 };
    $("f-requests").textContent = String(cur.requests);
    if (lastMetrics && now > lastMetrics.t)
      $("f-steps").textContent = fmt((cur.steps - lastMetrics.steps) / (now - lastMetrics.t));
    lastMetrics = cur;
    $("updated").textContent = "updated " + new Date().toLocaleTimeString();
  } catch (e) {
    $("state").className = "dot bad";
    $("state").title = String(e);
  }
}

function bubble(role, text) {
  const div = document.createElement("div");
  div.className = "msg " + role;
  div.textContent = text || "";
  $("messages").appendChild(div);
  div.scrollIntoView({ block: "end" });
  return div;
}

// The assistant's bubble: reasoning folded in a <details> (reasoning_content
// deltas, or text inside <think>...</think>), then the answer.
function assistantView() {
  const div = bubble("assistant", "");
  const details = document.createElement("details");
  const summary = document.createElement("summary");
  summary.textContent = "reasoning";
  const reasoning = document.createElement("div");
  details.append(summary, reasoning);
  details.hidden = true;
  const answer = document.createElement("div");
  answer.className = "answer";
  const meta = document.createElement("span");
  meta.className = "meta";
  div.append(details, answer, meta);
  let raw = "", think = "";
  return {
    div,
    addReasoning(t) {
      think += t;
      reasoning.textContent = think;
      details.hidden = false;
    },
    addText(t) {
      raw += t;
      // <think>...</think> in the content (templates that emit it as text)
      const open = raw.indexOf("<think>");
      if (open >= 0) {
        const close = raw.indexOf("</think>", open);
        const inner = raw.slice(open + 7, close >= 0 ? close : undefined);
        reasoning.textContent = think + inner;
        details.hidden = false;
        answer.textContent = raw.slice(0, open) + (close >= 0 ? raw.slice(close + 8) : "");
      } else {
        answer.textContent = raw;
      }
      div.scrollIntoView({ block: "end" });
    },
    answerText() {
      const close = raw.indexOf("</think>");
      return close >= 0 ? raw.slice(close + 8).trim() : raw;
    },
    setMeta(t) { meta.textContent = t; },
  };
}

async function send(text) {
  history.push({ role: "user", content: text });
  bubble("user", text);
  const view = assistantView();
  abort = new AbortController();
  $("send").disabled = true;
  $("stop").disabled = false;
  const t0 = performance.now();
  let tFirst = 0, n = 0, usage = null, timings = null;
  try {
    const body = JSON.stringify({
      model: modelId || "default", messages: history, stream: true,
      stream_options: { include_usage: true },
      max_tokens: Number($("max-tokens").value) || 256,
      temperature: Number($("temperature").value),
    });
    const r = await api("/v1/chat/completions", { method: "POST", body, signal: abort.signal });
    if (!r.ok) {
      const e = await r.json().catch(() => ({}));
      throw new Error(e.error?.message || `HTTP ${r.status}`);
    }
    const reader = r.body.getReader();
    const dec = new TextDecoder();
    let buf = "";
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buf += dec.decode(value, { stream: true });
      let k;
      while ((k = buf.indexOf("\n\n")) >= 0) {
        const ev = buf.slice(0, k);
        buf = buf.slice(k + 2);
        if (!ev.startsWith("data: ")) continue; // ": keep-alive" comments
        const data = ev.slice(6);
        if (data === "[DONE]") continue;
        const j = JSON.parse(data);
        if (j.error) throw new Error(j.error.message);
        if (j.usage) usage = j.usage;
        if (j.timings) timings = j.timings; // the daemon's own (llama-server's fields)
        const d = j.choices?.[0]?.delta;
        if (!d) continue;
        if (d.reasoning_content) view.addReasoning(d.reasoning_content);
        if (d.content) {
          if (!tFirst) tFirst = performance.now();
          n++;
          view.addText(d.content);
        }
      }
    }
    history.push({ role: "assistant", content: view.answerText() });
    const secs = (performance.now() - (tFirst || t0)) / 1000;
    const toks = usage?.completion_tokens ?? timings?.predicted_n ?? n;
    // tok/s as the daemon measured it when it says, else as this page saw it
    const rate = timings && timings.predicted_n > 1 ? timings.predicted_per_second
                 : toks > 1 && secs > 0 ? (toks - 1) / secs : NaN;
    let text = `${toks} tokens · first after ${fmt((tFirst - t0) / 1000, 2)} s · ${fmt(rate)} tok/s`;
    if (timings) text += ` · prompt ${timings.prompt_n} tokens (${timings.cache_n} cached)`;
    view.setMeta(text);
  } catch (e) {
    if (e.name === "AbortError") {
      view.setMeta("stopped");
      history.push({ role: "assistant", content: view.answerText() });
    } else {
      view.div.classList.add("error");
      view.setMeta(String(e.message || e));
      history.pop(); // the turn failed: do not send it again
    }
  } finally {
    abort = null;
    $("send").disabled = false;
    $("stop").disabled = true;
    refresh();
  }
}

$("composer").addEventListener("submit", (ev) => {
  ev.preventDefault();
  const text = $("input").value.trim();
  if (!text || abort) return;
  $("input").value = "";
  send(text);
});
$("input").addEventListener("keydown", (ev) => {
  if (ev.key === "Enter" && !ev.shiftKey) {
    ev.preventDefault();
    $("composer").requestSubmit();
  }
});
$("stop").addEventListener("click", () => abort?.abort());
$("clear").addEventListener("click", () => {
  history = [];
  $("messages").textContent = "";
});

refresh();
setInterval(refresh, 1000);
