#!/usr/bin/python3
"""Builds the tiny model's training set: chat-formatted examples, tokenised, in one compact file.

    python3 tools/tiny_model/build_data.py OUT.npz [--dgemma build/dgemma] [--stdlib DIR]

Examples (deterministic, seeded), aimed at what a 7.7M-parameter model can master:
  * small functions (code_tasks.py: ~270 tasks, string, list, dict, math, file and class helpers),
    each requested 28 times in varied phrasings (a signature in the request renames the function
    and its arguments), always answered in one style (a ```python block, nothing else) that fits
    one 64-token canvas with the end-of-turn, so every answer is a function of its request;
  * a small share of docstring -> code (short standard-library functions, requested from their
    docstrings) and of "what does X do?" -> the docstring's first paragraph;
  * tool calls in the Gemma 4 format (tools declared in the system turn, the answer is
    <|tool_call>call:NAME{...}<tool_call|><|tool_response>), turns after a tool result, and requests
    that need no tool although tools are declared;
  * a share of the small functions with thinking on (the answer opens with a short
    <|channel>thought ...<channel|> block naming the function).
Prompts are rendered and tokenised by dgemma itself (`dgemma serve` on models/tiny-code with dummy
weights, POST /tokenize), so they are exactly what the server feeds the model; answers are tokenised
with bpe.Encoder (identical ids, tests/unit/text/test_tiny_tokenizer.cpp).

Output arrays: ids (uint16, all examples back to back), start, prompt_len, answer_len (int32),
kind (uint8, index into kinds). Takes about a minute on 2 cores.
"""
import argparse
import ast
import json
import os
import random
import shutil
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
import urllib.error
import urllib.request

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
import bpe  # noqa: E402
import code_tasks  # noqa: E402
import tasks  # noqa: E402

SEED = 1234
MAX_ANSWER_TOKENS = 192  # three canvases of 64
MAX_TOTAL_TOKENS = 512
CANVAS = 64  # models/tiny-code canvas_length: every small-function answer fits one canvas
CODE_ROUNDS = 28  # requests per small-function task
THINK_SHARE = 0.08
N_DOC_CODE = 300
N_DOC_QA = 400
N_TOOL_CALLS = 4000
N_TOOLS_NO_CALL = 1200
KINDS = ["doc_code", "simple_code", "doc_qa", "tool_call", "tool_followup", "tools_no_call", "chat", "think_code"]


# ---- standard-library functions --------------------------------------------------------------------

def first_paragraph(doc):
    para = doc.strip().split("\n\n")[0]
    return " ".join(line.strip() for line in para.splitlines()).strip()


def strip_docstring(src_lines, node, base_indent):
    """The function's source with its docstring statement removed, dedented."""
    doc_node = node.body[0]
    lines = src_lines[node.lineno - 1:node.end_lineno]
    cut_a, cut_b = doc_node.lineno - node.lineno, doc_node.end_lineno - node.lineno + 1
    rest = lines[cut_b:]
    while rest and not rest[0].strip():  # the blank line that often follows a docstring
        rest = rest[1:]
    kept = lines[:cut_a] + rest
    return textwrap.dedent("\n".join(kept)).rstrip()


def signature(node):
    a = node.args
    names = [x.arg for x in a.posonlyargs + a.args]
    if a.vararg:
        names.append("*" + a.vararg.arg)
    names += [x.arg for x in a.kwonlyargs]
    if a.kwarg:
        names.append("**" + a.kwarg.arg)
    return "%s(%s)" % (node.name, ", ".join(names))


