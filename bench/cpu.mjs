// bench/cpu.mjs: strata vs llama.cpp (node-llama-cpp) on the CPU, side by side.
// Run through bench/cpu (it builds the roofline probe); see bench/README.md.
//
//   node bench/cpu.mjs STRATA ROOFLINE MODELS_DIR [THREADS=2] [BENCH_MODEL]
//   (env ROUNDS=N: N more interleaved decode rounds per model, with medians;
//    ISA=avx2 etc.: strata's kernels forced to that ISA (`--isa`), the check
//    of an AVX2-only CPU's path on an AVX-512 host; LLAMA_BENCH=path: the
//    peer is that llama-bench binary (llama.cpp built from source, e.g. with
//    -DGGML_NATIVE=OFF -DGGML_AVX2=ON -DGGML_AVX512=OFF for the same ISA)
//    instead of node-llama-cpp: its tg128 and pp512 t/s (-r 3) and the peak
//    RSS of its process from /usr/bin/time)
//   node bench/cpu.mjs --llama MODEL THREADS        (child mode: one model in llama.cpp)
//
// Per model: decode tok/s (128 tokens after a 1-token prompt, greedy), prefill
// tok/s (a 512-token prompt in one batch), peak RSS, and the decode roofline =
// read bandwidth (bench/roofline, same threads, measured in this run) / weight
// bytes read per token (every tensor but token_embd, whose one row is read;
// expert tensors count n_expert_used / n_expert of their bytes).
// The bandwidth of this VM moves with its neighbours' load (51, 52, 79, 79,
// 79 GB/s in five back-to-back probes, 2 threads, 2026-12-01), so the probe
// runs right before and right after each strata decode run, and the roofline
// of that model uses the higher of the two: the decode is judged against the
// most bandwidth that was on offer around it, never the least.
// Probes seconds away from the decode still miss what the box does during it
// (read bandwidth moved 49 -> 70 -> 47 GB/s between probes a second apart,
// 2026-12-01), so a second figure interleaves them: BENCH_MODEL (the release
// build's bench/bench-model) decodes 128 steps and, before every step,
// streams the step's weight bytes with the same probe loop twice, from the
// model file's mapped pages and from an anonymous huge-page copy (the memory
// the engine copies its weights into, engine/cpu/cpu-weights.c); decode/roofline
// = the faster kind's mean probe time / mean step time, and the same with
// the fastest probe and the fastest step of the run.
// The two columns are both printed; neither is dropped for the other.
// llama.cpp's decode and prefill times are its own (llama_perf_context:
// "eval time" and "prompt eval time", read from printTimings with
// performanceTracking on), so node-llama-cpp's JavaScript per-token cost is
// excluded; the wall-clock decode figure through node is printed in brackets.
// (Subtracting a per-token overhead measured on stories260K did not work:
// that overhead was 15.7 ms/token at 2 threads here, thread hand-off rather
// than JavaScript, and larger than a 1B model's whole decode step.)
// llama.cpp's RSS is the node process's VmHWM minus its VmRSS before the
// model was loaded (node itself excluded).
import {spawnSync} from "node:child_process";
import fs from "node:fs";
import path from "node:path";

const N_DECODE = 128, N_PREFILL = 512;
const ISA = process.env.ISA || "auto";
const LLAMA_BENCH = process.env.LLAMA_BENCH || "";

function promptIds(nVocab, n) {
    const ids = [];
    for (let i = 0; i < n; i++) ids.push(100 + ((i * 7919) % (nVocab - 200)));
    return ids;
}

function procStatus(key) {
    const m = fs.readFileSync("/proc/self/status", "utf8").match(new RegExp(`${key}:\\s+(\\d+)`));
    return m ? Number(m[1]) / 1024 : 0; // MiB
}

