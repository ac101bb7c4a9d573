// tests/peers/sdk-conformance.mjs: the real `strata serve` daemon driven by the
// official openai npm SDK. Usage: node sdk-conformance.mjs <strata binary>
// (STRATA_SHARED_DIR locates models/stories260K.gguf and its greedy golden).
// Prints `RESULT sdk-conformance: N passed, M failed`; exits 1 on any failure.
import { startDaemon as startDaemonAt } from "./strata-daemon.mjs";
import { readFileSync } from "node:fs";
import OpenAI from "openai";

const strata = process.argv[2];
const shared = process.env.STRATA_SHARED_DIR || "../shared";
const modelPath = `${shared}/models/stories260K.gguf`;
const goldenFile = `${shared}/models/golden_stories260K_gguf_greedy.txt`;
const MODEL = "stories260K";
const KEY = "sk-test-strata";

let passed = 0, failed = 0;
function check(name, ok, detail = "") {
  if (ok) passed++;
  else { failed++; console.log(`FAIL ${name} ${detail}`); }
}
async function expectError(name, cls, fn, extra = () => true) {
  try {
    await fn();
    check(name, false, "no error raised");
  } catch (e) {
    check(name, e instanceof cls && extra(e), `${e?.constructor?.name} ${e?.status} ${e?.message}`);
  }
}

const daemons = [];
async function startDaemon(args) {
  return (await startDaemonAt(strata, modelPath, args, daemons)).port;
}

