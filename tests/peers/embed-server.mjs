// tests/peers/embed-server.mjs: /v1/embeddings beside generation, its raw
// HTTP edges, and /tokenize + /detokenize, against a real daemon.
//
//   node tests/peers/embed-server.mjs path/to/strata
//
// 1. Concurrency (stories260K copied with pooling "last", --parallel 4):
//    three greedy chat streams and six embeddings requests (one to four
//    inputs each) at once, through the openai SDK: every stream's text and
//    every vector equal the ones each request gets alone (nothing lost,
//    nothing mixed up between sequences sharing steps).
// 2. Edges, raw fetch: wrong types, empty input, bad ids, too long, bad
//    encoding_format / dimensions, unknown model, stream, too many inputs,
//    a model without a pooling type; each a 400/404/405 with OpenAI's error
//    shape and error.param naming the field; the daemon still answers after.
// 3. /tokenize and /detokenize on models with the llama-spm and gpt-2
//    vocabularies (`strata gguf synth --vocab-from`): ids equal the fixtures'
//    .out (add_special false, parse_special false, as the tokenizer tests);
//    gpt-2 round trips exactly (detokenize(tokenize(x)) == x) and its
//    with_pieces pieces concatenate to x; bad ids name their index.
// Prints `RESULT embed-server: N passed, M failed`.
import {spawnSync} from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import OpenAI from "openai";
import {startDaemon} from "./strata-daemon.mjs";
import {readInp} from "./tok-corpus.mjs";

const strata = process.argv[2];
const shared = process.env.STRATA_SHARED_DIR || "../shared";
const stories = path.join(shared, "models", "stories260K.gguf");
const vocabDir = path.join(shared, "fixtures", "vocab");
if (!fs.existsSync(stories)) {
  console.log(`SKIP: ${stories} not found (set STRATA_SHARED_DIR)`);
  process.exit(77);
}
let passed = 0, failed = 0;
function check(ok, what) {
  if (ok) passed++;
  else { failed++; console.log(`FAIL ${what}`); }
}
const dir = fs.mkdtempSync(path.join(os.tmpdir(), "strata-embed-srv-"));
const spawned = [];
function strataRun(args) {
  const r = spawnSync(strata, args, {encoding: "utf8"});
  if (r.status !== 0) console.log(`strata ${args.join(" ")}\n${r.stderr}`);
  return r.status === 0;
}
const same = (a, b) => a.length === b.length && a.every((x, i) => x === b[i]);
// SIGTERM drains; exit 0 also says the sanitizers found nothing (a leak
// report makes the ASan build exit non-zero)
async function stop(d, what) {
  d.p.kill("SIGTERM");
  const code = await new Promise((r) => d.p.once("exit", (c) => r(c)));
  check(code === 0, `${what}: daemon exit ${code}\n${d.log().slice(-3000)}`);
}
async function post(base, route, body) {
  const r = await fetch(`${base}${route}`, {method: "POST",
    body: typeof body === "string" ? body : JSON.stringify(body)});
  let j = null;
  try { j = await r.json(); } catch { /* not JSON */ }
  return {status: r.status, j};
}
function expectError(res, status, param, what) {
  const e = res.j && res.j.error;
  check(res.status === status && e && typeof e.message === "string" && e.message.length > 0 &&
        typeof e.type === "string" && (param === undefined || e.param === param),
        `${what}: got ${res.status} ${JSON.stringify(res.j)} (want ${status} param ${param})`);
}

