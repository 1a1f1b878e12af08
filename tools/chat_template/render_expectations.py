#!/usr/bin/python3
"""Renders the chat-template test matrix with the real DiffusionGemma templates and Debian's
python3-jinja2, the way transformers' apply_chat_template does, and writes the expectations the C++
renderer is tested against (tests/unit/text/test_chat_template.cpp).

    /usr/bin/python3 tools/chat_template/render_expectations.py [--templates DIR]

DIR defaults to ../shared/reference/chat_templates relative to the repository root. Inputs:
tests/fixtures/chat_template/conversations.json (the hand-written matrix) and
random_conversations.json (from random_conversations.py), each a list of
    {"name", "messages", "tools"?, "kwargs"?, "add_generation_prompt"? (default true), "cpp_rejects"?}
("cpp_rejects": a reason the C++ renderer refuses input that jinja2 would render). Outputs: tests/fixtures/chat_template/expected_2026-07.json and expected_2026-06.json, each mapping
conversation name -> rendered string, or {"error": message} when the template raises.

The environment mirrors transformers.utils.chat_template_utils._compile_jinja_template:
ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True) with the loopcontrols extension,
a tojson filter that does not escape HTML or non-ASCII, and the raise_exception / strftime_now
globals; render() gets messages, tools (None when absent), documents=None, add_generation_prompt,
the special tokens and the chat_template_kwargs.
"""
import argparse
import datetime
import json
import os
import sys

import jinja2
import jinja2.ext
from jinja2.exceptions import TemplateError
from jinja2.sandbox import ImmutableSandboxedEnvironment

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FIXTURES = os.path.join(REPO, 'tests', 'fixtures', 'chat_template')
TEMPLATES = {
    '2026-07': 'diffusiongemma-2026-07.jinja',
    '2026-06': 'diffusiongemma-2026-06.jinja',
}
SPECIAL_TOKENS = {'bos_token': '<bos>', 'eos_token': '<eos>', 'pad_token': '<pad>', 'unk_token': '<unk>'}


def compile_template(text):
    def raise_exception(message):
        raise TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    def strftime_now(fmt):
        return datetime.datetime.now().strftime(fmt)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols])
    env.filters['tojson'] = tojson
    env.globals['raise_exception'] = raise_exception
    env.globals['strftime_now'] = strftime_now
    return env.from_string(text)


def render(template, conv):
    kwargs = dict(SPECIAL_TOKENS)
    kwargs.update(conv.get('kwargs', {}))
    try:
        return template.render(messages=conv['messages'], tools=conv.get('tools'), documents=None,
                               add_generation_prompt=conv.get('add_generation_prompt', True), **kwargs)
    except Exception as e:  # the template's own raise_exception, or a TypeError/UndefinedError it hits
        return {'error': '%s: %s' % (type(e).__name__, e)}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--templates', default=os.path.join(REPO, '..', 'shared', 'reference', 'chat_templates'))
    ap.add_argument('--conversations', nargs='+', default=[os.path.join(FIXTURES, 'conversations.json'),
                                                           os.path.join(FIXTURES, 'random_conversations.json')])
    ap.add_argument('--out-dir', default=FIXTURES)
    args = ap.parse_args()

    conversations = []
    for path in args.conversations:
        with open(path, encoding='utf-8') as f:
            conversations += json.load(f)
    names = [c['name'] for c in conversations]
    if len(set(names)) != len(names):
        sys.exit('duplicate conversation names')

    for version, filename in TEMPLATES.items():
        with open(os.path.join(args.templates, filename), encoding='utf-8') as f:
            template = compile_template(f.read())
        expected = {c['name']: render(template, c) for c in conversations}
        out = os.path.join(args.out_dir, 'expected_%s.json' % version)
        with open(out, 'w', encoding='utf-8') as f:
            json.dump(expected, f, ensure_ascii=False, indent=1)
            f.write('\n')
        errors = sum(1 for v in expected.values() if isinstance(v, dict))
        print('%s: %d conversations (%d template errors) -> %s' % (version, len(expected), errors,
                                                                   os.path.relpath(out, REPO)))
    print('jinja2', jinja2.__version__, 'python', sys.version.split()[0])


if __name__ == '__main__':
    main()
