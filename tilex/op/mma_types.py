"""Which operand and accumulator dtypes T.gemm runs on tensor cores, and the instruction family of each.

    A, B                               C          k step   family   mma.sync (sm80+)        wgmma (sm_90a)
    float16 / bfloat16 (both the same)  float32    16       f16/bf16 m16n8k16                m64nNk16
    float16                             float16    16       f16      m16n8k16 (f16 accum)    m64nNk16 (f16 accum)
    float32                             float32    8        tf32     m16n8k8 (.tf32)         -- (as TileLang)
    float8 e4m3 / e5m2 (any pair)       float32    32       f8       m16n8k32 (sm_89+)       m64nNk32
    int8 / uint8 (any pair)             int32      32       i8       m16n8k32                m64nNk32
    int4 / uint4 (both the same)        int32      64       i4       m16n8k64                -- (none in PTX)

float32 operands run as tf32, as TileLang runs them: each 32-bit register is rounded to the nearest tf32
(``cvt.rna``) as it goes to ``mma.sync ... .tf32`` (what TileLang's tfloat32 tiles hold, and closer to float32 than
the tensor cores' own reading of an unrounded register, its top 19 bits). TileLang's ``T.tfloat32`` tiles are
float32 tiles in tilex (``tilex.language.dtypes.TensorFloat32``: float32 storage), so a gemm over them is this tf32
gemm too; values a program rounded with ``T.tfloat32(x)`` go in exactly. TileLang gives float32 inputs no warpgroup
MMA (its tfloat32 dtype gets one when K-major); tilex cannot tell a tfloat32 tile from a float32 one and runs both
on mma.sync (the same products: each operand rounded to tf32, accumulated in float32). 8-bit and 4-bit operands are read
K-major only (A as (M, K), B as (N, K) with ``transpose_B=True``): the instructions have no transpose for them and
``ldmatrix.trans`` moves 16-bit elements.
"""
from __future__ import annotations

from dataclasses import dataclass

#: 8-bit float dtypes (TVM names; float8_e4m3 is TileLang's spelling of e4m3fn) -> type code of the f8 family
F8_CODES = {"float8_e4m3fn": 0, "float8_e4m3": 0, "float8_e5m2": 1}
#: 8-bit integer dtypes -> type code of the i8 family
I8_CODES = {"int8": 0, "uint8": 1}
#: 4-bit integer dtypes -> type code of the i4 family
I4_CODES = {"int4": 0, "uint4": 1}
_F16 = {"float16": "f16", "bfloat16": "bf16"}


@dataclass(frozen=True)
class MmaTypes:
    family: str    # "f16", "bf16", "tf32", "f8", "i8" or "i4"
    ta: int        # operand type codes within the family (8- and 4-bit only; 0 otherwise)
    tb: int
    acc: str       # accumulator dtype
    k_step: int    # K of one mma.sync (and of one wgmma where there is one)

    @property
    def eight_bit(self) -> bool:
        return self.family in ("f8", "i8")

    @property
    def k_major_only(self) -> bool:
        """Whether both operands must be stored K-major (no transposing load or instruction exists)."""
        return self.family in ("f8", "i8", "i4")

    @property
    def half_acc(self) -> bool:
        """Whether the accumulator is float16 (two values per 32-bit register)."""
        return self.acc == "float16"

    @property
    def has_wgmma(self) -> bool:
        """Whether tilex runs this family on warpgroup MMAs (sm_90a)."""
        return self.family in ("f16", "bf16", "f8", "i8")


def mma_types(a_dtype, b_dtype, c_dtype) -> MmaTypes | None:
    """The tensor-core instruction family for these T.gemm dtypes, or None when there is none."""
    a, b, c = str(a_dtype), str(b_dtype), str(c_dtype)
    if a in _F16 and a == b and c == "float32":
        return MmaTypes(_F16[a], 0, 0, "float32", 16)
    if a == "float16" and b == "float16" and c == "float16":
        return MmaTypes("f16", 0, 0, "float16", 16)
    if a == "float32" and b == "float32" and c == "float32":
        return MmaTypes("tf32", 0, 0, "float32", 8)
    if a in F8_CODES and b in F8_CODES and c == "float32":
        return MmaTypes("f8", F8_CODES[a], F8_CODES[b], "float32", 32)
    if a in I8_CODES and b in I8_CODES and c == "int32":
        return MmaTypes("i8", I8_CODES[a], I8_CODES[b], "int32", 32)
    if a in I4_CODES and a == b and c == "int32":
        return MmaTypes("i4", I4_CODES[a], I4_CODES[b], "int32", 64)
    return None


SUPPORTED = ("float16/bfloat16 inputs (both the same) with a float32 accumulator, float16 inputs with a float16 "
             "accumulator, float32 inputs (run as tf32) with a float32 accumulator, float8 e4m3/e5m2 inputs with a "
             "float32 accumulator, int8/uint8 inputs with an int32 accumulator, or int4/uint4 inputs (both the same) "
             "with an int32 accumulator")
