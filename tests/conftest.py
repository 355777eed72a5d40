"""Shared pytest setup: the `gpu` marker (auto-skipped without a CUDA GPU) and an isolated kernel cache."""
import os
import tempfile

import pytest

# Keep test runs away from the user's ~/.cache/tilex (subprocesses inherit this).
if os.environ.get("TILEX_TEST_KEEP_CACHE_DIR") != "1":  # set it to 1 to test against a given cache dir
    os.environ["TILEX_CACHE_DIR"] = tempfile.mkdtemp(prefix="tilex-test-cache-")

# pytest-xdist's controller imports the module of each warning a worker reports, in one receiver thread per worker:
# two first imports of tilex at once (two threads) meet its import cycle half-initialized and take the run down.
# Import it here, once, before any worker reports.
import tilex  # noqa: E402,F401


def _cuda_available() -> bool:
    try:
        import torch

        return bool(torch.cuda.is_available())
    except Exception:
        return False


def pytest_configure(config):
    config.addinivalue_line("markers", "gpu: needs a CUDA GPU (skipped automatically when torch sees none)")


def pytest_collection_modifyitems(config, items):
    if _cuda_available():
        return
    skip = pytest.mark.skip(reason="no CUDA GPU")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
