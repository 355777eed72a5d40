"""GEMM benchmark: ratio torch (cuBLAS) time / tilex time (higher is better), measured in one process.

Two tilex columns: the best of CONFIGS (tilex's program variants: staged-C epilogues, panels, split-K, swap-AB) and
the best "plain" program, the GEMM as TileLang's examples write it (`plain_program`: a T.Pipelined loop, a
fragment -> global T.copy epilogue, T.use_swizzle(10)) in the three common block configurations of PLAIN_CONFIGS.
The gap between the two is what a user loses by not knowing the variants (issue 18).

Each shape ends with an alternation (`alternate`): cuBLAS, Triton, the FINALISTS fastest configs of the per-config
lines and every plain config take turns call by call, each call after an L2 flush, and each gets the median of its
calls; the "alternated" lines and the final table come from it. The per-config lines before them time each config
with do_bench against cuBLAS timed once at the start of the shape, so clock and power drift move them by several
percent.
"""
import argparse
import os

import tilex
from tilex.kernels.gemm import matmul, matmul_splitk, matmul_swap_ab

CONFIGS = [  # (bm, bn, bk, stages, threads, swizzle panel[, split-K slices (-1: swap A/B)[, C staged in shared
    #             [, stream-K[, swap-AB with A's row blocks on grid x]]]])
    (128, 256, 64, 4, 256, 0),
    (128, 256, 64, 4, 256, 16),
    (128, 256, 64, 3, 256, 0, 1, 1),
    (128, 256, 64, 3, 256, 8, 1, 1),
    (128, 256, 64, 3, 256, 16, 1, 1),
    (128, 256, 64, 3, 256, 16, 1, 1, 1),
    (128, 64, 128, 4, 256, 0),
    (128, 64, 64, 8, 256, 0),
    (128, 64, 128, 4, 128, 0),
    (64, 128, 64, 4, 128, 0, 4),
    (128, 64, 64, 9, 128, 0, -1),
    (64, 128, 64, 8, 128, 0, -1, 0, 0, 1),
    (64, 128, 64, 8, 128, 0, -1, 1, 0, 1),
    (16, 64, 64, 12, 128, 0, -1),
    (16, 128, 64, 10, 128, 0, -1),
    (16, 64, 64, 16, 128, 0, -1),
    (16, 64, 128, 8, 128, 0, -1),
]


#: ("plain", bm, bn, bk, threads): the common configurations of the plain program
PLAIN_CONFIGS = [("plain", 128, 256, 64, 256), ("plain", 128, 128, 64, 128), ("plain", 128, 128, 32, 128)]
PASS_CONFIGS = {}
#: How many of the configs (by their per-config do_bench lines) go on to the alternation for the best-of column.
FINALISTS = 3
ALL_SHAPES = ["4096x4096x4096", "8192x8192x8192", "4096x28672x8192", "8192x8192x1024", "128x8192x8192",
              "16x8192x8192", "8192x128x8192", "4096x256x4096"]  # --all (with fp16 and bf16)


def plain_program(M, N, K, dtype, bm, bn, bk, threads, stages=3, panel=10):
    """C = A @ B as TileLang's GEMM example writes it, no tilex-specific choices: `matmul` with its default
    epilogue (``T.copy(C_l, C[...])``) and ``T.use_swizzle(panel)``."""
    return matmul(M, N, K, bm, bn, bk, stages, threads, dtype=dtype, swizzle=panel)


def program(M, N, K, dtype, cfg):
    """The tile program of a config: 6 entries = `matmul`, a 7th (> 1) = `matmul_splitk` with that many slices, a
    7th of -1 = `matmul_swap_ab` (skinny A: blocks compute C^T tiles; see `applies`), an 8th (1) = C written through a
    shared tile (a TMA store on sm90; > 1: in blocks of that many columns, or rows of C for swap-AB), a 9th (1) = compiled with
    stream-K (`pass_configs`), a 10th (1) = swap-AB with A's row blocks on the grid's x axis (the blocks that
    read one tile of B run side by side)."""
    if cfg[0] == "plain":
        return plain_program(M, N, K, dtype, *cfg[1:])
    bm, bn, bk, st, th, sw = cfg[:6]
    if len(cfg) > 6 and cfg[6] == -1:
        staged = cfg[7] if len(cfg) > 7 else 0
        return matmul_swap_ab(M, N, K, bm, bn, bk, st, th, dtype=dtype, stage_c=bool(staged),
                              c_rows=staged if staged > 1 else 0, m_major=len(cfg) > 9 and bool(cfg[9]))
    if len(cfg) > 6 and cfg[6] > 1:
        return matmul_splitk(M, N, K, bm, bn, bk, st, th, cfg[6], dtype=dtype)
    staged = cfg[7] if len(cfg) > 7 else 0
    return matmul(M, N, K, bm, bn, bk, st, th, dtype=dtype, swizzle=sw, stage_c=bool(staged),
                  c_block=staged if staged > 1 else 0)


