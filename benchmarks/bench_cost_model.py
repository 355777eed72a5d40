"""The XGBoost cost model for offline tuning (`tilex.autotune(..., top_k=5)`): how often the exhaustive oracle's
configuration is in the model's top 5 on problems it was not trained on, and tuning time with the model against
tuning every configuration.

    python benchmarks/bench_cost_model.py [--folds 3]        # or in two runs: --part exhaustive / evaluate --work D
    python benchmarks/bench_cost_model.py --part compile    # compile phase of several problems, workers kept or not

Every GEMM shape below is tuned exhaustively once (each configuration compiled, checked and timed); the
measurements go to a fresh measurement database. Then, fold by fold, a model trained on the other folds' problems
ranks each held-out problem's configurations (and a model on the program-only features picks the ones the tuner
would compile); a few problems of the first fold are tuned again with top_k=5 against a database holding only the
other folds, timing the whole tuning (compile + benchmark) against the exhaustive pass.
"""
import argparse
import json
import os
import sys
import tempfile
import time

import tilex  # noqa: F401 - the package face (tilex.__version__ is part of the tuner's keys)
from tilex.autotuner import AutoTuner
from tilex.autotuner.cost_model import CostModel, MeasurementDB, known_before_compiling

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_dynamic import DYNAMIC_CONFIGS, gemm  # noqa: E402

SHAPES = [(m, n, k) for m in (16, 128, 512, 2048, 8192) for n in (4096, 8192, 28672) for k in (4096, 8192)]


# the ranked space: bench_dynamic's first 19 configurations (the first session's; its swap-AB tiles of 88-200
# rows, added since for the middle of the dynamic M range, would make the exhaustive pass too long for one run)
CONFIGS = DYNAMIC_CONFIGS[:19]


def tuner(db_path, top_k=None, record=True):
    return AutoTuner(gemm, [{"cfg": c} for c in CONFIGS], out_idx=-1, cache=False, progress=False,
                     skip_check=True, warmup=5, rep=20, top_k=top_k, record=record, cost_db=db_path)


def exhaustive_pass(work):
    """Tune every shape over every configuration; measurements to work/all.jsonl, results to work/exhaustive.json."""
    full_db = os.path.join(work, "all.jsonl")
    path = os.path.join(work, "exhaustive.json")
    out = {}
    if os.path.exists(path):  # resume: a run cut by a time limit keeps the shapes it finished
        with open(path) as fh:
            out = json.load(fh)
    for shape in SHAPES:
        if repr(shape) in out:
            continue
        t = tuner(full_db)
        t0 = time.time()
        report = t.compile(*shape)
        t1 = time.time()
        res = t.benchmark(report)
        t2 = time.time()
        out[repr(shape)] = {"compile_s": t1 - t0, "bench_s": t2 - t1, "best": res.best.index,
                            "ms": {str(r.index): r.latency for r in res.results if r.ok}}
        print(f"{shape}: best #{res.best.index} {CONFIGS[res.best.index]} {res.latency:.4f} ms; compile "
              f"{t1 - t0:.1f} s, benchmark {t2 - t1:.1f} s ({len(out[repr(shape)]['ms'])} configs)", flush=True)
        with open(path, "w") as fh:
            json.dump(out, fh)


