"""`T.prim_func`: parse a tile program with TVMScript, then canonicalize tilex's frontend markers.

Errors in a program body. TVMScript reports any error raised while it parses a body (an undefined name, an
exception a builder such as ``T.Kernel`` raises, an unknown keyword of a tile operator) as a ``DiagnosticError``
whose message holds the file, line and source line with a caret -- but an uncaught one prints only TVM's
"run with TVM_BACKTRACE=1" line. ``prim_func`` gives it back as one exception: the original one with its own type
(ValueError, TypeError, NotImplementedError, TileOpError, ...) when Python code of the body raised it, otherwise a
:class:`~tilex.ir.source.TileScriptError`; its message is the error followed by TVMScript's location lines, and its
traceback ends at the decorator (``TILEX_BACKTRACE=1`` keeps the parser's frames).
"""
from __future__ import annotations

import contextlib

import tvm
from tvm import tirx
from tvm.error import DiagnosticError
from tvm.script import tirx as _tvm_T
from tvm.script.parser.core import dispatch, doc
from tvm.script.parser.core.error import ParserError
from tvm.script.ir_builder import tirx as _ir_tirx
from tvm.script.parser.tirx import parser as _tirx_parser

from tilex.ir.visit import dtype_of
from tilex.ir.source import TileScriptError, backtrace_requested, set_message
from tilex.language.canonicalize import canonicalize
from tilex.language.loop import OPEN_VECTORIZED, in_vectorized_loop

#: the first line of TVMScript's location block in a diagnostic message
_LOCATION_MARK = "\n --> "


def prim_func(func=None, *, private=False, check_well_formed=False):
    """Decorator turning a Python function written with `tilex.language` into a TIR PrimFunc."""

    def deco(f):
        # the caller's frame is where closures (tile sizes, dtypes) live: let TVMScript capture them
        OPEN_VECTORIZED.clear()  # loops a failed parse left open
        try:
            parsed = _tvm_T.prim_func(f, private=private, check_well_formed=check_well_formed)
        except DiagnosticError as err:
            user_error = program_error(err)
            if backtrace_requested():
                raise user_error from err  # TVMScript's diagnostic, with every frame of the parser, comes first
            raise user_error.with_traceback(None) from None
        return canonicalize(parsed)

    if func is None:
        return deco
    return deco(func)


prim_func.dispatch_token = "tirx"


def program_error(diag: DiagnosticError) -> BaseException:
    """The exception to show for TVMScript's diagnostic `diag`: the body's own exception (its type kept, the
    location appended to its message) or a TileScriptError with TVMScript's message."""
    text = str(diag)
    at = text.find(_LOCATION_MARK)
    if at < 0:
        return TileScriptError(_strip_prefix(text))
    headline, where = text[:at], text[at + 1:]
    original = _original(diag)
    if original is not None and _keeps_type(original):
        message = str(original).rstrip() or type(original).__name__
        if set_message(original, f"{message}\n{where}"):
            return original
    return TileScriptError(f"{_strip_prefix(headline)}\n{where}")


def _strip_prefix(text):
    return text[len("error: "):] if text.startswith("error: ") else text


def _original(diag):
    """The exception TVMScript turned into `diag` (the Python exception raised in the body), if any."""
    seen = set()
    exc = diag.__cause__ or diag.__context__
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if not isinstance(exc, DiagnosticError):
            return exc
        exc = exc.__cause__ or exc.__context__
    return None


def _keeps_type(exc):
    """A user error that the body raised (kept as it is); TVMScript's own parse errors, a TVM RuntimeError and
    KeyError (whose message prints quoted) become TileScriptError."""
    if isinstance(exc, (ParserError, KeyError)):
        return False
    return isinstance(exc, NotImplementedError) or (isinstance(exc, Exception) and not isinstance(exc, RuntimeError))


def _visit_with(self, node):
    """TVMScript's ``with`` visitor for tirx, plus one case: a one-dimensional T.Kernel binds a one-element target,
    ``with T.Kernel(n, threads=128) as (bx,):``, as in TileLang (the frame yields one variable for a 1-d grid, which
    Python cannot unpack into ``(bx,)``)."""
    with contextlib.ExitStack() as stack:
        stack.enter_context(self.var_table.with_frame())
        for item in node.items:
            frame = self.eval_expr(item.context_expr)
            if not (hasattr(frame, "__enter__") and hasattr(frame, "__exit__")):
                self.report_error(item.context_expr, "Invalid context expression in the with-statement.")
            value = stack.enter_context(frame)
            target = item.optional_vars
            if target is None:
                continue
            if isinstance(target, doc.Tuple) and len(target.elts) == 1 and isinstance(value, tvm.ir.Var):
                value = (value,)
            self.eval_assign(target=target, source=value, bind_value=_tirx_parser.bind_with_value)
        self.visit_body(node.body)


