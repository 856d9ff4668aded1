#!/usr/bin/env python3
"""Every chat template in ../shared/reference/chat-templates/ x a set of
conversations, rendered by specd's Jinja renderer (jinja_render) and by
Python's jinja2 configured as Hugging Face's apply_chat_template does
(ImmutableSandboxedEnvironment, trim_blocks, lstrip_blocks, loopcontrols,
raise_exception/strftime_now globals, HF's tojson filter). Outputs must be
byte-identical, or both renderers must raise (with the same message when the
template raised it). Prints the template x conversation matrix.

Usage: test_templates.py JINJA_RENDER [TEMPLATE_DIR]   (exit 77: no jinja2 or no templates)
"""
import datetime
import json
import os
import subprocess
import sys
import tempfile

try:
    import jinja2
    from jinja2.sandbox import ImmutableSandboxedEnvironment
    from jinja2.ext import loopcontrols
except ImportError:
    print("SKIP: python3-jinja2 missing")
    sys.exit(77)


class TemplateRaised(Exception):
    pass


def raise_exception(message):
    raise TemplateRaised(message)


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def strftime_now(fmt):
    return datetime.datetime.now().strftime(fmt)


def py_render(src, ctx):
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env.from_string(src).render(**ctx)


WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Get the current weather in a city",
    "parameters": {"type": "object", "properties": {
        "city": {"type": "string", "description": "City name, e.g. Paris"},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"], "description": "Temperature unit"},
        "days": {"type": "integer", "minimum": 1, "maximum": 7, "description": "Forecast days"}},
        "required": ["city"]}}}
SEARCH = {"type": "function", "function": {
    "name": "search", "description": "Search the web.",
    "parameters": {"type": "object", "properties": {
        "query": {"type": "string", "description": "What to look for"},
        "limit": {"type": "number", "description": "Max results", "default": 5}},
        "required": ["query", "limit"]}}}


def call(cid, name, args, as_string):
    return {"id": cid, "type": "function",
            "function": {"name": name, "arguments": json.dumps(args) if as_string else args}}


def conversations():
    sysm = {"role": "system", "content": "You are a helpful assistant."}
    u1 = {"role": "user", "content": "Hi there!"}
    a1 = {"role": "assistant", "content": "Hello! How can I help?"}
    u2 = {"role": "user", "content": "What's the weather in Paris?"}
    convs = {
        "user": dict(messages=[u1], add_generation_prompt=True),
        "system": dict(messages=[sysm, u1], add_generation_prompt=True),
        "multi-turn": dict(messages=[sysm, u1, a1, u2], add_generation_prompt=True),
        "no-gen-prompt": dict(messages=[u1, a1], add_generation_prompt=False),
        "tricky-content": dict(messages=[{"role": "user", "content": "  quotes ' \" back\\slash\n\ttab <|eot_id|></s> [INST] é漢字 🙂  "}],
                               add_generation_prompt=True),
        "tools": dict(messages=[sysm, u2], tools=[WEATHER, SEARCH], add_generation_prompt=True),
    }
    for as_string in (True, False):
        tag = "str" if as_string else "obj"
        c1 = call("call12345", "get_weather", {"city": "Paris", "unit": "celsius"}, as_string)
        convs["tool-result-" + tag] = dict(messages=[
            u2, {"role": "assistant", "content": "", "tool_calls": [c1]},
            {"role": "tool", "tool_call_id": "call12345", "name": "get_weather", "content": "{\"temp\": 21}"}],
            tools=[WEATHER], add_generation_prompt=True)
        c2 = call("call67890", "search", {"query": "Paris events", "limit": 3}, as_string)
        convs["parallel-" + tag] = dict(messages=[
            sysm, u2, {"role": "assistant", "content": "", "tool_calls": [c1, c2]},
            {"role": "tool", "tool_call_id": "call12345", "name": "get_weather", "content": "21 C"},
            {"role": "tool", "tool_call_id": "call67890", "name": "search", "content": "Jazz festival"},
            {"role": "assistant", "content": "It is 21 C; there is a jazz festival."},
            {"role": "user", "content": "Thanks"}],
            tools=[WEATHER, SEARCH], add_generation_prompt=True)
    for c in convs.values():
        c["bos_token"] = "<s>"
        c["eos_token"] = "</s>"
        # Firefunction v2 reads these (llama.cpp passes them the same way)
        c["datetime"] = "Dec 04 2026 12:00:00 GMT"
        c["functions"] = json.dumps(c["tools"], indent=2) if "tools" in c else ""
    return convs


def main():
    if len(sys.argv) < 2:
        print(__doc__)
        return 2
    exe = sys.argv[1]
    tdir = sys.argv[2] if len(sys.argv) > 2 else os.path.join(os.environ.get("SPECD_SRC", "."), "..", "shared", "reference", "chat-templates")
    names = sorted(f for f in os.listdir(tdir) if f.endswith(".jinja")) if os.path.isdir(tdir) else []
    if not names:
        print("SKIP: no templates in", tdir)
        return 77
    convs = conversations()
    failures = 0
    cells = {}
    with tempfile.TemporaryDirectory() as tmp:
        for cname, ctx in convs.items():
            with open(os.path.join(tmp, cname + ".json"), "w") as f:
                json.dump(ctx, f)
        for tname in names:
            src = open(os.path.join(tdir, tname), encoding="utf-8").read()
            for cname, ctx in convs.items():
                try:
                    want, want_err = py_render(src, ctx), None
                except TemplateRaised as e:
                    want, want_err = None, "raise:" + str(e)
                except Exception as e:  # jinja2 errors (undefined, type errors)
                    want, want_err = None, "error:" + type(e).__name__ + ": " + str(e)
                p = subprocess.run([exe, os.path.join(tdir, tname), os.path.join(tmp, cname + ".json")], capture_output=True)
                got = p.stdout.decode("utf-8", "replace") if p.returncode == 0 else None
                got_err = p.stderr.decode("utf-8", "replace").strip() if p.returncode != 0 else None
                if want is not None:
                    ok = got == want
                    cell = "ok" if ok else "DIFF"
                    if not ok:
                        failures += 1
                        print(f"--- {tname} x {cname}: outputs differ" + (f" (specd: {got_err})" if got_err else ""))
                        if got is not None:
                            i = next((k for k in range(min(len(got), len(want))) if got[k] != want[k]), min(len(got), len(want)))
                            print(f"    first difference at char {i}:\n    want {want[max(0, i - 60):i + 60]!r}\n    got  {got[max(0, i - 60):i + 60]!r}")
                else:
                    ok = got is None and p.returncode == 3
                    if ok and want_err.startswith("raise:"):
                        ok = want_err[6:] in got_err
                    cell = "raises" if ok else "DIFF"
                    if not ok:
                        failures += 1
                        print(f"--- {tname} x {cname}: jinja2 raised {want_err!r}, specd: {got_err or 'rendered'}")
                cells[(tname, cname)] = cell
    cols = list(convs)
    w = max(len(n) for n in names)
    print("\ntemplate x conversation (ok = byte-identical, raises = both raise the same error)")
    print(" " * (w - 6) + "      " + " ".join(f"{c[:14]:>14}" for c in cols))
    for tname in names:
        print(f"{tname[:-6]:>{w - 6}}      " + " ".join(f"{cells[(tname, c)]:>14}" for c in cols))
    total = len(names) * len(cols)
    print(f"\n{total - failures}/{total} cells match ({len(names)} templates x {len(cols)} conversations)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
