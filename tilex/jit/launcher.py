"""The C++ half of a kernel call that returns its output: ``call_with_output`` (call_with_outputs.cc, built once
per machine with tvm-ffi's ``load_inline`` and the host C++ compiler) allocates the output through the allocator
tvm-ffi installs for the call (torch's, for torch tensors) and calls the compiled function with it, in one
crossing from Python into C++. Without a C++ compiler the kernel allocates in Python instead (slower, same
result)."""
from __future__ import annotations

import logging
import os
import threading

__all__ = ["call_with_output", "dtype_triple"]

logger = logging.getLogger("tilex.jit")

_lock = threading.Lock()
_state: dict = {}

#: dtypes whose output the C++ call allocates (what torch's DLPack allocator takes); others allocate in Python
_TRIPLE_DTYPES = {"float16", "bfloat16", "float32", "float64", "int8", "int16", "int32", "int64", "uint8"}


def dtype_triple(dtype: str):
    """(DLPack type code, bits, lanes) of a tvm dtype string, or None when the C++ call does not allocate it."""
    if dtype not in _TRIPLE_DTYPES:
        return None
    import tvm

    dt = tvm.DataType(dtype)
    return int(dt.type_code), int(dt.bits), int(dt.lanes)


def call_with_output():
    """The ``call_with_output`` tvm-ffi function, or None when it cannot be built here (logged once)."""
    with _lock:
        if "fn" not in _state:
            _state["fn"] = _build()
        return _state["fn"]


def _build():
    if os.environ.get("TILEX_DISABLE_CALL_SHIM"):
        return None
    try:
        from tvm_ffi.cpp import load_inline

        src_path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "call_with_outputs.cc")
        with open(src_path) as f:
            src = f.read()
        mod = load_inline("tilex_call_with_outputs", cpp_sources=src)
        fn = mod["call_with_output"]
        _state["module"] = mod  # the function's code lives in the module: keep it loaded
        return fn
    except Exception as e:  # noqa: BLE001 - no compiler, no headers: the Python path still works
        logger.info("tilex: the C++ call path could not be built (%s); kernels allocate outputs in Python", e)
        return None
