"""benchmarks/tilelang_example_ratios.py pairs the times TileLang's examples print (reference, own kernel)."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "benchmarks"))

import tilelang_example_ratios as ter  # noqa: E402


def test_the_spellings_of_the_examples_pair_up():
    assert ter.ratios(["Ref: 0.50 ms", "Ref: 6.47 TFlops", "Tile-lang: 0.25 ms", "Tile-lang: 26.6 TFlops"]) == \
        [(0.5, 0.25)]
    assert ter.ratios(["fla_time:  0.45", "tilelang_time:  1.5"]) == [(0.45, 1.5)]
    assert ter.ratios(["fwd  tilelang: 0.0705 ms   ref: 0.0818 ms", "bwd  tilelang: 0.25 ms   ref: 0.33 ms"]) == \
        [(0.0818, 0.0705), (0.33, 0.25)]
    assert ter.ratios(["Best latency: 0.161 ms", "TFlops: 852", "Ref latency: 0.164 ms"]) == [(0.164, 0.161)]


def test_rates_and_unnamed_times_are_not_paired():
    assert ter.ratios(["Latency: 0.32 ms", "TFlops: 7.1 TFlops"]) == []
    assert ter.ratios(["Sparse TFLOPS: 23.36, Latency: 9.2e-05 s"]) == []
