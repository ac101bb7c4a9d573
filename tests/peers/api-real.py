#!/usr/bin/env python3
"""tests/peers/api-real.py: n > 1, the /v1/completions prompt forms, echo,
the llama.cpp parameter names, unknown fields and /v1/models against the
REAL daemon (`strata serve` on the shared stories260K.gguf, --log-level
debug), over raw HTTP.

Usage: api-real.py PATH/TO/strata

- n > 1: choice i with seed s is the text of an n = 1 request with seed
  s + i; usage counts the prompt once and every choice's tokens; the
  prompt's KV is shared (/status: tokens.prompt grows by the prompt plus one
  token per further choice, shared_prompt_tokens by (n - 1) x (prompt - 1));
  streaming chunks carry index i, one finish_reason each, the same text.
- prompt lists (index = prompt x n + j), token-id prompts (the same text as
  the string they tokenize to), echo (text and ids, stream and not), echo +
  logprobs refused, out-of-vocabulary ids refused naming prompt[i][j].
- llama.cpp names, each by its effect: top_k 1 and min_p 1 at temperature 1
  equal greedy; n_predict bounds the tokens (max_tokens wins); repeat_penalty
  changes greedy text, repeat_last_n 0 turns it off, repetition_penalty is
  the same knob; cache_prompt false reports no cached tokens on a repeat;
  ignore_eos runs past a forced EOS; n_probs gives that many alternatives;
  the refused names get 400 unsupported naming them, their off values pass.
- unknown fields: a debug line with the request's X-Request-Id names them.
- /v1/models and /v1/models/{id}: created = the file's mtime, meta fields;
  an unknown id is 404 in OpenAI's error shape.
Prints `RESULT api-real: N passed, M failed`.
"""
import json
import os
import re
import signal
import subprocess
import sys
import time

import strata_daemon as sd

STRATA = sys.argv[1] if len(sys.argv) > 1 else "build/cli/strata"
MODEL = os.path.join(sd.shared_dir(), "models", "stories260K.gguf")
MID = "stories260K"
results = sd.Results(limit=800)
check = results.check
LONG = "Once upon a time there was a little girl named Lily. She loved to"


def post(port, path, body):
    st, h, data = sd.request(port, "POST", path, body)
    try:
        return st, h, json.loads(data)
    except ValueError:
        return st, h, data


def cmpl(port, **kw):
    body = {"model": MID, **kw}
    return post(port, "/v1/completions", body)


def stream(port, path, body):
    st, h, data = sd.request(port, "POST", path, {"model": MID, **body, "stream": True})
    events = [e[6:] for e in data.decode().split("\n\n") if e.startswith("data: ")]
    return st, [json.loads(e) for e in events if e != "[DONE]"], events[-1:] == ["[DONE]"]


def status(port):
    return json.loads(sd.request(port, "GET", "/status")[2])


def settled_status(port):
    """/status once the counters stop moving: the snapshot is published after
    the step that sent an answer, so right after a request it may still lack
    that request's last step (seen under a loaded box: one token short)."""
    prev = status(port)
    deadline = time.time() + 5
    while time.time() < deadline:
        time.sleep(0.1)
        cur = status(port)
        if cur["tokens"] == prev["tokens"]:
            return cur
        prev = cur
    return prev


def texts(resp):
    return [c["text"] for c in sorted(resp["choices"], key=lambda c: c["index"])]


