// bench/tokenize.mjs: tokenizer encode throughput, strata vs llama.cpp
// (node-llama-cpp) in the same run, on 1 MiB of mixed text.
//
//   node bench/tokenize.mjs [path/to/strata] [REPEATS]
//     default strata: build/cli/strata (a release build); REPEATS: 5
//
// Text: the tok-cross corpus (tests/peers/tok-corpus.mjs: many scripts,
// emoji, code, whitespace runs, numbers, special-token look-alikes) joined by
// newlines and repeated up to 1 MiB of UTF-8 (cut at a line end).
// Vocabularies: ../shared/fixtures/vocab/ggml-vocab-{gpt-2,llama-spm}.gguf.
// Timings (best of REPEATS, wall clock):
//   strata   : `strata tokenize -m VOCAB --no-special -` with the text on stdin,
//              minus the same command with empty stdin. So it counts reading
//              stdin, encoding, and formatting + writing the ids to a pipe, not
//              process start or vocabulary load (the empty run's time, printed).
//   llama.cpp: model.tokenize(text, false) inside node: the JS -> C++ string
//              copy, llama_tokenize, and the Uint32Array back; the vocabulary
//              is loaded once before (load time printed).
// Both sides must produce identical ids (checked; a mismatch is printed).
import {getLlama} from "node-llama-cpp";
import {spawnSync} from "node:child_process";
import {existsSync} from "node:fs";
import path from "node:path";

import {buildCorpus} from "../tests/peers/tok-corpus.mjs";

const strata = process.argv[2] || "build/cli/strata";
const repeats = Number(process.argv[3] || 5);
const shared = process.env.STRATA_SHARED_DIR || "../shared";
const MIB = 1 << 20;

function mixedText() {
    const lines = buildCorpus(shared);
    let out = "", bytes = 0;
    for (let i = 0;; i++) {
        const l = lines[i % lines.length] + "\n";
        const n = Buffer.byteLength(l);
        if (bytes + n > MIB)
            break;
        out += l;
        bytes += n;
    }
    return out;
}

function runStrata(vocab, input) {
    const t = process.hrtime.bigint();
    const r = spawnSync(strata, ["tokenize", "-m", vocab, "--no-special", "-"],
                        {input, encoding: "utf8", maxBuffer: 256 << 20});
    const s = Number(process.hrtime.bigint() - t) / 1e9;
    if (r.status !== 0)
        throw new Error(`strata exited ${r.status}: ${r.stderr}`);
    return {s, out: r.stdout.trim()};
}

const best = (f) => {
    let b = Infinity, last;
    for (let i = 0; i < repeats; i++) {
        const r = f();
        b = Math.min(b, r.s);
        last = r;
    }
    return {s: b, out: last.out};
};

if (!existsSync(strata)) {
    console.error(`bench/tokenize: ${strata} not found (meson setup build --buildtype=release && ninja -C build cli/strata)`);
    process.exit(2);
}
const text = mixedText();
console.log(`text: ${Buffer.byteLength(text)} bytes, ${text.split("\n").length - 1} lines; ` +
            `strata ${strata}; best of ${repeats}`);
const llama = await getLlama({gpu: false, build: "never"});
const rows = [];
for (const name of ["gpt-2", "llama-spm"]) {
    const vocab = path.join(shared, "fixtures/vocab", `ggml-vocab-${name}.gguf`);
    let t = process.hrtime.bigint();
    const model = await llama.loadModel({modelPath: vocab, vocabOnly: true});
    const llamaLoad = Number(process.hrtime.bigint() - t) / 1e9;
    const ll = best(() => {
        const t0 = process.hrtime.bigint();
        const ids = model.tokenize(text, false);
        return {s: Number(process.hrtime.bigint() - t0) / 1e9, out: ids};
    });
    const empty = best(() => runStrata(vocab, ""));
    const full = best(() => runStrata(vocab, text));
    const ids = full.out.split(" ");
    const want = Array.from(ll.out);
    let same = ids.length === want.length;
    for (let i = 0; same && i < ids.length; i++)
        same = Number(ids[i]) === want[i];
    const encS = Math.max(full.s - empty.s, 1e-9);
    const row = {
        vocab: name, tokens: want.length, identical: same,
        strata_tok_s: ids.length / encS, llama_tok_s: want.length / ll.s,
        strata_encode_s: encS, strata_load_s: empty.s, llama_encode_s: ll.s, llama_load_s: llamaLoad,
    };
    row.ratio = row.strata_tok_s / row.llama_tok_s;
    rows.push(row);
    console.log(`${name.padEnd(10)} ${row.tokens} tokens (ids ${same ? "identical" : "DIFFER"}): ` +
                `strata ${(row.strata_tok_s / 1e6).toFixed(2)} M tok/s (${(encS * 1e3).toFixed(0)} ms; ` +
                `start+load ${(empty.s * 1e3).toFixed(0)} ms), llama.cpp ${(row.llama_tok_s / 1e6).toFixed(2)} ` +
                `M tok/s (${(ll.s * 1e3).toFixed(0)} ms; load ${(llamaLoad * 1e3).toFixed(0)} ms), ` +
                `strata/llama.cpp ${row.ratio.toFixed(2)}x`);
    await model.dispose();
}
console.log(JSON.stringify(rows));
