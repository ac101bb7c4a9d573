// bench/embed.mjs: /v1/embeddings throughput, batched through the scheduler
// or not, beside llama.cpp's embedding context on the same file.
//
//   node bench/embed.mjs build/cli/strata MODEL.gguf [N_INPUTS=64] [WORDS=24] [THREADS=2]
//
// MODEL must carry <arch>.pooling_type (`strata gguf synth --pooling last`,
// `strata gguf quantize --pooling last IN OUT f32`). Runs, each after one
// warm-up request: one request with N inputs (the scheduler prefills
// --parallel 8 of them a step; --no-prefix-cache, so the runs of the same
// inputs compute every position), N one-input requests one after another,
// N one-input requests at once; then node-llama-cpp's getEmbeddingFor on
// each input in turn (threads THREADS, one sequence), and the smallest
// cosine between the two engines' vectors. Prints one line per run with
// inputs/s and prompt tokens/s.
import {getLlama, LlamaLogLevel} from "node-llama-cpp";
import {startDaemon} from "../tests/peers/strata-daemon.mjs";

const [strata, model] = process.argv.slice(2, 4);
const N = Number(process.argv[4] || 64), WORDS = Number(process.argv[5] || 24);
const THREADS = Number(process.argv[6] || 2);
const REPEAT = 3;
const words = ["the", "little", "dog", "ran", "to", "park", "and", "saw", "a", "big", "red", "ball",
               "Lily", "was", "happy", "sun", "tree", "friend", "played", "day"];
const inputs = Array.from({length: N}, (_, i) =>
  Array.from({length: WORDS}, (_, k) => words[(i * 7 + k * 3 + (i >> 2)) % words.length]).join(" "));
const spawned = [];
const d = await startDaemon(strata, model, ["--parallel", "8", "--threads", String(THREADS), "--no-prefix-cache"], spawned);
const base = `http://127.0.0.1:${d.port}`;
const id = model.replace(/^.*\//, "").replace(/\.gguf$/, "");
const embed = async (input) => {
  const r = await fetch(`${base}/v1/embeddings`, {method: "POST",
    body: JSON.stringify({model: id, input, encoding_format: "float"})});
  if (r.status !== 200) throw new Error(`${r.status} ${await r.text()}`);
  return r.json();
};
const line = (what, t, nTok) =>
  console.log(`${what.padEnd(46)} ${(N / t).toFixed(1).padStart(8)} inputs/s ` +
              `${(nTok / t).toFixed(0).padStart(8)} tok/s  (${(t * 1e3).toFixed(0)} ms)`);
try {
  await embed(inputs[0]);
  const batch = await embed(inputs);
  const nTok = batch.usage.prompt_tokens;
  // the three ways, interleaved REPEAT times; the fastest of each is
  // printed (the build machine is shared: the slower runs are other load)
  const modes = [["strata: one request, N inputs", () => embed(inputs)],
                 ["strata: N requests in turn", async () => { for (const x of inputs) await embed(x); }],
                 ["strata: N requests at once", () => Promise.all(inputs.map(embed))]];
  const best = modes.map(() => Infinity);
  for (let r = 0; r < REPEAT; r++)
    for (let k = 0; k < modes.length; k++) {
      const t0 = performance.now() / 1e3;
      await modes[k][1]();
      best[k] = Math.min(best[k], performance.now() / 1e3 - t0);
    }
  modes.forEach(([what], k) => line(`${what} (best of ${REPEAT})`, best[k], nTok));
  d.p.kill("SIGTERM");
  let t0;

  const llama = await getLlama({gpu: false, logLevel: LlamaLogLevel.error});
  const lm = await llama.loadModel({modelPath: model});
  const ectx = await lm.createEmbeddingContext({contextSize: 512, threads: THREADS});
  await ectx.getEmbeddingFor(inputs[0]);
  t0 = performance.now() / 1e3;
  const ref = [];
  for (const x of inputs) ref.push((await ectx.getEmbeddingFor(x)).vector);
  line("llama.cpp: getEmbeddingFor in turn", performance.now() / 1e3 - t0, nTok);
  let minCos = 1;
  for (let i = 0; i < N; i++) {
    const a = batch.data[i].embedding, b = ref[i];
    let ab = 0, aa = 0, bb = 0;
    for (let k = 0; k < a.length; k++) { ab += a[k] * b[k]; aa += a[k] * a[k]; bb += b[k] * b[k]; }
    minCos = Math.min(minCos, ab / Math.sqrt(aa * bb));
  }
  console.log(`smallest cosine strata vs llama.cpp: ${minCos.toFixed(7)} (${N} inputs, ${nTok} tokens)`);
  await ectx.dispose();
  await lm.dispose();
  await llama.dispose();
} finally {
  for (const p of spawned) if (p.exitCode === null) p.kill("SIGKILL");
}
