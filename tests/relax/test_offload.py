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
    assert "relax.nn.relu" not in names  # in the last GEMM's epilogue
    symbols = _packed(mod["main"])
    assert [s.split("_")[1] for s in symbols] == ["rms", "gemm", "softmax", "gemm"]
    assert symbols[-1].startswith("tilex_gemm_relu_")
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


def test_rope_with_a_row_per_table_row_and_symbolic_rows():
    mod = tr.offload(relax_modules.rope_tables(), target="sm_90a")
    main = mod["main"]
    assert not {"relax.split", "relax.concat", "relax.negative", "relax.multiply", "relax.add"} & set(_op_names(main))
    (sym,) = _packed(main)
    assert sym.startswith("tilex_rope_")
    assert str(main.ret_ty.shape) == "R.shape([b, s, 4, 64])"
    # a per-head table is not the (seq, 1, dim) broadcast the kernel reads: RoPE stays with TVM, only its halves and
    # their concatenation become copies
    per_head = mod["per_head"]
    assert {"relax.negative", "relax.multiply", "relax.add"} <= set(_op_names(per_head))
    assert sorted(s.split("_")[1] for s in _packed(per_head)) == ["concat", "split", "split"]
    tvm.compile(mod, target=tilex.env.resolve_target("sm_90a"))


def test_split_parts_become_column_copies():
    mod = tr.offload(relax_modules.split_parts(), target="sm_90a")
    main = mod["main"]
    assert "relax.split" not in _op_names(main)
    assert [s.split("_")[1] for s in _packed(main)] == ["split"] * 3
    assert [str(f.shape) for f in main.ret_ty.fields] == ["R.shape([n, 1, 64])", "R.shape([n, 3, 64])",
                                                            "R.shape([n, 2, 64])"]
    tvm.compile(mod, target=tilex.env.resolve_target("sm_90a"))


def test_concat_of_two_becomes_one_copy_kernel():
    mod = tr.offload(relax_modules.kv_append(), target="sm_90a")
    main = mod["main"]
    assert "relax.concat" not in _op_names(main)
    assert [s.split("_")[1] for s in _packed(main)] == ["concat"]
    assert str(main.ret_ty.shape) == "R.shape([b, 301, 4, 64])"
    tvm.compile(mod, target=tilex.env.resolve_target("sm_90a"))


def test_rope_and_split_can_be_left_out():
    mod = tr.offload(relax_modules.split_parts(), target="sm_90a", ops=[o for o in tr.OPS if o != "split"])
    assert "relax.split" in _op_names(mod["main"])


def test_bias_and_activation_ride_in_the_gemm():
    mod = tr.offload(relax_modules.mlp_bias_act(), target="sm_90a")
    main = mod["main"]
    ops = set(_op_names(main))
    assert not ops & {"relax.matmul", "relax.nn.gelu", "relax.nn.relu", "relax.nn.silu", "relax.permute_dims"}
    assert "relax.add" in ops  # the residual over a biased GEMM stays with TVM
    assert [s.split("_")[2] for s in _packed(main)] == ["gelu", "bias", "relu", "silu"]
    tvm.compile(mod, target=tilex.env.resolve_target("sm_90a"))


def test_dequantizing_linear_layers_take_the_quantized_program():
    mod = relax_modules.dequant_linear()
    mod["main"] = mod["main"].with_attr("num_input", 1)
    out = tr.offload(mod, target="sm_90a")
    main = out["main"]
    assert not {"relax.matmul", "relax.multiply"} & set(_op_names(main))
    assert sorted(s[len("tilex_"):s.rindex("_")] for s in _packed(main)) == ["dequant_matmul"] * 2 + \
        ["dequant_prepack"] * 2
    # the pre-packing and the scales' transposes read parameters only: LiftTransformParams takes them out
    lifted = relax.transform.LiftTransformParams()(out)
    assert sorted(s[len("tilex_"):s.rindex("_")] for s in _packed(lifted["main"])) == ["dequant_matmul"] * 2
    assert len(lifted["main"].params) == 5
    tvm.compile(out, target=tilex.env.resolve_target("sm_90a"))