def applies(M, dtype, cfg):
    """Whether a config is tried: split-K adds rounded partials with bf16 atomics (too coarse for the accuracy
    check), and swap-AB tiles are for skinny A only (between half and twice their bm rows)."""
    if len(cfg) > 6 and cfg[6] > 1 and dtype == "bfloat16":
        return False
    return cfg[0] == "plain" or not (len(cfg) > 6 and cfg[6] == -1 and not cfg[0] / 2 < M <= 2 * cfg[0])


def pass_configs(cfg):
    """tilex pass configs of a config: the command line's, plus stream-K when its 9th entry is set."""
    return {**PASS_CONFIGS, **({"tilex.stream_k": 1} if len(cfg) > 8 and cfg[8] else {})}


def runner(kernel, cfg, a, b, c):
    """A call computing c = a @ b with `kernel` (split-K configs clear c first: their blocks add into it)."""
    if len(cfg) > 6 and cfg[6] > 1:
        def run():
            c.zero_()
            kernel(a, b, c)
            return c
        return run
    def run():
        kernel(a, b, c)
        return c
    return run


def _compile_one(job):
    """Worker: compile one (shape, dtype, config) into the on-disk cache (the parent then loads it)."""
    M, N, K, dtype, cfg, pass_configs = job
    try:
        tilex.compile(program(M, N, K, dtype, cfg), pass_configs=pass_configs)
        return None
    except Exception as e:  # noqa: BLE001 - the parent reports it when it compiles again
        return str(e).splitlines()[0][:200]


def precompile(jobs, workers):
    """Fill tilex's kernel cache for every job with `workers` processes (nvcc dominates compile time)."""
    import concurrent.futures as cf
    import multiprocessing

    if workers <= 1 or len(jobs) <= 1:
        return
    with cf.ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn")) as ex:
        list(ex.map(_compile_one, jobs))


def parse_configs(text):
    return [tuple(int(v) for v in c.split(",")) for c in text.split(";") if c.strip()]


def warm_up(seconds=3.0):
    """Run cuBLAS GEMMs for `seconds` so that the first shape is measured at the clocks the GPU sustains: measured
    cold (H100), the first shape's per-config lines came out about 10 % below the same shape measured again at the
    end of the run, as cuBLAS, timed first, ran at boost clocks the configs after it no longer had."""
    import time

    import torch

    x = torch.randn(8192, 8192, device="cuda", dtype=torch.float16)
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        for _ in range(10):
            x @ x
        torch.cuda.synchronize()


def alternate(runs, rounds=5, seconds=0.6):
    """{name: median time (ms)} of the callables `runs`, timed call by call in turn.

    Every call comes after the same L2 flush as triton's do_bench (its zeroed 256 MB buffer) and is timed by CUDA
    events around it alone; the contenders take turns call by call, their order rotating every call, for about
    `seconds` of calls each (`rounds` only scales that), and each gets the median of its calls. Why not do_bench in
    turn: on the H100 one contender's 200 ms windows drifted by up to 8 % from round to round (clock and power),
    more than the differences measured; calls side by side see the same clocks."""
    import statistics

    import torch
    from triton import runtime

    driver = runtime.driver.active
    cache = driver.get_empty_cache_for_benchmark()
    names = list(runs)
    for name in names:  # warm up (and let each contender settle its lazy state) back to back, as do_bench does
        for _ in range(3):
            runs[name]()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for name in names:
        driver.clear_cache(cache)
        runs[name]()
    end.record()
    torch.cuda.synchronize()
    per_call = max(start.elapsed_time(end) / len(names), 1e-3)
    calls = max(20, min(5000, int(seconds * 1e3 * rounds / 5 / per_call)))
    events = {name: [] for name in names}
    for i in range(calls):
        for j in range(len(names)):
            name = names[(i + j) % len(names)]
            e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            driver.clear_cache(cache)
            e0.record()
            runs[name]()
            e1.record()
            events[name].append((e0, e1))
        if i % 200 == 199:
            torch.cuda.synchronize()  # keep the queue of recorded events short
    torch.cuda.synchronize()
    return {name: statistics.median(e0.elapsed_time(e1) for e0, e1 in events[name]) for name in names}


