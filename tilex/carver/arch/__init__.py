"""Device models of TileLang's carver (``tilelang.carver.arch``): :mod:`~tilex.carver.arch.driver` (device
queries) works; the models ``CUDA``, ``CDNA``, ``get_arch`` and ``auto_infer_current_arch`` raise
NotImplementedError (see :mod:`tilex.carver`)."""
from __future__ import annotations

from . import driver

__all__ = ["driver", "CUDA", "CDNA", "TileDevice", "get_arch", "auto_infer_current_arch"]


def _refuse(name: str):
    raise NotImplementedError(f"tilex.carver.arch.{name}: TileLang's carver device models (used by its Roller "
                              "recommender) are not implemented in tilex; use tilex.carver.arch.driver for device "
                              "queries and tilex.autotune to choose configurations")


class TileDevice:
    """TileLang's carver device model (not implemented: constructing one raises NotImplementedError)."""

    def __init__(self, *args, **kwargs):
        _refuse(type(self).__name__)


class CUDA(TileDevice):
    """TileLang's carver model of a CUDA device (not implemented)."""


class CDNA(TileDevice):
    """TileLang's carver model of a ROCm CDNA device (not implemented; tilex compiles for CUDA only)."""


def get_arch(target="cuda"):
    """Not implemented (TileLang: the carver device model of ``target``)."""
    _refuse("get_arch")


def auto_infer_current_arch():
    """Not implemented (TileLang: the carver device model of the current device)."""
    _refuse("auto_infer_current_arch")