def stdlib_functions(files):
    out = []
    for path in files:
        src = bpe.read_source(path)
        try:
            tree = ast.parse(src)
        except SyntaxError:
            continue
        lines = src.split("\n")
        module = os.path.splitext(os.path.relpath(path, bpe.STDLIB))[0].replace(os.sep, ".")
        if module.endswith(".__init__"):
            module = module[:-9]
        for top in tree.body:
            owners = [(None, top)] if isinstance(top, ast.FunctionDef) else []
            if isinstance(top, ast.ClassDef):
                owners = [(top.name, n) for n in top.body if isinstance(n, ast.FunctionDef)]
            for cls, fn in owners:
                doc = ast.get_docstring(fn)
                if not doc or fn.decorator_list or len(fn.body) < 2:
                    continue
                if fn.name.startswith("__") and fn.name != "__init__":
                    continue
                para = first_paragraph(doc)
                if not (15 <= len(para) <= 300) or not para.isascii() or ">>>" in para:
                    continue
                code = strip_docstring(lines, fn, 0)
                if not code.isascii() or "\t" in code:
                    continue
                out.append({"module": module, "cls": cls, "name": fn.name, "sig": signature(fn), "doc": para,
                            "code": code})
    return out


VERBS = set("""return get set convert create make check compute calculate find parse read write remove add build
format split join open close apply generate load save copy move update decode encode replace search match send
start stop run call print escape quote normalize validate raise handle insert delete append extend sort count
determine translate register initialize construct wrap flush reset clear process emit install fetch extract strip
change take give produce iterate compare look test wait accept fill turn skip lookup mark display dump create
configure return convert prepare push pop pull put show render resolve list test serialize compile""".split())


def third_person(verb):
    if verb.endswith(("s", "sh", "ch", "x", "z")):
        return verb + "es"
    if verb.endswith("y") and verb[-2:-1] not in "aeiou":
        return verb[:-1] + "ies"
    return verb + "s"


def that_clause(doc):
    """"Return the sum of x." -> "returns the sum of x." (None when the docstring does not start with a verb)."""
    head, _, rest = doc.partition(" ")
    if not rest or head.lower() not in VERBS or not head[0].isupper():
        return None
    return third_person(head.lower()) + " " + rest


def code_request(rng, f):
    clause = that_clause(f["doc"])
    if clause and rng.random() < 0.7:
        if f["cls"]:
            return rng.choice(["Write a method that %s", "Write the method `%s.%s` that %%s" % (f["cls"], f["name"])]) % clause
        return rng.choice(["Write a Python function that %s", "Write a function that %s",
                           "Write a Python function `%s` that %%s" % f["sig"]]) % clause
    who = "`%s.%s`" % (f["cls"], f["name"]) if f["cls"] else "`%s`" % f["sig"]
    doc = f["doc"]
    if f["cls"]:
        forms = ["Write the method %s of class `%s`: %s" % (who, f["cls"], doc),
                 "Implement %s in Python. %s" % (who, doc),
                 "%s\nWrite this as the Python method %s." % (doc, who)]
    else:
        forms = ["Write a Python function %s. %s" % (who, doc),
                 "Implement %s in Python: %s" % (who, doc),
                 "Write a Python function that does this: %s" % doc,
                 "%s\nWrite it in Python as %s." % (doc, who),
                 "Can you write %s in Python? %s" % (who, doc)]
    return rng.choice(forms)


def code_answer(code):
    """One fixed style: no lead-in, a ```python block, nothing after it (a lead-in chosen at random
    would shift every later token by a random amount, which a small model can only learn as a blur)."""
    return "```python\n" + code + "\n```"


def thought_for(fn):
    return "I will write `%s` in Python." % fn


# ---- tool calls ----------------------------------------------------------------------------------

def gemma_value(v):
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    return '<|"|>' + str(v) + '<|"|>'


def tool_call_text(name, args):
    """What the model writes for a call: arguments in key order, as the chat template renders
    history calls (dictsort)."""
    return "<|tool_call>call:%s{%s}<tool_call|>" % (name, ",".join(
        "%s:%s" % (k, gemma_value(args[k])) for k in sorted(args)))


