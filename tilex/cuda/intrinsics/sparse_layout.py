"""The metadata of 2:4 (and, for float32, 1:2) structured sparsity as TileLang's sparse GEMM examples compress it:
per element type (elements kept, group size), how many elements of A one metadata element indexes, and how many
threads share a metadata value: the format's facts, for programs that prepare such operands (``T.gemm_sp`` reads
them as ``tilex.op.gemm_sp`` says, rebuilding the dense A: tilex has no sparse MMA)."""
from __future__ import annotations

from tilex.language.dtypes import canonical_dtype

__all__ = ["GROUP_CONFIG", "get_e_factor", "get_e_replicate_factor"]

#: element type -> (elements kept, group size): two of every four, one of every two for float32
GROUP_CONFIG = {canonical_dtype(name): groups for name, groups in (
    ("float32", (1, 2)), ("float16", (2, 4)), ("bfloat16", (2, 4)), ("int8", (2, 4)), ("uint8", (2, 4)),
    ("float8_e4m3fn", (2, 4)), ("float8_e5m2", (2, 4)))}

#: metadata bits per group (two 2-bit positions)
BITS_PER_GROUP = 4


def get_e_factor(a_dtype, meta_dtype) -> int:
    """How many elements of A (of `a_dtype`) one metadata element of `meta_dtype` describes."""
    a = canonical_dtype(a_dtype)
    if a not in GROUP_CONFIG:
        raise ValueError(f"get_e_factor: no structured-sparsity format for {a_dtype!r}; one of "
                         f"{sorted(str(t) for t in GROUP_CONFIG)}")
    return canonical_dtype(meta_dtype).bits // BITS_PER_GROUP * GROUP_CONFIG[a][1]


def get_e_replicate_factor(a_dtype) -> int:
    """How many consecutive threads share one metadata value: 1 for 8-bit elements, 2 for wider ones."""
    return 1 if canonical_dtype(a_dtype).bits <= 8 else 2
