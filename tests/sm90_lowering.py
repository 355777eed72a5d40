"""The sm_90a lowering several transform tests share (tests/ is on sys.path through its conftest.py)."""
import tvm

from tilex.engine import lower_to_tir

SM90 = tvm.target.Target({"kind": "cuda", "arch": "sm_90a"})
#: the multiprocessor count the compiler's rules see, an H100's whatever machine runs the tests
PIN = {"tilex.num_sms": 132}


def lowered(func, **cfg):
    """`func` lowered to per-thread TIR for sm_90a, with PIN and the pass configs `cfg`."""
    return lower_to_tir(func, SM90, {**PIN, **cfg})["main"]


def note(f, attr):
    """Function attribute `attr` of `f` as a str; None when it is not set."""
    value = f.attrs.get(attr)
    return None if value is None else str(value)