async function llamaChild(modelPath, threads, nVocab) {
    const {getLlama, LlamaLogLevel} = await import("node-llama-cpp");
    // info level: printTimings() reports through llama.cpp's log at that level.
    const llama = await getLlama({gpu: false, build: "never", logLevel: LlamaLogLevel.info});
    const base = procStatus("VmRSS");
    const model = await llama.loadModel({modelPath});
    const ctx = await model.createContext({contextSize: 1024, threads, batchSize: N_PREFILL,
                                           performanceTracking: true});
    const seq = ctx.getSequence();
    const next = {generateNext: {token: true, options: {temperature: 0}}};
    let input = [[1, next]];
    await seq.controlledEvaluate(input); // warm-up
    await ctx.printTimings();            // resets llama.cpp's counters
    const t0 = performance.now();
    for (let i = 0; i < N_DECODE; i++) {
        const res = await seq.controlledEvaluate(input);
        input = [[res[input.length - 1].next.token, next]];
    }
    const wallMsTok = (performance.now() - t0) / N_DECODE;
    console.log("BENCH-MARK decode-end");
    await ctx.printTimings();
    await seq.clearHistory();
    const ids = promptIds(nVocab, N_PREFILL);
    const items = ids.map((t, i) => i === ids.length - 1 ? [t, next] : t);
    console.log("BENCH-MARK prefill-start");
    await seq.controlledEvaluate(items);
    await ctx.printTimings();
    const rss = procStatus("VmHWM") - base;
    console.log(JSON.stringify({wallMsTok, rss}));
    await ctx.dispose();
    await model.dispose();
}

// The llama-bench peer (LLAMA_BENCH): decode = tg128 t/s, prefill = pp512
// t/s, both llama-bench's own averages over 3 repetitions; RSS = the peak
// of its process (GNU time's %M, KiB). One run a model, models in turn.
function llamaBenchRun(bin, file, threads) {
    const r = spawnSync("/usr/bin/time", ["-f", "BENCH-RSS %M", bin, "-m", file, "-t",
                                          String(threads), "-p", String(N_PREFILL), "-n",
                                          String(N_DECODE), "-r", "3", "-o", "json"],
                        {encoding: "utf8", maxBuffer: 64 << 20});
    if (r.status !== 0) throw new Error(`llama-bench failed on ${file}: ${r.stderr}`);
    const tests = JSON.parse(r.stdout);
    const ts = (p, g) => (tests.find((t) => t.n_prompt === p && t.n_gen === g) || {}).avg_ts;
    const rss = Number((r.stderr.match(/BENCH-RSS (\d+)/) || [])[1]) / 1024;
    const dec = ts(0, N_DECODE), pre = ts(N_PREFILL, 0);
    return {msTok: 1e3 / dec, wallMsTok: 1e3 / dec, prefillMs: N_PREFILL * 1e3 / pre, rss,
            cpu: tests[0].cpu_info};
}

// Runs one model in a child process; llama.cpp's own timings come from its
// output: "eval time = X ms / N runs" after the decode loop, "prompt eval
// time = X ms / N tokens" after the prefill.
function llamaRun(file, threads, nVocab) {
    const r = spawnSync(process.execPath, [new URL(import.meta.url).pathname, "--llama", file,
                                           String(threads), String(nVocab)],
                        {encoding: "utf8", maxBuffer: 64 << 20});
    if (r.status !== 0) throw new Error(`llama.cpp child failed on ${file}: ${r.stderr}`);
    // node-llama-cpp logs llama.cpp's info lines with console.info (stdout).
    const text = r.stdout + r.stderr;
    const out = JSON.parse(text.split("\n").find((l) => l.startsWith('{"wallMsTok"')));
    const dec = text.slice(text.indexOf("BENCH-MARK decode-end"));
    const pre = text.slice(text.indexOf("BENCH-MARK prefill-start"));
    const ev = dec.match(/ eval time =\s+([\d.]+) ms \/\s+(\d+) runs/);
    const pe = pre.match(/prompt eval time =\s+([\d.]+) ms \/\s+(\d+) tokens/);
    out.msTok = ev ? Number(ev[1]) / Number(ev[2]) : NaN;
    out.prefillMs = pe && Number(pe[2]) === N_PREFILL ? Number(pe[1]) : NaN;
    return out;
}

// n_vocab from `strata gguf info` (rows of token_embd).
function vocabSize(bin, file) {
    const m = strata(bin, ["gguf", "info", file]).match(/token_embd\.weight: (\d+) rows/);
    return m ? Number(m[1]) : NaN;
}

function strata(bin, args) {
    const r = spawnSync(bin, args, {encoding: "utf8", maxBuffer: 64 << 20});
    if (r.status !== 0) throw new Error(`strata ${args.slice(0, 3).join(" ")}: ${r.stderr}`);
    return r.stdout;
}

