"""The dequantizing-matmul pattern of :mod:`tilex.relax.offload`: a linear layer whose weight is dequantized in the
graph, ``matmul(x, permute_dims(W))`` with

* ``W = astype(Q, act) * S`` (per channel: Q (N, K) int8 / uint8 codes, S (N, 1)), or
* ``W = reshape(astype(reshape(Q, (N, K // g, g)), act) * S, (N, K))`` (groups of g along K: S (N, K // g, 1)),

becomes the A16Wx program of :mod:`tilex.kernels.quant_matmul` on the codes themselves: one kernel pre-packs Q
into the tile order the program decodes (its prepack tile program) and the scales are transposed to (K // g, N).
Both depend on parameters only, so ``relax.transform.LiftTransformParams`` moves them out of the per-call
function; without it they run on every call.
"""
from __future__ import annotations

import numpy as np
from tvm import relax
from tvm.relax.dpl import is_op, rewrite_call, wildcard

from tilex import dtypes, env
from tilex.kernels.quant_matmul import (check_group, chunk_bit_table, default_tiles, prepack_program, quant_matmul,
                                        weight_fragment)
from tilex.op.dequantize import packed_order
from tilex.ops.quant import PackedWeight, block_tiles
from tilex.relax.extern import call_kernel
from tilex.relax.shapes import flat as _flat, is_transpose as _is_transpose, rows as _rows, rows_arg as _rows_arg, \
    shape as _shape, static_shape, unflat as _unflat

__all__ = ["rewrite"]

_CODES = {"int8": dtypes.int_type(8, signed=True), "uint8": dtypes.int_type(8, signed=False)}


def rewrite(off, func):
    """`func` with each dequantizing linear layer offloaded (`off`: the offloader, its kernels and helpers)."""
    x, q, s = wildcard(), wildcard(), wildcard()
    per_channel = is_op("relax.multiply")(is_op("relax.astype")(q), s)
    qg = is_op("relax.reshape")(q, wildcard())
    grouped = is_op("relax.reshape")(is_op("relax.multiply")(is_op("relax.astype")(qg), s), wildcard())
    w = per_channel | grouped
    t = is_op("relax.permute_dims")(w)
    pat = is_op("relax.matmul")(x, t)

    def on_match(call, m):
        return _offload(off, m[x], m[q], m.get(qg), m[s], m[w], m[t], call)

    return rewrite_call(pat, on_match, func)


def _offload(off, x, q, qg, s, w, t, call):
    """`call` offloaded (`qg`: the codes reshaped into groups, None per channel), or `call` itself."""
    act = str(x.ty.dtype)
    xd, sd, wd = _shape(x.ty), static_shape(s.ty), static_shape(w.ty)
    qd = static_shape((q if qg is None else qg).ty)
    if xd is None or qd is None or sd is None or wd is None or len(wd) != 2 or act not in ("float16", "bfloat16"):
        return call
    if str(q.ty.dtype) not in _CODES or str(s.ty.dtype) != act or str(w.ty.dtype) != act or \
            str(call.ty.dtype) != act or not _is_transpose(t):
        return call
    n, k = wd
    if static_shape(q.ty) != [n, k]:
        return call
    if len(qd) == 2 and sd == [n, 1]:
        g = k
    elif len(qd) == 3 and qd[0] == n and qd[1] * qd[2] == k and sd == [n, qd[1], 1]:
        g = qd[2]
    else:
        return call
    target = env.target_arch(off.target)
    wt = _CODES[str(q.ty.dtype)]
    tiles = default_tiles(n, k, g, target)
    try:
        check_group(g, k, tiles.bk)
    except ValueError:
        return call
    mrows = _rows(xd)
    pw = PackedWeight(None, None, None, wt, g, (n, k), tiles, act, target)
    bm_rows = mrows if isinstance(mrows, int) else 128  # symbolic rows: blocks of at most 128
    try:
        block = block_tiles(bm_rows, pw, 1)
    except ValueError:
        return call
    prep = off.kernel(("dequant_prepack", n, k, str(wt), tiles, act),
                      lambda: prepack_program(n, k, wt, tiles, target, act), "dequant_prepack")
    kern = off.kernel(("dequant_matmul", mrows if isinstance(mrows, int) else None, n, k, str(wt), g, block, act),
                      lambda: quant_matmul(_rows_arg(mrows), n, k, wt, g, block, act), "dequant_matmul")
    order = np.ascontiguousarray(packed_order(weight_fragment(tiles, target, act)), dtype="int32")
    bits = chunk_bit_table(wt.bits).numpy().astype("int32")
    codes = q
    if str(q.ty.dtype) == "int8":
        codes = relax.op.astype(codes, "uint8")  # two's complement bits: the code the int8 type decodes
    u8 = relax.TensorType([n, k], "uint8")
    words = call_kernel(prep, [codes, relax.const(order), relax.const(bits)],
                        [u8, relax.TensorType(list(order.shape), "int32"), relax.TensorType(list(bits.shape),
                                                                                             "int32")])
    groups = k // g
    scales = relax.op.permute_dims(relax.op.reshape(s, relax.ShapeExpr([n, groups])))
    zeros = relax.const(np.zeros((1, n), dtype=act))
    w_ty = _words_type(prep)
    out = call_kernel(kern, [_flat(x, xd, mrows, k), words, scales, zeros],
                      [relax.TensorType([mrows, k], act), w_ty, relax.TensorType([groups, n], act),
                       relax.TensorType([1, n], act)])
    return _unflat(out, xd, n)


def _words_type(prep):
    """The Relax type of the prepack kernel's output (the packed words, static)."""
    p = prep.params[prep.out_idx[0]]
    return relax.TensorType([int(d) for d in p.shape], p.dtype)
