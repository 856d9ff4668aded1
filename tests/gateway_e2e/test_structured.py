# test_structured.py — constrained generation end to end through the OpenAI
# endpoints with the real pair (stories260K + llama2xs, speculation on):
# response_format json_object outputs parse as JSON objects; json_schema
# outputs validate against their schema with a real validator (jsonschema)
# over 200+ seeded runs of varied schemas, greedy and sampled; a GBNF
# `grammar` on /v1/completions; bad schemas and grammars answer 400 with the
# reason.
import json
import re

from specd_e2e import Fail, Server, check, main, skip

try:
    import jsonschema
except ImportError:  # pragma: no cover
    jsonschema = None

SCHEMAS = [
    {"type": "object", "properties": {"name": {"type": "string", "maxLength": 12}, "age": {"type": "integer"}},
     "required": ["name", "age"], "additionalProperties": False},
    {"type": "object", "properties": {"tags": {"type": "array", "items": {"type": "string", "maxLength": 8},
                                                "minItems": 1, "maxItems": 3},
                                       "ok": {"type": "boolean"}}, "required": ["tags"]},
    {"type": "object", "properties": {"color": {"enum": ["red", "green", "blue"]}, "n": {"type": "number"},
                                       "v": {"const": 3}}, "required": ["color", "v"]},
    {"type": "object", "properties": {"a": {"anyOf": [{"type": "null"}, {"type": "integer"}]},
                                       "b": {"type": ["string", "null"], "maxLength": 5},
                                       "c": {"type": "string", "format": "date"}}, "required": ["a", "c"]},
    {"$defs": {"node": {"type": "object", "properties": {"id": {"type": "integer"},
                                                           "kids": {"type": "array", "items": {"$ref": "#/$defs/node"},
                                                                    "maxItems": 2}},
                        "required": ["id"]}},
     "type": "object", "properties": {"root": {"$ref": "#/$defs/node"}}, "required": ["root"]},
    {"type": "object", "properties": {"x": {"type": "string", "minLength": 2, "maxLength": 4},
                                       "y": {"type": "object", "properties": {"z": {"type": "integer"}}}}},
    {"type": "object", "properties": {"id": {"type": "string", "format": "uuid"},
                                       "when": {"type": "string", "format": "date-time"}}, "required": ["id"]},
    {"type": "object", "additionalProperties": {"type": "integer"}},
]


def chat(srv, body):
    st, _, raw = srv.http("POST", "/v1/chat/completions", body, timeout=60)
    return st, json.loads(raw)


def run():
    if jsonschema is None:
        skip("python3-jsonschema is not installed")
    with Server() as srv:
        # JSON mode
        for k in range(24):
            body = {"messages": [{"role": "user", "content": "Write some JSON about a cat number %d" % k}],
                    "max_tokens": 40 + 10 * (k % 6), "temperature": 0 if k % 3 == 0 else 0.9, "seed": 100 + k,
                    "response_format": {"type": "json_object"}}
            st, r = chat(srv, body)
            check(st == 200, "json_object: status %d: %s" % (st, r))
            text = r["choices"][0]["message"]["content"]
            try:
                v = json.loads(text)
            except ValueError as e:
                raise Fail("json_object run %d: not JSON (%s): %r" % (k, e, text))
            check(isinstance(v, dict), "json_object run %d: not an object: %r" % (k, text))
        # JSON Schema: 8 schemas x 26 seeded runs
        n = 0
        spec_steps = 0
        for si, schema in enumerate(SCHEMAS):
            for k in range(26):
                body = {"messages": [{"role": "user", "content": "Tell me about the park"}],
                        "max_tokens": 48 + 16 * (k % 4), "temperature": 0 if k == 0 else 1.0, "seed": 7 * k + si,
                        "response_format": {"type": "json_schema",
                                            "json_schema": {"name": "s%d" % si, "schema": schema, "strict": True}}}
                st, r = chat(srv, body)
                check(st == 200, "schema %d: status %d: %s" % (si, st, r))
                text = r["choices"][0]["message"]["content"]
                try:
                    v = json.loads(text)
                    jsonschema.validate(v, schema, format_checker=jsonschema.FormatChecker())
                except (ValueError, jsonschema.ValidationError) as e:
                    raise Fail("schema %d run %d: %s: %r" % (si, k, str(e).splitlines()[0], text))
                spec_steps += r.get("speculation", {}).get("verify_steps", 0) or 0
                n += 1
        check(spec_steps > 0, "no constrained request speculated")
        print("%d schema runs valid, %d verify steps" % (n, spec_steps))
        # a GBNF grammar on /v1/completions
        g = 'root ::= item{2,3}\nitem ::= "- " [a-z ]{1,12} "\\n"\n'
        for k in range(6):
            st, _, raw = srv.http("POST", "/v1/completions", {"prompt": "List:", "max_tokens": 60, "grammar": g,
                                                              "temperature": 0.8, "seed": k})
            check(st == 200, "grammar: status %d: %s" % (st, raw[:300]))
            text = json.loads(raw)["choices"][0]["text"]
            check(re.fullmatch(r"(- [a-z ]{1,12}\n){2,3}", text), "grammar output %r" % text)
        # refusals name the reason
        bad = [
            ({"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema":
                                                                         {"type": "integer", "multipleOf": 3}}}},
             "'multipleOf' is not supported"),
            ({"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema":
                                                                         {"$ref": "#/$defs/missing"}}}},
             "does not name an entry"),
            ({"grammar": "root ::= foo"}, "line 1, column 10: undefined rule 'foo'"),
            ({"grammar": "root ::= root \"a\" | \"b\""}, "left recursion"),
            ({"response_format": {"type": "xml"}}, "must be text, json_object or json_schema"),
        ]
        for extra, want in bad:
            body = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 8}
            body.update(extra)
            st, r = chat(srv, body)
            check(st == 400, "%s: status %d" % (extra, st))
            check(want in r["error"]["message"], "%s: message %r lacks %r" % (extra, r["error"]["message"], want))


main(run)
