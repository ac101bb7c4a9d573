#!/usr/bin/env node
// Second opinion on chat templates: strata vs Python Jinja2 vs @huggingface/jinja.
//
// usage: node templates-hf.mjs STRATA_BINARY
//
// Python Jinja2 (configured as transformers' apply_chat_template, through
// templates-ref.py) is the reference. Over the same corpus as
// templates-exact.py (17 fixture templates + 4 @lenml chat templates x 16
// conversations x add_generation_prompt on/off) this renders each case with
// `strata template` and with @huggingface/jinja's Template, then prints
// per-template agreement of both with the reference and lists
// @huggingface/jinja's disagreements grouped by reason class.
//
// Pass/fail: a case passes when strata agrees with Python (same bytes, or both
// fail where Python raises). @huggingface/jinja's disagreements are printed
// and counted but never fail the test (they are the peer's bugs: Python wins).
// Prints `RESULT templates-hf: N passed, M failed`.
import { spawn, spawnSync } from "node:child_process";
import { mkdtempSync, writeFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { Template } from "@huggingface/jinja";

const HERE = dirname(fileURLToPath(import.meta.url));
const strata = process.argv[2];
if (!strata) {
    console.error("usage: templates-hf.mjs STRATA_BINARY");
    process.exit(2);
}

// 1. Reference renders from Python Jinja2 (one interpreter for all 672).
const py = spawnSync("python3", [join(HERE, "templates-ref.py")], {
    maxBuffer: 256 << 20,
    encoding: "utf-8",
});
if (py.status !== 0) {
    console.error("templates-ref.py failed:", py.stderr);
    console.log("RESULT templates-hf: 0 passed, 1 failed");
    process.exit(1);
}
const ref = JSON.parse(py.stdout);

// 2. strata renders, a few processes at a time (each is one ASan start-up).
const tmp = mkdtempSync(join(tmpdir(), "strata-tpl-hf-"));
const convFiles = ref.conversations.map((c, i) => {
    const p = join(tmp, `conv${i}.json`);
    const body = { messages: c.messages };
    if (c.tools !== undefined) body.tools = c.tools;
    writeFileSync(p, JSON.stringify(body));
    return p;
});
const tplFiles = ref.templates.map((t, i) => {
    const p = join(tmp, `t${i}.jinja`);
    writeFileSync(p, t.src ?? "");
    return p;
});

function runStrata(r) {
    const t = ref.templates[r.t];
    const args = ["template", "--template", tplFiles[r.t], "--bos", t.bos, "--eos", t.eos];
    if (!r.agp) args.push("--no-generation-prompt");
    args.push(convFiles[r.c]);
    return new Promise((resolve) => {
        const p = spawn(strata, args);
        const out = [];
        const err = [];
        const timer = setTimeout(() => p.kill("SIGKILL"), 60000);
        p.stdout.on("data", (d) => out.push(d));
        p.stderr.on("data", (d) => err.push(d));
        p.on("close", (code) => {
            clearTimeout(timer);
            resolve({
                code,
                text: Buffer.concat(out).toString("utf-8"),
                stderr: Buffer.concat(err).toString("utf-8"),
            });
        });
    });
}

async function runAll(items, width, fn) {
    const res = new Array(items.length);
    let next = 0;
    const workers = Array.from({ length: width }, async () => {
        while (next < items.length) {
            const i = next++;
            res[i] = await fn(items[i]);
        }
    });
    await Promise.all(workers);
    return res;
}

const strataRes = await runAll(ref.renders, 3, runStrata);

// 3. @huggingface/jinja renders, in process.
const hfCompiled = ref.templates.map((t) => {
    if (t.src == null) return { error: "template source missing" };
    try {
        return { tpl: new Template(t.src) };
    } catch (e) {
        return { error: String(e && e.message ? e.message : e) };
    }
});

function hfRender(r) {
    const t = ref.templates[r.t];
    const c = ref.conversations[r.c];
    const h = hfCompiled[r.t];
    if (h.error) return { error: `parse: ${h.error}` };
    try {
        // Same globals as the reference: tools is none when absent, documents none.
        const text = h.tpl.render({
            messages: c.flat_messages,
            tools: c.tools ?? null,
            documents: null,
            add_generation_prompt: r.agp,
            bos_token: t.bos,
            eos_token: t.eos,
        });
        return { text };
    } catch (e) {
        return { error: String(e && e.message ? e.message : e) };
    }
}

const short = (s, n = 90) => (s.length > n ? s.slice(0, n) + "..." : s).replace(/\n/g, "\\n");

// Reason class of a peer disagreement with the reference.
function classify(want, got) {
    if (want.error == null && got.error != null) {
        const kind = got.error.startsWith("parse: ") ? "peer parse error" : "peer raised";
        return `${kind}: ${short(got.error.replace(/^parse: /, ""))}`;
    }
    if (want.error != null && got.error == null)
        return `peer rendered where Python raised (${short(want.error, 60)})`;
    const a = want.text;
    const b = got.text;
    if (a.replace(/\s+/g, "") === b.replace(/\s+/g, "")) return "whitespace differs";
    let i = 0;
    while (i < a.length && i < b.length && a[i] === b[i]) i++;
    const ctx = a.slice(Math.max(0, i - 12), i);
    return `text differs after ${JSON.stringify(ctx)}: want ${JSON.stringify(
        a.slice(i, i + 24),
    )} got ${JSON.stringify(b.slice(i, i + 24))}`;
}

let passed = 0;
let failed = 0;
let hfAgree = 0;
let hfDisagree = 0;
const perTpl = ref.templates.map(() => ({ strata: 0, hf: 0, n: 0, reasons: new Map() }));
for (const t of ref.templates.keys()) {
    if (ref.templates[t].parse_error) {
        console.log(`  ${ref.templates[t].name}: reference cannot parse: ${ref.templates[t].parse_error}`);
        failed++;
    }
}
ref.renders.forEach((r, i) => {
    const name = ref.templates[r.t].name;
    const conv = ref.conversations[r.c].name;
    const pt = perTpl[r.t];
    pt.n++;
    const s = strataRes[i];
    const asan = /AddressSanitizer|LeakSanitizer|runtime error:/.test(s.stderr);
    const strataOk =
        r.error != null ? s.code !== 0 && s.code !== null && !asan : s.code === 0 && s.text === r.text && !asan;
    if (strataOk) {
        passed++;
        pt.strata++;
    } else {
        failed++;
        console.log(`  STRATA MISMATCH ${name} / ${conv} agp=${r.agp} rc=${s.code}`);
        if (r.error != null) console.log(`    Python raised: ${short(r.error, 200)}`);
        else {
            console.log(`    expected: ${short(JSON.stringify(r.text), 300)}`);
            console.log(`    got:      ${short(JSON.stringify(s.text), 300)}`);
        }
        console.log(`    stderr:   ${short(s.stderr, 300)}`);
    }
    const h = hfRender(r);
    const hfOk = r.error != null ? h.error != null : h.error == null && h.text === r.text;
    if (hfOk) {
        hfAgree++;
        pt.hf++;
    } else {
        hfDisagree++;
        const why = classify(r, h);
        const e = pt.reasons.get(why) ?? [];
        e.push(`${conv}${r.agp ? "" : " (no agp)"}`);
        pt.reasons.set(why, e);
    }
});
rmSync(tmp, { recursive: true, force: true });

console.log("per template: strata==Python, @huggingface/jinja==Python (of n renders)");
const classTotals = new Map();
ref.templates.forEach((t, ti) => {
    const pt = perTpl[ti];
    console.log(`${t.name}: strata ${pt.strata}/${pt.n}, hf ${pt.hf}/${pt.n}`);
    for (const [why, cases] of pt.reasons) {
        const more = cases.length > 3 ? ` +${cases.length - 3} more` : "";
        console.log(`    hf: ${why}  [${cases.length}: ${cases.slice(0, 3).join(", ")}${more}]`);
        const cls = why.match(/^(peer parse error|peer raised|peer rendered where Python raised|whitespace differs|text differs)/)[1];
        classTotals.set(cls, (classTotals.get(cls) ?? 0) + cases.length);
    }
});
console.log(`strata agrees with Python: ${passed}/${ref.renders.length}`);
console.log(
    `@huggingface/jinja agrees with Python: ${hfAgree}/${ref.renders.length} ` +
        `(${hfDisagree} disagreements, informational)`,
);
for (const [cls, n] of classTotals) console.log(`  hf disagreements, ${cls}: ${n}`);
console.log(`RESULT templates-hf: ${passed} passed, ${failed} failed`);
process.exit(failed ? 1 : 0);
