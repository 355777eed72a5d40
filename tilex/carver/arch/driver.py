"""CUDA device queries under TileLang's names (``tilelang.carver.arch.driver``), answered by torch and, for
attributes torch does not report, the CUDA runtime (``cudaDeviceGetAttribute``). Each raises RuntimeError when
there is no such CUDA device."""
from __future__ import annotations

import ctypes
import glob
import os

__all__ = ["cudaDeviceAttrNames", "get_cuda_device_properties", "get_device_name", "get_shared_memory_per_block",
           "get_device_attribute", "get_max_dynamic_shared_size_bytes", "get_persisting_l2_cache_max_size",
           "get_num_sms", "get_registers_per_block"]


class cudaDeviceAttrNames:  # noqa: N801 - TileLang's spelling
    """The ``cudaDeviceAttr`` numbers these queries use (CUDA runtime API)."""

    cudaDevAttrMaxThreadsPerBlock = 1
    cudaDevAttrMaxRegistersPerBlock = 12
    cudaDevAttrMaxSharedMemoryPerMultiprocessor = 81
    cudaDevAttrMaxPersistingL2CacheSize = 108


_FORMATS = {"bytes": 1, "kb": 1024, "mb": 1024 * 1024}


def get_cuda_device_properties(device_id: int = 0):
    """torch's properties of CUDA device ``device_id``, or None when torch sees no GPU."""
    import torch

    if not torch.cuda.is_available():
        return None
    return torch.cuda.get_device_properties(torch.device("cuda", device_id))


def _props(device_id):
    props = get_cuda_device_properties(device_id)
    if props is None:
        raise RuntimeError(f"tilex: no CUDA device {device_id} (torch sees no GPU)")
    return props


def get_device_name(device_id: int = 0) -> str | None:
    """The device's name, or None when torch sees no GPU."""
    props = get_cuda_device_properties(device_id)
    return props.name if props is not None else None


def _scaled(value: int, format: str) -> int:  # noqa: A002 - TileLang's argument name
    if format not in _FORMATS:
        raise ValueError(f"format must be one of bytes, kb, mb, got {format!r}")
    return int(value) // _FORMATS[format]


def get_shared_memory_per_block(device_id: int = 0, format: str = "bytes") -> int:  # noqa: A002
    """Shared memory a block may use without opting in (48 KB on current GPUs), in ``format`` (bytes, kb, mb)."""
    return _scaled(_props(device_id).shared_memory_per_block, format)


def _cudart():
    import torch

    names = ["libcudart.so"]
    lib_dir = os.path.join(os.path.dirname(torch.__file__), "lib")
    names += sorted(glob.glob(os.path.join(lib_dir, "libcudart.so*")))
    for site in {os.path.dirname(os.path.dirname(torch.__file__))}:
        names += sorted(glob.glob(os.path.join(site, "nvidia", "cu*", "lib", "libcudart.so*")))
        names += sorted(glob.glob(os.path.join(site, "nvidia", "cuda_runtime", "lib", "libcudart.so*")))
    for name in names:
        try:
            return ctypes.CDLL(name)
        except OSError:
            continue
    raise RuntimeError("tilex: cannot load the CUDA runtime library (libcudart.so)")


def get_device_attribute(attr: int, device_id: int = 0) -> int:
    """``cudaDeviceGetAttribute(attr, device_id)``. Raises RuntimeError when the runtime refuses."""
    _props(device_id)
    lib = _cudart()
    fn = lib.cudaDeviceGetAttribute
    fn.argtypes = [ctypes.POINTER(ctypes.c_int), ctypes.c_int, ctypes.c_int]
    fn.restype = ctypes.c_int
    value = ctypes.c_int()
    err = fn(ctypes.byref(value), int(attr), int(device_id))
    if err != 0:
        raise RuntimeError(f"tilex: cudaDeviceGetAttribute({attr}, {device_id}) failed with error {err}")
    return value.value


def get_max_dynamic_shared_size_bytes(device_id: int = 0, format: str = "bytes") -> int:  # noqa: A002
    """Shared memory per multiprocessor (the bound on a block's dynamic shared memory), in ``format``."""
    return _scaled(_props(device_id).shared_memory_per_multiprocessor, format)


def get_persisting_l2_cache_max_size(device_id: int = 0) -> int:
    """The largest persisting L2 cache window, in bytes."""
    return get_device_attribute(cudaDeviceAttrNames.cudaDevAttrMaxPersistingL2CacheSize, device_id)


def get_num_sms(device_id: int = 0) -> int:
    """The device's multiprocessor count."""
    return int(_props(device_id).multi_processor_count)


def get_registers_per_block(device_id: int = 0) -> int:
    """32-bit registers one block may use."""
    return get_device_attribute(cudaDeviceAttrNames.cudaDevAttrMaxRegistersPerBlock, device_id)
