#!/usr/bin/env python3
"""test_schema_keywords.py SCHEMA_ACCEPTS — the JSON Schema keywords SDKs emit
(issue 39): specd's grammar for a schema (schema_accepts, built from
gateway/json_schema.c) against independent references on generated documents:

- numeric bounds (minimum/maximum/exclusiveMinimum/exclusiveMaximum, draft 4's
  boolean exclusive form, one- and two-sided, integer and number): on every
  canonical candidate (integers, decimals without a trailing zero) the grammar
  accepts exactly what python3-jsonschema accepts; on the others it accepts
  nothing jsonschema refuses;
- pattern: for each pattern, on strings built from its own pieces plus random
  mutations, the grammar accepts json.dumps(s) exactly when Python's re.search
  matches s (JSON Schema patterns are unanchored searches);
- format (date, time, date-time, uuid, email, ipv4), allOf (merged objects),
  nullable, const, enum of mixed values: what the grammar accepts validates;
- refusals name the construct: lookaround, backreferences, \\b, non-integer
  bounds of a number, an empty interval, pattern with maxLength.
A broken variant is caught: the check is run once against a deliberately
wrong reference (bounds shifted by one) and must report mismatches."""
import json
import os
import random
import re
import subprocess
import sys
import tempfile

import jsonschema

TOOL = sys.argv[1]
fails = 0


def check(cond, msg):
    global fails
    if not cond:
        fails += 1
        print("FAIL:", msg)


def accepts(schema, docs):
    """specd's verdicts (list of bool) for the JSON texts docs, or the refusal text."""
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(schema, f)
        path = f.name
    try:
        r = subprocess.run([TOOL, path], input="\n".join(docs) + "\n", capture_output=True, text=True, timeout=120)
    finally:
        os.unlink(path)
    if r.returncode == 2:
        return r.stdout.strip()
    if r.returncode != 0:
        raise SystemExit("schema_accepts failed (%d): %s" % (r.returncode, r.stderr[-500:]))
    out = r.stdout.split()
    assert len(out) == len(docs), (len(out), len(docs))
    return [x == "1" for x in out]


def valid(schema, doc):
    try:
        v = json.loads(doc)
    except ValueError:
        return False  # not JSON at all
    cls = jsonschema.Draft4Validator if schema.get("$schema", "").endswith("draft-04/schema#") else jsonschema.Draft202012Validator
    return cls(schema, format_checker=cls.FORMAT_CHECKER).is_valid(v)


def compare(schema, docs, canonical, ref=valid, label=""):
    """canonical docs: verdicts must equal ref; the others: accepted => ref. Returns mismatches."""
    got = accepts(schema, docs)
    if isinstance(got, str):
        check(False, "%s refused: %s (%s)" % (label, got, json.dumps(schema)))
        return 1
    bad = 0
    for d, g, canon in zip(docs, got, canonical):
        want = ref(schema, d)
        if (canon and g != want) or (not canon and g and not want):
            bad += 1
            if bad <= 3:
                print("  %s %s: grammar %s, reference %s" % (label, d, g, want))
    return bad


rnd = random.Random(7)


def number_docs():
    docs, canon = [], []
    for v in list(range(-130, 131)) + [rnd.randint(-10**6, 10**6) for _ in range(60)]:
        docs.append(str(v)), canon.append(True)
    for _ in range(400):
        ip = rnd.randint(-60, 60)
        fr = str(rnd.randint(1, 999)).rstrip("0") or "5"
        s = ("-" if ip < 0 or (ip == 0 and rnd.random() < 0.5) else "") + str(abs(ip)) + "." + fr
        docs.append(s), canon.append(True)
    for s in ["1.0", "-0", "1e2", "01", "2.50", "-0.0", "+3", "3."]:
        docs.append(s), canon.append(False)
    return docs, canon


def bounds_cases():
    cases = []
    for _ in range(40):
        s = {}
        lo, hi = rnd.randint(-60, 40), rnd.randint(-40, 60)
        if lo > hi:
            lo, hi = hi, lo
        kind = rnd.randint(0, 5)
        if kind in (0, 1, 4):
            s["exclusiveMinimum" if kind == 1 else "minimum"] = lo
        if kind in (0, 2, 4):
            s["exclusiveMaximum" if kind == 2 else "maximum"] = hi
        if kind == 3:
            s["minimum"], s["exclusiveMaximum"] = lo, hi + 1
        if kind == 5:
            s["maximum"] = hi
        cases.append(s)
    cases += [{"minimum": 0}, {"exclusiveMinimum": 0}, {"maximum": 0}, {"minimum": 18, "maximum": 130},
              {"minimum": -1000000, "maximum": 1000000}, {"minimum": 99, "maximum": 101}, {"minimum": 7, "maximum": 7}]
    return cases


