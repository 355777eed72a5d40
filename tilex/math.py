"""Integer helpers of TileLang's ``tilelang.math`` (also ``tilex.cdiv`` / ``tilex.next_power_of_2``). Pure Python,
no imports: they run on Python ints, and ``cdiv`` also on TVM integer expressions (a ``T.dynamic`` size)."""
from __future__ import annotations

import operator

__all__ = ["next_power_of_2", "cdiv"]


def _as_int(x, what: str, func: str) -> int:
    if isinstance(x, bool):
        raise TypeError(f"{func}: {what} must be an integer, got {x!r}")
    try:
        return operator.index(x)
    except TypeError:
        raise TypeError(f"{func}: {what} must be an integer, got {type(x).__name__} {x!r}") from None


def next_power_of_2(x) -> int:
    """The smallest power of two that is >= ``x`` (``x`` >= 1): 1 -> 1, 5 -> 8, 64 -> 64. Raises ValueError
    for ``x`` < 1."""
    n = _as_int(x, "x", "next_power_of_2")
    if n < 1:
        raise ValueError(f"next_power_of_2: x must be at least 1, got {n}")
    return 1 << (n - 1).bit_length()


def cdiv(a, b):
    """``ceil(a / b)`` for a positive divisor: ``(a + b - 1) // b``. Python ints give an int; a TVM integer
    expression (e.g. a ``T.dynamic`` size) gives the same formula as an expression. Raises ValueError for an
    integer ``b`` <= 0."""
    ints = []
    for name, v in (("a", a), ("b", b)):
        try:
            ints.append(_as_int(v, name, "cdiv"))
        except TypeError:
            if isinstance(v, (bool, float, str)) or v is None:
                raise
            ints.append(None)  # a symbolic expression
    ia, ib = ints
    if ib is not None and ib <= 0:
        raise ValueError(f"cdiv: the divisor must be positive, got {ib}")
    if ia is not None and ib is not None:
        return (ia + ib - 1) // ib
    return (a + b - 1) // b
