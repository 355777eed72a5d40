"""kernels/copies.py: column slices and two-way concatenation."""
import pytest

import tilex
import tilex.language as T
from tilex.kernels.copies import column_slice_kernel, concat_kernel


def test_bad_slice_is_refused():
    with pytest.raises(ValueError, match="not inside a source of 100 columns"):
        column_slice_kernel(16, 64, 100, 40)


@pytest.mark.gpu
@pytest.mark.parametrize("cols", [(8192, 4096), (1000, 24), (1001, 7)])
def test_concat_matches_torch(cols):
    torch = pytest.importorskip("torch")
    a = torch.randn(3, cols[0], device="cuda", dtype=torch.float16)
    b = torch.randn(3, cols[1], device="cuda", dtype=torch.float16)
    k = tilex.compile(concat_kernel(T.dynamic("m"), *cols), out_idx=-1)
    torch.testing.assert_close(k(a, b), torch.cat([a, b], 1))


@pytest.mark.gpu
@pytest.mark.parametrize("cols,src,col0", [(4096, 12288, 8192), (5, 13, 3), (64, 200, 136)])
def test_column_slice_matches_torch(cols, src, col0):
    torch = pytest.importorskip("torch")
    x = torch.randn(37, src, device="cuda", dtype=torch.float16)
    k = tilex.compile(column_slice_kernel(T.dynamic("m"), cols, src, col0), out_idx=-1)
    torch.testing.assert_close(k(x), x[:, col0:col0 + cols])