def declared_tools(rng, must):
    others = [t for t in sorted(tasks.TOOLS) if t != must]
    chosen = rng.sample(others, rng.randint(0, 3)) + ([must] if must else [])
    rng.shuffle(chosen)
    return [tasks.tool_spec(t) for t in chosen]


# ---- example assembly ----------------------------------------------------------------------------

def user(text):
    return {"role": "user", "content": text}


def build_examples(files, enc):
    rng = random.Random(SEED)
    funcs = stdlib_functions(files)
    n_tasks = code_tasks.check_tasks()
    ex = []

    def add(kind, messages, answer, tools=None, thinking=False):
        ex.append({"kind": kind, "messages": messages, "tools": tools, "thinking": thinking, "answer": answer})

    def code_item(task):
        req, code, fn = code_tasks.request(rng, task)
        ans = code_answer(code)
        n = len(enc.encode(ans, allow_special=True)) + 1  # + <turn|>
        if n > CANVAS:
            raise SystemExit("task %s: answer of %d tokens does not fit one %d-token canvas:\n%s" % (
                task["names"][0], n, CANVAS, ans))
        return req, ans, fn

    # Small functions the model can master: every task many times, in varied phrasings.
    for _ in range(CODE_ROUNDS):
        for task in code_tasks.TASKS:
            req, ans, fn = code_item(task)
            if rng.random() < THINK_SHARE:
                add("think_code", [user(req)], "<|channel>thought\n%s<channel|>%s" % (thought_for(fn), ans),
                    thinking=True)
            else:
                add("simple_code", [user(req)], ans)
    # A small share of standard-library code (short functions, the signature in the request) and of
    # "what does X do?": variety, not something a model this size can reproduce.
    short = [f for f in funcs if len(enc.encode(code_answer(f["code"]))) < CANVAS]
    for f in rng.sample(short, min(len(short), N_DOC_CODE)):
        add("doc_code", [user(code_request(rng, f))], code_answer(f["code"]))
    for f in rng.sample(funcs, min(len(funcs), N_DOC_QA)):
        what = "%s.%s.%s" % (f["module"], f["cls"], f["name"]) if f["cls"] else "%s.%s" % (f["module"], f["name"])
        q = rng.choice(["What does `%s` do?", "Explain `%s`.", "What is `%s` for?"]) % what
        add("doc_qa", [user(q)], f["doc"])
    for _ in range(40):
        for requests, answer in tasks.SHORT_ANSWERS:
            add("chat", [user(rng.choice(requests))], answer)
    for _ in range(N_TOOL_CALLS):
        name, req, args, result, final = tasks.tool_requests(rng)
        tools = declared_tools(rng, name)
        add("tool_call", [user(req)], tool_call_text(name, args) + "<|tool_response>", tools=tools)
        if rng.random() < 0.25:
            call = {"id": "call_1", "type": "function", "function": {"name": name, "arguments": args}}
            msgs = [user(req), {"role": "assistant", "content": "", "tool_calls": [call]},
                    {"role": "tool", "tool_call_id": "call_1", "content": json.dumps(result)}]
            add("tool_followup", msgs, final, tools=tools)
    for _ in range(N_TOOLS_NO_CALL):
        req, ans, _ = code_item(rng.choice(code_tasks.TASKS))
        add("tools_no_call", [user(req)], ans, tools=declared_tools(rng, None) or [tasks.tool_spec("search_web")])
    return ex, len(funcs), n_tasks


# ---- tokenising through dgemma -------------------------------------------------------------------