def test_n(port):
    base = dict(prompt=LONG, max_tokens=12, temperature=1, ignore_eos=True)
    st, _, r = cmpl(port, n=3, seed=5, **base)
    check("n=3: 200", st == 200, r)
    check("n=3: 3 choices, index 0..2", [c["index"] for c in r["choices"]] == [0, 1, 2], r)
    singles = []
    for i in range(3):
        _, _, one = cmpl(port, seed=5 + i, cache_prompt=False, **base)
        singles.append(one["choices"][0]["text"])
    check("n=3: choice i = n=1 with seed + i", texts(r) == singles, (texts(r), singles))
    check("n=3: distinct choices (different seeds)", len(set(texts(r))) > 1, texts(r))
    _, _, one = cmpl(port, seed=5, **base)
    u = r["usage"]
    check("n=3: prompt counted once", u["prompt_tokens"] == one["usage"]["prompt_tokens"], (u, one["usage"]))
    check("n=3: completion tokens of every choice", u["completion_tokens"] == 36, u)
    check("n=3: total", u["total_tokens"] == u["prompt_tokens"] + 36, u)
    check("n=3: each choice its finish_reason", all(c["finish_reason"] == "length" for c in r["choices"]), r)

    # KV sharing: a prompt no earlier request had, prefix cache bypassed for the
    # first choice, so the counters move by this request alone
    prompt = "Tom had a big red ball and a small blue car. One day he"
    s0 = settled_status(port)
    st, _, r = cmpl(port, prompt=prompt, n=4, max_tokens=2, cache_prompt=False, ignore_eos=True)
    s1 = status(port)
    # /status is published after the step that sent the answer: wait for it
    deadline = time.time() + 5
    while s1["tokens"]["generated"] - s0["tokens"]["generated"] < 8 and time.time() < deadline:
        time.sleep(0.02)
        s1 = status(port)
    p = r["usage"]["prompt_tokens"]
    d_prompt = s1["tokens"]["prompt"] - s0["tokens"]["prompt"]
    d_shared = s1["shared_prompt_tokens"] - s0["shared_prompt_tokens"]
    check("n=4: prompt computed once (+1 token a further choice)", d_prompt == p + 3, (d_prompt, p))
    check("n=4: 3 x (prompt - 1) positions shared", d_shared == 3 * (p - 1), (d_shared, p))
    check("n=4: generated 4 x 2", s1["tokens"]["generated"] - s0["tokens"]["generated"] == 8, (s0["tokens"], s1["tokens"]))

    # streaming: every chunk has its index; one finish each; the same text
    st, chunks, done = stream(port, "/v1/completions", dict(n=3, seed=5, stream_options={"include_usage": True}, **base))
    check("stream n=3: 200 and [DONE]", st == 200 and done, chunks[-2:])
    by = {}
    fins = {}
    for c in chunks:
        for ch in c["choices"]:
            by[ch["index"]] = by.get(ch["index"], "") + ch["text"]
            if ch["finish_reason"]:
                fins[ch["index"]] = fins.get(ch["index"], 0) + 1
    check("stream n=3: text per index = non-stream", [by.get(i) for i in range(3)] == singles, (by, singles))
    check("stream n=3: one finish_reason per index", fins == {0: 1, 1: 1, 2: 1}, fins)
    ids = {c["id"] for c in chunks}
    check("stream n=3: one id", len(ids) == 1, ids)
    last = chunks[-1]
    check("stream n=3: one usage chunk, summed", last["choices"] == [] and last["usage"]["completion_tokens"] == 36
          and sum(1 for c in chunks if c.get("usage")) == 1, last)

    # chat
    st, _, r = post(port, "/v1/chat/completions", {"model": MID, "messages": [{"role": "user", "content": "hi"}],
                                                 "n": 2, "max_tokens": 4, "seed": 1})
    check("chat n=2: two messages", st == 200 and [c["index"] for c in r["choices"]] == [0, 1]
          and all(c["message"]["role"] == "assistant" for c in r["choices"]), r)
    st, chunks, done = stream(port, "/v1/chat/completions", {"model": MID, "messages": [{"role": "user", "content": "hi"}],
                                                           "n": 2, "max_tokens": 4, "seed": 1})
    roles = sorted(ch["index"] for c in chunks for ch in c["choices"] if ch["delta"].get("role"))
    check("chat stream n=2: a role chunk per index", st == 200 and done and roles == [0, 1], chunks[:3])
    # limits
    st, _, r = cmpl(port, prompt="a", n=17)
    check("n=17: 400 param n", st == 400 and r["error"]["param"] == "n", r)
    st, _, r = cmpl(port, prompt="a", n=2, best_of=3)
    check("best_of != n: 400 unsupported", st == 400 and r["error"]["param"] == "best_of" and r["error"]["code"] == "unsupported", r)
    st, _, r = cmpl(port, prompt="a", n=2, best_of=2, max_tokens=1)
    check("best_of == n: 200", st == 200 and len(r["choices"]) == 2, r)


