"""tilex.utils: TileLang's ``tilelang.utils`` names that programs use outside the kernel language.

:mod:`~tilex.utils.tensor` (input supplies, ``torch_assert_close``) and :mod:`~tilex.utils.target` (target
selection and CUDA arch predicates).
"""
from . import target, tensor
from .tensor import TensorSupplyType, get_tensor_supply, torch_assert_close

__all__ = ["target", "tensor", "TensorSupplyType", "get_tensor_supply", "torch_assert_close"]
