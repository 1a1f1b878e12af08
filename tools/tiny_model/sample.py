#!/usr/bin/python3
"""Asks a trained tiny model (a directory that train.py wrote) a fixed set of questions through the
real server on the CPU backend and prints what came back, to judge a training run at a glance:

    python3 tools/tiny_model/sample.py MODEL_DIR [--dgemma build/dgemma] [--seeds 1,2] [--out FILE]

For each request and seed: the answer (content, reasoning, tool calls), the finish reason, the
completion tokens, the denoising steps per canvas (from /metrics) and, for code, whether the
```python block parses. The requests mix those the data teaches (as the acceptance test asks them)
with a few it does not (to see how the model fails). The summary's last lines are the acceptance
test's criteria in numbers. Needs nothing beyond the standard library.
"""
import argparse
import ast
import json
import os
import re
import sys
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
import tasks  # noqa: E402
from build_data import free_port  # noqa: E402

IN_DISTRIBUTION = [
    "Write a Python function that reverses a string.",
    "Write a Python function that returns the largest of three numbers.",
    "Write a Python function that counts the words in a sentence.",
    "Write a Python function that checks whether a number is even.",
    "Write a Python function that computes the factorial of n.",
    "Write a Python function that sorts a list.",
    "How do I remove duplicates from a list, keeping the order in Python?",
    "Write a function `count_vowels(word)` that counts the vowels in a string.",
    "Write a Python class that implements a stack with push and pop.",
]
OUT_OF_DISTRIBUTION = [
    "Write a Python function that returns the number of uppercase words in a text.",
    "Write a Python function that adds two numbers.",
    "What does `os.path.join` do?",
    "Hello!",
]
TOOL_REQUESTS = [
    ("What's the weather in Paris?", ["get_time", "get_weather"]),
    ("What time is it in Asia/Tokyo?", ["get_time", "get_weather"]),
    ("Convert 100 USD to EUR.", ["convert_currency", "search_web"]),
]


def code_of(answer):
    m = re.search(r"```(?:python)?\n([\s\S]*?)(```|$)", answer)
    return m.group(1) if m else answer


def parses(code):
    try:
        ast.parse(code)
        return True
    except SyntaxError:
        return False


class Server:
    def __init__(self, dgemma, model_dir, load_format):
        import subprocess
        self.port = free_port()
        self.proc = subprocess.Popen([dgemma, "serve", model_dir, "--load-format", load_format, "--device", "cpu",
                                      "--host", "127.0.0.1", "--port", str(self.port), "--served-model-name", "tiny",
                                      "--max-num-seqs", "4", "--enable-auto-tool-choice", "--tool-call-parser", "gemma4",
                                      "--reasoning-parser", "gemma4"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        deadline = time.time() + 120
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise SystemExit("dgemma serve exited: " + self.proc.stderr.read().decode(errors="replace"))
            try:
                urllib.request.urlopen(self.url("/health"), timeout=2)
                return
            except OSError:
                time.sleep(0.3)
        self.proc.kill()
        raise SystemExit("dgemma serve did not come up")

    def url(self, path):
        return "http://127.0.0.1:%d%s" % (self.port, path)

    def chat(self, body):
        req = urllib.request.Request(self.url("/v1/chat/completions"), data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=120) as r:
            return json.loads(r.read())

    def steps(self):
        """(sum, count) of the denoising steps per canvas so far."""
        text = urllib.request.urlopen(self.url("/metrics"), timeout=10).read().decode()
        got = {}
        for line in text.splitlines():
            for key in ("sum", "count"):
                name = "dgemma:denoising_steps_per_canvas_" + key
                if line.startswith(name + "{") or line.startswith(name + " "):
                    got[key] = float(line.rsplit(" ", 1)[1])
        if "sum" not in got or "count" not in got:
            raise SystemExit("no dgemma:denoising_steps_per_canvas_{sum,count} in /metrics")
        return got["sum"], got["count"]

    def close(self):
        self.proc.terminate()
        self.proc.wait(timeout=30)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model_dir")
    ap.add_argument("--dgemma", default=os.path.join(REPO, "build", "dgemma"))
    ap.add_argument("--seeds", default="1,2")
    ap.add_argument("--out", help="also write the records as JSON lines here")
    ap.add_argument("--load-format", default="safetensors", help="dummy: random weights (to check this script)")
    args = ap.parse_args()
    seeds = [int(s) for s in args.seeds.split(",")]
    jobs = [("code", p, None, False) for p in IN_DISTRIBUTION] + [("ood", p, None, False) for p in OUT_OF_DISTRIBUTION]
    jobs += [("think", IN_DISTRIBUTION[0], None, True)]
    jobs += [("tool", p, tools, False) for p, tools in TOOL_REQUESTS]

    server = Server(args.dgemma, args.model_dir, args.load_format)
    records = []
    try:
        for kind, prompt, tools, thinking in jobs:
            for seed in seeds:
                body = {"model": "tiny", "messages": [{"role": "user", "content": prompt}], "max_tokens": 192,
                        "seed": seed}
                if tools:
                    body["tools"] = [tasks.tool_spec(t) for t in tools]
                if thinking:
                    body["chat_template_kwargs"] = {"enable_thinking": True}
                s0, c0 = server.steps()
                t0 = time.time()
                r = server.chat(body)
                dt = time.time() - t0
                s1, c1 = server.steps()
                ch = r["choices"][0]
                m = ch["message"]
                content = m.get("content") or ""
                rec = {"kind": kind, "prompt": prompt, "seed": seed, "finish": ch["finish_reason"],
                       "tokens": r["usage"]["completion_tokens"], "canvases": int(c1 - c0),
                       "steps_per_canvas": round((s1 - s0) / max(1, c1 - c0), 2), "seconds": round(dt, 2),
                       "content": content, "reasoning": m.get("reasoning_content") or m.get("reasoning") or "",
                       "tool_calls": [(t["function"]["name"], t["function"]["arguments"]) for t in m.get("tool_calls") or []]}
                if kind in ("code", "ood", "think") and "```" in content:
                    rec["parses"] = parses(code_of(content))
                records.append(rec)
                print(json.dumps(rec), flush=True)
    finally:
        server.close()
    if args.out:
        with open(args.out, "w", encoding="utf-8") as f:
            for rec in records:
                f.write(json.dumps(rec) + "\n")

    def share(rs, pred):
        return "%d/%d" % (sum(1 for r in rs if pred(r)), len(rs))

    code = [r for r in records if r["kind"] == "code"]
    print("code requests: stopped %s, with a def/class %s, parse %s; mean steps per canvas %.2f, mean %.2fs" % (
        share(code, lambda r: r["finish"] == "stop"),
        share(code, lambda r: re.search(r"\b(def\s+\w+\s*\(|class\s+\w+\s*[(:])", code_of(r["content"]))),
        share(code, lambda r: r.get("parses")),
        sum(r["steps_per_canvas"] for r in code) / max(1, len(code)), sum(r["seconds"] for r in code) / max(1, len(code))))
    tool = [r for r in records if r["kind"] == "tool"]
    print("tool requests: a parsed tool call %s" % share(tool, lambda r: r["tool_calls"]))
    think = [r for r in records if r["kind"] == "think"]
    print("thinking: reasoning separated %s" % share(think, lambda r: r["reasoning"].strip()))


if __name__ == "__main__":
    main()
