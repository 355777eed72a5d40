"""Shared-memory bank conflicts: tilex's model (`tilex.layout.banks`, `JITKernel.bank_conflicts`) against ncu's
counters, for every benchmark and example kernel.

    python benchmarks/bench_banks.py [--only REGEX]      # the model's counts (no GPU needed)
    python benchmarks/bench_banks.py --ncu [--only REGEX] [--raw ncu.csv]   # and ncu's (GPU machine)

The kernels: deliberately conflicting column reads (thread t reads row t of a tile with rows of 1 .. 33 words), the
transpose example at 4096^2, the programs of examples/layout_conflicts.py and their hand-written versions, and every
kernel of tools/cuda_snapshot.py (bench_gemm's configurations over its --all shapes, bench_ops', the examples').
Kernels whose shared tiles tilex swizzles (SwizzleSharedTiles) also appear "row-major (before)", compiled with
``tilex.disable_bank_swizzle``. `--only` keeps those whose name matches REGEX (re.search).

The model reads every warp of block 0 (`shared_accesses(..., warps=)`); a launch's count is that times the blocks
of the grid (static extents of the program's T.Kernel), which assumes every block touches the banks the same way.
Accesses through ldmatrix / cp.async / TMA / wgmma are not modelled (see `tilex.layout.banks`).

`--ncu` compiles the kernels in a process pool (target "auto", kernel cache on), then runs this script once under
ncu (`--run-all`): that process compiles them again (cache hits), allocates every input, launches each kernel once
in list order and writes, per kernel, its `__global__` functions or its launch error (JSON lines). ncu profiles only
those functions (`-k regex:`), collecting ``l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_{ld,st}.sum``; its
launches are matched to the kernels in order (every kernel here is one `__global__` function, launched once).
"agree" is "yes" when model and ncu are both zero, else model / ncu of ld + st, "**no**" when a modelled zero is
not a measured zero or the totals differ by more than 10% of ncu's. Those counters (the L1 data stage's) also count
conflicts with other traffic through L1; the wavefronts column compares the model's wavefronts of the shared loads
and stores with ncu's per-instruction (SASS) count, which does not.
"""
import argparse
import csv
import functools
import json
import math
import multiprocessing
import os
import re
import runpy
import signal
import subprocess
import sys
import tempfile
from concurrent.futures import ProcessPoolExecutor

import tilex
import tilex.language as T
from tilex.engine import lower_to_tir
from tilex.layout.banks import shared_accesses, wavefronts
from tilex.transform.kernel_scope import kernel_info

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
METRICS = ("l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum",
           "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum")
#: per-instruction (SASS) wavefronts of shared loads and stores: what the model's accesses take, free of the
#: L1 arbitration the data-stage conflict counters above also count
WAVEFRONTS = ("sm__sass_l1tex_data_pipe_lsu_wavefronts_mem_shared_op_ld.sum",
              "sm__sass_l1tex_data_pipe_lsu_wavefronts_mem_shared_op_st.sum")
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


@functools.cache
def kernels():
    """(name, function returning the compiled kernel) for every kernel."""
    transpose = runpy.run_path(os.path.join(ROOT, "examples", "transpose.py"))["transpose_kernel"]
    disable = os.environ.get("TILEX_DISABLE_CACHE")  # cuda_snapshot.py turns the kernel cache off; keep the setting
    snapshot = runpy.run_path(os.path.join(ROOT, "tools", "cuda_snapshot.py"))["jobs"]()
    if disable is None:
        del os.environ["TILEX_DISABLE_CACHE"]
    else:
        os.environ["TILEX_DISABLE_CACHE"] = disable
    conflicts = runpy.run_path(os.path.join(ROOT, "examples", "layout_conflicts.py"))
    row_major = {"tilex.disable_bank_swizzle": True}
    # kept conflicting (row-major): they check the model's counts against ncu's
    out = [(f"column_reads-{w}words", lambda w=w: tilex.compile(column_reads(w), pass_configs=row_major))
           for w in (1, 2, 4, 8, 16, 31, 32, 33)]
    out += [("example-transpose-4096", lambda: tilex.compile(transpose(4096, 4096), out_idx=[1])),
            ("example-transpose-4096 row-major (before)",
             lambda: tilex.compile(transpose(4096, 4096), out_idx=[1], pass_configs=row_major)),
            ("example-transpose row-major (before)",
             lambda: tilex.compile(transpose(8192, 8192), out_idx=[1], pass_configs=row_major))]
    for name in ("register_transpose", "split_probabilities"):
        for suffix, pc in (("", None), (" row-major (before)", row_major)):
            out.append((f"layout_conflicts-{name}{suffix}",
                        lambda f=conflicts[name], pc=pc: tilex.compile(f(4096, 4096), pass_configs=pc)))
        out.append((f"layout_conflicts-{name}_by_hand",
                    lambda f=conflicts[name + "_by_hand"]: tilex.compile(f(4096, 4096))))
    out += [("layout_conflicts-int4_gemm", lambda: tilex.compile(conflicts["int4_gemm"](4096, 4096, 4096))),
            ("layout_conflicts-int4_gemm_by_hand",
             lambda: tilex.compile(conflicts["int4_gemm_by_hand"](4096, 4096, 4096)))]
    return tuple(out + snapshot)