def evaluate(work, folds_n, top, tuned_shapes):
    full_db = os.path.join(work, "all.jsonl")
    with open(os.path.join(work, "exhaustive.json")) as fh:
        exhaustive = {eval(k): v for k, v in json.load(fh).items()}  # noqa: S307 - our own tuple reprs
    records = MeasurementDB(full_db).load()
    keys = {shape: AutoTuner._problem_key(tuner(full_db)._bind(shape, {})) for shape in SHAPES}
    folds = [SHAPES[i::folds_n] for i in range(folds_n)]
    hits, pre_hits, regret = 0, 0, []
    for f, held in enumerate(folds):
        model = CostModel().fit(records, exclude={keys[s] for s in held})
        pre = CostModel(only=known_before_compiling).fit(records, exclude={keys[s] for s in held})
        for shape in held:
            ex = exhaustive[shape]
            ms = {int(i): v for i, v in ex["ms"].items()}
            order = sorted(ms)
            feats = {r["config"]: r["features"] for r in records if r["problem"] == keys[shape]}
            rows = [feats[repr({"cfg": CONFIGS[i]})] for i in order]
            top_cfgs = [order[j] for j in model.rank(rows)[:top]]
            pre_cfgs = [order[j] for j in pre.rank(rows)[:max(2 * top, top + 3)]]
            hits += ex["best"] in top_cfgs
            pre_hits += ex["best"] in pre_cfgs
            best_in_top = min(ms[i] for i in top_cfgs)
            regret.append(ms[ex["best"]] / best_in_top)
            print(f"fold {f} {shape}: oracle #{ex['best']} {'in' if ex['best'] in top_cfgs else 'NOT in'} the top "
                  f"{top} {top_cfgs}; in the pre-compile keep list: {ex['best'] in pre_cfgs}; best of the top / "
                  f"oracle = {best_in_top / ms[ex['best']]:.3f}", flush=True)
    n = len(SHAPES)
    print(f"\noracle in the model's top {top}: {hits}/{n} = {hits / n:.0%} (target >= 90%); in the pre-compile "
          f"keep list (the {max(2 * top, top + 3)} compiled): {pre_hits}/{n}; best of the top {top} reaches "
          f"{min(regret):.3f} (min) / {sum(regret) / n:.3f} (mean) of the oracle's speed", flush=True)
    # tuning time: shapes of the first fold tuned again with top_k against a database of the other folds only
    train_db = os.path.join(work, "train.jsonl")
    held_keys = {keys[s] for s in folds[0]}
    with open(train_db, "w") as fh:
        for r in records:
            if r["problem"] not in held_keys:
                fh.write(json.dumps(r) + "\n")
    ex_time = top_time = 0.0
    for shape in folds[0][:tuned_shapes]:
        t = tuner(train_db, top_k=top, record=False)
        t0 = time.time()
        res = t.run(*shape)
        top_time += time.time() - t0
        ex = exhaustive[shape]
        ex_time += ex["compile_s"] + ex["bench_s"]
        compiled = sum(1 for r in res.results if r.status != "skipped")
        print(f"{shape}: top-{top} tuning compiled {compiled}, measured {sum(r.ok for r in res.results)}, chose "
              f"#{res.best.index} ({res.latency:.4f} ms; oracle {ex['ms'][str(ex['best'])]:.4f} ms)", flush=True)
    print(f"\ntuning time over {min(tuned_shapes, len(folds[0]))} problems: exhaustive {ex_time:.1f} s, top-{top} "
          f"{top_time:.1f} s ({ex_time / max(top_time, 1e-9):.1f}x less)")


def compile_part(shapes=4):
    """Wall time of the compile phase (every configuration, in worker processes, each problem a shape compiled
    nowhere before so that nvcc really runs) over `shapes` problems in one process: with the worker pool kept
    between phases (the default) and with a fresh pool per phase (as TILEX_WORKER_KEEP_S=0 makes it)."""
    from tilex.autotuner import workers

    problems = SHAPES[:shapes]
    print(f"\n## compile phase of {len(problems)} problems x {len(CONFIGS)} configurations", flush=True)
    rows = []
    for keep in (False, True):
        workers.release_pool()
        workers.KEEP_IDLE_SECONDS = 60.0 if keep else 0.0
        times = []
        for k, shape in enumerate(problems):
            # a shape no other phase compiled (the kernel cache would answer instead of nvcc)
            shape = (shape[0] + 8 * (1 + k + 10 * keep), *shape[1:])
            t0 = time.time()
            tuner(os.devnull, record=False).compile(*shape)
            times.append(time.time() - t0)
        rows.append((keep, times))
    workers.release_pool()
    print("\n| worker pool | first problem s | each later problem s (mean) | total s |\n| --- | --- | --- | --- |")
    for keep, times in rows:
        later = sum(times[1:]) / max(1, len(times) - 1)
        print(f"| {'kept' if keep else 'fresh per phase'} | {times[0]:.1f} | {later:.1f} | {sum(times):.1f} |")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--part", choices=["exhaustive", "evaluate", "compile", "all"], default="all")
    p.add_argument("--work", default=None, help="directory for the measurement database and the exhaustive "
                   "results (reused by --part evaluate)")
    p.add_argument("--folds", type=int, default=3)
    p.add_argument("--top", type=int, default=5)
    p.add_argument("--tuned-shapes", type=int, default=6, help="first-fold shapes tuned again with top_k")
    args = p.parse_args()
    if args.part == "compile":
        compile_part()
        return
    work = args.work or tempfile.mkdtemp(prefix="tilex-cost-model-")
    os.makedirs(work, exist_ok=True)
    if args.part in ("exhaustive", "all"):
        exhaustive_pass(work)
    if args.part in ("evaluate", "all"):
        evaluate(work, args.folds, args.top, args.tuned_shapes)


if __name__ == "__main__":
    main()
