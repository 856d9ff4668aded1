#!/usr/bin/env python3
"""check_layers.py — the dependency arrows point down (DESIGN.md section 2).

Fails (exit 1, naming file:line) on:
  * an include from kernels/ or policy/ into anything but their own folder
    (both are leaves: kernels may include kernels/, policy may include policy/);
  * an include from engine/ into gateway/ or cli/, or from gateway/ into cli/;
  * an include from engine/ or gateway/ of a backend's own files
    (kernels/cpu/, kernels/cuda/): they compute through the backend table
    (kernels/backend.h), training included;
  * a cycle inside gateway/ between modules (a module is NAME.c + NAME.h; an
    include of "gateway/B.h" from A.c or A.h is an arrow A -> B), and any
    header include cycle in the tree.
  * engine/engine.h including anything of the project but policy/ headers: the
    public API stands alone. The value types it hands out (failure kinds,
    sampler_config, spec_stats, tree_shape, ...) are defined in it, and the
    internal headers that compute on them include it (sqlite3.h's pattern), so
    engine.h is the bottom of the engine's headers, a leaf like errkind.h;
  * inside engine/, an include against the folder order below (a folder may
    include its own files, the leaves engine/engine.h, engine/util.h and
    engine/errkind.h, and the folders listed for it):
      gguf, sample          (nothing of the engine)
      tokenizer, model      gguf
      chat, grammar         tokenizer, gguf
      spec                  model, sample, grammar, tokenizer, gguf
      spec/proposers        spec and what spec may include
      telemetry             spec and below
      train                 proposers and below (the training library)
      sched                 everything but train (the engine object, its threads)
      engine.h, engine_names.c, engine_api.c   the public API: what it hands out
  * gateway/ including anything of the engine but engine/engine.h, or of
    kernels/ but the two leaf utilities kernels/clock.h (the one monotonic
    clock) and kernels/check.h (the one assert macro), which compute nothing;
    and a gateway/ call into engine/ of a function engine.h does not declare
    (a local prototype does not make an internal function public);
  * cli/ likewise: a cli file may include cli/, policy/, engine/engine.h,
    gateway/server.h (the server `specd serve` runs) and the two kernels leaf
    utilities, and call into engine/ only what engine.h declares — except the
    developer tools in CLI_TOOLS below, each listed with the internal headers
    it may include and why (a tool of an internal library: verify, the
    trainers, mkmodel, bench --kernels, ...). A serving command (serve,
    generate, bench --concurrency/--trees/--multi-turn) is not in that list.
Calls are arrows too: a call from one file to a function another file
defines (non-static definitions, found by a regular expression over the
sources; a name defined in two places is ignored) is checked like an include
of that file, for the engine folders' order and the gateway's module cycles
(http.c and monitor.c called each other until the connection guards moved to
guard.c). Only quoted includes of project paths ("dir/file.h") are read;
system headers are not arrows. Run from anywhere: the source root is SPECD_SRC or ../.

No exceptions: the gateway's old gw.h <-> server.h cycle went with issue 22
item 3 (conn.h is the bottom layer, gw_config lives in server_config.h)."""
import os
import re
import sys