def global_functions(kernel):
    """The `__global__` function names of a compiled kernel's CUDA source."""
    found = re.findall(r"__global__\s+void\s+(?:__\w+__\([^)]*\)\s*)*(\w+)\s*\(", kernel.get_kernel_source())
    return list(dict.fromkeys(found))


def error_text(e):
    return f"{type(e).__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else ''}"


def model(index):
    """Compile kernel `index`; its modelled conflicts per launch, the conflicting buffers and `__global__`s."""
    name, build = kernels()[index]
    row = {"name": name, "globals": []}
    try:
        k = build()
        row["globals"] = global_functions(k)
        info = kernel_info(k.func)
        blocks = math.prod(int(e) for e in info.block_extents.values())
        # every warp of block 0, times the blocks
        accesses = shared_accesses(lower_to_tir(k.func, k.target, k.pass_configs)["main"],
                                   warps=math.ceil(info.threads / 32))
        per = {}
        for acc in accesses:
            counts = per.setdefault(acc.buffer, {"ld": 0, "st": 0})
            counts[acc.kind] += acc.conflicts
        row["ld"] = sum(c["ld"] for c in per.values()) * blocks
        row["st"] = sum(c["st"] for c in per.values()) * blocks
        row["wavefronts"] = sum(wavefronts(a) for acc in accesses for a in acc.accesses) * blocks
        row["buffers"] = ", ".join(f"{b} ld {c['ld']} st {c['st']}" for b, c in per.items() if c["ld"] or c["st"])
    except Exception as e:  # noqa: BLE001 - reported in the kernel's row
        row["error"] = error_text(e)
    return row


def run_all(indices, path):
    """The process ncu profiles: compile, allocate every input, then launch each kernel once; one JSON line per
    kernel ({"name", "globals"} or {"name", "error"}) to `path`."""
    import torch

    tensors = {}  # kernels with a parameter of the same position, shape and dtype share its tensor

    def tensor(p):
        if p.kind != "buffer" or not all(isinstance(d, int) for d in p.shape) or p.torch_dtype is None:
            raise TypeError(f"parameter {p.name}: not a static-shape torch buffer")
        key = (p.index, tuple(p.shape), p.dtype)
        if key not in tensors:
            if p.torch_dtype.is_floating_point:
                tensors[key] = torch.randn(p.shape, device="cuda").to(p.torch_dtype)
            else:
                tensors[key] = torch.zeros(p.shape, dtype=p.torch_dtype, device="cuda")
        return tensors[key]

    ready = []  # (name, kernel, its arguments) or (name, None, the error)
    for i in indices:
        name, build = kernels()[i]
        try:
            k = build()
            ready.append((name, k, [tensor(p) for p in k.params if not p.is_output]))
        except Exception as e:  # noqa: BLE001
            ready.append((name, None, error_text(e)))
    torch.cuda.synchronize()
    with open(path, "w") as f:
        for name, k, args in ready:
            record = {"name": name, "error": args}
            if k is not None:
                try:
                    k(*args)
                    torch.cuda.synchronize()
                    record = {"name": name, "globals": global_functions(k)}
                except Exception as e:  # noqa: BLE001
                    record["error"] = error_text(e)
            f.write(json.dumps(record) + "\n")
            f.flush()


def parse_ncu(text):
    """[(kernel name, {metric: value})] per profiled launch of ncu's --csv output, in launch (ID) order."""
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines)
                  if all(f'"{c}"' in line for c in ("Kernel Name", "Metric Name", "Metric Value"))), None)
    if start is None:
        return []
    launches = {}
    for row in csv.DictReader(lines[start:]):
        try:
            metrics = launches.setdefault(int(row["ID"].replace(",", "")), (row["Kernel Name"], {}))[1]
        except (AttributeError, KeyError, ValueError):  # not a row of the table (a ==PROF== line)
            continue
        try:
            metrics[row["Metric Name"]] = float(row["Metric Value"].replace(",", ""))
        except (AttributeError, ValueError):  # no value ("n/a")
            pass
    return [launches[i] for i in sorted(launches)]


