"""A GEMM with a symbolic M on the GPU: one compiled kernel (TMA loads whose tensor maps are encoded per call,
warp-specialized) serves every M, ragged and tiny ones included, against torch; tensors of the wrong shape, or whose
shared symbolic dimension disagrees, are refused."""
import pytest

torch = pytest.importorskip("torch")

import tilex  # noqa: E402
import tilex.language as T  # noqa: E402

from programs import matmul  # noqa: E402


@pytest.fixture(scope="module")
def kernel():
    return tilex.compile(matmul(T.dynamic("m"), 512, 256, bk=64, threads=256), out_idx=-1)


@pytest.mark.gpu
@pytest.mark.parametrize("M", [1, 7, 100, 128, 129, 300, 1024])
def test_every_m_from_one_kernel(kernel, M):
    a = torch.randn(M, 256, device="cuda", dtype=torch.float16)
    b = torch.randn(256, 512, device="cuda", dtype=torch.float16)
    c = kernel(a, b)
    assert c.shape == (M, 512)
    torch.testing.assert_close(c.float(), a.float() @ b.float(), atol=5e-2, rtol=1e-2)


@pytest.mark.gpu
def test_wrong_inner_shape_is_refused(kernel):
    a = torch.randn(64, 128, device="cuda", dtype=torch.float16)
    b = torch.randn(256, 512, device="cuda", dtype=torch.float16)
    with pytest.raises(ValueError, match="shape"):
        kernel(a, b)


@pytest.mark.gpu
def test_mismatched_symbolic_dimension_is_refused():
    """A and C share m: a C with a different row count names the symbolic size it contradicts."""
    kernel = tilex.compile(matmul(T.dynamic("m"), 512, 256, bk=64, threads=256))
    a = torch.randn(64, 256, device="cuda", dtype=torch.float16)
    b = torch.randn(256, 512, device="cuda", dtype=torch.float16)
    c = torch.empty(65, 512, device="cuda", dtype=torch.float16)
    with pytest.raises(ValueError, match="m"):
        kernel(a, b, c)