SRC = os.environ.get("SPECD_SRC") or os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
DIRS = ["kernels", "policy", "engine", "gateway", "cli"]
# folder -> folders it must not include
FORBIDDEN = {
    "kernels": {"engine", "gateway", "cli", "policy", "tests"},
    "policy": {"engine", "gateway", "cli", "kernels", "tests"},
    "engine": {"gateway", "cli", "tests"},
    "gateway": {"cli", "tests"},
}
KNOWN_CYCLES = []  # cycles printed but not failing; keep it empty
# what a gateway/ or cli/ file may include of the folders below it (and cli/'s own, policy/, gateway/'s own)
KERNEL_LEAVES = {"kernels/clock.h", "kernels/check.h"}
PUBLIC = {"engine/engine.h"} | KERNEL_LEAVES
CLI_PUBLIC = PUBLIC | {"gateway/server.h"}
# cli files that are tools of an internal library: the include prefixes each may
# use beyond CLI_PUBLIC, and why. Everything else in cli/ serves through engine.h.
CLI_TOOLS = {
    "cli/cmd_verify.c": ({"engine/spec/", "engine/grammar/", "engine/sample/", "gateway/json_schema.h"},
                         "specd verify, the distribution-equivalence harness: drives spec_pair/spec_seq, the tree "
                         "proposers and the sampler's RNG directly, with broken variants the engine never runs"),
    "cli/cmd_train.c": ({"engine/gguf/", "engine/tokenizer/", "engine/train/"},
                        "specd train / train-tokenizer: the training library's front end"),
    "cli/cmd_train_medusa.c": ({"engine/train/", "engine/spec/spec.h", "engine/spec/proposers/pair_load.h",
                                "engine/util.h"},
                               "specd train-medusa: the Medusa trainer of the training library"),
    "cli/cmd_distill_draft.c": ({"engine/model/", "engine/tokenizer/", "engine/train/", "engine/util.h"},
                                "specd distill-draft: the training library's distillation"),
    "cli/cmd_serve.c": ({"engine/train/learner.h"},
                        "specd serve --learn starts the background trainer of the training library (which only "
                        "the CLI links; it talks to the engine through engine.h)"),
    "cli/cmd_train_eagle.c": ({"engine/model/", "engine/tokenizer/", "engine/train/", "engine/util.h", "kernels/ggml_type.h"},
                              "specd train-eagle: the training library's EAGLE-3 head trainer"),
    "cli/train_prompts.c": ({"engine/model/", "engine/tokenizer/", "engine/util.h"},
                            "the distilling trainers' shared front (distill-draft, train-eagle): corpus prompts, data options, the target"),
    "cli/train_prompts.h": ({"engine/model/", "engine/tokenizer/"}, "its contract: prompts and the target they are for"),
    "cli/cmd_convert.c": ({"engine/gguf/"},
                          "specd convert-eagle3: reads a published head and writes the GGUF side file, a tool of the "
                          "GGUF library"),
    "cli/cmd_eval.c": ({"engine/model/"},
                       "specd eval: raw logits of model_forward (and prefill-then-decode with --split) for the "
                       "forward pass's reference tests; a tool of the model library, no engine involved"),
    "cli/cmd_bench.c": ({"engine/model/", "kernels/"},
                        "specd bench without --concurrency/--multi-turn/--kernels: the model-level decode benchmark "
                        "(model_forward against the roofline, the backends' per-op profiles, the CUDA copy probe); "
                        "its engine paths are bench_engine.c and bench_chat.c, which serve through engine.h"),
    "cli/bench_kernels.c": ({"engine/gguf/", "kernels/"},
                            "specd bench --kernels: the CPU matmul kernels alone, per type and SIMD level"),
    "cli/cmd_tokenize.c": ({"engine/gguf/", "engine/tokenizer/", "gateway/openai_response.h"},
                           "specd tokenize/detokenize: a tool of the tokenizer (reads only the vocabulary from the "
                           "GGUF, no model; --splits runs the pre-tokenizer alone for tests/tokenizer's references)"),
    "cli/cmd_pull.c": ({"engine/gguf/"}, "specd pull / models: reads the GGUF headers of downloaded files"),
    "cli/gguf_split.c": ({"engine/gguf/"}, "specd gguf-split: splits and merges GGUF files"),
}
# mkmodel, the GGUF model writer (its own library, linked by specd and the tests that build models)
for _f in ("mkmodel.h", "mkmodel_internal.h", "mkmodel.c", "mkmodel_common.c", "mkmodel_quant.c", "mkmodel_vocab.c",
           "mkmodel_widen.c", "cmd_mkmodel.c"):
    CLI_TOOLS["cli/" + _f] = ({"engine/gguf/", "engine/util.h", "kernels/ggml_type.h"},
                              "mkmodel, the GGUF model writer library: writes GGUF files through the gguf writer")


def tool_allows(rel, path):
    """Whether cli tool rel may include (or call into) path: a folder prefix of
    CLI_TOOLS[rel], or the .h/.c pair of a listed header."""
    tool = CLI_TOOLS.get(rel)
    return bool(tool) and any(path.startswith(pre) or (pre.endswith(".h") and path.rsplit(".", 1)[0] ==
                                                       pre.rsplit(".", 1)[0]) for pre in tool[0])

_BASE = {"engine/gguf"}
_TOK = _BASE | {"engine/tokenizer"}
_SPEC = _TOK | {"engine/model", "engine/sample", "engine/grammar"}
_PROP = _SPEC | {"engine/spec"}
# engine folder -> the engine folders it may include (besides itself and the leaves)
ENGINE_ALLOWED = {
    "engine/gguf": set(),
    "engine/sample": set(),
    "engine/tokenizer": _BASE,
    "engine/model": _BASE,
    "engine/chat": _TOK,
    "engine/grammar": _TOK,
    "engine/spec": _SPEC,
    "engine/spec/proposers": _PROP,
    "engine/telemetry": _PROP,
    "engine/learn": set(),
    "engine/train": _PROP | {"engine/spec/proposers", "engine/learn"},
    "engine/sched": _PROP | {"engine/spec/proposers", "engine/telemetry", "engine/chat", "engine", "engine/learn"},
    "engine": _PROP | {"engine/spec/proposers", "engine/telemetry", "engine/chat", "engine/sched"},
}
ENGINE_LEAVES = {"engine/engine.h", "engine/util.h", "engine/errkind.h"}
# Arrows against that order that are printed, not failed, each with the issue
# that removes it; keep it empty. (Issue 43 item 1 emptied it: the step and
# the pair no longer build or call the draft model or the lookup — their
# constructors run in proposers/pair_load.c and the pair reads the draft's
# model, pool and caches through the proposer table, drafter.h.)
KNOWN_ENGINE = {}


