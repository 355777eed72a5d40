"""The names of TileLang's TVM fork that the installed TVM 0.27 spells otherwise, added to TVM's own modules.

TileLang ships a fork of TVM and re-exports it (``from tilelang import tvm``); programs written for TileLang use
that fork's names. tilex runs on the installed TVM 0.27, so ``tilex.tvm`` *is* that module, and :func:`install`
(called once when ``tilex`` is imported) adds the fork's names it lacks, each bound to the 0.27 object with the
same meaning, and only where the name is missing (a TVM that has it keeps its own):

* ``tvm.tirx.PrimExpr``: the base class of every expression. 0.27 merged TIR's and Relax's expression classes
  into ``tvm.ir.expr.Expr`` and has no ``PrimExpr`` any more; programs use the name in annotations
  (``val: tirx.PrimExpr``) and ``isinstance`` checks, which the merged class answers for every TIR expression.
* ``expr.dtype``: the fork's expressions carry their dtype (``assert val.dtype == T.uint8``); 0.27 keeps it in the
  expression's type (``expr.ty.dtype``) and answers ``.dtype`` only on a buffer (a ``Var`` of a buffer type: its
  element type). Every expression of a scalar type gets the property (a ``tvm.DataType``; ``"handle"`` for a
  pointer); a buffer keeps its answer, and an expression of another type (a Relax tensor) still has no ``dtype``.

``tvm.testing.requires_package`` (a test decorator of the fork) is added by :mod:`tilex.testing` when it is
imported, as TileLang's test helpers import ``tvm.testing``; importing ``tilex`` alone imports neither pytest nor
``tvm.testing``.
"""
from __future__ import annotations

import tvm
import tvm.ir.expr
import tvm.tirx

__all__ = ["ALIASES", "install"]

#: (module, name) -> the TVM 0.27 object the fork's name stands for
ALIASES = {
    (tvm.tirx, "PrimExpr"): tvm.ir.expr.Expr,
}


def _scalar_dtype(expr):
    ty = getattr(expr, "ty", None)
    if isinstance(ty, tvm.ir.PrimType):
        return ty.dtype
    if isinstance(ty, tvm.ir.PointerType):
        return tvm.DataType("handle")
    raise AttributeError(f"{type(expr).__name__} of type {ty} has no dtype")


def _expr_dtype_property():
    """The fork's ``.dtype`` of an expression (see the module docstring)."""
    return property(_scalar_dtype, doc="The dtype of a scalar expression (TileLang's TVM fork; tilex.ir.tvm_fork).")


def _var_dtype_property(buffer_dtype):
    """``Var.dtype``: a buffer's element type as 0.27 gives it (`buffer_dtype`), a scalar variable's own dtype."""

    def get(var):
        if tvm.tirx.is_buffer_var(var):
            return buffer_dtype.__get__(var)
        return _scalar_dtype(var)

    get.tilex_fork = True
    return property(get, doc="A buffer's element dtype, or a scalar variable's dtype (tilex.ir.tvm_fork).")


def install() -> None:
    """Add each name of :data:`ALIASES` to its module where the module lacks it, and ``.dtype`` to expressions
    (idempotent)."""
    for (module, name), value in ALIASES.items():
        if not hasattr(module, name):
            setattr(module, name, value)
    expr_cls, var_cls = tvm.ir.expr.Expr, tvm.ir.expr.Var
    if "dtype" not in vars(expr_cls):
        expr_cls.dtype = _expr_dtype_property()
    own = vars(var_cls).get("dtype")
    if isinstance(own, property) and not getattr(own.fget, "tilex_fork", False):
        var_cls.dtype = _var_dtype_property(own)
