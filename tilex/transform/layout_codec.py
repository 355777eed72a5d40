"""Storing Layouts and Fragments in the IR (function attrs, loop annotations) and reading them back."""
from __future__ import annotations

from tilex.layout import Fragment, Layout
from tilex.op.partition import substitute


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
