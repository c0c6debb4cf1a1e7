#!/usr/bin/env python3
"""Reference renders of the chat templates in tests/fixtures/chat/templates/.

jinja2 is set up exactly as transformers' chat_template_utils sets it up
(ImmutableSandboxedEnvironment, trim_blocks, lstrip_blocks, loopcontrols,
the {% generation %} tag, its tojson, raise_exception, strftime_now) and
called as apply_chat_template calls it: render(messages=..., tools=...,
documents=None, add_generation_prompt=..., bos_token=..., eos_token=...,
**kwargs). strftime_now uses a fixed date so the fixtures are reproducible;
hearth's tests pass the same instant (NOW below, UTC).

Writes tests/fixtures/chat/conversations.json (the inputs) and
tests/fixtures/chat/expected/<template>.json (one result per case: the
output text, or the error jinja2 raised).

    python3 tools/chatref/gen.py
"""
import datetime
import json
import os
import sys

import jinja2
import jinja2.ext
from jinja2 import nodes
from jinja2.sandbox import ImmutableSandboxedEnvironment

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FIX = os.path.join(ROOT, "tests", "fixtures", "chat")
NOW = 1721952000  # 2024-07-26 00:00:00 UTC
BOS, EOS = "<s>", "</s>"


class GenerationTag(jinja2.ext.Extension):
    """transformers' AssistantTracker without the tracking: renders its body."""

    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return nodes.CallBlock(self.call_method("_body"), [], [], body).set_lineno(lineno)

    def _body(self, caller):
        return caller()


def make_env():
    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent,
                          separators=separators, sort_keys=sort_keys)

    def strftime_now(fmt):
        now = datetime.datetime.fromtimestamp(NOW, datetime.timezone.utc).replace(tzinfo=None)
        return now.strftime(fmt)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[GenerationTag, jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


# ---- conversations --------------------------------------------------------------

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "description": "City name, e.g. \"Paris\""},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
            },
            "required": ["city"],
        },
    },
}
SEARCH = {
    "type": "function",
    "function": {
        "name": "search",
        "description": "Search the web.",
        "parameters": {
            "type": "object",
            "properties": {"query": {"type": "string"}, "limit": {"type": "integer"}},
            "required": ["query"],
        },
    },
}


def call(cid, name, args):
    return {"id": cid, "type": "function", "function": {"name": name, "arguments": args}}


