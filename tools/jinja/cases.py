"""Hand-written cases for tools/jinja/make_corpus.py: (name, template, context). Each construct the
C++ interpreter supports appears here at least once; the expected output comes from jinja2."""

MSGS = [
    {'role': 'system', 'content': 'You are helpful.'},
    {'role': 'user', 'content': 'Hi <b>there</b>'},
    {'role': 'assistant', 'content': '  Hello!  ', 'tool_calls': [
        {'id': 'c1', 'type': 'function', 'function': {'name': 'get_weather', 'arguments': {'city': 'Paris', 'days': 3}}}]},
    {'role': 'tool', 'tool_call_id': 'c1', 'content': '{"temp": 21}'},
    {'role': 'user', 'content': [{'type': 'text', 'text': 'part one'}, {'type': 'image'}, {'type': 'text', 'text': 'two'}]},
]
TOOLS = [
    {'type': 'function', 'function': {'name': 'get_weather', 'description': 'Weather for a city',
                                      'parameters': {'type': 'object', 'properties': {
                                          'city': {'type': 'string', 'description': 'City name'},
                                          'days': {'type': 'integer', 'enum': [1, 3, 7]}},
                                          'required': ['city']}}},
    {'type': 'function', 'function': {'name': 'noop', 'parameters': {'type': 'object', 'properties': {}}}},
]
BASE = {'messages': MSGS, 'tools': TOOLS, 'bos_token': '<s>', 'eos_token': '</s>', 'add_generation_prompt': True}

CHATML = """{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + (message['content'] if message['content'] is string else message['content'] | map(attribute='text') | select('defined') | join(' ')) + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"""

LLAMA_LIKE = """{{- bos_token }}
{%- if tools is not none %}
    {%- set ns = namespace(sys='') %}
    {%- for t in tools %}
        {%- set ns.sys = ns.sys + (t | tojson(indent=4)) + "\\n\\n" %}
    {%- endfor %}
    {{- "<|start_header_id|>system<|end_header_id|>\\n\\n" + ns.sys | trim + "<|eot_id|>" }}
{%- endif %}
{%- for message in messages %}
    {%- if message.role == 'tool' %}
        {{- "<|start_header_id|>ipython<|end_header_id|>\\n\\n" + message.content | tojson + "<|eot_id|>" }}
    {%- elif message.tool_calls is defined %}
        {%- for tc in message.tool_calls %}
            {{- '{"name": "' + tc.function.name + '", "parameters": ' + tc.function.arguments | tojson + '}' }}
        {%- endfor %}
        {{- "<|eot_id|>" }}
    {%- else %}
        {{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' + (message['content'] if message.content is string else 'parts') | trim + '<|eot_id|>' }}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}
{%- endif %}
"""

MISTRAL_LIKE = """{%- if messages[0]['role'] == 'system' %}
    {%- set system_message = messages[0]['content'] %}
    {%- set loop_messages = messages[1:] %}
{%- else %}
    {%- set loop_messages = messages %}
{%- endif %}
{{- bos_token }}
{%- for message in loop_messages %}
    {%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}
        {{- raise_exception('After the optional system message, conversation roles must alternate user/assistant/user/assistant/...') }}
    {%- endif %}
    {%- if message['role'] == 'user' %}
        {%- if loop.first and system_message is defined %}
            {{- ' [INST] ' + system_message + '\\n\\n' + message['content'] + ' [/INST]' }}
        {%- else %}
            {{- ' [INST] ' + message['content'] + ' [/INST]' }}
        {%- endif %}
    {%- elif message['role'] == 'assistant' %}
        {{- ' ' + message['content'] + eos_token}}
    {%- else %}
        {{- raise_exception('Only user and assistant roles are supported, with the exception of an initial optional system message!') }}
    {%- endif %}
{%- endfor %}
"""

