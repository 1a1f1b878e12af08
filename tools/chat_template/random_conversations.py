#!/usr/bin/python3
"""Generates random chat requests for the chat-template tests: random roles and content shapes, tool
schemas with random types/enums/items/required lists, tool calls with random argument values (ints,
floats, unicode, nested lists/objects, strings, null), tool results, reasoning fields and kwargs, many
of them odd on purpose. Expectations come from render_expectations.py like the hand-written matrix;
the C++ renderer must match jinja2 on every one, or throw where jinja2 raises.

    /usr/bin/python3 tools/chat_template/random_conversations.py --seed 1 --count 150 \\
        > tests/fixtures/chat_template/random_conversations.json

Objects are emitted with keys in byte order on purpose: nlohmann::json (our parser) does not keep a
JSON object's key order while Python dicts do, and the template exposes that order in a few
nonsensical places (iterating an object given where a list belongs, repr() of an object, dictsort ties
between keys that differ only in case).
"""
import argparse
import json
import random
import sys

R = random.Random(0)

TEXTS = ['', ' ', 'hi', '  padded  ', '\n\tx\n', '<|channel>thought\nsecret<channel|>shown', 'a<|channel>b',
         'x<channel|>y', '<|turn>model\n', '<bos>', '<|"|>', 'héllo wörld', '日本', '🎉 emoji', '\u3000wide\u00a0',
         'Σigma', 'tab\there', '\'quote"', '\\back', 'ſ', 'ß', 'İ']
KEYS = ['a', 'b', 'B', 'c', 'name', 'type', 'id', 'value', 'items', 'properties', 'required', 'description', 'enum',
        'nullable', 'x_y', 'Zed', 'é', 'É', 'get', 'keys', 'response']
TYPES = ['string', 'STRING', 'integer', 'number', 'boolean', 'object', 'array', 'Object', 'ſtring', 'null', None,
         ['string', 'null'], 5, '']


def obj(d):
    """A dict with keys inserted in byte order (the order nlohmann::json iterates)."""
    return {k: d[k] for k in sorted(d, key=lambda s: s.encode('utf-8'))}


def text():
    if R.random() < 0.8:
        return R.choice(TEXTS)
    return ''.join(R.choice(TEXTS) for _ in range(R.randint(1, 3)))


def scalar():
    c = R.random()
    if c < 0.3:
        return text()
    if c < 0.45:
        return R.choice([0, 1, -1, 42, 10**15, -(2**40)])
    if c < 0.6:
        return R.choice([0.0, -0.0, 0.5, 1e16, 1e-5, 1e-4, 123.456, 1.5e300, 2.5e-7, 1e22, 9007199254740993.0,
                         0.1 + 0.2])
    if c < 0.75:
        return R.choice([True, False])
    return None


def value(depth=0):
    c = R.random()
    if depth > 3 or c < 0.6:
        return scalar()
    if c < 0.8:
        return [value(depth + 1) for _ in range(R.randint(0, 3))]
    return obj({R.choice(KEYS): value(depth + 1) for _ in range(R.randint(0, 3))})


def schema(depth=0):
    if R.random() < 0.05:
        return R.choice(['string', None, [1], 5])
    s = {}
    if R.random() < 0.8:
        s['type'] = R.choice(TYPES)
    if R.random() < 0.4:
        s['description'] = R.choice([text(), 'desc', 3, None, ['l'], ''])
    t = s.get('type')
    upper = t.upper() if isinstance(t, str) else None
    if (R.random() < 0.5 or upper == 'STRING') and R.random() < 0.6:
        s['enum'] = R.choice([['a', 'b'], [], [1, 'x', None, True], 'notalist', None, [{'k': 1}]])
    if upper == 'ARRAY' or R.random() < 0.1:
        c = R.random()
        if c < 0.7:
            s['items'] = schema(depth + 1) if depth < 3 else {'type': 'string'}
        elif c < 0.8:
            s['items'] = obj({'type': R.choice(TYPES[:9] + [['a', 'b']]), 'required': R.choice([['p'], 'ab', {'k': 1}]),
                              'properties': R.choice([None, {'p': {'type': 'string'}}, 'x']), 'minItems': 1})
        else:
            s['items'] = R.choice([None, {}, 'string', [1]])
    if upper == 'OBJECT' or R.random() < 0.1:
        c = R.random()
        if c < 0.6 and depth < 3:
            names = R.sample(['p', 'q', 'R', 's_t', 'é'], R.randint(0, 3))
            s['properties'] = obj({k: schema(depth + 1) for k in names})
        elif c < 0.7:
            s['properties'] = None
        elif c < 0.8:
            s['additionalProperties'] = R.choice([True, {'type': 'string'}])
        if R.random() < 0.5:
            s['required'] = R.choice([['p'], [], 'pq', ['p', 'q'], None, {'z': 1}])
    if R.random() < 0.2:
        s['nullable'] = R.choice([True, False, 1, 'yes'])
    if R.random() < 0.1:
        s['title'] = 'T'
    return obj(s)


