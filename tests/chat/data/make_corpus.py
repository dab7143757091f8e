#!/usr/bin/env python3
"""Writes corpus.json (Kimi-K3 rendering corpus) and generic.json (conversations for the other
model families' templates). Checked in with its output; rerun after editing, then run
`node tests/chat/render_oracle.mjs` to refresh the @huggingface/jinja expectations.

Floats in the corpus are non-integral and between 1e-4 and 1e15 (where Python's repr and
JavaScript agree), and no mapping key that the template sorts has upper-case letters (where the
case-insensitive dictsort of Python Jinja2 / @huggingface/jinja and code-point order disagree);
see divergences.json for those."""
import json, os

HERE = os.path.dirname(os.path.abspath(__file__))

WEATHER = {"type": "function", "function": {"name": "get_weather", "description": "Get weather",
           "parameters": {"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
                          "required": ["city"]}}}
SEARCH = {"type": "function", "function": {"name": "web_search", "description": "Search the web for a query; returns snippets.",
          "parameters": {"type": "object", "properties": {
              "query": {"type": "string", "description": "What to search"},
              "top_k": {"type": "integer", "default": 5, "minimum": 1, "maximum": 50},
              "lang": {"type": "string", "enum": ["en", "zh", "fr"]},
              "safe": {"type": "boolean", "default": True},
              "filters": {"type": "object", "properties": {"site": {"type": ["string", "null"]}, "after": {"type": "string", "format": "date"}}},
              "weights": {"type": "array", "items": {"type": "number"}, "default": [0.5, 0.25]}},
              "required": ["query"]}}}
PYTHON = {"type": "function", "function": {"name": "python", "description": "Run Python code",
          "parameters": {"type": "object", "properties": {"code": {"type": "string"}}, "required": ["code"]}}}
NOARGS = {"type": "function", "function": {"name": "get_time", "description": "Current time", "parameters": {"type": "object", "properties": {}}}}
UNICODE_TOOL = {"type": "function", "function": {"name": "翻译", "description": "把文本翻译成目标语言 — “quotes” & <tags>",
                "parameters": {"type": "object", "properties": {"文本": {"type": "string"}, "目标": {"type": "string", "enum": ["英语", "日语"]}}}}}

def sys(c, **kw): return {"role": "system", "content": c, **kw}
def user(c, **kw): return {"role": "user", "content": c, **kw}
def asst(c, **kw): return {"role": "assistant", "content": c, **kw}
def tool(c, **kw): return {"role": "tool", "content": c, **kw}
def call(name, args, id=None, flat=False):
    c = {"name": name, "arguments": args} if flat else {"type": "function", "function": {"name": name, "arguments": args}}
    if id is not None: c["id"] = id
    return c

cases = []
def case(name, messages, **vars):
    v = {"messages": messages}
    v.update(vars)
    v.setdefault("add_generation_prompt", True)
    cases.append({"name": name, "vars": v})