QWEN_LIKE = """{%- if tools %}
    {{- '<|im_start|>system\\n' }}
    {%- if messages[0].role == 'system' %}
        {{- messages[0].content + '\\n\\n' }}
    {%- endif %}
    {{- "# Tools\\n\\n<tools>" }}
    {%- for tool in tools %}
        {{- "\\n" }}
        {{- tool | tojson }}
    {%- endfor %}
    {{- "\\n</tools><|im_end|>\\n" }}
{%- endif %}
{%- set ns = namespace(multi_step_tool=true, last_query_index=messages|length - 1) %}
{%- for message in messages[::-1] %}
    {%- set index = (messages|length - 1) - loop.index0 %}
    {%- if ns.multi_step_tool and message.role == "user" and message.content is string and not(message.content.startswith('<tool_response>') and message.content.endswith('</tool_response>')) %}
        {%- set ns.multi_step_tool = false %}
        {%- set ns.last_query_index = index %}
    {%- endif %}
{%- endfor %}
{%- for message in messages %}
    {%- if message.content is string %}
        {%- set content = message.content %}
    {%- else %}
        {%- set content = '' %}
    {%- endif %}
    {%- if (message.role == "user") or (message.role == "system" and not loop.first) %}
        {{- '<|im_start|>' + message.role + '\\n' + content + '<|im_end|>' + '\\n' }}
    {%- elif message.role == "assistant" %}
        {%- set reasoning_content = '' %}
        {%- if '</think>' in content %}
            {%- set reasoning_content = content.split('</think>')[0].rstrip('\\n').split('<think>')[-1].lstrip('\\n') %}
            {%- set content = content.split('</think>')[-1].lstrip('\\n') %}
        {%- endif %}
        {{- '<|im_start|>' + message.role + '\\n' + content }}
        {%- if message.tool_calls %}
            {%- for tool_call in message.tool_calls %}
                {%- if (loop.first and content) or (not loop.first) %}
                    {{- '\\n' }}
                {%- endif %}
                {%- if tool_call.function %}
                    {%- set tool_call = tool_call.function %}
                {%- endif %}
                {{- '<tool_call>\\n{"name": "' }}
                {{- tool_call.name }}
                {{- '", "arguments": ' }}
                {%- if tool_call.arguments is string %}
                    {{- tool_call.arguments }}
                {%- else %}
                    {{- tool_call.arguments | tojson }}
                {%- endif %}
                {{- '}\\n</tool_call>' }}
            {%- endfor %}
        {%- endif %}
        {{- '<|im_end|>\\n' }}
    {%- elif message.role == "tool" %}
        {%- if loop.first or (messages[loop.index0 - 1].role != "tool") %}
            {{- '<|im_start|>user' }}
        {%- endif %}
        {{- '\\n<tool_response>\\n' }}
        {{- content }}
        {{- '\\n</tool_response>' }}
        {%- if loop.last or (messages[loop.index0 + 1].role != "tool") %}
            {{- '<|im_end|>\\n' }}
        {%- endif %}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\\n' }}
    {%- if enable_thinking is defined and enable_thinking is false %}
        {{- '<think>\\n\\n</think>\\n\\n' }}
    {%- endif %}
{%- endif %}"""

C = {'s': 'Hello World', 'n': 3, 'l': [3, 1, 2], 'd': {'b': 2, 'a': 1, 'C': 3}, 'z': None, 'e': [], 'b': True,
     'f': 2.5, 'words': ['banana', 'Apple', 'cherry', 'apple'],
     'people': [{'name': 'Ann', 'age': 31, 'city': 'Oslo'}, {'name': 'bob', 'age': 25},
                {'name': 'Cy', 'age': 31, 'city': 'Rome'}]}

