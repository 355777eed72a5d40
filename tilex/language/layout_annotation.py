"""`T.annotate_layout({buffer: Layout | Fragment})`: pin buffer layouts before layout inference."""
from __future__ import annotations

from tvm import tirx
from tvm.tirx.script.builder import ir as _ir

from tilex.ir.names import ANNOTATE_OP
from tilex.layout import Fragment, Layout
from tilex.layout.codec import encode_call


def annotate_layout(layout_map):
    """Pin layouts: each entry takes part in inference at the strictest level (before gemm's own choices)."""
    for buf, lay in dict(layout_map).items():
        if not tirx.is_buffer_var(buf):
            raise TypeError(f"T.annotate_layout: keys must be buffers, got {buf!r}")
        if not isinstance(lay, (Layout, Fragment)):
            raise TypeError(f"T.annotate_layout: the layout of '{buf.name}' must be a T.Layout or T.Fragment, "
                            f"got {type(lay).__name__}")
        shape = [int(s) for s in buf.shape]
        if len(lay.input_shape) != len(shape) or any(a < b for a, b in zip(lay.input_shape, shape)):
            raise ValueError(f"T.annotate_layout: layout over {list(lay.input_shape)} does not cover buffer "
                             f"'{buf.name}' of shape {shape}")
        if isinstance(lay, Fragment) != (buf.scope() == "local.fragment"):
            raise ValueError(f"T.annotate_layout: '{buf.name}' in scope {buf.scope()} needs a "
                             f"{'T.Fragment' if buf.scope() == 'local.fragment' else 'T.Layout'}")
        _ir.evaluate(encode_call(buf, lay))


__all__ = ["annotate_layout", "ANNOTATE_OP"]
