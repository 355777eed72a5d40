"""Torch-side helpers for kernel inputs and output checks, under TileLang's names (``tilelang.utils.tensor``).

* :class:`TensorSupplyType` and :func:`supply_tensor` / :func:`get_tensor_supply`: how a profiler fills a kernel's
  input tensors (the values TileLang's supply gives for each kind and dtype, see :func:`supply_tensor`);
* :func:`torch_assert_close`: "close enough" with a budget of mismatching elements (``max_mismatched_ratio``);
* :func:`is_float8_dtype`.

No tilex imports: a parameter is anything with ``name``, ``kind`` (``"buffer"`` / ``"scalar"``), ``dtype``,
``torch_dtype``, ``shape`` and ``strides`` (:class:`tilex.jit.ParamSpec`). torch is imported when used.
"""
from __future__ import annotations

import enum

__all__ = ["TensorSupplyType", "supply_tensor", "get_tensor_supply", "torch_assert_close", "is_float8_dtype",
           "current_device"]


class TensorSupplyType(enum.Enum):
    """How input tensors are filled (TileLang's member names; ``TensorSupplyType.of`` also takes the lower-case
    strings ``"auto"``, ``"randn"``, ...). What each gives per dtype is :func:`supply_tensor`'s table."""

    Integer = "integer"
    Uniform = "uniform"
    Normal = "normal"
    Randn = "randn"
    Zero = "zero"
    One = "one"
    Auto = "auto"

    @classmethod
    def of(cls, value) -> "TensorSupplyType":
        """The member named by ``value``: a member, another enum with the same member names, or a string
        (the member's name or value, any case). Raises ValueError for anything else."""
        if isinstance(value, cls):
            return value
        if isinstance(value, enum.Enum):  # another library's enum with the same member names
            value = value.name
        text = str(value).strip().lower()
        for member in cls:
            if text in (member.value, member.name.lower()):
                return member
        raise ValueError(f"tilex: unknown tensor_supply_type {value!r}; use one of "
                         f"{', '.join(m.value for m in cls)}")


def _float8_dtypes():
    import torch

    return {getattr(torch, n) for n in dir(torch) if n.startswith("float8_") and
            isinstance(getattr(torch, n), torch.dtype)}


def is_float8_dtype(dtype) -> bool:
    """Whether a torch dtype is one of torch's 8-bit float types (e4m3fn, e5m2, the fnuz pair, e8m0fnu)."""
    return dtype in _float8_dtypes()


def _is_unsigned(dt) -> bool:
    import torch

    return dt in {getattr(torch, n) for n in ("uint8", "uint16", "uint32", "uint64") if hasattr(torch, n)}


def current_device():
    """Where supplied tensors go: the current CUDA device, or the CPU when torch sees no GPU."""
    import torch

    if torch.cuda.is_available():
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def _randint(low, high, shape, dt, device):
    """Integers in [low, high) as dtype ``dt`` (made as int64 and cast where torch cannot draw ``dt`` itself)."""
    import torch

    if is_float8_dtype(dt) or dt.is_complex:
        return torch.randint(low, high, shape, device=device, dtype=torch.int64).to(dt)
    return torch.randint(low, high, shape, device=device, dtype=dt)


def _small_integers(dt, shape, device):
    """TileLang's integer supply: {0, 1, 2} for unsigned types, int8 codes -128..127 cast for float8, {0, 1} for
    booleans, {-2, ..., 2} for everything else."""
    import torch

    if dt == torch.bool:
        return _randint(0, 2, shape, dt, device)
    if _is_unsigned(dt):
        return _randint(0, 3, shape, dt, device)
    if is_float8_dtype(dt):
        return torch.randint(-128, 128, shape, device=device, dtype=torch.int8).to(dt)
    return _randint(-2, 3, shape, dt, device)


def supply_tensor(param, supply_type="auto", device=None):
    """A torch tensor for one buffer parameter (static shape, no strides) on ``device`` (default
    :func:`current_device`), filled as TileLang fills it:

    ============  ==========================================================================================
    ``Auto``      float16 / bfloat16 / float32: uniform in [-1, 1); other types: the ``Integer`` values
    ``Integer``   unsigned: {0, 1, 2}; float8: the int8 codes -128..127 cast; bool: {0, 1}; else {-2, ..., 2}
    ``Uniform``   uniform in [-1, 1) (drawn in float32, cast); int8: all ones
    ``Normal``    normal with mean -1 and standard deviation 1 (float32, cast); int8: all ones
    ``Randn``     standard normal (float32, cast)
    ``Zero``      zeros; ``One``: ones
    ============  ==========================================================================================

    Raises ValueError for a scalar, a dtype torch cannot allocate, a symbolic shape or declared strides (pass the
    inputs yourself)."""
    import torch

    name = getattr(param, "name", "?")
    if getattr(param, "kind", "buffer") != "buffer":
        raise ValueError(f"tilex: parameter '{name}' is a scalar ({param.dtype}); pass input_tensors=")
    if param.torch_dtype is None:
        raise ValueError(f"tilex: parameter '{name}' has dtype {param.dtype}, which torch cannot allocate; pass "
                         "input_tensors=")
    if not all(isinstance(d, int) for d in param.shape):
        raise ValueError(f"tilex: parameter '{name}' has a symbolic shape {param!r}; pass input_tensors= (or "
                         "dynamic_symbolic_constraints= to the profiler)")
    if getattr(param, "strides", None) is not None:
        raise ValueError(f"tilex: parameter '{name}' declares strides; pass input_tensors=")
    dt, shape = param.torch_dtype, tuple(param.shape)
    device = current_device() if device is None else device
    kind = TensorSupplyType.of(supply_type)
    if kind is TensorSupplyType.Zero:
        return torch.zeros(shape, dtype=dt, device=device)
    if kind is TensorSupplyType.One:
        return torch.ones(shape, dtype=dt, device=device)
    if kind is TensorSupplyType.Auto:
        if dt in (torch.float16, torch.bfloat16, torch.float32):
            return torch.empty(shape, dtype=dt, device=device).uniform_(-1.0, 1.0)
        return _small_integers(dt, shape, device)
    if kind is TensorSupplyType.Integer:
        return _small_integers(dt, shape, device)
    if dt == torch.int8 and kind in (TensorSupplyType.Uniform, TensorSupplyType.Normal):
        return torch.ones(shape, dtype=dt, device=device)
    if kind is TensorSupplyType.Uniform:
        return torch.empty(shape, dtype=torch.float32, device=device).uniform_(-1.0, 1.0).to(dt)
    if kind is TensorSupplyType.Normal:
        return torch.empty(shape, dtype=torch.float32, device=device).normal_(-1.0, 1.0).to(dt)
    return torch.randn(shape, dtype=torch.float32, device=device).to(dt)  # Randn


