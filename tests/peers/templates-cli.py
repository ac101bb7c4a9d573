#!/usr/bin/env python3
"""`strata template -m MODEL.gguf MESSAGES.json` against Python Jinja2.

usage: templates-cli.py STRATA_BINARY

Builds vocab-only GGUFs with `strata gguf vocab-from-hf` from the @lenml
tokenizer packages (tokenizer.json + tokenizer_config.json, so the GGUF
carries tokenizer.chat_template and the bos/eos ids), then checks that the
CLI, reading the template and the bos/eos token text from the GGUF, prints
exactly what Jinja2 renders from tokenizer_config.json (as transformers'
apply_chat_template would) over tests/peers/templates-conversations.json,
with and without --no-generation-prompt, and with --vars. Then the error
paths: a model without a template (ChatML fallback, with a note on stderr), a
template syntax error in the GGUF and in --template (line and column, line
equal to Jinja2's, exit 1), raise_exception (message printed, exit 1),
runtime errors, and bad command lines and inputs (clean message, non-zero
exit, no sanitizer report). Prints `RESULT templates-cli: N passed, M failed`.
"""
import importlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

import jinja2

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
LENML = os.path.join(ROOT, "node_modules", "@lenml")

# The ChatML fallback as Hugging Face's default template wrote it; written
# here independently of engine/template-*.c.
CHATML = ("{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + "
          "message['content'] + '<|im_end|>' + '\n'}}{% endfor %}"
          "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}")

passed = 0
failed = 0


def check(ok, what, detail=""):
    global passed, failed
    if ok:
        passed += 1
    else:
        failed += 1
        print(f"  FAIL {what}")
        if detail:
            print(f"    {detail}"[:1200])


def run(strata, *args):
    pr = subprocess.run([strata, *args], capture_output=True, timeout=120)
    return pr.returncode, pr.stdout.decode("utf-8", "replace"), pr.stderr.decode("utf-8", "replace")


def clean(stderr):
    return not re.search(r"Sanitizer|runtime error:", stderr)


def tok_text(v):
    if isinstance(v, dict):
        return v.get("content", "")
    return v or ""


def make_gguf(strata, tmp, pkg, name, chat_template=None, drop_template=False):
    """vocab-from-hf of @lenml/<pkg>; chat_template replaces the config's."""
    models = os.path.join(LENML, pkg, "models")
    with open(os.path.join(models, "tokenizer_config.json"), encoding="utf-8") as f:
        cfg = json.load(f)
    if chat_template is not None:
        cfg["chat_template"] = chat_template
    if drop_template:
        cfg.pop("chat_template", None)
    cfg_path = os.path.join(tmp, f"{name}-config.json")
    with open(cfg_path, "w", encoding="utf-8") as f:
        json.dump(cfg, f, ensure_ascii=False)
    out = os.path.join(tmp, f"{name}.gguf")
    rc, _, err = run(strata, "gguf", "vocab-from-hf", os.path.join(models, "tokenizer.json"),
                     "--config", cfg_path, "--out", out)
    check(rc == 0 and os.path.exists(out), f"vocab-from-hf {name}", err)
    return out, cfg


def write(tmp, name, text):
    p = os.path.join(tmp, name)
    with open(p, "w", encoding="utf-8") as f:
        f.write(text)
    return p