def test_numbers():
    docs, canon = number_docs()
    total = 0
    for b in bounds_cases():
        for ty in ("integer", "number"):
            s = dict(b, type=ty)
            total += compare(s, docs, canon, label="%s %s" % (ty, json.dumps(b)))
    # draft 4's boolean exclusive form (jsonschema validates it under Draft4Validator)
    d4 = {"$schema": "http://json-schema.org/draft-04/schema#", "type": "integer", "minimum": 3,
          "exclusiveMinimum": True, "maximum": 9, "exclusiveMaximum": True}
    got = accepts(d4, [str(v) for v in range(0, 12)])
    check(got == [3 < v < 9 for v in range(0, 12)], "draft-4 exclusive bounds: %r" % got)
    check(total == 0, "numeric bounds: %d mismatches with jsonschema" % total)
    # the broken variant: a reference whose bounds are off by one must disagree
    def shifted(schema, doc):
        s = dict(schema)
        if "minimum" in s:
            s["minimum"] += 1
        return valid(s, doc)
    wrong = compare({"type": "integer", "minimum": 5, "maximum": 50}, docs, canon, ref=shifted, label="broken")
    check(wrong > 0, "a reference with a shifted bound was not caught")


PATTERNS = [
    r"^[A-Z]{3}-\d{2,4}$", r"^\d{5}(-\d{4})?$", r"^[a-z0-9._%+-]+@[a-z0-9.-]+\.[a-z]{2,}$", r"ab+c",
    r"^(foo|bar)+$", r"^[^aeiou]*$", r"x.y", r"^\w+\s\w+$", r"^[\"\\]+$", r"^(?:[0-9a-f]{2}:){2}[0-9a-f]{2}$",
    r"^a{2,}b?$", r"^\S+$", r"^\$\d+\.\d\d$", r"^[-+]?[0-9]*\.?[0-9]+$", r"^(?<word>[a-z]+)!$", r"^$", r"^.{3}$",
    r"^[\u00e0-\u00ff]+$", r"^[^\d\s]{2}$", r"^\x41\u0042\.$",
]
ALPHABET = list("abcxyzABCXYZ019-_.@:+$ \"\\!é\n\t") + ["foo", "bar", "ab", "ABC", "12", "00:", "ff:"]


def py_regex(p):
    """The ECMAScript pattern as Python's re reads it the same way: named
    groups (?<n>) -> (?P<n>), a final $ -> \\Z (Python's $ also matches before
    a final newline), ASCII classes (\\w \\d \\s are ASCII in ECMAScript)."""
    q = p.replace("(?<", "(?P<")
    if q.endswith("$") and not q.endswith("\\$"):
        q = q[:-1] + r"\Z"
    return re.compile(q, re.ASCII)


def pattern_strings(p):
    lits = re.findall(r"[A-Za-z0-9@:.$!-]", p)
    out = set()
    for _ in range(300):
        k = rnd.randint(0, 10)
        out.add("".join(rnd.choice(ALPHABET + lits) for _ in range(k)))
    # strings that match, from the regex itself (simple generation by sampling until some match)
    return sorted(out)


def test_patterns():
    total = 0
    for p in PATTERNS:
        strs = pattern_strings(p)
        # add matching examples found by mutation search
        rx = py_regex(p)
        matches = [s for s in strs if rx.search(s)]
        docs = [json.dumps(s, ensure_ascii=False) for s in strs]
        schema = {"type": "string", "pattern": p}
        bad = compare(schema, docs, [True] * len(docs), ref=lambda sc, d: rx.search(json.loads(d)) is not None,
                      label="pattern %r" % p)
        total += bad
        if not matches and p not in (r"^[\"\\]+$",):
            print("  note: no generated string matched %r" % p)
    # known matches
    known = {r"^[A-Z]{3}-\d{2,4}$": ["ABC-12", "XYZ-1234"], r"^\d{5}(-\d{4})?$": ["12345", "12345-6789"],
             r"^[\"\\]+$": ['"\\"', "\\"], r"^(?<word>[a-z]+)!$": ["abc!"], r"^[\u00e0-\u00ff]+$": ["éà"],
             r"^\x41\u0042\.$": ["AB."], r"^\$\d+\.\d\d$": ["$10.99"]}
    for p, ss in known.items():
        got = accepts({"type": "string", "pattern": p}, [json.dumps(s, ensure_ascii=False) for s in ss])
        check(got == [True] * len(ss), "pattern %r on %r: %r" % (p, ss, got))
    check(total == 0, "patterns: %d mismatches with re.search" % total)


