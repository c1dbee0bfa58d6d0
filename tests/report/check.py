#!/usr/bin/env python3
"""Checks of one HTML report as headless Chromium rendered it (tests/report/run.sh).

  check.py NAME PAGE.html DOM.html ZOOM.html AWAY.html TIMELINE.csv RESULT.json TEXT.txt COMMAND

DOM.html is the page's DOM after its script ran (chromium --dump-dom), ZOOM.html the
same opened at "#view=A-B" around the peak, AWAY.html at a view without it. The
expected values come from the timeline CSV, the JSON result (--by-module) and the
text output of the same estimate, not from the page. Prints one line per failed check
and exits 1 if any failed."""
import csv
import json
import re
import sys
from html.parser import HTMLParser

CATS = ["weights", "workspaces", "inputs", "activations", "saved for backward", "gradients",
        "optimizer state", "temporaries", "kv cache"]
JSON_KEYS = ["weights", "workspaces", "inputs", "activations", "saved", "gradients",
             "optimizer_state", "temporaries", "kv_cache"]


class Dom(HTMLParser):
    """Every element's tag, attributes and text (its own and its descendants')."""

    def __init__(self, text):
        super().__init__()
        self.elems, self.stack = [], []
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        e = {"tag": tag, "attrs": dict(attrs), "text": ""}
        self.elems.append(e)
        if tag not in ("br", "meta", "input", "img", "link", "line", "circle", "path"):
            self.stack.append(e)

    def handle_endtag(self, tag):
        while self.stack:
            if self.stack.pop()["tag"] == tag:
                break

    def handle_data(self, data):
        for e in self.stack:
            e["text"] += data

    def find(self, tag=None, **attrs):
        return [e for e in self.elems if (tag is None or e["tag"] == tag)
                and all(e["attrs"].get(k.replace("_", "-")) == v for k, v in attrs.items())]

    def by_id(self, i):
        found = [e for e in self.elems if e["attrs"].get("id") == i]
        return found[0] if found else None


