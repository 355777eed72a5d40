"""Storing Layouts and Fragments in the IR and reading them back.

Two encodings: a dict of PrimExprs (`encode` / `decode`: what layout inference stores in the ``tilex.layout_map``
function attribute and the ``tilex.loop_layout`` loop annotation) and a ``tilex.annotate_layout`` call carrying the
same expressions as arguments (`encode_call` / `decode_call`: what ``T.annotate_layout`` leaves in the program).
"""
from __future__ import annotations

from tvm import tirx

from tilex.ir.names import ANNOTATE_OP
from tilex.ir.visit import substitute
from tilex.layout.fragment import Fragment
from tilex.layout.layout import Layout


def encode(lay):
    if isinstance(lay, Fragment):
        return {"kind": "fragment", "shape": list(lay.input_shape), "vars": list(lay.vars),
                "rep": lay.rep_var, "thread": lay.forward_thread, "index": list(lay.forward_index),
                "replicate": int(lay.replicate)}
    return {"kind": "layout", "shape": list(lay.input_shape), "vars": list(lay.vars),
            "forward": list(lay.forward_index)}


def decode(obj):
    kind = str(obj["kind"])
    shape = [int(s) for s in obj["shape"]]
    old = list(obj["vars"])
    if kind == "fragment":
        rep = obj["rep"]
        replicate = int(obj["replicate"])

        def thread(*v):
            m = dict(zip(old, v[: len(old)]))
            if replicate > 1:
                m[rep] = v[len(old)]
            return substitute(obj["thread"], m)

        def index(*v):
            return [substitute(e, dict(zip(old, v))) for e in obj["index"]]

        return Fragment(shape, thread, index, replicate=replicate)
    return Layout(shape, lambda *v: [substitute(e, dict(zip(old, v))) for e in obj["forward"]])


def encode_call(buffer, lay):
    """A ``tilex.annotate_layout(buffer, ...)`` call carrying `lay` as plain PrimExpr arguments:
    kind (0 layout, 1 fragment), ndim, shape..., placeholder vars..., nout, forward/index exprs...,
    and for fragments: replicate, rep var, thread expr."""
    is_frag = isinstance(lay, Fragment)
    exprs = list(lay.forward_index)
    args = [buffer, int(is_frag), len(lay.input_shape), *lay.input_shape, *lay.vars, len(exprs), *exprs]
    if is_frag:
        args += [int(lay.replicate), lay.rep_var, lay.forward_thread]
    return tirx.call_intrin("void", ANNOTATE_OP, *args)


def decode_call(call):
    """(buffer, Layout | Fragment) from a ``tilex.annotate_layout`` call."""
    a = list(call.args)
    buf, is_frag, n = a[0], int(a[1].value), int(a[2].value)
    shape = [int(x.value) for x in a[3:3 + n]]
    vars_ = a[3 + n:3 + 2 * n]
    nout = int(a[3 + 2 * n].value)
    exprs = a[4 + 2 * n:4 + 2 * n + nout]
    obj = {"kind": "fragment" if is_frag else "layout", "shape": shape, "vars": vars_}
    if is_frag:
        rest = a[4 + 2 * n + nout:]
        obj.update({"index": exprs, "replicate": int(rest[0].value), "rep": rest[1], "thread": rest[2]})
    else:
        obj["forward"] = exprs
    return buf, decode(obj)