def test_n_hostile(port):
    # one prompt of a list too long for the context: the request fails as a
    # whole (400 naming prompt), the other choices are cancelled, nothing leaks
    st, _, r = cmpl(port, prompt=["Once upon a time", "hello world " * 1200], n=2, max_tokens=50)
    check("a prompt too long in a list: 400", st == 400 and r["error"]["code"] == "context_length_exceeded", r)
    # a client gone in the middle of an n = 4 stream
    s = sd.raw_post(port, "/v1/completions", json.dumps({"model": MID, "prompt": LONG, "n": 4, "max_tokens": 300,
                                                         "ignore_eos": True, "stream": True}).encode())
    got = sd.read_events(s, 6)
    s.close()
    check("n=4 stream started", got.count(b"data: ") >= 6, got[:200])
    deadline = time.time() + 10
    st = status(port)
    while (st["sessions"]["active"] or st["kv_blocks"]["used"]) and time.time() < deadline:
        time.sleep(0.05)
        st = status(port)
    check("n=4 disconnect: every choice dropped, its blocks back", st["sessions"]["active"] == 0 and st["kv_blocks"]["used"] == 0,
          (st["sessions"], st["kv_blocks"]))
    # 16 choices on 4 sequences: the rest wait for slots, all finish
    st, _, r = cmpl(port, prompt="Lily", n=16, max_tokens=3, ignore_eos=True)
    check("n=16 on --parallel 4: 16 choices", st == 200 and len(r["choices"]) == 16 and r["usage"]["completion_tokens"] == 48, r)


def tokenize(text):
    out = subprocess.run([STRATA, "tokenize", "-m", MODEL, "--json", text], capture_output=True, text=True, timeout=60)
    return json.loads(out.stdout)["ids"]


def test_prompts(port):
    base = dict(max_tokens=6, temperature=1, ignore_eos=True)
    st, _, r = cmpl(port, prompt=["Once upon a time", "Tom and"], n=2, seed=7, **base)
    check("2 prompts x n=2: 4 choices", st == 200 and [c["index"] for c in r["choices"]] == [0, 1, 2, 3], r)
    _, _, b0 = cmpl(port, prompt="Tom and", seed=9, **base)
    check("prompt 1, j 0 = index 2 (seed + 2)", texts(r)[2] == b0["choices"][0]["text"], (texts(r), b0))
    _, _, a = cmpl(port, prompt="Once upon a time", **base, seed=0)
    _, _, b = cmpl(port, prompt="Tom and", **base, seed=0)
    check("2 prompts: prompt_tokens summed once each",
          r["usage"]["prompt_tokens"] == a["usage"]["prompt_tokens"] + b["usage"]["prompt_tokens"], (r["usage"], a["usage"], b["usage"]))
    ids = tokenize("Once upon a time")
    check("tokenize: BOS + 4", len(ids) == 5, ids)
    _, _, t = cmpl(port, prompt="Once upon a time", seed=3, **base)
    st, _, i = cmpl(port, prompt=ids, seed=3, **base)
    check("token ids = their text", st == 200 and texts(i) == texts(t) and i["usage"]["prompt_tokens"] == 5, (i, t))
    st, _, ii = cmpl(port, prompt=[ids, "Once upon a time"], seed=3, **base)
    check("array of id arrays and strings", st == 200 and texts(ii)[0] == texts(t)[0], ii)
    st, _, e = cmpl(port, prompt=[ids, [1, 5, 600]], max_tokens=2)
    check("id out of vocabulary: 400 prompt[1][2]", st == 400 and e["error"]["param"] == "prompt[1][2]", e)
    st, _, e = cmpl(port, prompt=[1, "a"], max_tokens=2)
    check("mixed ids: 400 prompt[1]", st == 400 and e["error"]["param"] == "prompt[1]", e)
    # echo
    _, _, plain = cmpl(port, prompt="Once upon a time", seed=3, **base)
    st, _, e = cmpl(port, prompt="Once upon a time", seed=3, echo=True, **base)
    check("echo: prompt + the same completion", st == 200 and texts(e)[0] == "Once upon a time" + texts(plain)[0], (e, plain))
    st, chunks, _ = stream(port, "/v1/completions", dict(prompt="Once upon a time", seed=3, echo=True, **base))
    check("echo stream: the same text", "".join(ch["text"] for c in chunks for ch in c["choices"]) == texts(e)[0], chunks[:2])
    st, _, ei = cmpl(port, prompt=ids, seed=3, echo=True, **base)
    check("echo of ids: their text", st == 200 and texts(ei)[0].lstrip(" ") == texts(e)[0], (ei, e))
    st, _, e = cmpl(port, prompt="a", echo=True, logprobs=1)
    check("echo + logprobs: 400 unsupported echo", st == 400 and e["error"]["param"] == "echo" and "logits" in e["error"]["message"], e)
    st, _, e = cmpl(port, prompt="a", suffix="b")
    check("suffix: 400 unsupported", st == 400 and e["error"]["param"] == "suffix", e)


