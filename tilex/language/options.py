"""Checks shared by the frontend builders for their keyword arguments.

Every argument of the TileLang surface that tilex exposes either works, or raises ``NotImplementedError`` naming
it when it is given a value other than its default (:func:`unsupported`); numbers are validated with a
``ValueError`` / ``TypeError`` that names the function and the argument (:func:`as_int`, :func:`as_bool`).
"""
from __future__ import annotations

import numpy as np
import tvm
from tvm import tirx


def unsupported(api: str, name: str, value, hint: str = ""):
    """Raise the ``NotImplementedError`` for ``api(name=value)``, a TileLang option tilex does not implement."""
    raise NotImplementedError(f"{api}({name}={value!r}) is not supported by tilex" + (f": {hint}" if hint else "")
                              + f" (leave {name} at its default)")


def constant(value):
    """`value` as a Python int/float/bool when it is a literal (``IntImm``/``FloatImm`` included), else `value`."""
    if isinstance(value, (tirx.IntImm, tirx.FloatImm)):
        return value.value
    if isinstance(value, np.generic):
        return value.item()
    return value


def as_int(api: str, name: str, value, minimum=None, maximum=None) -> int:
    """`value` as an int (a Python/NumPy int or a TIR ``IntImm``; not a bool), checked against the bounds."""
    v = constant(value)
    if isinstance(v, bool) or not isinstance(v, int):
        raise TypeError(f"{api}: {name} must be an int, got {value!r}")
    if minimum is not None and v < minimum:
        raise ValueError(f"{api}: {name} must be >= {minimum}, got {v}")
    if maximum is not None and v > maximum:
        raise ValueError(f"{api}: {name} must be <= {maximum}, got {v}")
    return v


def as_bool(api: str, name: str, value) -> bool:
    """`value` as a bool (True/False, 0/1, or a constant TIR expression of those values)."""
    v = constant(value)
    if isinstance(v, bool) or (isinstance(v, int) and v in (0, 1)):
        return bool(v)
    if isinstance(value, tvm.ir.expr.Expr):
        unsupported(api, name, value, "only a constant True/False is accepted, not a run-time expression")
    raise TypeError(f"{api}: {name} must be a bool, got {value!r}")


def no_annotations(api: str, annotations):
    """``annotations=None`` / ``{}`` is accepted; any entry raises ``NotImplementedError`` naming its key."""
    if annotations is None:
        return
    if not isinstance(annotations, dict):
        raise TypeError(f"{api}: annotations must be a dict, got {annotations!r}")
    for key, value in annotations.items():
        unsupported(api, "annotations", {key: value}, f"annotation '{key}' is not implemented")


def positive_extents(api: str, what: str, extents):
    """Check that every constant extent in `extents` is a positive int (run-time expressions pass)."""
    for e in extents:
        v = constant(e)
        if isinstance(v, bool) or isinstance(v, float):
            raise TypeError(f"{api}: {what} must be ints, got {list(extents)!r}")
        if isinstance(v, int) and v <= 0:
            raise ValueError(f"{api}: {what} must be positive, got {list(extents)!r}")


__all__ = ["unsupported", "constant", "as_int", "as_bool", "no_annotations", "positive_extents"]
