// bench/grammar.mjs: decode tokens/s with and without a JSON schema on the
// same model and daemon (not a test; run by hand on a release build).
//
//   node bench/grammar.mjs build/cli/strata MODEL.gguf [REQS] [THREADS]
//
// Interleaves REQS (default 4) pairs of chat requests (temperature 1, the
// same seed for both of a pair, max_tokens 64): one free text, one with
// response_format json_schema (an object of strings, an integer, an enum and
// an array of objects, the shape of bench/grammar-bench.c's schema). Prints
// each request's predicted_per_second (llama-server's timings: decode only)
// and the means; the difference is what the mask costs a decode step.
import { startDaemon } from "../tests/peers/strata-daemon.mjs";
import { basename } from "node:path";

const [strata, model, reqsArg, threadsArg] = process.argv.slice(2);
const reqs = Number(reqsArg || 4);
const id = basename(model).replace(/\.gguf$/, "");
const schema = {
  type: "object",
  properties: {
    name: { type: "string", maxLength: 40 },
    age: { type: "integer", minimum: 0, maximum: 150 },
    email: { type: "string" },
    role: { enum: ["admin", "user", "guest"] },
    bio: { type: "string" },
    items: { type: "array", maxItems: 8, items: { type: "object", properties: {
      sku: { type: "string" }, qty: { type: "integer", minimum: 1, maximum: 99 }, price: { type: "number" } },
      required: ["sku", "qty", "price"], additionalProperties: false } },
  },
  required: ["name", "age", "email", "role", "bio", "items"],
  additionalProperties: false,
};

const d = await startDaemon(strata, model, ["--threads", threadsArg || "2", "--ctx-size", "512", "--parallel", "1"]);
const url = `http://127.0.0.1:${d.port}/v1/chat/completions`;
async function one(seed, constrained) {
  const body = { model: id, messages: [{ role: "user", content: "Write a user record as JSON." }],
    temperature: 1, seed, max_tokens: 64 };
  if (constrained) body.response_format = { type: "json_schema", json_schema: { name: "user", schema } };
  const r = await (await fetch(url, { method: "POST", headers: { "content-type": "application/json" },
    body: JSON.stringify(body) })).json();
  return { tps: r.timings.predicted_per_second, n: r.usage.completion_tokens, finish: r.choices[0].finish_reason };
}
const free = [], con = [];
try {
  await one(0, false); // warm the page cache and the grammar vocabulary
  await one(0, true);
  for (let i = 1; i <= reqs; i++) {
    const a = await one(i, false), b = await one(i, true);
    free.push(a.tps);
    con.push(b.tps);
    console.log(`seed ${i}: free ${a.tps.toFixed(2)} tok/s (${a.n} tokens), schema ${b.tps.toFixed(2)} tok/s (${b.n} tokens, ${b.finish})`);
  }
} finally {
  d.p.kill("SIGTERM");
}
const mean = (x) => x.reduce((s, v) => s + v, 0) / x.length;
console.log(`mean: free ${mean(free).toFixed(2)} tok/s, schema ${mean(con).toFixed(2)} tok/s ` +
  `(${((1 - mean(con) / mean(free)) * 100).toFixed(1)}% slower)`);
