// tests/peers/tokenizer-llamacpp.mjs: cross-checks `strata tokenize` against
// llama.cpp (through node-llama-cpp) on every shared vocab fixture, with
// random mixed-script strings that contain special-token text, both with
// special-token parsing on and off (BOS/EOS not added).
//
//   node tests/peers/tokenizer-llamacpp.mjs path/to/strata
//
// Then detokenizes llama.cpp's ids with `strata detokenize --batch --clean`
// (llama.cpp's detokenize: leading-space strip, clean-up of spaces) and
// compares the text (both sides decoded as WHATWG UTF-8).
//
// Prints `RESULT tokenizer-llamacpp: N passed, M failed` (one check per vocab,
// mode and direction; a check passes when every string is identical).
import {getLlama} from "node-llama-cpp";
import {spawnSync} from "node:child_process";
import {existsSync} from "node:fs";
import path from "node:path";

const strata = process.argv[2];
const shared = process.env.STRATA_SHARED_DIR || "../shared";
const vocabs = ["llama-spm", "phi-3", "gpt-2", "deepseek-coder", "deepseek-llm", "falcon",
                "starcoder", "refact", "mpt", "bert-bge", "baichuan", "gpt-neox"];
const N_STRINGS = Number(process.env.TOKENIZER_PEER_N || 200);

// xorshift32: deterministic, so a failure reproduces
let seed = 0x2545f491;
const rnd = (n) => {
    seed ^= seed << 13; seed >>>= 0;
    seed ^= seed >>> 17;
    seed ^= seed << 5; seed >>>= 0;
    return seed % n;
};
const pool = [
    "Hello", "world", " ", "  ", "   ", "\n", "\n\n", "\t", "\r\n", " \n", "12", "3333", "1.5",
    "'s", "'LL", "'ve", "I'm", "don't", "...", "!!", "?", ",", "(", ")", "\"", "``", "$", "-",
    "==", "ied", "é", "ü", "Führer", "naïve", "e\u0301", "\u00a0", "\u3000", "\u2581", "🦙",
    "😶‍🌫️", "🚀", "我想在", "apple", "工作", "한국어", "нещо", "Български", "مرحبا", "कान",
    "ㄱ", "Ⅻ", "½", "©", "`", "~", "<", ">", "<s>", "</s>", "<unk>", "<|endoftext|>",
    "<|im_start|>", "<|end|>", "<|user|>", "[CLS]", "[SEP]", "[MASK]", "<pad>", "<EOT>",
    "\u00ad", "\u200b", "\u2028", "\u2003", "\u1680", "\u0085", "\u000b", "\u000c", "x", "Y",
    "_", "__init__", "0x1F", "\u0301", "Ǆ", "ǅ", "ß", "İ", "ﬁ", "Ω",
];
function randomString() {
    const k = 1 + rnd(12);
    let s = "";
    for (let i = 0; i < k; i++)
        s += pool[rnd(pool.length)];
    return s;
}

const llama = await getLlama({gpu: false, build: "never"});
let passed = 0, failed = 0;
for (const v of vocabs) {
    const file = path.join(shared, "fixtures/vocab", `ggml-vocab-${v}.gguf`);
    if (!existsSync(file)) {
        console.log(`FAIL ${v}: missing ${file}`);
        failed++;
        continue;
    }
    const model = await llama.loadModel({modelPath: file, vocabOnly: true});
    const strings = [];
    for (let i = 0; i < N_STRINGS; i++)
        strings.push(randomString());
    for (const special of [true, false]) {
        const args = ["tokenize", "-m", file, "--batch", special ? "--no-bos" : "--no-special"];
        const r = spawnSync(strata, args, {input: strings.map((s) => JSON.stringify(s)).join("\n") + "\n",
                                           encoding: "utf8", maxBuffer: 64 << 20});
        const lines = (r.stdout || "").split("\n");
        let bad = 0;
        if (r.error || r.status !== 0) {
            console.log(`FAIL ${v}: strata ${r.error ? `did not run: ${r.error.message}`
                                                    : `exited ${r.status}: ${r.stderr}`}`);
            bad = strings.length;
        }
        for (let i = 0; i < strings.length && !bad; i++) {
            const want = Array.from(model.tokenize(strings[i], special)).join(" ");
            const got = (lines[i] || "").trim();
            if (want !== got) {
                if (bad < 3)
                    console.log(`  ${v} special=${special} ${JSON.stringify(strings[i])}\n` +
                                `    llama.cpp ${want}\n    strata    ${got}`);
                bad++;
            }
        }
        console.log(`vocab ${v.padEnd(15)} special=${special ? "on " : "off"} ` +
                    `${strings.length - bad}/${strings.length} identical`);
        if (bad) failed++; else passed++;

        // detokenize llama.cpp's ids both ways
        const idLists = strings.map((str) => Array.from(model.tokenize(str, special)));
        const dargs = ["detokenize", "-m", file, "--batch", "--clean"];
        if (special)
            dargs.push("--special");
        const d = spawnSync(strata, dargs, {input: idLists.map((l) => l.join(" ")).join("\n") + "\n",
                                            encoding: "utf8", maxBuffer: 64 << 20});
        const dlines = d.stdout.split("\n");
        let dbad = d.status === 0 ? 0 : strings.length;
        if (d.status !== 0)
            console.log(`FAIL ${v}: strata detokenize exited ${d.status}: ${d.stderr}`);
        const dec = new TextDecoder();
        for (let i = 0; i < strings.length && d.status === 0; i++) {
            const want = model.detokenize(idLists[i], special);
            const got = dec.decode(Buffer.from(dlines[i] || "", "hex"));
            if (want !== got) {
                if (dbad < 3)
                    console.log(`  ${v} detok special=${special} ${JSON.stringify(idLists[i].join(" "))}\n` +
                                `    llama.cpp ${JSON.stringify(want)}\n    strata    ${JSON.stringify(got)}`);
                dbad++;
            }
        }
        console.log(`vocab ${v.padEnd(15)} special=${special ? "on " : "off"} ` +
                    `${strings.length - dbad}/${strings.length} identical (detokenize)`);
        if (dbad) failed++; else passed++;
    }
    await model.dispose();
}
console.log(`RESULT tokenizer-llamacpp: ${passed} passed, ${failed} failed`);
process.exit(failed ? 1 : 0);
