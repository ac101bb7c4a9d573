#!/usr/bin/env python3
"""tests/cli/test-gguf-info.py STRATA: `strata gguf info` on every .gguf in
../shared (exit 0, key facts present), plus error and usage exits.
Prints `RESULT gguf-info: N passed, M failed`."""
import glob
import os
import re
import struct
import subprocess
import sys
import tempfile

strata = sys.argv[1]
shared = os.environ.get("STRATA_SHARED_DIR") or "../shared"
passed = failed = 0


def check(cond, what):
    global passed, failed
    if cond:
        passed += 1
    else:
        failed += 1
        print("FAIL:", what)


def run(*args):
    p = subprocess.run([strata, "gguf", *args], capture_output=True, text=True, timeout=120)
    return p.returncode, p.stdout, p.stderr


# Facts read independently from the files (Python struct dump, shared/README.md).
expect = {
    "models/stories260K.gguf": [
        "GGUF v3", "48 tensors", "architecture: llama", "layers: 5", "embedding length: 64",
        "heads: 8", "KV heads: 4", "ff length: 172", "rope dimensions: 8",
        "vocabulary: 512 tokens, tokenizer model llama",
        "output: separate output.weight, 512 rows (rows = vocabulary size)",
        "token_embd.weight: 512 rows of 64 (rows = vocabulary size)",
        "parameters: 292800", 'string[512]      ["<unk>", "<s>", "</s>"',
    ],
    "models/llama-2-tiny-random.gguf": [
        "12 tensors", "layers: 1", "embedding length: 8", "vocabulary: 32000 tokens",
        "output: separate output.weight, 32000 rows (rows = vocabulary size)",
    ],
    "fixtures/vocab/ggml-vocab-bert-bge.gguf": [
        "architecture: bert", "vocabulary: 30522 tokens, tokenizer model bert",
        "tensors: none (vocabulary-only file)", "bool             false",
    ],
    "fixtures/vocab/ggml-vocab-gpt-2.gguf": ["tokenizer model gpt2"],
}

files = sorted(glob.glob(os.path.join(shared, "models", "*.gguf")) +
               glob.glob(os.path.join(shared, "fixtures", "vocab", "*.gguf")))
check(len(files) >= 14, "found %d shared .gguf files under %s" % (len(files), shared))
for path in files:
    rel = os.path.relpath(path, shared)
    rc, out, err = run("info", path)
    check(rc == 0, "%s: exit %d: %s" % (rel, rc, err.strip()))
    check("summary:" in out and "vocabulary:" in out, "%s: summary present" % rel)
    # the tensor table has one row per tensor announced in the header line
    m = re.search(r"(\d+) keys, (\d+) tensors", out)
    check(m is not None, "%s: header line" % rel)
    if m:
        rows = re.findall(r"^\s+\d+\s+\S+\s+(f32|f16|bf16|q\S+|i\S+|tq\S+|mxfp4)\s", out, re.M)
        check(len(rows) == int(m.group(2)), "%s: %d tensor rows, header says %s" %
              (rel, len(rows), m.group(2)))
    for fact in expect.get(rel, []):
        check(fact in out, "%s: output lacks %r" % (rel, fact))


def gguf_bytes(kvs, tensors, align=32):
    """A small GGUF v3 file. kvs: list of (key, type, packed value bytes);
    tensors: list of (name, dims, ggml type, byte size)."""
    def st(x):
        x = x.encode()
        return struct.pack("<Q", len(x)) + x
    out = bytearray(struct.pack("<IIQQ", 0x46554747, 3, len(tensors), len(kvs)))
    for k, t, v in kvs:
        out += st(k) + struct.pack("<I", t) + v
    off = 0
    for name, dims, typ, nbytes in tensors:
        out += st(name) + struct.pack("<I", len(dims)) + struct.pack("<%dQ" % len(dims), *dims)
        out += struct.pack("<IQ", typ, off)
        off += (nbytes + align - 1) // align * align
    out += bytes((-len(out)) % align) + bytes(off)
    return bytes(out)


def u32(v):
    return struct.pack("<I", v)


def strs(items):
    return struct.pack("<IQ", 8, len(items)) + b"".join(
        struct.pack("<Q", len(x)) + x.encode() for x in items)


with tempfile.TemporaryDirectory() as tmp:
    # A MoE-shaped file with tied output and a q4_0 tensor: the summary
    # reports experts, rope settings and "tied"; totals give q4_0's 4.5 bits.
    moe = os.path.join(tmp, "moe.gguf")
    open(moe, "wb").write(gguf_bytes(
        [("general.architecture", 8, struct.pack("<Q", 8) + b"qwen3moe"),
         ("qwen3moe.block_count", 4, u32(2)),
         ("qwen3moe.expert_count", 4, u32(8)),
         ("qwen3moe.expert_used_count", 4, u32(2)),
         ("qwen3moe.rope.freq_base", 6, struct.pack("<f", 1000000.0)),
         ("tokenizer.ggml.model", 8, struct.pack("<Q", 4) + b"gpt2"),
         ("tokenizer.ggml.tokens", 9, strs(["t%d" % i for i in range(16)]))],
        [("token_embd.weight", (32, 16), 2, 16 * 18),
         ("blk.0.ffn_gate_exps.weight", (32, 4, 8), 0, 32 * 4 * 8 * 4)]))
    rc, out, err = run("info", moe)
    check(rc == 0, "moe file: exit %d %s" % (rc, err))
    for fact in ["architecture: qwen3moe", "layers: 2", "experts: 8", "experts used: 2",
                 "rope freq base: 1000000", "vocabulary: 16 tokens, tokenizer model gpt2",
                 "token_embd.weight: 16 rows of 32 (rows = vocabulary size)",
                 "output: tied (no output.weight; uses token_embd.weight)",
                 "32 x 4 x 8", "parameters: 1536"]:
        check(fact in out, "moe file: output lacks %r" % fact)
    check(re.search(r"q4_0\s+1 tensors\s+288 bytes\s+512 elements", out) is not None,
          "moe file: q4_0 totals")
    stories = open(os.path.join(shared, "models", "stories260K.gguf"), "rb").read()
    bad = os.path.join(tmp, "trunc.gguf")
    open(bad, "wb").write(stories[:5000])
    rc, out, err = run("info", bad)
    check(rc == 1 and "offset" in err and "tokenizer.ggml.tokens" in err,
          "truncated file: exit %d, stderr %r" % (rc, err))
    rc, out, err = run("info", os.path.join(tmp, "missing.gguf"))
    check(rc == 1 and "missing.gguf" in err, "missing file: exit %d" % rc)
rc, out, err = run()
check(rc == 2 and "info" in err, "no subcommand: exit %d" % rc)
rc, out, err = run("nonsense")
check(rc == 2, "unknown subcommand: exit %d" % rc)
rc, out, err = run("info")
check(rc == 2, "info without file: exit %d" % rc)
rc, out, err = run("--help")
check(rc == 0 and "info" in out, "gguf --help: exit %d" % rc)

print("RESULT gguf-info: %d passed, %d failed" % (passed, failed))
sys.exit(1 if failed else 0)
