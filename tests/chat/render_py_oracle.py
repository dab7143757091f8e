#!/usr/bin/env python3
"""Renders the chat-template corpus with Python Jinja2 configured as Hugging Face transformers
configures it (ImmutableSandboxedEnvironment, trim_blocks, lstrip_blocks, loopcontrols,
transformers' tojson, raise_exception, strftime_now) and writes data/expected_py.json.

This is the second oracle: where @huggingface/jinja and Python Jinja2 disagree (floats, None
printing, a few filters), k3 follows Python, and test_render_corpus checks the documented
divergences against this file. Needs `jinja2` (Debian: python3-jinja2); not run by CI.
    python3 tests/chat/render_py_oracle.py [--check]"""
import json, os, sys
from datetime import datetime
import jinja2
from jinja2.sandbox import ImmutableSandboxedEnvironment

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
SHARED = os.environ.get("K3_SHARED_DIR", os.path.join(ROOT, "..", "shared"))

def make_env():
    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)
    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)
    def strftime_now(fmt):
        return datetime.now().strftime(fmt)
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env

def render(env, source, vars):
    try:
        return {"output": env.from_string(source).render(**vars)}
    except Exception as e:  # noqa: BLE001 - any failure is an expected "error" outcome
        return {"error": f"{type(e).__name__}: {e}"}

def main():
    env = make_env()
    read = lambda p: open(p, encoding="utf-8").read()
    corpus = json.load(open(os.path.join(HERE, "data", "corpus.json"), encoding="utf-8"))
    generic = json.load(open(os.path.join(HERE, "data", "generic.json"), encoding="utf-8"))
    divergences = json.load(open(os.path.join(HERE, "data", "divergences.json"), encoding="utf-8"))
    result = {"generator": f"Python Jinja2 {jinja2.__version__} (transformers configuration)", "templates": {}}
    kimi = {"Kimi-K3.jinja": read(os.path.join(SHARED, "data", "Kimi-K3.jinja")),
            "kimi-k3.jinja": read(os.path.join(ROOT, "data", "templates", "kimi-k3.jinja"))}
    for name, src in kimi.items():
        result["templates"][name] = {c["name"]: render(env, src, c["vars"]) for c in corpus + divergences["cases"]}
    tdir = os.path.join(HERE, "templates")
    for f in sorted(os.listdir(tdir)):
        if f.endswith(".jinja"):
            result["templates"][f] = {c["name"]: render(env, read(os.path.join(tdir, f)), c["vars"]) for c in generic}
    text = json.dumps(result, ensure_ascii=False, indent=1) + "\n"
    out = os.path.join(HERE, "data", "expected_py.json")
    if "--check" in sys.argv:
        if not os.path.exists(out) or read(out) != text:
            sys.exit("data/expected_py.json is stale: rerun tests/chat/render_py_oracle.py")
        print("expected_py.json is up to date")
        return
    open(out, "w", encoding="utf-8").write(text)
    print("wrote", out)

main()
