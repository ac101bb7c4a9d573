// tests/peers/tools-sdk.mjs: tools, tool results, tool_choice, reasoning
// fields and assistant prefill through the official openai npm SDK against
// the real `strata serve` on ../shared/models/llama-2-tiny-random.gguf (no
// chat template: ChatML, tool calls parsed in the generic <tool_call> form).
// Random weights never write a call, so this checks the request side and
// the response shapes end to end; the parsing of calls per family is
// tests/engine/text/test-toolcall.c. Usage: node tools-sdk.mjs <strata>.
// Prints `RESULT tools-sdk: N passed, M failed`.
import { startDaemon } from "./strata-daemon.mjs";
import OpenAI from "openai";
import { mkdtempSync, writeFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";

const strata = process.argv[2];
const shared = process.env.STRATA_SHARED_DIR || "../shared";
const modelPath = `${shared}/models/llama-2-tiny-random.gguf`;
const MODEL = "llama-2-tiny-random";

let passed = 0, failed = 0;
function check(name, ok, detail = "") {
  if (ok) passed++;
  else { failed++; console.log(`FAIL ${name} ${detail}`); }
}
async function expectBad(name, fn, param, status = 400) {
  try {
    await fn();
    check(name, false, "no error raised");
  } catch (e) {
    check(name, e instanceof OpenAI.BadRequestError && e.status === status && e.param === param,
      `${e?.constructor?.name} ${e?.status} param=${e?.param} ${e?.message}`);
  }
}

const weather = { type: "function", function: { name: "get_weather", description: "Weather of a city",
  parameters: { type: "object", properties: { city: { type: "string" } }, required: ["city"] } } };
const history = [
  { role: "user", content: "Weather in Paris?" },
  { role: "assistant", content: null, tool_calls: [{ id: "call_1", type: "function",
    function: { name: "get_weather", arguments: "{\"city\":\"Paris\"}" } }] },
  { role: "tool", tool_call_id: "call_1", content: "{\"temp\":21}" },
  { role: "user", content: "And tomorrow?" },
];

// Forced calls on random weights: the grammar makes the output a call of a
// listed function whose arguments validate against its (bounded) schema.
const trip = { type: "function", function: { name: "plan_trip", description: "Plan a trip",
  parameters: { type: "object", properties: { city: { type: "string", enum: ["Paris", "Rome", "Oslo"] },
    days: { type: "integer", minimum: 1, maximum: 7 }, by_train: { type: "boolean" } },
    required: ["city", "days"] } } };
const alarm = { type: "function", function: { name: "set_alarm", description: "Set an alarm",
  parameters: { type: "object", properties: { hour: { type: "integer", minimum: 0, maximum: 23 } },
    required: ["hour"] } } };
function validTrip(a) {
  return a && ["Paris", "Rome", "Oslo"].includes(a.city) && Number.isInteger(a.days) && a.days >= 1 &&
    a.days <= 7 && (a.by_train === undefined || typeof a.by_train === "boolean") &&
    Object.keys(a).every((k) => ["city", "days", "by_train"].includes(k));
}
function validAlarm(a) {
  return a && Number.isInteger(a.hour) && a.hour >= 0 && a.hour <= 23 && Object.keys(a).length === 1;
}
async function forced(client, tag) {
  const q = { model: MODEL, temperature: 0, max_tokens: 160, messages: [{ role: "user", content: "Hello" }],
    tools: [trip, alarm] };
  for (const [choice, want] of [["required", null], [{ type: "function", function: { name: "set_alarm" } }, "set_alarm"],
                                 [{ type: "function", function: { name: "plan_trip" } }, "plan_trip"]]) {
    const label = `${tag} forced ${JSON.stringify(choice)}`;
    const r = await client.chat.completions.create({ ...q, tool_choice: choice, parallel_tool_calls: false });
    const c = r.choices[0];
    const calls = c.message.tool_calls || [];
    let args;
    try { args = JSON.parse(calls[0]?.function?.arguments); } catch { args = undefined; }
    const name = calls[0]?.function?.name;
    check(`${label}: finish_reason tool_calls`, c.finish_reason === "tool_calls", JSON.stringify(c));
    check(`${label}: one call of a listed function`, calls.length === 1 &&
      (want ? name === want : ["plan_trip", "set_alarm"].includes(name)), JSON.stringify(calls));
    check(`${label}: arguments valid against the schema`,
      name === "plan_trip" ? validTrip(args) : validAlarm(args), JSON.stringify(args));
    const fin = await client.chat.completions.stream({ ...q, tool_choice: choice, parallel_tool_calls: false })
      .finalChatCompletion();
    const sc = fin.choices[0].message.tool_calls || [];
    check(`${label}: stream gives the same call`, sc.length === 1 && sc[0].function.name === name &&
      sc[0].function.arguments === calls[0]?.function?.arguments && fin.choices[0].finish_reason === "tool_calls",
      JSON.stringify(sc));
  }
}

const spawned = [];
async function main() {
  const d = await startDaemon(strata, modelPath, ["--ctx-size", "512"], spawned);
  const client = new OpenAI({ apiKey: "x", baseURL: `http://127.0.0.1:${d.port}/v1`, maxRetries: 0 });
  const base = { model: MODEL, temperature: 0, max_tokens: 12 };

  // tools with tool results in the history, arguments as a JSON string (the SDK's shape)
  const r = await client.chat.completions.create({ ...base, messages: history, tools: [weather] });
  const m = r.choices[0].message;
  check("tools: 200 with a message", m.role === "assistant" && typeof m.content === "string",
    JSON.stringify(r));
  check("tools: finish_reason", ["stop", "length", "tool_calls"].includes(r.choices[0].finish_reason));
  check("tools: no call from random weights means no tool_calls field",
    m.tool_calls === undefined || (m.tool_calls.length > 0 && r.choices[0].finish_reason === "tool_calls"));

  // the stream accumulates (SDK helper) to the same message
  const stream = client.chat.completions.stream({ ...base, messages: history, tools: [weather] });
  const fin = await stream.finalChatCompletion();
  check("tools stream: same content as non-stream", fin.choices[0].message.content === m.content,
    `${JSON.stringify(fin.choices[0].message.content)} vs ${JSON.stringify(m.content)}`);
  check("tools stream: same finish_reason", fin.choices[0].finish_reason === r.choices[0].finish_reason);

  // tool_choice none and auto, parallel_tool_calls, kwargs are accepted
  for (const extra of [{ tool_choice: "none" }, { tool_choice: "auto", parallel_tool_calls: false },
                       { chat_template_kwargs: { enable_thinking: false } }]) {
    const x = await client.chat.completions.create({ ...base, messages: history, tools: [weather], ...extra });
    check(`accepted ${JSON.stringify(extra)}`, x.choices.length === 1);
  }

  // assistant prefill: the reply continues the last message (its text is not repeated)
  const pre = await client.chat.completions.create({ ...base,
    messages: [{ role: "user", content: "Hi" }, { role: "assistant", content: "Hello, my name is" }] });
  const fresh = await client.chat.completions.create({ ...base,
    messages: [{ role: "user", content: "Hi" }] });
  check("prefill: a continuation, not a new answer",
    pre.usage.prompt_tokens > fresh.usage.prompt_tokens &&
    !pre.choices[0].message.content.startsWith("Hello, my name is"),
    `${pre.usage.prompt_tokens} vs ${fresh.usage.prompt_tokens}`);

  // the edges, as the SDK raises them
  await expectBad("bad tool name", () => client.chat.completions.create({ ...base, messages: history,
    tools: [{ type: "function", function: { name: "has space" } }] }), "tools[0].function.name");
  await expectBad("bad arguments string", () => client.chat.completions.create({ ...base,
    messages: [history[0], { ...history[1], tool_calls: [{ ...history[1].tool_calls[0],
      function: { name: "get_weather", arguments: "{oops" } }] }, history[2]], tools: [weather] }),
    "messages[1].tool_calls[0].function.arguments");
  await expectBad("unknown tool_call_id", () => client.chat.completions.create({ ...base,
    messages: [history[0], history[1], { ...history[2], tool_call_id: "call_9" }] }),
    "messages[2].tool_call_id");
  await forced(client, "chatml");
  await expectBad("forced call: a schema keyword the grammar lacks", () => client.chat.completions.create({
    ...base, messages: history, tools: [{ type: "function", function: { name: "f", parameters: { type: "object",
      properties: { s: { type: "string", pattern: "^a" } } } } }], tool_choice: "required" }),
    "tools[0].function.parameters");
  await expectBad("forced call with response_format", () => client.chat.completions.create({ ...base,
    messages: history, tools: [weather], tool_choice: "required", response_format: { type: "json_object" } }),
    "tool_choice");
  await expectBad("reasoning_effort without a template variable", () => client.chat.completions.create({
    ...base, messages: history, reasoning_effort: "low" }), "reasoning_effort");
  // the daemon keeps serving
  const after = await client.chat.completions.create({ ...base, messages: history, tools: [weather] });
  check("serves after the errors", after.choices[0].message.content === m.content);
  d.p.kill("SIGTERM");

  // reasoning: DeepSeek R1's generation prompt opens <think>, so what random
  // weights write (never "</think>") is all reasoning_content
  const ds = `${shared}/fixtures/templates/deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja`;
  const d2 = await startDaemon(strata, modelPath, ["--ctx-size", "512", "--chat-template-file", ds], spawned);
  const c2 = new OpenAI({ apiKey: "x", baseURL: `http://127.0.0.1:${d2.port}/v1`, maxRetries: 0 });
  const q = { ...base, max_tokens: 16, messages: [{ role: "user", content: "Why is the sky blue?" }] };
  const nr = await c2.chat.completions.create(q);
  const nm = nr.choices[0].message;
  check("reasoning: reasoning_content holds the think block", typeof nm.reasoning_content === "string" &&
    nm.reasoning_content.length > 0 && nm.content === "", JSON.stringify(nm));
  let sr = "", sc = "", roles = 0;
  for await (const ch of await c2.chat.completions.create({ ...q, stream: true })) {
    const dl = ch.choices[0]?.delta || {};
    if (dl.role) roles++;
    sr += dl.reasoning_content || "";
    sc += dl.content || "";
  }
  check("reasoning stream: delta.reasoning_content adds up to the message's", sr === nm.reasoning_content &&
    sc === "" && roles === 1, `${JSON.stringify(sr)} vs ${JSON.stringify(nm.reasoning_content)}; content ${JSON.stringify(sc)}`);
  // prefill that closes the think block: the reply is content
  const pr = await c2.chat.completions.create({ ...base, messages: [{ role: "user", content: "Hi" },
    { role: "assistant", content: "<think>\nshort\n</think>\n\nHello" }] });
  check("reasoning: prefill past the block gives content", typeof pr.choices[0].message.content === "string");
  await forced(c2, "deepseek-r1");
  await expectBad("reasoning_effort: R1 has no variable", () => c2.chat.completions.create({ ...q,
    reasoning_effort: "high" }), "reasoning_effort");
  d2.p.kill("SIGTERM");

  for (const t of ["meta-llama-Llama-3.1-8B-Instruct", "mistralai-Mistral-Nemo-Instruct-2407",
                   "meetkai-functionary-medium-v3.2"]) {
    const dt = await startDaemon(strata, modelPath, ["--ctx-size", "2048", "--chat-template-file",
      `${shared}/fixtures/templates/${t}.jinja`], spawned);
    await forced(new OpenAI({ apiKey: "x", baseURL: `http://127.0.0.1:${dt.port}/v1`, maxRetries: 0 }), t);
    dt.p.kill("SIGTERM");
  }

  // a template that reads reasoning_effort and enable_thinking: both reach it
  const dir = mkdtempSync(`${tmpdir()}/strata-tools-`);
  const kt = `${dir}/kwargs.jinja`;
  writeFileSync(kt, "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}" +
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% if reasoning_effort is defined %}effort " +
    "{{ reasoning_effort }} {% endif %}{% if enable_thinking is defined and not enable_thinking %}" +
    "<think>\n\n</think>\n\n{% else %}<think>\n{% endif %}{% endif %}");
  const d3 = await startDaemon(strata, modelPath, ["--ctx-size", "512", "--chat-template-file", kt], spawned);
  const c3 = new OpenAI({ apiKey: "x", baseURL: `http://127.0.0.1:${d3.port}/v1`, maxRetries: 0 });
  const plain = await c3.chat.completions.create(q);
  const eff = await c3.chat.completions.create({ ...q, reasoning_effort: "high" });
  check("reasoning_effort reaches the template", eff.usage.prompt_tokens > plain.usage.prompt_tokens,
    `${eff.usage.prompt_tokens} vs ${plain.usage.prompt_tokens}`);
  check("thinking on: reasoning_content", (plain.choices[0].message.reasoning_content || "").length > 0 &&
    plain.choices[0].message.content === "");
  const off = await c3.chat.completions.create({ ...q, chat_template_kwargs: { enable_thinking: false } });
  check("enable_thinking false: the reply is content", off.choices[0].message.content.length > 0 &&
    off.choices[0].message.reasoning_content === undefined, JSON.stringify(off.choices[0].message));
  d3.p.kill("SIGTERM");
  rmSync(dir, { recursive: true, force: true });
}

main().catch((e) => { failed++; console.log(`FAIL exception ${e?.stack || e}`); })
  .finally(() => {
    for (const p of spawned) p.kill("SIGTERM");
    console.log(`RESULT tools-sdk: ${passed} passed, ${failed} failed`);
    process.exitCode = failed ? 1 : 0;
  });
