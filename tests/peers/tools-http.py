#!/usr/bin/env python3
"""Raw HTTP edges of tools, tool messages and the reasoning fields against
the real daemon (../shared/models/llama-2-tiny-random.gguf): wrong types
and hostile values get 400 with error.param naming the field (bodies the
SDKs would never send), a forced call with a schema the grammar refuses
names the keyword, a streamed forced call's deltas are in OpenAI's shape
and add up to a call whose arguments parse, and the daemon keeps serving
with no sanitizer report.

usage: tools-http.py STRATA_BINARY
Prints `RESULT tools-http: N passed, M failed`.
"""
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import strata_daemon as sd  # noqa: E402

MODEL = "llama-2-tiny-random"
FN = {"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string", "enum": ["Paris", "Rome"]}},
    "required": ["city"]}}}
USER = {"role": "user", "content": "q"}


def call(id_, args):
    return {"role": "assistant", "content": None, "tool_calls": [
        {"id": id_, "type": "function", "function": {"name": "get_weather", "arguments": args}}]}


def body(**kw):
    b = {"model": MODEL, "max_tokens": 4, "temperature": 0, "messages": [USER]}
    b.update(kw)
    return b


# (name, body, param): each must be a 400 naming param
BAD = [
    ("tools a string", body(tools="get_weather"), "tools"),
    ("tools entry a number", body(tools=[5]), "tools[0]"),
    ("function a list", body(tools=[{"type": "function", "function": []}]), "tools[0].function"),
    ("name a number", body(tools=[{"type": "function", "function": {"name": 7}}]), "tools[0].function.name"),
    ("name too long", body(tools=[{"type": "function", "function": {"name": "a" * 65}}]),
     "tools[0].function.name"),
    ("name with a quote", body(tools=[{"type": "function", "function": {"name": "a\"b"}}]),
     "tools[0].function.name"),
    ("description a number", body(tools=[{"type": "function", "function": {"name": "a", "description": 1}}]),
     "tools[0].function.description"),
    ("129 tools", body(tools=[{"type": "function", "function": {"name": f"t{i}"}} for i in range(129)]), "tools"),
    ("tool_choice a number", body(tools=[FN], tool_choice=3), "tool_choice"),
    ("tool_choice type", body(tools=[FN], tool_choice={"type": "x"}), "tool_choice.type"),
    ("tool_choice unknown name", body(tools=[FN], tool_choice={"type": "function", "function": {"name": "nope"}}),
     "tool_choice.function.name"),
    ("tool_calls an object", body(messages=[USER, {"role": "assistant", "tool_calls": {}}]),
     "messages[1].tool_calls"),
    ("tool_call id empty", body(messages=[USER, {"role": "assistant", "tool_calls": [
        {"id": "", "type": "function", "function": {"name": "get_weather", "arguments": "{}"}}]}]),
     "messages[1].tool_calls[0].id"),
    ("arguments not JSON", body(messages=[USER, call("c1", "{\"city\": ")]),
     "messages[1].tool_calls[0].function.arguments"),
    ("arguments deep nesting", body(messages=[USER, call("c1", "[" * 100000 + "]" * 100000)]),
     "messages[1].tool_calls[0].function.arguments"),
    ("arguments a list", body(messages=[USER, call("c1", "[1, 2]")]),
     "messages[1].tool_calls[0].function.arguments"),
    ("tool message without id", body(messages=[USER, call("c1", "{}"), {"role": "tool", "content": "x"}]),
     "messages[2].tool_call_id"),
    ("tool message id a number", body(messages=[USER, call("c1", "{}"), {"role": "tool", "tool_call_id": 1,
                                                                           "content": "x"}]),
     "messages[2].tool_call_id"),
    ("tool answers no call", body(messages=[USER, {"role": "tool", "tool_call_id": "c9", "content": "x"}]),
     "messages[1].tool_call_id"),
    ("kwargs a string", body(chat_template_kwargs="x"), "chat_template_kwargs"),
    ("kwargs sets tools", body(chat_template_kwargs={"tools": []}), "chat_template_kwargs.tools"),
    ("reasoning_effort a number", body(reasoning_effort=1), "reasoning_effort"),
    ("reasoning_effort with ChatML", body(reasoning_effort="low"), "reasoning_effort"),
    ("forced: pattern keyword", body(tools=[{"type": "function", "function": {"name": "f", "parameters": {
        "type": "object", "properties": {"s": {"type": "string", "pattern": "a+"}}}}}], tool_choice="required"),
     "tools[0].function.parameters"),
    ("forced: dangling $ref", body(tools=[{"type": "function", "function": {"name": "f", "parameters": {
        "$ref": "#/$defs/none"}}}], tool_choice="required"), "tools[0].function.parameters"),
    ("forced with prefill", body(tools=[FN], tool_choice="required",
                                 messages=[USER, {"role": "assistant", "content": "Sure"}]), "tool_choice"),
    ("parallel_tool_calls a string", body(tools=[FN], parallel_tool_calls="yes"), "parallel_tool_calls"),
]