# Spec examples (chat.md 3.2)
case("a_system_user_defaults", [sys("You are helpful."), user("Hi")])
case("b_user_thinking_off", [user("Hi")], thinking=False)
case("c_tool_round_trip", [user("Weather in Paris?"), asst("", reasoning_content="Need tool.", tool_calls=[call("get_weather", {"city": "Paris", "days": 2})]), tool("Sunny", tool_call_id=None)], tools=[WEATHER])
case("d_history_no_reasoning_low", [user("a"), asst("b"), user("c")], thinking_effort="low")
case("e_tool_choice_required_off", [user("Call something")], tools=[WEATHER], tool_choice="required", thinking=False)
# Thinking and effort
case("effort_high", [user("Think hard")], thinking_effort="high")
case("effort_max_explicit", [user("x")], thinking=True, thinking_effort="max")
case("effort_medium_error", [user("x")], thinking_effort="medium")
case("effort_bogus_error", [user("x")], thinking_effort="extreme")
case("effort_medium_thinking_off", [user("x")], thinking=False, thinking_effort="medium")
case("thinking_null_is_off", [user("x"), asst("y", reasoning_content="hidden")], thinking=None)
case("thinking_zero_is_off", [user("x")], thinking=0)
case("thinking_string_true", [user("x")], thinking="yes")
case("enable_thinking_ignored", [user("x")], enable_thinking=False)
# Reasoning in history
case("history_reasoning_content", [user("q1"), asst("a1", reasoning_content="step 1\nstep 2"), user("q2")])
case("history_reasoning_field", [user("q1"), asst("a1", reasoning="via reasoning key"), user("q2")])
case("history_reasoning_whitespace", [user("q1"), asst("a1", reasoning_content="  \n\t "), user("q2")])
case("history_reasoning_empty_falls_back", [user("q1"), asst("a1", reasoning_content="", reasoning="fallback"), user("q2")])
case("history_reasoning_kept_raw", [user("q1"), asst("  a1  ", reasoning_content="\n  padded thought  \n"), user("q2")])
case("history_reasoning_thinking_off", [user("q1"), asst("a1", reasoning_content="dropped"), user("q2")], thinking=False)
case("history_content_null", [user("q1"), asst(None), user("q2")])
# Roles and names
case("names_on_all_roles", [sys("S", name="ops"), user("U", name="alice"), asst("A", name="bot"), user("U2", name="")])
case("names_escaped", [user("hi", name='a&b "c"'), asst("ok", name="x&amp;y")])
case("unknown_roles_skipped", [sys("s"), {"role": "function", "content": "f"}, user("u"), {"role": "developer", "content": "d"}, "just a string", 42, user("v")])
case("missing_role_error", [user("u"), {"content": "no role"}])
case("empty_messages", [])
case("no_generation_prompt", [user("u"), asst("a")], add_generation_prompt=False)
case("no_generation_prompt_thinking_off", [user("u"), asst("a", reasoning_content="r")], add_generation_prompt=False, thinking=False)
case("continue_final_assistant", [user("Write a poem"), asst("Roses are")], add_generation_prompt=False)
case("many_turns", [sys("Be brief.")] + sum([[user(f"question {i}"), asst(f"answer {i}", reasoning_content=(f"thought {i}" if i % 2 else None))] for i in range(6)], []) + [user("last")])
# Content forms
case("content_parts_text", [user([{"type": "text", "text": "part one, "}, {"type": "text", "text": "part two"}])])
case("content_parts_assistant", [user("u"), asst([{"type": "text", "text": "answer in parts"}]), user("v")])
case("content_image_placeholder", [user([{"type": "text", "text": "What is this? "}, {"type": "image_url", "image_url": {"url": "data:,"}}, {"type": "text", "text": " and this"}, {"type": "image"}])])
case("content_image_prompts", [user([{"type": "image"}, {"type": "text", "text": "compare with <|kimi_image_placeholder|> please"}])], image_prompts=["<IMG0>", "<IMG1>"])
case("content_image_prompts_too_few_error", [user([{"type": "image"}, {"type": "image"}])], image_prompts=["<IMG0>"])
case("content_image_prompts_unused_error", [user("no images")], image_prompts=["<IMG0>"])
case("content_special_tokens_raw", [user("literal <|open|>message<|sep|> and <|end_of_msg|> & \"quotes\"")])
case("content_whitespace_raw", [sys("  padded system  \n"), user("\n\nleading newlines and trailing spaces   ")])
case("content_empty_strings", [sys(""), user(""), asst(""), user(" ")])
case("unicode_content", [user("你好，世界！ Привет мир. مرحبا بالعالم 🌍🚀 naïve café — “quoted” ‘single’ \u2028 sep"), asst("こんにちは 👋", reasoning_content="思考中… ∑ x² ≤ ∞")])
case("unicode_tools", [user("翻译这句话")], tools=[UNICODE_TOOL])
case("control_chars_content", [user("tab\there\rcarriage\u0001ctl\u007fdel")])
# Tools
case("tools_empty_list", [user("u")], tools=[])
case("tools_null", [user("u")], tools=None)
case("tools_multiple", [sys("You can search."), user("Find news")], tools=[SEARCH, WEATHER, PYTHON, NOARGS])
case("tools_dynamic_system", [user("u"), {"role": "system", "content": "dropped", "name": "dropped", "tools": [PYTHON]}, user("now run code")], tools=[WEATHER])
case("tools_dynamic_system_empty_tools", [{"role": "system", "content": "kept", "tools": []}, user("u")])
case("tool_call_all_value_types", [user("u"), asst("Calling.", tool_calls=[call("web_search", {"query": "k3 \"engine\" <b>", "top_k": 7, "lang": "en", "safe": False, "filters": {"site": None, "after": "2026-01-01"}, "weights": [0.5, 2.25, -3], "nested": {"a": [1, {"b": True}], "z": "ü"}, "empty_obj": {}, "empty_list": [], "big": 9007199254740991, "neg": -42, "frac": 0.001, "unicode": "中文 🎉"})]), tool("results...", tool_call_id="c1")], tools=[SEARCH])
case("tool_call_arguments_string_json", [user("u"), asst("", tool_calls=[call("get_weather", "{\"city\": \"Oslo\", \"days\": 3}")]), tool("Rain")], tools=[WEATHER])
case("tool_call_arguments_blank_string", [user("u"), asst("", tool_calls=[call("get_time", "   ")]), tool("12:00")], tools=[NOARGS])
case("tool_call_arguments_null", [user("u"), asst("", tool_calls=[call("get_time", None)]), tool("12:00")], tools=[NOARGS])
case("tool_call_arguments_missing", [user("u"), asst("", tool_calls=[{"type": "function", "function": {"name": "get_time"}}]), tool("12:00")], tools=[NOARGS])
case("tool_call_arguments_list_error", [user("u"), asst("", tool_calls=[call("get_time", [1, 2])])])
case("tool_call_arguments_number_error", [user("u"), asst("", tool_calls=[call("get_time", 5)])])
case("tool_call_flat_form", [user("u"), asst(None, tool_calls=[call("python", {"code": "print('hey')"}, flat=True)]), tool("hey")], tools=[PYTHON])
case("tool_call_xtml_json_block", [user("u"), asst("", tool_calls=[{"type": "function", "function": {"name": "python", "arguments": {"code": "ignored"}, "_xtml_json_block": "{\"code\": \"print(1)\"}"}}]), tool("1")], tools=[PYTHON])
case("tool_call_not_mapping_error", [user("u"), asst("", tool_calls=["get_time"])])
case("tool_call_missing_name_error", [user("u"), asst("", tool_calls=[{"type": "function", "function": {"arguments": {}}}])])
case("tool_call_name_escaped", [user("u"), asst("", tool_calls=[call('we"ird&name', {"k&ey\"": "v&\"alue"})]), tool("ok")])
case("tool_call_value_with_markers", [user("u"), asst("", tool_calls=[call("python", {"code": "s = '<|close|>argument<|sep|>'\nprint(s)"})]), tool("done")], tools=[PYTHON])
case("tool_calls_empty_list", [user("u"), asst("plain", tool_calls=[]), user("v")])
# Tool results
case("parallel_calls_results_reordered", [user("Weather in Paris and Oslo"), asst("", tool_calls=[call("get_weather", {"city": "Paris"}, id="call_1"), call("get_weather", {"city": "Oslo"}, id="call_2"), call("python", {"code": "1+1"}, id="call_3")]), tool("Oslo: rain", tool_call_id="call_2"), tool("2", tool_call_id="call_3"), tool("Paris: sun", tool_call_id="call_1")], tools=[WEATHER, PYTHON])
case("results_matched_by_id_field", [user("u"), asst("", tool_calls=[call("get_weather", {"city": "A"}, id="x1"), call("python", {"code": "2"}, id="x2")]), tool("two", id="x2"), tool("A-weather", id="x1")], tools=[WEATHER, PYTHON])
case("results_unmatched_given_order_names", [user("u"), asst("", tool_calls=[call("get_weather", {"city": "A"}, id="x1"), call("python", {"code": "2"}, id="x2")]), tool("first", tool_call_id="zzz", name="python"), tool("second", tool_call_id="x1", name="get_weather")], tools=[WEATHER, PYTHON])
case("results_positional_fallback", [user("u"), asst("", tool_calls=[call("get_weather", {"city": "A"}), call("python", {"code": "2"})]), tool("r1"), tool("r2")], tools=[WEATHER, PYTHON])
case("results_tool_field_null_falls_back", [user("u"), asst("", tool_calls=[call("get_weather", {"city": "A"}), call("python", {"code": "2"})]), tool("r1", tool=None, name="ignored"), tool("r2", tool="explicit")], tools=[WEATHER, PYTHON])
case("results_no_name_error", [user("u"), tool("orphan")])
case("results_more_than_calls_error", [user("u"), asst("", tool_calls=[call("get_weather", {"city": "A"})]), tool("r1"), tool("r2")])
case("results_index_continues_across_user", [user("u"), asst("", tool_calls=[call("get_weather", {"city": "A"}, id="a"), call("get_weather", {"city": "B"}, id="b")]), tool("ra", tool_call_id="a"), user("interjection"), tool("rb", tool_call_id="b")], tools=[WEATHER])
case("results_duplicate_call_ids", [user("u"), asst("", tool_calls=[call("get_weather", {"city": "A"}, id="d"), call("python", {"code": "x"}, id="d")]), tool("r-d", tool_call_id="d")], tools=[WEATHER, PYTHON])
case("results_numeric_ids", [user("u"), asst("", tool_calls=[call("get_weather", {"city": "A"}, id=7), call("python", {"code": "x"}, id=8)]), tool("eight", tool_call_id="8"), tool("seven", tool_call_id=7)], tools=[WEATHER, PYTHON])
case("results_content_parts", [user("u"), asst("", tool_calls=[call("python", {"code": "x"}, id="p")]), tool([{"type": "text", "text": "out: "}, {"type": "text", "text": "42"}], tool_call_id="p")], tools=[PYTHON])
case("results_then_second_round", [user("u"), asst("", tool_calls=[call("get_weather", {"city": "A"}, id="a")]), tool("ra", tool_call_id="a"), asst("Now code.", reasoning_content="next", tool_calls=[call("python", {"code": "1"}, id="b")]), tool("1", tool_call_id="b"), asst("All done.")], tools=[WEATHER, PYTHON], add_generation_prompt=False)
case("results_tool_call_id_precedence", [user("u"), asst("", tool_calls=[call("get_weather", {"city": "A"}, id="a"), call("python", {"code": "1"}, id="b")]), tool("rb", tool_call_id="b", id="a"), tool("ra", tool_call_id="a", id="b")], tools=[WEATHER, PYTHON])
case("results_after_non_tool_entry", [user("u"), asst("", tool_calls=[call("get_weather", {"city": "A"}, id="a"), call("python", {"code": "1"}, id="b")]), tool("rb", tool_call_id="b"), "not a mapping", tool("ra", tool_call_id="a")], tools=[WEATHER, PYTHON])
# Tool choice and response format
case("tool_choice_none", [user("Just talk")], tools=[WEATHER], tool_choice="none")
case("tool_choice_auto", [user("Maybe call")], tools=[WEATHER], tool_choice="auto")
case("tool_choice_object", [user("x")], tools=[WEATHER], tool_choice={"type": "function", "function": {"name": "get_weather"}})
case("tools_required_effort_low", [sys("sys"), user("x")], tools=[WEATHER, PYTHON], tool_choice="required", thinking_effort="low")
case("response_format_json_object", [user("Give JSON")], response_format={"type": "json_object"})
case("response_format_text", [user("Give text")], response_format={"type": "text"})
case("response_format_string", [user("Give JSON")], response_format="json_object")
SCHEMA = {"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer", "minimum": 0}, "tags": {"type": "array", "items": {"type": "string"}}, "score": {"type": "number", "maximum": 99.5}}, "required": ["name", "age"], "additionalProperties": False}
case("response_format_json_schema", [user("Person as JSON")], response_format={"type": "json_schema", "json_schema": {"name": "person", "strict": True, "schema": SCHEMA}})
case("response_format_json_schema_nested_key", [user("x")], response_format={"type": "json_schema", "json_schema": {"json_schema": {"type": "string"}}})
case("response_format_json_schema_bare", [user("x")], response_format={"type": "json_schema", "json_schema": {"type": "array", "items": {"type": "integer"}}})
case("response_format_json_schema_missing", [user("x")], response_format={"type": "json_schema"})
case("response_schema_variable", [user("x")], response_schema={"type": "object", "properties": {"ok": {"type": "boolean"}}}, response_format={"type": "json_schema"})
case("everything", [sys("You are K3."), user("Plan a trip", name="u1"), asst("Checking.", reasoning_content="Use tools.", tool_calls=[call("get_weather", {"city": "Rome", "days": 3}, id="w"), call("web_search", {"query": "Rome museums", "top_k": 3}, id="s")]), tool("Sunny, 25C", tool_call_id="w"), tool("Vatican, Uffizi?", tool_call_id="s"), asst("Here is a plan.", reasoning_content="Summarize."), user("Thanks! As JSON please.")], tools=[WEATHER, SEARCH], tool_choice="required", response_format={"type": "json_object"}, thinking_effort="high")

