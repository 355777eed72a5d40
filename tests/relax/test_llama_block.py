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
    assert {"relax.nn.silu", "relax.concat"} <= ops  # RoPE and the MLP's gate stay with TVM
    kinds = sorted(str(c.args[0].global_symbol).split("_")[1] for c in calls
                   if getattr(c.op, "name", "") == "relax.call_dps_packed")
    assert kinds == ["attention"] + ["gemm"] * 5 + ["rms"] * 2
    tvm.compile(out, target=tilex.env.resolve_target("sm_90a"))
