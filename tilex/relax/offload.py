"""OffloadToTilex: Relax operators that tilex has a kernel for become calls of tilex kernels.

Consumes: a Relax IRModule (after import: ``from_exported_program`` or ``relax.frontend.nn``), before legalization.
Produces: the same module where each matched operator is a ``call_dps_packed`` of a tilex kernel (compiled for
the call's static sizes; the rows of a matrix operand may be symbolic), the kernels' runtime modules in
``external_mods``; every other operator is left to TVM's pipeline (``tvm.compile`` legalizes and schedules it).

Patterns (fp16 / bf16, static trailing sizes):

* ``matmul(x, w)`` and ``matmul(x, permute_dims(w))`` with a 2-d weight (a linear layer's ``(N, K)`` weight is read
  in place, not transposed): rows of ``x`` (all leading axes, flattened) small and static take the swap-AB
  program, others the warp-specialized tile program;
* ``nn.rms_norm(x, w)``, ``nn.layer_norm(x, w, b)`` (with both scale and shift) and ``nn.softmax(x)`` over the
  last axis;
* ``add(r, matmul(...))`` (a residual connection) and ``multiply(nn.silu(matmul(x, wg)), matmul(x, wu))`` (a
  SwiGLU MLP) with the matmuls as above, at more than ``SWAP_AB_ROWS`` rows: one GEMM whose epilogue adds the residual
  / multiplies by silu of the gate GEMM's output (a matmul result with another use is computed again there; the
  patterns are meant for results used once, as in a transformer block);
* ``nn.attention(q, k, v)`` (BSNH, no bias or window, no mask or the top-left causal one; k and v may have fewer
  heads), static sizes: the FlashAttention forward program.
"""
from __future__ import annotations

import tvm
from tvm import relax, tirx
from tvm.relax.dpl import is_op, rewrite_call, wildcard

from tilex import env
from tilex.kernels.attention.forward import mha_forward
from tilex.kernels.gemm import matmul, matmul_epilogue, matmul_swap_ab
from tilex.kernels.norms import layernorm_kernel, rmsnorm_kernel
from tilex.kernels.softmax import softmax_kernel
from tilex.relax.extern import attach_kernels, call_kernel, compile_extern

__all__ = ["offload", "OffloadToTilex", "OPS"]

OPS = ("matmul", "gemm_epilogue", "rms_norm", "layer_norm", "softmax", "attention")
_FLOAT = ("float16", "bfloat16")
SWAP_AB_ROWS = 64  # static row counts up to this take the swap-AB program
PANEL = 8  # the tile program's rasterization panel (T.use_swizzle)


def _static(e):
    return int(e) if isinstance(e, tirx.IntImm) else None


def _shape(ty):
    if not isinstance(ty, relax.TensorType) or ty.shape is None or not hasattr(ty.shape, "values"):
        return None
    return list(ty.shape.values)


def _rows(dims):
    """The product of all but the last axis: an int when static, else a PrimExpr."""
    if all(_static(d) is not None for d in dims[:-1]):
        m = 1
        for d in dims[:-1]:
            m *= _static(d)
        return m
    m = dims[0]
    for d in dims[1:-1]:
        m = m * d
    return m


def _tile(n):
    """(bn, stages, threads) of the warp-specialized GEMM tile (128 rows, bk 64) for N = `n`. Its blocks are
    rasterized in panels of PANEL tile rows (L2 reuse of the weight): 0.79 -> 0.94 of cuBLAS at 2048 x 12288 x 4096
    (benchmarks/README.md)."""
    return (256, 3, 256) if n % 256 == 0 else (128, 4, 128)


def _rows_arg(m):
    """The row count a program is built for: `m` when static, else a symbolic size."""
    return m if isinstance(m, int) else tvm.tirx.Var("m", "int32")


def _flat(x, xd, m, last):
    """`x` (dimensions `xd`) as an (m, last) matrix."""
    return x if len(xd) == 2 else relax.op.reshape(x, relax.ShapeExpr([m, last]))


def _unflat(out, xd, n):
    """A (rows, n) result back in the leading dimensions of `xd`."""
    return out if len(xd) == 2 else relax.op.reshape(out, relax.ShapeExpr(list(xd[:-1]) + [n]))


