#!/usr/bin/python3
"""Writes the differential corpus for the C++ Jinja interpreter (src/text/jinja/): templates and data
exercising every supported construct, rendered by Debian's python3-jinja2 the way transformers'
apply_chat_template does. The GoogleTest replay (tests/unit/text/test_jinja_corpus.cpp) renders each
case with the interpreter and compares byte for byte (or, where jinja2 raises, expects an error).

    /usr/bin/python3 tools/jinja/make_corpus.py [--seed 1] [--out tests/fixtures/jinja/corpus.json]

Three parts: hand-written cases (tools/jinja/cases.py), random expressions over random data, and
random statement layouts with random whitespace control (the lexer's trim/lstrip rules). Seeded, so
the output is reproducible for a given jinja2 version.
"""
import argparse
import datetime
import json
import os
import random
import sys

import jinja2
import jinja2.ext
from jinja2.sandbox import ImmutableSandboxedEnvironment

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cases  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


class GenerationTag(jinja2.ext.Extension):
    """transformers' AssistantTracker: {% generation %}...{% endgeneration %} renders its body."""
    tags = {'generation'}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(['name:endgeneration'], drop_needle=True)
        return jinja2.nodes.CallBlock(self.call_method('_render'), [], [], body).set_lineno(lineno)

    def _render(self, caller):
        return caller()


def make_env():
    """transformers.utils.chat_template_utils._compile_jinja_template's environment."""
    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    def strftime_now(fmt):
        return datetime.datetime.now().strftime(fmt)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[GenerationTag, jinja2.ext.loopcontrols])
    env.filters['tojson'] = tojson
    env.globals['raise_exception'] = raise_exception
    env.globals['strftime_now'] = strftime_now
    return env


ENV = make_env()


def render(template, context):
    try:
        return ENV.from_string(template).render(**context)
    except Exception as e:  # noqa: BLE001 -- any failure is an expected error for the C++ side
        return {'error': '%s: %s' % (type(e).__name__, e)}


# ---- random data and expressions ----

WORDS = ['a', 'b', 'x', 'hello', 'Hello World', ' pad ', 'tab\there', 'line\nbreak', 'ümlaut', '日本',
         'user', 'assistant', 'system', 'tool', '', '<|im_start|>', 'a-b c(d', 'MiXeD', '42', '3.5', "it's", 'q"q']


def rand_scalar(r):
    k = r.randrange(7)
    if k == 0:
        return r.choice(WORDS)
    if k == 1:
        return r.randint(-5, 12)
    if k == 2:
        return r.choice([0.5, -1.25, 2.0, 1e15, 3.14159, 0.1, 100.0])
    if k == 3:
        return r.choice([True, False])
    if k == 4:
        return None
    return r.choice(WORDS[:6])


def rand_value(r, depth=0):
    k = r.randrange(10 if depth < 2 else 5)
    if k < 5:
        return rand_scalar(r)
    if k < 7:
        return [rand_value(r, depth + 1) for _ in range(r.randrange(4))]
    keys = r.sample(['role', 'content', 'name', 'id', 'type', 'items', 'value', 'zeta', 'Alpha', 'beta'], r.randrange(4))
    return {key: rand_value(r, depth + 1) for key in keys}


def rand_context(r):
    ctx = {
        's': r.choice(WORDS[:10]),
        'n': r.randint(-3, 9),
        'f': r.choice([0.5, 2.25, -3.0, 1e16]),
        'l': [rand_scalar(r) for _ in range(r.randrange(5))],
        'nums': [r.randint(-9, 9) for _ in range(r.randrange(1, 6))],
        'words': [r.choice(WORDS[:12]) for _ in range(r.randrange(1, 5))],
        'd': {k: rand_scalar(r) for k in r.sample(['a', 'b', 'C', 'content', 'role', 'x_y'], r.randrange(1, 5))},
        'msgs': [{'role': r.choice(['user', 'assistant', 'system']), 'content': r.choice(WORDS[:12])}
                 for _ in range(r.randrange(4))],
        'v': rand_value(r),
        'b': r.choice([True, False]),
        'z': None,
    }
    return ctx


