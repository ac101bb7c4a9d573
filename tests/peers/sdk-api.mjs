// tests/peers/sdk-api.mjs: n > 1, /v1/completions prompt lists, token-id
// prompts, echo and /v1/models through the official openai npm SDK against
// the real `strata serve` daemon (stories260K). Usage: node sdk-api.mjs
// <strata binary>. Prints `RESULT sdk-api: N passed, M failed`; exits 1 on
// any failure.
//
// The KV sharing of n > 1 is checked on /status: an n = 4 request computes
// its prompt once plus one token for each further choice, and
// shared_prompt_tokens grows by 3 x (prompt - 1).
import { startDaemon } from "./strata-daemon.mjs";
import { statSync } from "node:fs";
import OpenAI from "openai";

const strata = process.argv[2];
const shared = process.env.STRATA_SHARED_DIR || "../shared";
const modelPath = `${shared}/models/stories260K.gguf`;
const MODEL = "stories260K";
const PROMPT = "Once upon a time there was a little girl named Lily. She loved to";

let passed = 0, failed = 0;
function check(name, ok, detail = "") {
  if (ok) passed++;
  else { failed++; console.log(`FAIL ${name} ${typeof detail === "string" ? detail : JSON.stringify(detail)}`); }
}
async function expectError(name, cls, fn, extra = () => true) {
  try {
    await fn();
    check(name, false, "no error raised");
  } catch (e) {
    check(name, e instanceof cls && extra(e), `${e?.constructor?.name} ${e?.status} ${e?.message}`);
  }
}
const byIndex = (choices) => [...choices].sort((a, b) => a.index - b.index);

