#!/usr/bin/env python3
"""Unit cases for hearth's Jinja interpreter, with jinja2's answers.

Each case is a small template and its variables; jinja2 (configured as in
gen.py, i.e. as transformers configures it) gives the expected output or
raises. Writes tests/fixtures/chat/unit_cases.json, which
tests/chat/test_jinja.c replays.

    python3 tools/chatref/unit_cases.py
"""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gen import FIX, make_env  # noqa: E402

V = {
    "s": "Hello World", "n": None, "t": True, "f": False, "i": 7, "x": 2.5,
    "l": [3, 1, 2], "e": [], "d": {"b": 2, "a": 1, "items": "k"},
    "msgs": [{"role": "system", "content": "sys"}, {"role": "user", "content": "hi"},
             {"role": "assistant", "content": "yo", "tool_calls": [{"name": "f"}]},
             {"role": "user", "content": "bye"}],
    "u": "Grüße 你好 🌍", "ws": "  a b\tc \n",
}

CASES = [
    # ---- output, literals, whitespace control
    "plain text", "{{ s }}", "{{ n }}|{{ t }}|{{ f }}|{{ i }}|{{ x }}",
    "{{ l }}{{ d }}{{ (1,) }}{{ (1, 'a') }}{{ [] }}{{ {} }}", "{{ 'a' 'b' \"c\" }}",
    "{{ '\\n\\t\\x41\\u00e9\\U0001F600\\\\' }}", "{{ 1_000 }} {{ 1e3 }} {{ 0.1 }} {{ 1e16 }} {{ 1e-5 }}",
    "{{ ['it\\'s', \"q\\\"\", '\\n', '\\x00'] }}", "{{ {'k': none, 1: 2.0, true: [1]} }}",
    "a  {%- if t %} b {% endif -%}  c", "a\n  {% if t %}\n  b\n  {% endif %}\nc",
    "x {{- s -}} y", "a\n{# c #}\nb", "a {#- c -#} b", "{%+ if t %}x{% endif +%}\n",
    "  {% if t %}x{% endif %}", "{% raw %}{{ x }}{% endraw %}", "line\r\nbreak\n",
    "{{ s }}\n", "{{ {'a': {'b': 1}} }}",
    # ---- operators
    "{{ 1 + 2 * 3 - 4 / 2 }}", "{{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} {{ -7 % 3 }} {{ 7 % -3 }}",
    "{{ 2 ** 3 ** 2 }}", "{{ 2 ** -1 }}", "{{ 7.5 // 2 }} {{ -7.5 % 2 }}", "{{ 'ab' * 3 }}{{ [1] * 2 }}",
    "{{ 'a' + 'b' }}{{ [1] + [2] }}", "{{ 'a' ~ 1 ~ none ~ u2 }}", "{{ -i }} {{ +x }} {{ - -3 }}",
    "{{ 1 < 2 < 3 }} {{ 3 > 2 > 2 }} {{ 1 == 1.0 }} {{ 'a' != 'b' }} {{ [1,2] < [1,3] }}",
    "{{ 'b' in 'abc' }} {{ 2 in l }} {{ 'a' in d }} {{ 'z' not in d }} {{ 1 in u2 }}",
    "{{ t and 'yes' }} {{ f or 'no' }} {{ none or 0 or '' }} {{ not t }} {{ not f and t }}",
    "{{ 'y' if t else 'n' }} {{ 'y' if f else 'n' }} [{{ 'y' if f }}]", "{{ 1 if f else 2 if f else 3 }}",
    "{{ i > 5 and i < 10 }}", "{{ 1 + 'a' }}", "{{ 'a' + 1 }}", "{{ 1 / 0 }}", "{{ 1 // 0 }}",
    "{{ u2 + 1 }}", "{{ u2 < 1 }}", "{{ 'a' < 1 }}", "{{ 1 in 'a' }}", "{{ 1 in 5 }}", "{{ -'a' }}",
    # ---- lookup and slicing
    "{{ d.a }} {{ d['b'] }} {{ d.items is callable }} {{ d['items'] }} [{{ d.zz }}]", "{{ l[0] }} {{ l[-1] }} [{{ l[5] }}]",
    "{{ l.1 }}", "{{ s[0] }}{{ s[-1] }}{{ u[6] }}", "{{ l[1:] }} {{ l[:-1] }} {{ l[::-1] }} {{ l[::2] }}",
    "{{ s[1:4] }} {{ u[::-1] }} {{ u[2:] }}", "{{ l[5:] }} {{ s[10:2] }}", "{{ n.x }}[{{ n[0] }}]",
    "{{ u2.x }}", "{{ u2[0] }}", "{{ d.zz.yy }}", "{{ l[::0] }}", "{{ msgs[1].role }} {{ msgs[-1]['content'] }}",
    "{{ i.x }}|{{ s.x }}|{{ l.x }}", "{{ d.__class__ }}|{{ s._x }}",
    # ---- statements
    "{% if f %}a{% elif n %}b{% elif i %}c{% else %}d{% endif %}", "{% if e %}a{% else %}b{% endif %}",
    "{% for v in l %}{{ v }}{% endfor %}", "{% for v in e %}x{% else %}empty{% endfor %}",
    "{% for k in d %}{{ k }},{% endfor %}", "{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}",
    "{% for c in 'ab' %}{{ c }}.{% endfor %}", "{% for v in u2 %}x{% endfor %}ok",
    "{% for v in l %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}{{ loop.revindex0 }}{{ loop.first }}{{ loop.last }}{{ loop.length }}|{% endfor %}",
    "{% for v in l %}{{ loop.previtem }}-{{ loop.nextitem }}|{% endfor %}", "{% for v in l %}{{ loop.cycle('a', 'b') }}{% endfor %}",
    "{% for v in l if v > 1 %}{{ v }}{{ loop.length }}{% endfor %}",
    "{% for a in [1,2] %}{% for b in [3,4] %}{{ loop.index }}{{ a }}{{ b }} {% endfor %}{% endfor %}",
    "{% for v in l %}{% if v == 1 %}{% continue %}{% endif %}{% if v == 2 %}{% break %}{% endif %}{{ v }}{% endfor %}",
    "{% for v in l %}{% set x = v %}{% endfor %}{{ x }}", "{% set x = 1 %}{% for v in [1] %}{{ x }}{% set x = 2 %}{{ x }}{% endfor %}{{ x }}",
    "{% for v in [1,2] %}{% if v == 2 %}[{{ y }}]{% endif %}{% set y = v %}{% endfor %}",
    "{% set a, b = 1, 2 %}{{ a }}{{ b }}", "{% set a, b = [1] %}", "{% for a, b in [[1, 2], [3, 4]] %}{{ a + b }}{% endfor %}",
    "{% set ns = namespace(c=0, l=[]) %}{% for v in l %}{% set ns.c = ns.c + v %}{% endfor %}{{ ns.c }} {{ ns }}",
    "{% set ns = namespace(d) %}{{ ns.a }}{{ ns['b'] }}", "{% set s.x = 1 %}", "{% set x %}in {{ i }}{% endset %}[{{ x }}]",
    "{% set x | upper %}abc{% endset %}{{ x }}", "{% filter upper %}a{{ s }}{% endfilter %}", "{% filter trim | upper %}  a  {% endfilter %}",
    "{% macro m(a, b=2, c=a) %}{{ a }}{{ b }}{{ c }}{% endmacro %}{{ m(1) }}|{{ m(1, 3) }}|{{ m(1, c=5) }}|{{ m() }}",
    "{% macro m(a) %}{{ varargs }}{{ kwargs }}{% endmacro %}{{ m(1, 2, 3, k=4) }}", "{% macro m(a) %}{{ a }}{% endmacro %}{{ m(1, 2) }}",
    "{% macro m() %}{% endmacro %}{{ m(k=1) }}", "{% macro m(a) %}{% endmacro %}{{ m(1, a=2) }}",
    "{% macro m(x) %}<{{ caller(x * 2) }}>{% endmacro %}{% call(y) m(3) %}c{{ y }}{% endcall %}",
    "{% macro m() %}<{{ caller() }}>{% endmacro %}{% call m() %}body{% endcall %}",
    "{% macro r(n) %}{% if n > 0 %}{{ n }}{{ r(n - 1) }}{% endif %}{% endmacro %}{{ r(3) }}",
    "{% macro r() %}{{ r() }}{% endmacro %}{{ r() }}", "{% with a = 1, b = i %}{{ a + b }}{% endwith %}{{ a }}",
    "{% generation %}gen{{ i }}{% endgeneration %}", "{% print s %}", "{{ (l|first) }}",
    # ---- scoping
    "{% macro m() %}{{ x }}{% endmacro %}{% set x = 5 %}{{ m() }}",
    "{% set x = 1 %}{% macro m() %}{{ x }}{% endmacro %}{% set x = 2 %}{{ m() }}",
    "{% for i in [1, 2] %}{% macro m() %}<{{ i }}>{% endmacro %}{{ m() }}{% endfor %}",
    "{% set x = 1 %}{% if t %}{% set x = 2 %}{% endif %}{{ x }}",
    "{% set x = 1 %}{% for i in [1] %}{% if t %}{% set x = 3 %}{% endif %}{{ x }}{% endfor %}{{ x }}",
    "{% macro m() %}{{ loop.index }}{% endmacro %}{% for i in [1] %}{{ m() }}{% endfor %}",
    "{% set ns = namespace(v=0) %}{% macro bump() %}{% set ns.v = ns.v + 1 %}{% endmacro %}{{ bump() }}{{ bump() }}{{ ns.v }}",
    "{% macro m(a) %}{% set a = a * 2 %}{{ a }}{% endmacro %}{{ m(2) }}{{ a }}",
    "{% macro outer() %}{% macro inner() %}in{% endmacro %}{{ inner() }}{% endmacro %}{{ outer() }}",
    "{% set x %}{% set y = 1 %}{{ y }}{% endset %}{{ x }}[{{ y }}]",
    "{% with %}{% set z = 1 %}{% endwith %}[{{ z }}]", "{% for a in [1] %}{% for a in [2] %}{{ a }}{% endfor %}{{ a }}{% endfor %}",
    "{% for m in msgs %}{{ loop.index }}{% if loop.first %}F{% endif %}{% for c in m.tool_calls or [] %}{{ loop.index }}{{ c.name }}{% endfor %}{% endfor %}",
    "{% macro m(x) %}{{ caller(x, 'b') }}{% endmacro %}{% call(p, q='d') m('a') %}{{ p }}{{ q }}{% endcall %}",
    # ---- globals
    "{{ range(3)|list }} {{ range(1, 7, 2)|list }} {{ range(3, 0, -1)|list }}", "{{ range(0, 1000000)|length }}", "{{ range(1, 2, 0) }}",
    "{{ dict(a=1, b='x') }}", "{{ namespace(a=1) }}", "{{ raise_exception('boom: ' ~ i) }}", "{{ strftime_now('%Y-%m-%d %H:%M %A %b %-d') }}",
    "{{ 5() }}", "{{ undefined_fn() }}",
    # ---- filters
    "{{ n|default('d') }} {{ u2|default('d') }} {{ u2|d }} {{ ''|default('d', true) }} {{ 0|default(5, boolean=true) }}",
    "{{ s|length }} {{ u|length }} {{ l|count }} {{ d|length }} {{ u2|length }}", "{{ i|length }}",
    "{{ s|upper }} {{ s|lower }} {{ 'hELLO wORLD'|capitalize }} {{ 'hello big-world (x)'|title }}", "{{ u|upper }}",
    "{{ ws|trim }}|{{ 'xxhixx'|trim('x') }}|{{ u2|trim }}", "{{ s|replace('o', '0') }} {{ s|replace('l', 'L', 2) }} {{ 'ab'|replace('', '-') }}",
    "{{ l|join }} {{ l|join(', ') }} {{ msgs|join('/', attribute='role') }}", "{{ l|first }} {{ l|last }} {{ s|first }} [{{ e|first }}]",
    "{{ l|sort }} {{ l|sort(reverse=true) }} {{ ['b', 'A', 'c']|sort }} {{ ['b', 'A', 'c']|sort(case_sensitive=true) }}",
    "{{ msgs|sort(attribute='role')|map(attribute='content')|list }}", "{{ [1, 'a']|sort }}",
    "{{ d|dictsort }} {{ d|dictsort(by='value', reverse=true) }}", "{{ d|dictsort(by='x') }}", "{{ d|items|list }} {{ u2|items|list }}", "{{ l|items|list }}",
    "{{ l|map('string')|list }} {{ msgs|map(attribute='role')|list }} {{ msgs|map(attribute='zz', default='-')|list }}",
    "{{ l|select('odd')|list }} {{ l|reject('odd')|list }} {{ [0, 1, '', 'a']|select|list }}",
    "{{ msgs|selectattr('role', 'equalto', 'user')|map(attribute='content')|list }} {{ msgs|rejectattr('tool_calls')|list|length }}",
    "{{ msgs|selectattr('tool_calls', 'defined')|list|length }} {{ n|selectattr('x')|list }}", "{% if e|select %}gen is truthy{% endif %}",
    "{{ (l|select)|length }}", "{{ l|map('nofilter')|list }}", "{{ [1, 2, 1, 'a', 'A']|unique|list }} {{ msgs|unique(attribute='role')|map(attribute='role')|list }}",
    "{{ l|min }} {{ l|max }} {{ ['b', 'A']|min }} {{ e|max }}", "{{ l|sum }} {{ [1.5, 2]|sum(start=1) }} {{ msgs|sum(attribute='zz') }}",
    "{{ l|list }} {{ 'ab'|list }} {{ d|list }} {{ u2|list }}", "{{ l|reverse|list }} {{ s|reverse }}",
    "{{ '42'|int }} {{ '4.7'|int }} {{ 'x'|int }} {{ 'x'|int(-1) }} {{ 3.9|int }} {{ n|int }} {{ ' 12 '|int }}", "{{ u2|int }}",
    "{{ '2.5'|float }} {{ 3|float }} {{ 'x'|float }} {{ '1e3'|float }}", "{{ 2.5|round }} {{ 3.5|round }} {{ 2.675|round(2) }} {{ 2.1|round(method='ceil') }} {{ 7|round }}",
    "{{ -3|abs }} {{ (-2.5)|abs }}", "{{ 'a'|abs }}",
    "{{ d|tojson }} {{ l|tojson }} {{ 'é\"\\n'|tojson }} {{ 'é'|tojson(ensure_ascii=true) }} {{ n|tojson }} {{ [t, f, x, 1e20]|tojson }}",
    "{{ d|tojson(indent=2) }}", "{{ d|tojson(sort_keys=true) }}", "{{ d|tojson(separators=(',', ':')) }}", "{{ {'a': [1, {'b': []}, {}]}|tojson(indent=1) }}",
    "{{ u2|tojson }}", "{{ (1, 2)|tojson }}", "{{ {1: 2, none: 3}|tojson }}", "{{ '🌍'|tojson(ensure_ascii=true) }}",
    "{{ 'a\\nb\\n\\nc'|indent }}|{{ 'a\\nb'|indent(2, true) }}|{{ 'a\\n\\nb'|indent(width='>', blank=true) }}", "{{ u2|indent }}",
    "{{ '<a>'|e }} {{ '<a>'|escape|e }} {{ '<b>'|safe }} {{ ('<a>'|safe) + '<b>' }} {{ '<b>' + ('<a>'|safe) }} {{ ('<a>'|safe) ~ '<b>' }}",
    "{{ 'x'|safe is escaped }} {{ 'x' is escaped }}", "{{ i|string }}{{ l|string }}{{ n|string }}", "{{ 'a b  c'|wordcount }}",
    "{{ 'hello world foo'|truncate(9) }} {{ 'hello world foo'|truncate(9, true) }} {{ 'hi'|truncate(9) }}",
    "{{ 'x'|center(5) }}|", "{{ '%s-%s'|format(1, 'a') }} {{ '%(a)s'|format(a=1) }}", "{{ l|batch(2)|list }} {{ l|batch(2, 0)|list }}",
    "{{ d|attr('a') }}|{{ d|attr('items') is callable }}", "{{ l|groupby('x') }}", "{{ l|nosuchfilter }}",
    "{% if f %}{{ l|nosuchfilter }}{% endif %}ok", "{% if t %}{{ l|nosuchfilter }}{% endif %}",
    # ---- tests
    "{{ u2 is defined }} {{ u2 is undefined }} {{ n is none }} {{ n is not none }} {{ i is number }} {{ t is number }}",
    "{{ s is string }} {{ l is sequence }} {{ d is mapping }} {{ s is iterable }} {{ i is iterable }} {{ d is sequence }}",
    "{{ t is boolean }} {{ i is boolean }} {{ t is true }} {{ 1 is true }} {{ f is false }} {{ i is integer }} {{ x is float }}",
    "{{ i is odd }} {{ i is even }} {{ 9 is divisibleby 3 }} {{ 9 is divisibleby(2) }} {{ s is lower }} {{ 'AB' is upper }}",
    "{{ 1 is eq 1 }} {{ 1 is ne 1 }} {{ 2 is gt 1 }} {{ 2 is ge 2 }} {{ 1 is lt 2 }} {{ 1 is le 0 }} {{ 2 is in l }} {{ 1 is equalto 1 }}",
    "{{ n is sameas none }} {{ 'upper' is filter }} {{ 'odd' is test }} {{ range is callable }} {{ s is callable }}",
    "{{ s is nosuchtest }}", "{% if f %}{{ s is nosuchtest }}{% endif %}ok", "{{ i is divisibleby 0 }}",
    # ---- methods
    "{{ ws.strip() }}|{{ ws.lstrip() }}|{{ ws.rstrip() }}|{{ 'xxaxx'.strip('x') }}",
    "{{ 'a,b,,c'.split(',') }} {{ ws.split() }} {{ 'a b c'.split(' ', 1) }} {{ 'a b c'.rsplit(' ', 1) }} {{ ' a  b '.rsplit(none, 1) }}",
    "{{ 'a\\nb\\r\\nc'.splitlines() }}", "{{ s.startswith('He') }} {{ s.endswith(('x', 'ld')) }} {{ s.upper() }} {{ s.lower() }} {{ 'ab cd'.title() }} {{ 'aBC'.capitalize() }}",
    "{{ s.replace('l', '_') }} {{ s.find('o') }} {{ s.rfind('o') }} {{ s.find('z') }} {{ s.count('l') }} {{ u.find('你') }}",
    "{{ '-'.join(['a', 'b']) }} {{ 'x'.center(5, '*') }} {{ 'x'.ljust(3, '.') }} {{ 'x'.rjust(3) }} {{ '5'.zfill(3) }}",
    "{{ '12'.isdigit() }} {{ 'ab'.isalpha() }} {{ 'a1'.isalnum() }} {{ ' '.isspace() }} {{ 'ab'.islower() }} {{ 'AB'.isupper() }}",
    "{{ 'ab.txt'.removesuffix('.txt') }} {{ 'v1'.removeprefix('v') }}", "{{ s.index('z') }}", "{{ ''.split('') }}",
    "{{ d.get('a') }} {{ d.get('zz') }} {{ d.get('zz', 0) }} {{ d.keys()|list }} {{ d.values()|list }} {{ d.items()|list }}",
    "{{ l.index(2) }} {{ l.count(1) }}", "{{ l.append(4) }}", "{% set _ = d.update({'c': 3}) %}", "{{ l.pop() }}",
    "{{ '{} and {}'.format(1, 'b') }} {{ '{1}{0}'.format('a', 'b') }} {{ '{x}!'.format(x=5) }} {{ '{{}}{!r}'.format('q') }}",
    "{{ '%s|%5s|%-5s|%d|%05.1f|%x|%%|%r' % ('a', 'b', 'c', 42, 3.14159, 255, 'q') }}", "{{ '%s %s' % ('a',) }}", "{{ '%d' % 'x' }}",
    "{{ s.nosuchmethod() }}", "{{ 'Straße'.casefold() }} {{ 'ß'.upper() }} {{ 'ﬁ'|upper }}",
    # ---- syntax errors
    "{% if t %}unclosed", "{% for %}{% endfor %}", "{{ 1 + }}", "{% endif %}", "{% foo %}", "{{ 'unterminated }}",
    "{# unterminated", "{% raw %}unterminated", "{{ a b }}", "{% set 1 = 2 %}", "{% macro m(a=1, b) %}{% endmacro %}",
    "{% break %}", "{{ x is }}", "{{ ) }}", "{% include 'x' %}", "{% for x in l recursive %}{% endfor %}", "{{ f(*l) }}",
    "{{ [1, 2 }}", "{{ {'a' 1} }}", "{{ 1 is string is string }}", "{% extends 'a' %}", "{% set x = %}", "{{ 0x10 }}",
]

SYNTAX = ("TemplateSyntaxError", "TemplateAssertionError")


def main():
    env = make_env()
    out = []
    for src in CASES:
        case = {"template": src}
        try:
            case["output"] = env.from_string(src).render(**V)
        except Exception as e:  # noqa: BLE001 - the error is the expected result
            case["error"] = f"{type(e).__name__}: {e}"
            case["syntax"] = type(e).__name__ in SYNTAX
        out.append(case)
    with open(os.path.join(FIX, "unit_cases.json"), "w", encoding="utf-8") as f:
        json.dump({"vars": V, "cases": out}, f, ensure_ascii=False, indent=1)
        f.write("\n")
    print(f"{len(out)} cases, {sum('error' in c for c in out)} errors", file=sys.stderr)


if __name__ == "__main__":
    main()