def main():
    strata = sys.argv[1]
    res = sd.Results(limit=300)
    model = os.path.join(sd.shared_dir(), "models", "llama-2-tiny-random.gguf")
    if not os.path.exists(model):
        print(f"missing {model}", file=sys.stderr)
        return 1
    proc = subprocess.Popen([strata, "serve", model, "--port", "0", "--threads", "1", "--ctx-size", "512"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        port = sd.wait_listening(proc, 30)
        if port is None:
            res.check("daemon started", False, proc.stderr.read())
            return res.report("tools-http")
        log, _ = sd.drain_stderr(proc)
        res.check("ready", sd.wait_health(port, 0.05, tries=600))
        for name, b, param in BAD:
            st, _, data = sd.request(port, "POST", "/v1/chat/completions", b)
            try:
                err = json.loads(data)["error"]
            except (ValueError, KeyError, TypeError):
                err = {}
            res.check(f"{name}: 400 param {param}", st == 400 and err.get("param") == param,
                      f"{st} {data[:300]!r}")
        # a streamed forced call: OpenAI's delta shape, adding up to a call
        st, _, data = sd.request(port, "POST", "/v1/chat/completions",
                                 body(tools=[FN], tool_choice="required", stream=True, max_tokens=64,
                                      parallel_tool_calls=False))
        events = [json.loads(line[6:]) for line in data.decode().split("\n\n")
                  if line.startswith("data: {")]
        calls, finish = {}, None
        shape = True
        for e in events:
            ch = e["choices"][0]
            finish = ch["finish_reason"] or finish
            for tc in ch["delta"].get("tool_calls") or []:
                if tc["index"] not in calls:
                    shape &= bool(tc.get("id")) and tc.get("type") == "function" and bool(tc["function"].get("name"))
                    calls[tc["index"]] = [tc["function"]["name"], tc["function"].get("arguments", "")]
                else:
                    shape &= "id" not in tc and "name" not in tc["function"]
                    calls[tc["index"]][1] += tc["function"]["arguments"]
        args = None
        try:
            args = json.loads(calls[0][1]) if calls else None
        except ValueError:
            pass
        res.check("stream forced call: shape", st == 200 and shape and list(calls) == [0], str(events[-3:]))
        res.check("stream forced call: a valid call", calls.get(0, [None])[0] == "get_weather" and
                  args and args.get("city") in ("Paris", "Rome") and finish == "tool_calls", str(calls))
        st, _, data = sd.request(port, "POST", "/v1/chat/completions", body(tools=[FN]))
        res.check("serves after the edges", st == 200, data[:200])
        proc.terminate()
        proc.wait(timeout=30)
        text = "".join(log)
        res.check("no sanitizer report", not sd.SANITIZER_RE.search(text), text[-2000:])
    finally:
        if proc.poll() is None:
            proc.kill()
    return res.report("tools-http")


if __name__ == "__main__":
    sys.exit(main())
