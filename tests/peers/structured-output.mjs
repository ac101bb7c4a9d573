// tests/peers/structured-output.mjs: structured output through the real
// `strata serve` daemon and the official openai npm SDK, on a random-weight
// model (models/llama-2-tiny-random.gguf: the 32,000-token Llama-2
// vocabulary), so whatever valid output appears is the constraint's doing:
// - chat.completions.parse() with a Zod schema (zodResponseFormat), several
//   seeds at temperature 1: the parsed object passes Zod;
// - response_format json_object, and json_schema with a rich schema (nested
//   $defs and a recursive $ref, anyOf, enums, const, bounded strings,
//   integers and arrays), streamed and not: every output parses and
//   validates against the schema with ajv;
// - /v1/completions with response_format and with llama-server's json_schema;
// - raw HTTP edges: an invalid schema and an unsupported keyword are 400 with
//   param response_format and a message naming the problem; a schema that
//   cannot be finished within max_tokens ends with finish_reason "length" and
//   the content is the incomplete prefix (it does not parse).
// Usage: node structured-output.mjs <strata binary>. Prints
// `RESULT structured-output: N passed, M failed`; exits 1 on any failure.
import { startDaemon } from "./strata-daemon.mjs";
import OpenAI from "openai";
import { zodResponseFormat } from "openai/helpers/zod";
import { z } from "zod";
import Ajv2020 from "ajv/dist/2020.js";

const strata = process.argv[2];
const shared = process.env.STRATA_SHARED_DIR || "../shared";
const modelPath = `${shared}/models/llama-2-tiny-random.gguf`;
const MODEL = "llama-2-tiny-random";

let passed = 0, failed = 0;
function check(name, ok, detail = "") {
  if (ok) passed++;
  else { failed++; console.log(`FAIL ${name} ${detail}`); }
}

const rich = {
  $defs: {
    tree: {
      type: "object",
      properties: {
        label: { type: "string", minLength: 1, maxLength: 8 },
        kids: { type: "array", items: { $ref: "#/$defs/tree" }, maxItems: 2 },
      },
      required: ["label", "kids"],
      additionalProperties: false,
    },
  },
  type: "object",
  properties: {
    id: { type: "integer", minimum: -5, maximum: 500 },
    kind: { const: "record" },
    color: { enum: ["red", "green", "blue"] },
    note: { type: ["string", "null"], maxLength: 16 },
    ratio: { type: "number" },
    flags: { type: "array", items: { type: "boolean" }, minItems: 1, maxItems: 3 },
    tree: { $ref: "#/$defs/tree" },
    extra: { anyOf: [{ type: "null" }, { type: "object", properties: { ok: { type: "boolean" } }, required: ["ok"], additionalProperties: false }] },
  },
  required: ["id", "kind", "color", "flags", "tree"],
  additionalProperties: false,
};