def render_matches(strata, env, ex, tmp, pkg, convs, conv_files):
    """Every conversation x agp through -m GGUF vs Jinja2 on tokenizer_config."""
    gguf, cfg = make_gguf(strata, tmp, pkg, pkg)
    compiled = env.from_string(cfg["chat_template"])
    bos, eos = tok_text(cfg.get("bos_token")), tok_text(cfg.get("eos_token"))
    ok = 0
    for ci, c in enumerate(convs):
        for agp in (True, False):
            try:
                ref = compiled.render(messages=ex.flatten(c["messages"]), tools=c.get("tools"),
                                      documents=None, add_generation_prompt=agp, bos_token=bos,
                                      eos_token=eos)
            except Exception as e:
                ref = None
                ref_err = f"{type(e).__name__}: {e}"
            args = ["template", "-m", gguf] + ([] if agp else ["--no-generation-prompt"])
            rc, out, err = run(strata, *args, conv_files[ci])
            if ref is None:
                good = rc == 1 and clean(err) and err.strip() != ""
                detail = f"Python raised {ref_err}; strata rc={rc} stderr={err!r}"
            else:
                good = rc == 0 and out == ref and clean(err)
                detail = f"rc={rc}\n    expected {ref!r}\n    got      {out!r}\n    {err!r}"
            check(good, f"{pkg} / {c['name']} agp={agp}", detail)
            ok += good
    print(f"{pkg}: -m GGUF {ok}/{2 * len(convs)} match Jinja2")
    return gguf, cfg