def engine_folder(path):
    """engine/spec/proposers for engine/spec/proposers/x.c, engine/model for
    engine/model/kv.h, engine for engine/engine.h; None outside engine/."""
    parts = path.split("/")
    if parts[0] != "engine":
        return None
    if len(parts) == 2:
        return "engine"
    if parts[1] == "spec" and len(parts) > 3:
        return "engine/spec/" + parts[2]
    return "engine/" + parts[1]
INC = re.compile(r'^\s*#\s*include\s+"([^"]+)"')


def sources():
    for d in DIRS:
        for root, _, files in os.walk(os.path.join(SRC, d)):
            for f in sorted(files):
                if f.endswith((".c", ".h", ".cu", ".cuh")):
                    p = os.path.join(root, f)
                    yield os.path.relpath(p, SRC).replace(os.sep, "/")


def includes(rel):
    out = []
    with open(os.path.join(SRC, rel), encoding="utf-8", errors="replace") as fh:
        for n, line in enumerate(fh, 1):
            m = INC.match(line)
            if m and "/" in m.group(1):
                out.append((n, m.group(1)))
    return out


DEF = re.compile(r"^([A-Za-z_][\w \t\*]*?)\b(\w+)\s*\(([^;{}()]|\([^()]*\))*\)\s*\{", re.M)
KEYWORDS = {"if", "for", "while", "switch", "return", "sizeof", "do", "else"}


def strip_comments(text):
    text = re.sub(r"/\*.*?\*/", lambda m: "\n" * m.group(0).count("\n"), text, flags=re.S)
    text = re.sub(r"//[^\n]*", "", text)
    return re.sub(r'"(\\.|[^"\\\n])*"', '""', text)


def call_arrows(files):
    """(file, line, callee's file) for every call into another file's
    non-static function. files: relative paths of .c sources."""
    text = {f: strip_comments(open(os.path.join(SRC, f), encoding="utf-8", errors="replace").read()) for f in files}
    where = {}
    for f, t in text.items():
        for m in DEF.finditer(t):
            if "static" in m.group(1) or m.group(2) in KEYWORDS:
                continue
            where.setdefault(m.group(2), set()).add(f)
    owner = {n: next(iter(fs)) for n, fs in where.items() if len(fs) == 1}
    if not owner:
        return []
    call = re.compile(r"\b(" + "|".join(sorted(owner, key=len, reverse=True)) + r")\s*\(")
    out = []
    for f, t in text.items():
        for m in call.finditer(t):
            g = owner[m.group(1)]
            if g != f:
                out.append((f, t.count("\n", 0, m.start()) + 1, g, m.group(1)))
    return out


def public_functions():
    """Names of the functions engine/engine.h declares (and defines inline)."""
    text = strip_comments(open(os.path.join(SRC, "engine/engine.h"), encoding="utf-8").read())
    text = re.sub(r"\{[^{}]*\}", ";", text)  # struct bodies and inline function bodies
    return {m.group(1) for m in re.finditer(r"\b(\w+)\s*\(", text)} - KEYWORDS