const daemons = [];
async function main() {
  const d = await startDaemon(strata, modelPath, ["--parallel", "4"], daemons);
  const base = `http://127.0.0.1:${d.port}`;
  const client = new OpenAI({ apiKey: "x", baseURL: `${base}/v1`, maxRetries: 0 });
  const status = async () => (await fetch(`${base}/status`)).json();
  const gen = { max_tokens: 10, temperature: 1, ignore_eos: true };

  // n = 3: choice i is the n = 1 answer with seed + i
  const three = await client.completions.create({ model: MODEL, prompt: PROMPT, n: 3, seed: 11, ...gen });
  const singles = [];
  for (let i = 0; i < 3; i++)
    singles.push((await client.completions.create({ model: MODEL, prompt: PROMPT, seed: 11 + i, ...gen })).choices[0].text);
  check("completions n=3: 3 choices", three.choices.length === 3 && byIndex(three.choices).every((c, i) => c.index === i));
  check("completions n=3: choice i = seed + i", JSON.stringify(byIndex(three.choices).map((c) => c.text)) === JSON.stringify(singles),
    { got: three.choices.map((c) => c.text), singles });
  check("completions n=3: usage", three.usage.completion_tokens === 30 && three.usage.total_tokens === three.usage.prompt_tokens + 30,
    three.usage);

  // streaming n = 3 through the SDK's iterator: the same texts by index
  const st = await client.completions.create({ model: MODEL, prompt: PROMPT, n: 3, seed: 11, stream: true,
    stream_options: { include_usage: true }, ...gen });
  const acc = ["", "", ""], fin = [0, 0, 0];
  let usage = null;
  for await (const ch of st) {
    for (const c of ch.choices) { acc[c.index] += c.text; if (c.finish_reason) fin[c.index]++; }
    if (ch.usage) usage = ch.usage;
  }
  check("completions stream n=3 = non-stream", JSON.stringify(acc) === JSON.stringify(singles), { acc, singles });
  check("completions stream n=3: one finish each", fin.every((f) => f === 1), fin);
  check("completions stream n=3: usage summed", usage?.completion_tokens === 30, usage);

  // chat n = 2, stream and not
  const msgs = [{ role: "user", content: "Tell me a story" }];
  const c2 = await client.chat.completions.create({ model: MODEL, messages: msgs, n: 2, seed: 3, max_tokens: 8 });
  check("chat n=2: two choices", c2.choices.length === 2 && byIndex(c2.choices).every((c, i) => c.index === i &&
    c.message.role === "assistant" && typeof c.message.content === "string"), c2.choices);
  const cs = await client.chat.completions.create({ model: MODEL, messages: msgs, n: 2, seed: 3, max_tokens: 8, stream: true });
  const cacc = ["", ""];
  for await (const ch of cs) for (const c of ch.choices) cacc[c.index] += c.delta?.content ?? "";
  check("chat stream n=2 = non-stream", JSON.stringify(cacc) === JSON.stringify(byIndex(c2.choices).map((c) => c.message.content)),
    { cacc, c2: c2.choices.map((c) => c.message.content) });
  // the SDK's stream helper accumulates choices by index
  const runner = client.chat.completions.stream({ model: MODEL, messages: msgs, n: 2, seed: 3, max_tokens: 8 });
  const final = await runner.finalChatCompletion();
  check("chat .stream() helper n=2", JSON.stringify(byIndex(final.choices).map((c) => c.message.content)) === JSON.stringify(cacc),
    final.choices);

  // KV sharing, seen on /status
  const s0 = await status();
  const four = await client.completions.create({ model: MODEL, prompt: "Tom had a big red ball and a small blue car. One day he",
    n: 4, max_tokens: 2, ignore_eos: true, cache_prompt: false });
  let s1 = await status();
  // /status is published after the step that sent the answer: wait for it
  for (let t = 0; t < 250 && s1.tokens.generated - s0.tokens.generated < 8; t++) {
    await new Promise((r) => setTimeout(r, 20));
    s1 = await status();
  }
  const p = four.usage.prompt_tokens;
  check("n=4: prompt computed once + 1 a choice", s1.tokens.prompt - s0.tokens.prompt === p + 3, { p, s0: s0.tokens, s1: s1.tokens });
  check("n=4: 3 x (prompt - 1) shared", s1.shared_prompt_tokens - s0.shared_prompt_tokens === 3 * (p - 1),
    { p, a: s0.shared_prompt_tokens, b: s1.shared_prompt_tokens });

  // a list of prompts x n: index = prompt * n + j
  const lst = await client.completions.create({ model: MODEL, prompt: ["Once upon a time", "The dog"], n: 2, seed: 21, ...gen });
  const b1 = await client.completions.create({ model: MODEL, prompt: "The dog", seed: 23, ...gen });
  check("2 prompts x n=2: 4 choices", lst.choices.length === 4 && byIndex(lst.choices).every((c, i) => c.index === i));
  check("2 prompts: index 3 = prompt 1 with seed + 3", byIndex(lst.choices)[3].text === (await client.completions.create({
    model: MODEL, prompt: "The dog", seed: 24, ...gen })).choices[0].text);
  check("2 prompts: index 2 = prompt 1 with seed + 2", byIndex(lst.choices)[2].text === b1.choices[0].text);

  // token ids (BOS + "Once upon a time", as `strata tokenize` gives them)
  const ids = [1, 403, 407, 261, 378];
  const t = await client.completions.create({ model: MODEL, prompt: "Once upon a time", seed: 5, ...gen });
  const ti = await client.completions.create({ model: MODEL, prompt: ids, seed: 5, ...gen });
  check("token-id prompt = its text", ti.choices[0].text === t.choices[0].text && ti.usage.prompt_tokens === 5, ti);
  const tii = await client.completions.create({ model: MODEL, prompt: [ids, ids.slice(0, 3)], seed: 5, ...gen });
  check("array of token arrays: 2 choices, first = the text's", tii.choices.length === 2 &&
    byIndex(tii.choices)[0].text === t.choices[0].text, tii.choices);
  await expectError("id outside the vocabulary", OpenAI.BadRequestError,
    () => client.completions.create({ model: MODEL, prompt: [ids, [1, 2, 3, 99999]] }), (e) => e.param === "prompt[1][3]");

  // echo
  const e = await client.completions.create({ model: MODEL, prompt: "Once upon a time", seed: 5, echo: true, ...gen });
  check("echo: prompt + completion", e.choices[0].text === "Once upon a time" + t.choices[0].text, e.choices[0].text);
  const es = await client.completions.create({ model: MODEL, prompt: "Once upon a time", seed: 5, echo: true, stream: true, ...gen });
  let etext = "";
  for await (const ch of es) etext += ch.choices[0]?.text ?? "";
  check("echo stream = non-stream", etext === e.choices[0].text, etext);
  await expectError("echo + logprobs", OpenAI.BadRequestError,
    () => client.completions.create({ model: MODEL, prompt: "x", echo: true, logprobs: 2 }), (e) => e.param === "echo" && e.code === "unsupported");

  // /v1/models through the SDK
  const list = [];
  for await (const m of client.models.list()) list.push(m);
  check("models.list: one model", list.length === 1 && list[0].id === MODEL && list[0].object === "model" && list[0].owned_by === "strata", list);
  check("models: created = the file's mtime", list[0].created === Math.floor(statSync(modelPath).mtimeMs / 1000), list[0].created);
  const meta = list[0].meta ?? {};
  check("models: meta", meta.architecture === "llama" && meta.n_ctx === 2048 && meta.size === statSync(modelPath).size &&
    meta.n_params > 0 && typeof meta.quantization === "string" && meta.quant_mix.includes(meta.quantization + ":"), meta);
  const one = await client.models.retrieve(MODEL);
  check("models.retrieve", one.id === MODEL && one.created === list[0].created && one.meta?.n_params === meta.n_params, one);
  await expectError("models.retrieve unknown", OpenAI.NotFoundError, () => client.models.retrieve("nope"),
    (e) => e.param === "model");
}

try {
  await main();
} catch (e) {
  failed++;
  console.log(`FAIL exception ${e?.stack ?? e}`);
} finally {
  for (const p of daemons) p.kill("SIGTERM");
}
console.log(`RESULT sdk-api: ${passed} passed, ${failed} failed`);
process.exit(failed ? 1 : 0);
