"""Programs with layout conflicts that tilex settles itself against the same programs written by hand to avoid the
conflict (examples/layout_conflicts.py), and the transpose example with the swizzle tilex synthesizes for its shared
tile against the row-major tile (``tilex.disable_bank_swizzle``). GPU only.

    python benchmarks/bench_layout_conflicts.py [--size 4096] [--rounds 5]

Each pair is timed in alternating rounds (triton's do_bench median, L2 flushed); the table gives the best round of
each and the ratio reference / tilex (above 1: tilex's version is faster). Outputs are checked against torch first;
a wrong one is named in its row.
"""
import argparse
import os
import runpy
import warnings

import torch

import tilex
from tilex.autotuner import do_bench

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def pairs(size):
    """(name, tilex's kernel, the reference kernel, what the reference is, inputs, torch reference)."""
    ex = runpy.run_path(os.path.join(ROOT, "examples", "layout_conflicts.py"))
    transpose = runpy.run_path(os.path.join(ROOT, "examples", "transpose.py"))["transpose_kernel"]
    out = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", tilex.LayoutConversionWarning)
        for name, prog, hand, make, ref in ex["cases"](size):
            out.append((name, tilex.compile(prog), tilex.compile(hand), "by hand", make(), ref))
    a = torch.randn(size, size, device="cuda", dtype=torch.float16)
    out.append(("transpose example (fp16)", tilex.compile(transpose(size, size)),
                tilex.compile(transpose(size, size), pass_configs={"tilex.disable_bank_swizzle": True}),
                "row-major tile", [a, torch.empty_like(a)], lambda x, _: x.t()))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", type=int, default=4096)
    ap.add_argument("--rounds", type=int, default=5)
    a = ap.parse_args()
    print("| program | tilex (ms) | reference (ms) | reference | reference / tilex |\n| --- | --- | --- | --- | --- |")
    for name, k, ref_k, what, args, ref in pairs(a.size):
        want = ref(*args)
        wrong = []
        for label, kern in (("tilex", k), ("reference", ref_k)):
            kern(*args)
            bad = int((~torch.isclose(args[-1], want, rtol=2e-2, atol=2e-2)).sum())
            if bad:
                wrong.append(f"{label} WRONG in {bad} elements")
        if wrong:  # timed anyway: the table says so
            name = f"{name} ({'; '.join(wrong)})"
        best = [float("inf")] * 2
        for _ in range(a.rounds):  # alternating, so that clocks and neighbours weigh on both alike
            best = [min(best[0], do_bench(lambda: k(*args))), min(best[1], do_bench(lambda: ref_k(*args)))]
        print(f"| {name} | {best[0]:.4f} | {best[1]:.4f} | {what} | {best[1] / best[0]:.3f} |", flush=True)


if __name__ == "__main__":
    main()
