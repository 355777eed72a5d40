"""The XGBoost cost model (tilex.autotuner.cost_model): features read from real GEMM programs, a measurement
database round trip, and a ranker trained on some problems that puts the fastest configuration of held-out
problems near the top (latencies here are synthetic: a roofline with wave quantization)."""
import math

import numpy as np
import pytest

pytest.importorskip("xgboost")

from tilex.autotuner.cost_model import CostModel, MeasurementDB, program_features  # noqa: E402

from programs import matmul  # noqa: E402

TILES = [(64, 64, 3, 128), (128, 128, 3, 128), (128, 256, 3, 256), (64, 256, 4, 128), (128, 64, 4, 128)]


def synthetic_ms(M, N, K, bm, bn):
    """Compute at a rate that grows with the tile, in whole waves of 132 blocks, plus reading the operands."""
    tiles = math.ceil(M / bm) * math.ceil(N / bn)
    per_tile = 2 * bm * bn * K / (4e12 * (bm * bn / (128 * 256)) ** 0.3)
    return math.ceil(tiles / 132) * per_tile * 1e3 + (M * K + K * N) * 2 / 3e12 * 1e3 * (1 + N / bn / 64)


def rows_for(M, N, K):
    out = []
    for bm, bn, st, th in TILES:
        cfg = dict(bm=bm, bn=bn, stages=st, threads=th)
        f = program_features(matmul(M, N, K, bm=bm, bn=bn, bk=64, stages=st, threads=th), cfg, (M, N, K),
                             registers=128, smem=(bm + bn) * 64 * 2 * st)
        out.append((cfg, f, synthetic_ms(M, N, K, bm, bn)))
    return out


def test_features_of_a_gemm():
    f = program_features(matmul(1024, 2048, 512, bm=128, bn=128, bk=64), dict(bm=128, bn=128), (1024, 2048, 512),
                         registers=168, smem=64 * 1024)
    assert f["grid"] == 8 * 16 and f["loops"] == 8 and f["threads"] == 128 and f["cfg.bm"] == 128
    assert f["arg.1"] == 2048 and f["blocks_per_sm"] == 3 and f["waves"] == pytest.approx(128 / 396)


def test_database_round_trip(tmp_path):
    db = MeasurementDB(str(tmp_path / "m.jsonl"))
    db.add("p1", [(dict(bm=64), {"grid": 1.0}, 0.5), (dict(bm=128), {"grid": 2.0}, 0.25)])
    db.add("p2", [(dict(bm=64), {"grid": 3.0}, 1.0)])
    with open(db.path, "a") as fh:
        fh.write('{"problem": "cut sh')  # a line a crash cut short is skipped
    rows = db.load()
    assert [r["problem"] for r in rows] == ["p1", "p1", "p2"] and db.problems() == {"p1", "p2"}


def test_ranker_finds_the_fastest_on_held_out_problems(tmp_path):
    rng = np.random.default_rng(0)
    shapes = {(int(2 ** rng.uniform(5, 14)), int(2 ** rng.integers(10, 15)), int(2 ** rng.integers(9, 14)))
              for _ in range(40)}
    db = MeasurementDB(str(tmp_path / "m.jsonl"))
    for s in shapes:
        db.add(repr(s), rows_for(*s))
    shapes = sorted(shapes)
    held = set(map(repr, shapes[::4]))
    model = CostModel(n_estimators=200).fit(db.load(), exclude=held)
    hits = 0
    for key in held:
        rows = rows_for(*eval(key))  # noqa: S307 - our own repr of a tuple of ints
        best = min(range(len(rows)), key=lambda i: rows[i][2])
        hits += best in model.rank([f for _, f, _ in rows])[:2]
    assert hits >= 0.8 * len(held)
    with pytest.raises(ValueError, match="two or more"):
        CostModel().fit([{"problem": "x", "features": {}, "ms": 1.0}])


def test_tuner_ranks_before_compiling_with_top_k(tmp_path):
    """With top_k and a database of other problems, the tuner compiles only the max(2 top_k, top_k + 3)
    configurations a model on the program-only features ranks fastest (the oracle among them) and reports the rest
    as skipped."""
    from tilex.autotuner import AutoTuner
    from tilex.autotuner.cost_model import known_before_compiling

    db = MeasurementDB(str(tmp_path / "m.jsonl"))
    rng = np.random.default_rng(1)
    for _ in range(12):
        s = (int(2 ** rng.uniform(6, 13)), int(2 ** rng.integers(10, 14)), int(2 ** rng.integers(9, 13)))
        db.add(repr(s), rows_for(*s))

    def gemm(M, N, K, bm=128, bn=128, stages=3, threads=128):
        return matmul(M, N, K, bm=bm, bn=bn, bk=64, stages=stages, threads=threads)

    configs = [dict(bm=bm, bn=bn, stages=st, threads=th) for bm, bn, st, th in TILES + [(64, 128, 3, 128)]]
    t = AutoTuner(gemm, configs, out_idx=-1, target="sm_90a", top_k=1, cost_db=db.path, parallel="thread",
                  progress=False)
    job = t._bind((2048, 4096, 1024), {})
    keep = t._keep_before_compiling(job)
    assert keep is not None and len(keep) == 4 and keep == sorted(keep)
    ms = [synthetic_ms(2048, 4096, 1024, c["bm"], c["bn"]) for c in configs]
    assert int(np.argmin(ms)) in keep
    report = t._compile_subset(job, keep)
    assert [r.index for r in report.results] == list(range(len(configs)))
    assert {r.index for r in report.results if r.status == "compiled"} == set(keep)
    assert all("ranked out" in r.reason for r in report.results if r.index not in keep)
    assert known_before_compiling("cfg.bm") and not known_before_compiling("registers")