dispatch.register(token="tirx", type_name="With")(_visit_with)

_tvm_visit_assign = dispatch.get(token="tirx", type_name="Assign")


def _visit_assign(self, node):
    """TVMScript's assignment visitor, plus TileLang's binding in a T.vectorized loop: ``index = i * 8 + v`` with a
    new name makes ``index`` stand for the expression itself (inlined where it is used, as TileLang's let bindings
    are), which TVM's vectorizer widens with the loop. TVMScript would make it a one-element per-thread scalar that
    is stored to, which the vectorizer cannot widen (every lane would be written to the one element)."""
    lhs = node.targets[0] if len(node.targets) == 1 else None
    if isinstance(lhs, doc.Tuple) and any(isinstance(e, doc.Subscript) for e in lhs.elts):
        return _assign_elements(self, lhs, node)
    if not (isinstance(lhs, doc.Name) and in_vectorized_loop() and lhs.id not in self.var_table.get()):
        return _tvm_visit_assign(self, node)
    value = self.eval_expr(node.value)
    if isinstance(value, (bool, int, float)) or not tvm.ir.is_prim_expr(value) or isinstance(value, tvm.ir.Var):
        # a constant, a buffer, a frame, a variable: TVMScript's own binding of the value already evaluated
        self.eval_assign(target=lhs, source=value, bind_value=_tirx_parser.bind_assign_value)
        return None
    self.var_table.add(lhs.id, value)
    return None


dispatch.register(token="tirx", type_name="Assign")(_visit_assign)


def _assign_elements(self, lhs, node):
    """TileLang's tuple assignment into buffer elements, ``a[0], a[1] = a[1], a[0]``: every value is read first
    (bound to an immutable variable), then the targets are assigned left to right, so a swap swaps."""
    values = self.eval_expr(node.value)
    if not isinstance(values, (tuple, list)) or len(values) != len(lhs.elts):
        count = len(values) if isinstance(values, (tuple, list)) else "one"
        self.report_error(node, f"cannot assign {count} value(s) to {len(lhs.elts)} targets")
    held = [_ir_tirx.Bind(v) if isinstance(v, tirx.PrimExpr) and not isinstance(v, (tirx.IntImm, tirx.FloatImm))
            else v for v in values]
    for target, value in zip(lhs.elts, held):
        if isinstance(target, doc.Subscript):
            elts = target.slice.elts if isinstance(target.slice, doc.Tuple) else [target.slice]
            _ir_tirx.buffer_store(self.eval_expr(target.value), value, [self.eval_expr(i) for i in elts])
        else:
            self.eval_assign(target=target, source=value, bind_value=_tirx_parser.bind_assign_value)


def _int_widths_matched(a, b):
    """(a, b) with the narrower of two integer scalars of different widths cast to the wider one, as C and
    TileLang promote ``i < n`` for an int32 ``i`` and an int64 ``n`` (TVMScript's comparisons require equal types,
    while its arithmetic already promotes)."""
    if not (tvm.ir.is_prim_expr(a) and tvm.ir.is_prim_expr(b)):
        return a, b
    da, db = dtype_of(a), dtype_of(b)
    ta, tb = tvm.DataType(da), tvm.DataType(db)
    ints = (tvm.DataTypeCode.INT, tvm.DataTypeCode.UINT)
    if ta.lanes != 1 or tb.lanes != 1 or ta.type_code not in ints or tb.type_code not in ints or ta.bits == tb.bits:
        return a, b
    if ta.bits < tb.bits:
        return tirx.Cast(db, a), b
    return a, tirx.Cast(da, b)


def _promoting(compare):
    def method(a, b):
        return compare(*_int_widths_matched(a, b))

    return method


def _register_promoting_comparisons():
    for ty in (tirx.Expr, tirx.IterVar):
        for node in (doc.Eq, doc.NotEq, doc.Lt, doc.LtE, doc.Gt, doc.GtE):
            for side in (0, 1):
                compare = dispatch.get_op(ty, node, side)
                if compare is not None:
                    dispatch.register_op(ty, node, side)(_promoting(compare))


_register_promoting_comparisons()
