"""The WaveTune model (tilex.autotuner.wave_model) on synthetic latencies with a wave structure: coefficients
recovered per wave, extrapolation past the measured waves, the coherent micro config per bucket, nearest loop
anchors, and the macro choice that minimizes predicted latency."""
import numpy as np
import pytest

from tilex.autotuner.wave_model import (WaveModel, WaveTable, fit_bilinear, gemm_shape_map, wave_aligned_grids,
                                        waves)

CAP = 132  # one block per SM on a 132-SM GPU


def true_latency(grid, loops, scale=1.0):
    """A latency surface with a jump per wave: each wave adds a fixed cost and the per-block slope depends on it."""
    w = waves(grid, CAP)
    return scale * (0.002 * grid * loops / w + 0.5 * w * loops + 0.01 * grid + 3.0 * w)


def test_waves_and_wave_aligned_grids():
    assert [waves(g, CAP) for g in (1, 132, 133, 264, 265)] == [1, 1, 2, 2, 3]
    grids = wave_aligned_grids(CAP, 3, 4)
    assert grids == [33, 66, 99, 132, 165, 198, 231, 264, 297, 330, 363, 396]
    assert [waves(g, CAP) for g in grids] == [1] * 4 + [2] * 4 + [3] * 4
    with pytest.raises(ValueError):
        waves(0, CAP)


def test_fit_bilinear_recovers_exact_coefficients():
    rng = np.random.default_rng(0)
    g, l = rng.integers(1, 500, 40), rng.integers(1, 64, 40)
    theta = np.array([0.003, 0.02, 0.7, 5.0])
    t = theta[0] * g * l + theta[1] * g + theta[2] * l + theta[3]
    np.testing.assert_allclose(fit_bilinear(g, l, t), theta, rtol=1e-6)
    with pytest.raises(ValueError):
        fit_bilinear([1, 2], [1], [1, 2])


def _samples(loops=(8, 16, 32, 64), max_waves=4, micro_gain=None):
    micro_gain = micro_gain or {"s3": 1.0, "s4": lambda l: 0.9 if l >= 32 else 1.1}
    out = []
    for g in wave_aligned_grids(CAP, max_waves, 4):
        for l in loops:
            for name, gain in micro_gain.items():
                f = gain(l) if callable(gain) else gain
                out.append((g, l, name, true_latency(g, l) * f))
    return out


def test_model_is_exact_inside_each_wave_and_continues_past_them():
    """One micro config: the surface is bilinear inside each wave, so each wave's fit is exact; past the measured
    waves the tail's coefficients carry on."""
    model = WaveModel.fit(CAP, _samples(micro_gain={"s3": 1.0}))
    assert sorted(model.coefficients) == [1, 2, 3, 4]
    for g, l in ((50, 20), (200, 40), (500, 10), (CAP, 64), (CAP + 1, 8)):
        assert model.predict(g, l) == pytest.approx(true_latency(g, l), rel=1e-6)
    assert model.predict(CAP + 1, 16) > model.predict(CAP, 16)  # the jump at a wave boundary
    for w in (6, 10):
        g = w * CAP
        assert model.predict(g, 32) == pytest.approx(true_latency(g, 32), rel=0.25)


def test_model_with_micro_configs_predicts_the_chosen_ones():
    """Two micro configs, the better one depending on L: each (wave, L) bucket keeps the better one, and the fit
    over those is close to the better latency."""
    model = WaveModel.fit(CAP, _samples())
    for g, l in ((50, 16), (200, 32), (500, 64)):
        best = min(true_latency(g, l) * f for f in (1.0, 0.9 if l >= 32 else 1.1))
        assert model.predict(g, l) == pytest.approx(best, rel=0.08)


def test_micro_config_is_coherent_per_bucket_and_taken_from_the_nearest_anchor():
    model = WaveModel.fit(CAP, _samples())
    assert model.micro_config(100, 8) == "s3" and model.micro_config(100, 64) == "s4"
    assert model.micro_config(100, 20) == "s3"   # nearest anchor 16
    assert model.micro_config(100, 30) == "s4"   # nearest anchor 32
    assert model.micro_config(50 * CAP, 60) == "s4"  # past the measured waves: the last one's anchors


def test_table_chooses_the_macro_config_with_the_least_predicted_latency():
    # two tile shapes: the small tile makes 4x the blocks, each a quarter of the work and 10% cheaper per unit
    samples_big = _samples()
    samples_small = [(g, l, m, t * 0.9) for g, l, m, t in _samples(max_waves=12)]
    table = WaveTable({(128, 128, 64): WaveModel.fit(CAP, samples_big),
                       (64, 64, 64): WaveModel.fit(CAP, samples_small)}, gemm_shape_map)
    macro, micro, t = table.choose(1024, 1024, 4096)  # 64 big tiles (half a wave) against 256 small ones
    g_big, l = gemm_shape_map((128, 128, 64), 1024, 1024, 4096)
    g_small, _ = gemm_shape_map((64, 64, 64), 1024, 1024, 4096)
    want = min(((128, 128, 64), true_latency(g_big, l) * 0.9), ((64, 64, 64), true_latency(g_small, l) * 0.81),
               key=lambda x: x[1])
    assert macro == want[0] and micro == "s4" and t == pytest.approx(want[1], rel=0.05)


def test_a_wave_measured_at_one_launch_shape_predicts_its_latency():
    """A tile as wide as a wave (or a far anchor) gives one grid size per wave: that wave predicts what was
    measured there, not the tail's extrapolation."""
    samples = [(128 * w, 64, "a", 0.1 * w + (0.05 if w == 2 else 0.0)) for w in (1, 2, 3, 4, 8)]
    model = WaveModel.fit(128, samples)
    for grid, loops, _, ms in samples:
        assert model.predict(grid, loops) == pytest.approx(ms)
    assert model.predict(128 * 6, 64) == pytest.approx(0.6, rel=0.2)  # an unmeasured wave: the extrapolation


def test_waves_between_measured_ones_interpolate_the_step_heights():
    samples = [(128 * w, 64, "a", 0.1 * w) for w in (1, 2, 3, 10)]
    model = WaveModel.fit(128, samples, tail_waves=2)
    assert model.predict(128 * 6, 64) == pytest.approx(0.6)  # between waves 3 and 10: on the line of full waves
    assert model.predict_many([128 * 6, 128 * 2], [64, 64]).tolist() == pytest.approx([0.6, 0.2])
