# test_tools.py — tool calling end to end over HTTP with the real pair
# (stories260K + llama2xs) serving real chat templates (--chat-template
# FILE from ../shared/reference/chat-templates): POST /apply-template renders
# the tools; for each tool-call format (Hermes/Qwen <tool_call>, Llama 3.x
# JSON, Mistral [TOOL_CALLS], Functionary v3.1 <function=>, Firefunction
# functools[...]; Command-R7B's prompt is longer than this model's context) tool_choice "required" forces
# a well-formed call whose arguments validate against the function's schema,
# returned as message.tool_calls with finish_reason "tool_calls"; the loop
# (call -> role "tool" result -> final answer) completes; a named function is
# the one called; streaming carries delta.tool_calls; bad tool fields are 400.
import json
import os

from specd_e2e import Fail, Server, check, main, skip

try:
    import jsonschema
except ImportError:  # pragma: no cover
    jsonschema = None

TDIR = os.path.join(os.environ.get("SPECD_SRC", "."), "..", "shared", "reference", "chat-templates")
FORMATS = [
    ("Qwen-Qwen2.5-7B-Instruct.jinja", "hermes"),
    ("meta-llama-Llama-3.1-8B-Instruct.jinja", "llama3"),
    ("mistralai-Mistral-Nemo-Instruct-2407.jinja", "mistral"),
    ("meetkai-functionary-medium-v3.1.jinja", "functionary-v3.1"),
    ("fireworks-ai-llama-3-firefunction-v2.jinja", "firefunction"),
]
WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Get the weather in a city",
    "parameters": {"type": "object", "properties": {
        "city": {"type": "string", "maxLength": 8},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
        "required": ["city", "unit"], "additionalProperties": False}}}
SEARCH = {"type": "function", "function": {
    "name": "search", "description": "Search",
    "parameters": {"type": "object", "properties": {"q": {"type": "string", "maxLength": 6}},
                   "required": ["q"], "additionalProperties": False}}}


def chat(srv, body, timeout=120):
    st, _, raw = srv.http("POST", "/v1/chat/completions", body, timeout=timeout)
    try:
        return st, json.loads(raw)
    except ValueError:
        return st, raw


def check_call(call, tool):
    check(call["type"] == "function" and call["id"], "tool call shape: %r" % call)
    fn = call["function"]
    check(fn["name"] == tool["function"]["name"], "called %r, want %r" % (fn["name"], tool["function"]["name"]))
    args = json.loads(fn["arguments"])
    jsonschema.validate(args, tool["function"]["parameters"])
    return args


def run():
    if jsonschema is None:
        skip("python3-jsonschema is not installed")
    if not os.path.isdir(TDIR):
        skip("no reference chat templates in %s" % TDIR)
    results = []
    for tname, fmt in FORMATS:
        path = os.path.join(TDIR, tname)
        with Server(extra=["--chat-template", path]) as srv:
            check(("tool calls: %s" % fmt) in srv.stderr_tail(), "%s: server does not report format %s: %s"
                  % (tname, fmt, srv.stderr_tail()[-400:]))
            user = {"role": "user", "content": "What is the weather in Paris?"}
            # the template renders the tools
            st, _, raw = srv.http("POST", "/apply-template", {"messages": [user], "tools": [WEATHER]})
            check(st == 200, "%s: /apply-template %d %s" % (tname, st, raw))
            prompt = json.loads(raw)["prompt"]
            check("get_weather" in prompt and "Paris" in prompt, "%s: tools not rendered: %r" % (tname, prompt[:300]))
            # required: a well-formed call
            body = {"messages": [user], "tools": [WEATHER, SEARCH], "tool_choice": "required", "max_tokens": 300,
                    "temperature": 0}
            st, r = chat(srv, body)
            check(st == 200, "%s: required: %d %s" % (tname, st, r))
            ch = r["choices"][0]
            check(ch["finish_reason"] == "tool_calls", "%s: finish_reason %r: %r" % (tname, ch["finish_reason"], ch))
            calls = ch["message"]["tool_calls"]
            check(len(calls) >= 1, "%s: no tool calls" % tname)
            tool = WEATHER if calls[0]["function"]["name"] == "get_weather" else SEARCH
            args = check_call(calls[0], tool)
            # the loop: the call, its result, the final answer
            msgs = [user, {"role": "assistant", "content": None, "tool_calls": [calls[0]]},
                    {"role": "tool", "tool_call_id": calls[0]["id"], "name": calls[0]["function"]["name"],
                     "content": "21 degrees and sunny"}]
            st, r2 = chat(srv, {"messages": msgs, "tools": [WEATHER, SEARCH], "tool_choice": "none",
                                "max_tokens": 24, "temperature": 0})
            check(st == 200, "%s: final answer: %d %s" % (tname, st, r2))
            fin = r2["choices"][0]
            check(fin["finish_reason"] in ("stop", "length") and isinstance(fin["message"]["content"], str)
                  and "tool_calls" not in fin["message"], "%s: final answer %r" % (tname, fin))
            # a named function
            st, r3 = chat(srv, {"messages": [user], "tools": [WEATHER, SEARCH], "max_tokens": 300, "temperature": 0.8,
                                "seed": 7, "tool_choice": {"type": "function", "function": {"name": "search"}}})
            check(st == 200 and r3["choices"][0]["finish_reason"] == "tool_calls", "%s: named: %s" % (tname, r3))
            check_call(r3["choices"][0]["message"]["tool_calls"][0], SEARCH)
            # streamed
            st, _, raw = srv.http("POST", "/v1/chat/completions", dict(body, stream=True), timeout=120)
            check(st == 200, "%s: stream %d" % (tname, st))
            deltas, reasons = [], []
            for line in raw.decode().split("\n") if isinstance(raw, bytes) else raw.split("\n"):
                if line.startswith("data: {"):
                    ev = json.loads(line[6:])
                    for c in ev.get("choices", []):
                        deltas += c.get("delta", {}).get("tool_calls", [])
                        if c.get("finish_reason"):
                            reasons.append(c["finish_reason"])
            check(deltas and deltas[0]["index"] == 0 and reasons == ["tool_calls"],
                  "%s: stream deltas %r reasons %r" % (tname, deltas, reasons))
            check_call(deltas[0], WEATHER if deltas[0]["function"]["name"] == "get_weather" else SEARCH)
            results.append("%-50s %-17s call %s(%s) -> final %r" % (tname, fmt, calls[0]["function"]["name"],
                                                                  json.dumps(args), fin["message"]["content"][:30]))
    # bad tool fields (any template)
    with Server(extra=["--chat-template", os.path.join(TDIR, FORMATS[0][0])]) as srv:
        user = {"role": "user", "content": "hi"}
        for bad, what in [({"tool_choice": "required"}, "required without tools"),
                          ({"tools": [{"type": "function"}]}, "tool without function"),
                          ({"tools": [WEATHER], "tool_choice": {"type": "function", "function": {"name": "nope"}}},
                           "unknown named function"),
                          ({"tools": [WEATHER], "tool_choice": "sometimes"}, "bad tool_choice")]:
            st, r = chat(srv, dict({"messages": [user], "max_tokens": 4}, **bad))
            check(st == 400, "%s: status %d %s" % (what, st, r))
    for line in results:
        print(line)


if __name__ == "__main__":
    main(run)
