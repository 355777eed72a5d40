"""tilex.ir.intrin: builders spell the device functions of src/tilex/*.h, readers find them again."""
import re
import pathlib

import pytest
import tvm
from tvm import tirx

from tilex import env
from tilex.ir import intrin
from tilex.ir.visit import seq


def _name(stmt):
    return intrin.name_of(stmt)


def test_templated_names_and_readers():
    s = intrin.cp_async_wait(2)
    assert _name(s) == "tilex::cp_async_wait<2>"
    assert intrin.is_call(s, intrin.CP_ASYNC_WAIT) and not intrin.is_call(s, intrin.CP_ASYNC)
    assert intrin.template_args(_name(s)) == ["2"]
    w = intrin.wgmma_ss(64, "f16", False, True, 0, 0, 0, 1)
    assert _name(w) == "tilex::wgmma_m64n64k16_f16<0, 1>"
    assert intrin.template_args(_name(w)) == ["0", "1"]
    assert _name(intrin.ldmatrix(2, True, 0, 0)) == "tilex::ldmatrix_x2_trans"
    assert intrin.name_of(intrin.wgmma_desc(0, 16, 1024, 128)) == intrin.WGMMA_DESC
    assert intrin.name_of(tirx.const(1, "int32")) is None


def test_launch_markers_read_back_from_ir_and_text():
    body = seq([intrin.reg_alloc(232), intrin.min_blocks_per_sm(2), intrin.cluster_dims(4)])
    assert intrin.read_launch_marker(body, intrin.MIN_BLOCKS_PER_SM) == 2
    assert intrin.read_launch_marker(body, intrin.CLUSTER_DIMS) == 4
    assert intrin.read_launch_marker(intrin.reg_alloc(232), intrin.CLUSTER_DIMS) is None
    text = "  tilex::min_blocks_per_sm<1>();\n  tilex::cluster_dims<2>();\n"
    assert intrin.read_launch_marker(text, intrin.MIN_BLOCKS_PER_SM) == 1
    assert intrin.read_launch_marker(text, intrin.CLUSTER_DIMS) == 2
    assert intrin.read_launch_marker("int x;", intrin.CLUSTER_DIMS) is None


def test_prefix_groups():
    assert intrin.is_atomic(intrin.atomic(intrin.atomic_name("add"), 0, 1))
    assert intrin.starts_with(intrin.tma_store(0, 0, [0, 0]), intrin.GLOBAL_WRITE_PREFIXES)
    assert _name(intrin.atomic(intrin.atomic_name("add", vector_global=True), 0, 1)) == "tilex::atomic_add_vec<true>"


def _header_functions():
    names = set()
    for h in pathlib.Path(env.include_dir(), "tilex").glob("*.h"):
        names |= set(re.findall(r"\b([a-z][a-z0-9_]*)\s*\(", h.read_text()))
    return names


@pytest.mark.parametrize("const", [c for c in dir(intrin) if c.isupper() and isinstance(getattr(intrin, c), str)
                                   and getattr(intrin, c).startswith("tilex::")])
def test_every_name_is_declared_in_a_header(const):
    """Each constant names a function of src/tilex/*.h (prefix constants: some function starts with it)."""
    base = getattr(intrin, const)[len("tilex::"):]
    funcs = _header_functions()
    assert base in funcs or any(f.startswith(base) for f in funcs), f"{const} = {getattr(intrin, const)}"
