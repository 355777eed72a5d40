"""Expression helpers for tilex layouts: placeholders, substitution, bounds and a numpy evaluator.

Everything here works on int32 TVM ``PrimExpr`` trees (``tvm.tirx``).  The numpy evaluator
compiles an expression into a Python closure that evaluates it element-wise on integer
arrays; it is used for exact range computation (e.g. swizzles, where ``const_int_bound``
knows nothing about ``^``) and by the tests.
"""
from __future__ import annotations

from typing import Callable, Dict, List, Mapping, Sequence

import numpy as np
import tvm
import tvm_ffi
from tvm import tirx
from tvm.ir import Range
from tvm.ir.prim import expr as _E

from tilex.ir import visit

INDEX_DTYPE = "int32"
PrimExpr = tvm.ir.expr.Expr  # PrimExpr base class in 0.27 (tvm.ir.PrimExpr is gone)

# Domains up to this many points are enumerated exactly when the analyzer bound is useless.
MAX_ENUMERATE = 1 << 22
# Domains up to this many points always get exact extents by enumeration.
EXACT_ENUMERATE = 1 << 18

_PLACEHOLDERS: List[tirx.Var] = []
_REP_VAR = tirx.Var("_rep", INDEX_DTYPE)


class LayoutError(ValueError):
    """Raised when a layout / fragment operation is not defined (e.g. inverse of a non-bijection)."""


def placeholders(n: int) -> tuple:
    """The cached placeholder vars ``_i0 .. _i{n-1}`` (``placeholders(n)`` is a prefix of ``placeholders(n+1)``)."""
    while len(_PLACEHOLDERS) < n:
        _PLACEHOLDERS.append(tirx.Var(f"_i{len(_PLACEHOLDERS)}", INDEX_DTYPE))
    return tuple(_PLACEHOLDERS[:n])


def rep_var() -> tirx.Var:
    """The cached replication placeholder ``_rep``."""
    return _REP_VAR


def to_expr(x) -> PrimExpr:
    """Python int / bool / numpy int -> int32 IntImm; PrimExpr passes through."""
    if isinstance(x, (bool, np.bool_)):
        x = int(x)
    if isinstance(x, (int, np.integer)):
        return tirx.const(int(x), INDEX_DTYPE)
    if isinstance(x, PrimExpr):
        return x
    raise TypeError(f"expected an int or PrimExpr index, got {type(x).__name__}: {x!r}")


def as_expr_list(x) -> List[PrimExpr]:
    """A PrimExpr / int or a sequence of them -> list of PrimExpr."""
    if isinstance(x, (PrimExpr, int, np.integer)):
        return [to_expr(x)]
    return [to_expr(e) for e in x]


def substitute(expr, vmap: Mapping) -> PrimExpr:
    """Simultaneously replace vars in ``expr`` (``vmap``: Var -> PrimExpr/int; ints become index constants)."""
    return visit.substitute(to_expr(expr), {v: to_expr(e) for v, e in vmap.items()})


def make_analyzer(vars_: Sequence[tirx.Var], extents: Sequence[int], analyzer=None):
    """An Analyzer with ``vars_[d]`` bound to ``[0, extents[d])``."""
    ana = analyzer if analyzer is not None else tvm.sym.Analyzer()
    for v, e in zip(vars_, extents):
        ana.bind(v, Range(0, int(e)))
    return ana


def simplify(expr, analyzer=None) -> PrimExpr:
    ana = analyzer if analyzer is not None else tvm.sym.Analyzer()
    return ana.simplify(to_expr(expr))


def _contains_bitwise(expr) -> bool:
    found = []

    def cb(node):
        found.append(node)
        return node

    tvm_ffi.structural_map(
        expr,
        [(t, cb) for t in (_E.BitwiseXor, _E.BitwiseAnd, _E.BitwiseOr, _E.BitwiseNot, _E.LShift, _E.RShift)],
    )
    return bool(found)


# ---------------------------------------------------------------------------------------------
# numpy evaluator
# ---------------------------------------------------------------------------------------------
def _truncdiv(a, b):
    q = np.abs(a) // np.abs(b)
    return np.where((a < 0) != (b < 0), -q, q)


