"""`T.symbolic` / `T.dynamic`: a named dimension whose value comes from the arguments of each call."""
from tvm import tirx

from tilex.language.dtypes import canonical_dtype


def symbolic(name, dtype="int32"):
    """A symbolic size (a TIR variable) to use in `T.Tensor` shapes and index arithmetic: one compiled kernel serves
    every value, bound from the shapes of the tensors passed to it."""
    if not isinstance(name, str) or not name.isidentifier():
        raise ValueError(f"T.symbolic: the name must be an identifier, got {name!r}")
    dtype = canonical_dtype(dtype)
    if dtype not in ("int32", "int64"):
        raise ValueError(f"T.symbolic: a size is int32 or int64, got {dtype}")
    return tirx.Var(name, dtype)


dynamic = symbolic  # TileLang's newer spelling