def measure(names, only, raw, timeout):
    """{kernel name: (ncu ld, ncu st) or an error text}: one process of all the kernels under ncu."""
    with tempfile.TemporaryDirectory() as tmp:
        log = os.path.join(tmp, "launched.jsonl")
        cmd = ["ncu", "--csv", "--metrics", ",".join(METRICS + WAVEFRONTS),
               "-k", f"regex:^({'|'.join(sorted(names))})$", sys.executable, os.path.abspath(__file__), "--run-all", log] + (["--only", only] if only else [])
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                start_new_session=True)
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)  # ncu and the process it profiles
            out, err = proc.communicate()
            print(f"ncu timed out after {timeout} s; partial results", file=sys.stderr)
        if raw:
            with open(raw, "w") as f:
                f.write(out + "\n# stderr\n" + err)
        launched = []
        if os.path.exists(log):
            with open(log) as f:
                launched = [json.loads(line) for line in f if line.endswith("\n")]
    launches = parse_ncu(out)
    if not launches:
        print(f"no ncu rows parsed (exit {proc.returncode}); ncu said:\n{(out + err)[-2000:]}", file=sys.stderr)
    result, n = {}, 0
    for rec in launched:
        if "error" in rec:
            result[rec["name"]] = f"launch failed: {rec['error']}"
        elif n < len(launches) and launches[n][0].split("(")[0].split()[-1] in rec["globals"]:
            metrics = launches[n][1]
            result[rec["name"]] = tuple(round(metrics[m]) for m in METRICS) + (
                round(sum(metrics.get(m, 0) for m in WAVEFRONTS)),) if all(m in metrics for m in METRICS) \
                else "ncu gave no value"
            n += 1
        else:
            result[rec["name"]] = "no ncu row"
    return result


def agree(model_counts, ncu_counts):
    """"yes" when both are zero; a modelled zero must be a measured zero; otherwise model / ncu of ld + st, within
    10% or flagged."""
    model_total, ncu_total = sum(model_counts), sum(ncu_counts)
    if not model_total:
        return "yes" if not ncu_total else f"**no** (ncu {ncu_total})"
    if not ncu_total:
        return "**no** (ncu 0)"
    ratio = f"{model_total / ncu_total:.3f}"
    return ratio if abs(model_total - ncu_total) <= 0.1 * ncu_total else f"**no** ({ratio})"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", default=None, help="kernels whose name matches this regex")
    ap.add_argument("--ncu", action="store_true", help="also measure with ncu (GPU machine)")
    ap.add_argument("--raw", default=None, help="write ncu's raw output here")
    ap.add_argument("--jobs", type=int, default=min(16, os.cpu_count()), help="compile processes")
    ap.add_argument("--timeout", type=int, default=420, help="seconds allowed to the ncu process")
    ap.add_argument("--run-all", default=None, metavar="JSONL", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.ncu or a.run_all:
        os.environ["TILEX_DISABLE_CACHE"] = "0"  # the ncu process must hit the kernels the pool compiled
    indices = [i for i, (name, _) in enumerate(kernels()) if a.only is None or re.search(a.only, name)]
    if a.run_all:
        run_all(indices, a.run_all)
        return
    with ProcessPoolExecutor(max(1, min(a.jobs, len(indices))), multiprocessing.get_context("spawn")) as pool:
        rows = []
        for row in pool.map(model, indices):
            rows.append(row)
            print(f"[{len(rows)}/{len(indices)}] {row['name']}", file=sys.stderr, flush=True)
    names = {g for r in rows for g in r["globals"]}
    measured = measure(names, a.only, a.raw, a.timeout) if a.ncu and names else {}

    print("| kernel | model ld | model st | ncu ld | ncu st | agree | wavefronts model / ncu | "
          "conflicting buffers (per block) / notes |\n| --- | --- | --- | --- | --- | --- | --- | --- |")
    zero, close, differ, unmatched, close_waves = 0, 0, [], [], 0
    for r in rows:
        got = measured.get(r["name"], "not measured" if a.ncu else None)
        notes = [r.get("buffers"), r.get("error"), got if isinstance(got, str) else None]
        verdict = agree((r["ld"], r["st"]), got[:2]) if isinstance(got, tuple) and "error" not in r else "-"
        waves = f"{r['wavefronts'] / got[2]:.3f}" if isinstance(got, tuple) and got[2] and "error" not in r else "-"
        close_waves += waves != "-" and abs(float(waves) - 1) <= 0.1
        zero += verdict == "yes"
        close += verdict[0].isdigit()
        if verdict.startswith("**no**"):
            differ.append(r["name"])
        elif verdict == "-" and a.ncu:
            unmatched.append(r["name"])
        cells = [r.get("ld", "-"), r.get("st", "-"), *(got[:2] if isinstance(got, tuple) else ("-", "-")), verdict,
                 waves]
        print(f"| {r['name']} | " + " | ".join(map(str, cells)) + f" | {'; '.join(n for n in notes if n)} |")
    if a.ncu:
        print(f"\n{len(rows)} kernels: {zero} modelled and measured conflict-free, {close} within 10% of ncu, "
              f"{len(differ)} disagree: {', '.join(differ) or '-'}; not compared: {', '.join(unmatched) or '-'}; "
              f"shared ld/st wavefronts within 10% of ncu's SASS counters: {close_waves}")
    else:
        conflicting = [r["name"] for r in rows if r.get("ld") or r.get("st")]
        failed = [r["name"] for r in rows if "error" in r]
        print(f"\n{len(rows)} kernels: {len(conflicting)} with modelled conflicts: {', '.join(conflicting) or '-'}; "
              f"model failed: {', '.join(failed) or '-'}")


if __name__ == "__main__":
    main()
