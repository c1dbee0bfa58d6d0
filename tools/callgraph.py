#!/usr/bin/python3
"""Which source file calls which, from the object files' symbol tables, and
whether any of them call each other in a loop.

    python3 tools/callgraph.py [-x EXCEPTIONS] BUILD_DIR OBJECT...

Each OBJECT (BUILD_DIR/src/x/y.o, from src/x/y.c) defines some global
symbols (nm: functions, tables) and uses others (nm: U). File A uses file B
when A uses a symbol B defines; a cycle is a set of files each reaching all
the others through such uses (a strongly connected component). Every cycle is
printed with the uses inside it.

EXCEPTIONS lists uses "A B" (A uses B, one a line, # comments) that are known
to close a cycle in code someone else is still to untangle. The check fails
(exit 1) when a cycle remains with those uses left out, or when a listed use
no longer exists or no longer closes a cycle (then it is to be deleted from
the list): new cycles fail, and the list only shrinks.
"""
import argparse
import collections
import os
import subprocess
import sys


def symbols(obj):
    """(defined, used) global symbol names of one object file."""
    out = subprocess.run(["nm", "-P", "-g", obj], capture_output=True, text=True, check=True).stdout
    defined, used = set(), set()
    for line in out.splitlines():
        f = line.split()
        if len(f) >= 2:
            (used if f[1] in "Uw" else defined).add(f[0])
    return defined, used


def file_graph(build, objs):
    """{user file: {defining file: {symbols}}} over the objects given."""
    owner, uses = {}, {}
    for o in objs:
        src = os.path.splitext(os.path.relpath(o, build))[0] + ".c"
        defined, used = symbols(o)
        for s in defined:
            owner[s] = src
        uses[src] = used
    g = {f: collections.defaultdict(set) for f in uses}
    for f, used in uses.items():
        for s in used:
            if s in owner and owner[s] != f:
                g[f][owner[s]].add(s)
    return g


def cycles(g):
    """The strongly connected components of more than one file (Tarjan)."""
    index, low, stack, on, out = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(g[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in sorted(g):
        if v not in index:
            visit(v)
    return out


def one_loop(g, comp):
    """A path around a component: from its first file back to it."""
    inside, start = set(comp), comp[0]
    prev, todo = {start: None}, [start]
    while todo:
        v = todo.pop(0)
        for w in sorted(g[v]):
            if w == start:
                path = [v]
                while prev[path[-1]] is not None:
                    path.append(prev[path[-1]])
                return path[::-1] + [start]
            if w in inside and w not in prev:
                prev[w] = v
                todo.append(w)
    return comp


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-x", dest="exceptions", help="uses allowed to close a cycle")
    ap.add_argument("build")
    ap.add_argument("objects", nargs="+")
    a = ap.parse_args()
    g = file_graph(a.build, a.objects)
    allowed = []
    if a.exceptions:
        with open(a.exceptions) as f:
            for line in f:
                line = line.split("#")[0].split()
                if line:
                    allowed.append(tuple(line))
    n_uses = sum(len(d) for d in g.values())
    print(f"callgraph: {len(g)} files, {n_uses} uses between them")
    comps = cycles(g)
    for comp in comps:
        print("cycle: " + " -> ".join(one_loop(g, comp)))
        for f in comp:
            for d in sorted(g[f]):
                if d in comp:
                    syms = sorted(g[f][d])
                    more = f" (+{len(syms) - 4})" if len(syms) > 4 else ""
                    print(f"    {f} -> {d}: {' '.join(syms[:4])}{more}")
    bad = False
    in_cycle = {f: i for i, comp in enumerate(comps) for f in comp}
    for u, d in allowed:
        if d not in g.get(u, {}) or in_cycle.get(u, -1) != in_cycle.get(d, -2):
            print(f"callgraph: stale exception {u} {d} (no such use, or it closes no cycle): delete it")
            bad = True
    for u, d in allowed:
        if u in g:
            g[u].pop(d, None)
    for comp in cycles(g):
        print("callgraph: cycle not in the exceptions: " + " -> ".join(one_loop(g, comp)))
        bad = True
    if not bad:
        print(f"callgraph: no cycles but the {len(allowed)} excepted uses" if allowed else
              "callgraph: no cycles")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