def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    def __init__(self, dgemma, model_dir):
        self.port = free_port()
        self.proc = subprocess.Popen([dgemma, "serve", model_dir, "--load-format", "dummy", "--host", "127.0.0.1",
                                      "--port", str(self.port), "--log-level", "warn", "--enable-auto-tool-choice",
                                      "--tool-call-parser", "gemma4", "--reasoning-parser", "gemma4"],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        deadline = time.time() + 120
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise SystemExit("dgemma serve exited: " + self.proc.stderr.read().decode(errors="replace"))
            try:
                urllib.request.urlopen("http://127.0.0.1:%d/health" % self.port, timeout=2)
                return
            except OSError:
                time.sleep(0.3)
        raise SystemExit("dgemma serve did not come up")

    def tokenize(self, body):
        req = urllib.request.Request("http://127.0.0.1:%d/tokenize" % self.port, data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=30) as r:
                return json.loads(r.read())["tokens"]
        except urllib.error.HTTPError as e:
            raise SystemExit("/tokenize refused %s: %s" % (json.dumps(body)[:300], e.read().decode(errors="replace")))

    def close(self):
        self.proc.terminate()
        self.proc.wait(timeout=30)


def model_dir_for_tokenizing(tmp):
    """models/tiny-code's config with its tokenizer; weights are not needed to tokenise."""
    src = os.path.join(REPO, "models", "tiny-code")
    for f in ("config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json"):
        shutil.copy(os.path.join(src, f), os.path.join(tmp, f))
    return tmp


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out")
    ap.add_argument("--dgemma", default=os.path.join(REPO, "build", "dgemma"))
    ap.add_argument("--stdlib", default=bpe.STDLIB)
    ap.add_argument("--limit", type=int, default=0, help="only the first N examples (for a quick check)")
    args = ap.parse_args()

    with open(os.path.join(REPO, "models", "tiny-code", "tokenizer.json"), encoding="utf-8") as f:
        enc = bpe.Encoder(json.load(f))
    with open(os.path.join(REPO, "models", "tiny-code", "config.json"), encoding="utf-8") as f:
        if json.load(f)["canvas_length"] != CANVAS:
            raise SystemExit("models/tiny-code canvas_length is not %d: update CANVAS" % CANVAS)
    examples, n_funcs, n_tasks = build_examples(bpe.stdlib_files(args.stdlib), enc)
    if args.limit:
        examples = examples[:args.limit]
    turn_end = enc.added["<turn|>"]

    ids, start, plen, alen, kind = [], [], [], [], []
    dropped = 0
    with tempfile.TemporaryDirectory() as tmp:
        server = Server(args.dgemma, model_dir_for_tokenizing(tmp))
        try:
            cache = {}
            for e in examples:
                body = {"messages": e["messages"], "add_generation_prompt": True}
                if e["tools"]:
                    body["tools"] = e["tools"]
                if e["thinking"]:
                    body["chat_template_kwargs"] = {"enable_thinking": True}
                key = json.dumps(body, sort_keys=True)
                prompt = cache.get(key)
                if prompt is None:
                    prompt = cache[key] = server.tokenize(body)
                answer = enc.encode(e["answer"], allow_special=True)
                if not answer or answer[-1] != enc.added["<|tool_response>"]:
                    answer.append(turn_end)
                if len(answer) > MAX_ANSWER_TOKENS or len(prompt) + len(answer) > MAX_TOTAL_TOKENS:
                    dropped += 1
                    continue
                start.append(len(ids))
                ids.extend(prompt + answer)
                plen.append(len(prompt))
                alen.append(len(answer))
                kind.append(KINDS.index(e["kind"]))
        finally:
            server.close()
    np.savez_compressed(args.out, ids=np.array(ids, np.uint16), start=np.array(start, np.int32),
                        prompt_len=np.array(plen, np.int32), answer_len=np.array(alen, np.int32),
                        kind=np.array(kind, np.uint8), kinds=np.array(KINDS))
    counts = {k: int(np.sum(np.array(kind) == i)) for i, k in enumerate(KINDS)}
    print("%d small-function tasks, %d stdlib functions; %d examples kept, %d dropped (too long); %d tokens; %s" % (
        n_tasks, n_funcs, len(start), dropped, len(ids), counts))


if __name__ == "__main__":
    main()
