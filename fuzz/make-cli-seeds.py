#!/usr/bin/env python3
"""Write fuzz/corpus/cli/: the command lines of tests/cli/run.sh as fuzz-cli.c
reads them, one argument per line after "dnnmem". Model files become MODEL
(fuzz-cli's tiny Llama config) or CNN (a small ONNX CNN: ONNX files) so
each run stays small (a max-batch search of the bundled MXNet ResNet-18
takes 1 s in a release build, over the 10 s timeout instrumented: each
format's own target loads and estimates its models); files the test writes or reads become a name in the current
directory. Run from the repository: python3 fuzz/make-cli-seeds.py"""
import hashlib
import os
import re
import shlex

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "corpus", "cli")
SCRIPT = os.path.join(HERE, "..", "tests", "cli", "run.sh")


def lines():
    """The script's logical lines (continuations joined)."""
    cur = ""
    for raw in open(SCRIPT):
        raw = raw.rstrip("\n")
        if raw.endswith("\\"):
            cur += raw[:-1] + " "
            continue
        yield cur + raw
        cur = ""


def model(tok):
    if tok.endswith(".onnx"):
        return "CNN"
    if tok.startswith("tests/models/") or tok.startswith("tests/validation/"):
        return "MODEL"
    if tok.startswith("$T/") or tok.startswith("/tmp/"):
        return os.path.basename(tok)
    return tok


def expand(text, env):
    return re.sub(r"\$\{?([A-Z][A-Z0-9_]*)\}?", lambda v: env.get(v.group(1), "$" + v.group(1)),
                  text)


def main():
    env = {"M": "tests/models", "D": "dnnmem"}
    seeds = set()
    for line in lines():
        m = re.match(r"^([A-Z][A-Z0-9_]*)=(\S+|\"[^\"]*\")$", line.strip())
        if m:
            env[m.group(1)] = expand(m.group(2).strip('"'), env)
            continue
        m = re.match(r'^\s*expect \d+ (?:"(?:[^"\\]|\\.)*"|\'[^\']*\'|\S+) -- (.*)$', line)
        if not m:
            m = re.match(r'^.*?"\$D" ([^>|]*)', line)
        if not m:
            continue
        text = expand(m.group(1), env)
        try:
            args = shlex.split(text, comments=True)
        except ValueError:
            continue
        seeds.add("\n".join(model(a) for a in args))
    os.makedirs(OUT, exist_ok=True)
    for s in sorted(seeds):
        name = hashlib.sha1(s.encode()).hexdigest()[:16]
        with open(os.path.join(OUT, name), "w") as f:
            f.write(s)
    print("%d seeds in %s" % (len(seeds), OUT))


main()
