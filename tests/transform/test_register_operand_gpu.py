"""RegisterOperand on the GPU: the hand-written dequantizing GEMM with its decoded tile in the MMA's registers
(tilex.decode_into_registers) against torch, full and partial M tiles."""
import os
import runpy

import pytest

torch = pytest.importorskip("torch")

import tilex  # noqa: E402

pytestmark = pytest.mark.gpu
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_ex = runpy.run_path(os.path.join(ROOT, "examples", "dequantize_gemm.py"))


@pytest.mark.parametrize("M, tile", [(512, dict(bm=256, bn=128, bk=64, stages=4, threads=256)),
                                     (200, dict(bm=256, bn=128, bk=128, stages=2, threads=256)),
                                     (128, dict(bm=128, bn=128, bk=64, stages=3, threads=256))])
def test_decode_into_registers(M, tile):
    from tilex import quant

    N, K, g = 512, 1024, 128
    qw = quant.quantize(torch.randn(N, K, device="cuda") / K ** 0.5, "uint4", group_size=g)
    x = torch.randn(M, K, device="cuda", dtype=torch.float16)
    k = tilex.compile(_ex["dequant_gemm_kernel"](M, N, K, g, **tile), out_idx=-1,
                      pass_configs={"tilex.decode_into_registers": True})
    assert "_rs_" in k.get_kernel_source()
    ref = x.float() @ quant.dequantize(qw).float().T
    y = k(x, _ex["pack_nibbles"](qw.codes), qw.scales.half())
    torch.testing.assert_close(y.float(), ref, atol=2e-2, rtol=2e-2)