async function main() {
  const d = await startDaemon(strata, modelPath, ["--ctx-size", "2048"]);
  const base = `http://127.0.0.1:${d.port}/v1`;
  const client = new OpenAI({ apiKey: "none", baseURL: base, maxRetries: 0 });
  const user = [{ role: "user", content: "Describe a person as JSON." }];
  const ajv = new Ajv2020({ strict: false });
  const validRich = ajv.compile(rich);

  try {
    // parse() with Zod: the SDK converts, sends strict json_schema, parses and validates
    const Person = z.object({
      name: z.string().max(20),
      age: z.number().int().min(0).max(120),
      tags: z.array(z.enum(["a", "b"])).max(3),
      nick: z.string().max(10).nullable(),
      kind: z.literal("person"),
      pet: z.object({ ok: z.boolean() }).nullable(),
    });
    for (const seed of [1, 2, 3, 4]) {
      try {
        const r = await client.chat.completions.parse({ model: MODEL, messages: user, temperature: 1, seed,
          max_tokens: 400, response_format: zodResponseFormat(Person, "person") });
        const msg = r.choices[0].message;
        check(`parse() zod seed ${seed}`, r.choices[0].finish_reason === "stop" && msg.parsed &&
          Person.safeParse(msg.parsed).success, JSON.stringify(msg.content));
      } catch (e) {
        check(`parse() zod seed ${seed}`, false, `${e?.constructor?.name} ${e?.message}`);
      }
    }

    // json_object: any object
    for (const seed of [5, 6, 7]) {
      const r = await client.chat.completions.create({ model: MODEL, messages: user, temperature: 1, seed,
        max_tokens: 300, response_format: { type: "json_object" } });
      const c = r.choices[0];
      let v = null;
      try { v = JSON.parse(c.message.content); } catch { /* checked below */ }
      check(`json_object seed ${seed}`, c.finish_reason === "length" ||
        (v !== null && typeof v === "object" && !Array.isArray(v)), JSON.stringify(c));
    }

    // json_schema, rich: non-streamed and streamed
    let completed = 0;
    for (const seed of [11, 12, 13, 14, 15, 16]) {
      const stream = seed % 2 === 0;
      const req = { model: MODEL, messages: user, temperature: 1, seed, max_tokens: 600,
        response_format: { type: "json_schema", json_schema: { name: "rich", strict: true, schema: rich } } };
      let text = "", finish = null;
      if (stream) {
        const s = await client.chat.completions.create({ ...req, stream: true });
        for await (const ch of s) {
          text += ch.choices[0]?.delta?.content ?? "";
          finish = ch.choices[0]?.finish_reason ?? finish;
        }
      } else {
        const r = await client.chat.completions.create(req);
        text = r.choices[0].message.content;
        finish = r.choices[0].finish_reason;
      }
      if (finish !== "stop") continue;
      completed++;
      let v;
      try { v = JSON.parse(text); } catch (e) { check(`rich seed ${seed} parses`, false, text); continue; }
      check(`rich seed ${seed} validates${stream ? " (stream)" : ""}`, validRich(v),
        `${JSON.stringify(validRich.errors)} ${text}`);
    }
    check("rich: most runs complete within max_tokens", completed >= 4, `${completed} of 6`);

    // completions: response_format, and llama-server's json_schema
    const small = { type: "object", properties: { a: { type: "integer", minimum: 0, maximum: 9 }, b: { type: "boolean" } },
      required: ["a", "b"], additionalProperties: false };
    const validSmall = ajv.compile(small);
    for (const body of [{ response_format: { type: "json_schema", json_schema: { name: "s", schema: small } } },
      { json_schema: small }]) {
      const r = await fetch(`${base}/completions`, { method: "POST", headers: { "content-type": "application/json" },
        body: JSON.stringify({ model: MODEL, prompt: "x", temperature: 1, seed: 9, max_tokens: 100, ...body }) });
      const j = await r.json();
      const c = j.choices?.[0];
      let ok = false;
      try { ok = c.finish_reason === "stop" && validSmall(JSON.parse(c.text)); } catch { /* ok stays false */ }
      check(`completions ${Object.keys(body)[0]}`, r.status === 200 && ok, JSON.stringify(j));
    }

    // raw HTTP edges
    const post = async (body) => {
      const r = await fetch(`${base}/chat/completions`, { method: "POST", headers: { "content-type": "application/json" },
        body: JSON.stringify({ model: MODEL, messages: user, ...body }) });
      return { status: r.status, j: await r.json() };
    };
    const js = (schema) => ({ response_format: { type: "json_schema", json_schema: { name: "x", schema } } });
    let r = await post(js({ type: "object", properties: { a: { type: "string", pattern: "^a" } } }));
    check("unsupported keyword: 400 naming it", r.status === 400 && r.j.error?.param === "response_format" &&
      r.j.error?.code === "unsupported" && /'pattern'/.test(r.j.error?.message) &&
      /\/properties\/a/.test(r.j.error?.message), JSON.stringify(r.j));
    r = await post(js({ $ref: "#/$defs/missing" }));
    check("dangling $ref: 400", r.status === 400 && r.j.error?.param === "response_format" &&
      /missing/.test(r.j.error?.message), JSON.stringify(r.j));
    r = await post(js({ type: "string", minLength: 5, maxLength: 2 }));
    check("min > max: 400", r.status === 400 && r.j.error?.param === "response_format", JSON.stringify(r.j));
    r = await post({ response_format: { type: "json_schema" } });
    check("json_schema without its object: 400", r.status === 400 && r.j.error?.param === "response_format");
    // hostile schemas: refused with a 400, the daemon keeps serving
    let deep = {};
    for (let i = 0; i < 200; i++) deep = { type: "array", items: deep };
    r = await post(js(deep));
    check("200 levels deep: 400 limit", r.status === 400 && r.j.error?.code === "limit_exceeded" &&
      r.j.error?.param === "response_format", JSON.stringify(r.j).slice(0, 300));
    r = await post(js({ enum: [ "x".repeat(70000) ] }));
    check("70 kB enum: 400 limit", r.status === 400 && r.j.error?.code === "limit_exceeded", JSON.stringify(r.j).slice(0, 300));
    r = await post(js("a string"));
    check("schema not an object: 400", r.status === 400 && r.j.error?.param === "response_format");
    r = await post(js({ type: 7 }));
    check("type not a string: 400", r.status === 400 && r.j.error?.param === "response_format");
    r = await post(js({ anyOf: Array.from({ length: 5000 }, (_, i) => ({ const: i })) }));
    check("5000 branches: 400 limit", r.status === 400 && r.j.error?.code === "limit_exceeded");
    r = await post(js({ enum: Array.from({ length: 1025 }, (_, i) => i) }));
    check("1025 enum values: 400 limit", r.status === 400 && r.j.error?.code === "limit_exceeded");
    r = await post(js({ anyOf: Array.from({ length: 1000 }, (_, i) => ({ const: i })) }));
    check("1000 branches: served", r.status === 200 && /^[0-9]+$/.test(r.j.choices?.[0]?.message?.content),
      JSON.stringify(r.j).slice(0, 300));
    r = await post(js({ type: "integer", minimum: 1, maximum: 1 }));
    check("daemon still serves after errors", r.status === 200 && r.j.choices[0].message.content === "1" &&
      r.j.choices[0].finish_reason === "stop", JSON.stringify(r.j));
    // cannot finish in 4 tokens: length, and the content is the incomplete prefix
    r = await post({ ...js({ type: "object", properties: { long: { type: "string", minLength: 40 } }, required: ["long"] }),
      max_tokens: 4, temperature: 1, seed: 3 });
    const c = r.j.choices?.[0];
    let parses = true;
    try { JSON.parse(c.message.content); } catch { parses = false; }
    check("length: finish_reason length with the prefix", r.status === 200 && c.finish_reason === "length" &&
      c.message.content.length > 0 && ('{"long":"'.startsWith(c.message.content) ||
        c.message.content.startsWith('{"long":"')) && !parses && r.j.usage.completion_tokens === 4,
      JSON.stringify(r.j));
  } finally {
    d.p.kill("SIGTERM");
  }
}

main().catch((e) => { failed++; console.log(`FAIL crashed: ${e?.stack ?? e}`); })
  .finally(() => {
    console.log(`RESULT structured-output: ${passed} passed, ${failed} failed`);
    process.exit(failed ? 1 : 0);
  });
