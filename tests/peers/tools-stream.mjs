// tests/peers/tools-stream.mjs: the tool-call and reasoning output of
// server/openai-chat-out.c as the official openai SDK reads it. For each
// template family, model text (split into 1-3 byte pieces, as tokens come)
// goes through the server's output code (prompt-dump --output: the real
// prompt, the real parser and chunk builders); a local HTTP server replays
// those chunks / that body to the SDK, which must accumulate the stream
// (stream().finalChatCompletion()) into the calls the text holds, and the
// non-stream body must say the same. Then the SDK's runTools loop runs one
// round trip: our call, its function run with the parsed arguments, and the
// follow-up request the SDK builds (assistant tool_calls + tool message)
// accepted by the server's request path (prompt-dump's prompt mode).
// Usage: node tools-stream.mjs PROMPT_DUMP. Prints `RESULT tools-stream: N passed, M failed`.
import { execFileSync } from "node:child_process";
import { createServer } from "node:http";
import { mkdtempSync, writeFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { isDeepStrictEqual } from "node:util";
import OpenAI from "openai";

const dump = process.argv[2];
const shared = process.env.STRATA_SHARED_DIR || "../shared";
const model = `${shared}/models/llama-2-tiny-random.gguf`;
const T = (n) => `${shared}/fixtures/templates/${n}.jinja`;
const dir = mkdtempSync(`${tmpdir()}/strata-tools-stream-`);

let passed = 0, failed = 0;
function check(name, ok, detail = "") {
  if (ok) passed++;
  else { failed++; console.log(`FAIL ${name} ${detail}`); }
}

const W = { type: "function", function: { name: "get_weather", description: "Weather",
  parameters: { type: "object", properties: { city: { type: "string", description: "City" } }, required: ["city"] } } };
const A = { type: "function", function: { name: "add", description: "Add", parameters: { type: "object",
  properties: { a: { type: "number", description: "A" }, b: { type: "number", description: "B" } },
  required: ["a", "b"] } } };
const DS = (s) => `<\uff5c${s}\uff5c>`;
const CASES = [
  { t: "Qwen-Qwen2.5-7B-Instruct", text: "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>\n<tool_call>\n{\"name\": \"add\", \"arguments\": {\"a\": 1, \"b\": 2}}\n</tool_call>",
    calls: [["get_weather", { city: "Paris" }], ["add", { a: 1, b: 2 }]], content: "Let me check.\n" },
  { t: "meta-llama-Llama-3.1-8B-Instruct", text: "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Oslo\"}}",
    calls: [["get_weather", { city: "Oslo" }]], content: null },
  { t: "mistralai-Mistral-Nemo-Instruct-2407", text: "[TOOL_CALLS][{\"name\": \"add\", \"arguments\": {\"a\": 2, \"b\": 3}, \"id\": \"a1b2c3d4e\"}]",
    calls: [["add", { a: 2, b: 3 }]], content: null },
  { t: "meetkai-functionary-medium-v3.2", text: "all\nChecking.>>>get_weather\n{\"city\": \"Rome\"}",
    calls: [["get_weather", { city: "Rome" }]], content: "Checking." },
  { t: "meetkai-functionary-medium-v3.1", text: "<function=add>{\"a\": 5, \"b\": 6}</function>",
    calls: [["add", { a: 5, b: 6 }]], content: null },
  { t: "CohereForAI-c4ai-command-r-plus-tool_use", text: "Action: ```json\n[\n    {\n        \"tool_name\": \"get_weather\",\n        \"parameters\": {\"city\": \"Lima\"}\n    }\n]\n```",
    calls: [["get_weather", { city: "Lima" }]], content: null },
  { t: "CohereForAI-c4ai-command-r7b-12-2024-tool_use", text: "<|START_THINKING|>Need the weather.<|END_THINKING|><|START_ACTION|>[\n    {\"tool_call_id\": \"0\", \"tool_name\": \"get_weather\", \"parameters\": {\"city\": \"Kyiv\"}}\n]<|END_ACTION|>",
    calls: [["get_weather", { city: "Kyiv" }]], content: null, reasoning: "Need the weather." },
  { t: "fireworks-ai-llama-3-firefunction-v2", text: " functools[{\"name\": \"add\", \"arguments\": {\"a\": 7, \"b\": 8}}]",
    calls: [["add", { a: 7, b: 8 }]], content: " ",
    // this template reads the tools as `functions` (JSON text) and `datetime`: kwargs carry them
    kwargs: { functions: JSON.stringify([W.function, A.function]), datetime: "2026-01-01" } },
  { t: "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B", text: "The user wants weather.\n</think>\n\n" + DS("tool\u2581calls\u2581begin") + DS("tool\u2581call\u2581begin") + "function" + DS("tool\u2581sep") + "get_weather\n```json\n{\"city\": \"Cairo\"}\n```" + DS("tool\u2581call\u2581end") + DS("tool\u2581calls\u2581end"),
    calls: [["get_weather", { city: "Cairo" }]], content: null, reasoning: "The user wants weather.\n" },
  { t: "Qwen-Qwen2.5-7B-Instruct", text: "No tool needed: <tool_call> is just text here.", calls: [],
    content: "No tool needed: <tool_call> is just text here." },
];

// model text split as tokens split it: pieces of 1, 2, 3 bytes in turn (by code point)
function pieces(text) {
  const cps = [...text], out = [];
  for (let i = 0, k = 1; i < cps.length; k = k % 3 + 1) { out.push(cps.slice(i, i + k).join("")); i += k; }
  return out;
}

function produce(tmpl, body, text) {
  writeFileSync(`${dir}/body.json`, JSON.stringify({ ...body, model: "m" }));
  writeFileSync(`${dir}/pieces.json`, JSON.stringify(pieces(text)));
  return JSON.parse(execFileSync(dump, ["--output", model, tmpl, `${dir}/body.json`, `${dir}/pieces.json`]).toString());
}

// A local server that answers each request with the next scripted output.
function replay(script) {
  const bodies = [];
  const srv = createServer((req, res) => {
    let data = "";
    req.on("data", (d) => (data += d));
    req.on("end", () => {
      const body = JSON.parse(data);
      bodies.push(body);
      const out = script(body, bodies.length - 1);
      if (body.stream) {
        res.writeHead(200, { "content-type": "text/event-stream" });
        for (const c of out.chunks) res.write(`data: ${c}\n\n`);
        res.end("data: [DONE]\n\n");
      } else {
        res.writeHead(200, { "content-type": "application/json" });
        res.end(JSON.stringify(out.response));
      }
    });
  });
  return new Promise((ok) => srv.listen(0, "127.0.0.1", () => ok({ srv, bodies, port: srv.address().port })));
}

function sameCalls(name, got, want) {
  check(`${name}: ${want.length} calls`, (got || []).length === want.length, JSON.stringify(got));
  want.forEach(([fn, args], i) => {
    const g = got?.[i];
    let parsed;
    try { parsed = JSON.parse(g?.function?.arguments); } catch { parsed = undefined; }
    check(`${name}: call ${i}`, g?.type === "function" && g?.function?.name === fn &&
      isDeepStrictEqual(parsed, args) && typeof g?.id === "string" && g.id.length > 0, JSON.stringify(g));
  });
}

async function main() {
  const messages = [{ role: "user", content: "Weather?" }];
  {
    // parallel_tool_calls: false with tool_choice auto: the model wrote two
    // calls; the first is answered, the second dropped (stream and not)
    const c = CASES[0];
    const out = produce(T(c.t), { messages, tools: [W, A], parallel_tool_calls: false }, c.text);
    const { srv, port } = await replay(() => out);
    const client = new OpenAI({ apiKey: "x", baseURL: `http://127.0.0.1:${port}/v1`, maxRetries: 0 });
    const q = { model: "m", messages, tools: [W, A], parallel_tool_calls: false };
    const fin = await client.chat.completions.stream(q).finalChatCompletion();
    sameCalls("parallel_tool_calls false stream", fin.choices[0].message.tool_calls, c.calls.slice(0, 1));
    const r = await client.chat.completions.create(q);
    sameCalls("parallel_tool_calls false non-stream", r.choices[0].message.tool_calls, c.calls.slice(0, 1));
    check("parallel_tool_calls false: finish_reason", r.choices[0].finish_reason === "tool_calls");
    srv.close();
  }
  for (const c of CASES) {
    const extra = c.kwargs ? { chat_template_kwargs: c.kwargs } : {};
    const out = produce(T(c.t), { messages, tools: [W, A], ...extra }, c.text);
    const { srv, port } = await replay(() => out);
    const client = new OpenAI({ apiKey: "x", baseURL: `http://127.0.0.1:${port}/v1`, maxRetries: 0 });
    const name = `${c.t}${c.calls.length ? "" : " (no call)"}`;
    const fin = await client.chat.completions.stream({ model: "m", messages, tools: [W, A] }).finalChatCompletion();
    const sm = fin.choices[0].message;
    sameCalls(`${name} stream`, c.calls.length ? sm.tool_calls : [], c.calls);
    check(`${name} stream: finish_reason`, fin.choices[0].finish_reason === (c.calls.length ? "tool_calls" : "stop"));
    check(`${name} stream: content`, (sm.content ?? null) === (c.content ?? null) || (c.content === null && sm.content === ""),
      JSON.stringify(sm.content));
    const r = await client.chat.completions.create({ model: "m", messages, tools: [W, A] });
    const m = r.choices[0].message;
    sameCalls(`${name} non-stream`, c.calls.length ? m.tool_calls : [], c.calls);
    check(`${name} non-stream: content`, m.content === c.content, JSON.stringify(m.content));
    check(`${name} non-stream: no tool_calls field without calls`, c.calls.length > 0 || m.tool_calls === undefined);
    if (c.reasoning) {
      check(`${name}: reasoning_content`, m.reasoning_content === c.reasoning, JSON.stringify(m.reasoning_content));
      const rs = out.chunks.map((j) => JSON.parse(j).choices[0].delta.reasoning_content || "").join("");
      check(`${name}: delta.reasoning_content adds up`, rs === c.reasoning, JSON.stringify(rs));
    }
    // every tool_calls delta: index; the first of a call has id, type, name; later ones only arguments
    const seen = new Set();
    let shapeOk = true;
    for (const j of out.chunks) for (const tc of JSON.parse(j).choices[0].delta.tool_calls || []) {
      if (!seen.has(tc.index)) { shapeOk &&= !!tc.id && tc.type === "function" && !!tc.function?.name; seen.add(tc.index); }
      else shapeOk &&= tc.id === undefined && tc.function?.name === undefined && typeof tc.function?.arguments === "string";
    }
    check(`${name}: delta shape`, shapeOk && seen.size === c.calls.length);
    srv.close();
  }

  // runTools: the SDK runs our call and sends the follow-up, which the server accepts
  const qwen = T("Qwen-Qwen2.5-7B-Instruct");
  const first = produce(qwen, { messages, tools: [W] },
    "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>");
  const { srv, bodies, port } = await replay((body, i) => (i === 0 ? first : produce(qwen, body, "Sunny in Paris.")));
  const client = new OpenAI({ apiKey: "x", baseURL: `http://127.0.0.1:${port}/v1`, maxRetries: 0 });
  let got = null;
  const runner = client.chat.completions.runTools({ model: "m", stream: true, messages, tools: [{ type: "function",
    function: { name: "get_weather", parameters: W.function.parameters, parse: JSON.parse,
      function: (args) => { got = args; return { temp: 21 }; } } }] });
  const text = await runner.finalContent();
  check("runTools: the function got the parsed arguments", isDeepStrictEqual(got, { city: "Paris" }), JSON.stringify(got));
  check("runTools: final content", text === "Sunny in Paris.", JSON.stringify(text));
  check("runTools: two requests", bodies.length === 2);
  writeFileSync(`${dir}/follow.json`, JSON.stringify([{ ...bodies[1], model: "m" }]));
  const pr = JSON.parse(execFileSync(dump, [model, qwen, `${dir}/follow.json`]).toString())[0];
  check("runTools: the follow-up renders (tool_calls + tool message)", typeof pr.prompt === "string" &&
    pr.prompt.includes("<tool_response>") && pr.prompt.includes("\"city\": \"Paris\""), JSON.stringify(pr));
  srv.close();
}

main().catch((e) => { failed++; console.log(`FAIL exception ${e?.stack || e}`); })
  .finally(() => {
    rmSync(dir, { recursive: true, force: true });
    console.log(`RESULT tools-stream: ${passed} passed, ${failed} failed`);
    process.exitCode = failed ? 1 : 0;
  });
