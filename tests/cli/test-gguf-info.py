#!/usr/bin/env python3
"""tests/cli/test-gguf-info.py STRATA: `strata gguf info` on every .gguf in
../shared (exit 0, key facts present), plus error and usage exits.
Prints `RESULT gguf-info: N passed, M failed`."""
import glob
import os
import re
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

with tempfile.TemporaryDirectory() as tmp:
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
