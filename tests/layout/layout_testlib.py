"""Shared helpers for tilex.layout tests (a uniquely named module, not a conftest, to avoid name clashes)."""
import numpy as np


def grid(shape):
    """Row-major list of flattened coordinate arrays covering every point of ``shape``."""
    g = np.meshgrid(*[np.arange(s) for s in shape], indexing="ij")
    return [x.reshape(-1) for x in g]
