"""Runtime selection over a dynamic size (tilex.autotuner.dispatch, launch_shape): grid and loop counts read from
real symbolic-M GEMM programs, configurations grouped into macro configurations, wave-aligned samples, tables
fitted on a synthetic wave-structured latency, the dense choice against the true optimum, the JSON round trip and
the per-call routing of DynamicKernel."""
import json
import math

import numpy as np
import pytest
import torch

import tilex.language as T
from tilex.autotuner.dispatch import DispatchTable, DynamicKernel, blocks_per_sm, macro_groups, sample_values
from tilex.autotuner.dynamic import size_source, sized_supply
from tilex.autotuner.launch_shape import launch_shape
from tilex.autotuner.tuner import normalize_dynamic
from tilex.autotuner.wave_model import waves
from tilex.jit.args import ArgChecker

from programs import matmul

N, K, MAX = 2048, 1024, 4096
SMS = 132
# (bm, bn, stages): two micro configurations of the 128x128 macro, one each of 64x64 and 128x256
CONFIGS = [(128, 128, 3), (128, 128, 4), (64, 64, 3), (128, 256, 3)]


@pytest.fixture(scope="module")
def shapes():
    return [launch_shape(matmul(T.dynamic("m"), N, K, bm=bm, bn=bn, bk=64, stages=st)) for bm, bn, st in CONFIGS]


def true_ms(i, m, shapes):
    """A made-up latency with the structure WaveTune models: a cost per wave that grows slower than the tile's
    work (large tiles are more efficient, small ones finish a wave sooner), a slope in G within a wave, and micro
    configs that trade places (stages 4 wins on one wave, 3 after)."""
    bm, bn, st = CONFIGS[i]
    grid, loops = shapes[i].at(m=m)
    w = waves(grid, SMS)
    per_wave = 1e-4 * (bm * bn) ** 0.7 * loops
    t = w * per_wave + 2e-4 * grid / w + 0.003
    if st == 4:
        t *= 0.97 if w == 1 else 1.04
    return t


