"""FastMath: float32 ``exp2`` / ``exp`` / division on the hardware's approximate instructions.

Consumes: per-thread TIR (after LowerTileOps), on a CUDA target.
Produces: every float32 ``tirx.exp2(x)`` as ``tilex::exp2_approx(x)`` and ``tirx.exp(x)`` as ``tilex::exp_approx(x)``
(one ``ex2.approx.ftz`` each; relative error about 2^-22, results below 2^-126 flushed to zero) and float32
``a / b`` as ``tilex::div_approx(a, b)`` (``__fdividef``: 2 ulp while |b| is within [2^-126, 2^126]), unless
``tilex.disable_fast_math``. The precise ``exp2f`` costs a range check and two multiplies around the same
instruction, which an attention softmax pays for every score.
"""
from __future__ import annotations

import tvm
from tvm import tirx

from tilex import config
from tilex.ir import intrin
from tilex.ir.visit import map_nodes

_APPROX = {"tirx.exp2": intrin.exp2_approx, "tirx.exp": intrin.exp_approx}


def fast_math(func):
    if config.get("disable_fast_math", False):
        return func

    def on_call(node):
        op = node.op
        if isinstance(op, tvm.ir.Op) and op.name in _APPROX and str(node.ty) == "float32" and len(node.args) == 1:
            return _APPROX[op.name](node.args[0])
        return node

    def on_div(node):
        if str(node.ty) == "float32":
            return intrin.div_approx(node.a, node.b)
        return node

    body = map_nodes(func.body, [(tvm.ir.Call, on_call), (tirx.Div, on_div)])
    return func.with_body(body) if not body.same_as(func.body) else func