ATOMS = ['s', 'n', 'f', 'l', 'nums', 'words', 'd', 'msgs', 'v', 'b', 'z', 'undef', "'lit'", '"dq"', '3', '0', '-2',
         '1.5', 'true', 'false', 'none', '[1, 2, 3]', "['x', 'y']", "{'k': 1, 'j': 'two'}", '(1, 2)', "''",
         'd.a', "d['b']", 'msgs[0]', 'l[-1]', 'nums[1:]', 'words[::-1]', 's[1:3]', 'msgs[0].role', 'd.missing']
FILTERS = ['length', 'count', 'trim', 'upper', 'lower', 'title', 'capitalize', 'string', 'list', 'first', 'last',
           'reverse | list', 'unique | list', 'sort', 'int', 'float', 'abs', 'round', 'tojson', "tojson(indent=2)",
           "tojson(sort_keys=true)", "default('dflt')", "default('D', true)", "d('x')", "join(', ')", 'join',
           "replace('a', 'A')", 'wordcount', 'items | list', 'dictsort', "dictsort(by='value')", 'indent',
           "indent(2, true)", 'sum', 'max', 'min', "map('upper') | list", "map(attribute='role') | list",
           "select('string') | list", "reject('none') | list", "selectattr('role', 'equalto', 'user') | list",
           "rejectattr('content') | list", 'batch(2) | list',
           "center(9)", "format(1)", 'list | length', "sort(reverse=true)", 'first | upper']
TESTS = ['defined', 'undefined', 'none', 'string', 'number', 'integer', 'float', 'mapping', 'sequence', 'iterable',
         'boolean', 'true', 'false', "equalto 3", "eq 'x'", "in [1, 2, 'a']", 'odd', 'even', "divisibleby 3",
         'lower', 'upper', 'callable', "ne 2", "gt 1", "lt 5", "ge 0", "le 2", "sameas none", "filter", "test"]
BINOPS = ['+', '-', '*', '/', '//', '%', '~', '==', '!=', '<', '>', '<=', '>=', 'in', 'not in', 'and', 'or', '**']
METHODS = ["upper()", "lower()", "strip()", "strip('a')", "lstrip()", "rstrip()", "split()", "split(' ')",
           "split(',', 1)", "rsplit(' ', 1)", "startswith('a')", "endswith('d')", "startswith(('H', 'a'))",
           "replace('l', 'L')", "title()", "capitalize()", "find('l')", "count('l')", "splitlines()",
           "format(1, 2)", "join(['p', 'q'])", "isdigit()", "isalpha()", "zfill(5)", "items() | list",
           "keys() | list", "values() | list", "get('a')", "get('zz', 'dflt')", "index(1)", "partition(' ')", "removeprefix('a')"]


def rand_expr(r, depth=0):
    if depth > 3:
        return r.choice(ATOMS)
    k = r.randrange(12)
    if k < 3:
        return r.choice(ATOMS)
    if k == 3:
        return '(%s | %s)' % (rand_expr(r, depth + 1), r.choice(FILTERS))
    if k == 4:
        return '(%s is %s%s)' % (rand_expr(r, depth + 1), r.choice(['', 'not ']), r.choice(TESTS))
    if k in (5, 6):
        op = r.choice(BINOPS)
        if op == '**':  # small integer operands: Python's big ints and complex results are out of scope
            return '(%s ** %s)' % (r.choice(['n', '2', '3', '0', '-2']), r.choice(['n', '2', '3', '0']))
        return '(%s %s %s)' % (rand_expr(r, depth + 1), op, rand_expr(r, depth + 1))
    if k == 7:
        return '(%s if %s else %s)' % (rand_expr(r, depth + 1), rand_expr(r, depth + 1), rand_expr(r, depth + 1))
    if k == 8:
        return '(not %s)' % rand_expr(r, depth + 1)
    if k == 9:
        return '%s.%s' % (r.choice(['s', 'd', 'l', 'nums', 'words', "'a,b c'", "' Mixed Case '", 'msgs[0]']),
                          r.choice(METHODS))
    if k == 10:
        return '[%s, %s]' % (rand_expr(r, depth + 1), rand_expr(r, depth + 1))
    return '%s[%s]' % (r.choice(['l', 'nums', 'words', 's', 'd', 'msgs']),
                       r.choice(['0', '1', '-1', "'a'", "'role'", '1:', ':2', '::2', '::-1', '-2:', 'n']))