def test_llama_names(port):
    g = dict(prompt=LONG, max_tokens=16, ignore_eos=True)
    _, _, greedy = cmpl(port, temperature=0, **g)
    G = texts(greedy)[0]
    for name, extra in (("top_k 1", {"top_k": 1}), ("min_p 1", {"min_p": 1})):
        outs = {texts(cmpl(port, temperature=1, seed=s, **extra, **g)[2])[0] for s in (1, 2, 3)}
        check(f"{name} at temperature 1 = greedy", outs == {G}, (outs, G))
    outs = {texts(cmpl(port, temperature=1, seed=s, **g)[2])[0] for s in (1, 2, 3)}
    check("temperature 1 alone is not greedy (the check above can fail)", outs != {G}, outs)
    _, _, r = cmpl(port, prompt=LONG, n_predict=3, ignore_eos=True, temperature=0)
    check("n_predict 3: 3 tokens", r["usage"]["completion_tokens"] == 3, r["usage"])
    _, _, r = cmpl(port, prompt=LONG, n_predict=3, max_tokens=5, ignore_eos=True, temperature=0)
    check("max_tokens wins over n_predict", r["usage"]["completion_tokens"] == 5, r["usage"])
    long = dict(prompt="Tom was very hungry. He liked to play", max_tokens=40, ignore_eos=True, temperature=0)
    base = texts(cmpl(port, **long)[2])[0]
    pen = texts(cmpl(port, repeat_penalty=1.8, **long)[2])[0]
    off = texts(cmpl(port, repeat_penalty=1.8, repeat_last_n=0, **long)[2])[0]
    alias = texts(cmpl(port, repetition_penalty=1.8, **long)[2])[0]
    ctx = texts(cmpl(port, repeat_penalty=1.8, repeat_last_n=-1, **long)[2])[0]
    check("repeat_penalty changes greedy text", pen != base, (pen, base))
    check("repeat_last_n 0 turns the penalty off", off == base, (off, base))
    check("repetition_penalty is the same knob", alias == pen, (alias, pen))
    check("repeat_last_n -1 (the context) answers", isinstance(ctx, str) and len(ctx) > 0, ctx)
    q = dict(prompt="The sun was shining and the birds were singing in the", max_tokens=2, temperature=0)
    cmpl(port, **q)
    _, _, hit = cmpl(port, **q)
    _, _, miss = cmpl(port, cache_prompt=False, **q)
    check("repeat: cached tokens", hit["usage"]["prompt_tokens_details"]["cached_tokens"] > 0, hit["usage"])
    check("cache_prompt false: none cached", miss["usage"]["prompt_tokens_details"]["cached_tokens"] == 0, miss["usage"])
    check("cache_prompt false: same text", texts(miss) == texts(hit), (miss, hit))
    eos = dict(prompt="Once upon a time", max_tokens=5, temperature=0, logit_bias={"2": 100})
    _, _, stop = cmpl(port, **eos)
    _, _, run = cmpl(port, ignore_eos=True, **eos)
    check("forced EOS stops", stop["choices"][0]["finish_reason"] == "stop" and stop["usage"]["completion_tokens"] == 1, stop)
    check("ignore_eos runs to max_tokens", run["choices"][0]["finish_reason"] == "length" and run["usage"]["completion_tokens"] == 5, run)
    _, _, r = cmpl(port, prompt=LONG, max_tokens=3, n_probs=3, temperature=0)
    lp = r["choices"][0]["logprobs"]
    check("n_probs 3: 3 alternatives a token", lp and len(lp["tokens"]) == 3 and all(len(t) == 3 for t in lp["top_logprobs"]), lp)
    a = texts(cmpl(port, prompt=LONG, max_tokens=8, temperature=1, seed=42)[2])
    b = texts(cmpl(port, prompt=LONG, max_tokens=8, temperature=1, seed=42)[2])
    check("seed: same text", a == b, (a, b))
    for field, val in (("mirostat", 2), ("typical_p", 0.5), ("tfs_z", 0.9), ("dynatemp_range", 1.0),
                       ("xtc_probability", 0.3), ("dry_multiplier", 0.8), ("grammar", "root ::= \"a\""),
                       ("samplers", ["top_k"]), ("n_keep", 8), ("penalize_nl", True)):
        st, _, e = cmpl(port, prompt="a", max_tokens=1, **{field: val})
        check(f"{field}={val!r}: 400 unsupported naming it",
              st == 400 and e["error"]["param"] == field and e["error"]["code"] == "unsupported", e)
    st, _, r = cmpl(port, prompt="a", max_tokens=1, mirostat=0, mirostat_tau=5, mirostat_eta=0.1, typical_p=1,
                    tfs_z=1, dynatemp_range=0, xtc_probability=0, dry_multiplier=0, penalize_nl=False, n_keep=0)
    check("the off values llama.cpp's page sends: 200", st == 200, r)


