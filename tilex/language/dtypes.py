"""Dtype spellings of tile programs: TileLang's names mapped to the ones TVM's CUDA codegen emits."""
from __future__ import annotations

#: TileLang spelling -> TVM dtype (TVM's codegen has no plain "float8_e4m3"; CUDA's __nv_fp8_e4m3 is e4m3fn)
ALIASES = {"float8_e4m3": "float8_e4m3fn"}


def canonical_dtype(dtype):
    """`dtype` with TileLang's aliases resolved (anything else unchanged); TVMScript's dtype constructors
    (``T.float8_e4m3``) name their dtype in ``_dtype_str``."""
    return ALIASES.get(getattr(dtype, "_dtype_str", None) or str(dtype), dtype)
