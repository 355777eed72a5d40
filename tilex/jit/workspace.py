"""The stream-K workspace: the global function ``tilex.streamk_workspace`` (tilex.ir.intrin.STREAMK_WORKSPACE_FUNC)
that a stream-K kernel's host code calls before each launch, registered when tilex.jit is imported (in Python;
tilex.jit.launcher registers kernel_caller.cc's, without a Python frame per call, once that is built).

``(nbytes) -> pointer``: a zeroed device buffer of at least `nbytes` on the current device, one per launch stream
(the stream TVM launches on: tvm-ffi's current stream, torch's when the kernel is called with torch tensors), kept
for the next launch on that stream. A launch leaves its flags zero again (src/tilex/stream_k.h), so launches in
turn on one stream share a buffer, while launches on different streams, which may run at the same time, never
do. A buffer is zeroed on its stream (torch), or before the call returns (without torch, or on the legacy
default stream), so the launch that follows finds it zeroed either way. Buffers are never freed: the C++ function
keeps its own table of their pointers, and a stream's few growths cost little memory.
"""
from __future__ import annotations

import ctypes
import threading

from tilex.ir.intrin import STREAMK_WORKSPACE_FUNC

_CUDA = 2  # DLPack's kCUDA
#: the allocator kernel_caller.cc's tilex.streamk_workspace calls: (device, stream handle, bytes) -> pointer
ALLOC_FUNC = "tilex.streamk_workspace_alloc"
_lock = threading.Lock()
#: (device id, stream handle) -> (bytes, its device pointer), for the Python function
_buffers: dict = {}
#: every buffer allocated, kept alive for the process's lifetime
_kept: list = []


def _current_device() -> int:
    try:
        import torch

        if torch.cuda.is_available():
            return torch.cuda.current_device()
    except ImportError:
        pass
    return 0


def _zeroed(device: int, stream: int, nbytes: int):
    """(buffer object, device pointer) of `nbytes` zeroed bytes on `device`, ordered before later work on
    `stream`."""
    try:
        import torch
    except ImportError:
        torch = None
    if torch is not None and torch.cuda.is_available():
        with torch.cuda.device(device):
            if stream:
                with torch.cuda.stream(torch.cuda.ExternalStream(stream)):
                    buf = torch.zeros(nbytes, dtype=torch.uint8, device=f"cuda:{device}")
            else:  # the legacy default stream: make the zeros visible to every stream
                buf = torch.zeros(nbytes, dtype=torch.uint8, device=f"cuda:{device}")
                torch.cuda.synchronize(device)
        return buf, buf.data_ptr()
    import numpy as np
    import tvm

    buf = tvm.runtime.empty((nbytes,), "uint8", tvm.cuda(device))
    buf.copyfrom(np.zeros(nbytes, dtype=np.uint8))
    return buf, buf.data_ptr


def allocate(device, stream, nbytes) -> int:
    """The pointer of a new zeroed buffer of `nbytes` on `device`, ordered before later work on `stream`, kept
    alive for good."""
    with _lock:
        buf, ptr = _zeroed(int(device), int(stream), int(nbytes))
        _kept.append(buf)
    return int(ptr)


def streamk_workspace(nbytes):
    """The launch's stream-K workspace (module docstring)."""
    from tvm_ffi import core

    nbytes = int(nbytes)
    device = _current_device()
    stream = int(core._env_get_current_stream(_CUDA, device) or 0)
    key = (device, stream)
    held = _buffers.get(key)
    if held is None or held[0] < nbytes:
        held = _buffers[key] = (nbytes, allocate(device, stream, nbytes))
    return ctypes.c_void_p(held[1])


def register(native=None):
    """Register ``tilex.streamk_workspace``: `native` (kernel_caller.cc's) or the Python function, and the
    allocator the native one calls."""
    import tvm_ffi

    tvm_ffi.register_global_func(ALLOC_FUNC, allocate, override=True)
    tvm_ffi.register_global_func(STREAMK_WORKSPACE_FUNC, native or streamk_workspace, override=True)


register()