def main():
    name, page, dom_f, zoom_f, away_f, csv_f, json_f, text_f, command = sys.argv[1:10]
    fails = []

    def check(ok, what):
        if not ok:
            fails.append(what)
            print(f"FAIL: report ({name}): {what}")

    html = open(page).read()
    dom, zoom, away = (Dom(open(f).read()) for f in (dom_f, zoom_f, away_f))
    rows = list(csv.DictReader(open(csv_f)))
    res = json.load(open(json_f))
    text = open(text_f).read()
    body = dom.find("body")[0]["attrs"]
    check(body.get("data-ready") == "1", "the script ran to the end")

    # self-contained: no address but the SVG namespace, no external script or style
    urls = set(re.findall(r"https?://[^\s\"'<>)]+", html))
    check(urls <= {"http://www.w3.org/2000/svg"}, f"no network addresses ({sorted(urls)[:3]})")
    check(not re.search(r"<script[^>]+src=|<link\b", html), "no external script or style")

    # the series that hold anything at some step, from the CSV
    def val(r, s):
        cat = sum(int(r[c]) for c in CATS)
        if s in CATS:
            return int(r[s])
        return {"cuda context": int(r["cuda_context"]),
                "rounding": max(0, int(r["allocated"]) - cat),
                "reserved, free": max(0, int(r["reserved"]) - int(r["allocated"]))}[s]
    used = {s for s in CATS + ["cuda context", "rounding", "reserved, free"]
            if any(val(r, s) for r in rows)}
    legend = {e["attrs"]["data-series"] for e in dom.find("span") if "data-series" in e["attrs"]}
    check(legend == used, f"legend {sorted(legend)} is the series used {sorted(used)}")
    drawn = {e["attrs"]["data-series"] for e in dom.find("path", **{"class": "series"})}
    check(drawn == used, f"series drawn {sorted(drawn)} are those used")
    if res["breakdown"]["kv_cache"] == 0 and not any(int(r["kv cache"]) for r in rows):
        check("kv cache" not in legend, "no kv cache legend entry when there is no cache")

    # the peak: the first step of the most allocated memory, drawn at least a pixel wide,
    # the stack there as high as reserved + context at that step
    alloc = [int(r["allocated"]) for r in rows]
    k = alloc.index(max(alloc))
    peak = dom.by_id("peak")
    check(peak is not None, "a peak marker")
    if peak:
        a = peak["attrs"]
        check(int(a["data-step"]) == k, f"peak marker at step {a['data-step']}, the peak is step {k}")
        check(float(a["data-width"]) >= 1, f"the peak's column is {a['data-width']} px wide")
        want = int(rows[k]["reserved"]) + int(rows[k]["cuda_context"])
        check(int(a["data-top-bytes"]) == want,
              f"the stack at the peak is {a['data-top-bytes']} B, reserved + context there {want}")
    total = dom.by_id("total")
    check(total is not None and int(total["attrs"]["data-bytes"]) == res["total_bytes"],
          "the headline's total is the estimate's")

    # round IEC ticks: 0, s, 2s, ... with s 1, 2 or 5 times a power of ten of a unit
    ticks = dom.find("text", **{"class": "ytick"})
    vals = [int(float(t["attrs"]["data-bytes"])) for t in ticks]
    steps = {b - a for a, b in zip(vals, vals[1:])}
    units = {"B": 0, "KiB": 1, "MiB": 2, "GiB": 3, "TiB": 4}
    ok = len(vals) >= 3 and vals[0] == 0 and len(steps) == 1
    if ok:
        s = steps.pop()
        ok = any(s == m * 1024 ** u for m in (1, 2, 5, 10, 20, 50, 100, 200, 500) for u in range(5))
        for t, v in zip(ticks, vals):
            mm = re.fullmatch(r"(\d+) (B|KiB|MiB|GiB|TiB)", t["text"].strip())
            ok = ok and mm is not None and int(mm.group(1)) * 1024 ** units[mm.group(2)] == v
        ok = ok and vals[-1] >= max(res["total_bytes"], res.get("verdict", {}).get("capacity_bytes", 0))
    check(ok, f"round IEC ticks ({[t['text'] for t in ticks]})")

    # phase and iteration boundaries: one line per change in the CSV
    changes = sum(1 for a, b in zip(rows, rows[1:]) if a["phase"] != b["phase"] or a["iteration"] != b["iteration"])
    its = sum(1 for a, b in zip(rows, rows[1:]) if a["iteration"] != b["iteration"])
    lines = dom.find("line", **{"class": "boundary"})
    check(len(lines) == changes, f"{len(lines)} boundaries drawn, {changes} changes of phase or iteration")
    check(len([l for l in lines if l["attrs"]["data-kind"] == "iteration"]) == its,
          f"{its} iteration boundaries")

    # zoom: the view around the peak, one column per step, the peak wider
    zpeak = zoom.by_id("peak")
    zb = zoom.find("body")[0]["attrs"]
    lo, hi = max(0, k - 50), min(len(rows) - 1, k + 50)
    every = len(rows) <= 65536  # html.c's MAX_POINTS: beyond, buckets of steps are embedded
    cols = int(zb.get("data-columns", 0))
    check(cols == hi - lo + 1 if every else 0 < cols <= hi - lo + 1,
          f"zoomed to steps {lo}-{hi}: {cols} columns")
    check(zpeak is not None and int(zpeak["attrs"]["data-step"]) == k and
          float(zpeak["attrs"]["data-width"]) >= 960 / (hi - lo + 1) - 0.01,
          "zoomed: the peak marked, one step per column")
    xr = zoom.find("text", **{"class": "xrange"})
    check(bool(xr) and xr[0]["text"].startswith(f"steps {lo} to {hi} "), "zoomed: the steps axis says the view")
    check(away.by_id("peak") is None and away.find("body")[0]["attrs"].get("data-ready") == "1",
          "a view without the peak has no marker")

    # the breakdown table: the JSON's bytes
    bd = {e["attrs"]["data-kind"]: e for e in dom.find("tr") if "data-kind" in e["attrs"]}
    for c, key in zip(CATS, JSON_KEYS):
        want = res["breakdown"][key]
        got = bd.get(c)
        check((got is None and want == 0) or (got is not None and f'data-bytes="{want}"' in row_html(html, c)),
              f"breakdown row {c}: {want} B")
    check(f'data-bytes="{res["total_bytes"]}"' in row_html(html, "total"), "breakdown total")

    # the module table: the JSON's by_module, in order, and its total row the breakdown
    mods = res["by_module"]["modules"]
    table = table_rows(html, "modules")
    check(len(table) == len(mods) + 1, f"{len(table)} module rows, {len(mods)} modules + total")
    for (cells, m) in zip(table, mods):
        check(cells[0] == m["name"] and cells[-1] == m["live_bytes"], f"module row {m['name']}")
    if table:
        check(table[-1][0] == "total" and table[-1][-1] == sum(m["live_bytes"] for m in mods),
              "module total row")

    # the advice: what the CLI printed under "what would change it"
    printed = re.findall(r"^  (--.*?)\s{2,}[\d.]+ MiB", text.split("what would change it\n")[1], re.M) \
        if "what would change it\n" in text else []
    adv = [c["text"] for c in Dom(section(html, "advice")).find("code")]
    check(adv == printed, f"advice {adv} is the CLI's {printed}")
    if not printed:
        check("nothing to change" in section(html, "advice") or "No " in section(html, "advice"),
              "no advice: a sentence saying why")

    # the command line and the version
    cmd = dom.by_id("command")
    check(cmd is not None and cmd["text"] == command, f"command line {cmd and cmd['text']!r}")
    ver = dom.by_id("version")
    check(ver is not None and ver["text"] == "dnnmem " + res["tool_version"], "dnnmem's version")
    return 1 if fails else 0


def row_html(html, kind):
    m = re.search(r'<tr[^>]*data-kind="%s"[^>]*>.*?</tr>' % re.escape(kind), html, re.S)
    return m.group(0) if m else ""


def section(html, ident):
    m = re.search(r'<(table|p) id="%s".*?</\1>' % ident, html, re.S)
    return m.group(0) if m else ""


def table_rows(html, ident):
    """The rows of table `ident` but its header: the first cell's text, then each
    data-bytes cell as an int."""
    out = []
    for tr in re.findall(r"<tr[^>]*>(.*?)</tr>", section(html, ident), re.S):
        if "<th" in tr:
            continue
        first = re.search(r"<td>(.*?)</td>", tr, re.S).group(1)
        out.append([first] + [int(v) for v in re.findall(r'data-bytes="(\d+)"', tr)])
    return out


if __name__ == "__main__":
    sys.exit(main())