CONVERSATIONS = {
    "user_only": {"messages": [{"role": "user", "content": "Hello!"}]},
    "system_user": {"messages": [
        {"role": "system", "content": "You are a helpful assistant."},
        {"role": "user", "content": "What is 2+2?"}]},
    "multi_turn": {"messages": [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Hi there"},
        {"role": "assistant", "content": "Hello! How can I help?"},
        {"role": "user", "content": "Tell me a joke.\nMake it short."},
        {"role": "assistant", "content": "Why did the chicken cross the road? To get to the other side."},
        {"role": "user", "content": "Another one"}]},
    "no_system_multi": {"messages": [
        {"role": "user", "content": "One"},
        {"role": "assistant", "content": "Two"},
        {"role": "user", "content": "Three"}]},
    "unicode": {"messages": [
        {"role": "system", "content": "Réponds en français. 你好 🌍"},
        {"role": "user", "content": "Quote \"this\" and 'that' \\ <tag> & tab\there"}]},
    "parts": {"messages": [
        {"role": "system", "content": [{"type": "text", "text": "You see text parts."}]},
        {"role": "user", "content": [{"type": "text", "text": "Part one."},
                                     {"type": "text", "text": "Part two."}]}]},
    "tool_calls": {"tools": [WEATHER, SEARCH], "messages": [
        {"role": "system", "content": "You can call tools."},
        {"role": "user", "content": "Weather in Paris and Tokyo?"},
        {"role": "assistant", "content": "", "tool_calls": [
            call("call_1", "get_weather", {"city": "Paris", "unit": "celsius"}),
            call("call_2", "get_weather", {"city": "Tokyo"})]},
        {"role": "tool", "tool_call_id": "call_1", "name": "get_weather", "content": "18 C, sunny"},
        {"role": "tool", "tool_call_id": "call_2", "name": "get_weather",
         "content": "{\"temp\": 25, \"sky\": \"cloudy\"}"},
        {"role": "assistant", "content": "Paris: 18 C and sunny. Tokyo: 25 C and cloudy."},
        {"role": "user", "content": "Thanks!"}]},
    "tool_call_pending": {"tools": [SEARCH], "messages": [
        {"role": "user", "content": "Find hearth docs"},
        {"role": "assistant", "content": None, "tool_calls": [
            call("call_9", "search", "{\"query\": \"hearth docs\", \"limit\": 3}")]},
        {"role": "tool", "tool_call_id": "call_9", "content": "[\"https://example.com/hearth\"]"}]},
    "tools_declared": {"tools": [WEATHER], "messages": [
        {"role": "user", "content": "Is it raining in Oslo?"}]},
    "assistant_last": {"messages": [
        {"role": "system", "content": "Continue the answer."},
        {"role": "user", "content": "Count to three."},
        {"role": "assistant", "content": "One, two,"}]},
    "tool_rich_args": {"tools": [WEATHER], "messages": [
        {"role": "user", "content": "Plan a trip"},
        {"role": "assistant", "content": "Let me check.", "tool_calls": [
            call("call_3", "get_weather", {"city": "東京", "days": [1, 2.5, None],
                                           "opts": {"metric": True, "note": "a\"b\n"}})]},
        {"role": "tool", "tool_call_id": "call_3", "name": "get_weather", "content": "晴れ 🌞"},
        {"role": "user", "content": "And tomorrow?"}]},
    "thinking": {"messages": [
        {"role": "user", "content": "What is 17*3?"},
        {"role": "assistant", "content": "51", "reasoning_content": "17*3 = 51."},
        {"role": "user", "content": "And 17*4?"}]},
}

# (conversation, add_generation_prompt, kwargs)
CASES = []
for name in CONVERSATIONS:
    for agp in (True, False):
        CASES.append((name, agp, {}))
for kw in ({"enable_thinking": True}, {"enable_thinking": False}):
    for name in ("thinking", "system_user"):
        CASES.append((name, True, kw))


def render(env, src, conv, agp, kwargs):
    tpl = env.from_string(src)  # syntax errors surface per case, like hearth's
    return tpl.render(messages=conv["messages"], tools=conv.get("tools"), documents=None,
                      add_generation_prompt=agp, bos_token=BOS, eos_token=EOS, **kwargs)


def main():
    env = make_env()
    tdir = os.path.join(FIX, "templates")
    with open(os.path.join(FIX, "conversations.json"), "w", encoding="utf-8") as f:
        json.dump({"bos_token": BOS, "eos_token": EOS, "now": NOW,
                   "conversations": CONVERSATIONS,
                   "cases": [{"conversation": c, "add_generation_prompt": a, "kwargs": k}
                             for c, a, k in CASES]}, f, ensure_ascii=False, indent=1)
        f.write("\n")
    n_err = 0
    for fn in sorted(os.listdir(tdir)):
        if not fn.endswith(".jinja"):
            continue
        src = open(os.path.join(tdir, fn), encoding="utf-8").read()
        results = []
        for c, a, k in CASES:
            try:
                results.append({"output": render(env, src, CONVERSATIONS[c], a, k)})
            except Exception as e:  # noqa: BLE001 - the error is the expected result
                results.append({"error": f"{type(e).__name__}: {e}"})
                n_err += 1
        out = os.path.join(FIX, "expected", fn[: -len(".jinja")] + ".json")
        with open(out, "w", encoding="utf-8") as f:
            json.dump(results, f, ensure_ascii=False, indent=1)
            f.write("\n")
    print(f"jinja2 {jinja2.__version__}: {len(CASES)} cases per template, {n_err} errors",
          file=sys.stderr)


if __name__ == "__main__":
    main()