_BINOPS = {
    _E.Add: np.add,
    _E.Sub: np.subtract,
    _E.Mul: np.multiply,
    _E.FloorDiv: np.floor_divide,
    _E.FloorMod: np.mod,
    _E.Div: _truncdiv,
    _E.Mod: lambda a, b: a - b * _truncdiv(a, b),
    _E.Min: np.minimum,
    _E.Max: np.maximum,
    _E.BitwiseXor: np.bitwise_xor,
    _E.BitwiseAnd: np.bitwise_and,
    _E.BitwiseOr: np.bitwise_or,
    _E.LShift: np.left_shift,
    _E.RShift: np.right_shift,
    _E.EQ: np.equal,
    _E.NE: np.not_equal,
    _E.LT: np.less,
    _E.LE: np.less_equal,
    _E.GT: np.greater,
    _E.GE: np.greater_equal,
    _E.And: np.logical_and,
    _E.Or: np.logical_or,
}


def _compile(node, var_pos: Dict) -> Callable:
    if isinstance(node, _E.IntImm):
        val = int(node.value)
        return lambda env: val
    if isinstance(node, tvm.ir.Var):
        if node not in var_pos:
            raise LayoutError(f"cannot evaluate free variable {node}")
        k = var_pos[node]
        return lambda env: env[k]
    for cls, fn in _BINOPS.items():
        if type(node) is cls:
            fa, fb = _compile(node.a, var_pos), _compile(node.b, var_pos)
            return lambda env: fn(fa(env), fb(env))
    if isinstance(node, _E.Not):
        fa = _compile(node.a, var_pos)
        return lambda env: np.logical_not(fa(env))
    if isinstance(node, _E.BitwiseNot):
        fa = _compile(node.a, var_pos)
        return lambda env: np.invert(fa(env))
    if isinstance(node, _E.Cast):
        fa = _compile(node.value, var_pos)
        return lambda env: np.asarray(fa(env)).astype(np.int64)
    if isinstance(node, _E.Select):
        fc, ft, ff = (_compile(x, var_pos) for x in (node.condition, node.true_value, node.false_value))
        return lambda env: np.where(fc(env), ft(env), ff(env))
    if isinstance(node, tvm.ir.Call) and getattr(node.op, "name", "") == "tirx.if_then_else":
        fc, ft, ff = (_compile(x, var_pos) for x in node.args)
        return lambda env: np.where(fc(env), ft(env), ff(env))
    raise LayoutError(f"numpy evaluator: unsupported expression node {type(node).__name__}: {node}")


def compile_numpy(exprs: Sequence, vars_: Sequence[tirx.Var]) -> Callable:
    """Compile ``exprs`` over ``vars_`` into ``f(*int_arrays) -> list[np.ndarray (int64)]`` (broadcasting)."""
    var_pos = {v: k for k, v in enumerate(vars_)}
    fns = [_compile(to_expr(e), var_pos) for e in exprs]

    def run(*arrays):
        env = [np.asarray(a, dtype=np.int64) for a in arrays]
        shape = np.broadcast_shapes(*(a.shape for a in env)) if env else ()
        return [np.broadcast_to(np.asarray(f(env), dtype=np.int64), shape).copy() for f in fns]

    return run


def domain_grid(shape: Sequence[int]) -> List[np.ndarray]:
    """Flattened row-major coordinates of every point of ``shape`` (one int64 array per dim)."""
    if len(shape) == 0:
        return []
    grids = np.meshgrid(*[np.arange(int(s), dtype=np.int64) for s in shape], indexing="ij")
    return [g.reshape(-1) for g in grids]


def extents_of(exprs: Sequence, vars_: Sequence[tirx.Var], shape: Sequence[int], what="output") -> tuple:
    """Per expr: (max value over the domain) + 1.

    Exact (numpy enumeration) for domains up to ``EXACT_ENUMERATE`` points; larger domains use
    ``Analyzer.const_int_bound`` and fall back to enumeration (up to ``MAX_ENUMERATE``) when the bound is
    useless (bitwise ops, unbounded, or possibly negative).
    """
    n = int(np.prod(shape)) if len(shape) else 1
    ana = make_analyzer(vars_, shape)
    out = []
    for e in exprs:
        lo = hi = None
        if n > EXACT_ENUMERATE:
            b = ana.const_int_bound(e)
            lo, hi = int(b.min_value), int(b.max_value)
            if _contains_bitwise(e) or hi >= (1 << 31) - 1 or lo < 0:
                lo = hi = None
        if lo is None:
            if n > MAX_ENUMERATE:
                raise LayoutError(f"cannot bound {what} expression {e} (domain {tuple(shape)} too big to enumerate)")
            (vals,) = compile_numpy([e], vars_)(*domain_grid(shape))
            lo, hi = int(vals.min()), int(vals.max())
        if lo < 0:
            raise LayoutError(f"{what} expression {e} is negative (min {lo}) on domain {tuple(shape)}")
        out.append(hi + 1)
    return tuple(out)