CASES = [
    # ---- whole chat templates in the style of published ones ----
    ('chatml', CHATML, BASE),
    ('chatml_no_prompt', CHATML, dict(BASE, add_generation_prompt=False)),
    ('llama_like', LLAMA_LIKE, BASE),
    ('llama_like_no_tools', LLAMA_LIKE, dict(BASE, tools=None, messages=MSGS[:2])),
    ('mistral_like_ok', MISTRAL_LIKE, dict(BASE, messages=[MSGS[0], MSGS[1], {'role': 'assistant', 'content': 'x'}, MSGS[1]])),
    ('mistral_like_raises', MISTRAL_LIKE, BASE),
    ('qwen_like', QWEN_LIKE, BASE),
    ('qwen_like_think', QWEN_LIKE, dict(BASE, enable_thinking=False, messages=MSGS[:2] + [
        {'role': 'assistant', 'content': '<think>\nhmm\n</think>\n\nanswer'}, MSGS[1]])),
    ('qwen_like_no_tools', QWEN_LIKE, dict(BASE, tools=None)),
    # ---- whitespace control, trim_blocks / lstrip_blocks ----
    ('ws_trim_blocks', '{% if true %}\nA\n{% endif %}\nB\n', {}),
    ('ws_lstrip_blocks', '  {% if true %}\n  A\n  {% endif %}\n', {}),
    ('ws_lstrip_not_var', '  {{ "v" }}\n  x', {}),
    ('ws_minus', 'a  \n  {%- if true -%}  \n  b  {%- endif %}  c', {}),
    ('ws_plus', '  {%+ if true +%}\nA\n  {%+ endif %}\n', {}),
    ('ws_var_minus', 'x   {{- "y" -}}   \n z', {}),
    ('ws_comment', 'a\n  {# comment #}\nb {#- c -#}   c\n{#+ k +#}\nd', {}),
    ('ws_comment_multiline', 'a{# line1\nline2 #}b', {}),
    ('ws_trailing_newline', 'text\n', {}),
    ('ws_two_trailing_newlines', 'text\n\n', {}),
    ('ws_crlf', 'a\r\nb\r\n{% if true %}\r\nc\r\n{% endif %}\r\n', {}),
    ('ws_cr_only', 'a\rb', {}),
    ('ws_mid_line_block', 'x {% if true %}y{% endif %} z\n', {}),
    ('ws_tabs', '\t{% for i in l %}\n\t{{ i }}\n\t{% endfor %}\n', C),
    ('ws_raw', '{% raw %}{{ not rendered }}{% endraw %}', {}),
    ('ws_raw_strip', 'a {%- raw -%}  {{ x }}  {%- endraw -%} b', {}),
    ('ws_dict_literal_in_var', '{{ {"a": {"b": 1}} }}', {}),
    # ---- literals and expressions ----
    ('lit_numbers', '{{ 1 }} {{ -2 }} {{ 1.5 }} {{ 1e3 }} {{ 2.5e-3 }} {{ 1_000 }} {{ 10 / 4 }} {{ 10 // 4 }} {{ -7 // 2 }} {{ -7 % 3 }} {{ 2 ** 10 }} {{ 2 ** -1 }}', {}),
    ('lit_floats_repr', '{{ 0.1 + 0.2 }} {{ 1e16 }} {{ 1e20 }} {{ 1.0 }} {{ 123456789.0 * 1000 }} {{ 1 / 3 }} {{ 0.0001 }} {{ 0.00001 }}', {}),
    ('lit_strings', """{{ 'single' }} {{ "double" }} {{ 'a' 'b' }} {{ 'esc\\n\\t\\\\ \\'q\\' \\x41 \\u00e9' }} {{ "\\"" }}""", {}),
    ('lit_collections', "{{ [1, 'a', none, true, 1.5] }} {{ (1,) }} {{ () }} {{ {'k': [1, {'x': none}]} }} {{ [] }} {{ {} }}", {}),
    ('lit_repr_quotes', """{{ ["it's", 'say "hi"', 'both \\' "', 'tab\\t', 'nl\\n', 'uni é 日本'] }}""", {}),
    ('lit_bool_none', '{{ true }} {{ True }} {{ false }} {{ none }} {{ None }}', {}),
    ('expr_concat', "{{ 'a' ~ 1 ~ none ~ undefined_var ~ [1] ~ true }}", {}),
    ('expr_precedence', "{{ 1 + 2 * 3 }} {{ (1 + 2) * 3 }} {{ 2 ** 3 ** 2 }} {{ -2 ** 2 }} {{ not true or true }} {{ 1 + 2 ~ 3 }}", {}),
    ('expr_compare_chain', '{{ 1 < 2 < 3 }} {{ 3 > 2 > 2 }} {{ 1 == 1.0 }} {{ true == 1 }} {{ "a" < "b" }} {{ [1, 2] < [1, 3] }}', {}),
    ('expr_in', "{{ 'a' in 'cat' }} {{ 2 in [1, 2] }} {{ 'k' in {'k': 1} }} {{ 'z' not in 'abc' }} {{ 3 not in l }} {{ 'x' in undefined_var }}", C),
    ('expr_and_or_values', "{{ 0 or 'x' }} {{ '' and 'y' }} {{ 'a' and 'b' }} {{ none or [] }} {{ n and l }}", C),
    ('expr_condexpr', "{{ 'y' if b else 'n' }} {{ 'y' if z else 'n' }} [{{ 'only' if z }}] {{ 1 if false else 2 if false else 3 }}", C),
    ('expr_is_not', "{{ z is not none }} {{ n is not string }} {{ not z is none }}", C),
    ('expr_subscripts', "{{ l[0] }} {{ l[-1] }} {{ d['a'] }} {{ d.b }} {{ s[0] }} {{ s[-1] }} {{ people[1].name }} {{ people[1]['age'] }} [{{ l[10] }}] [{{ d.nope }}]", C),
    ('expr_slices', "{{ l[1:] }} {{ l[:2] }} {{ l[::-1] }} {{ l[::2] }} {{ s[::-1] }} {{ s[2:8:2] }} {{ l[-2:] }} {{ l[5:] }} {{ s[:-3] }} {{ words[3:0:-1] }} {{ s[-1:-6:-2] }}", C),
    ('expr_dot_int', '{{ l.0 }} {{ words.1 }}', C),
    ('expr_arith_mixed', '{{ n + f }} {{ n * 2.0 }} {{ 7 % 2.5 }} {{ -7.5 // 2 }} {{ true + true }} {{ "ab" * 3 }} {{ 2 * "x" }} {{ [1] * 3 }} {{ l + [9] }} {{ (1, 2) + (3,) }}', C),
    ('expr_unary', '{{ -n }} {{ +n }} {{ -f }} {{ - -n }}', C),
    ('expr_string_modulo', "{{ '%s and %s' % ('a', 1) }} {{ '%d%%' % 50 }} {{ '%(x)s' % {'x': 'named'} }} {{ '%5.2f|%-4d|%03d' % (3.14159, 7, 5) }} {{ '%r' % 'q' }}", {}),
    # ---- statements ----
    ('if_elif_else', '{% for v in [0, 1, 2, 3] %}{% if v == 0 %}zero{% elif v == 1 %}one{% elif v == 2 %}two{% else %}many{% endif %} {% endfor %}', {}),
    ('for_loop_vars', '{% for x in words %}{{ loop.index }}/{{ loop.index0 }}/{{ loop.revindex }}/{{ loop.revindex0 }}/{{ loop.first }}/{{ loop.last }}/{{ loop.length }}/{{ loop.previtem }}/{{ loop.nextitem }}/{{ loop.depth }}/{{ loop.cycle("odd", "even") }};{% endfor %}', C),
    ('for_if_filter', '{% for x in l if x > 1 %}{{ x }}:{{ loop.index }}/{{ loop.length }} {% endfor %}', C),
    ('for_else', '{% for x in e %}{{ x }}{% else %}empty{% endfor %} {% for x in l if x > 5 %}{{ x }}{% else %}none-kept{% endfor %}', C),
    ('for_dict', '{% for k in d %}{{ k }}={{ d[k] }} {% endfor %}{% for k, v in d.items() %}{{ k }}:{{ v }} {% endfor %}', C),
    ('for_tuple_unpack', '{% for a, b in [(1, 2), [3, 4], "xy"] %}{{ a }}-{{ b }} {% endfor %}{% for (k, v) in d | dictsort %}{{ k }}{{ v }}{% endfor %}', C),
    ('for_string', '{% for ch in "héllo" %}[{{ ch }}]{% endfor %}', {}),
    ('for_undefined', '{% for x in nothing %}{{ x }}{% else %}no-items{% endfor %}', {}),
    ('for_nested_loop', '{% for a in [1, 2] %}{% for b in "xy" %}{{ loop.index }}{{ b }}{{ a }} {% endfor %}|{{ loop.index }} {% endfor %}', {}),
    ('for_break_continue', '{% for x in range(10) %}{% if x == 2 %}{% continue %}{% endif %}{% if x == 5 %}{% break %}{% endif %}{{ x }}{% endfor %}', {}),
    ('for_scope', '{% set x = 1 %}{% for i in [1, 2] %}{{ x }}{% set x = x + 10 %}{{ x }} {% endfor %}after={{ x }}', {}),
    ('for_loop_var_after', '{% for i in [1, 2] %}{% endfor %}[{{ i }}]', {}),
    ('for_over_none_errors', '{% for x in z %}{% endfor %}', C),
    ('set_tuple', '{% set a, b = 1, 2 %}{{ a }}{{ b }}{% set c = 1, 2 %}{{ c }}', {}),
    ('set_namespace', '{% set ns = namespace(count=0, found=false) %}{% for x in l %}{% set ns.count = ns.count + x %}{% if x == 2 %}{% set ns.found = true %}{% endif %}{% endfor %}{{ ns.count }} {{ ns.found }} {{ ns }}', C),
    ('set_namespace_dict_arg', "{% set ns = namespace({'a': 1}, b=2) %}{{ ns.a }}{{ ns.b }}{{ ns['a'] }}", {}),
    ('set_block', '{% set captured %}  Hello {{ s }}  {% endset %}[{{ captured }}]', C),
    ('set_block_filter', '{% set captured | trim | upper %}  Hello {{ s }}  {% endset %}[{{ captured }}]', C),
    ('set_in_if_leaks', '{% if true %}{% set y = 5 %}{% endif %}{{ y }}', {}),
    ('set_attr_non_namespace_errors', '{% set d.x = 1 %}', C),
    ('macro_basic', '{% macro greet(name, greeting="Hi") %}{{ greeting }}, {{ name }}!{% endmacro %}{{ greet("Ann") }} {{ greet("Bob", "Yo") }} {{ greet(greeting="Hey", name="Cy") }} [{{ greet() }}]', {}),
    ('macro_recursive', '{% macro tree(v) %}{% if v is mapping %}{{ "{" }}{% for k, x in v | dictsort %}{{ k }}:{{ tree(x) }}{% if not loop.last %},{% endif %}{% endfor %}{{ "}" }}{% elif v is sequence and v is not string %}[{% for x in v %}{{ tree(x) }}{% if not loop.last %},{% endif %}{% endfor %}]{% else %}{{ v }}{% endif %}{% endmacro %}{{ tree({"b": [1, {"c": none}], "a": "s"}) }}', {}),
    ('macro_varargs_kwargs', '{% macro m(a) %}{{ a }}|{{ varargs }}|{{ kwargs }}{% endmacro %}{{ m(1, 2, 3, x=4) }}', {}),
    ('macro_too_many_args', '{% macro m(a) %}{{ a }}{% endmacro %}{{ m(1, 2) }}', {}),
    ('macro_sees_globals', '{% set g = "global" %}{% macro m() %}{{ g }}/{{ n }}{% endmacro %}{{ m() }}', C),
    ('macro_default_uses_param', '{% macro m(a, b=a * 2) %}{{ a }},{{ b }}{% endmacro %}{{ m(3) }}', {}),
    ('macro_whitespace', '{%- macro fmt(x) -%}\n  <{{ x }}>\n{%- endmacro -%}\n{{ fmt(1) }}{{ fmt(2) | trim }}', {}),
    ('call_block', '{% macro box(title) %}[{{ title }}: {{ caller() }}]{% endmacro %}{% call box("T") %}body {{ n }}{% endcall %}', C),
    ('call_block_args', '{% macro each(items) %}{% for i in items %}{{ caller(i) }}{% endfor %}{% endmacro %}{% call(item) each(l) %}<{{ item }}>{% endcall %}', C),
    ('filter_block', '{% filter upper %}shout {{ s }}{% endfilter %}', C),
    ('with_block', '{% with a = 1, b = "two" %}{{ a }}{{ b }}{% endwith %}[{{ a }}]', {}),
    ('generation_tag', 'a{% generation %}gen {{ n }}{% endgeneration %}b', C),
    # ---- filters ----
    ('f_trim', "[{{ '  x y  ' | trim }}] [{{ 'xxhixx' | trim('x') }}] [{{ none | trim }}]", {}),
    ('f_case', "{{ 'hello wORLD-foo(bar) [x] <y> {z}' | title }} {{ 'hELLO world' | capitalize }} {{ 'ß straße' | upper }} {{ 'ÀÉ' | lower }} {{ 'it\\'s a test' | title }}", {}),
    ('f_length', '{{ l | length }} {{ s | length }} {{ d | count }} {{ "日本語" | length }} {{ nothing | length }}', C),
    ('f_default', "{{ nothing | default('d') }} {{ z | default('d') }} {{ '' | default('d', true) }} {{ 0 | d('zero', boolean=true) }} {{ n | default(5) }} [{{ nothing | default }}]", C),
    ('f_join', "{{ l | join(', ') }} {{ words | join }} {{ people | join('/', attribute='name') }} {{ d | join('+') }} {{ [1, none, true] | join('-') }}", C),
    ('f_replace', "{{ s | replace('o', '0') }} {{ s | replace('l', 'L', 2) }} {{ 'aaa' | replace('', '-') }}", C),
    ('f_first_last', '{{ l | first }} {{ l | last }} {{ s | first }} {{ s | last }} {{ d | first }} [{{ e | first }}] {{ d | last }}', C),
    ('f_list_string', '{{ s | list }} {{ d | list }} {{ 5 | string }} {{ l | string }} {{ (1, 2) | list }}', C),
    ('f_int_float', "{{ '42' | int }} {{ '3.9' | int }} {{ 'x' | int }} {{ 'x' | int(7) }} {{ 3.99 | int }} {{ '0x1A' | int(base=16) }} {{ ' 12 ' | int }} {{ '1_000' | int }} {{ true | int }} {{ '2.5' | float }} {{ 'nope' | float }} {{ 3 | float }} {{ '1e3' | float }}", {}),
    ('f_abs_round', '{{ -3 | abs }} {{ -2.5 | abs }} {{ 2.5 | round }} {{ 3.5 | round }} {{ 2.675 | round(2) }} {{ 2.1 | round(0, "ceil") }} {{ 2.9 | round(method="floor") }} {{ 7 | round }} {{ 1234.5678 | round(-2) }}', {}),
    ('f_unique_sort', "{{ words | unique | list }} {{ words | unique(case_sensitive=true) | list }} {{ words | sort }} {{ words | sort(case_sensitive=true) }} {{ words | sort(reverse=true) }} {{ people | sort(attribute='age') | map(attribute='name') | list }} {{ people | sort(attribute='age,name') | map(attribute='name') | list }}", C),
    ('f_dictsort', "{{ d | dictsort }} {{ d | dictsort(true) }} {{ d | dictsort(by='value') }} {{ d | dictsort(reverse=true) }}", C),
    ('f_items', '{{ d | items | list }} {% for k, v in d | items %}{{ k }}{{ v }}{% endfor %}', C),
    ('f_map', "{{ words | map('upper') | list }} {{ people | map(attribute='city') | list }} {{ people | map(attribute='city', default='?') | list }} {{ l | map('string') | join }} {{ words | map('replace', 'a', 'A') | list }}", C),
    ('f_select_reject', "{{ [1, 2, 3, 4, 5] | select('odd') | list }} {{ [1, 2, 3, 4] | reject('even') | list }} {{ [0, 1, '', 'a', none] | select | list }} {{ [1, 5, 9] | select('gt', 3) | list }} {{ ['a', 1, none] | reject('string') | list }} {{ [1, 2, 3] | select('in', [2, 3]) | list }}", {}),
    ('f_selectattr', "{{ people | selectattr('city') | map(attribute='name') | list }} {{ people | rejectattr('city') | map(attribute='name') | list }} {{ people | selectattr('age', 'equalto', 31) | map(attribute='name') | join(',') }} {{ messages | selectattr('role', 'eq', 'user') | list | length }}", dict(C, messages=MSGS)),
    ('f_tojson', "{{ messages[2] | tojson }}\n{{ d | tojson(indent=2) }}\n{{ d | tojson(sort_keys=true) }}\n{{ 'é\"\\n<>&' | tojson }}\n{{ 'é' | tojson(ensure_ascii=true) }}\n{{ [1, [2, []], {}] | tojson(indent=1) }}\n{{ {'a': [1, 2]} | tojson(separators=[',', ':']) }}\n{{ (1, 'x') | tojson }}\n{{ none | tojson }} {{ true | tojson }} {{ 1.5 | tojson }} {{ 1e16 | tojson }}\n{{ d | tojson(indent='\\t') }}", dict(C, messages=MSGS)),
    ('f_tojson_undefined_errors', '{{ nothing | tojson }}', {}),
    ('f_indent', "{{ 'a\\nb\\n\\nc' | indent }}|{{ 'a\\nb' | indent(2, true) }}|{{ 'a\\n\\nb' | indent(2, blank=true) }}|{{ 'x\\ny' | indent('> ') }}", {}),
    ('f_wordcount_center', "{{ 'one two  three-four' | wordcount }} [{{ 'mid' | center(9) }}] [{{ 'mid' | center(8) }}]", {}),
    ('f_sum_min_max', "{{ l | sum }} {{ people | sum(attribute='age') }} {{ l | sum(start=10) }} {{ l | max }} {{ l | min }} {{ words | max }} {{ words | min }} {{ words | max(case_sensitive=true) }} {{ people | max(attribute='age') }}", C),
    ('f_batch', '{{ [1, 2, 3, 4, 5] | batch(2) | list }} {{ [1, 2, 3] | batch(2, "x") | list }}', {}),
    ('f_reverse', '{{ s | reverse }} {{ l | reverse | list }} {{ "" | reverse }}', C),
    ('f_format', "{{ '%s-%s' | format('a', 'b') }} {{ '%(k)s' | format(k='v') }} {{ '%.3f' | format(2) }}", {}),
    ('f_escape_safe', "{{ '<a href=\"x\">&\\'</a>' | e }} {{ '<b>' | escape }} {{ '<i>' | safe }} {{ 5 | e }}", {}),
    ('f_attr', "{{ d | attr('a') }} [{{ d | attr('zz') }}]", C),
    ('f_chained', "{{ messages | map(attribute='role') | unique | join(',') | upper }}", dict(C, messages=MSGS)),
    ('f_string_of_undefined', '[{{ nothing | string }}] [{{ nothing | upper }}]', {}),
    # ---- tests ----
    ('tests_types', "{% for v in [1, 1.5, 'a', none, true, [1], {'a': 1}, (1,)] %}{{ v is number }}{{ v is integer }}{{ v is float }}{{ v is string }}{{ v is none }}{{ v is boolean }}{{ v is mapping }}{{ v is sequence }}{{ v is iterable }}{{ v is true }}{{ v is false }}{{ v is callable }};{% endfor %}", {}),
    ('tests_defined', '{{ n is defined }} {{ nothing is defined }} {{ nothing is undefined }} {{ d.a is defined }} {{ d.zz is defined }} {{ nothing is sequence }} {{ nothing is iterable }} {{ nothing is callable }}', C),
    ('tests_compare', "{{ 3 is odd }} {{ 4 is even }} {{ 9 is divisibleby 3 }} {{ 3 is eq 3 }} {{ 3 is equalto 4 }} {{ 'a' is ne 'b' }} {{ 5 is gt 3 }} {{ 5 is lt 3 }} {{ 3 is ge 3 }} {{ 2 is le 1 }} {{ 2 is in [1, 2] }} {{ 'x' is in 'xyz' }} {{ 2 is greaterthan 1 }} {{ 1 is lessthan 2 }} {{ 3 is == 3 }} {{ 2.0 is odd }}", {}),
    ('tests_case', "{{ 'abc' is lower }} {{ 'aBc' is lower }} {{ 'ABC' is upper }} {{ '12' is upper }} {{ 'upper' is filter }} {{ 'nofilter' is filter }} {{ 'odd' is test }} {{ none is sameas none }} {{ true is sameas true }}", {}),
    ('tests_macro_callable', '{% macro m() %}{% endmacro %}{{ m is callable }} {{ range is callable }} {{ "s".upper is callable }}', {}),
    # ---- methods ----
    ('m_string', "{{ s.upper() }} {{ s.lower() }} {{ '  x  '.strip() }}|{{ 'xxaxx'.strip('x') }}|{{ '  x'.lstrip() }}|{{ 'x  '.rstrip() }}|{{ s.startswith('Hell') }} {{ s.endswith('x') }} {{ s.startswith(('a', 'H')) }} {{ s.split() }} {{ 'a,b,,c'.split(',') }} {{ 'a b c'.split(' ', 1) }} {{ 'a b c'.rsplit(' ', 1) }} {{ '  a  b '.split() }} {{ s.replace('o', '') }} {{ 'the cat'.title() }} {{ 'hELLO'.capitalize() }} {{ s.find('o') }} {{ s.rfind('o') }} {{ s.find('z') }} {{ s.count('l') }} {{ '-'.join(['a', 'b']) }} {{ 'x\\ny\\r\\nz'.splitlines() }} {{ '7'.zfill(3) }} {{ '-7'.zfill(4) }} {{ s.partition(' ') }} {{ s.rpartition('o') }} {{ 'abc'.isalpha() }} {{ '123'.isdigit() }} {{ 'a1'.isalnum() }} {{ '  '.isspace() }} {{ 'prefix-x'.removeprefix('prefix-') }} {{ 'x.txt'.removesuffix('.txt') }} {{ 'aBc'.swapcase() }} {{ 'ab'.ljust(4) }}| {{ 'ab'.rjust(4, '*') }} {{ 'ab'.center(6, '.') }}", C),
    ('m_format', "{{ '{} and {}'.format('a', 1) }} {{ '{1}{0}'.format('x', 'y') }} {{ '{name}!'.format(name='hi') }} {{ '{{literal}} {}'.format(2) }} {{ '{!r}'.format('q') }}", {}),
    ('m_dict', "{{ d.items() | list }} {{ d.keys() | list }} {{ d.values() | list }} {{ d.get('a') }} {{ d.get('zz') }} {{ d.get('zz', 'dflt') }} {{ d.copy() }} {% for k, v in d.items() %}{{ k }}{% endfor %}", C),
    ('m_list', '{{ l.index(2) }} {{ l.count(3) }} {{ [1, 1, 2].count(1) }} {{ l.copy() }}', C),
    ('m_dict_attr_vs_item', "{{ {'items': 'I'}['items'] }} {{ {'get': 1}.get('get') }} {{ {'keys': 5}.keys() | list }}", {}),
    ('m_list_append_refused', '{% set x = l.append(4) %}', C),
    ('m_dict_update_refused', '{{ d.update({"a": 2}) }}', C),
    ('m_unsafe_attr_undefined', '[{{ l.append }}]', C),
    # ---- globals ----
    ('g_range', '{{ range(3) | list }} {{ range(1, 4) | list }} {{ range(10, 0, -3) | list }} {% for i in range(2) %}{{ i }}{% endfor %}', {}),
    ('g_dict', "{{ dict(a=1, b='x') }} {{ dict({'k': 2}) }}", {}),
    ('g_raise', "{{ raise_exception('custom failure: ' ~ n) }}", C),
    ('g_special_tokens', '{{ bos_token }}x{{ eos_token }}{% if add_generation_prompt %}gen{% endif %}', BASE),
    # ---- undefined semantics ----
    ('u_print_empty', '[{{ nothing }}] [{{ d.nothing }}] [{{ l[99] }}] [{{ nothing is defined }}]', C),
    ('u_attr_of_undefined', '{{ nothing.attr }}', {}),
    ('u_item_of_undefined', '{{ nothing["k"] }}', {}),
    ('u_attr_of_missing_key', '{{ d.missing.deeper }}', C),
    ('u_add', '{{ nothing + 1 }}', {}),
    ('u_compare', '{{ nothing < 1 }}', {}),
    ('u_equal', '{{ nothing == nothing2 }} {{ nothing == none }} {{ nothing != 1 }}', {}),
    ('u_falsy', '{% if nothing %}yes{% else %}no{% endif %} {{ not nothing }} {{ nothing or "fallback" }}', {}),
    ('u_call', '{{ nothing() }}', {}),
    ('u_none_attr', '[{{ z.attr }}] {{ z is none }}', C),
    ('u_int_of_undefined', '{{ nothing | int }}', {}),
    ('u_indent_of_undefined', '{{ nothing | indent }}', {}),
    # ---- runtime errors ----
    ('err_type_add', "{{ 'a' + 1 }}", {}),
    ('err_div_zero', '{{ 1 / 0 }}', {}),
    ('err_not_iterable', '{% for x in 5 %}{% endfor %}', {}),
    ('err_unpack', '{% for a, b in [[1, 2, 3]] %}{% endfor %}', {}),
    ('err_in_string_int', '{{ 1 in "abc" }}', {}),
    ('err_sort_mixed', "{{ [1, 'a'] | sort }}", {}),
    ('err_dictsort_list', '{{ l | dictsort }}', C),
    ('err_unhashable_key', '{{ {[1]: 2} }}', {}),
    ('err_items_of_list', '{{ l | items | list }}', C),
    ('err_unique_unhashable', '{{ [[1], [1]] | unique | list }}', {}),
    # ---- data from JSON: key order is the request's ----
    ('json_key_order', '{% for k, v in obj.items() %}{{ k }}={{ v }};{% endfor %} {{ obj }} {{ obj | tojson }}', {'obj': {'zeta': 1, 'alpha': 2, 'Mid': [3, {'y': 1, 'x': 2}]}}),
    ('json_unicode', "{{ text }} {{ text | length }} {{ text[1] }} {{ text | upper }} {{ text | tojson }} {{ [text] }}", {'text': 'héllo 日本 \u2028 😀'}),
    ('json_big_numbers', '{{ big }} {{ neg }} {{ fl }} {{ big + 1 }} {{ fl * 2 }}', {'big': 9007199254740993, 'neg': -42, 'fl': 1.5e-7}),
]