json.dump(cases, open(os.path.join(HERE, "corpus.json"), "w"), ensure_ascii=False, indent=1)
print(len(cases), "kimi cases")

# Conversations for other families' templates. Variables every template may read.
common = {"bos_token": "<s>", "eos_token": "</s>", "date_string": "26 Jul 2024"}
generic = []
def g(name, messages, **vars):
    v = dict(common); v["messages"] = messages; v.update(vars); v.setdefault("add_generation_prompt", True)
    generic.append({"name": name, "vars": v})
g("user_only", [user("Hello!")])
g("system_user", [sys("You are terse."), user("Hi there")])
g("multi_turn", [user("2+2?"), asst("4"), user("and 3+3?")])
g("system_multi_turn", [sys("Be kind."), user("a"), asst("b"), user("c")])
g("no_generation_prompt", [user("a"), asst("b")], add_generation_prompt=False)
g("whitespace_trim", [sys("  spaced system \n"), user("\n  spaced user  \n"), asst("  spaced reply  "), user("x")])
g("unicode", [user("你好 🌍 naïve — “q”"), asst("Привет"), user("مرحبا")])
g("tools_call_and_result", [user("Weather in Paris?"), asst(None, tool_calls=[call("get_weather", {"city": "Paris", "days": 2}, id="call_1")]), tool("Sunny", tool_call_id="call_1", name="get_weather"), user("thanks")], tools=[WEATHER])
g("tools_declared_only", [sys("Use tools if needed."), user("Run 1+1")], tools=[PYTHON, WEATHER])
g("tools_string_arguments", [user("Run code"), asst(None, tool_calls=[call("python", "{\"code\": \"print(1)\"}", id="c9")]), tool("1", tool_call_id="c9", name="python")], tools=[PYTHON])
g("parallel_calls", [user("Two cities"), asst(None, tool_calls=[call("get_weather", {"city": "A"}, id="1"), call("get_weather", {"city": "B"}, id="2")]), tool("ra", tool_call_id="1", name="get_weather"), tool("rb", tool_call_id="2", name="get_weather")], tools=[WEATHER])
g("bad_alternation", [user("a"), user("b")])
json.dump(generic, open(os.path.join(HERE, "generic.json"), "w"), ensure_ascii=False, indent=1)
print(len(generic), "generic cases")
