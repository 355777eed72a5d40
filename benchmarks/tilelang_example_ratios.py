"""The speed ratios TileLang's examples print about themselves, from a run of tools/tilelang_examples.py.

    python tools/tilelang_examples.py <checkout> --gpu --json run.json
    python benchmarks/tilelang_example_ratios.py run.json

Each passing example's timing lines (--json "timings") are read for a time (ms) of the example's own kernel
(a line naming tilelang / tile-lang / tl) and of its reference (torch / ref / triton / fla / cublas / cudnn ...),
in the order the example printed them; the table gives reference time / tilex time (above 1: the TileLang program
under tilex is faster). Examples whose lines do not name both are listed with their lines, to be read by hand.
"""
from __future__ import annotations

import argparse
import json
import re

#: words that name the example's own kernel in its timing lines (underscores count as separators: tilelang_time)
OWN = re.compile(r"(?<![a-z])(tile-?lang|tl|best)(?![a-z])", re.IGNORECASE)
#: words that name a reference
REFERENCE = re.compile(r"(?<![a-z])(ref|reference|torch|triton|tritron|fla|cublas|cudnn|baseline)(?![a-z])",
                       re.IGNORECASE)
#: "<name>: <number> [ms]" segments of a line (several on one line: "fwd tilelang: 0.07 ms   ref: 0.08 ms")
SEGMENT = re.compile(r"([A-Za-z][\w .\-]*?)\s*[:=]\s*([0-9]+(?:\.[0-9]+)?(?:e-?[0-9]+)?)\s*(ms|s\b|tflops|gb/s)?",
                     re.IGNORECASE)


def _segments(line):
    """(name, milliseconds) of each time on `line` (rates and seconds-less numbers of rates left out)."""
    out = []
    for name, value, unit in SEGMENT.findall(line):
        unit = unit.lower()
        if unit in ("tflops", "gb/s") or re.search(r"tflops|gb/s|speedup|wall|repeat", name, re.IGNORECASE):
            continue
        ms = float(value) * (1000.0 if unit == "s" else 1.0)
        out.append((name, ms))
    return out


def ratios(timings):
    """(reference time, own time) pairs found in one example's timing lines, in the order printed."""
    own, refs, out = [], [], []
    for line in timings:
        for name, t in _segments(line):
            if t <= 0:
                continue
            if REFERENCE.search(name):
                refs.append(t)
            elif OWN.search(name):
                own.append(t)
            if own and refs:
                out.append((refs.pop(0), own.pop(0)))
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("json")
    args = ap.parse_args(argv)
    with open(args.json) as f:
        results = json.load(f)
    unread = []
    print("| example | reference ms | tilex ms | reference / tilex |")
    print("| --- | --- | --- | --- |")
    for name in sorted(results):
        r = results[name]
        if r.get("status") != "OK" or not r.get("timings"):
            continue
        pairs = ratios(r["timings"])
        if not pairs:
            unread.append((name, r["timings"]))
        for ref, own in pairs:
            print(f"| {name} | {ref:.4g} | {own:.4g} | {ref / own:.2f} |")
    if unread:
        print(f"\n{len(unread)} examples print timings this script does not pair (read them by hand):")
        for name, lines in unread:
            print(f"  {name}: " + " / ".join(lines[:4]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
