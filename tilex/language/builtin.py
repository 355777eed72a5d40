"""Device utilities, kernel queries and annotations of tile programs (TileLang's names).

* device utilities: ``T.fma``, ``T.dp4a``, ``T.clamp``, ``T.device_assert``, ``T.pdl_sync`` / ``T.pdl_trigger``,
  ``T.import_source`` (CUDA text written before the module's kernels); ``T.popcount`` is TVMScript's, given its
  CUDA form for every integer type by ``tilex.ir.intrin``; ``T.reinterpret`` (TileLang's argument order, value
  first, and TVMScript's, dtype first);
* kernel queries: ``T.get_thread_bindings``, ``T.get_block_binding(s)``, ``T.get_thread_extent(s)``,
  ``T.get_block_extent(s)`` of the enclosing ``T.Kernel`` (``T.get_thread_binding`` is in ``kernel.py``);
* annotations: ``T.annotate_min_blocks_per_sm``, ``T.annotate_restrict_buffers``, ``T.annotate_l2_hit_ratio``,
  ``T.annotate_safe_value``.
"""
from __future__ import annotations

import inspect

import tvm
from tvm import tirx

from tilex.ir import intrin
from tilex.ir.visit import BufferLoadNode, dtype_of
from tilex.language.dtypes import canonical_dtype, is_dtype_like
from tilex.language.kernel import current_kernel, in_kernel, launch_dim
from tilex.language.options import as_bool, as_int, constant

__all__ = ["fma", "dp4a", "clamp", "device_assert", "pdl_sync", "pdl_trigger", "import_source", "get_thread_bindings",
           "get_block_binding", "get_block_bindings", "get_thread_extent", "get_thread_extents", "get_block_extent",
           "get_block_extents", "annotate_min_blocks_per_sm", "annotate_restrict_buffers", "annotate_l2_hit_ratio",
           "annotate_safe_value", "reinterpret"]

_POINTER_SCOPES = ("global", "", "shared", "shared.dyn", "local")


# ---- device utilities -----------------------------------------------------------------------------------------
def _element_address(api, name, operand, dtype):
    """The address of the first element of a T.dp4a operand (a buffer, a slice or an element) of `dtype`."""
    if tirx.is_buffer_var(operand):
        buf, start = operand, [tirx.const(0, "int32")] * len(operand.shape)
    elif isinstance(operand, tvm.ir.expr.TensorRegion):
        buf, start = operand.source, [r.min for r in operand.region]
    elif isinstance(operand, BufferLoadNode):
        buf, start = operand.source, list(operand.indices)
    else:
        raise TypeError(f"{api}: {name} must be a buffer, a buffer slice or a buffer element, got {operand!r}")
    if str(buf.dtype) != dtype:
        raise ValueError(f"{api}: {name} must be {dtype}, got '{buf.name}' of {buf.dtype}")
    if str(buf.scope()) not in _POINTER_SCOPES:
        raise NotImplementedError(f"{api}: {name} '{buf.name}' is a fragment; T.dp4a reads and writes global, "
                                  f"shared or per-thread (T.alloc_local) buffers")
    return tirx.address_of(tirx.BufferLoad(buf, start))


def dp4a(A, B, C):
    """``C[0] += A[0] * B[0] + ... + A[3] * B[3]``: the dot product of four signed bytes accumulated into an int32
    (CUDA's ``__dp4a``). Each operand is a buffer, a slice or an element where the four bytes (the accumulator)
    start: ``T.dp4a(a_local[k * 4], b_local[k * 4], acc[0])``; A and B are int8, C int32."""
    api = "T.dp4a"
    return intrin.dp4a(_element_address(api, "A", A, "int8"), _element_address(api, "B", B, "int8"),
                       _element_address(api, "C", C, "int32"))


def fma(x, y, z):
    """``x * y + z`` with one rounding (CUDA's ``fmaf`` / ``fma`` / ``__hfma``) for scalar float32, float64,
    float16 and bfloat16; ``x * y + z`` for integers. Python numbers take the dtype of the expression operands."""
    like = next((v for v in (x, y, z) if tvm.ir.is_prim_expr(v)), None)
    if like is None:
        raise TypeError("T.fma needs at least one operand that is an expression (its dtype is the result's)")
    try:
        return intrin.fma(*(_as_expr(v, like, "T.fma") for v in (x, y, z)))
    except TypeError as e:
        raise TypeError(f"T.{e}") from None


