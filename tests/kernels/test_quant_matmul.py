"""tilex.ops.pack_weight / quant_matmul without a GPU: shapes of the packed tensors and clear errors."""
import pytest

torch = pytest.importorskip("torch")

from tilex import ops, quant  # noqa: E402


def test_pack_weight_shapes():
    qw = quant.quantize(torch.randn(256, 512), "uint4", group_size=64, zero_point=True)
    pw = ops.pack_weight(qw, act="bfloat16")
    assert pw.words.shape == (2, 4, 128 * 128 * 4 // 32) and pw.words.dtype == torch.int32
    assert pw.scales.shape == (8, 256) and pw.scales.dtype == torch.bfloat16
    assert pw.zeros.shape == (8, 256)


def test_pack_weight_rejects_groups_across_tiles():
    qw = quant.quantize(torch.randn(256, 768), "int4", group_size=48)
    with pytest.raises(ValueError, match="group size 48"):
        ops.pack_weight(qw)


def test_pack_weight_pads_ragged_weights():
    pw = ops.pack_weight(quant.quantize(torch.randn(200, 300), "int4", group_size=None))
    assert pw.words.shape == (2, 3, 128 * 128 * 4 // 32) and pw.scales.shape == (1, 200)


def test_quant_matmul_rejects_bad_x():
    pw = ops.pack_weight(quant.quantize(torch.randn(128, 128), "int4", group_size=128))
    with pytest.raises(ValueError, match="2-d"):
        ops.quant_matmul(torch.randn(128), pw)
    with pytest.raises(ValueError, match="K = 64"):
        ops.quant_matmul(torch.randn(2, 64, dtype=torch.float16), pw)
    with pytest.raises(ValueError, match="packed for float16"):
        ops.quant_matmul(torch.randn(2, 128, dtype=torch.bfloat16), pw)
