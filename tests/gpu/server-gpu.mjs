// tests/gpu/server-gpu.mjs: `strata serve --gpu 0` serves from the Vulkan
// backend (lavapipe in CI) through the official openai SDK, with the same
// greedy text as the CPU daemon (`--gpu off`) on the same requests:
//   - /status has a gpu object (name, driver, memory, subgroup size,
//     features, every layer on the GPU) and the start-up log its line;
//   - one streaming chat completion, the SDK reading the SSE stream;
//   - the batched scheduler: six streaming completions at once (--parallel 4:
//     decode steps of several sequences plus prefill chunks in one step, two
//     requests queued), each equal to the CPU daemon's text for its prompt;
//   - after the load the pool is fully accounted for (no KV block in use);
//   - SIGTERM exits 0 (ASan's leak check runs at exit);
//   - `strata run --gpu 0 --json` generates the ids `--gpu off` does, and
//     says which backend ran;
//   - split offload (--gpu-layers 2 of 5): the daemon's start-up line and
//     /status, a streaming chat, the six batched streams and a repeated chat
//     (prefix reuse) equal to the CPU daemon's text; `strata run
//     --gpu-layers 3` the CPU's ids;
//   - out of device memory at load (--gpu-mem-budget 100000, whole model and
//     split; STRATA_GPU_MEM_BUDGET for run): one log line, the CPU path.
// stories260K has f32 weights: greedy text agrees exactly (tests/gpu/
// test-vk-model.c checks the logits themselves). Exit 77 (skipped) only when
// the daemon finds no Vulkan device at all.
// Usage: node server-gpu.mjs <strata binary>
// Prints `RESULT server-gpu: N passed, M failed`.
import OpenAI from "openai";
import { spawnSync } from "node:child_process";
import { startDaemon } from "../peers/strata-daemon.mjs";

const strata = process.argv[2];
const shared = process.env.STRATA_SHARED_DIR || "../shared";
const modelPath = `${shared}/models/stories260K.gguf`;
const MODEL = "stories260K";

let passed = 0, failed = 0;
function check(name, ok, detail = "") {
  if (ok) passed++;
  else { failed++; console.log(`FAIL ${name} ${detail}`); }
}

const spawned = [];
process.on("exit", () => { for (const p of spawned) try { p.kill("SIGKILL"); } catch {} });

const PROMPTS = ["Once upon a time", "Lily saw a big dog", "The sun was hot and",
  "Tom had a red ball. He", "One day, a little bird", "Mom said to Ben"];

async function chatStream(client) {
  const stream = await client.chat.completions.create({ model: MODEL, stream: true,
    messages: [{ role: "user", content: "Tell me a story about a cat." }],
    max_tokens: 24, temperature: 0 });
  let text = "", chunks = 0, finish = null;
  for await (const c of stream) {
    chunks++;
    text += c.choices?.[0]?.delta?.content ?? "";
    finish = c.choices?.[0]?.finish_reason ?? finish;
  }
  return { text, chunks, finish };
}

async function completionStream(client, prompt) {
  const stream = await client.completions.create({ model: MODEL, prompt, stream: true,
    max_tokens: 20, temperature: 0 });
  let text = "";
  for await (const c of stream) text += c.choices?.[0]?.text ?? "";
  return text;
}

async function stop(d) {
  const code = await new Promise((r) => { d.p.on("exit", (c) => r(c)); d.p.kill("SIGTERM"); });
  return code;
}