# ---- random layouts (whitespace control) ----

def rand_ws(r):
    return r.choice(['', ' ', '\n', '  ', '\n  ', '\t', '\n\n', ' \n', '\n    \n'])


def rand_open(r, kind):
    return {'block': '{%', 'var': '{{', 'comment': '{#'}[kind] + r.choice(['', '', '-', '+' if kind != 'var' else ''])


def rand_close(r, kind):
    return r.choice(['', '', '-', '+' if kind == 'block' else '']) + {'block': '%}', 'var': '}}', 'comment': '#}'}[kind]


def rand_layout(r):
    parts = []
    for _ in range(r.randrange(2, 7)):
        parts.append(rand_ws(r))
        k = r.randrange(6)
        if k == 0:
            parts.append(rand_open(r, 'var') + ' s ' + rand_close(r, 'var'))
        elif k == 1:
            parts.append(rand_open(r, 'comment') + ' note ' + rand_close(r, 'comment'))
        elif k == 2:
            parts.append(rand_open(r, 'block') + ' if b ' + rand_close(r, 'block') + rand_ws(r) + 'T' + rand_ws(r) +
                         rand_open(r, 'block') + ' else ' + rand_close(r, 'block') + rand_ws(r) + 'F' + rand_ws(r) +
                         rand_open(r, 'block') + ' endif ' + rand_close(r, 'block'))
        elif k == 3:
            parts.append(rand_open(r, 'block') + ' for x in nums ' + rand_close(r, 'block') + rand_ws(r) +
                         rand_open(r, 'var') + ' x ' + rand_close(r, 'var') + rand_ws(r) +
                         rand_open(r, 'block') + ' endfor ' + rand_close(r, 'block'))
        elif k == 4:
            parts.append(rand_open(r, 'block') + ' set t = n ' + rand_close(r, 'block'))
        else:
            parts.append(r.choice(['text', 'a b', 'x\ny', '  indented', '{', '}', '%']))
    parts.append(rand_ws(r))
    return ''.join(parts)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--seed', type=int, default=1)
    ap.add_argument('--expressions', type=int, default=700)
    ap.add_argument('--layouts', type=int, default=300)
    ap.add_argument('--out', default=os.path.join(REPO, 'tests', 'fixtures', 'jinja', 'corpus.json'))
    args = ap.parse_args()
    r = random.Random(args.seed)

    corpus = []
    for name, template, context in cases.CASES:
        corpus.append({'name': name, 'template': template, 'context': context})
    for i in range(args.expressions):
        corpus.append({'name': 'expr_%d' % i, 'template': '{{ %s }}' % rand_expr(r), 'context': rand_context(r)})
    for i in range(args.layouts):
        corpus.append({'name': 'layout_%d' % i, 'template': rand_layout(r), 'context': rand_context(r)})

    names = set()
    for case in corpus:
        assert case['name'] not in names, case['name']
        names.add(case['name'])
        # Round-trip the context through JSON so that the data is exactly what the C++ side reads.
        case['context'] = json.loads(json.dumps(case['context']))
        result = render(case['template'], case['context'])
        if isinstance(result, dict):
            case['error'] = result['error']
        else:
            case['expected'] = result

    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, 'w', encoding='utf-8') as f:
        json.dump({'generator': 'tools/jinja/make_corpus.py', 'seed': args.seed, 'jinja2': jinja2.__version__,
                   'cases': corpus}, f, ensure_ascii=False, indent=0)
        f.write('\n')
    errors = sum(1 for c in corpus if 'error' in c)
    print('%s: %d cases (%d render, %d raise)' % (args.out, len(corpus), len(corpus) - errors, errors))


if __name__ == '__main__':
    main()