class _Offloader:
    def __init__(self, target, ops):
        self.target = target
        self.ops = set(ops)
        self.kernels = {}  # (op, sizes) -> JITKernel

    def kernel(self, key, make, name, out_idx=-1):
        k = self.kernels.get(key)
        if k is None:
            k = self.kernels[key] = compile_extern(make(), name, out_idx=out_idx, target=self.target)
        return k

    # -- matmul
    @staticmethod
    def gemm_sizes(x, w, transposed, call):
        """(xd, m, n, k, dtype) of a matmul tilex takes, else None."""
        xd, wd = _shape(x.ty), _shape(w.ty)
        if xd is None or wd is None or len(wd) != 2 or len(xd) < 2:
            return None
        dtype = x.ty.dtype
        if dtype not in _FLOAT or w.ty.dtype != dtype or call.ty.dtype != dtype:
            return None
        n, k = (_static(wd[0]), _static(wd[1])) if transposed else (_static(wd[1]), _static(wd[0]))
        if n is None or k is None or _static(xd[-1]) != k or n % 8 or k % 8:
            return None
        return xd, _rows(xd), n, k, dtype

    def gemm(self, x, w, transposed, call):
        sizes = self.gemm_sizes(x, w, transposed, call)
        if sizes is None:
            return call
        xd, m, n, k, dtype = sizes
        static_m = m if isinstance(m, int) else None
        if static_m is not None and static_m <= SWAP_AB_ROWS:
            bm, bn, bk, st = (16, 64, 128, 8) if static_m <= 16 else (64, 128, 64, 8)
            key = ("gemm_swap", static_m, n, k, dtype, transposed)
            kern = self.kernel(key, lambda: matmul_swap_ab(static_m, n, k, bm, bn, bk, st, 128, dtype=dtype,
                                                           trans_b=transposed), "gemm")
        else:
            bn, st, th = _tile(n)
            key = ("gemm", static_m, n, k, dtype, transposed)
            kern = self.kernel(key, lambda: matmul(_rows_arg(m), n, k, 128, bn, 64, st, th, dtype=dtype,
                                                   trans_b=transposed, stage_c=True, swizzle=PANEL), "gemm")
        out = call_kernel(kern, [_flat(x, xd, m, k), w], [relax.TensorType([m, k], dtype), w.ty])
        return _unflat(out, xd, n)

    def gemm_epilogue(self, epilogue, x, w, transposed, e, mm_call, call, e_ty=None):
        """The GEMM x @ w (w^T) with `epilogue` on `e` (of type `e_ty`, default its own; kernels/gemm.py:
        matmul_epilogue), replacing `call`."""
        sizes = self.gemm_sizes(x, w, transposed, mm_call)
        e_ty = e.ty if e_ty is None else e_ty
        ed = _shape(e_ty)
        if sizes is None or ed is None or e_ty.dtype != sizes[4]:
            return call
        xd, m, n, k, dtype = sizes
        if _dims_key(ed) != _dims_key(list(xd[:-1]) + [n]):
            return call
        if isinstance(m, int) and m <= SWAP_AB_ROWS:  # decode rows: the swap-AB program has no epilogue yet
            return call
        bn, st, th = _tile(n)
        key = ("gemm_" + epilogue, m if isinstance(m, int) else None, n, k, dtype, transposed)
        kern = self.kernel(key, lambda: matmul_epilogue(_rows_arg(m), n, k, epilogue, 128, bn, 64, st, th, dtype=dtype,
                                                        trans_b=transposed, swizzle=PANEL), "gemm_" + epilogue)
        out = call_kernel(kern, [_flat(x, xd, m, k), w, _flat(e, xd, m, n)],
                          [relax.TensorType([m, k], dtype), w.ty, relax.TensorType([m, n], dtype)])
        return _unflat(out, xd, n)

    def swiglu(self, xg, wg, tg, mm_g, xu, wu, tu, mm_u, call):
        """silu(x @ wg^T) * (x @ wu^T): the gate GEMM, then the up GEMM with the silu-multiply epilogue."""
        sizes = self.gemm_sizes(xu, wu, tu, mm_u)
        if sizes is None or (isinstance(sizes[1], int) and sizes[1] <= SWAP_AB_ROWS):
            return call
        gate = self.gemm(xg, wg, tg, mm_g)
        if gate is mm_g:
            return call
        return self.gemm_epilogue("silu_mul", xu, wu, tu, gate, mm_u, call, e_ty=mm_g.ty)

    # -- row-wise operators over the last axis
    def rowwise(self, op, x, others, extra, call, make):
        """`call` (an operator over the last axis of `x`, with the other operands `others`) as the tile program
        ``make(rows, n)`` on `x` seen as a matrix; `call` itself when `x` does not qualify."""
        xd = _shape(x.ty)
        if xd is None or x.ty.dtype not in _FLOAT or call.ty.dtype != x.ty.dtype:
            return call
        n = _static(xd[-1])
        if n is None:
            return call
        m = _rows(xd)
        kern = self.kernel((op, m if isinstance(m, int) else None, n, x.ty.dtype) + extra,
                           lambda: make(_rows_arg(m), n), op)
        out = call_kernel(kern, [_flat(x, xd, m, n)] + list(others),
                          [relax.TensorType([m, n], x.ty.dtype)] + [o.ty for o in others])
        return _unflat(out, xd, n)

    def rms_norm(self, x, w, call):
        axes = [int(a) for a in call.attrs.axes]
        xd = _shape(x.ty)
        if xd is None or axes not in ([-1], [len(xd) - 1]) or w.ty.dtype != x.ty.dtype:
            return call
        eps = float(call.attrs.epsilon)
        return self.rowwise("rms_norm", x, [w], (eps,), call,
                            lambda m, n: rmsnorm_kernel(m, n, eps=eps, dtype=x.ty.dtype))

    def layer_norm(self, x, w, b, call):
        a = call.attrs
        xd = _shape(x.ty)
        if xd is None or [int(v) for v in a.axes] not in ([-1], [len(xd) - 1]) or not (a.center and a.scale):
            return call
        if w.ty.dtype != x.ty.dtype or b.ty.dtype != x.ty.dtype:
            return call
        eps = float(a.epsilon)
        return self.rowwise("layer_norm", x, [w, b], (eps,), call,
                            lambda m, n: layernorm_kernel(m, n, eps=eps, dtype=x.ty.dtype))

    def softmax(self, x, call):
        xd = _shape(x.ty)
        if xd is None or int(call.attrs.axis) not in (-1, len(xd) - 1):
            return call
        return self.rowwise("softmax", x, [], (), call, lambda m, n: softmax_kernel(m, n, dtype=x.ty.dtype))

    def attention(self, q, k, v, call):
        qd, kd, vd = _shape(q.ty), _shape(k.ty), _shape(v.ty)
        a = call.attrs
        if None in (qd, kd, vd) or len(qd) != 4 or q.ty.dtype not in _FLOAT:
            return call
        if k.ty.dtype != q.ty.dtype or v.ty.dtype != q.ty.dtype or _dims_key(kd) != _dims_key(vd):
            return call
        if getattr(a, "window_size", None) is not None or a.causal_mask not in (None, "TopLeft"):
            return call
        sizes = [_static(d) for d in qd + kd]
        if None in sizes:
            return call
        b, s, h, d, bk, sk, hk, dk = sizes
        if bk != b or dk != d or h % hk:
            return call
        causal = a.causal_mask == "TopLeft"
        scale = float(a.scale.value) if a.scale is not None else None
        key = ("attention", b, s, h, sk, hk, d, causal, scale, q.ty.dtype)
        try:
            kern = self.kernel(key, lambda: mha_forward(b, h, s, d, causal, seq_kv=sk, heads_kv=hk, layout="bshd",
                                                        sm_scale=scale, dtype=q.ty.dtype), "attention",
                               out_idx=[3, 4])
        except ValueError:  # a shape the program does not take (head dim, causal with seq_q > seq_kv, ...)
            return call
        return relax.TupleGetItem(call_kernel(kern, [q, k, v], [q.ty, k.ty, v.ty]), 0)

    # -- the rewrite
    def _fused(self, func):
        """The epilogue patterns (before the plain matmul one takes their GEMMs)."""
        def mm():
            x, w = wildcard(), wildcard()
            t = is_op("relax.permute_dims")(w)
            return (x, w, t), is_op("relax.matmul")(x, t) | is_op("relax.matmul")(x, w)

        def operands(m, ops):
            x, w, t = ops
            transposed = t in m and m[t] is not None and _is_transpose(m[t])
            return m[x], m[w], transposed

        g_ops, g_pat = mm()
        u_ops, u_pat = mm()
        swiglu = is_op("relax.multiply")(is_op("relax.nn.silu")(g_pat), u_pat)

        def on_swiglu(call, m):
            return self.swiglu(*operands(m, g_ops), m[g_pat], *operands(m, u_ops), m[u_pat], call)

        func = rewrite_call(swiglu, on_swiglu, func)
        for left in (True, False):
            r_ops, r_pat = mm()
            res = wildcard()
            pat = is_op("relax.add")(res, r_pat) if left else is_op("relax.add")(r_pat, res)

            def on_add(call, m, r_ops=r_ops, r_pat=r_pat, res=res):
                return self.gemm_epilogue("add", *operands(m, r_ops), m[res], m[r_pat], call)

            func = rewrite_call(pat, on_add, func)
        return func

    def rewrite_function(self, func):
        if "matmul" in self.ops and "gemm_epilogue" in self.ops:
            func = self._fused(func)
        if "matmul" in self.ops:
            x, w = wildcard(), wildcard()
            t = is_op("relax.permute_dims")(w)
            pt = is_op("relax.matmul")(x, t)
            func = rewrite_call(pt, lambda call, mm: self.gemm(mm[x], mm[w], True, call)
                                if _is_transpose(mm[t]) else call, func)
            x2, w2 = wildcard(), wildcard()
            func = rewrite_call(is_op("relax.matmul")(x2, w2),
                                lambda call, mm: self.gemm(mm[x2], mm[w2], False, call), func)
        if "rms_norm" in self.ops:
            x, w = wildcard(), wildcard()
            func = rewrite_call(is_op("relax.nn.rms_norm")(x, w),
                                lambda call, mm: self.rms_norm(mm[x], mm[w], call), func)
        if "layer_norm" in self.ops:
            x, w, b = wildcard(), wildcard(), wildcard()
            func = rewrite_call(is_op("relax.nn.layer_norm")(x, w, b),
                                lambda call, mm: self.layer_norm(mm[x], mm[w], mm[b], call), func)
        if "softmax" in self.ops:
            x = wildcard()
            func = rewrite_call(is_op("relax.nn.softmax")(x), lambda call, mm: self.softmax(mm[x], call), func)
        if "attention" in self.ops:
            q, k, v = wildcard(), wildcard(), wildcard()
            func = rewrite_call(is_op("relax.nn.attention")(q, k, v),
                                lambda call, mm: self.attention(mm[q], mm[k], mm[v], call), func)
        return func