def row_major_offset(indices: Sequence, shape: Sequence[int]) -> PrimExpr:
    """:func:`tilex.ir.visit.row_major_offset` of index expressions (ints allowed) in a static shape."""
    return visit.row_major_offset([to_expr(i) for i in indices], [int(s) for s in shape])


def exprs_equal(a: Sequence, b: Sequence, vars_: Sequence[tirx.Var], shape: Sequence[int]) -> bool:
    """Are the expressions equal on the whole domain? structural -> analyzer proof -> enumeration (small domains)."""
    if len(a) != len(b):
        return False
    ana = make_analyzer(vars_, shape)
    pending = []
    for x, y in zip(a, b):
        x, y = ana.simplify(to_expr(x)), ana.simplify(to_expr(y))
        if tvm_ffi.structural_equal(x, y):
            continue
        if not (_contains_bitwise(x) or _contains_bitwise(y)):
            try:
                if ana.can_prove(x - y == 0):
                    continue
            except Exception:  # pragma: no cover - analyzer quirks
                pass
        pending.append((x, y))
    if not pending:
        return True
    n = int(np.prod(shape)) if len(shape) else 1
    if n > MAX_ENUMERATE:
        return False
    grid = domain_grid(shape)
    xs = compile_numpy([p[0] for p in pending], vars_)(*grid)
    ys = compile_numpy([p[1] for p in pending], vars_)(*grid)
    return all(np.array_equal(u, v) for u, v in zip(xs, ys))


def invert_affine(exprs: Sequence, vars_: Sequence[tirx.Var], extents: Sequence[int],
                  out_vars: Sequence[tirx.Var], what: str) -> List[PrimExpr]:
    """Invert a bijective affine (div/mod) map ``vars_ -> exprs``; returns, per var, an expr over ``out_vars``."""
    from tvm.sym.iter_affine_map import IterMapLevel

    iters = {v: Range(0, int(e)) for v, e in zip(vars_, extents)}
    ana = tvm.sym.Analyzer()
    try:
        res = tvm.sym.detect_iter_map(list(exprs), iters, check_level=IterMapLevel.Bijective,
                                      simplify_trivial_iterators=True, analyzer=ana)
    except Exception as err:  # pragma: no cover
        raise LayoutError(f"{what} is not an invertible affine map: {err}") from err
    if len(res.indices) != len(exprs) or len(res.errors) > 0:
        flat = _invert_flattened(exprs, vars_, extents, out_vars)
        if flat is not None:
            return flat
        errs = "; ".join(str(e) for e in res.errors) or "not bijective"
        raise LayoutError(f"{what} is not bijective (or not an affine div/mod map), cannot invert ({errs}): "
                          f"{list(exprs)}")
    inv = tvm.sym.inverse_affine_iter_map(res.indices, list(out_vars))
    result = []
    for v in vars_:
        e = inv[v] if v in inv else to_expr(0)
        result.append(e)
    return result


def _invert_flattened(exprs, vars_, extents, out_vars):
    """`invert_affine` through the row-major offset of the inputs, or None: a map written over several inputs that
    only depends on their offset (a coalesced plan of a 3-d tile, ``(i0 * 32 + i1 * 8 + i2 // 4) % 128``) is often
    an iter map of that one variable even when TVM cannot fuse its inputs itself."""
    from tvm.sym.iter_affine_map import IterMapLevel

    if len(vars_) < 2:
        return None
    extents = [int(e) for e in extents]
    flat = tirx.Var("_flat", INDEX_DTYPE)
    total = int(np.prod(extents))
    ana = tvm.sym.Analyzer()
    ana.bind(flat, Range(0, total))
    parts, rest = [], flat
    for e in reversed(extents[1:]):
        parts.append(tirx.floormod(rest, e))
        rest = tirx.floordiv(rest, e)
    parts.append(rest)
    unflat = list(reversed(parts))
    fused = [ana.simplify(substitute(e, dict(zip(vars_, unflat)))) for e in exprs]
    try:
        res = tvm.sym.detect_iter_map(fused, {flat: Range(0, total)}, check_level=IterMapLevel.Bijective,
                                      simplify_trivial_iterators=True, analyzer=ana)
    except Exception:  # pragma: no cover - analyzer quirks
        return None
    if len(res.indices) != len(exprs) or len(res.errors) > 0:
        return None
    inv = tvm.sym.inverse_affine_iter_map(res.indices, list(out_vars))
    if flat not in inv:
        return None
    return [substitute(u, {flat: inv[flat]}) for u in unflat]


def is_fn(x) -> bool:
    """A user callable (note: TVM Vars are callable objects too, so exclude expressions)."""
    return callable(x) and not isinstance(x, PrimExpr)
