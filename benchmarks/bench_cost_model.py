"""The XGBoost cost model for offline tuning (`tilex.autotune(..., top_k=5)`): how often the exhaustive oracle's
configuration is in the model's top 5 on problems it was not trained on, and tuning time with the model against
tuning every configuration.

    python benchmarks/bench_cost_model.py [--folds 3]

Every GEMM shape below is tuned exhaustively once (each configuration compiled, checked and timed); the
measurements go to a fresh measurement database. Then, fold by fold, a model trained on the other folds' problems
ranks each held-out problem's configurations; the held-out problems of the first fold are tuned again with
top_k=5 against a database holding only the other folds, timing the benchmark phase.
"""
import argparse
import json
import os
import sys
import tempfile
import time

import tilex  # noqa: F401 - the package face (tilex.__version__ is part of the tuner's keys)
from tilex.autotuner import AutoTuner
from tilex.autotuner.cost_model import CostModel, MeasurementDB

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_dynamic import DYNAMIC_CONFIGS, gemm  # noqa: E402

SHAPES = [(m, n, k) for m in (16, 128, 512, 2048, 8192) for n in (4096, 8192, 28672) for k in (4096, 8192)]


def tuner(db_path, top_k=None, record=True):
    return AutoTuner(gemm, [{"cfg": c} for c in DYNAMIC_CONFIGS], out_idx=-1, cache=False, progress=False,
                     skip_check=True, warmup=5, rep=20, top_k=top_k, record=record, cost_db=db_path)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--folds", type=int, default=3)
    p.add_argument("--top", type=int, default=5)
    args = p.parse_args()
    work = tempfile.mkdtemp(prefix="tilex-cost-model-")
    full_db = os.path.join(work, "all.jsonl")
    exhaustive = {}
    for shape in SHAPES:
        t = tuner(full_db)
        t0 = time.time()
        report = t.compile(*shape)
        t1 = time.time()
        res = t.benchmark(report)
        t2 = time.time()
        exhaustive[shape] = {"compile_s": t1 - t0, "bench_s": t2 - t1, "best": res.best.index,
                             "ms": {r.index: r.latency for r in res.results if r.ok}}
        print(f"{shape}: best #{res.best.index} {DYNAMIC_CONFIGS[res.best.index]} {res.latency:.4f} ms; compile "
              f"{t1 - t0:.1f} s, benchmark {t2 - t1:.1f} s ({len(exhaustive[shape]['ms'])} configs)", flush=True)
    records = MeasurementDB(full_db).load()
    keys = {shape: AutoTuner._problem_key(tuner(full_db)._bind(shape, {})) for shape in SHAPES}
    folds = [SHAPES[i::args.folds] for i in range(args.folds)]
    hits, regret = 0, []
    for f, held in enumerate(folds):
        model = CostModel().fit(records, exclude={keys[s] for s in held})
        for shape in held:
            ex = exhaustive[shape]
            order = sorted(ex["ms"])
            feats = {r["config"]: r["features"] for r in records if r["problem"] == keys[shape]}
            ranked = model.rank([feats[repr({"cfg": DYNAMIC_CONFIGS[i]})] for i in order])
            top = [order[j] for j in ranked[:args.top]]
            hit = ex["best"] in top
            hits += hit
            best_in_top = min(ex["ms"][i] for i in top)
            regret.append(ex["ms"][ex["best"]] / best_in_top)
            print(f"fold {f} {shape}: oracle #{ex['best']} {'in' if hit else 'NOT in'} the top {args.top} "
                  f"{top}; best of the top {args.top} / oracle = {best_in_top / ex['ms'][ex['best']]:.3f}",
                  flush=True)
    n = len(SHAPES)
    print(f"\noracle in the model's top {args.top}: {hits}/{n} = {hits / n:.0%} (target >= 90%); best of the top "
          f"{args.top} reaches {min(regret):.3f}..{sum(regret) / n:.3f} (min..mean) of the oracle's speed")
    # tuning time: the first fold tuned again with top_k against a database of the other folds only
    train_db = os.path.join(work, "train.jsonl")
    with open(train_db, "w") as fh:
        held_keys = {keys[s] for s in folds[0]}
        for r in records:
            if r["problem"] not in held_keys:
                fh.write(json.dumps(r) + "\n")
    ex_bench = ex_compile = top_bench = 0.0
    for shape in folds[0]:
        t = tuner(train_db, top_k=args.top, record=False)
        report = t.compile(*shape)
        t0 = time.time()
        res = t.benchmark(report)
        top_bench += time.time() - t0
        ex_bench += exhaustive[shape]["bench_s"]
        ex_compile += exhaustive[shape]["compile_s"]
        measured = sum(1 for r in res.results if r.ok)
        print(f"{shape}: top-{args.top} tuning measured {measured} configs, chose #{res.best.index} "
              f"({res.latency:.4f} ms; oracle {exhaustive[shape]['ms'][exhaustive[shape]['best']]:.4f} ms)")
    print(f"\nbenchmark phase over {len(folds[0])} problems: exhaustive {ex_bench:.1f} s, top-{args.top} "
          f"{top_bench:.1f} s ({ex_bench / max(top_bench, 1e-9):.1f}x less); compile phase (both) {ex_compile:.1f} s")


if __name__ == "__main__":
    main()
