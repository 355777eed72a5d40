"""`T.symbolic` / `T.dynamic`: a named dimension whose value comes from the arguments of each call."""
import re

from tvm import tirx

from tilex.language.dtypes import canonical_dtype


def symbolic(name, dtype="int32"):
    """A symbolic size (a TIR variable) to use in `T.Tensor` shapes and index arithmetic: one compiled kernel serves
    every value, bound from the shapes of the tensors passed to it. Several names at once (``"m, n"`` or ``"m n"``)
    give a tuple of variables, as TileLang does."""
    if not isinstance(name, str):
        raise ValueError(f"T.dynamic: the name must be a string, got {name!r}")
    names = [n for n in re.split(r"[\s,]+", name.strip()) if n]
    if not names or any(not n.isidentifier() for n in names):
        raise ValueError(f"T.dynamic: the name must be an identifier (or several, separated by commas), got {name!r}")
    if len(names) != len(set(names)):
        raise ValueError(f"T.dynamic: {name!r} names a size twice")
    dtype = str(canonical_dtype(dtype))
    if dtype not in ("int32", "int64"):
        raise ValueError(f"T.dynamic: a size is int32 or int64, got {dtype}")
    made = tuple(tirx.Var(n, dtype) for n in names)
    return made[0] if len(made) == 1 else made


dynamic = symbolic  # TileLang's newer spelling
