"""``T.print``: device printf for debugging tile programs.

* a scalar expression: every thread prints its value;
* a shared or global buffer (or a slice of one): thread 0 of every block prints each element;
* a per-thread ``local`` buffer: every thread prints its own copy;
* a register fragment: every thread prints the elements it holds (found through the fragment's layout).

Every line starts with the (optional) message and the hardware block and thread indices, e.g.::

    msg='after load' block=(0, 0, 0) thread=(0, 0, 0) A_s[3, 4]=1.500000 (float16)
    block=(1, 0, 0) thread=(7, 0, 0) value=42 (int32)

A buffer print is the tile operator ``tilex.print`` (`tilex.op.debug_print`), lowered with the layouts, and never
changes the kernel it inspects. CUDA's printf buffer holds 1 MiB by default: print small tiles, or guard the print
(``if bx == 0:``).
"""
from __future__ import annotations

from tilex.language.options import as_int, unsupported
from tilex.op.debug_print import print_call


def print(obj=None, msg: str = "", warp_group_id: int = 0, warp_id: int = 0):  # noqa: A001 - T.print, as in TileLang
    """``T.print(x)`` / ``T.print(A_shared, msg="after copy")``: print a value or a buffer from the device
    (see the module docstring for who prints what). Not implemented (NotImplementedError): a message alone
    (``obj=None``) and choosing the printing warp (``warp_group_id`` / ``warp_id`` other than 0)."""
    for name, value in (("warp_group_id", warp_group_id), ("warp_id", warp_id)):
        if as_int("T.print", name, value, minimum=0) != 0:
            unsupported("T.print", name, value, "tilex chooses who prints (see T.print's documentation)")
    if obj is None:
        unsupported("T.print", "obj", None, "print a value or a buffer")
    return print_call(obj, msg)


__all__ = ["print"]
