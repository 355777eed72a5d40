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
* ``act(add(matmul(...), bias))``, ``act(matmul(...))`` and ``add(matmul(...), bias)`` (a linear layer's bias
  vector and activation: relu, gelu, gelu_tanh, silu) at more than ``SWAP_AB_ROWS`` rows: one GEMM with that
  epilogue;
* ``add(r, matmul(...))`` (a residual connection) and ``multiply(nn.silu(matmul(x, wg)), matmul(x, wu))`` (a
  SwiGLU MLP) with the matmuls as above, at more than ``SWAP_AB_ROWS`` rows: one GEMM whose epilogue adds the residual
  / multiplies by silu of the gate GEMM's output (a matmul result with another use is computed again there; the
  patterns are meant for results used once, as in a transformer block);
* ``nn.attention(q, k, v)`` (BSNH, no bias or window, no mask or the top-left causal one; k and v may have fewer
  heads), static sizes: the FlashAttention forward program;
* rotary embedding in the rotate-half form, ``u * cos + concat([-u2, u1]) * sin`` with ``u1, u2 = split(u, 2)``
  over the last axis of a (..., heads, dim) tensor, cos / sin one (seq, 1, dim)-style table: one kernel, which
  reads u in place when u is a part of a split (the q / k of a fused QKV projection's output);
* each part of a ``split`` (possibly reshaped) as a copy of its column range (the v of a fused QKV projection; TVM
  schedules a split as one slow kernel per part), and ``concat((a, b), axis)`` as one copy kernel (a KV-cache
  append).

One query row per sequence (decode) takes the split-KV decoding programs instead of the FlashAttention one.
A linear layer whose weight is dequantized in the graph (int8 / uint8 codes times per-channel or per-group scales)
becomes the A16W8 program of kernels/quant_matmul.py on the codes (tilex/relax/dequant.py).
"""
from __future__ import annotations

import tvm
from tvm import relax
from tvm.relax.dpl import is_op, is_tuple, is_tuple_get_item, rewrite_call, wildcard

from tilex import env
from tilex.kernels.attention.decode import choose_num_splits, decode_combine, decode_split
from tilex.kernels.attention.forward import mha_forward
from tilex.kernels.gemm import matmul, matmul_bias_act, matmul_epilogue, matmul_swap_ab
from tilex.kernels.norms import layernorm_kernel, rmsnorm_kernel
from tilex.kernels.copies import column_slice_kernel, concat_kernel
from tilex.kernels.rope import rope_kernel
from tilex.kernels.softmax import softmax_kernel
from tilex.relax import dequant
from tilex.relax.shapes import dims_key as _dims_key, flat as _flat, is_transpose as _is_transpose, prod as _prod, \
    rows as _rows, rows_arg as _rows_arg, shape as _shape, static as _static, unflat as _unflat
from tilex.relax.extern import attach_kernels, call_kernel, compile_extern

__all__ = ["offload", "OffloadToTilex", "OPS"]

#: Relax activation operators a GEMM epilogue applies (kernels/gemm.py: matmul_bias_act)
ACTIVATIONS = {"relax.nn.relu": "relu", "relax.nn.gelu": "gelu", "relax.nn.gelu_tanh": "gelu_tanh",
               "relax.nn.silu": "silu"}
OPS = ("matmul", "gemm_epilogue", "rms_norm", "layer_norm", "softmax", "attention", "rope", "split", "concat",
       "dequant_matmul")
_FLOAT = ("float16", "bfloat16")
_COPYABLE = _FLOAT + ("float32",)
SWAP_AB_ROWS = 64  # static row counts up to this take the swap-AB program
PANEL = 16  # the tile program's rasterization panel (T.use_swizzle)


def _value(e, var2val):
    """The expression a variable is bound to (through chains of variables and items of tuple literals), else
    `e`."""
    while True:
        if isinstance(e, relax.Var) and e in var2val:
            e = var2val[e]
        elif isinstance(e, relax.TupleGetItem) and isinstance(tup := _value(e.tuple_value, var2val), relax.Tuple):
            e = tup.fields[e.index]
        else:
            return e


def _is(e, op):
    return isinstance(e, relax.Call) and isinstance(e.op, tvm.ir.Op) and e.op.name == op


class _Part:
    """Part `index` of ``split(src, ..., axis)``: the columns [col0, col0 + cols) of `src` seen as a (rows,
    src_cols) matrix (rows: the axes before the split axis, src_cols: the rest)."""

    def __init__(self, src, rows, src_cols, col0, cols):
        self.src, self.rows, self.src_cols, self.col0, self.cols = src, rows, src_cols, col0, cols

    @staticmethod
    def of(e, var2val):
        """The part `e` is (a split's tuple item, maybe reshaped or squeezed), else None."""
        e = _value(e, var2val)
        if _is(e, "relax.reshape") or _is(e, "relax.squeeze") or _is(e, "relax.expand_dims"):
            e = _value(e.args[0], var2val)
        if not isinstance(e, relax.TupleGetItem):
            return None
        sp = _value(e.tuple_value, var2val)
        sd = _shape(sp.args[0].ty) if _is(sp, "relax.split") else None
        if sd is None or not isinstance(sp.ty, relax.TupleType):
            return None
        ax = int(sp.attrs.axis) % len(sd)
        trailing = [_static(d) for d in sd[ax:]]
        sizes = [_static(f.shape.values[ax]) if _shape(f) is not None else None for f in sp.ty.fields]
        if None in trailing or None in sizes:
            return None
        inner = _prod(trailing[1:])
        return _Part(sp.args[0], _prod(sd[:ax]), _prod(trailing), sum(sizes[:e.index]) * inner,
                     sizes[e.index] * inner)


def _same(a, b):
    """Whether two sizes (int or PrimExpr) are provably equal."""
    if isinstance(a, int) and isinstance(b, int):
        return a == b
    return tvm.sym.Analyzer().can_prove_equal(tvm.tirx.const(a, "int64") if isinstance(a, int) else a,
                                                tvm.tirx.const(b, "int64") if isinstance(b, int) else b)


def _tile(n):
    """(bn, stages, threads, c_block) of the warp-specialized GEMM tile (128 rows, bk 64) for N = `n`. Its blocks are
    rasterized in panels of PANEL tile rows (L2 reuse of the weight: 0.79 -> 0.94 of cuBLAS at 2048 x 12288 x 4096);
    C leaves through a 128-column shared tile, which leaves room for a fourth stage (the Llama-7B prefill GEMMs,
    cuBLAS / tilex: 0.958 -> 1.034 at N = K = 4096, 0.903 -> 0.958 with the residual add; benchmarks/README.md)."""
    return (256, 4, 256, 128) if n % 256 == 0 else (128, 4, 128, 0)


class _Offloader:
    def __init__(self, target, ops):
        self.target = target
        self.ops = set(ops)
        self.kernels = {}  # (op, sizes) -> JITKernel
        self.var2val = {}  # the function being rewritten: variable -> bound expression

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
            bn, st, th, cb = _tile(n)
            key = ("gemm", static_m, n, k, dtype, transposed)
            kern = self.kernel(key, lambda: matmul(_rows_arg(m), n, k, 128, bn, 64, st, th, dtype=dtype,
                                                   trans_b=transposed, stage_c=True, c_block=cb, swizzle=PANEL),
                               "gemm")
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
        bn, st, th, cb = _tile(n)
        key = ("gemm_" + epilogue, m if isinstance(m, int) else None, n, k, dtype, transposed)
        kern = self.kernel(key, lambda: matmul_epilogue(_rows_arg(m), n, k, epilogue, 128, bn, 64, st, th, dtype=dtype,
                                                        trans_b=transposed, swizzle=PANEL, c_block=cb),
                           "gemm_" + epilogue)
        out = call_kernel(kern, [_flat(x, xd, m, k), w, _flat(e, xd, m, n)],
                          [relax.TensorType([m, k], dtype), w.ty, relax.TensorType([m, n], dtype)])
        return _unflat(out, xd, n)

    def gemm_bias_act(self, x, w, transposed, bias, act, mm_call, call):
        """act(x @ w (w^T) + bias) (`bias` None: act(x @ w)) as one GEMM with that epilogue, replacing `call`;
        the bias must be a vector over the output's last axis ((n,), or (1, ..., 1, n))."""
        sizes = self.gemm_sizes(x, w, transposed, mm_call)
        if sizes is None:
            return call
        xd, m, n, k, dtype = sizes
        if isinstance(m, int) and m <= SWAP_AB_ROWS:  # decode rows: the swap-AB program has no epilogue yet
            return call
        if bias is not None:
            bd = _shape(bias.ty)
            if bd is None or bias.ty.dtype != dtype or _static(bd[-1]) != n or \
                    any(_static(d) != 1 for d in bd[:-1]):
                return call
        bn, st, th, cb = _tile(n)
        key = ("gemm_bias_act", m if isinstance(m, int) else None, n, k, dtype, transposed, bias is not None, act)
        kern = self.kernel(key, lambda: matmul_bias_act(_rows_arg(m), n, k, bias is not None, act, 128, bn, 64, st,
                                                        th, dtype=dtype, trans_b=transposed, swizzle=PANEL,
                                                        c_block=cb), "gemm_" + (act or "bias"))
        args, types = [_flat(x, xd, m, k), w], [relax.TensorType([m, k], dtype), w.ty]
        if bias is not None:
            args.append(relax.op.reshape(bias, relax.ShapeExpr([n])))
            types.append(relax.TensorType([n], dtype))
        return _unflat(call_kernel(kern, args, types), xd, n)

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
        if s == 1 and not causal and h // hk <= 64:
            return self.attention_decode(q, k, v, b, h, hk, sk, d, scale)
        key = ("attention", b, s, h, sk, hk, d, causal, scale, q.ty.dtype)
        try:
            kern = self.kernel(key, lambda: mha_forward(b, h, s, d, causal, seq_kv=sk, heads_kv=hk, layout="bshd",
                                                        sm_scale=scale, dtype=q.ty.dtype), "attention",
                               out_idx=[3, 4])
        except ValueError:  # a shape the program does not take (head dim, causal with seq_q > seq_kv, ...)
            return call
        return relax.TupleGetItem(call_kernel(kern, [q, k, v], [q.ty, k.ty, v.ty]), 0)

    def attention_decode(self, q, k, v, b, h, hk, sk, d, scale):
        """One query per sequence: the split-KV decoding programs (flash-decoding), the cache cut into chunks
        that fill the multiprocessors, then their combination."""
        dtype = q.ty.dtype
        ns = choose_num_splits(b, hk, sk)
        split = self.kernel(("decode_split", b, h, hk, sk, d, ns, scale, dtype),
                            lambda: decode_split(b, h, hk, sk, d, ns, scale, dtype), "decode_split", out_idx=[3, 4])
        combine = self.kernel(("decode_combine", b, h, d, ns, dtype), lambda: decode_combine(b, h, d, ns, dtype),
                              "decode_combine", out_idx=[2])
        q3 = relax.TensorType([b, h, d], dtype)
        parts = call_kernel(split, [relax.op.reshape(q, relax.ShapeExpr([b, h, d])), k, v], [q3, k.ty, v.ty])
        types = [relax.TensorType([b, h, ns, d], "float32"), relax.TensorType([b, h, ns], "float32")]
        out = call_kernel(combine, [relax.TupleGetItem(parts, 0), relax.TupleGetItem(parts, 1)], types)
        return relax.op.reshape(out, relax.ShapeExpr([b, 1, h, d]))

    # -- rotary embedding, split parts, concatenation
    @staticmethod
    def _rope_table(ud, cos, sin, d):
        """How a (..., heads, d) tensor's rows index the cos / sin tables: (table rows, or None when there is one
        table row per row), else False when the tables do not broadcast that way ((seq, 1, d)-style)."""
        cd, sd = _shape(cos.ty), _shape(sin.ty)
        if cd is None or sd is None or _dims_key(cd) != _dims_key(sd) or _static(cd[-1]) != d:
            return False
        if len(cd) >= 2 and _static(cd[-2]) != 1:
            return False
        lead = list(cd[:-2])
        while lead and _static(lead[0]) == 1:
            lead.pop(0)
        rows = list(ud[:-2])
        if len(lead) > len(rows) or _dims_key(lead) != _dims_key(rows[len(rows) - len(lead):]):
            return False
        if all(_static(r) == 1 for r in rows[:len(rows) - len(lead)]):
            return None
        n = _prod(lead)
        return n if isinstance(n, int) else False

    def rope(self, u, cos, sin, halves, cat, call):
        """``u * cos + concat([-u2, u1]) * sin`` (``u1, u2 = halves``) as one tilex kernel; u is read in place when
        it is a part of a split."""
        ud = _shape(u.ty)
        dtype = u.ty.dtype
        if ud is None or len(ud) < 3 or dtype not in _FLOAT or call.ty.dtype != dtype:
            return call
        if cos.ty.dtype != dtype or sin.ty.dtype != dtype:
            return call
        h, d = _static(ud[-2]), _static(ud[-1])
        last = len(ud) - 1
        if h is None or d is None or d % 2:
            return call
        if int(halves.attrs.axis) % len(ud) != last or int(cat.attrs.axis) % len(ud) != last:
            return call
        if [_static(f.shape.values[-1]) for f in halves.ty.fields] != [d // 2, d // 2]:
            return call
        table = self._rope_table(ud, cos, sin, d)
        if table is False:
            return call
        m = _prod(ud[:-2])
        part = _Part.of(u, self.var2val)
        if part is not None and part.cols == h * d and _same(part.rows, m):
            x, src_cols, col0 = relax.op.reshape(part.src, relax.ShapeExpr([m, part.src_cols])), part.src_cols, \
                part.col0
        else:
            x, src_cols, col0 = relax.op.reshape(u, relax.ShapeExpr([m, h * d])), h * d, 0
        t_rows = m if table is None else table
        key = ("rope", m if isinstance(m, int) else None, h, d, src_cols, col0, table, dtype)
        kern = self.kernel(key, lambda: rope_kernel(_rows_arg(m), h, d, src_cols, col0, table, dtype=dtype), "rope")
        mat = relax.TensorType([m, src_cols], dtype)
        tab = relax.TensorType([t_rows, d], dtype)
        out = call_kernel(kern, [x, relax.op.reshape(cos, relax.ShapeExpr([t_rows, d])),
                                 relax.op.reshape(sin, relax.ShapeExpr([t_rows, d]))], [mat, tab, tab])
        return relax.op.reshape(out, relax.ShapeExpr(ud))

    def split_part(self, item):
        """A split's tuple item as a copy of its column range (one kernel per part, reading only that part)."""
        part = _Part.of(item, self.var2val)
        dtype = getattr(item.ty, "dtype", None)
        if part is None or dtype not in _COPYABLE or _shape(item.ty) is None:
            return item
        m = part.rows
        key = ("split", m if isinstance(m, int) else None, part.cols, part.src_cols, part.col0, dtype)
        kern = self.kernel(key, lambda: column_slice_kernel(_rows_arg(m), part.cols, part.src_cols, part.col0,
                                                            dtype=dtype), "split")
        x = relax.op.reshape(part.src, relax.ShapeExpr([m, part.src_cols]))
        out = call_kernel(kern, [x], [relax.TensorType([m, part.src_cols], dtype)])
        return relax.op.reshape(out, relax.ShapeExpr(_shape(item.ty)))

    def concat(self, a, b, call):
        """``concat((a, b), axis)`` as one copy kernel over the (rows, columns) views: rows are the axes before
        `axis`, columns the rest (a KV cache and its new tokens along the sequence axis)."""
        ad, bd, od = _shape(a.ty), _shape(b.ty), _shape(call.ty)
        dtype = getattr(call.ty, "dtype", None)
        if None in (ad, bd, od) or dtype not in _COPYABLE or a.ty.dtype != dtype or b.ty.dtype != dtype:
            return call
        ax = int(call.attrs.axis) % len(od)
        ca, cb = (_prod([_static(x) for x in dims[ax:]]) if None not in [_static(x) for x in dims[ax:]] else None
                  for dims in (ad, bd))
        if ca is None or cb is None or not ca or not cb:
            return call
        m = _prod(od[:ax])
        key = ("concat", m if isinstance(m, int) else None, ca, cb, dtype)
        kern = self.kernel(key, lambda: concat_kernel(_rows_arg(m), ca, cb, dtype=dtype), "concat")
        out = call_kernel(kern, [relax.op.reshape(a, relax.ShapeExpr([m, ca])),
                                 relax.op.reshape(b, relax.ShapeExpr([m, cb]))],
                          [relax.TensorType([m, ca], dtype), relax.TensorType([m, cb], dtype)])
        return relax.op.reshape(out, relax.ShapeExpr(od))

    def _rope_and_splits(self, func):
        if "rope" in self.ops:
            u, cos, sin = wildcard(), wildcard(), wildcard()
            halves = is_op("relax.split")(u)
            cat = is_op("relax.concat")(is_tuple([is_op("relax.negative")(is_tuple_get_item(halves, 1)),
                                                  is_tuple_get_item(halves, 0)]))
            ucos = is_op("relax.multiply")(u, cos) | is_op("relax.multiply")(cos, u)
            rsin = is_op("relax.multiply")(cat, sin) | is_op("relax.multiply")(sin, cat)
            pat = is_op("relax.add")(ucos, rsin) | is_op("relax.add")(rsin, ucos)
            self.var2val = relax.analysis.get_var2val(func)
            func = rewrite_call(pat, lambda call, m: self.rope(m[u], m[cos], m[sin], m[halves], m[cat], call), func)
            func = relax.analysis.remove_all_unused(func)
        if "concat" in self.ops:
            a, b = wildcard(), wildcard()
            func = rewrite_call(is_op("relax.concat")(is_tuple([a, b])),
                                lambda call, m: self.concat(m[a], m[b], call), func)
        if "split" in self.ops:
            self.var2val = relax.analysis.get_var2val(func)
            func = rewrite_call(is_tuple_get_item(is_op("relax.split")(wildcard())),
                                lambda item, m: self.split_part(item), func)
            func = relax.analysis.remove_all_unused(func)
        return func

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
        for op, act in ACTIVATIONS.items():  # act(x @ w + bias), then act(x @ w)
            b_ops, b_pat = mm()
            bias = wildcard()
            pat = is_op(op)(is_op("relax.add")(b_pat, bias) | is_op("relax.add")(bias, b_pat))
            func = rewrite_call(pat, lambda call, m, b_ops=b_ops, b_pat=b_pat, bias=bias, act=act: self.gemm_bias_act(
                *operands(m, b_ops), m[bias], act, m[b_pat], call), func)
            a_ops, a_pat = mm()
            func = rewrite_call(is_op(op)(a_pat), lambda call, m, a_ops=a_ops, a_pat=a_pat, act=act:
                                self.gemm_bias_act(*operands(m, a_ops), None, act, m[a_pat], call), func)
        for left in (True, False):  # a residual (M, N) or a bias (N,) added
            r_ops, r_pat = mm()
            res = wildcard()
            pat = is_op("relax.add")(res, r_pat) if left else is_op("relax.add")(r_pat, res)

            def on_add(call, m, r_ops=r_ops, r_pat=r_pat, res=res):
                if _is_bias(_shape(m[res].ty), _shape(m[r_pat].ty)):
                    return self.gemm_bias_act(*operands(m, r_ops), m[res], None, m[r_pat], call)
                return self.gemm_epilogue("add", *operands(m, r_ops), m[res], m[r_pat], call)

            func = rewrite_call(pat, on_add, func)
        return func

    @staticmethod
    def _cancel_transposes(func):
        """``permute_dims(permute_dims(x, p), q)`` where q undoes p is x (PyTorch's importer writes such pairs around
        attention: BSHD -> BHSD for SDPA, back to BSHD for relax.nn.attention)."""
        x = wildcard()
        inner = is_op("relax.permute_dims")(x)
        pat = is_op("relax.permute_dims")(inner)

        def undo(call, m):
            xd = _shape(m[x].ty)
            p, q = m[inner].attrs.axes, call.attrs.axes
            if xd is None or p is None or q is None:
                return call
            p, q = [int(a) % len(xd) for a in p], [int(a) % len(xd) for a in q]
            return m[x] if [p[i] for i in q] == list(range(len(xd))) else call

        return rewrite_call(pat, undo, func)

    def rewrite_function(self, func):
        func = self._cancel_transposes(func)
        if "dequant_matmul" in self.ops:
            func = dequant.rewrite(self, func)
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
        func = self._rope_and_splits(func)
        if "attention" in self.ops:
            q, k, v = wildcard(), wildcard(), wildcard()
            func = rewrite_call(is_op("relax.nn.attention")(q, k, v),
                                lambda call, mm: self.attention(mm[q], mm[k], mm[v], call), func)
        return _output_reshapes_as_views(func)


def _is_bias(ed, od):
    """Whether an operand of dimensions `ed` added to a result of dimensions `od` is a vector over its last axis
    ((n,) or (1, ..., 1, n)) rather than a whole operand of the result's shape."""
    if ed is None or od is None or not ed:
        return False
    return all(_static(d) == 1 for d in ed[:-1]) and _dims_key(ed) != _dims_key(od)


def _output_reshapes_as_views(func):
    """`func` with each dataflow output that reshapes a tilex kernel's result bound as a view of it: TVM turns a
    reshape into a view only inside a dataflow block and copies one that leaves it (a 25 us kernel for the
    Llama-7B block's 2048 x 4096 output), while a kernel's output is a fresh tensor nothing else holds."""
    var2val = relax.analysis.get_var2val(func)

    def fresh(e):
        return _is(_value(e, var2val), "relax.call_dps_packed")

    if not isinstance(func.body, relax.SeqExpr):
        return func
    blocks, changed = [], False
    for block in func.body.blocks:
        bindings = list(block.bindings)
        if isinstance(block, relax.DataflowBlock):
            for i, b in enumerate(bindings):
                if isinstance(b, relax.VarBinding) and not isinstance(b.var, relax.DataflowVar) and \
                        _is(b.value, "relax.reshape") and fresh(b.value.args[0]):
                    bindings[i] = relax.VarBinding(b.var, relax.op.memory.view(b.value.args[0], b.value.args[1]))
                    changed = True
            block = relax.DataflowBlock(bindings)
        blocks.append(block)
    if not changed:
        return func
    return relax.Function(func.params, relax.SeqExpr(blocks, func.body.body), func.ret_ty, func.is_pure,
                          func.attrs)


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
