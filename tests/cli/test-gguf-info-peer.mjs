// tests/cli/test-gguf-info-peer.mjs STRATA: cross-checks `strata gguf info`
// against node-llama-cpp's own GGUF parser (readGgufFileInfo, pure JS) on
// every .gguf in ../shared: version, counts, data offset, every tensor's
// name/type/shape/offset, every key, and the values of scalar keys and the
// shown elements of arrays. Prints `RESULT gguf-info-peer: N passed, M failed`.
import { execFileSync } from "node:child_process";
import { readdirSync } from "node:fs";
import path from "node:path";
import { readGgufFileInfo } from "node-llama-cpp";

const strata = process.argv[2];
const shared = process.env.STRATA_SHARED_DIR || "../shared";
let passed = 0, failed = 0;
const check = (cond, what) => {
    if (cond) passed++;
    else { failed++; console.log("FAIL:", what); }
};

// ggml type ids -> strata's names (quant-traits.c) for the types in use.
const typeNames = { 0: "f32", 1: "f16", 2: "q4_0", 3: "q4_1", 6: "q5_0", 7: "q5_1", 8: "q8_0",
                    10: "q2_K", 11: "q3_K", 12: "q4_K", 13: "q5_K", 14: "q6_K", 30: "bf16" };

// Mirrors cmd-gguf.c's print_str: quoted, escaped, cut at 64 bytes.
function showStr(s) {
    const b = Buffer.from(s, "utf8");
    let o = '"';
    for (const c of b.subarray(0, 64)) {
        if (c === 0x22 || c === 0x5c) o += "\\" + String.fromCharCode(c);
        else if (c === 0x0a) o += "\\n";
        else if (c >= 0x20 && c < 0x7f) o += String.fromCharCode(c);
        else o += "\\x" + c.toString(16).padStart(2, "0");
    }
    o += '"';
    if (b.length > 64) o += `...(${b.length} bytes)`;
    return o;
}

function flatten(obj, prefix, out) {
    for (const [k, v] of Object.entries(obj)) {
        const key = prefix ? prefix + "." + k : k;
        if (v !== null && typeof v === "object" && !Array.isArray(v)) flatten(v, key, out);
        else out[key] = v;
    }
    return out;
}

function parseInfo(text) {
    const kv = {}, tensors = [];
    let section = "";
    for (const line of text.split("\n")) {
        if (/^metadata \(/.test(line)) { section = "kv"; continue; }
        if (/^tensors \(/.test(line)) { section = "t"; continue; }
        if (/^\S/.test(line) || line === "") { if (line !== "") section = ""; continue; }
        if (section === "kv") {
            const m = /^  (\S+)\s+(\S+)\s+(.*)$/.exec(line);
            if (m) kv[m[1]] = { type: m[2], value: m[3] };
        } else if (section === "t") {
            const m = /^\s+(\d+)\s+(\S+)\s+(\S+)\s+(.+?)\s+(\d+)\s+(\d+)$/.exec(line);
            if (m) tensors.push({ name: m[2], type: m[3], shape: m[4], bytes: m[5], offset: m[6] });
        }
    }
    const head = /GGUF v(\d+), (\d+) bytes, alignment (\d+), data offset (\d+), (\d+) keys, (\d+) tensors/.exec(text);
    return { head, kv, tensors };
}

function sameNumber(shown, v) {
    const x = Number(shown);
    const y = Number(v);
    if (Number.isInteger(y) && !/[.e]/.test(shown)) return BigInt(shown) === BigInt(v);
    return Math.abs(x - y) <= 1e-6 * Math.max(1, Math.abs(y));
}

function sameElement(shown, v) {
    if (typeof v === "string") return shown === showStr(v);
    if (typeof v === "boolean") return shown === String(v);
    return sameNumber(shown, v);
}

const files = [];
for (const dir of ["models", "fixtures/vocab"])
    for (const f of readdirSync(path.join(shared, dir)).sort())
        if (f.endsWith(".gguf")) files.push(path.join(shared, dir, f));
check(files.length >= 14, `found ${files.length} .gguf files`);

for (const file of files) {
    const rel = path.relative(shared, file);
    const peer = await readGgufFileInfo(file, { readTensorInfo: true, logWarnings: false });
    const ours = parseInfo(execFileSync(strata, ["gguf", "info", file], { encoding: "utf8", maxBuffer: 1 << 26 }));
    check(ours.head !== null, `${rel}: header line`);
    if (!ours.head) continue;
    check(Number(ours.head[1]) === peer.version, `${rel}: version`);
    check(BigInt(ours.head[6]) === BigInt(peer.tensorCount), `${rel}: tensor count`);
    if (Number(peer.tensorCount) > 0)
        check(Number(ours.head[4]) === peer.infoEndOffset, `${rel}: data offset ${ours.head[4]} vs ${peer.infoEndOffset}`);
    const ti = peer.tensorInfo || [];
    check(ours.tensors.length === ti.length, `${rel}: tensor rows`);
    ti.forEach((t, i) => {
        const o = ours.tensors[i] || {};
        const ok = o.name === t.name && o.type === typeNames[t.ggmlType] &&
            o.shape === t.dimensions.map(String).join(" x ") && BigInt(o.offset) === BigInt(t.offset);
        check(ok, `${rel}: tensor ${i} ${JSON.stringify(o)} vs ${t.name} ${t.dimensions} ${t.ggmlType} ${t.offset}`);
    });
    const flat = flatten(peer.metadata, "", {});
    check(Object.keys(flat).length === Number(ours.head[5]), `${rel}: key count ${Object.keys(flat).length} vs ${ours.head[5]}`);
    for (const [key, v] of Object.entries(flat)) {
        const o = ours.kv[key];
        check(o !== undefined, `${rel}: key ${key} missing`);
        if (!o) continue;
        if (Array.isArray(v)) {
            const m = /^\[(.*)\]$/.exec(o.value);
            check(o.type.endsWith(`[${v.length}]`), `${rel}: ${key} length ${o.type} vs ${v.length}`);
            // elements are ", "-separated; compare the first one (strings may contain ", ")
            if (m && v.length > 0 && typeof v[0] !== "object") {
                const first = typeof v[0] === "string" ? showStr(v[0]) : m[1].split(", ")[0];
                check(m[1].startsWith(first) && sameElement(first, v[0]), `${rel}: ${key}[0] ${m[1].slice(0, 40)} vs ${v[0]}`);
            }
        } else {
            check(sameElement(o.value, v), `${rel}: ${key} = ${o.value} vs ${v}`);
        }
    }
}
console.log(`RESULT gguf-info-peer: ${passed} passed, ${failed} failed`);
process.exit(failed ? 1 : 0);
