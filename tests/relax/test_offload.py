"""tilex.relax.offload on the CPU: the rewritten IR, the attached kernels, and a build for sm_90a."""
import tvm
import tvm_ffi
from tvm import relax

import tilex
import tilex.relax as tr

import relax_modules


def _calls(func):
    found = []

    def visit(e):
        if isinstance(e, relax.Call):
            found.append(e)

    relax.analysis.post_order_visit(func.body, visit)
    return found


def _op_names(func):
    return [c.op.name for c in _calls(func) if isinstance(c.op, tvm.ir.Op)]


def _packed(func):
    return [str(c.args[0].global_symbol) for c in _calls(func) if getattr(c.op, "name", "") == "relax.call_dps_packed"]


def test_offload_rewrites_norm_linear_softmax():
    mod = tr.offload(relax_modules.norm_linear_softmax_linear(), target="sm_90a")
    names = _op_names(mod["main"])
    assert not {"relax.matmul", "relax.nn.rms_norm", "relax.nn.softmax", "relax.permute_dims"} & set(names)
    assert "relax.nn.relu" in names  # left to TVM
    symbols = _packed(mod["main"])
    assert [s.split("_")[1] for s in symbols] == ["rms", "gemm", "softmax", "gemm"]
    assert len(set(symbols)) == 4
    ext = mod.attrs["external_mods"]
    assert len(ext) == 4 and all(any(m.implements_function(s) for m in ext) for s in symbols)
    ex = tvm.compile(mod, target=tilex.env.resolve_target("sm_90a"))
    assert ex is not None


def test_symbolic_rows_and_output_shapes():
    mod = tr.offload(relax_modules.norm_linear_softmax_linear(), target="sm_90a")
    outs = [c for c in _calls(mod["main"]) if getattr(c.op, "name", "") == "relax.call_dps_packed"]
    shapes = [str(c.ty.shape) for c in outs]
    assert shapes == ["R.shape([b * s, 256])", "R.shape([b * s, 512])", "R.shape([b * s, 512])",
                      "R.shape([b * s, 256])"]
    assert str(mod["main"].ret_ty.shape) == "R.shape([b, s, 256])"


def test_a_decode_row_takes_the_swap_ab_program():
    mod = tr.offload(relax_modules.decode_linear(), target="sm_90a")
    (symbol,) = _packed(mod["main"])
    (m,) = mod.attrs["external_mods"]
    src = m.imports[0].inspect_source() if m.imports else ""
    assert symbol.startswith("tilex_gemm_") and "tma_load" in src
    # the C^T tile of swap-AB: 64 columns of C by 16 rows of A per block
    assert "Ct_l" in src


def test_what_tilex_has_no_kernel_for_is_left_alone():
    mod = relax_modules.left_alone()
    out = tr.offload(mod, target="sm_90a")
    assert tvm_ffi.structural_equal(out["main"], mod["main"])
    assert "external_mods" not in (out.attrs or {})


def test_the_pass_form_and_unknown_operators():
    mod = tvm.transform.Sequential([tr.OffloadToTilex(target="sm_90a", ops=["softmax"])])(
        relax_modules.norm_linear_softmax_linear())
    names = _op_names(mod["main"])
    assert "relax.matmul" in names and "relax.nn.softmax" not in names
    import pytest

    with pytest.raises(ValueError, match="unknown operators"):
        tr.offload(mod, ops=["conv2d"])


def test_layer_norm():
    mod = tr.offload(relax_modules.layer_norm_gelu(), target="sm_90a")
    names = _op_names(mod["main"])
    assert "relax.nn.layer_norm" not in names and "relax.nn.gelu" in names
    (symbol,) = _packed(mod["main"])
    assert symbol.startswith("tilex_layer_norm_")
    tvm.compile(mod, target=tilex.env.resolve_target("sm_90a"))