def _as_expr(value, like, api="T.clamp"):
    if tvm.ir.is_prim_expr(value):
        return value
    if isinstance(value, (bool, int, float)):
        return tirx.const(value, dtype_of(like) if tvm.ir.is_prim_expr(like) else
                          ("float32" if isinstance(value, float) else "int32"))
    raise TypeError(f"{api}: expected a number or a scalar expression, got {value!r}")


def _is_dtype_arg(x):
    return isinstance(x, tvm.ir.Type) or (not tvm.ir.is_prim_expr(x) and is_dtype_like(x))


def reinterpret(value, dtype, span=None):
    """The bits of `value` read as `dtype` (same total width; ``"handle"`` makes a pointer of an integer).
    TileLang writes ``T.reinterpret(value, dtype)``, TVMScript ``T.reinterpret(dtype, value)``: both are accepted,
    the argument that is a dtype (a name, a dtype object, a ``tvm.ir.Type``) being the dtype. ``span`` is
    TVMScript's source location."""
    api = "T.reinterpret"
    first, second = _is_dtype_arg(value), _is_dtype_arg(dtype)
    if first and second:
        raise TypeError(f"{api}: both arguments are dtypes ({value!r}, {dtype!r}); pass a value and a dtype")
    if not (first or second):
        for arg in (dtype, value):
            if isinstance(arg, str):
                canonical_dtype(arg)  # a misspelled name: its ValueError says what dtypes are
        raise TypeError(f"{api}: one argument must be a dtype (a name such as 'uint32', T.uint32, a tvm.ir.Type), "
                        f"got {value!r} and {dtype!r}")
    if first:
        value, dtype = dtype, value
    if isinstance(value, (bool, int, float)):
        raise TypeError(f"{api}: the value must be an expression with a dtype (T.uint64(0), x, ...), not the "
                        f"Python number {value!r}, whose bit width is not given")
    if not tvm.ir.is_prim_expr(value):
        raise TypeError(f"{api}: expected a scalar expression to reinterpret, got {value!r}")
    if isinstance(dtype, tvm.ir.Type):
        return tirx.reinterpret(dtype, value, span)
    name = "handle" if str(dtype) == "handle" else str(canonical_dtype(dtype))
    source = dtype_of(value)
    if "handle" not in (name, source):
        have, want = (tvm.DataType(d).bits * tvm.DataType(d).lanes for d in (source, name))
        if any(d.startswith("float4_e2m1fn") for d in (source, name)):  # TVM: packed fp4 by its storage bytes
            have, want = -(-have // 8) * 8, -(-want // 8) * 8
        if have != want:
            raise ValueError(f"{api}: {source} ({have} bits) cannot be reinterpreted as {name} ({want} bits): the "
                             f"widths must be equal")
    return tirx.reinterpret(name, value, span)


def clamp(dst, min_val, max_val):
    """`dst` limited to ``[min_val, max_val]``: ``min(max(dst, min_val), max_val)``."""
    x = _as_expr(dst, min_val if tvm.ir.is_prim_expr(min_val) else max_val)
    return tirx.min(tirx.max(x, _as_expr(min_val, x)), _as_expr(max_val, x))


def _program_location():
    """(file, line) of the statement TVMScript is parsing (the frame of its parser), or a placeholder."""
    try:
        for info in inspect.stack(0)[2:40]:
            parser, node = info.frame.f_locals.get("self"), info.frame.f_locals.get("node")
            source = getattr(getattr(parser, "diag", None), "source", None)
            if source is not None and hasattr(node, "lineno"):
                return str(source.source_name), int(source.start_line) + int(node.lineno) - 1
    except Exception:  # noqa: BLE001 - a location is a courtesy: never fail the program for it
        pass
    return "<tile program>", 0


def device_assert(condition, msg="", no_stack_info=False):
    """Stop the kernel where `condition` is false, as a device-side assert does: the thread prints `msg` (and,
    unless `no_stack_info`, the file and line of this statement) with its block and thread indices, and the launch
    fails with ``cudaErrorAssert`` (torch: "device-side assert triggered")."""
    api = "T.device_assert"
    if not isinstance(msg, str):
        raise TypeError(f"{api}: msg must be a str, got {msg!r}")
    if isinstance(condition, (bool, int)):
        condition = tirx.const(bool(condition), "bool")
    if not tvm.ir.is_prim_expr(condition):
        raise TypeError(f"{api}: the condition must be a boolean or integer expression, got {condition!r}")
    if dtype_of(condition) != "bool":
        dt = tvm.DataType(dtype_of(condition))
        if dt.type_code not in (tvm.DataTypeCode.INT, tvm.DataTypeCode.UINT) or dt.lanes != 1:
            raise TypeError(f"{api}: the condition must be a boolean or integer expression, got "
                            f"{dtype_of(condition)}")
        condition = condition != tirx.const(0, dtype_of(condition))
    file, line = ("<tile program>", 0) if as_bool(api, "no_stack_info", no_stack_info) else _program_location()
    return intrin.device_assert(condition, msg or "T.device_assert", file, line)


def pdl_sync():
    """Programmatic dependent launch: wait until the grids this kernel depends on have completed and their memory
    writes are visible (``griddepcontrol.wait``, sm_90+). tilex launches kernels without the programmatic
    stream-serialization attribute, so the previous kernel of the stream has always completed when this one starts:
    the wait returns at once (the overlap of PDL is not had; results are the same)."""
    return intrin.pdl_wait().value


def pdl_trigger():
    """Programmatic dependent launch: let the next kernel of the stream be scheduled
    (``griddepcontrol.launch_dependents``, sm_90+). It only allows an earlier start, so with tilex's launches
    (without the programmatic attribute) it changes nothing."""
    return intrin.pdl_launch_dependents().value


def import_source(source=None):
    """Paste `source` (CUDA text, usually ``__device__`` functions a ``T.call_extern`` calls) into the generated
    module, before its kernels, as TileLang does. Each distinct text is written once however often it is imported
    (a macro called in a loop); it is part of the program, so of the kernel cache key. Written inside or before
    ``with T.Kernel``. ``T.import_source()`` / ``T.import_source(None)`` does nothing, as in TileLang."""
    return _import_source_marker("T.import_source", source)


def _import_source_marker(api, source):
    if source is None:
        return None
    if not isinstance(source, str):
        raise TypeError(f"{api}: the source must be a str of CUDA code, got {type(source).__name__}")
    if not source.strip():
        return None
    return in_kernel(intrin.import_source(source))


# ---- kernel queries -----------------------------------------------------------------------------------------------
def get_thread_bindings():
    """[threadIdx.x, threadIdx.y, threadIdx.z] of the enclosing T.Kernel (0 for a dimension the block does not
    have)."""
    kernel = current_kernel("T.get_thread_bindings()")
    return [kernel.thread_index(d) for d in range(3)]


def get_block_binding(dim=0):
    """blockIdx of dimension `dim` (0: x, 1: y, 2: z) of the enclosing T.Kernel (0 for a dimension the grid does
    not have)."""
    api = f"T.get_block_binding({dim})"
    return current_kernel(api).block_index(launch_dim(api, dim))


def get_block_bindings():
    """The block indices of the enclosing T.Kernel, one per grid dimension it was given (as in TileLang)."""
    return list(current_kernel("T.get_block_bindings()").block_vars)


def get_thread_extent(dim=0):
    """Threads per block along `dim` (0: x, 1: y, 2: z; 1 for a dimension not given), an int."""
    api = f"T.get_thread_extent({dim})"
    kernel = current_kernel(api)
    d = launch_dim(api, dim)
    return kernel.threads[d] if d < len(kernel.threads) else 1


def get_thread_extents():
    """[blockDim.x, blockDim.y, blockDim.z] of the enclosing T.Kernel (ints)."""
    kernel = current_kernel("T.get_thread_extents()")
    return [kernel.threads[d] if d < len(kernel.threads) else 1 for d in range(3)]


def _grid_extent(kernel, d):
    if d >= len(kernel.grid):
        return 1
    e = constant(kernel.grid[d])
    return e if isinstance(e, int) else kernel.grid[d]


def get_block_extent(dim=0):
    """Blocks of the grid along `dim` (0: x, 1: y, 2: z; 1 for a dimension not given): an int, or the expression of
    a symbolic grid dimension."""
    api = f"T.get_block_extent({dim})"
    return _grid_extent(current_kernel(api), launch_dim(api, dim))


def get_block_extents():
    """[gridDim.x, gridDim.y, gridDim.z] of the enclosing T.Kernel (ints, or expressions of symbolic dimensions)."""
    kernel = current_kernel("T.get_block_extents()")
    return [_grid_extent(kernel, d) for d in range(3)]


# ---- annotations ----------------------------------------------------------------------------------------------
def annotate_min_blocks_per_sm(n):
    """Ask for at least `n` resident blocks per multiprocessor: the kernel's ``__launch_bounds__(threads, n)``, so
    ptxas limits its registers to let them fit. A kernel tilex warp-specializes keeps the minimum its own register
    plan assumes (that plan's ``setmaxnreg`` split needs it). Written inside or before ``with T.Kernel``."""
    n = as_int("T.annotate_min_blocks_per_sm", "n", n, minimum=1)
    return in_kernel(intrin.min_blocks_hint(n))


def annotate_restrict_buffers(*buffers):
    """The kernel parameters of `buffers` may alias (overlapping views of one tensor): they are declared without
    ``__restrict__``, so the compiler does not assume their accesses independent. Written inside or before
    ``with T.Kernel``."""
    if not buffers:
        return None
    data = []
    for buf in buffers:
        if not tirx.is_buffer_var(buf):
            raise TypeError(f"T.annotate_restrict_buffers expects buffers (kernel parameters), got {buf!r}")
        if str(buf.scope()) not in ("global", ""):
            raise ValueError(f"T.annotate_restrict_buffers: '{buf.name}' is a {buf.scope()} buffer, not a kernel "
                             f"parameter")
        data.append(buf.data)
    return in_kernel(intrin.may_alias(*data))


def _annotation_map(api, mapping):
    if not isinstance(mapping, dict):
        raise TypeError(f"{api} expects a dict {{buffer: value}}, got {mapping!r}")
    for buf in mapping:
        if not tirx.is_buffer_var(buf):
            raise TypeError(f"{api}: the keys must be buffers, got {buf!r}")
    return mapping


def annotate_l2_hit_ratio(l2_hit_ratio_map):
    """TileLang sets a persisting-L2 access policy window for these global buffers (the fraction of accesses
    that should hit L2). A pure performance hint tilex does not apply: the map is checked (global buffers, ratios
    in [0, 1]) and otherwise ignored."""
    api = "T.annotate_l2_hit_ratio"
    for buf, ratio in _annotation_map(api, l2_hit_ratio_map).items():
        if str(buf.scope()) not in ("global", ""):
            raise ValueError(f"{api}: '{buf.name}' is a {buf.scope()} buffer; persistent L2 applies to global "
                             f"buffers")
        r = constant(ratio)
        if isinstance(r, bool) or not isinstance(r, (int, float)) or not 0 <= r <= 1:
            raise ValueError(f"{api}: the hit ratio of '{buf.name}' must be a number in [0, 1], got {ratio!r}")
    return None


def annotate_safe_value(safe_value_map):
    """The value an out-of-bounds guarded load of each buffer reads. tilex's guarded copies (a ``T.copy`` tile
    hanging over the edge of a global tensor, cp.async's zero fill) read 0 there, TileLang's default: a safe value
    of 0 is accepted, any other raises NotImplementedError."""
    api = "T.annotate_safe_value"
    for buf, value in _annotation_map(api, safe_value_map).items():
        v = constant(value)
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise NotImplementedError(f"{api}({{{buf.name}: {value!r}}}) is not supported by tilex: out-of-bounds "
                                      f"guarded loads read 0")
        if v != 0:
            raise NotImplementedError(f"{api}({{{buf.name}: {v!r}}}) is not supported by tilex: its guarded copies "
                                      f"read 0 outside a tensor (leave the safe value at 0)")
    return None