def test_launch_shape_reads_grid_loops_and_threads(shapes):
    assert shapes[0].at(m=1) == (N // 128, K // 64) and shapes[0].at(m=129) == (2 * N // 128, K // 64)
    assert shapes[0].threads == 128
    g, l = shapes[2].at_many(m=np.array([1, 64, 65, 4096]))
    assert g.tolist() == [32, 32, 64, 64 * 32] and l.tolist() == [16] * 4
    with pytest.raises(ValueError, match="no symbolic size"):
        shapes[0].at(n=3)


def test_macro_groups_and_wave_aligned_samples(shapes):
    assert macro_groups(shapes, "m", MAX) == [[0, 1], [2], [3]]
    vals = sample_values(shapes[0], "m", MAX, SMS, max_waves=3, per_wave=2, anchors=0)
    grids = [shapes[0].at(m=v)[0] for v in vals]
    assert vals[0] == 1 and grids == sorted(grids) and max(vals) <= MAX
    assert {waves(g, SMS) for g in grids} == {1, 2, 3}
    far = sample_values(shapes[0], "m", MAX, SMS, max_waves=3, per_wave=2, anchors=2)
    assert far[:len(vals)] == vals and len(far) == len(vals) + 2 and far[-1] == MAX  # geometric far anchors


def test_blocks_per_sm_limits():
    assert blocks_per_sm(128, None, None) == 16
    assert blocks_per_sm(256, 168, None) == 1  # 168 registers x 256 threads: one block's worth of 64K
    assert blocks_per_sm(128, 32, 100 * 1024) == 2


def fitted(shapes):
    samples = {}
    caps = [SMS] * len(CONFIGS)
    for group in macro_groups(shapes, "m", MAX):
        for v in sample_values(shapes[group[0]], "m", MAX, SMS, max_waves=6, per_wave=3):
            for i in group:
                samples.setdefault(i, []).append((v, true_ms(i, v, shapes)))
    return DispatchTable.fit("m", MAX, shapes, caps, samples), samples


def test_table_is_near_the_oracle_and_beats_any_single_config(shapes):
    table, samples = fitted(shapes)
    assert sum(len(v) for v in samples.values()) < 0.02 * MAX * len(CONFIGS)  # sparse: under 2% of the points
    ms = np.arange(1, MAX + 1)
    chosen = np.array([true_ms(table.choose(int(m)), int(m), shapes) for m in ms])
    every = np.array([[true_ms(i, int(m), shapes) for i in range(len(CONFIGS))] for m in ms])
    oracle = every.min(axis=1)
    assert math.exp(np.mean(np.log(oracle / chosen))) > 0.98
    best_single = every.mean(axis=0).argmin()
    assert math.exp(np.mean(np.log(every[:, best_single] / chosen))) > 1.05
    assert table.choose(1) in (0, 1, 2, 3) and table.choose(10 ** 6) in (0, 1, 2, 3)  # past the table: the model


def test_json_round_trip_and_size(shapes):
    table, _ = fitted(shapes)
    data = json.loads(json.dumps(table.to_json()))
    again = DispatchTable.from_json(data, shapes)
    assert again.choices == table.choices and table.nbytes() < 1 << 20
    with pytest.raises(ValueError, match="format"):
        DispatchTable.from_json({**data, "format": 0}, shapes)


class FakeKernel:
    """A JITKernel's launcher (Python, or a tvm-ffi function as the C++ caller is) and its argument checks."""

    def __init__(self, i, calls, ffi=False):
        self.i = i

        def run(*args):
            calls.append(self.i)
            if args and isinstance(args[0], str) and args[0] == "bad":
                raise RuntimeError("refused by the host code")
            return self.i

        if ffi:
            import tvm_ffi

            run = tvm_ffi.convert(run)
        self._run = run

    def launcher(self):
        return self._run

    def check_args(self, *args):
        raise ValueError(f"argument 'A' (index 0): expected a torch.Tensor, got {type(args[0]).__name__}")


@pytest.mark.parametrize("ffi", [False, True], ids=["python", "cpp"])
def test_dynamic_kernel_routes_each_call_by_its_size(shapes, ffi):
    """Each call runs the configuration the table picks for its size; a value past the table asks the model;
    something that is not a size goes to a kernel whose checks then name the problem. ``cpp``: the decision is
    the C++ dispatcher of tilex.jit.launcher over tvm-ffi launchers (the C++ callers)."""
    if ffi:
        from tilex.jit.launcher import dispatcher_factory

        if dispatcher_factory() is None:
            pytest.skip("no host C++ compiler to build the C++ dispatcher")
    table, _ = fitted(shapes)
    calls = []
    params = ArgChecker(matmul(T.dynamic("m"), N, K)).params
    assert size_source(params, "m") == (0, 0)
    dk = DynamicKernel([FakeKernel(i, calls, ffi) for i in range(len(CONFIGS))], CONFIGS, table,
                       size_source(params, "m"))
    for m in (1, 100, 3000, MAX, MAX + 500):
        a = torch.empty(m, 1)
        assert dk(a, None) == table.choose(m) == calls[-1]
        assert dk.kernel_for(m).i == table.choose(m)
    assert dk("not a tensor") == calls[-1]  # goes to a kernel's launcher
    with pytest.raises(ValueError, match="argument 'A'"):  # whose argument checks name a refused argument
        dk("bad")


def test_sized_supply_slices_one_allocation():
    params = ArgChecker(matmul(T.dynamic("m"), 64, 32), out_idx=-1).params
    made = []

    def make(specs):
        made.append(specs[0].shape)
        return [torch.zeros(specs[0].shape)]

    supply = sized_supply(params, "m", 100, make)
    a, b = supply(7)
    assert a.shape == (7, 32) and b.shape == (32, 64) and a.is_contiguous()
    supply(9)
    assert made == [(100, 32), (32, 64), (32, 64)]


def test_normalize_dynamic():
    assert normalize_dynamic(None) == {} and normalize_dynamic("m") == {"m": 16384}
    assert normalize_dynamic({"m": 512}) == {"m": 512}
    with pytest.raises(ValueError, match="one dynamic size"):
        normalize_dynamic(["m", "n"])
    with pytest.raises(ValueError, match="positive int"):
        normalize_dynamic({"m": 0})


def test_a_dynamic_size_compiles_in_worker_processes():
    """TVM 0.27 crashes pickling a tirx.Var, so the tuner sends a T.dynamic size to its worker processes by name
    and dtype; the workers compile the same program (symbolic M) as the parent would."""
    from tilex.autotuner import AutoTuner

    t = AutoTuner(matmul, [dict(bm=64), dict(bm=128)], out_idx=-1, dynamic="m", target="sm_90a",
                  parallel="process", progress=False, max_workers=2)
    report = t.compile(T.dynamic("m"), 256, 128)
    assert report.mode == "process" and [r.status for r in report.results] == ["compiled", "compiled"]
    assert "int m)" in report.results[0].kernel.get_kernel_source()


def test_launch_shape_json_round_trip(shapes):
    import json

    from tilex.autotuner.launch_shape import LaunchShape

    for shape in shapes:
        back = LaunchShape.from_json(json.loads(json.dumps(shape.to_json())))
        assert back.threads == shape.threads
        for m in (1, 63, 64, 129, 100000):
            assert back.at(m=m) == shape.at(m=m)