// Weight bytes read per decoded token, from `strata gguf info`.
function bytesPerToken(bin, file) {
    const info = strata(bin, ["gguf", "info", file]);
    const kv = (k) => {
        const m = info.match(new RegExp(`\\.${k}\\s+\\S+\\s+(\\d+)`));
        return m ? Number(m[1]) : 0;
    };
    const nExp = kv("expert_count"), nUsed = kv("expert_used_count");
    let total = 0, hasOutput = false, embd = 0;
    for (const line of info.split("\n")) {
        const m = line.match(/^\s+\d+\s+(\S+)\s+\S+\s+.*\s(\d+)\s+\d+$/);
        if (!m) continue;
        const [name, bytes] = [m[1], Number(m[2])];
        if (name === "output.weight") hasOutput = true;
        if (name === "token_embd.weight") {
            embd = bytes;
            continue;
        }
        total += name.includes("_exps") && nExp ? bytes * nUsed / nExp : bytes;
    }
    return hasOutput ? total : total + embd; // tied: the output matmul reads token_embd
}

// One interleaved decode of `file` (bench/bench-model): [file GB/s, anonymous
// GB/s, decode/roofline mean over mean %, fastest over fastest %].
function interleaved(benchModel, file, threads, bpt) {
    const bm = spawnSync(benchModel, [file, String(threads), String(N_DECODE), "16", "1",
                                      String(bpt), ISA], {encoding: "utf8"});
    const im = bm.stdout.match(
        /interleaved probe: file ([\d.]+) GB\/s, anonymous ([\d.]+) GB\/s.*decode\/roofline ([\d.]+)%.*: ([\d.]+)%/);
    console.error(`bench-model: ${(bm.stdout + bm.stderr).trim()}`);
    return im ? [Number(im[1]), Number(im[2]), Number(im[3]), Number(im[4])] : [NaN, NaN, NaN, NaN];
}