def tool():
    if R.random() < 0.03:
        return {'name': 'flat'}  # not the OpenAI shape: the template fails on it
    f = {}
    if R.random() < 0.97:
        f['name'] = R.choice(['f', 'get_weather', 'x.y-z', None, 7]) if R.random() < 0.1 else R.choice(
            ['f', 'get_weather', 'calc'])
    if R.random() < 0.9:
        f['description'] = text()
    c = R.random()
    if c < 0.7:
        params = {'type': R.choice(['object', 'OBJECT', None, '']) if R.random() < 0.2 else 'object',
                  'properties': obj({k: schema() for k in R.sample(['a', 'b', 'C', 'dd', 'é'], R.randint(0, 4))})}
        if R.random() < 0.6:
            params['required'] = R.choice([['a'], ['a', 'b'], [], 'ab'])
        f['parameters'] = obj(params)
    elif c < 0.8:
        f['parameters'] = R.choice([{}, None, 'str', {'properties': {}}])
    if R.random() < 0.1:
        f['response'] = R.choice([{'type': 'object', 'description': 'd'}, {'type': 'string'}, {}, None])
    return obj({'type': 'function', 'function': obj(f)})


def tool_call():
    fn = {'name': R.choice(['f', 'calc', 'get_weather'])}
    c = R.random()
    if c < 0.75:
        fn['arguments'] = obj({R.choice(KEYS): value() for _ in range(R.randint(0, 4))})
    elif c < 0.85:
        fn['arguments'] = '{"a": 1}'
    elif c < 0.92:
        fn['arguments'] = None
    elif c >= 0.96:
        fn['arguments'] = R.choice([[1], 5, True])
    call = {'type': 'function', 'function': obj(fn)}
    call_id = R.choice(['a', 'b', 'c', None])
    if call_id is not None:
        call['id'] = call_id
    return obj(call)


def parts():
    out = []
    for _ in range(R.randint(0, 4)):
        t = R.choice(['text', 'text', 'image', 'image_url', 'audio', 'input_audio', 'video', 'other', None])
        p = {} if t is None else {'type': t}
        if t == 'text' and R.random() < 0.95:
            p['text'] = text()
        out.append(obj(p))
    return out


def message():
    role = R.choice(['user', 'user', 'assistant', 'assistant', 'tool', 'tool', 'system', 'developer'])
    m = {'role': role}
    c = R.random()
    if c < 0.6:
        m['content'] = text()
    elif c < 0.8:
        m['content'] = parts()
    elif c < 0.9:
        m['content'] = None
    if role == 'assistant':
        if R.random() < 0.5:
            m['tool_calls'] = [tool_call() for _ in range(R.randint(0, 3))]
        if R.random() < 0.3:
            m[R.choice(['reasoning', 'reasoning_content'])] = R.choice(['think text', '', None, 'x'])
        if R.random() < 0.05:
            m['tool_responses'] = [obj({'name': R.choice(['f', None, '', 3]), 'response': value()})
                                   for _ in range(R.randint(0, 2))]
    if role == 'tool':
        if R.random() < 0.8:
            m['tool_call_id'] = R.choice(['a', 'b', 'c', 'zz'])
        if R.random() < 0.3:
            m['name'] = R.choice(['custom', None, ''])
        if isinstance(m.get('content'), list):
            m['content'] = [p for p in m['content'] if p.get('type') != 'text' or 'text' in p]
    if R.random() < 0.05:
        m['reasoning'] = 'stray reasoning'
    return obj(m)


def conversation(name):
    c = {'name': name, 'messages': [message() for _ in range(R.randint(0, 7))]}
    if R.random() < 0.5:
        c['tools'] = [tool() for _ in range(R.randint(0, 3))]
    elif R.random() < 0.1:
        c['tools'] = R.choice([[], {}, None])
    kwargs = {}
    if R.random() < 0.5:
        kwargs['enable_thinking'] = R.choice([True, False, None, 1, '', 0])
    if R.random() < 0.3:
        kwargs['preserve_thinking'] = R.choice([True, False])
    if kwargs:
        c['kwargs'] = kwargs
    if R.random() < 0.3:
        c['add_generation_prompt'] = False
    return c


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--seed', type=int, default=1)
    ap.add_argument('--count', type=int, default=150)
    args = ap.parse_args()
    R.seed(args.seed)
    convs = [conversation('random_%d_%d' % (args.seed, i)) for i in range(args.count)]
    sys.stdout.write('[\n' + ',\n'.join(json.dumps(c, ensure_ascii=False) for c in convs) + '\n]\n')


if __name__ == '__main__':
    main()
