#!/usr/bin/env python3
"""The server's chat prompt with tools, tool results, chat_template_kwargs
and assistant prefill equals Python Jinja2's, rendered as Hugging Face
transformers' apply_chat_template renders it, on every fixture template.

usage: tools-prompt.py PROMPT_DUMP

PROMPT_DUMP (tests/server/prompt-dump.c) runs the server's own request path
(openai_parse, the template inputs, session_render) over OpenAI-shaped
bodies: tool_calls' arguments as JSON strings, as the SDKs send them. The
reference gets what transformers gets: arguments parsed into objects,
tools as sent (none for tool_choice "none"), kwargs as extra variables,
add_generation_prompt, bos "<s>" / eos "</s>" (the llama-2 vocabulary the
dump loads). Assistant prefill: rendered without the generation prompt and
cut after the last message's content (else the earlier messages with the
generation prompt, plus the content). A tool-calling message's null
content reads "" for a template that never mentions tool_calls. Where Jinja2 raises, the server must
refuse too. Prints `RESULT tools-prompt: N passed, M failed`.
"""
import copy
import importlib
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
ex = importlib.import_module("templates-exact")
from strata_daemon import Results, shared_dir  # noqa: E402

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Get the weather for a city",
    "parameters": {"type": "object", "properties": {
        "city": {"type": "string", "description": "City name"},
        "unit": {"type": "string", "enum": ["c", "f"]}}, "required": ["city"]}}}
ADD = {"type": "function", "function": {
    "name": "add", "description": "Add two numbers",
    "parameters": {"type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"}},
                   "required": ["a", "b"]}}}
CALL = {"id": "call_1", "type": "function",
        "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\", \"unit\": \"c\"}"}}

CASES = [
    ("tools", {"tools": [WEATHER, ADD],
               "messages": [{"role": "user", "content": "What's the weather in Paris?"}]}),
    ("tools-system", {"tools": [WEATHER], "tool_choice": "auto", "parallel_tool_calls": False,
                      "messages": [{"role": "system", "content": "You can call tools."},
                                   {"role": "user", "content": "Weather in Paris?"}]}),
    ("tool-result", {"tools": [WEATHER], "messages": [
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": "", "tool_calls": [CALL]},
        {"role": "tool", "tool_call_id": "call_1", "name": "get_weather",
         "content": "{\"temp\": 21, \"sky\": \"clear\"}"},
        {"role": "user", "content": "Thanks"}]}),
    ("tool-result-null-content", {"tools": [WEATHER], "messages": [
        {"role": "user", "content": "Weather?"},
        {"role": "assistant", "content": None, "tool_calls": [CALL]},
        {"role": "tool", "tool_call_id": "call_1", "content": "sunny"}]}),
    ("tool-choice-none", {"tools": [WEATHER], "tool_choice": "none",
                          "messages": [{"role": "user", "content": "Weather in Paris?"}]}),
    ("kwargs", {"chat_template_kwargs": {"enable_thinking": False, "custom_flag": "x"},
                "messages": [{"role": "user", "content": "Hi"}]}),
    ("effort", {"reasoning_effort": "low", "messages": [{"role": "user", "content": "Hi"}]}),
    ("effort-kwargs", {"reasoning_effort": "high", "chat_template_kwargs": {"enable_thinking": True},
                       "messages": [{"role": "user", "content": "Hi"}]}),
    ("prefill", {"messages": [{"role": "user", "content": "Hi"},
                              {"role": "assistant", "content": "Partial answer"}]}),
    ("prefill-tools", {"tools": [WEATHER], "messages": [
        {"role": "user", "content": "Weather?"},
        {"role": "assistant", "content": "Let me think"}]}),
]


# A template that reads chat_template_kwargs and reasoning_effort (no fixture
# template reads either, so without it their arrival would go unseen).
KWARGS_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n"
    "{% if reasoning_effort is defined %}[effort {{ reasoning_effort }}]{% endif %}"
    "{% if custom_flag is defined %}[flag {{ custom_flag }}]{% endif %}"
    "{% if enable_thinking is defined and not enable_thinking %}<think>\n\n</think>\n\n"
    "{% else %}<think>\n{% endif %}{% endif %}")


def reference(env, src, body):
    """What transformers renders for the body (text, or None when it raises)."""
    tools = body.get("tools")
    if body.get("tool_choice") == "none":
        tools = None
    msgs = []
    for m in copy.deepcopy(body["messages"]):
        # no content reads "", except on a tool-calling message of a template
        # that renders tool_calls (ChatML and Phi-3.5 would fail on None)
        if m.get("content") is None and (not m.get("tool_calls") or "tool_calls" not in src):
            m["content"] = ""
        for c in m.get("tool_calls") or []:
            if isinstance(c["function"].get("arguments"), str):
                c["function"]["arguments"] = json.loads(c["function"]["arguments"])
        msgs.append(m)
    last = msgs[-1]
    prefill = (last["role"] == "assistant" and not last.get("tool_calls")
               and isinstance(last.get("content"), str) and last["content"] != "")
    kw = dict(body.get("chat_template_kwargs") or {})
    if "reasoning_effort" in body:
        if "reasoning_effort" not in src:
            return None  # refused: the template has no such variable
        kw.setdefault("reasoning_effort", body["reasoning_effort"])
    tmpl = env.from_string(src)

    def render(ms, agp):
        return tmpl.render(messages=ex.flatten(ms), tools=tools, add_generation_prompt=agp,
                           bos_token="<s>", eos_token="</s>", **kw)
    try:
        if not prefill:
            return render(msgs, True)
        text = render(msgs, False)
        at = text.rfind(last["content"])
        if at >= 0:
            return text[:at + len(last["content"])]
        return render(msgs[:-1], True) + last["content"]
    except Exception:
        return None


def main():
    dump = sys.argv[1]
    res = Results(limit=400)
    model = os.path.join(shared_dir(), "models", "llama-2-tiny-random.gguf")
    tdir = os.path.join(shared_dir(), "fixtures", "templates")
    if not os.path.exists(model) or not os.path.isdir(tdir):
        print(f"missing {model} or {tdir}", file=sys.stderr)
        return 1
    env = ex.make_env()
    bodies = [dict(b, model="m") for _, b in CASES]
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(bodies, f)
        reqs = f.name
    try:
        with tempfile.NamedTemporaryFile("w", suffix=".jinja", delete=False) as f:
            f.write(KWARGS_TEMPLATE)
            kw_path = f.name
        paths = [os.path.join(tdir, n) for n in sorted(os.listdir(tdir)) if n.endswith(".jinja")]
        for path in paths + [kw_path]:
            name = "kwargs-template" if path == kw_path else os.path.basename(path)
            with open(path, encoding="utf-8") as f:
                src = f.read()
            out = subprocess.run([dump, model, path, reqs], capture_output=True, text=True,
                                 timeout=60)
            if out.returncode != 0:
                res.check(f"{name}: prompt-dump ran", False, out.stderr)
                continue
            got = json.loads(out.stdout)
            for (case, body), g in zip(CASES, got):
                want = reference(env, src, body)
                if want is None:
                    res.check(f"{name} {case}: refused as Jinja2 raises", "error" in g, str(g))
                else:
                    res.check(f"{name} {case}: prompt equals Jinja2's", g.get("prompt") == want,
                              f"got {g!r}\nwant {want!r}")
        os.unlink(kw_path)
    finally:
        os.unlink(reqs)
    return res.report("tools-prompt")


if __name__ == "__main__":
    sys.exit(main())