async function main() {
    const [bin, roofBin, dir, thr, benchModel] = process.argv.slice(2);
    const threads = Number(thr || 2);
    fs.mkdirSync(dir, {recursive: true});
    const models = [
        {name: "llama-3.2-1b Q4_0", preset: "llama-3.2-1b", recipe: "q4_0"},
        {name: "llama-3.2-1b Q4_K_M", preset: "llama-3.2-1b", recipe: "q4_k_m"},
        {name: "qwen3-0.6b Q8_0", preset: "qwen3-0.6b", recipe: "q8_0"},
        {name: "olmoe-1b-7b Q4_K_M", preset: "olmoe-1b-7b", recipe: "q4_k_m", moe: true},
    ];
    for (const m of models) {
        m.file = path.join(dir, `${m.preset}-${m.recipe}.gguf`);
        if (!fs.existsSync(m.file)) {
            console.error(`synthesizing ${m.file} ...`);
            strata(bin, ["gguf", "synth", "--preset", m.preset, "--type", m.recipe, "--out",
                         m.file + ".tmp", "--seed", "1", "--threads", String(threads)]);
            fs.renameSync(m.file + ".tmp", m.file);
        }
    }
    const probe = () => {
        const roof = spawnSync(roofBin, [String(threads), "1024", "5"], {encoding: "utf8"});
        const g = Number((roof.stdout.match(/read_gbs ([\d.]+)/) || [])[1]);
        console.error(`roofline probe: ${roof.stdout.trim()}`);
        return g;
    };
    const probes = [];
    const rows = [];
    let kernels = "";
    for (const m of models) {
        const bpt = bytesPerToken(bin, m.file);
        const nVocab = vocabSize(bin, m.file);
        const L = LLAMA_BENCH ? llamaBenchRun(LLAMA_BENCH, m.file, threads)
                              : llamaRun(m.file, threads, nVocab);
        const ids = promptIds(nVocab, N_PREFILL);
        const pre = JSON.parse(strata(bin, ["run", "-m", m.file, "--ids", ids.join(","), "-n", "1",
                                            "--temp", "0", "-t", String(threads), "--isa", ISA,
                                            "--json"]));
        const gBefore = probe();
        const dec = JSON.parse(strata(bin, ["run", "-m", m.file, "--ids", String(ids[0]), "-n",
                                            String(N_DECODE + 1), "--temp", "0", "--ignore-eos",
                                            "-t", String(threads), "--isa", ISA, "--json"]));
        kernels = `${dec.kernels.isa} (CPU: ${dec.kernels.detected}), weights ${dec.kernels.weights_layout}`;
        const gAfter = probe();
        probes.push(gBefore, gAfter);
        m.bpt = bpt;
        let iFile = NaN, iGbs = NaN, iFrac = NaN, iBest = NaN;
        if (benchModel) [iFile, iGbs, iFrac, iBest] = interleaved(benchModel, m.file, threads, bpt);
        const gbs = Math.max(gBefore, gAfter);
        const roofTok = gbs * 1e9 / bpt;
        const r = {
            model: m.name,
            sDec: dec.timings.gen_tok_s,
            lDec: 1e3 / L.msTok,
            lDecWall: 1e3 / L.wallMsTok,
            sPre: pre.timings.prompt_tok_s,
            lPre: N_PREFILL * 1e3 / L.prefillMs,
            sRss: Math.max(pre.timings.peak_rss_mb, dec.timings.peak_rss_mb),
            lRss: L.rss,
            bpt, roofTok, gBefore, gAfter, iFile, iGbs, iFrac, iBest,
        };
        rows.push(r);
        console.error(JSON.stringify(r));
    }
    const f = (x, d = 1) => Number.isFinite(x) ? x.toFixed(d) : "n/a";
    console.log(`threads ${threads}; strata kernels ${kernels}; read bandwidth ` +
                `${f(Math.min(...probes), 2)}-${f(Math.max(...probes), 2)} GB/s over the run ` +
                `(bench/roofline; each model's roofline uses the higher probe around its decode); ` +
                (LLAMA_BENCH ? `llama.cpp: ${LLAMA_BENCH} (llama-bench tg${N_DECODE} / pp${N_PREFILL} ` +
                                   `t/s, -r 3; its process's peak RSS)`
                             : `llama.cpp: node-llama-cpp, decode/prefill from its own perf counters ` +
                                   `(decode wall clock through node in brackets)`));
    console.log("| model | MB/token | GB/s before/after | roofline tok/s | strata decode | " +
                "llama.cpp decode | decode ratio | strata/roofline | interleaved GB/s file/anon | " +
                "interleaved decode/roofline (mean, fastest) | strata prefill | " +
                "llama.cpp prefill | prefill ratio | strata RSS MiB | llama.cpp RSS MiB | RSS ratio |");
    console.log("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|");
    for (const r of rows)
        console.log(`| ${r.model} | ${f(r.bpt / 1e6)} | ${f(r.gBefore)}/${f(r.gAfter)} | ` +
                    `${f(r.roofTok)} | ${f(r.sDec)} | ` +
                    `${f(r.lDec)} (${f(r.lDecWall)}) | ${f(r.sDec / r.lDec, 2)} | ` +
                    `${f(100 * r.sDec / r.roofTok, 0)}% | ${f(r.iFile)}/${f(r.iGbs)} | ` +
                    `${f(r.iFrac)}%, ${f(r.iBest)}% | ` +
                    `${f(r.sPre)} | ${f(r.lPre)} | ` +
                    `${f(r.sPre / r.lPre, 2)} | ${f(r.sRss)} | ${f(r.lRss)} | ` +
                    `${f(r.sRss / r.lRss, 2)} |`);
    // ROUNDS=N: N more interleaved decodes per model, the models in turn (so
    // each round's four share a few minutes of this VM's bandwidth), then per
    // model the sorted decode/roofline figures and their median.
    const rounds = Number(process.env.ROUNDS || 0);
    if (!benchModel || rounds < 1)
        return;
    const got = models.map(() => []);
    for (let k = 0; k < rounds; k++)
        models.forEach((m, i) => got[i].push(interleaved(benchModel, m.file, threads, m.bpt)));
    const med = (a) => {
        const s = [...a].sort((x, y) => x - y), n = s.length;
        return n % 2 ? s[(n - 1) / 2] : (s[n / 2 - 1] + s[n / 2]) / 2;
    };
    console.log(`\n${rounds} more interleaved rounds (decode/roofline, mean over mean; sorted):`);
    console.log("| model | rounds | median | fastest-over-fastest median | target |");
    console.log("|---|---|---|---|---|");
    models.forEach((m, i) => {
        const mean = got[i].map((g) => g[2]), fast = got[i].map((g) => g[3]);
        console.log(`| ${m.name} | ${[...mean].sort((x, y) => x - y).map((x) => f(x) + "%").join(", ")} | ` +
                    `${f(med(mean))}% | ${f(med(fast))}% | ${m.moe ? 90 : 95}% |`);
    });
}

if (process.argv[2] === "--llama")
    await llamaChild(process.argv[3], Number(process.argv[4]), Number(process.argv[5]));
else await main();