def test_unknown(port, log):
    st, h, r = cmpl(port, prompt="a", max_tokens=1, frobnicate=1, another_one={"x": 1})
    rid = h.get("x-request-id")
    check("unknown fields: 200", st == 200 and rid, (st, h))
    st, h2, _ = cmpl(port, prompt="a", max_tokens=1, temperature=0)
    rid2 = h2.get("x-request-id")
    time.sleep(0.2)
    lines = [l for l in log if "unknown fields" in l]
    check("unknown fields: a debug line with the id and the names",
          any(f"id={rid}" in l and "frobnicate,another_one" in l for l in lines), lines[-3:])
    check("no line for a request without unknown fields", not any(f"id={rid2}" in l for l in lines), lines[-3:])


def test_models(port):
    st, _, r = sd.request(port, "GET", "/v1/models")
    m = json.loads(r)
    check("/v1/models: 200 list", st == 200 and m["object"] == "list" and len(m["data"]) == 1, m)
    o = m["data"][0]
    check("model: id, object, owned_by", o["id"] == MID and o["object"] == "model" and o["owned_by"] == "strata", o)
    check("model: created = the file's mtime", o["created"] == int(os.stat(MODEL).st_mtime), (o["created"], os.stat(MODEL).st_mtime))
    meta = o.get("meta", {})
    check("meta: architecture llama", meta.get("architecture") == "llama", meta)
    check("meta: n_ctx 2048, n_ctx_train 2048", meta.get("n_ctx") == 2048 and meta.get("n_ctx_train") == 2048, meta)
    check("meta: size = the file's", meta.get("size") == os.path.getsize(MODEL), meta)
    check("meta: parameters ~260K", 200_000 < meta.get("n_params", 0) < 400_000, meta)
    mix = meta.get("quant_mix", "")
    check("meta: quantization is a type of the mix", meta.get("quantization") and meta["quantization"] + ":" in mix, meta)
    st, _, r = sd.request(port, "GET", f"/v1/models/{MID}")
    check("/v1/models/{id}: the same object", st == 200 and json.loads(r) == o, r)
    st, _, r = sd.request(port, "GET", "/v1/models/nope")
    e = json.loads(r)
    check("/v1/models/nope: 404 OpenAI error", st == 404 and e["error"]["param"] == "model" and e["error"]["type"], e)


def main():
    proc = subprocess.Popen([STRATA, "serve", MODEL, "--port", "0", "--threads", "1", "--parallel", "4",
                             "--log-level", "debug"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            text=True, errors="replace")
    try:
        port = sd.wait_listening(proc, 60)
        if port is None:
            raise SystemExit("strata serve did not start")
        log, reader = sd.drain_stderr(proc)
        sd.wait_health(port, 0.1, deadline=time.time() + 60)
        test_n(port)
        test_n_hostile(port)
        test_prompts(port)
        test_llama_names(port)
        test_unknown(port, log)
        test_models(port)
        st, _, _ = sd.request(port, "GET", "/health")
        check("still serving", st == 200, st)
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            rc = proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            rc = -9
    reader.join(timeout=5)
    check("SIGTERM exit 0", rc == 0, rc)
    text = "".join(log)
    check("no sanitizer report", not sd.SANITIZER_RE.search(text), text[-2000:])
    return results.report("api-real")


if __name__ == "__main__":
    sys.exit(main())
