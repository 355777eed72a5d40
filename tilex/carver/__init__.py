"""tilex.carver: the part of TileLang's ``tilelang.carver`` that programs use without its recommender.

:mod:`tilex.carver.arch.driver` answers device queries (``driver.get_num_sms()``, shared memory, registers). The
recommender itself -- the device models ``CUDA`` / ``CDNA`` / ``get_arch``, the templates (``MatmulTemplate``,
...) and the Roller policy that proposes tile configurations from them -- is not implemented: those names exist
so that programs import, and raise NotImplementedError when used. Porting it would take a device model of the
target (tilex's :mod:`tilex.ir.hardware` has the facts), TIR analysis of each template's computation, and the
Roller search; tilex's autotuner ranks configurations with its own cost model (``top_k``) instead.
"""
from . import arch

__all__ = ["arch"]
