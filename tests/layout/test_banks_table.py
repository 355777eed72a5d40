"""The array evaluation of bank conflicts (``banks._PhaseTable``, what ``conflicts`` and ``synthesize`` use) gives
the per-phase model's numbers (``wavefronts`` of each access) for any accesses and swizzle."""
import numpy as np
import pytest

from tilex.layout.banks import (TMA_MODES, Swizzle, WarpAccess, conflicts, ldmatrix_rows, row_vectors, synthesize,
                                wavefronts)


def _per_phase(accesses, swizzle):
    return sum(wavefronts(a, swizzle) - sum(1 for p in a.phases() if len(p)) for a in accesses)


def _random_accesses(rng, n):
    out = []
    for _ in range(n):
        width = int(rng.choice([1, 2, 4, 8, 16]))
        threads = int(rng.integers(1, 33))
        span = int(rng.choice([64, 512, 4096]))
        addrs = tuple(int(x) * width for x in rng.integers(0, span // width, threads))
        out.append(WarpAccess(addrs, width))
    return out


@pytest.mark.parametrize("seed", range(6))
def test_array_model_matches_the_per_phase_model(seed):
    rng = np.random.default_rng(seed)
    accesses = _random_accesses(rng, 40)
    for s in (Swizzle(0, 0, 0), *TMA_MODES, Swizzle(2, 2, 5), Swizzle(4, 3, 6), Swizzle(5, 4, 7)):
        assert conflicts(accesses, s) == _per_phase(accesses, s)


def test_synthesize_is_unchanged_on_the_patterns():
    acc = [ldmatrix_rows(128, row0=r) for r in range(0, 64, 16)] + [row_vectors(128, 16, row0=r) for r in range(8)]
    s, left = synthesize(acc, 128 * 64)
    assert left == 0 and _per_phase(acc, s) == 0
    assert conflicts(acc) == _per_phase(acc, Swizzle(0, 0, 0)) > 0
