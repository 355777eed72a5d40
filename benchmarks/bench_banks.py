"""Shared-memory bank conflicts: tilex's model (`tilex.layout.banks`, `JITKernel.bank_conflicts`) against ncu's
counters, kernel by kernel.

    python benchmarks/bench_banks.py           # the model's counts (no GPU needed)
    python benchmarks/bench_banks.py --ncu     # and ncu's, each kernel launched once under ncu (GPU machine)

The model reads warp 0 of block 0; a launch's count is that times the warps of a block and the blocks of the grid,
which holds for the kernels here (every warp and block touches the banks the same way). ncu's metrics:
``l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum`` and ``..._op_st.sum``.
"""
import argparse
import os
import re
import subprocess
import sys

import tilex
import tilex.language as T

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples"))

METRICS = ("l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum",
           "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum")
BLOCKS = 264


def column_reads(row_words, dtype="float32"):
    """Deliberately conflicting: a (32, row_words) tile stored row by row, then thread t reads row t, column 0
    (rows `row_words` 4-byte words apart: 32 / gcd(row_words, 32) threads share a bank)."""
    @T.prim_func
    def columns(A: T.Tensor((BLOCKS * 32, row_words), dtype), B: T.Tensor((BLOCKS * 32,), dtype)):
        with T.Kernel(BLOCKS, threads=32) as bx:
            S = T.alloc_shared((32, row_words), dtype)
            for i, j in T.Parallel(32, row_words):
                S[i, j] = A[bx * 32 + i, j]
            for i in T.Parallel(32):
                B[bx * 32 + i] = S[i, 0]

    return columns


def kernels():
    """(name, program, grid blocks, warps per block)."""
    import transpose as ex

    out = [("transpose example 4096^2 fp16", ex.transpose_kernel(4096, 4096), (4096 // 64) ** 2, 8)]
    out += [(f"column reads, rows of {w} words", column_reads(w), BLOCKS, 1) for w in (1, 2, 4, 8, 16, 31, 32, 33)]
    return out


def modelled(kernel, blocks, warps):
    report = kernel.bank_conflicts()
    ld = sum(r["ld"] for r in report.values()) * blocks * warps
    st = sum(r["st"] for r in report.values()) * blocks * warps
    return ld, st


def run_one(index):
    """Launch kernel `index` once on random inputs (the process ncu profiles)."""
    import torch

    _, prog, _, _ = kernels()[index]
    k = tilex.compile(prog)
    args = []
    for p in k.params:
        shape = [int(d) for d in p.shape]
        args.append(torch.randn(shape, device="cuda").to(getattr(torch, p.dtype)))
    k(*args)
    torch.cuda.synchronize()


def measured(index, symbol):
    cmd = ["ncu", "--csv", "--metrics", ",".join(METRICS), "-k", f"regex:{symbol}", "--launch-count", "1",
           sys.executable, os.path.abspath(__file__), "--run", str(index)]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=600).stdout
    values = {}
    for line in out.splitlines():
        for m in METRICS:
            if f'"{m}"' in line:
                values[m] = float(re.findall(r'"([\d,.]+)"', line)[-1].replace(",", ""))
    return values.get(METRICS[0]), values.get(METRICS[1])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ncu", action="store_true", help="also measure with ncu (GPU machine)")
    ap.add_argument("--run", type=int, default=None, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.run is not None:
        run_one(a.run)
        return
    print("| kernel | model ld | model st | ncu ld | ncu st | model / ncu |\n| --- | --- | --- | --- | --- | --- |")
    for i, (name, prog, blocks, warps) in enumerate(kernels()):
        k = tilex.compile(prog, target="auto" if a.ncu else "sm_90a")
        ld, st = modelled(k, blocks, warps)
        row = f"| {name} | {ld} | {st} |"
        if a.ncu:
            mld, mst = measured(i, k._symbol)
            ratio = (ld + st) / (mld + mst) if mld is not None and mst is not None and mld + mst else "-"
            row += f" {mld} | {mst} | {ratio if isinstance(ratio, str) else f'{ratio:.3f}'} |"
        else:
            row += " - | - | - |"
        print(row, flush=True)


if __name__ == "__main__":
    main()
