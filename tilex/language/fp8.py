"""``tilex.language.fp8``: the FP8 dtype of a format for the platform (TileLang's ``determine_fp8_type`` /
``determine_torch_fp8_type``). tilex compiles for NVIDIA GPUs, whose FP8 types are OCP's E4M3FN and E5M2."""
from __future__ import annotations

from tilex.language.dtypes import TYPES

__all__ = ["determine_fp8_type", "determine_torch_fp8_type"]

_FORMATS = {"e4m3": "float8_e4m3fn", "e5m2": "float8_e5m2"}


def determine_fp8_type(fp8_format="e4m3"):
    """The FP8 dtype of `fp8_format` ("e4m3" or "e5m2") on CUDA: ``T.float8_e4m3fn`` or ``T.float8_e5m2``."""
    if fp8_format not in _FORMATS:
        raise ValueError(f"Unsupported FP8 format: {fp8_format!r} (expected 'e4m3' or 'e5m2')")
    return TYPES[_FORMATS[fp8_format]]


def determine_torch_fp8_type(fp8_format="e4m3"):
    """The torch dtype of :func:`determine_fp8_type` (``torch.float8_e4m3fn`` / ``torch.float8_e5m2``)."""
    import torch

    name = str(determine_fp8_type(fp8_format))
    torch_dtype = getattr(torch, name, None)
    if torch_dtype is None:
        raise RuntimeError(f"this PyTorch has no dtype {name}")
    return torch_dtype
