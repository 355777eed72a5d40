"""T.view on the GPU: the view reads exactly the bytes of the viewed tensor."""
import os
import runpy

import pytest

torch = pytest.importorskip("torch")

import tilex  # noqa: E402

pytestmark = pytest.mark.gpu
_cpu = runpy.run_path(os.path.join(os.path.dirname(os.path.abspath(__file__)), "test_view.py"))


def test_bytes_read_as_words():
    k = tilex.compile(_cpu["_bytes_as_words"](1024))
    a = torch.randint(0, 256, (1024,), device="cuda", dtype=torch.uint8)
    b = torch.zeros(256, device="cuda", dtype=torch.uint32)
    k(a, b)
    assert torch.equal(b.view(torch.int32), a.view(torch.int32))


def test_sign_flip_through_a_word_view():
    a = torch.randn(64, 128, device="cuda", dtype=torch.float16)
    b = torch.zeros(64, 64, device="cuda", dtype=torch.int32)
    tilex.compile(_cpu["_sign_flip"]("int32"))(a, b)
    assert torch.equal(b.view(torch.float16), -a)


def test_fragment_sign_flip_through_a_word_view():
    a = torch.randn(64, 32, device="cuda", dtype=torch.float16)
    b = torch.zeros(64, 16, device="cuda", dtype=torch.int32)
    tilex.compile(_cpu["_fragment_sign_flip"]())(a, b)
    assert torch.equal(b.view(torch.float16), -a)


def test_words_written_into_the_mma_operand():
    """The gemm's float16 register operand filled word by word through a view, in a pipelined loop."""
    M, N, K = 16, 64, 256
    k = tilex.compile(_cpu["_words_into_mma_operand"](M, N, K), out_idx=-1)
    x = torch.randn(M, K, device="cuda", dtype=torch.float16)
    w = torch.randn(N, K, device="cuda", dtype=torch.float16)
    y = k(x, w.view(torch.int32))
    torch.testing.assert_close(y.float(), x.float() @ w.float().T, atol=2e-2, rtol=2e-2)
