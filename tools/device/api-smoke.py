#!/usr/bin/env python3
"""Checks the API features end to end against a running server (on the GPU machine: `serve --backend hip`), greedy, with
answers that must agree with each other: a prefix continues the answer it was cut from, a reasoning budget keeps the
first tokens of the unbudgeted reasoning, the Responses and Messages routes answer as chat does, n choices agree (also
on a long prompt that the choices prefill once, against the same request uncached).
Prints one line per check and exits 1 on the first failure.
usage: tools/device/api-smoke.py PORT"""
import json
import sys
import urllib.error
import urllib.request

port = sys.argv[1]


def post(path, body):
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", json.dumps(body).encode(), {"Content-Type": "application/json"})
    try:
        return json.load(urllib.request.urlopen(req))
    except urllib.error.HTTPError as e:
        raise SystemExit(f"FAIL {path}: HTTP {e.code}: {e.read().decode()[:400]}")


def post_or_none(path, body):
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", json.dumps(body).encode(), {"Content-Type": "application/json"})
    try:
        return json.load(urllib.request.urlopen(req))
    except urllib.error.HTTPError as e:
        print("skip " + path + ": HTTP " + str(e.code) + ": " + e.read().decode()[:200])
        return None


def check(name, ok, detail):
    print(("ok   " if ok else "FAIL ") + name + ": " + detail[:300])
    if not ok:
        sys.exit(1)


model = json.load(urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/models"))["data"][0]["id"]
user = [{"role": "user", "content": "Tell me about the sea"}]
base = {"max_tokens": 16, "temperature": 0, "logprobs": True}
a = post("/v1/chat/completions", dict(base, messages=user))["choices"][0]
text, toks = a["message"]["content"], [t["token"] for t in a["logprobs"]["content"]]
check("chat", len(toks) > 2, repr(text))

first = toks[0]
c = post("/v1/chat/completions", dict(base, max_tokens=15, messages=user + [{"role": "assistant", "content": first, "prefix": True}]))
cont = c["choices"][0]["message"]["content"]
check("prefix continues the answer it was cut from", first + cont == text, repr(first) + " + " + repr(cont) + " vs " + repr(text))

think = dict(base, max_tokens=12, messages=user, chat_template_kwargs={"thinking": True})
free = post("/v1/chat/completions", think)["choices"][0]
ftoks = [t["token"] for t in free["logprobs"]["content"]]
cut = post("/v1/chat/completions", dict(think, thinking_token_budget=3))["choices"][0]
r = cut["message"].get("reasoning_content") or ""
# the cut comes after 3 tokens, or up to 3 more where a character is unfinished
check("reasoning budget keeps the first tokens", r.startswith("".join(ftoks[:3])) and "".join(ftoks).startswith(r),
      repr(r) + " vs " + repr(ftoks[:4]))

resp = post("/v1/responses", {"input": user[0]["content"], "max_output_tokens": 16, "temperature": 0})
rtext = "".join(p.get("text", "") for item in resp["output"] if item["type"] == "message" for p in item["content"])
check("responses answers as chat", rtext == text, repr(rtext))

msg = post("/v1/messages", {"model": model, "max_tokens": 16, "temperature": 0, "messages": user})
mtext = "".join(b.get("text", "") for b in msg["content"] if b["type"] == "text")
check("messages answers as chat", mtext == text, repr(mtext))

fim = post("/v1/completions", {"prompt": "def f(x):\n", "suffix": "\n    return y\n", "max_tokens": 8, "temperature": 0})
check("fill-in-the-middle", fim["choices"][0]["finish_reason"] in ("stop", "length"), repr(fim["choices"][0]["text"]))

many = post_or_none("/v1/chat/completions", dict(base, n=2, messages=user, logprobs=False))
if many is not None:
    same = [ch["message"]["content"] for ch in many["choices"]]
    check("n=2 greedy choices agree with n=1", same == [text, text], repr(same))
# a prompt of several cache blocks: choice 0 prefills it, the others resume its snapshot and prefill only the tail, and
# every choice must still equal the answer without the cache (the tail is one step of the same size either way)
longuser = [{"role": "user", "content": "Tell me about the sea and the ships that sail on it. " * 40}]
cold = post("/v1/chat/completions", dict(base, messages=longuser, cache_prompt=False))["choices"][0]
shared = post_or_none("/v1/chat/completions", dict(base, n=3, messages=longuser))
if shared is not None:
    texts = [ch["message"]["content"] for ch in shared["choices"]]
    lps = [[t["logprob"] for t in ch["logprobs"]["content"]] for ch in shared["choices"]]
    coldlp = [t["logprob"] for t in cold["logprobs"]["content"]]
    check("n=3 on a long prompt (prefilled once) agree with it alone, uncached",
          texts == [cold["message"]["content"]] * 3 and lps == [coldlp] * 3, repr(texts[0]) + " vs " + repr(cold["message"]["content"]))
print("all checks passed")
