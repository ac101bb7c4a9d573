// tests/peers/synth-llamacpp.mjs: models written by `strata gguf synth` and
// `strata gguf quantize` must load and run in llama.cpp (node-llama-cpp).
//
//   node tests/peers/synth-llamacpp.mjs path/to/strata
//
// For every arch x recipe (tiny geometries, so the whole run takes well under
// two minutes) it synthesizes a model, loads it, generates a few greedy
// tokens and checks the next-token distribution is finite and sums to 1.
// It also loads a model built with --vocab-from ggml-vocab-gpt-2.gguf and
// checks llama.cpp tokenizes the fixture's inputs to the expected ids, and
// a requantized model. Prints `RESULT synth-llamacpp: N passed, M failed`.
import {spawnSync} from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import {getLlama, LlamaLogLevel} from "node-llama-cpp";

const strata = process.argv[2];
const shared = process.env.STRATA_SHARED_DIR || "../shared";
let passed = 0, failed = 0;
function check(ok, what) {
    if (ok) passed++;
    else {
        failed++;
        console.log(`FAIL ${what}`);
    }
}

const dir = fs.mkdtempSync(path.join(os.tmpdir(), "strata-synth-peer-"));
function strataRun(args) {
    const r = spawnSync(strata, args, {encoding: "utf8"});
    if (r.status !== 0) console.log(`strata ${args.join(" ")}\n${r.stderr}`);
    return r.status === 0;
}

// Tiny geometries: n_embd 256 so K-quants apply without fallback (one
// 96-wide case exercises the fallbacks).
const dense = ["--n-embd", "256", "--n-layer", "2", "--n-head", "4", "--n-head-kv", "2",
               "--n-ff", "512", "--n-vocab", "512", "--ctx", "256"];
const moe = [...dense, "--n-expert", "8", "--n-expert-used", "2", "--n-ff-exp", "256"];
const archs = [
    {tag: "llama", args: ["--arch", "llama", ...dense]},
    {tag: "qwen2", args: ["--arch", "qwen2", ...dense]},
    {tag: "qwen3", args: ["--arch", "qwen3", ...dense, "--head-dim", "64"]},
    {tag: "qwen3moe", args: ["--arch", "qwen3moe", ...moe, "--route-skew", "zipf:1.0"], moe: true},
    {tag: "mixtral", args: ["--arch", "llama", ...moe], moe: true},
];
const recipes = ["f16", "q8_0", "q4_0", "q4_k_m", "q6_k", "mxfp4"];

const llama = await getLlama({gpu: false, build: "never", logLevel: LlamaLogLevel.error});

async function runModel(file, what, nGen = 4) {
    let model;
    try {
        model = await llama.loadModel({modelPath: file});
    } catch (e) {
        check(false, `${what}: load: ${e.message}`);
        return null;
    }
    try {
        const ctx = await model.createContext({contextSize: 64, threads: 1});
        const seq = ctx.getSequence();
        const prompt = model.tokenize("Once upon a time");
        let n = 0, finite = true, sums = true;
        for await (const out of seq.evaluateWithMetadata(prompt, {probabilities: true},
                                                         {temperature: 0})) {
            let sum = 0;
            for (const p of out.probabilities.values()) {
                if (!Number.isFinite(p)) finite = false;
                sum += p;
            }
            if (Math.abs(sum - 1) > 1e-3) sums = false;
            if (++n >= nGen) break;
        }
        check(n === nGen && prompt.length > 0, `${what}: generated ${n} tokens`);
        check(finite && sums, `${what}: next-token probabilities finite and sum to 1`);
        await ctx.dispose();
    } catch (e) {
        check(false, `${what}: generate: ${e.message}`);
    }
    return model;
}

const t0 = Date.now();
for (const a of archs) {
    for (const r of recipes) {
        if (r === "mxfp4" && !a.moe) continue;
        const file = path.join(dir, `${a.tag}-${r}.gguf`);
        const ok = strataRun(["gguf", "synth", ...a.args, "--type", r, "--out", file,
                              "--seed", "7", "--threads", "2"]);
        check(ok, `synth ${a.tag} ${r}`);
        if (!ok) continue;
        const m = await runModel(file, `${a.tag} ${r}`);
        if (m) await m.dispose();
        if (r !== "f16") fs.rmSync(file);
    }
}