def _dims_key(dims):
    """Dimensions comparable across int / IntImm / symbolic spellings."""
    out = []
    for d in dims:
        v = d if isinstance(d, int) else _static(d)
        out.append(v if v is not None else str(d))
    return out


def _is_transpose(call):
    axes = call.attrs.axes
    return axes is None or [int(a) for a in axes] == [1, 0]


def offload(mod, target=None, ops=OPS):
    """`mod` with the operators of `ops` that tilex has a kernel for replaced by tilex kernels compiled for
    `target` (default: the current target, else the current GPU, else sm_90a)."""
    unknown = set(ops) - set(OPS)
    if unknown:
        raise ValueError(f"tilex.relax.offload: unknown operators {sorted(unknown)}; choose from {list(OPS)}")
    if target is None:
        target = tvm.target.Target.current(allow_none=True) or "auto"
    off = _Offloader(env.resolve_target(target), ops)
    out = {}
    for gv, func in mod.functions.items():
        out[gv] = off.rewrite_function(func) if isinstance(func, relax.Function) else func
    new = tvm.IRModule(out, attrs=mod.attrs)
    return attach_kernels(new, list(off.kernels.values())) if off.kernels else new


@tvm.transform.module_pass(opt_level=0, name="tilex.OffloadToTilex")
class OffloadToTilex:
    """The module pass form of :func:`offload`."""

    def __init__(self, target=None, ops=OPS):
        self.target = target
        self.ops = ops

    def transform_module(self, mod, ctx):
        return offload(mod, self.target, self.ops)
