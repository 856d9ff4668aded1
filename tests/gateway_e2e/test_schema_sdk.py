# test_schema_sdk.py — the JSON Schemas SDKs emit, end to end (issue 39 item 3):
# the official OpenAI Node client (npm `openai`) sends schemas made by zod's
# zodResponseFormat (integer ranges, positive/nonnegative, enums, unions of
# literals, optional+nullable fields, arrays with bounds, nested objects,
# regex, uuid, date, email) and this script sends pydantic-style schemas
# ($defs/$ref, anyOf with null, ge/le/gt/lt, titles and defaults, constr
# patterns), seeded at temperature 1 on completions and chat. Every finished
# answer must validate with python3-jsonschema (and with zod itself, for the
# zod ones): 100 %.
import json
import os
import shutil
import subprocess

import jsonschema

from specd_e2e import CHAT, COMP, Server, check, main

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))

PYDANTIC = {
    "Invoice": {
        "$defs": {
            "Line": {"properties": {"sku": {"pattern": "^[a-z]{2}\\d{2}$", "title": "Sku", "type": "string"},
                                    "qty": {"exclusiveMinimum": 0, "maximum": 20, "title": "Qty", "type": "integer"},
                                    "price": {"minimum": 0, "maximum": 500, "title": "Price", "type": "number"}},
                     "required": ["sku", "qty", "price"], "title": "Line", "type": "object"}},
        "properties": {"number": {"title": "Number", "type": "integer", "ge": 1, "minimum": 1, "maximum": 9999},
                       "lines": {"items": {"$ref": "#/$defs/Line"}, "maxItems": 2, "minItems": 1, "title": "Lines",
                                 "type": "array"},
                       "memo": {"anyOf": [{"maxLength": 8, "type": "string"}, {"type": "null"}], "default": None,
                                "title": "Memo"},
                       "currency": {"enum": ["EUR", "USD"], "title": "Currency", "type": "string"}},
        "required": ["number", "lines", "currency"], "title": "Invoice", "type": "object"},
    "Reading": {
        "properties": {"sensor": {"format": "uuid", "title": "Sensor", "type": "string"},
                       "celsius": {"exclusiveMaximum": 60, "exclusiveMinimum": -40, "title": "Celsius", "type": "number"},
                       "ok": {"title": "Ok", "type": "boolean"},
                       "level": {"allOf": [{"$ref": "#/$defs/Level"}], "description": "how bad"}},
        "$defs": {"Level": {"enum": [1, 2, 3], "title": "Level", "type": "integer"}},
        "required": ["sensor", "celsius", "ok", "level"], "title": "Reading", "type": "object"},
}
# jsonschema does not know pydantic's 'ge' (an extra keyword): it is ignored there and refused by specd
PYDANTIC["Invoice"]["properties"]["number"].pop("ge")


def validator(schema):
    cls = jsonschema.Draft7Validator if "draft-07" in schema.get("$schema", "") else jsonschema.Draft202012Validator
    return cls(schema, format_checker=cls.FORMAT_CHECKER)


def run_zod(srv):
    node = shutil.which("node")
    mod = os.path.join(ROOT, "node_modules", "openai", "package.json")
    check(node is not None and os.path.exists(mod) and os.path.exists(os.path.join(ROOT, "node_modules", "zod")),
          "node and the npm packages openai + zod are needed (npm ci)")
    r = subprocess.run([node, os.path.join(HERE, "sdk_zod.mjs"), srv.base, "4"], capture_output=True, text=True,
                       timeout=600, cwd=ROOT)
    check(r.returncode == 0, "sdk_zod.mjs failed: %s" % r.stderr[-1500:])
    n = fin = 0
    for line in r.stdout.splitlines():
        o = json.loads(line)
        n += 1
        check("error" not in o, "%s seed %d: the client failed: %s" % (o["name"], o["seed"], o.get("error")))
        if "error" in o:
            continue
        check(o["finish"] in ("stop", "length"), "%s: finish %r" % (o["name"], o["finish"]))
        if o["finish"] != "stop":
            continue
        fin += 1
        doc = json.loads(o["content"])
        errs = sorted(validator(o["schema"]).iter_errors(doc), key=str)
        check(not errs, "%s seed %d: %s does not validate: %s" % (o["name"], o["seed"], o["content"], errs[:1]))
        check(o.get("zod_ok") is True, "%s seed %d: zod says %s" % (o["name"], o["seed"], o.get("zod_error")))
    print("zod via the OpenAI client: %d answers, %d finished, all valid" % (n, fin))
    check(n == 12 and fin >= 10, "zod: %d answers, %d finished" % (n, fin))


def run_pydantic(srv):
    n = fin = 0
    for name, schema in PYDANTIC.items():
        for path in (COMP, CHAT):
            for seed in range(1, 5):
                body = {"max_tokens": 400, "temperature": 1.0, "seed": seed,
                        "response_format": {"type": "json_schema", "json_schema": {"name": name, "schema": schema}}}
                if path == CHAT:
                    body["messages"] = [{"role": "user", "content": "A %s please." % name}]
                else:
                    body["prompt"] = "Here is the %s:" % name
                st, _, b = srv.http("POST", path, body, timeout=120)
                check(st == 200, "%s %s: %d %r" % (name, path, st, b[:300]))
                if st != 200:
                    continue
                ch = json.loads(b)["choices"][0]
                text = ch["text"] if path == COMP else ch["message"]["content"]
                n += 1
                if ch["finish_reason"] != "stop":
                    continue
                fin += 1
                errs = list(validator(schema).iter_errors(json.loads(text)))
                check(not errs, "%s: %s does not validate: %s" % (name, text, errs[:1]))
    print("pydantic-style: %d answers, %d finished, all valid" % (n, fin))
    check(fin >= n - 2, "pydantic-style: only %d of %d finished" % (fin, n))


def run_greedy(srv):
    """Constrained speculation is lossless: greedy answers equal plain decoding's."""
    for name, schema in PYDANTIC.items():
        rf = {"type": "json_schema", "json_schema": {"name": name, "schema": schema}}
        texts = []
        for spec in ({"mode": "off"}, {}, {"method": "ngram"}):
            st, _, b = srv.http("POST", COMP, {"prompt": "The %s:" % name, "max_tokens": 120, "temperature": 0,
                                               "response_format": rf, "speculation": spec})
            check(st == 200, "%s greedy %r: %d" % (name, spec, st))
            texts.append(json.loads(b)["choices"][0]["text"] if st == 200 else None)
        check(texts[0] == texts[1] == texts[2], "%s: greedy speculative %r differs from plain %r" % (name, texts[1:], texts[0]))


def run():
    with Server() as srv:
        run_greedy(srv)
        run_pydantic(srv)
        run_zod(srv)


if __name__ == "__main__":
    main(run)
