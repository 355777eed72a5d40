"""Shared-memory layouts for gemm operands: the 16-byte-chunk xor swizzle and the plain row-major layout.

``make_swizzled_layout(rows, cols, dtype_bits)`` keeps 16-byte chunks contiguous and permutes the (up to)
8 chunks of every ``8 * 16``-byte group by xor with a key taken from the bits *above* the group, so that

  * an ldmatrix phase (8 consecutive rows, same 16-byte column chunk) and
  * a warp of cp.async 16-byte writes along a row

hit 8 distinct 16-byte bank groups.  With ``vec = 128 // dtype_bits`` (elements per chunk)::

    off   = i * cols + j
    chunk = (off // vec) % 8
    key   = (off // max(cols, 8 * vec)) % 8
    phys  = off - chunk * vec + (chunk ^ key) * vec
    out   = (phys // cols, phys % cols)

The xor only changes the chunk bits, and ``key`` only reads bits above them (its divisor is a multiple of
``8 * vec``), so ``key(phys) == key(off)`` and the map is an involution: its inverse is itself.

Requirements: ``dtype_bits`` in (8, 16, 32), ``cols * dtype_bits % 128 == 0``, ``rows * cols % (8 * vec) == 0``,
and ``max(cols, 8 * vec) % (8 * vec) == 0`` (cols <= 8*vec or cols a multiple of 8*vec; otherwise an
8-chunk group straddles two keys and the map is not a bijection).  If any requirement fails, the plain
row-major identity layout (``make_linear_layout``) is returned instead.

TileLang's spelling ``make_swizzled_layout(buffer)`` (a shared buffer, or a BufferRegion / BufferLoad of one)
applies the swizzle to the buffer's last two dims and keeps leading dims (pipeline stages) as they are.
"""
from __future__ import annotations

import tvm
from tvm import tirx

from tilex.ir.visit import BufferLoadNode

from .layout import Layout

__all__ = ["make_swizzled_layout", "make_linear_layout", "swizzle_applicable"]


def make_linear_layout(rows: int, cols: int) -> Layout:
    """Row-major identity layout ``(i, j) -> (i, j)`` of shape ``(rows, cols)``."""
    return Layout((rows, cols), lambda i, j: [i, j])


def swizzle_applicable(rows: int, cols: int, dtype_bits: int) -> bool:
    """Whether ``make_swizzled_layout`` really swizzles (else it falls back to the identity layout)."""
    if dtype_bits not in (8, 16, 32) or rows <= 0 or cols <= 0:
        return False
    vec = 128 // dtype_bits
    group = 8 * vec
    return (cols * dtype_bits) % 128 == 0 and (rows * cols) % group == 0 and max(cols, group) % group == 0


def make_swizzled_layout(*args, **kwargs) -> Layout:
    """The bank-conflict-free shared-memory layout (see the module docstring), in two spellings:

    * ``make_swizzled_layout(rows, cols, dtype_bits)``: 2-d -> 2-d; identity if the swizzle does not apply;
    * ``make_swizzled_layout(buffer, k_major=True, allow_pad=True)`` (TileLang's): the layout of a shared buffer
      of two or more dims (a BufferRegion / BufferLoad stands for its buffer). ``k_major`` and ``allow_pad`` are
      accepted and change nothing: the swizzle is conflict-free for row and column (transposed ldmatrix) reads
      alike, and tilex does not pad.
    """
    first = args[0] if args else kwargs.get("buffer", kwargs.get("rows"))
    if _buffer_of(first) is not None:
        return _buffer_swizzled_layout(*args, **kwargs)
    return _swizzled_layout_2d(*args, **kwargs)


def _buffer_of(obj):
    """The buffer a buffer, a buffer region or a buffer element stands for (None for anything else)."""
    if tirx.is_buffer_var(obj):
        return obj
    if isinstance(obj, (tvm.ir.expr.TensorRegion, BufferLoadNode)) and tirx.is_buffer_var(obj.source):
        return obj.source
    return None


def _buffer_swizzled_layout(buffer, k_major: bool = True, allow_pad: bool = True) -> Layout:
    buf = _buffer_of(buffer)
    try:
        shape = [int(d) for d in buf.shape]
    except TypeError:
        raise ValueError(f"make_swizzled_layout: buffer '{buf.name}' has a symbolic shape {list(buf.shape)}") from None
    if len(shape) < 2:
        raise ValueError(f"make_swizzled_layout: buffer '{buf.name}' must have at least 2 dims, got {shape}")
    lay = _swizzled_layout_2d(shape[-2], shape[-1], tvm.DataType(str(buf.dtype)).bits)
    return lay.expand(shape[:-2]) if len(shape) > 2 else lay


def _swizzled_layout_2d(rows: int, cols: int, dtype_bits: int) -> Layout:
    """2-d -> 2-d bank-conflict-free shared-memory layout (see module docstring); identity if not applicable."""
    rows, cols, dtype_bits = int(rows), int(cols), int(dtype_bits)
    if not swizzle_applicable(rows, cols, dtype_bits):
        return make_linear_layout(rows, cols)
    vec = 128 // dtype_bits
    span = max(cols, 8 * vec)

    def fwd(i, j):
        off = i * cols + j
        chunk = tirx.floormod(tirx.floordiv(off, vec), 8)
        key = tirx.floormod(tirx.floordiv(off, span), 8)
        phys = off - chunk * vec + tirx.bitwise_xor(chunk, key) * vec
        return [tirx.floordiv(phys, cols), tirx.floormod(phys, cols)]

    holder = {}

    def inverse():
        # The swizzle is an involution: the inverse has the same formula, and its inverse is `lay`.
        inv = Layout((rows, cols), fwd, output_shape=(rows, cols), inverse=lambda: holder["lay"])
        return inv

    lay = Layout((rows, cols), fwd, output_shape=(rows, cols), inverse=inverse)
    holder["lay"] = lay
    return lay