async function main() {
  const cpu = await startDaemon(strata, modelPath, ["--gpu", "off", "--parallel", "4"], spawned);
  let gpu;
  try {
    gpu = await startDaemon(strata, modelPath, ["--gpu", "0", "--parallel", "4"], spawned);
  } catch (e) {
    await stop(cpu);
    throw e;
  }
  const line = gpu.log().split("\n").find((l) => l.startsWith("strata: gpu: ")) || "";
  if (/no Vulkan device/.test(line)) {
    await stop(gpu);
    await stop(cpu);
    console.log("RESULT server-gpu: no Vulkan device: skipped");
    process.exit(77);
  }
  check("start-up line names the device", /device 0 .*subgroup \d+.*all \d+ layers on the GPU/.test(line), line);
  const cpuLine = cpu.log().split("\n").find((l) => l.startsWith("strata: gpu: ")) || "";
  check("--gpu off says so", /off \(--gpu off\)/.test(cpuLine), cpuLine);

  const st = await (await fetch(`http://127.0.0.1:${gpu.port}/status`)).json();
  const g = st.gpu;
  check("/status gpu", g && g.on === true && typeof g.name === "string" && g.name.length > 0 &&
    typeof g.driver === "string" && g.memory_bytes > 0 && g.device_bytes > 0 &&
    g.subgroup_size >= 1 && Array.isArray(g.features) && g.layers > 0 &&
    g.layers_gpu === g.layers, JSON.stringify(g));
  const sc = await (await fetch(`http://127.0.0.1:${cpu.port}/status`)).json();
  check("/status gpu null on the CPU, with a note", sc.gpu === null &&
    /--gpu off/.test(sc.notes?.gpu ?? ""), JSON.stringify({ gpu: sc.gpu, note: sc.notes?.gpu }));

  const cg = new OpenAI({ baseURL: `http://127.0.0.1:${gpu.port}/v1`, apiKey: "unused" });
  const cc = new OpenAI({ baseURL: `http://127.0.0.1:${cpu.port}/v1`, apiKey: "unused" });

  // one streaming chat request
  const [sg, scpu] = [await chatStream(cg), await chatStream(cc)];
  check("chat stream from the GPU", sg.chunks > 2 && sg.text.length > 0 && sg.finish === "length",
    JSON.stringify(sg));
  check("chat stream: GPU text = CPU text", sg.text === scpu.text,
    `gpu ${JSON.stringify(sg.text)} cpu ${JSON.stringify(scpu.text)}`);

  // the batched scheduler: six at once against --parallel 4
  const want = [];
  for (const p of PROMPTS) want.push(await completionStream(cc, p));
  const got = await Promise.all(PROMPTS.map((p) => completionStream(cg, p)));
  for (let i = 0; i < PROMPTS.length; i++)
    check(`batched stream ${i}: GPU text = CPU text`, got[i] === want[i] && got[i].length > 0,
      `gpu ${JSON.stringify(got[i])} cpu ${JSON.stringify(want[i])}`);
  // the scheduler settles first: a stream's last chunk reaches the client
  // before its sequence's blocks go back (as tests/peers/sched-load.mjs waits)
  let st2 = null;
  for (let k = 0; k < 100; k++) {
    st2 = await (await fetch(`http://127.0.0.1:${gpu.port}/status`)).json();
    if (st2.sessions?.active === 0 && st2.sessions?.queued === 0 && st2.kv_blocks?.used === 0) break;
    await new Promise((r) => setTimeout(r, 100));
  }
  const kb = st2.kv_blocks ?? {};
  // greedy requests without logprobs pick their tokens on the device
  check("greedy steps sampled on the device", st2.gpu?.steps_sampled > 0, JSON.stringify(st2.gpu));
  // seeded top-k / top-p sampling on the device: the CPU daemon's text for
  // the same seed (stories260K's f32 logits agree to ~1e-6, both draw with
  // the session's own RNG stream); logprobs keep a request on the host
  const sampled = async (port, extra = {}) => {
    const r = await fetch(`http://127.0.0.1:${port}/v1/completions`, { method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ model: MODEL, prompt: "Once upon a time", max_tokens: 24,
        temperature: 0.8, top_k: 40, top_p: 0.95, seed: 7, ...extra }) });
    return (await r.json()).choices?.[0]?.text;
  };
  const before = st2.gpu?.steps_sampled ?? 0;
  const [tg, tc] = [await sampled(gpu.port), await sampled(cpu.port)];
  const st3 = await (await fetch(`http://127.0.0.1:${gpu.port}/status`)).json();
  check("seeded sampling on the device = CPU text", typeof tg === "string" && tg.length > 0 &&
    tg === tc && st3.gpu.steps_sampled >= before + 20, `gpu ${JSON.stringify(tg)} cpu ${JSON.stringify(tc)} ${st3.gpu.steps_sampled - before}`);
  const [lg, lc] = [await sampled(gpu.port, { logprobs: 1 }), await sampled(cpu.port, { logprobs: 1 })];
  const st4 = await (await fetch(`http://127.0.0.1:${gpu.port}/status`)).json();
  check("logprobs sample on the host, same text", lg === lc && lg === tg &&
    st4.gpu.steps_sampled === st3.gpu.steps_sampled, `${JSON.stringify(lg)} ${JSON.stringify(lc)} ${st4.gpu.steps_sampled - st3.gpu.steps_sampled}`);
  check("no KV block in use after the streams (the pool accounted for)", kb.used === 0 &&
    kb.total > 0 && kb.free + kb.cached === kb.total, JSON.stringify(kb));

  // strata run on both paths
  const run = (gpuArg) => spawnSync(strata, ["run", "-m", modelPath, "--ids", "1", "-n", "24",
    "--temp", "0", "--json", "-t", "1", "--gpu", gpuArg], { encoding: "utf8" });
  const rg = run("0"), rc = run("off");
  let jg = {}, jc = {};
  try { jg = JSON.parse(rg.stdout); jc = JSON.parse(rc.stdout); } catch {}
  check("strata run --gpu 0 runs on vulkan", rg.status === 0 && jg.backend === "vulkan" &&
    /device 0 /.test(jg.gpu ?? ""), `${rg.status} ${rg.stderr.slice(-500)}`);
  check("strata run --gpu off runs on the CPU", rc.status === 0 && jc.backend === "cpu",
    `${rc.status} ${rc.stderr.slice(-500)}`);
  check("strata run: GPU ids = CPU ids", JSON.stringify(jg.ids) === JSON.stringify(jc.ids) &&
    (jg.ids?.length ?? 0) === 24, `gpu ${JSON.stringify(jg.ids)} cpu ${JSON.stringify(jc.ids)}`);

  check("GPU daemon exits 0 on SIGTERM", (await stop(gpu)) === 0, gpu.log().slice(-2000));
  // strata run (text mode) picks decode tokens on the device: the CPU's text
  // for greedy and for a seeded top-k / top-p draw
  for (const smp of [["--temp", "0"], ["--temp", "0.8", "--top-k", "40", "--top-p", "0.95", "--seed", "7"]]) {
    const rt = (gpuArg) => spawnSync(strata, ["run", "-m", modelPath, "-p", "Once upon a time",
      "-n", "32", "-t", "1", ...smp, "--gpu", gpuArg], { encoding: "utf8" });
    const [a, c] = [rt("0"), rt("off")];
    check(`strata run ${smp.join(" ")}: device picks = CPU text`, a.status === 0 &&
      /decode picks on the GPU/.test(a.stderr) && !/decode picks on the GPU/.test(c.stderr) &&
      a.stdout.length > 10 && a.stdout === c.stdout, `${JSON.stringify(a.stdout)} ${JSON.stringify(c.stdout)} ${a.stderr.slice(-300)}`);
  }

  // split offload: --gpu-layers 2 of stories260K's 5 (the rest, the output
  // head and the logits on the CPU), the same text as the CPU daemon
  const sp = await startDaemon(strata, modelPath, ["--gpu", "0", "--gpu-layers", "2",
    "--parallel", "4"], spawned);
  const spLine = sp.log().split("\n").find((l) => l.startsWith("strata: gpu: ")) || "";
  check("split start-up line", /layers 0-1 of 5 on the GPU, the rest on the CPU/.test(spLine), spLine);
  const ss = await (await fetch(`http://127.0.0.1:${sp.port}/status`)).json();
  check("/status gpu of a split", ss.gpu && ss.gpu.on === true && ss.gpu.layers === 5 &&
    ss.gpu.layers_gpu === 2 && ss.gpu.device_bytes > 0, JSON.stringify(ss.gpu));
  const cs = new OpenAI({ baseURL: `http://127.0.0.1:${sp.port}/v1`, apiKey: "unused" });
  const ssp = await chatStream(cs);
  check("split chat stream: text = CPU text", ssp.chunks > 2 && ssp.text === scpu.text &&
    ssp.finish === "length", `split ${JSON.stringify(ssp.text)} cpu ${JSON.stringify(scpu.text)}`);
  const gotSp = await Promise.all(PROMPTS.map((p) => completionStream(cs, p)));
  for (let i = 0; i < PROMPTS.length; i++)
    check(`split batched stream ${i}: text = CPU text`, gotSp[i] === want[i],
      `split ${JSON.stringify(gotSp[i])} cpu ${JSON.stringify(want[i])}`);
  // prefix reuse: the same chat again (its prompt's blocks from the prefix cache)
  const ssp2 = await chatStream(cs);
  check("split chat stream again (prefix reuse): same text", ssp2.text === scpu.text,
    JSON.stringify(ssp2.text));
  check("split daemon exits 0 on SIGTERM", (await stop(sp)) === 0, sp.log().slice(-2000));
  const rs = spawnSync(strata, ["run", "-m", modelPath, "--ids", "1", "-n", "24", "--temp", "0",
    "--json", "-t", "1", "--gpu", "0", "--gpu-layers", "3"], { encoding: "utf8" });
  let js = {};
  try { js = JSON.parse(rs.stdout); } catch {}
  check("strata run --gpu-layers 3: split ids = CPU ids", rs.status === 0 &&
    js.backend === "split" && JSON.stringify(js.ids) === JSON.stringify(jc.ids),
    `${rs.status} ${JSON.stringify(js.ids)} ${rs.stderr.slice(-500)}`);

  // out of device memory at load (forced on lavapipe by --gpu-mem-budget):
  // one log line, then the CPU path serves, whole-model and split alike
  for (const extra of [[], ["--gpu-layers", "2"]]) {
    const om = await startDaemon(strata, modelPath, ["--gpu", "0", "--gpu-mem-budget", "100000",
      ...extra, "--parallel", "4"], spawned);
    const lines = om.log().split("\n").filter((l) => /loading on the GPU failed/.test(l));
    check(`OOM ${extra.join(" ")}: one log line`, lines.length === 1 &&
      /out of device memory/.test(lines[0]) && /the CPU$/.test(lines[0]), om.log().slice(-1500));
    const so = await (await fetch(`http://127.0.0.1:${om.port}/status`)).json();
    check(`OOM ${extra.join(" ")}: /status says the CPU`, so.gpu === null &&
      /loading on the GPU failed/.test(so.notes?.gpu ?? ""), JSON.stringify({ gpu: so.gpu, note: so.notes }));
    const co = new OpenAI({ baseURL: `http://127.0.0.1:${om.port}/v1`, apiKey: "unused" });
    const so2 = await chatStream(co);
    check(`OOM ${extra.join(" ")}: chat = CPU text`, so2.text === scpu.text, JSON.stringify(so2.text));
    check(`OOM ${extra.join(" ")}: exits 0`, (await stop(om)) === 0, om.log().slice(-1500));
  }
  const ro = spawnSync(strata, ["run", "-m", modelPath, "--ids", "1", "-n", "24", "--temp", "0",
    "--json", "-t", "1", "--gpu", "0", "--gpu-layers", "3"], { encoding: "utf8",
    env: { ...process.env, STRATA_GPU_MEM_BUDGET: "100000" } });
  let jo = {};
  try { jo = JSON.parse(ro.stdout); } catch {}
  check("strata run out of device memory: one line, the CPU's ids", ro.status === 0 &&
    jo.backend === "cpu" && JSON.stringify(jo.ids) === JSON.stringify(jc.ids) &&
    ro.stderr.split("\n").filter((l) => /loading on the GPU failed.*out of device memory/.test(l)).length === 1,
    `${ro.status} ${ro.stderr.slice(-800)}`);

  check("CPU daemon exits 0 on SIGTERM", (await stop(cpu)) === 0, cpu.log().slice(-2000));
}

main().then(() => {
  console.log(`RESULT server-gpu: ${passed} passed, ${failed} failed`);
  process.exit(failed ? 1 : 0);
}).catch((e) => {
  console.log(`FAIL server-gpu: ${e.stack || e}`);
  console.log(`RESULT server-gpu: ${passed} passed, ${failed + 1} failed`);
  process.exit(1);
});
