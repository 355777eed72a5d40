"""Inputs for the benchmark phase and checking a kernel's outputs against ``ref_prog``.

:func:`default_supply` makes random CUDA tensors for a kernel's input parameters (used when the tuner is given
no ``supply``); :func:`compare_outputs` compares what a kernel returned with what ``ref_prog`` returned, element
by element within tolerances (a share of mismatched elements allowed), and says how far off it is;
:func:`manual_check` lets the user's ``manual_check_prog`` judge instead.
"""
from __future__ import annotations

from .results import AutotuneError

__all__ = ["default_supply", "compare_outputs", "manual_check", "as_list"]


def default_supply(params) -> list:
    """Random CUDA tensors for the given input :class:`tilex.jit.ParamSpec` list: ``randn`` for floating
    types, small ``randint`` values for integers, random booleans. Scalars and symbolic shapes need a
    ``supply``."""
    import torch

    device = torch.device("cuda", torch.cuda.current_device())
    out = []
    for p in params:
        if p.kind != "buffer":
            raise AutotuneError(f"parameter '{p.name}' is a scalar ({p.dtype}); the default supply cannot "
                                "invent it: pass supply=lambda params: [...] to the autotuner")
        if p.torch_dtype is None:
            raise AutotuneError(f"parameter '{p.name}' has dtype {p.dtype}, which torch cannot allocate; "
                                "pass supply=")
        if not all(isinstance(d, int) for d in p.shape):
            raise AutotuneError(f"parameter '{p.name}' has a symbolic shape {p!r}; pass supply= to give the "
                                "autotuner concrete inputs")
        if p.strides is not None:
            raise AutotuneError(f"parameter '{p.name}' declares strides; pass supply= to give the autotuner "
                                "suitable inputs")
        dt = p.torch_dtype
        shape = tuple(p.shape)
        if dt == torch.bool:
            t = torch.randint(0, 2, shape, device=device).bool()
        elif dt.is_floating_point:
            if dt in (torch.float16, torch.bfloat16, torch.float32, torch.float64):
                t = torch.randn(shape, dtype=dt, device=device)
            else:  # float8 and friends
                t = torch.randn(shape, dtype=torch.float32, device=device).to(dt)
        elif dt.is_complex:
            t = torch.randn(shape, dtype=dt, device=device)
        elif dt in (torch.uint8, getattr(torch, "uint16", None), getattr(torch, "uint32", None),
                    getattr(torch, "uint64", None)):
            t = torch.randint(0, 8, shape, device=device).to(dt)
        else:
            t = torch.randint(-4, 5, shape, device=device).to(dt)
        out.append(t)
    return out


def as_list(x) -> list:
    """``x`` as a list: ``[]`` for ``None``, the items of a list or tuple, else ``[x]`` (kernel outputs,
    ``out_idx``)."""
    if x is None:
        return []
    if isinstance(x, (list, tuple)):
        return list(x)
    return [x]


def compare_outputs(out, ref, rtol, atol, max_mismatched_ratio: float = 0.0) -> tuple[str, float | None]:
    """Compare a kernel's output(s) ``out`` with ``ref_prog``'s ``ref``. An element mismatches when
    ``|out - ref| > atol + rtol * |ref|`` (or one side is NaN); an output matches when at most
    ``int(numel * max_mismatched_ratio)`` of its elements mismatch (TileLang's tolerance; 0: none may). Returns
    ``(reason, max_error)``: ``reason`` is ``""`` when every output matches, else one line saying which output
    differs and how; ``max_error`` is the largest absolute difference (``None`` when the outputs cannot be
    compared: a different number of outputs or a different shape)."""
    import torch

    outs, refs = as_list(out), as_list(ref)
    if len(outs) != len(refs):
        return f"the kernel returned {len(outs)} output(s) but ref_prog {len(refs)}", None
    worst = 0.0
    reason = ""
    for k, (o, r) in enumerate(zip(outs, refs)):
        r = torch.as_tensor(r, device=o.device)
        if tuple(o.shape) != tuple(r.shape):
            return f"output {k}: shape {tuple(o.shape)} but ref_prog gives {tuple(r.shape)}", None
        if o.is_complex() or r.is_complex():
            o2, r2 = o.to(torch.complex128), r.to(torch.complex128)
        else:
            wide = torch.float64 if torch.float64 in (o.dtype, r.dtype) else torch.float32
            o2, r2 = o.to(wide), r.to(wide)
        diff = (o2 - r2).abs()
        err = float(diff.nan_to_num(float("inf")).max().item()) if diff.numel() else 0.0
        worst = max(worst, err)
        bad = int((~torch.isclose(o2, r2, rtol=rtol, atol=atol)).sum().item()) if diff.numel() else 0
        allowed = int(o.numel() * max_mismatched_ratio)
        if bad > allowed and not reason:
            reason = (f"output {k}: max abs error {err:.4g} (rtol={rtol}, atol={atol}), "
                      f"{bad}/{o.numel()} elements mismatched"
                      + (f" (at most {allowed} may)" if max_mismatched_ratio else ""))
    return reason, worst


def manual_check(check_prog, out, ref) -> str:
    """TileLang's ``manual_check_prog``: ``check_prog(outputs, ref_outputs)`` (the kernel's and ``ref_prog``'s
    outputs, each as a list) judges the outputs; the reason it raised (an ``assert`` failing, say), or ``""`` when it
    returned."""
    outs, refs = as_list(out), as_list(ref)
    if len(outs) != len(refs):
        return f"the kernel returned {len(outs)} output(s) but ref_prog {len(refs)}"
    try:
        check_prog(outs, refs)
    except Exception as e:  # noqa: BLE001 - the user's verdict, with its message
        lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()]
        return f"manual_check_prog: {type(e).__name__}" + (f": {lines[0][:240]}" if lines else "")
    return ""