async function main() {
  const golden = readFileSync(goldenFile, "utf8");
  const goldenText = golden.match(/^text: '(.*)'$/m)[1];
  const port = await startDaemon(["--api-key", KEY, "--ctx-size", "256"]);
  const base = `http://127.0.0.1:${port}/v1`;
  const client = new OpenAI({ apiKey: KEY, baseURL: base, maxRetries: 0 });

  // completions, greedy from BOS: llama.cpp's golden tokens
  const c1 = await client.completions.create({ model: MODEL, prompt: "", max_tokens: 60, temperature: 0 });
  check("completion greedy = golden", c1.choices[0].text === goldenText, JSON.stringify(c1.choices[0].text));
  check("completion object", c1.object === "text_completion" && c1.id.startsWith("cmpl-"));
  check("completion length", c1.choices[0].finish_reason === "length" && c1.usage.completion_tokens === 60 &&
    c1.usage.prompt_tokens === 1 && c1.usage.total_tokens === 61 &&
    c1.usage.prompt_tokens_details?.cached_tokens === 0, JSON.stringify(c1.usage));
  check("completion fingerprint", typeof c1.system_fingerprint === "string" && c1.model === MODEL);

  // completions streaming = non-streaming
  const cs = await client.completions.create({ model: MODEL, prompt: "", max_tokens: 60, temperature: 0, stream: true });
  let ctext = "";
  let cfinish = null;
  for await (const ch of cs) { ctext += ch.choices[0]?.text ?? ""; cfinish = ch.choices[0]?.finish_reason ?? cfinish; }
  check("completion stream = non-stream", ctext === goldenText && cfinish === "length", JSON.stringify(ctext));

  // stop sequence across tokens, text released up to it
  const st = await client.completions.create({ model: MODEL, prompt: "", max_tokens: 60, temperature: 0, stop: [" girl", "zzz"] });
  check("stop", st.choices[0].finish_reason === "stop" && st.choices[0].text === goldenText.split(" girl")[0],
    JSON.stringify(st.choices[0]));
  const st2 = await client.completions.create({ model: MODEL, prompt: "", max_tokens: 60, temperature: 0, stop: "ttle", stream: true });
  let t2 = "";
  for await (const ch of st2) t2 += ch.choices[0]?.text ?? "";
  check("stop stream (mid-token)", t2 === goldenText.split("ttle")[0], JSON.stringify(t2));

  // max_tokens -> length
  const ml = await client.chat.completions.create({ model: MODEL, messages: [{ role: "user", content: "Hello" }], max_tokens: 5 });
  check("chat max_tokens", ml.choices[0].finish_reason === "length" && ml.usage.completion_tokens === 5);
  check("chat object", ml.object === "chat.completion" && ml.id.startsWith("chatcmpl-") &&
    ml.choices[0].message.role === "assistant" && typeof ml.choices[0].message.content === "string");
  const mct = await client.chat.completions.create({ model: MODEL, messages: [{ role: "user", content: "Hello" }], max_completion_tokens: 3 });
  check("max_completion_tokens", mct.usage.completion_tokens === 3);

  // chat streaming with include_usage
  const msgs = [{ role: "system", content: "Tell a story." }, { role: "user", content: [{ type: "text", text: "Once" }] }];
  const ns = await client.chat.completions.create({ model: MODEL, messages: msgs, max_tokens: 20, temperature: 0 });
  const s = await client.chat.completions.create({ model: MODEL, messages: msgs, max_tokens: 20, temperature: 0,
    stream: true, stream_options: { include_usage: true } });
  const chunks = [];
  for await (const ch of s) chunks.push(ch);
  const ids = new Set(chunks.map((c) => c.id)), created = new Set(chunks.map((c) => c.created));
  check("stream same id/created", ids.size === 1 && created.size === 1 && chunks[0].object === "chat.completion.chunk");
  check("stream first delta role", chunks[0].choices[0].delta.role === "assistant" && chunks[0].choices[0].delta.content === "");
  const last = chunks[chunks.length - 1];
  check("stream usage chunk", last.choices.length === 0 && last.usage?.completion_tokens === 20 &&
    last.usage.prompt_tokens === ns.usage.prompt_tokens, JSON.stringify(last));
  check("stream usage null before", chunks.slice(0, -1).every((c) => c.usage === null));
  const fin = chunks[chunks.length - 2];
  check("stream finish chunk", fin.choices[0].finish_reason === "length" && Object.keys(fin.choices[0].delta).length === 0);
  const streamed = chunks.map((c) => c.choices[0]?.delta?.content ?? "").join("");
  check("stream text = non-stream text", streamed === ns.choices[0].message.content, `${JSON.stringify(streamed)} vs ${JSON.stringify(ns.choices[0].message.content)}`);
  const s2 = await client.chat.completions.create({ model: MODEL, messages: msgs, max_tokens: 3, stream: true });
  const c2 = [];
  for await (const ch of s2) c2.push(ch);
  check("no usage unless asked", c2.every((c) => c.usage === undefined || c.usage === null) && c2.every((c) => c.choices.length === 1));

  // the SDK's stream helper
  const helper = client.chat.completions.stream({ model: MODEL, messages: msgs, max_tokens: 20, temperature: 0 });
  let deltas = "";
  helper.on("content", (d) => { deltas += d; });
  const final = await helper.finalChatCompletion();
  check("stream() helper", final.choices[0].message.content === ns.choices[0].message.content && deltas === streamed);

  // seed determinism
  const sd = (seed) => client.completions.create({ model: MODEL, prompt: "Once upon a time", max_tokens: 30, temperature: 1, seed });
  const [a, b, c] = await Promise.all([sd(42), sd(42), sd(7)]);
  check("same seed same text", a.choices[0].text === b.choices[0].text);
  check("other seed other text", a.choices[0].text !== c.choices[0].text);

  // logprobs
  const lp = await client.chat.completions.create({ model: MODEL, messages: msgs, max_tokens: 8, temperature: 0, logprobs: true, top_logprobs: 3 });
  const content = lp.choices[0].logprobs?.content ?? [];
  check("logprobs per token", content.length === 8, JSON.stringify(lp.choices[0].logprobs));
  check("logprobs shape", content.every((e) => typeof e.token === "string" && e.logprob <= 0 && Array.isArray(e.bytes) &&
    e.top_logprobs.length === 3 && e.top_logprobs[0].logprob >= e.top_logprobs[1].logprob &&
    e.top_logprobs[0].token === e.token && Math.abs(e.top_logprobs[0].logprob - e.logprob) < 1e-6));
  check("logprobs tokens spell the text", content.map((e) => e.token).join("") === lp.choices[0].message.content);
  const clp = await client.completions.create({ model: MODEL, prompt: "Once", max_tokens: 4, temperature: 0, logprobs: 2 });
  const L = clp.choices[0].logprobs;
  check("completion logprobs", L && L.tokens.length === 4 && L.token_logprobs.length === 4 && L.top_logprobs.length === 4 &&
    L.text_offset[0] === 0 && L.tokens.join("") === clp.choices[0].text, JSON.stringify(L));

  // errors with the SDK's classes
  await expectError("temperature range", OpenAI.BadRequestError,
    () => client.chat.completions.create({ model: MODEL, messages: msgs, temperature: 5 }), (e) => e.param === "temperature");
  await expectError("bad role", OpenAI.BadRequestError,
    () => client.chat.completions.create({ model: MODEL, messages: [{ role: "robot", content: "x" }] }), (e) => e.param === "messages[0].role");
  await expectError("empty messages", OpenAI.BadRequestError,
    () => client.chat.completions.create({ model: MODEL, messages: [] }));
  await expectError("image part unsupported", OpenAI.BadRequestError,
    () => client.chat.completions.create({ model: MODEL, messages: [{ role: "user", content: [{ type: "image_url", image_url: { url: "http://x" } }] }] }),
    (e) => e.code === "unsupported");
  // tools are served (tests/peers/tools-sdk.mjs); the deprecated functions API is refused
  await expectError("functions unsupported", OpenAI.BadRequestError,
    () => client.chat.completions.create({ model: MODEL, messages: msgs, functions: [{ name: "f" }] }),
    (e) => e.code === "unsupported" && e.param === "functions");
  await expectError("n > 16", OpenAI.BadRequestError,
    () => client.chat.completions.create({ model: MODEL, messages: msgs, n: 17 }), (e) => e.param === "n");
  await expectError("stop > 4", OpenAI.BadRequestError,
    () => client.completions.create({ model: MODEL, prompt: "x", stop: ["a", "b", "c", "d", "e"] }), (e) => e.param === "stop");
  await expectError("logit_bias range", OpenAI.BadRequestError,
    () => client.completions.create({ model: MODEL, prompt: "x", logit_bias: { "99999": 1 } }), (e) => e.param === "logit_bias");
  await expectError("context length", OpenAI.BadRequestError,
    () => client.completions.create({ model: MODEL, prompt: "hello world ".repeat(300) }), (e) => e.code === "context_length_exceeded");
  await expectError("unknown model", OpenAI.NotFoundError,
    () => client.chat.completions.create({ model: "gpt-4o", messages: msgs }),
    (e) => e.param === "model" && e.code === "model_not_found" && e.type === "invalid_request_error");
  await expectError("unknown route", OpenAI.NotFoundError, () => client.models.retrieve("nope"));
  const bad = new OpenAI({ apiKey: "wrong", baseURL: base, maxRetries: 0 });
  await expectError("wrong key", OpenAI.AuthenticationError,
    () => bad.chat.completions.create({ model: MODEL, messages: msgs }));
  // logit_bias forces a token
  const fb = await client.completions.create({ model: MODEL, prompt: "", max_tokens: 3, temperature: 0, logit_bias: { "400": 100 } });
  const fbl = await client.completions.create({ model: MODEL, prompt: "", max_tokens: 3, temperature: 0, logprobs: 0, logit_bias: { "400": 100 } });
  check("logit_bias forces", fb.choices[0].text === fbl.choices[0].text && new Set(fbl.choices[0].logprobs.tokens).size === 1);

  // queue full -> 429 RateLimitError
  const port2 = await startDaemon(["--parallel", "1", "--queue", "1"]);
  const busy = new OpenAI({ apiKey: "x", baseURL: `http://127.0.0.1:${port2}/v1`, maxRetries: 0 });
  const flood = await Promise.allSettled(Array.from({ length: 6 }, () =>
    busy.completions.create({ model: MODEL, prompt: "Once", max_tokens: 150, temperature: 0 })));
  const limited = flood.filter((r) => r.status === "rejected" && r.reason instanceof OpenAI.RateLimitError).length;
  const ok = flood.filter((r) => r.status === "fulfilled").length;
  check("queue full -> RateLimitError", limited >= 1 && ok >= 2 && limited + ok === 6,
    `limited ${limited} ok ${ok}: ${flood.map((r) => r.status === "rejected" ? String(r.reason) : "ok").join(" / ")}`);
}

try {
  await main();
} catch (e) {
  failed++;
  console.log(`FAIL exception ${e?.stack ?? e}`);
} finally {
  for (const d of daemons) d.kill("SIGTERM");
}
console.log(`RESULT sdk-conformance: ${passed} passed, ${failed} failed`);
process.exit(failed ? 1 : 0);
