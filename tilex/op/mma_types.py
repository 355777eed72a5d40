"""Which operand and accumulator dtypes T.gemm runs on tensor cores, and the instruction family of each.

    A, B                               C          k step   family
    float16 / bfloat16 (both the same)  float32    16       f16 / bf16   (mma.sync m16n8k16, wgmma m64nNk16)
    float8 e4m3 / e5m2 (any pair)       float32    32       f8           (mma.sync m16n8k32 sm_89+, wgmma m64nNk32)
    int8 / uint8 (any pair)             int32      32       i8           (mma.sync m16n8k32, wgmma m64nNk32)

8-bit operands are read K-major only (A as (M, K), B as (N, K) with ``transpose_B=True``): the instructions have
no transpose for them and ``ldmatrix.trans`` moves 16-bit elements.
"""
from __future__ import annotations

from dataclasses import dataclass

#: 8-bit float dtypes (TVM names; float8_e4m3 is TileLang's spelling of e4m3fn) -> type code of the f8 family
F8_CODES = {"float8_e4m3fn": 0, "float8_e4m3": 0, "float8_e5m2": 1}
#: 8-bit integer dtypes -> type code of the i8 family
I8_CODES = {"int8": 0, "uint8": 1}
_F16 = {"float16": "f16", "bfloat16": "bf16"}


@dataclass(frozen=True)
class MmaTypes:
    family: str    # "f16", "bf16", "f8" or "i8"
    ta: int        # operand type codes within the family (8-bit only; 0 otherwise)
    tb: int
    acc: str       # accumulator dtype
    k_step: int    # K of one instruction

    @property
    def eight_bit(self) -> bool:
        return self.family in ("f8", "i8")


def mma_types(a_dtype, b_dtype, c_dtype) -> MmaTypes | None:
    """The tensor-core instruction family for these T.gemm dtypes, or None when there is none."""
    a, b, c = str(a_dtype), str(b_dtype), str(c_dtype)
    if a in _F16 and a == b and c == "float32":
        return MmaTypes(_F16[a], 0, 0, "float32", 16)
    if a in F8_CODES and b in F8_CODES and c == "float32":
        return MmaTypes("f8", F8_CODES[a], F8_CODES[b], "float32", 32)
    if a in I8_CODES and b in I8_CODES and c == "int32":
        return MmaTypes("i8", I8_CODES[a], I8_CODES[b], "int32", 32)
    return None


SUPPORTED = ("float16/bfloat16 inputs (both the same) with a float32 accumulator, float8 e4m3/e5m2 inputs with a "
             "float32 accumulator, or int8/uint8 inputs with an int32 accumulator")
