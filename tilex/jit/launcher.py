"""The C++ half of a kernel call (kernel_caller.cc, built once per machine with tvm-ffi's ``build_inline`` and the
host C++ compiler): ``make_caller(...)`` returns a function of a kernel's inputs that checks their alignment,
allocates the output through the allocator tvm-ffi installs for the call (torch's, for torch tensors) and calls
the compiled function with it, in one crossing from Python into C++. Without a C++ compiler kernels allocate in
Python instead (slower, same result). ``make_dispatcher(...)`` forwards a call to one of several such callers by a
size read from the arguments (:class:`tilex.autotuner.dispatch.DynamicKernel`). Its ``streamk_workspace`` becomes
``tilex.streamk_workspace`` (tilex.jit.workspace) once built; :func:`native_library` is its path, for processes
without tilex."""
from __future__ import annotations

import logging
import os
import threading

from tilex.jit import workspace

__all__ = ["caller_factory", "dispatcher_factory", "native_library", "dtype_triple", "encode_recipe"]

logger = logging.getLogger("tilex.jit")

_lock = threading.Lock()
_state: dict = {}

#: dtypes whose output the C++ call allocates (what torch's DLPack allocator takes); others allocate in Python
_TRIPLE_DTYPES = {"float16", "bfloat16", "float32", "float64", "int8", "int16", "int32", "int64", "uint8"}
#: the axis a recipe entry names when the extent is a scalar input's value (kernel_caller.cc: kScalarAxis)
SCALAR_AXIS = 15


def dtype_triple(dtype: str):
    """(DLPack type code, bits, lanes) of a tvm dtype string, or None when the C++ call does not allocate it."""
    if dtype not in _TRIPLE_DTYPES:
        return None
    import tvm

    dt = tvm.DataType(dtype)
    return int(dt.type_code), int(dt.bits), int(dt.lanes)


def encode_recipe(recipe):
    """An output shape for ``make_caller``: static extents as they are, ``(input, axis)`` (axis None: the input is
    a scalar) as ``-(1 + 16 * input + axis)``; None when an entry cannot be encoded."""
    out = []
    for d in recipe:
        if d.__class__ is int:
            out.append(d)
            continue
        pos, axis = d
        axis = SCALAR_AXIS if axis is None else axis
        if axis >= SCALAR_AXIS:
            return None
        out.append(-(1 + 16 * pos + axis))
    return out


def caller_factory():
    """The ``make_caller`` tvm-ffi function, or None when it cannot be built here (logged once)."""
    with _lock:
        if "fn" not in _state:
            _state["fn"] = _build()
        return _state["fn"]


def native_library():
    """The path of kernel_caller.cc's shared library (built once per machine), or None when it cannot be built here.
    Loaded into a process without tilex (``--load-library`` of TVM's RPC server) it registers
    ``tilex.streamk_workspace``, which exported stream-K kernels call."""
    caller_factory()
    return _state.get("path")


def dispatcher_factory():
    """The ``make_dispatcher`` tvm-ffi function (runtime selection's per-call decision in C++), or None."""
    caller_factory()
    mod = _state.get("module")
    return mod["make_dispatcher"] if mod is not None else None


def _build():
    if os.environ.get("TILEX_DISABLE_CPP_CALLER"):
        return None
    try:
        import tvm_ffi
        from tvm_ffi.cpp import build_inline

        src_path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "kernel_caller.cc")
        with open(src_path) as f:
            src = f.read()
        path = build_inline("tilex_kernel_caller", cpp_sources=src)
        mod = tvm_ffi.load_module(path)
        _state["module"] = mod  # the callers' code lives in the module: keep it loaded
        _state["path"] = path
        workspace.register(mod["streamk_workspace"])
        return mod["make_caller"]
    except Exception as e:  # noqa: BLE001 - no compiler, no headers: the Python path still works
        logger.info("tilex: the C++ kernel caller could not be built (%s); kernels allocate outputs in Python", e)
        return None