def main():
    strata = sys.argv[1]
    ex = importlib.import_module("templates-exact")  # this script's directory is on sys.path
    env = ex.make_env()
    with open(os.path.join(HERE, "templates-conversations.json"), encoding="utf-8") as f:
        convs = json.load(f)
    tmp = tempfile.mkdtemp(prefix="strata-tpl-cli-")
    conv_files = []
    for i, c in enumerate(convs):
        body = {"messages": c["messages"]}
        if "tools" in c:
            body["tools"] = c["tools"]
        conv_files.append(write(tmp, f"conv{i}.json", json.dumps(body, ensure_ascii=False)))
    simple = conv_files[1]  # system + user
    try:
        # 1. Template and bos/eos text from the GGUF (llama3 uses bos_token;
        #    qwen3 has no bos and an enable_thinking switch).
        render_matches(strata, env, ex, tmp, "tokenizer-llama3", convs, conv_files)
        q_gguf, q_cfg = render_matches(strata, env, ex, tmp, "tokenizer-qwen3", convs, conv_files)
        ref = env.from_string(q_cfg["chat_template"]).render(
            messages=convs[1]["messages"], add_generation_prompt=True, enable_thinking=False,
            bos_token="", eos_token=tok_text(q_cfg.get("eos_token")))
        rc, out, err = run(strata, "template", "-m", q_gguf, "--vars",
                           '{"enable_thinking": false}', simple)
        check(rc == 0 and out == ref and "<think>" in out, "qwen3 --vars enable_thinking=false",
              f"rc={rc} got {out!r} want {ref!r} {err}")
        # --template overrides the GGUF's; --bos/--eos override its token text.
        tpath = write(tmp, "bos.jinja", "[{{ bos_token }}|{{ eos_token }}]")
        rc, out, err = run(strata, "template", "-m", q_gguf, "--template", tpath, simple)
        check(rc == 0 and out == "[|<|im_end|>]", "GGUF bos/eos text (qwen3: no bos)",
              f"{rc} {out!r} {err}")
        rc, out, err = run(strata, "template", "-m", q_gguf, "--template", tpath, "--bos", "B",
                           "--eos", "E", simple)
        check(rc == 0 and out == "[B|E]", "--bos/--eos override", f"{rc} {out!r} {err}")

        # 2. No template in the GGUF: ChatML, with a note on stderr.
        n_gguf, _ = make_gguf(strata, tmp, "tokenizer-llama3", "notemplate", drop_template=True)
        for agp in (True, False):
            want = jinja2.Environment().from_string(CHATML).render(
                messages=convs[2]["messages"], add_generation_prompt=agp)
            args = ["template", "-m", n_gguf] + ([] if agp else ["--no-generation-prompt"])
            rc, out, err = run(strata, *args, conv_files[2])
            check(rc == 0 and out == want and "ChatML" in err and clean(err),
                  f"no template -> ChatML agp={agp}", f"{rc} {out!r} want {want!r} {err!r}")

        # 3. Syntax errors: "line L, column C", L as Jinja2 reports it, exit 1.
        bad = [
            "{% for m in messages %}\n{{ m.role }}\n{{ m.content ! }}\n{% endfor %}",
            "{% for m in messages %}\n{{ m.content }}\n",
            "x\n\n  {% if true %}y{% else %}z{% elif %}{% endif %}",
            "line1\n{% set x = %}",
            "\n\n\n{% endfor %}",
        ]
        for i, src in enumerate(bad):
            try:
                env.from_string(src)
                want_line = None
            except jinja2.TemplateSyntaxError as e:
                want_line = e.lineno
            check(want_line is not None, f"Jinja2 rejects syntax case {i}")
            b_gguf, _ = make_gguf(strata, tmp, "tokenizer-llama3", f"bad{i}", chat_template=src)
            tpath = write(tmp, f"bad{i}.jinja", src)
            for how, args in (("GGUF", ["-m", b_gguf]), ("--template", ["--template", tpath])):
                rc, out, err = run(strata, "template", *args, simple)
                m = re.search(r"line (\d+), column (\d+)", err)
                check(rc == 1 and out == "" and m is not None and int(m.group(1)) == want_line
                      and clean(err), f"syntax error {i} via {how} (Jinja2 line {want_line})",
                      f"rc={rc} stderr={err!r}")

        # 4. raise_exception: the template's message, exit 1; Jinja2 raises it too.
        msg = "Conversation roles must alternate user/assistant/user/assistant/..."
        src = ("{% for m in messages %}{% if (m['role'] == 'user') != (loop.index0 % 2 == 0) %}"
               "{{ raise_exception('" + msg + "') }}{% endif %}{{ m.content }}{% endfor %}")
        r_gguf, _ = make_gguf(strata, tmp, "tokenizer-llama3", "raise", chat_template=src)
        try:
            env.from_string(src).render(messages=convs[1]["messages"])
            ref_raised = ""
        except jinja2.TemplateError as e:
            ref_raised = str(e)
        check(ref_raised == msg, "Jinja2 raises the message", ref_raised)
        rc, out, err = run(strata, "template", "-m", r_gguf, simple)
        check(rc == 1 and out == "" and msg in err and clean(err), "raise_exception via GGUF",
              f"rc={rc} stderr={err!r}")
        rc, out, err = run(strata, "template", "-m", r_gguf, conv_files[0])  # single user: fine
        check(rc == 0 and out == "Hello!", "raise_exception not reached", f"{rc} {out!r} {err!r}")

        # 5. Runtime errors and bad inputs: clean message, non-zero exit.
        tpath = write(tmp, "rt.jinja", "{{ messages[0].nope.deeper }}")
        rc, out, err = run(strata, "template", "--template", tpath, simple)
        check(rc == 1 and out == "" and "undefined" in err.lower() and clean(err),
              "undefined attribute of undefined", f"rc={rc} {err!r}")
        notobj = write(tmp, "list.json", "[1, 2]")
        nomsg = write(tmp, "nomsg.json", '{"tools": []}')
        broken = write(tmp, "broken.json", '{"messages": [')
        cases = [
            ("missing model file", ["-m", os.path.join(tmp, "absent.gguf"), simple], 1),
            ("not a GGUF", ["-m", simple, simple], 1),
            ("messages file is not an object", ["-m", q_gguf, notobj], 1),
            ("no messages key", ["-m", q_gguf, nomsg], 1),
            ("broken JSON", ["-m", q_gguf, broken], 1),
            ("--vars not an object", ["-m", q_gguf, "--vars", "[1]", simple], 1),
            ("missing messages file", ["-m", q_gguf, os.path.join(tmp, "absent.json")], 1),
            ("missing --template file", ["--template", os.path.join(tmp, "absent.jinja"), simple],
             1),
            ("no model and no template", [simple], 2),
            ("unknown option", ["-m", q_gguf, "--frobnicate", simple], 2),
        ]
        for what, args, want_rc in cases:
            rc, out, err = run(strata, "template", *args)
            check(rc == want_rc and out == "" and err.strip() != "" and clean(err), what,
                  f"rc={rc} (want {want_rc}) stdout={out!r} stderr={err!r}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"RESULT templates-cli: {passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
