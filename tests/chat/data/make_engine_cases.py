#!/usr/bin/env python3
"""Prints the expectation table of tests/chat/test_jinja_engine.cpp: each template rendered by
Python Jinja2 configured as transformers configures it. Paste the output over the table."""
import json, sys
from datetime import datetime
import jinja2
from jinja2.sandbox import ImmutableSandboxedEnvironment
def make_env():
    def raise_exception(message): raise jinja2.exceptions.TemplateError(message)
    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    return env
env = make_env()
V = {"xs": [3, 1, 2], "d": {"b": 2, "a": 1, "C": 3}, "s": "  Hello World  ", "n": None, "f": 2.5, "i": -7,
     "users": [{"name": "bob", "age": 30, "tags": ["x"]}, {"name": "Al", "age": 25, "tags": []}, {"name": "cy", "age": 30}],
     "msgs": [{"role": "system", "content": "S"}, {"role": "user", "content": "U"}], "u": "héllo wörld", "e": [], "t": True}
cases = [
 # whitespace control
 "a\n  {% if true %}\n  b\n  {% endif %}\n  c",
 "a  {%- if true -%}  b  {%- endif -%}  c",
 "x\n    {%+ if true %}y{% endif %}\nz",
 "{% if true +%}\nkeep{% endif %}",
 "a {# comment #} b\n{# line comment #}\nc",
 "{%- raw %}{{ not rendered }}{% endraw %}|{% raw -%}  x  {%- endraw %}",
 "{{ 'a' }}\n{{ 'b' }}\n",
 "  {{- 'x' -}}  \n  y",
 # control flow
 "{% for x in xs %}{{ loop.index }}{{ loop.index0 }}{{ loop.first }}{{ loop.last }}{{ loop.length }}{{ loop.revindex }}{{ loop.revindex0 }}|{% endfor %}",
 "{% for x in xs %}{{ loop.previtem }}-{{ x }}-{{ loop.nextitem }},{% endfor %}",
 "{% for x in xs %}{{ loop.cycle('a', 'b') }}{% endfor %}",
 "{% for x in e %}no{% else %}empty{% endfor %}",
 "{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}",
 "{% for k in d %}{{ k }}{% endfor %}",
 "{% for x in xs if x > 1 %}{{ x }}{{ loop.index }}{{ loop.length }}{% endfor %}",
 "{% for x in xs|sort %}{{ x }}{% endfor %}",
 "{% for x in range(10) %}{% if x == 2 %}{% continue %}{% endif %}{% if x == 5 %}{% break %}{% endif %}{{ x }}{% endfor %}",
 "{% for a in [1,2] %}{% for b in 'xy' %}{{ a }}{{ b }}{{ loop.index }}{% endfor %}{% endfor %}",
 "{% for c in 'héllo' %}[{{ c }}]{% endfor %}",
 "{% if n %}a{% elif f > 2 %}b{% else %}c{% endif %}",
 # set and scoping
 "{% set x = 1 %}{% for i in xs %}{% set x = x + i %}{{ x }}{% endfor %}|{{ x }}",
 "{% set ns = namespace(total=0) %}{% for i in xs %}{% set ns.total = ns.total + i %}{% endfor %}{{ ns.total }}",
 "{% set a, b = 1, 2 %}{{ a }}{{ b }}{% set (c, d2) = [3, 4] %}{{ c }}{{ d2 }}",
 "{% set block %}Hello {{ 'there' }}!{% endset %}[{{ block }}]",
 "{% set ns = namespace(a=1, b='x') %}{{ ns.a }}{{ ns.b }}{{ ns.missing }}|",
 "{% macro m(a, b=2, c='z') %}{{ a }}{{ b }}{{ c }}{{ varargs }}{{ kwargs }}{% endmacro %}{{ m(1) }}|{{ m(1, 3) }}|{{ m(1, c='q') }}|{{ m(1, 2, 3, 4, k=5) }}",
 "{% macro outer() %}[{{ caller() }}]{% endmacro %}{% call outer() %}inside{% endcall %}",
 "{% macro lst(items) %}{% for i in items %}{{ caller(i) }}{% endfor %}{% endmacro %}{% call(x) lst([1,2]) %}<{{ x }}>{% endcall %}",
 "{% filter upper %}shout {{ 'this' }}{% endfilter %}",
 "{% macro f() %}{{ z }}{% endmacro %}{% set z = 1 %}{% for i in [1] %}{% set z = 2 %}{{ f() }}{{ z }}{% endfor %}",
 "{% macro rec(n) %}{% if n > 0 %}{{ n }}{{ rec(n - 1) }}{% endif %}{% endmacro %}{{ rec(4) }}",
 # expressions
 "{{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} {{ -7 % 3 }} {{ 7.5 % 2 }} {{ 2 ** 10 }} {{ 2 ** -1 }} {{ 7 / 2 }} {{ 4 / 2 }} {{ 1 + 2 * 3 }} {{ (1 + 2) * 3 }}",
 "{{ 1 ~ 'a' ~ none ~ true ~ 2.0 }}",
 "{{ 1 < 2 < 3 }} {{ 3 > 2 > 2 }} {{ 1 == 1.0 }} {{ 'a' != 'b' }} {{ 2 >= 2 }} {{ [1, 2] == [1, 2] }} {{ {'a': 1} == {'a': 1} }}",
 "{{ true and 'x' }} {{ false or '' or 'z' }} {{ not none }} {{ 0 and 1 }} {{ [] or 'empty' }}",
 "{{ 1 in xs }} {{ 5 not in xs }} {{ 'ell' in 'hello' }} {{ 'a' in d }} {{ 'zz' in d }}",
 "{{ n is none }} {{ n is not none }} {{ missing is defined }} {{ missing is undefined }} {{ xs is iterable }} {{ d is mapping }} {{ 's' is string }}",
 "{{ 1 is number }} {{ 1.5 is float }} {{ 1 is integer }} {{ true is boolean }} {{ true is number }} {{ 3 is odd }} {{ 4 is even }} {{ 9 is divisibleby 3 }} {{ 9 is divisibleby(4) }}",
 "{{ 1 is eq 1 }} {{ 1 is equalto 2 }} {{ 2 is gt 1 }} {{ 2 is ge 3 }} {{ 'a' is in 'abc' }} {{ n is sameas none }} {{ t is true }} {{ t is false }} {{ 'abc' is lower }} {{ 'ABC' is upper }}",
 "{{ xs is sequence }} {{ 'x' is sequence }} {{ range is callable }} {{ 1 is callable }}",
 "{{ 'yes' if f > 2 else 'no' }} {{ 'yes' if n }}|{{ 'a' if false else 'b' if true else 'c' }}",
 "{{ xs[0] }} {{ xs[-1] }} {{ xs[1:] }} {{ xs[:-1] }} {{ xs[::-1] }} {{ xs[::2] }} {{ 'abcdef'[1:4] }} {{ 'abc'[::-1] }} {{ u[1:3] }} {{ xs[10] }}|",
 "{{ d.a }} {{ d['b'] }} {{ users[0].name }} {{ users.0.name }} {{ d.missing }}|{{ msgs[1]['content'] }}",
 "{{ [1, 'a', none, true, 1.5, [2]] }} {{ {'k': 'v', 'n': none} }} {{ (1, 2) }} {{ (1,) }} {{ () }}",
 "{{ none }} {{ true }} {{ false }} {{ 1.0 }} {{ 0.1 + 0.2 }} {{ 1e20 }} {{ 1e-7 }} {{ 123456789.0 }} {{ -0.5 }} {{ 3 }}",
 "{{ 'it''s' }} {{ \"dq\" 'sq' }} {{ 'a\\nb' }} {{ 'tab\\there' }} {{ '\\u00e9\\x41' }}",
 "{{ {'a': {'b': [1, {'c': 2}]}}['a']['b'][1]['c'] }} {{ {'a': 1}|length }}",
 "{{ -i }} {{ +i }} {{ -f }} {{ i|abs }} {{ -3|abs }}",
 # string methods
 "{{ s.strip() }}|{{ s.lstrip() }}|{{ s.rstrip() }}|{{ 'xxaxx'.strip('x') }}|{{ s.upper() }}|{{ s.lower() }}|{{ 'hello world'.title() }}|{{ 'hELLO'.capitalize() }}",
 "{{ 'a,b,,c'.split(',') }} {{ ' a  b '.split() }} {{ 'a b c'.split(' ', 1) }} {{ 'a-b-c'.rsplit('-', 1) }} {{ 'x\\ny'.splitlines() }}",
 "{{ 'hello'.startswith('he') }} {{ 'hello'.endswith(('x', 'lo')) }} {{ 'aaa'.replace('a', 'b', 2) }} {{ 'hello'.find('l') }} {{ 'hello'.count('l') }} {{ '-'.join(['a', 'b']) }}",
 "{{ '{} and {}'.format(1, 'x') }} {{ '{0}{0}{name}'.format('a', name='n') }} {{ '{:>5}|{:.2f}'.format('r', 3.14159) }} {{ '%s=%d' % ('a', 3) }} {{ '%.3f' % 2.5 }}",
 "{{ 'abc'.upper().lower() }} {{ u.upper() }} {{ u.title() }} {{ 'ÀÉ Ωμ Жд'.lower() }}",
 # dict / list methods
 "{{ d.get('a') }} {{ d.get('zz') }} {{ d.get('zz', 'dflt') }} {{ d.keys()|list }} {{ d.values()|list }} {{ d.items()|list }}",
 # filters
 "{{ xs|length }} {{ 'héllo'|length }} {{ d|length }} {{ xs|count }} {{ xs|first }} {{ xs|last }} {{ 'abc'|first }} {{ xs|sum }} {{ xs|min }} {{ xs|max }} {{ e|first }}|",
 "{{ xs|sort }} {{ xs|sort(reverse=true) }} {{ ['b', 'A', 'c']|sort }} {{ ['b', 'A', 'c']|sort(case_sensitive=true) }} {{ users|sort(attribute='age')|map(attribute='name')|list }}",
 "{{ d|dictsort }} {{ d|dictsort(case_sensitive=true) }} {{ d|dictsort(by='value', reverse=true) }} {{ d|items|list }}",
 "{{ users|selectattr('age', 'equalto', 30)|map(attribute='name')|join(',') }} {{ users|rejectattr('tags')|map(attribute='name')|list }} {{ users|selectattr('tags')|list|length }}",
 "{{ xs|select('odd')|list }} {{ xs|reject('odd')|list }} {{ [0, 1, '', 'a']|select|list }} {{ ['a', 'b']|map('upper')|list }} {{ users|map(attribute='zip', default='-')|list }}",
 "{{ [1, 2, 1, 'a', 'A']|unique|list }} {{ [3, 1]|reverse|list }} {{ 'abc'|reverse }} {{ xs|list }} {{ 'ab'|list }} {{ xs|join }} {{ users|join(', ', attribute='name') }}",
 "{{ s|trim }}|{{ 'xxhixx'|trim('x') }}|{{ s|upper }}|{{ s|lower }}|{{ 'hello world-foo (bar'|title }}|{{ 'hELLO wORLD'|capitalize }}|{{ 'a b  c'|wordcount }}",
 "{{ 'aaa'|replace('a', 'b') }} {{ 'aaa'|replace('a', 'b', 1) }} {{ n|default('d') }} {{ missing|default('d') }} {{ ''|default('d', true) }} {{ missing|d('x') }}",
 "{{ '42'|int }} {{ '4.7'|int }} {{ 'x'|int }} {{ 'x'|int(-1) }} {{ 3.9|int }} {{ '2.5'|float }} {{ 'x'|float }} {{ 3|float }} {{ 2.5|round }} {{ 3.5|round }} {{ 2.567|round(2) }} {{ 2.1|round(method='ceil') }}",
 "{{ 1|string }} {{ none|string }} {{ [1]|string }} {{ '<a&b>'|escape }} {{ '<x>'|safe }} {{ '<x>'|e }}",
 "{{ 'a\\nb\\n\\nc'|indent }}|{{ 'a\\nb'|indent(2, true) }}|{{ 'a\\n\\nb'|indent(2, blank=true) }}|{{ 'ab'|center(6) }}|",
 "{{ xs|batch(2)|list }} {{ xs|batch(2, 0)|list }} {{ users|sum(attribute='age') }} {{ d|attr('keys') is callable }}",
 "{{ '%s-%s'|format('a', 1) }} {{ 'a long sentence here'|truncate(9) }} {{ 'a long sentence here'|truncate(9, true) }}",
 # tojson
 "{{ d|tojson }} {{ 'é\"\\n'|tojson }} {{ 'é'|tojson(ensure_ascii=true) }} {{ '🎉'|tojson(ensure_ascii=true) }} {{ [1.5, none, true]|tojson }}",
 "{{ d|tojson(indent=2) }}|{{ d|tojson(sort_keys=true) }}|{{ d|tojson(separators=(',', ':')) }}|{{ {'x': [], 'y': {}}|tojson(indent=2) }}|{{ d|tojson(indent='\\t') }}",
 "{{ users[0]|tojson(indent=1, sort_keys=true, separators=(',', ' = ')) }}",
 # undefined
 "[{{ missing }}][{{ missing|length }}][{{ missing|string }}][{{ missing ~ 'x' }}][{% for x in missing %}x{% endfor %}][{{ missing is defined }}][{{ 'a' in missing }}]",
 "{{ none.attr }}|{{ xs.nope }}|{{ d.nope is defined }}",
]
error_cases = [
 "{{ missing.attr }}", "{{ 'a' + 1 }}", "{{ 1 / 0 }}", "{{ raise_exception('boom') }}", "{{ none|length }}", "{% for x in 5 %}{% endfor %}",
 "{% set x = 1 %}{% set x.y = 2 %}", "{{ 'a' < 1 }}",
]
def cpp(s):
    return 'R"K3(' + s + ')K3"'
out = []
for c in cases:
    try:
        r = env.from_string(c).render(**V)
    except Exception as e:
        print("UNEXPECTED", c, e, file=sys.stderr); continue
    out.append('    {%s,\n     %s},' % (cpp(c), cpp(r)))
print("const Case kCases[] = {\n" + "\n".join(out) + "\n};")
for c in error_cases:
    try:
        env.from_string(c).render(**V); print("NOERR", c, file=sys.stderr)
    except Exception as e:
        print("//", c, "->", type(e).__name__, e, file=sys.stderr)
print("const char* kVars = " + cpp(json.dumps(V, ensure_ascii=False)) + ";")
