#!/usr/bin/env python3
"""check_layers.py — the dependency arrows point down (DESIGN.md section 2).

Fails (exit 1, naming file:line) on:
  * an include from kernels/ or policy/ into anything but their own folder
    (both are leaves: kernels may include kernels/, policy may include policy/);
  * an include from engine/ into gateway/ or cli/, or from gateway/ into cli/;
  * a cycle inside gateway/ between modules (a module is NAME.c + NAME.h; an
    include of "gateway/B.h" from A.c or A.h is an arrow A -> B), and any
    header include cycle in the tree.
Only quoted includes of project paths ("dir/file.h") are read; system headers
are not arrows. Run from anywhere: the source root is SPECD_SRC or ../.

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
    n_files = n_arrows = 0
    for rel in sources():
        n_files += 1
        top = rel.split("/")[0]
        for line, inc in includes(rel):
            n_arrows += 1
            to = inc.split("/")[0]
            if to in FORBIDDEN.get(top, ()):
                bad.append(f"{rel}:{line}: {top}/ must not include {inc} (arrows point down: "
                           "gateway -> engine -> kernels; policy and kernels are leaves)")
            if rel.endswith((".h", ".cuh")) and inc.endswith((".h", ".cuh")):
                headers.setdefault(rel, set()).add(inc)
            if top == "gateway" and to == "gateway":
                a = rel.rsplit(".", 1)[0]
                b = inc.rsplit(".", 1)[0]
                if a != b:
                    modules.setdefault(a, set()).add(b)
    for comp in find_cycles(headers):
        bad.append("header include cycle: " + " -> ".join(sorted(comp)))
    known = 0
    for comp in find_cycles(modules):
        if any(comp == k for k in KNOWN_CYCLES):
            known += 1
            print("known (issue 22 item 3, not yet split): gateway module cycle " + " <-> ".join(sorted(comp)))
            continue
        bad.append("gateway module cycle: " + " <-> ".join(sorted(comp)))
    for b in bad:
        print("FAIL: " + b)
    print(f"{n_files} files, {n_arrows} project includes, {len(bad)} upward/cyclic, {known} known")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