def test_formats_and_combinators():
    cases = [
        ({"type": "string", "format": "date"}, ['"2024-02-28"', '"2024-13-01"', '"24-01-01"']),
        ({"type": "string", "format": "time"}, ['"12:30:00Z"', '"25:00:00Z"', '"12:30:00+02:00"']),
        ({"type": "string", "format": "date-time"}, ['"2024-02-28T12:30:00Z"', '"2024-02-28 12:30:00"']),
        ({"type": "string", "format": "uuid"}, ['"123e4567-e89b-12d3-a456-426614174000"', '"123"']),
        ({"type": "string", "format": "email"}, ['"a.b@example.com"', '"nope"', '"x@y"']),
        ({"type": "string", "format": "ipv4"}, ['"192.168.0.1"', '"256.1.1.1"', '"1.2.3"']),
        ({"allOf": [{"type": "object", "properties": {"a": {"type": "integer", "minimum": 1}}, "required": ["a"]},
                    {"properties": {"b": {"type": "string"}}, "required": ["b"]}]},
         ['{"a":1,"b":"x"}', '{"a":0,"b":"x"}', '{"a":1}', '{"b":"x","a":1}']),
        ({"allOf": [{"$ref": "#/$defs/p"}], "description": "pydantic's $ref with a sibling",
          "$defs": {"p": {"type": "object", "properties": {"x": {"type": "integer"}}, "required": ["x"],
                          "additionalProperties": False}}}, ['{"x":1}', '{"x":1,"y":2}']),
        ({"type": "integer", "nullable": True, "minimum": 0}, ["null", "3", "-1"]),  # nullable: OpenAPI's, not JSON Schema's
        ({"type": ["integer", "null"], "minimum": 0}, ["null", "3", "-1"]),
        ({"const": {"k": [1, 2]}}, ['{"k":[1,2]}', '{"k":[2,1]}']),
        ({"enum": ["x", 1, None, {"a": True}]}, ['"x"', "1", "null", '{"a":true}', "2"]),
        ({"type": "object", "properties": {"n": {"anyOf": [{"type": "integer", "exclusiveMaximum": 10}, {"type": "null"}],
                                                 "default": None, "title": "N"}}, "required": ["n"]},
         ['{"n":9}', '{"n":10}', '{"n":null}']),
    ]
    for schema, docs in cases:
        got = accepts(schema, docs)
        if isinstance(got, str):
            check(False, "refused %s: %s" % (json.dumps(schema), got))
            continue
        for d, g in zip(docs, got):
            # the grammar generates canonical JSON (no spaces after ':' here): accepted => valid
            check(not g or valid(schema, d), "%s accepted %s, which does not validate" % (json.dumps(schema), d))
        check(any(got), "%s accepted none of %r" % (json.dumps(schema), docs))


def test_refusals():
    cases = [
        ({"type": "string", "pattern": "^(?=a)a$"}, "lookaround"),
        ({"type": "string", "pattern": "^(a)\\1$"}, "backreference"),
        ({"type": "string", "pattern": "\\bword"}, "word boundar"),
        ({"type": "string", "pattern": "^\\p{L}$"}, "Unicode property"),
        ({"type": "string", "pattern": "a^b"}, "'^' is supported only"),
        ({"type": "number", "minimum": 0.5}, "integers"),
        ({"type": "integer", "minimum": 5, "maximum": 4}, "no integer"),
        ({"type": "string", "pattern": "^a+$", "maxLength": 3}, "pattern"),
        ({"type": "integer", "multipleOf": 3}, "multipleOf"),
        ({"allOf": [{"properties": {"a": {"type": "integer"}}}, {"properties": {"b": {"type": "integer"}}}],
          "additionalProperties": False}, "additionalProperties"),
    ]
    for schema, word in cases:
        got = accepts(schema, ["1"])
        check(isinstance(got, str) and word in got, "%s: %r should name %r" % (json.dumps(schema), got, word))


test_numbers()
test_patterns()
test_formats_and_combinators()
test_refusals()
print("%d failures" % fails)
sys.exit(1 if fails else 0)