def bench(M, N, K, dtype, configs):
    import torch
    from triton.testing import do_bench

    tdt = getattr(torch, dtype)
    a = torch.randn(M, K, device="cuda", dtype=tdt)
    b = torch.randn(K, N, device="cuda", dtype=tdt)
    ref = a @ b
    t_torch = do_bench(lambda: a @ b, warmup=25, rep=200)
    t_triton, run_triton = None, None
    try:
        from triton_gemm import triton_matmul

        c_tr = torch.empty(M, N, device="cuda", dtype=tdt)
        triton_matmul(a, b, c_tr)  # autotunes on first call

        def run_triton():
            triton_matmul(a, b, c_tr)

        t_triton = do_bench(run_triton, warmup=25, rep=200)
    except Exception as e:  # noqa: BLE001
        print(f"  triton: failed: {str(e).splitlines()[0][:160]}")
    plain = None
    timed = []  # (do_bench time, config, run) of every config that worked
    plains = {}  # plain config -> its run, for the alternation
    c = torch.empty(M, N, device="cuda", dtype=tdt)
    for cfg in list(configs) + PLAIN_CONFIGS:
        if not applies(M, dtype, cfg):
            continue
        try:
            run = runner(tilex.compile(program(M, N, K, dtype, cfg), pass_configs=pass_configs(cfg)), cfg, a, b, c)
            c.fill_(float("nan"))
            out = run()
            torch.testing.assert_close(out.float() / K ** 0.5, ref.float() / K ** 0.5, atol=1e-2, rtol=1e-2)
        except Exception as e:  # noqa: BLE001 - report and move on
            print(f"  config {cfg}: failed: {str(e).splitlines()[0][:200]}")
            continue
        t = do_bench(run, warmup=25, rep=200)
        print(f"  config {cfg}: {2 * M * N * K / t * 1e-9:.0f} TFLOP/s, ratio {t_torch / t:.3f}")
        if cfg[0] == "plain":
            plains[cfg] = run
        else:
            timed.append((t, cfg, run))
    # the FINALISTS fastest configs by these per-config times go on to the alternation, which picks the best of them
    finalists = {cfg: run for _, cfg, run in sorted(timed, key=lambda x: x[0])[:FINALISTS]}
    best = None
    if finalists or plains:
        # the final numbers: cuBLAS, Triton, the finalists and every plain config measured call by call in turn, so
        # that clock and power drift over the sweep favours none of them
        contenders = {"torch": lambda: a @ b}
        contenders.update(finalists)
        contenders.update(plains)
        if run_triton is not None:
            contenders["triton"] = run_triton
        final = alternate(contenders)
        t_torch = final["torch"]
        if finalists:
            fastest = min(finalists, key=final.get)
            best = (final[fastest], fastest)
            for cfg in finalists:
                print(f"  alternated: config {cfg}: ratio {t_torch / final[cfg]:.3f}")
        for cfg in plains:
            print(f"  alternated: plain {cfg[1:]}: ratio {t_torch / final[cfg]:.3f}")
        if plains:
            fastest = min(plains, key=final.get)
            plain = (final[fastest], fastest)
        t_triton = final.get("triton", t_triton)
    return t_torch, t_triton, best, plain


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--dtype", default="float16")
    p.add_argument("--shapes", default="4096x4096x4096,8192x8192x8192")
    p.add_argument("--all", action="store_true", help="the issue-4 shape list, fp16 and bf16")
    p.add_argument("--configs", default=None, help="'bm,bn,bk,stages,threads,swizzle;...' instead of the default list")
    p.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="parallel compile processes")
    p.add_argument("--pass-configs", default="", help="'tilex.option=value,...' for every tilex kernel")
    args = p.parse_args()
    for item in filter(None, args.pass_configs.split(",")):
        key, value = item.split("=")
        PASS_CONFIGS[key] = int(value) if value.isdigit() else value
    configs = parse_configs(args.configs) if args.configs else CONFIGS
    import torch

    print(f"device: {torch.cuda.get_device_name()}")
    rows = []
    shapes = args.shapes.split(",")
    dtypes = [args.dtype]
    if args.all:
        shapes = ALL_SHAPES
        dtypes = ["float16", "bfloat16"]
    precompile([(*map(int, s.split("x")), dt, c, pass_configs(c)) for dt in dtypes for s in shapes
                for c in list(configs) + PLAIN_CONFIGS if applies(int(s.split("x")[0]), dt, c)],
               args.jobs)
    warm_up()
    for dt in dtypes:
        for s in shapes:
            M, N, K = map(int, s.split("x"))
            print(f"{s} {dt}:")
            t_torch, t_triton, best, plain = bench(M, N, K, dt, configs)
            rows.append((s, dt, t_torch, t_triton, best, plain))
    print("\nshape | dtype | cuBLAS ms | triton ms | tilex ms | cuBLAS/tilex | triton/tilex | best config | "
          "plain ms | cuBLAS/plain | best plain config")
    ratios, plain_ratios = [], []
    for s, dt, tt, ttr, best, plain in rows:
        cells = [s, dt, f"{tt:.3f}", f"{ttr:.3f}" if ttr else "-"]
        if best is None:
            cells += ["-", "-", "-", "none worked"]
        else:
            ratios.append(tt / best[0])
            cells += [f"{best[0]:.3f}", f"{tt / best[0]:.3f}", f"{ttr / best[0]:.3f}" if ttr else "-", str(best[1])]
        if plain is None:
            cells += ["-", "-", "none worked"]
        else:
            plain_ratios.append(tt / plain[0])
            cells += [f"{plain[0]:.3f}", f"{tt / plain[0]:.3f}", str(plain[1][1:])]
        print(" | ".join(cells))
    import math

    for what, rs in (("tilex", ratios), ("plain", plain_ratios)):
        if rs:
            print(f"geometric mean cuBLAS/{what}: {math.exp(sum(map(math.log, rs)) / len(rs)):.3f}")


if __name__ == "__main__":
    main()
