"""kernels/rope.py: RoPE over a column range (in place in a fused QKV output)."""
import pytest

import tilex
import tilex.language as T
from tilex.kernels.copies import column_slice_kernel
from tilex.kernels.rope import rope_kernel


def test_bad_ranges_are_refused():
    with pytest.raises(ValueError, match="head dimension must be even"):
        rope_kernel(16, 2, 63)
    with pytest.raises(ValueError, match="not inside a source of 512 columns"):
        rope_kernel(16, 2, 128, src_cols=512, col0=384)


def test_rope_builds_with_symbolic_rows():
    tilex.compile(rope_kernel(T.dynamic("m"), 4, 128, 1536, 512), out_idx=-1, target="sm_90a")


@pytest.mark.gpu
@pytest.mark.parametrize("cos_rows", [None, 7])
def test_rope_and_slices_match_torch(cos_rows):
    torch = pytest.importorskip("torch")
    m, h, d = 21, 4, 128
    x = torch.randn(m, 3 * h * d, device="cuda", dtype=torch.float16)
    t_rows = m if cos_rows is None else cos_rows
    cos, sin = torch.randn(2, t_rows, d, device="cuda", dtype=torch.float16)
    k = tilex.compile(rope_kernel(T.dynamic("m") if cos_rows else m, h, d, 3 * h * d, h * d, cos_rows), out_idx=-1)
    u = x[:, h * d:2 * h * d].float().view(m, h, d)
    idx = torch.arange(m, device="cuda") % t_rows
    c, s = cos.float()[idx][:, None], sin.float()[idx][:, None]
    want = (u * c + torch.cat([-u[..., d // 2:], u[..., :d // 2]], -1) * s).half().view(m, h * d)
    torch.testing.assert_close(k(x, cos, sin), want, rtol=1e-2, atol=1e-2)
    sl = tilex.compile(column_slice_kernel(T.dynamic("m"), h * d, 3 * h * d, 2 * h * d), out_idx=-1)
    torch.testing.assert_close(sl(x), x[:, 2 * h * d:])