// The remaining recipes, on the dense llama geometry.
for (const r of ["f32", "bf16", "q4_1", "q5_0", "q5_1", "q4_k_s", "q5_k_s", "q5_k_m",
                 "pure:q2_K", "pure:q3_K", "pure:q5_K", "pure:iq4_nl", "pure:iq4_xs"]) {
    const file = path.join(dir, `llama-${r.replace(":", "-")}.gguf`);
    const ok = strataRun(["gguf", "synth", ...archs[0].args, "--type", r, "--out", file]);
    check(ok, `synth llama ${r}`);
    if (!ok) continue;
    const m = await runModel(file, `llama ${r}`, 2);
    if (m) await m.dispose();
    fs.rmSync(file);
}

// Row length 96: K-quant and q4_k_m fallbacks (Q4_K -> Q5_0, Q6_K -> Q8_0).
{
    const file = path.join(dir, "fallback.gguf");
    const ok = strataRun(["gguf", "synth", "--arch", "qwen2", "--n-embd", "96", "--n-layer", "2",
                          "--n-head", "2", "--n-head-kv", "1", "--n-ff", "160", "--n-vocab", "300",
                          "--type", "q4_k_m", "--out", file]);
    check(ok, "synth fallback geometry");
    if (ok) {
        const m = await runModel(file, "fallback q4_k_m");
        if (m) await m.dispose();
    }
}

// Requantize the f16 llama and qwen3moe models.
for (const [tag, recipe] of [["llama", "q4_k_m"], ["qwen3moe", "q8_0"]]) {
    const src = path.join(dir, `${tag}-f16.gguf`), dst = path.join(dir, `${tag}-requant.gguf`);
    const ok = fs.existsSync(src) && strataRun(["gguf", "quantize", src, dst, recipe]);
    check(ok, `quantize ${tag} f16 -> ${recipe}`);
    if (ok) {
        const m = await runModel(dst, `requantized ${tag} ${recipe}`);
        if (m) await m.dispose();
    }
}

// --vocab-from: llama.cpp must tokenize exactly as the vocab fixture says.
{
    const vocab = path.join(shared, "fixtures/vocab/ggml-vocab-gpt-2.gguf");
    const file = path.join(dir, "gpt2-vocab.gguf");
    const ok = fs.existsSync(vocab) &&
               strataRun(["gguf", "synth", "--arch", "llama", ...dense, "--type", "q8_0",
                          "--vocab-from", vocab, "--out", file]);
    check(ok, `synth --vocab-from ${vocab}`);
    if (ok) {
        const m = await runModel(file, "gpt-2 vocab model", 2);
        if (m) {
            const inputs = fs.readFileSync(vocab + ".inp", "utf8").split("\n__ggml_vocab_test__\n");
            const outs = fs.readFileSync(vocab + ".out", "utf8").split("\n");
            let good = 0, total = 0;
            for (let i = 0; i < inputs.length && i < outs.length; i++) {
                const want = outs[i].trim() === "" ? [] : outs[i].trim().split(/\s+/).map(Number);
                const got = Array.from(m.tokenize(inputs[i], false));
                total++;
                if (JSON.stringify(got) === JSON.stringify(want)) good++;
                else if (total - good <= 3)
                    console.log(`tokenize mismatch #${i} ${JSON.stringify(inputs[i])}: ` +
                                `${JSON.stringify(got)} != ${JSON.stringify(want)}`);
            }
            check(total > 10 && good === total, `gpt-2 vocab tokenization ${good}/${total}`);
            check(m.tokens.bos !== null || m.tokens.eos !== null, "gpt-2 vocab special tokens");
            await m.dispose();
        }
    }
}

fs.rmSync(dir, {recursive: true, force: true});
console.log(`elapsed ${((Date.now() - t0) / 1000).toFixed(1)} s`);
console.log(`RESULT synth-llamacpp: ${passed} passed, ${failed} failed`);
process.exit(failed ? 1 : 0);
