"""A Llama-7B decoder block in Relax: tilex offload vs TVM's default CUDA pipeline vs PyTorch eager (one process).

    python benchmarks/bench_relax.py [--context 2048] [--seq 2048] [--small] [--frontend nn|torch]

The block and the checks are examples/llama_block_relax.py's; times are the best of 5 alternating rounds of
`tilex.autotuner.do_bench` medians (L2 flushed) of one call of the compiled function (Relax VM) or of the eager
block.
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples"))

import llama_block_relax as blk  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--context", type=int, default=2048)
    ap.add_argument("--seq", type=int, default=2048)
    ap.add_argument("--small", action="store_true")
    ap.add_argument("--frontend", choices=["nn", "torch"], default="nn",
                    help="the block from relax.frontend.nn or written in PyTorch and imported (torch.export)")
    a = ap.parse_args()
    cfg = blk.SMALL if a.small else blk.LLAMA_7B
    rows = []
    for mode in ("decode", "prefill"):
        t = blk.run(cfg, mode, seq=a.seq, context=a.context, frontend=a.frontend)
        rows.append((mode, t))
    print("\n| mode | PyTorch eager ms | TVM default ms | tilex offload ms | TVM / tilex | PyTorch / tilex |")
    print("| --- | --- | --- | --- | --- | --- |")
    for mode, t in rows:
        x = t["tilex offload"]
        print(f"| {mode} | {t['PyTorch eager']:.3f} | {t['TVM default']:.3f} | {x:.3f} | "
              f"{t['TVM default'] / x:.2f} | {t['PyTorch eager'] / x:.2f} |")


if __name__ == "__main__":
    main()
