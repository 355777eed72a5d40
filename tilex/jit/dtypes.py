"""Dtype names between TVM and torch (the tables are built on first use: torch is imported lazily)."""
from __future__ import annotations

from typing import Any

__all__ = ["tvm_to_torch_dtype", "torch_to_tvm_dtype"]

_DTYPE_NAMES = [
    "float16", "bfloat16", "float32", "float64", "int8", "int16", "int32", "int64",
    "uint8", "uint16", "uint32", "uint64", "bool",
    "float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz", "float8_e8m0fnu",
    "complex64", "complex128",
]
_TVM2TORCH: dict | None = None
_TORCH2TVM: dict | None = None


def _dtype_tables():
    global _TVM2TORCH, _TORCH2TVM
    if _TVM2TORCH is None:
        import torch

        t2t = {}
        for name in _DTYPE_NAMES:
            td = getattr(torch, name, None)
            if isinstance(td, torch.dtype):
                t2t[name] = td
        t2t["uint1"] = torch.bool  # TVM spells bool as uint1 in some places
        t2t["float8_e4m3"] = torch.float8_e4m3fn  # TileLang's spelling of e4m3 (CUDA's __nv_fp8_e4m3: no inf)
        _TVM2TORCH = t2t
        _TORCH2TVM = {v: k for k, v in t2t.items() if k not in ("uint1", "float8_e4m3")}
    return _TVM2TORCH, _TORCH2TVM


def tvm_to_torch_dtype(dtype) -> Any:
    """TVM dtype (string or tvm_ffi dtype) -> torch.dtype. Raises TypeError if torch has no equivalent."""
    t2t, _ = _dtype_tables()
    name = str(dtype)
    if name not in t2t:
        raise TypeError(f"tilex: TVM dtype {name!r} has no torch equivalent "
                        f"(sub-byte types: pass packed uint8/int8 buffers instead)")
    return t2t[name]


def torch_to_tvm_dtype(dtype) -> str:
    _, t2t = _dtype_tables()
    if dtype not in t2t:
        raise TypeError(f"tilex: torch dtype {dtype} has no TVM equivalent")
    return t2t[dtype]