try {
  const last = path.join(dir, "stories-last.gguf");
  check(strataRun(["gguf", "quantize", "--pooling", "last", stories, last, "f32"]), "copy with pooling");

  // ---- 1. concurrency -----------------------------------------------------------------
  {
    const d = await startDaemon(strata, last, ["--parallel", "4", "-c", "512"], spawned);
    const base = `http://127.0.0.1:${d.port}`;
    const client = new OpenAI({baseURL: `${base}/v1`, apiKey: "unused", maxRetries: 0});
    const model = "stories-last";
    const chats = ["Once upon a time", "Lily and Ben went to the park", "The cat"];
    const embeds = [["A dog."], ["The sun was hot.", "Tim ran fast."],
                    ["She had a red ball.", "It was a sunny day.", "Mom said no.", "They played."],
                    ["Ben liked cake."], [[1, 403, 407]], ["Once upon a time, there was a girl."]];
    const chat = async (p) => {
      const s = await client.chat.completions.create({model, stream: true, temperature: 0,
        max_tokens: 40, messages: [{role: "user", content: p}]});
      let t = "", fin = null;
      for await (const c of s) {
        t += c.choices[0]?.delta?.content ?? "";
        fin = c.choices[0]?.finish_reason ?? fin;
      }
      return {t, fin};
    };
    const embed = async (input) =>
      (await client.embeddings.create({model, input, encoding_format: "float"})).data.map((x) => x.embedding);
    const seqChat = [], seqEmb = [];
    for (const p of chats) seqChat.push(await chat(p));
    for (const e of embeds) seqEmb.push(await embed(e));
    for (let round = 0; round < 2; round++) {
      const all = await Promise.all([...chats.map(chat), ...embeds.map(embed)]);
      for (let i = 0; i < chats.length; i++)
        check(all[i].t === seqChat[i].t && all[i].fin === seqChat[i].fin && all[i].t.length > 0,
              `round ${round}: chat ${i} concurrent = alone (${JSON.stringify(all[i])} vs ${JSON.stringify(seqChat[i])})`);
      for (let i = 0; i < embeds.length; i++) {
        const got = all[chats.length + i];
        check(got.length === embeds[i].length && got.every((v, k) => same(v, seqEmb[i][k])),
              `round ${round}: embeddings ${i} concurrent = alone`);
      }
    }
    // the inputs of one request share steps: 8 short inputs, 4 sequences,
    // every prompt token counted once
    const metric = async (re) => {
      const t = await (await fetch(`${base}/metrics`)).text();
      const m = t.match(re);
      return m ? Number(m[1]) : NaN;
    };
    const settle = () => new Promise((r) => setTimeout(r, 100)); /* stats follow each step */
    await settle();
    const steps0 = await metric(/^strata_sched_steps_total (\d+)/m);
    const pf0 = await metric(/^strata_sched_step_tokens_total\{kind="prefill"\} (\d+)/m);
    const eight = await client.embeddings.create({model, encoding_format: "float",
      input: ["A cat.", "A dog.", "The sun.", "Mom.", "Tim ran.", "Red ball.", "Big tree.", "The end."]});
    await settle();
    const dSteps = (await metric(/^strata_sched_steps_total (\d+)/m)) - steps0;
    const dPf = (await metric(/^strata_sched_step_tokens_total\{kind="prefill"\} (\d+)/m)) - pf0;
    check(dSteps >= 2 && dSteps <= 3, `8 inputs over 4 sequences took ${dSteps} steps (want 2-3)`);
    // usage counts every input token; the steps compute fewer where LAST
    // pooling reused cached prefix blocks, but always each input's last one
    check(dPf >= 8 && dPf <= eight.usage.prompt_tokens,
          `prefill tokens ${dPf} within [8, usage ${eight.usage.prompt_tokens}]`);
    const st = await (await fetch(`${base}/status`)).json();
    check(st.sessions.active === 0 && st.kv_blocks.used === 0,
          `/status after the load: no session, no KV block held (${JSON.stringify(st.sessions)} ${JSON.stringify(st.kv_blocks)})`);

    // ---- 2. edges ---------------------------------------------------------------------
    const E = (body) => post(base, "/v1/embeddings", body);
    expectError(await E({model}), 400, "input", "no input");
    expectError(await E({model, input: ""}), 400, "input", "empty string");
    expectError(await E({model, input: []}), 400, "input", "empty array");
    expectError(await E({model, input: [[]]}), 400, "input[0]", "empty id list");
    expectError(await E({model, input: ["a", ""]}), 400, "input[1]", "empty second string");
    expectError(await E({model, input: 42}), 400, "input", "number input");
    expectError(await E({model, input: {a: 1}}), 400, "input", "object input");
    expectError(await E({model, input: [1, "a"]}), 400, "input[1]", "string among ids");
    expectError(await E({model, input: ["a", 3]}), 400, "input[1]", "number among strings");
    expectError(await E({model, input: [[1, 2], "x"]}), 400, "input[1]", "string among id lists");
    expectError(await E({model, input: [1, 1.5]}), 400, "input[1]", "fractional id");
    expectError(await E({model, input: [-1]}), 400, "input[0]", "negative id");
    expectError(await E({model, input: [[1], [2, 512]]}), 400, "input[1][1]", "id = n_vocab");
    expectError(await E({model, input: [1, 2 ** 40]}), 400, "input[1]", "huge id");
    const long = await E({model, input: "Once upon a time ".repeat(300)});
    expectError(long, 400, "input", "text longer than the context");
    check(long.j?.error?.code === "context_length_exceeded" &&
          /maximum context length is 512 tokens/.test(long.j?.error?.message),
          `too long: OpenAI's code and message (${JSON.stringify(long.j)})`);
    expectError(await E({model, input: [[1, 2], Array(600).fill(5)]}), 400, "input[1]", "ids longer than the context");
    expectError(await E({model, input: Array(513).fill(5)}), 400, "input", "513 ids, context 512");
    const full = await E({model, input: Array(512).fill(5)});
    check(full.status === 200 && full.j.usage.prompt_tokens === 512, `512 ids fill the context: ${full.status}`);
    expectError(await E({model, input: Array(2049).fill("a")}), 400, "input", "2049 inputs");
    expectError(await E({model, input: "a", encoding_format: "int8"}), 400, "encoding_format", "encoding_format int8");
    expectError(await E({model, input: "a", encoding_format: 1}), 400, "encoding_format", "encoding_format number");
    expectError(await E({model, input: "a", dimensions: 0}), 400, "dimensions", "dimensions 0");
    expectError(await E({model, input: "a", dimensions: 65}), 400, "dimensions", "dimensions > n_embd");
    expectError(await E({model, input: "a", dimensions: "8"}), 400, "dimensions", "dimensions string");
    expectError(await E({model, input: "a", user: 5}), 400, "user", "user number");
    expectError(await E({model, input: "a", stream: true}), 400, "stream", "stream");
    expectError(await E({input: "a"}), 400, "model", "no model");
    expectError(await E({model: "nope", input: "a"}), 404, "model", "unknown model");
    expectError(await E("{\"model\":"), 400, undefined, "malformed JSON");
    expectError(await E("[1,2]"), 400, undefined, "body not an object");
    const g = await fetch(`${base}/v1/embeddings`);
    check(g.status === 405, `GET /v1/embeddings: ${g.status}`);
    // SDK error classes
    try {
      await client.embeddings.create({model, input: ""});
      check(false, "SDK: empty input did not throw");
    } catch (e) {
      check(e instanceof OpenAI.BadRequestError && e.param === "input", `SDK: BadRequestError ${e}`);
    }
    // /tokenize, /detokenize edges
    const T = (body) => post(base, "/tokenize", body), D = (body) => post(base, "/detokenize", body);
    expectError(await T({}), 400, "content", "tokenize: no content");
    expectError(await T({content: 5}), 400, "content", "tokenize: content number");
    expectError(await T({content: "a", with_pieces: "yes"}), 400, "with_pieces", "tokenize: with_pieces string");
    expectError(await T({content: "a", add_special: 1}), 400, "add_special", "tokenize: add_special number");
    expectError(await D({}), 400, "tokens", "detokenize: no tokens");
    expectError(await D({tokens: "1 2"}), 400, "tokens", "detokenize: tokens string");
    expectError(await D({tokens: [1, -1]}), 400, "tokens[1]", "detokenize: negative id");
    expectError(await D({tokens: [1, 2, 512]}), 400, "tokens[2]", "detokenize: id = n_vocab");
    expectError(await D({tokens: [1, "x"]}), 400, "tokens[1]", "detokenize: string id");
    const empty = await D({tokens: []});
    check(empty.status === 200 && empty.j?.content === "", `detokenize []: ${JSON.stringify(empty.j)}`);
    const tk = await T({content: "Once upon a time", add_special: true});
    check(tk.status === 200 && tk.j.tokens[0] === 1 && tk.j.tokens.length === 5,
          `tokenize with BOS: ${JSON.stringify(tk.j)}`);
    const dt = await D({tokens: tk.j.tokens});
    check(dt.j?.content === "<s> Once upon a time", `detokenize: ${JSON.stringify(dt.j)}`);
    // a client that goes away mid-request: its inputs are dropped, the
    // daemon goes on (and frees everything: exit 0 below)
    const many = Array.from({length: 48}, (_, i) => `Story ${i}: ` + "the dog ran and ran. ".repeat(20));
    const ac = new AbortController();
    const gone = fetch(`${base}/v1/embeddings`, {method: "POST", signal: ac.signal,
      body: JSON.stringify({model, input: many})}).then(() => "answered", () => "aborted");
    await new Promise((r) => setTimeout(r, 30));
    ac.abort();
    check((await gone) === "aborted", "abort mid-request");
    const met = await (await fetch(`${base}/metrics`)).text();
    check(/route="\/v1\/embeddings"/.test(met) && /route="\/tokenize"/.test(met),
          "/metrics counts the new routes");
    // still serving
    const after = await client.embeddings.create({model, input: chats[0]});
    check(after.data[0].embedding.length === 64, "embeddings after the edges");
    check((await fetch(`${base}/health`)).status === 200, "/health after the edges");
    await stop(d, "concurrency and edges");
  }
  // SIGTERM with an embeddings request running: it is answered (drain), exit 0
  {
    const d = await startDaemon(strata, last, ["--parallel", "2"], spawned);
    const base = `http://127.0.0.1:${d.port}`;
    const input = Array.from({length: 24}, (_, i) => `Tale ${i}: ` + "a cat sat. ".repeat(4));
    const pending = post(base, "/v1/embeddings", {model: "stories-last", input});
    for (let t = 0; t < 500; t++) { /* until the scheduler holds it */
      const st = await (await fetch(`${base}/status`)).json();
      if (st.sessions.active > 0) break;
      await new Promise((r) => setTimeout(r, 2));
    }
    const exited = stop(d, "drain");
    const r = await pending;
    check(r.status === 200 && r.j.data.length === 24, `drain: the running request is answered (${r.status} ${JSON.stringify(r.j).slice(0, 300)})`);
    await exited;
  }
  // a model without a pooling type
  {
    const d = await startDaemon(strata, stories, [], spawned);
    const base = `http://127.0.0.1:${d.port}`;
    const r = await post(base, "/v1/embeddings", {model: "stories260K", input: "hello"});
    expectError(r, 400, "model", "no pooling type");
    check(r.j?.error?.code === "unsupported" && /pooling/.test(r.j?.error?.message),
          `no pooling type: says so (${JSON.stringify(r.j)})`);
    await stop(d, "no pooling type");
  }

  // ---- 3. /tokenize and /detokenize against the fixtures --------------------------------
  for (const v of ["llama-spm", "gpt-2"]) {
    const vocab = path.join(vocabDir, `ggml-vocab-${v}.gguf`);
    const file = path.join(dir, `tok-${v}.gguf`);
    if (!strataRun(["gguf", "synth", "--arch", "llama", "--n-embd", "32", "--n-layer", "1",
                    "--n-head", "2", "--n-head-kv", "2", "--n-ff", "64", "--ctx", "256", "--type", "f32",
                    "--vocab-from", vocab, "--out", file])) {
      check(false, `synth --vocab-from ${v}`);
      continue;
    }
    const d = await startDaemon(strata, file, [], spawned);
    const base = `http://127.0.0.1:${d.port}`;
    const inputs = readInp(vocab + ".inp");
    const outs = fs.readFileSync(vocab + ".out", "utf8").split("\n");
    let good = 0, round = 0, pieces = 0;
    for (let i = 0; i < inputs.length; i++) {
      const want = outs[i].trim() === "" ? [] : outs[i].trim().split(/\s+/).map(Number);
      const r = await post(base, "/tokenize", {content: inputs[i], add_special: false, parse_special: false});
      if (r.status === 200 && same(r.j.tokens, want)) good++;
      else if (inputs.length - good < 4) console.log(`${v} #${i}: ${JSON.stringify(r.j)} != ${JSON.stringify(want)}`);
      if (v !== "gpt-2") continue;
      const back = await post(base, "/detokenize", {tokens: want});
      if (back.j?.content === inputs[i]) round++;
      else console.log(`${v} #${i} round trip: ${JSON.stringify(back.j)} != ${JSON.stringify(inputs[i])}`);
      const wp = await post(base, "/tokenize", {content: inputs[i], with_pieces: true, parse_special: false});
      const pcs = wp.j?.tokens ?? [];
      const bytes = Buffer.concat(pcs.map((p) => typeof p.piece === "string" ? Buffer.from(p.piece, "utf8") : Buffer.from(p.piece)));
      if (same(pcs.map((p) => p.id), want) && bytes.toString("utf8") === inputs[i]) pieces++;
      else console.log(`${v} #${i} pieces: ${JSON.stringify(pcs)}`);
    }
    check(inputs.length > 10 && good === inputs.length, `${v}: /tokenize = fixture ids ${good}/${inputs.length}`);
    if (v === "gpt-2") {
      check(round === inputs.length, `${v}: detokenize(ids) = input ${round}/${inputs.length}`);
      check(pieces === inputs.length, `${v}: with_pieces ${pieces}/${inputs.length}`);
    }
    console.log(`${v}: ${good}/${inputs.length} fixture inputs tokenized as expected`);
    await stop(d, `${v} vocabulary`);
  }
} catch (e) {
  check(false, `exception: ${e.stack || e}`);
} finally {
  for (const p of spawned) if (p.exitCode === null) p.kill("SIGKILL");
  fs.rmSync(dir, {recursive: true, force: true});
}
console.log(`RESULT embed-server: ${passed} passed, ${failed} failed`);
process.exit(failed ? 1 : 0);
