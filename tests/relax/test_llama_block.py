"""The Llama-style block of examples/llama_block_relax.py offloaded on the CPU: what becomes a tilex kernel, what
stays with TVM, and a build for sm_90a (the GPU run is the example itself and benchmarks/bench_relax.py)."""
import pathlib
import runpy

import pytest
import tvm
from tvm import relax

import tilex
import tilex.relax as tr

EXAMPLE = pathlib.Path(__file__).resolve().parents[2] / "examples" / "llama_block_relax.py"
blk = runpy.run_path(str(EXAMPLE))


def _calls(func):
    found = []
    relax.analysis.post_order_visit(func.body, lambda e: found.append(e) if isinstance(e, relax.Call) else None)
    return found


@pytest.mark.parametrize("mode", ["decode", "prefill"])
def test_block_offload(mode):
    mod, names = blk["export"](blk["SMALL"], mode, 1, 256, 512)
    assert names == ["attn_norm.weight", "mlp_norm.weight", "qkv.weight", "o.weight", "gate.weight", "up.weight",
                     "down.weight"]
    out = tr.offload(mod, target="sm_90a")
    calls = _calls(out[mode])
    ops = {c.op.name for c in calls if isinstance(c.op, tvm.ir.Op)}
    assert not ops & {"relax.matmul", "relax.nn.rms_norm", "relax.nn.attention", "relax.permute_dims"}
    # RoPE reads q and k in place from the QKV projection's output, v is copied out of it: no split is left
    assert not ops & {"relax.split", "relax.negative"}
    symbols = sorted(str(c.args[0].global_symbol) for c in calls
                     if getattr(c.op, "name", "") == "relax.call_dps_packed")
    kinds = sorted(s[len("tilex_"):s.rindex("_")] for s in symbols)
    if mode == "decode":  # one row: swap-AB GEMMs, the MLP's gate product and the residual adds left to TVM
        # the KV-cache appends are copy kernels, attention the split-KV decoding pair
        assert kinds == ["concat"] * 2 + ["decode_combine", "decode_split"] + ["gemm"] * 5 + ["rms_norm"] * 2 + \
            ["rope"] * 2 + ["split"]
        assert "relax.nn.silu" in ops and "relax.add" in ops and "relax.concat" not in ops
    else:  # residual adds and SiLU-mul in the GEMMs' epilogues
        assert kinds == ["attention", "gemm", "gemm", "gemm_add", "gemm_add", "gemm_silu_mul", "rms_norm", "rms_norm",
                         "rope", "rope", "split"]
        assert not ops & {"relax.nn.silu", "relax.add", "relax.multiply", "relax.concat"}
    tvm.compile(out, target=tilex.env.resolve_target("sm_90a"))


def _cpu_weights(cfg, mode, seq, context):
    import torch

    hidden, heads, ffn = cfg["hidden"], cfg["heads"], cfg["ffn"]
    d, s = hidden // heads, 1 if mode == "decode" else seq
    shapes = {"attn_norm.weight": (hidden,), "mlp_norm.weight": (hidden,), "qkv.weight": (3 * hidden, hidden),
              "o.weight": (hidden, hidden), "gate.weight": (ffn, hidden), "up.weight": (ffn, hidden),
              "down.weight": (hidden, ffn)}
    w = {n: torch.randn(shp).half() for n, shp in shapes.items()}
    inputs = {"x": torch.randn(1, s, hidden).half(), "cos": torch.randn(s, 1, d).half(),
              "sin": torch.randn(s, 1, d).half()}
    if mode == "decode":
        inputs["k_cache"] = torch.randn(1, context, heads, d).half()
        inputs["v_cache"] = torch.randn(1, context, heads, d).half()
    return w, inputs


@pytest.mark.parametrize("mode", ["decode", "prefill"])
def test_block_imported_from_pytorch_offloads_like_the_nn_one(mode):
    """The block written in PyTorch, through torch.export and tilex.relax.from_exported_program: fp16 throughout
    and the same tilex kernels as the relax.frontend.nn build."""
    w, inputs = _cpu_weights(blk["SMALL"], mode, 256, 512)
    mod, names = blk["export_torch"](blk["SMALL"], mode, w, inputs)
    assert names == list(w)
    dtypes = set()
    relax.analysis.post_order_visit(mod[mode].body, lambda e: dtypes.add(str(e.ty.dtype))
                                    if isinstance(e, relax.Call) and isinstance(e.ty, relax.TensorType) else None)
    assert dtypes == {"float16"}  # TVM's own import would run everything after the first linear layer in fp32
    nn_mod, _ = blk["export"](blk["SMALL"], mode, 1, 256, 512)

    def kinds(m):
        return sorted(str(c.args[0].global_symbol)[len("tilex_"):str(c.args[0].global_symbol).rindex("_")]
                      for c in _calls(tr.offload(m, target="sm_90a")[mode])
                      if getattr(c.op, "name", "") == "relax.call_dps_packed")

    assert kinds(mod) == kinds(nn_mod)
