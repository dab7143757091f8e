#!/usr/bin/env python3
"""Writes divergences.json: inputs on which @huggingface/jinja and Python Jinja2 (transformers)
render differently, or on which k3's own template deliberately differs from the reference
Kimi-K3.jinja. test_render_corpus checks k3 against Python Jinja2 (expected_py.json) here."""
import json, os
HERE = os.path.dirname(os.path.abspath(__file__))
user = lambda c: {"role": "user", "content": c}
MIXED = {"type": "function", "function": {"name": "lookup", "description": "Mixed-case keys",
         "parameters": {"type": "object", "properties": {"userId": {"type": "string"}, "user_name": {"type": "string"},
                        "Zeta": {"type": "integer"}, "alpha": {"type": "boolean"}, "Beta": {"type": "null"}}, "required": ["userId"]}}}
cases = [
 {"name": "div_mixed_case_schema_keys", "why": "Kimi-K3.jinja sorts with dictsort, case-insensitive in Python Jinja2 and @huggingface/jinja; k3's template sorts by code point like Moonshot's encoder (chat.md 3, 3.1)",
  "vars": {"messages": [user("find user")], "tools": [MIXED], "add_generation_prompt": True,
           "response_format": {"type": "json_schema", "json_schema": {"schema": {"type": "object", "properties": {"B": {}, "a": {}, "_c": {}}}}}}},
 {"name": "div_float_formatting", "why": "Python prints 1.0, 1e-07, 1e+20, 1.5e+16; JavaScript prints 1, 1e-7, 100000000000000000000, 15000000000000000",
  "vars": {"messages": [user("u"), {"role": "assistant", "content": "", "tool_calls": [{"type": "function", "function": {"name": "f", "arguments": {"one": 1.0, "tiny": 1e-7, "huge": 1e20, "mid": 1.5e16, "neg": -2.0}}}]}],
           "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {"x": {"type": "number", "default": 1.0, "maximum": 1e300}}}}}], "add_generation_prompt": True}},
 {"name": "div_thinking_effort_null", "why": "thinking_effort=null omits the effort message; @huggingface/jinja fails on `None in [...]` in Kimi-K3.jinja",
  "vars": {"messages": [user("u")], "thinking_effort": None, "add_generation_prompt": True}},
]
generic = [
 {"template": "phi-4-mini-tools.jinja", "case": "tools_call_and_result", "why": "`{{ arguments }}` prints a dict: Python repr ({'city': 'Paris'}) vs JSON in @huggingface/jinja"},
 {"template": "phi-4-mini-tools.jinja", "case": "parallel_calls", "why": "`{{ arguments }}` prints a dict: Python repr vs JSON in @huggingface/jinja"},
] + [{"template": "gemma-it.jinja", "case": c, "why": "both fail, differently: `none|trim` is an error in @huggingface/jinja but 'None' in Python, which then reaches the template's alternation check"}
     for c in ("tools_call_and_result", "tools_string_arguments", "parallel_calls")]
json.dump({"cases": cases, "generic": generic}, open(os.path.join(HERE, "divergences.json"), "w"), ensure_ascii=False, indent=1)
print(len(cases), "divergence cases")