def find_cycles(graph):
    """Strongly connected components with more than one node (or a self-loop)."""
    index, low, stack, on, comps, counter = {}, {}, [], set(), [], [0]

    def strong(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = set()
            while True:
                w = stack.pop()
                on.discard(w)
                comp.add(w)
                if w == v:
                    break
            if len(comp) > 1 or v in graph.get(v, ()):
                comps.append(comp)

    sys.setrecursionlimit(10000)
    for v in sorted(graph):
        if v not in index:
            strong(v)
    return comps


def main():
    bad = []
    headers, modules = {}, {}
    n_files = n_arrows = known = 0
    for rel in sources():
        n_files += 1
        top = rel.split("/")[0]
        for line, inc in includes(rel):
            n_arrows += 1
            to = inc.split("/")[0]
            if to in FORBIDDEN.get(top, ()):
                bad.append(f"{rel}:{line}: {top}/ must not include {inc} (arrows point down: "
                           "gateway -> engine -> kernels; policy and kernels are leaves)")
            if top in ("engine", "gateway") and inc.startswith(("kernels/cpu/", "kernels/cuda/")):
                bad.append(f"{rel}:{line}: {top}/ must not include {inc} (a backend's own code: compute "
                           "through kernels/backend.h)")
            if top in ("gateway", "cli") and to in ("engine", "kernels", "gateway") and \
                    not (top == to == "gateway") and inc not in (CLI_PUBLIC if top == "cli" else PUBLIC):
                tool = CLI_TOOLS.get(rel) if top == "cli" else None
                if not tool_allows(rel, inc):
                    where = ("the gateway talks to the engine through engine.h" if top == "gateway" else
                             "it is not a developer tool in check_layers.py's CLI_TOOLS" if not tool else
                             f"CLI_TOOLS allows it {sorted(tool[0])} only")
                    bad.append(f"{rel}:{line}: {top}/ may include only engine/engine.h of the engine (and "
                               f"kernels/clock.h, kernels/check.h{', gateway/server.h' if top == 'cli' else ''}): "
                               f"{inc} ({where})")
            if rel == "engine/engine.h" and not inc.startswith("policy/"):
                bad.append(f"{rel}:{line}: the public API must stand alone: {inc} is not a policy/ header (define "
                           "the value type in engine.h and let the internal header include engine.h)")
            fa, fb = engine_folder(rel), engine_folder(inc)
            if fa and fb and fa != fb and inc not in ENGINE_LEAVES:
                if fa not in ENGINE_ALLOWED:
                    bad.append(f"{rel}: engine folder {fa} is not in check_layers.py's order: add it")
                elif fb not in ENGINE_ALLOWED[fa]:
                    why = KNOWN_ENGINE.get((rel, inc))
                    if why:
                        known += 1
                        print(f"known ({why}): {rel}:{line}: {fa} includes {inc}")
                    else:
                        bad.append(f"{rel}:{line}: {fa} must not include {inc} (engine folders: see the order "
                                   "in check_layers.py's docstring)")
            if rel.endswith((".h", ".cuh")) and inc.endswith((".h", ".cuh")):
                headers.setdefault(rel, set()).add(inc)
            if top == "gateway" and to == "gateway":
                a = rel.rsplit(".", 1)[0]
                b = inc.rsplit(".", 1)[0]
                if a != b:
                    modules.setdefault(a, set()).add(b)
    # calls: the engine folders' order and the gateway's modules, as includes are
    srcs = [r for r in sources() if r.endswith(".c") and r.split("/")[0] in ("engine", "gateway", "cli")]
    public = public_functions()
    n_calls = 0
    for rel, line, callee, name in call_arrows(srcs):
        n_calls += 1
        top = rel.split("/")[0]
        if top in ("gateway", "cli") and callee.startswith("engine/") and name not in public and \
                not (top == "cli" and rel in CLI_TOOLS):  # a tool calls what its internal headers declare
            bad.append(f"{rel}:{line}: {top}/ calls {name} of {callee}, which engine/engine.h does not declare "
                       "(the engine's callers use its public API only)")
        fa, fb = engine_folder(rel), engine_folder(callee)
        # the training library's background trainer (learner.c) is a caller of the engine like the CLI: it may
        # call what engine/engine.h declares, wherever that is defined
        if fa == "engine/train" and name in public:
            continue
        if fa and fb and fa != fb and fa in ENGINE_ALLOWED and fb not in ENGINE_ALLOWED[fa]:
            inc = callee.rsplit(".", 1)[0] + ".h"
            why = KNOWN_ENGINE.get((rel, inc))
            if why:
                known += 1
                print(f"known ({why}): {rel}:{line}: {fa} calls {name} ({callee})")
            else:
                bad.append(f"{rel}:{line}: {fa} must not call {name} of {callee} (engine folders: see the order "
                           "in check_layers.py's docstring)")
        if rel.startswith("gateway/") and callee.startswith("gateway/"):
            modules.setdefault(rel.rsplit(".", 1)[0], set()).add(callee.rsplit(".", 1)[0])
    for comp in find_cycles(headers):
        bad.append("header include cycle: " + " -> ".join(sorted(comp)))
    for comp in find_cycles(modules):
        if any(comp == k for k in KNOWN_CYCLES):
            known += 1
            print("known (issue 22 item 3, not yet split): gateway module cycle " + " <-> ".join(sorted(comp)))
            continue
        bad.append("gateway module cycle: " + " <-> ".join(sorted(comp)))
    for b in bad:
        print("FAIL: " + b)
    print(f"{n_files} files, {n_arrows} project includes, {n_calls} calls across files, {len(bad)} upward/cyclic, "
          f"{known} known")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