def get_tensor_supply(supply_type=TensorSupplyType.Integer):
    """``supply(param) -> tensor``: :func:`supply_tensor` with ``supply_type`` on :func:`current_device`."""
    kind = TensorSupplyType.of(supply_type)

    def supply(param):
        return supply_tensor(param, kind)

    return supply


def _same_attributes(a, b, check_device, check_dtype, check_layout, check_stride):
    def differ(what, x, y):
        raise AssertionError(f"torch_assert_close: {what} differ: {x} != {y}")

    if a.shape != b.shape:
        differ("shapes", tuple(a.shape), tuple(b.shape))
    if check_layout and a.layout != b.layout:
        differ("layouts", a.layout, b.layout)
    if check_stride and a.layout == b.layout and a.stride() != b.stride():
        differ("strides", a.stride(), b.stride())
    if check_device and a.device != b.device:
        differ("devices", a.device, b.device)
    if check_dtype and a.dtype != b.dtype:
        differ("dtypes", a.dtype, b.dtype)


def _common(a, b):
    """Both tensors on one device, in one dtype (torch's promotion; unsigned 16-64-bit as int64), strided."""
    import torch

    if a.device != b.device:
        a, b = a.cpu(), b.cpu()
    if a.dtype != b.dtype:
        wide = {getattr(torch, n) for n in ("uint16", "uint32", "uint64") if hasattr(torch, n)}
        da = torch.int64 if a.dtype in wide else a.dtype
        db = torch.int64 if b.dtype in wide else b.dtype
        dt = torch.promote_types(da, db)
        a, b = a.to(dt), b.to(dt)
    if a.layout != torch.strided:
        a = a.to_dense()
    if b.layout != torch.strided:
        b = b.to_dense()
    return a, b


def torch_assert_close(tensor_a, tensor_b, rtol=1e-2, atol=1e-3, max_mismatched_ratio=0.001, verbose=False,
                       equal_nan=True, check_device=True, check_dtype=True, check_layout=True, check_stride=False,
                       base_name="LHS", ref_name="RHS"):
    """Assert that ``tensor_a`` is close to ``tensor_b`` except for at most ``int(numel * max_mismatched_ratio)``
    elements. An element mismatches when ``torch.isclose(a, b, rtol, atol, equal_nan)`` is false (compared in
    the promoted dtype, on the CPU when the devices differ). Shapes must agree, and devices, dtypes and layouts
    unless their ``check_*`` flag is off. Returns True; raises AssertionError naming the count, the first
    mismatch and the largest differences."""
    import torch

    if not isinstance(tensor_a, torch.Tensor) or not isinstance(tensor_b, torch.Tensor):
        raise TypeError(f"torch_assert_close compares two torch tensors, got {type(tensor_a).__name__} and "
                        f"{type(tensor_b).__name__}")
    if not 0 <= float(max_mismatched_ratio) <= 1:
        raise ValueError(f"torch_assert_close: max_mismatched_ratio must be in [0, 1], got {max_mismatched_ratio}")
    _same_attributes(tensor_a, tensor_b, check_device, check_dtype, check_layout, check_stride)
    a, b = _common(tensor_a, tensor_b)
    mismatched = ~torch.isclose(a, b, rtol=rtol, atol=atol, equal_nan=equal_nan)
    total = a.numel()
    count = int(mismatched.sum().item())
    allowed = int(total * max_mismatched_ratio)
    if verbose:
        print(f"torch_assert_close: {count} of {total} elements mismatch (allowed: {allowed})")
    if count <= allowed:
        return True
    flat = int(torch.argmax(mismatched.reshape(-1).int()).item())
    index, rest = [], flat
    for extent in reversed(a.shape):
        index.append(rest % extent)
        rest //= extent
    index.reverse()
    va, vb = a.reshape(-1)[flat].item(), b.reshape(-1)[flat].item()
    diff = (a - b).abs() if not a.dtype == torch.bool else (a != b)
    rel = diff.double() / (b.double().abs() + 1e-12)
    raise AssertionError(
        f"{count / total:.2%} of {total} elements differ by more than atol={atol} + rtol={rtol} * |{ref_name}|: "
        f"too many mismatched elements ({count} > {allowed}, {max_mismatched_ratio * 100:.2f}% allowed)."
        f"\nFirst mismatch at index {index}: {base_name}={va}, {ref_name}={vb}."
        f"\nGreatest absolute difference: {diff.double().max().item()}, greatest relative difference: "
        f"{rel.max().item()}")
