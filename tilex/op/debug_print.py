"""`tilex.print`: the tile operator behind ``T.print`` (device printf for debugging), and its frontend builder.

A scalar print is a plain call of ``tilex::debug_print`` (``src/tilex/debug.h``, a printf that supplies the block and
thread indices): every thread prints its value. A buffer print is the tile operator ``tilex.print`` so that it is
lowered with the layouts: shared buffers are read through their (swizzled) layout (thread 0 of every block prints
each element), fragments through their Fragment (every thread prints the elements it holds), per-thread ``local``
buffers by every thread. It takes part in no layout choice, so a print never changes the kernel it inspects.
"""
from __future__ import annotations

import tvm
from tvm import tirx

from tilex.ir import intrin
from tilex.ir.visit import dtype_of
from tilex.op.base import TileOp, TileOpError, is_fragment, is_local, is_shared
from tilex.op.partition import emit_by_fragment, static_shape
from tilex.op.region import READ, Region, to_region
from tilex.op.registry import register_tile_op

PRINT_OP = "tilex.print"
_PREFIX = "block=(%d, %d, %d) thread=(%d, %d, %d)"  # filled in by tilex::debug_print


def print_call(obj, msg: str = ""):
    """The TIR of ``T.print(obj, msg=msg)``: a ``tilex.print`` tile-op call for a buffer or a slice of one, a
    ``tilex::debug_print`` call for a scalar expression (see the module docstring)."""
    if not isinstance(msg, str):
        raise TypeError(f"T.print: msg must be a str, got {msg!r}")
    if isinstance(obj, tvm.ir.expr.TensorRegion) or tirx.is_buffer_var(obj):
        region = to_region(obj)
        if is_fragment(region.buffer) and not region.is_whole():
            raise TileOpError(f"T.print: a fragment is printed whole; got a slice of '{region.buffer.name}'")
        return tirx.call_intrin("handle", PRINT_OP, region.to_call(READ), tvm.ir.StringImm(msg))
    if isinstance(obj, bool):
        obj = tirx.const(obj, "bool")
    elif isinstance(obj, int):
        obj = tirx.const(obj, "int32" if -(2 ** 31) <= obj < 2 ** 31 else "int64")
    elif isinstance(obj, float):
        obj = tirx.const(obj, "float32")
    if not isinstance(obj, tvm.ir.expr.Expr):
        raise TypeError(f"T.print: expected a buffer, a buffer slice or a scalar expression, got "
                        f"{type(obj).__name__}: {obj!r}")
    value = _format_value(obj)
    return _printf_call(_c_string(_line(msg, f"value={value[0]} ({dtype_of(obj)})")), value)


# ------------------------------------------------------------------------------------------------ formatting
def _format_value(value):
    """(printf conversion, C type of the value handed to printf, the value cast to that type) for a scalar."""
    dtype = dtype_of(value)
    t = tvm.DataType(dtype)
    if t.lanes != 1:
        raise TypeError(f"T.print: cannot print the vector value {value} ({dtype}); print its lanes one by one")
    if dtype == "bool":
        return "%d", "int", tirx.Cast("int32", value)
    if dtype.startswith("int"):
        return ("%lld", "long long", value) if t.bits == 64 else ("%d", "int", _cast("int32", value))
    if dtype.startswith("uint"):
        return ("%llu", "unsigned long long", value) if t.bits == 64 \
            else ("%u", "unsigned int", _cast("uint32", value))
    if dtype.startswith(("float", "bfloat")):
        return ("%f", "double", value) if t.bits == 64 else ("%f", "float", _cast("float32", value))
    if dtype == "handle":
        return "%p", "const void*", value
    raise TypeError(f"T.print: cannot print values of type {dtype}")


def _printf_call(fmt, value, indices=()):
    """``tilex::debug_print<V>(fmt, value, idx...)`` (src/tilex/debug.h)."""
    return intrin.debug_print(value[1], fmt, value[2], *[_cast("int32", i) for i in indices])


def _cast(dtype, value):
    return value if dtype_of(value) == dtype else tirx.Cast(dtype, value)


def _escape_text(text):
    """User text inside the printf format: a literal '%' must be doubled."""
    return text.replace("%", "%%")


def _line(msg, body):
    head = f"msg='{_escape_text(msg)}' " if msg else ""
    return f"{head}{_PREFIX} {body}\n"


def _c_string(text):
    """A StringImm whose text is the *inside* of a C string literal: TVM's CUDA codegen prints a StringImm
    between quotes without escaping it."""
    out = []
    for ch in text:
        if ch == "\\":
            out.append("\\\\")
        elif ch == '"':
            out.append('\\"')
        elif ch == "\n":
            out.append("\\n")
        elif ch == "\t":
            out.append("\\t")
        elif ord(ch) < 32 or ord(ch) == 127:
            out.append(f"\\{ord(ch):03o}")
        else:
            out.append(ch)
    return tvm.ir.StringImm("".join(out))


# -------------------------------------------------------------------------------------------- buffer printing
@register_tile_op(PRINT_OP)
class PrintOp(TileOp):
    """``T.print`` of a buffer or slice (see the module docstring)."""

    def __init__(self, region: Region, msg: str):
        self.region, self.msg = region, msg

    @classmethod
    def from_call(cls, call):
        return cls(Region.from_call(call.args[0]), str(call.args[1].value))

    def buffers(self):
        # Deliberately none: a print only reads, must not take part in layout choices (a fragment gets its layout
        # from the operators that compute it), and must not make the pipeliner think it writes a shared tile.
        return []

    def describe(self):
        return f"T.print({self.region})"

    def _fmt(self, ndim, dtype, conv):
        idx = ", ".join(["%d"] * ndim)
        return _c_string(_line(self.msg, f"{_escape_text(self.region.buffer.name)}[{idx}]={conv} ({dtype})"))

    def _emit(self, indices, value):
        value = _format_value(value)
        fmt = self._fmt(len(indices), str(self.region.buffer.dtype), value[0])
        return tirx.Evaluate(_printf_call(fmt, value, indices))

    def lower(self, ctx):
        buf = self.region.buffer
        if is_fragment(buf):
            frag = ctx.layout_map.get(buf)
            if frag is None:
                raise TileOpError(f"{self.describe()}: fragment '{buf.name}' has no layout (no tile operator "
                                  f"computes it)")

            def make(logical, _guard, l_flat):
                return self._emit(list(logical), tirx.BufferLoad(ctx.remap[buf], [l_flat]))

            return emit_by_fragment(ctx, frag, 1, make, name="pr")
        extents = static_shape(self.region.shape, "T.print") if self.region.shape else []
        ivars = [tirx.Var(f"pr{d}", "int32") for d in range(len(extents))]
        full = self.region.index(ivars)
        body = self._emit(full, ctx.load(buf, full))
        for v, e in reversed(list(zip(ivars, extents))):
            body = tirx.For(v, 0, e, tirx.ForKind.SERIAL, body)
        if is_local(buf):
            return body  # per-thread data: every thread prints its own
        if not (is_shared(buf) or buf.scope() in ("global", "")):
            raise TileOpError(f"{self.describe()}: cannot print a buffer in scope '{buf.scope()}'")
        return tirx.IfThenElse(ctx.thread_var == 0, body, None)
