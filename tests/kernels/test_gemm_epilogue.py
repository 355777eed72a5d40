"""kernels/gemm.py: matmul_epilogue (residual add, SiLU-multiply) and swap-AB with B given as (N, K)."""
import pytest

import tilex
import tilex.language as T
from tilex.kernels.gemm import matmul_epilogue, matmul_swap_ab


def test_unknown_epilogue_is_refused():
    with pytest.raises(ValueError, match="epilogue must be one of"):
        matmul_epilogue(128, 256, 64, "gelu")


@pytest.mark.parametrize("epilogue", ["add", "silu_mul"])
def test_epilogue_compiles_without_spills(epilogue):
    k = tilex.compile(matmul_epilogue(T.dynamic("m"), 1024, 512, epilogue, trans_b=True, swizzle=8), out_idx=-1,
                      target="sm_90a")
    if k.resources is not None:
        assert not k.resources.spilled


@pytest.mark.gpu
@pytest.mark.parametrize("epilogue", ["add", "silu_mul"])
@pytest.mark.parametrize("trans_b", [False, True])
def test_epilogue_matches_torch(epilogue, trans_b):
    torch = pytest.importorskip("torch")
    n, kk = 768, 512
    k = tilex.compile(matmul_epilogue(T.dynamic("m"), n, kk, epilogue, bn=256, trans_b=trans_b, swizzle=8),
                      out_idx=-1)
    w = torch.randn((n, kk) if trans_b else (kk, n), device="cuda", dtype=torch.float16) / kk ** 0.5
    for m in (1, 129, 1000):
        a = torch.randn(m, kk, device="cuda", dtype=torch.float16)
        e = torch.randn(m, n, device="cuda", dtype=torch.float16)
        acc = a.float() @ (w.float().t() if trans_b else w.float())
        want = acc + e.float() if epilogue == "add" else torch.nn.functional.silu(e.float()) * acc
        torch.testing.assert_close(k(a, w, e), want.half(), rtol=2e-2, atol=2e-2)


@pytest.mark.gpu
def test_swap_ab_with_b_as_n_by_k():
    torch = pytest.importorskip("torch")
    k = tilex.compile(matmul_swap_ab(T.dynamic("m"), 512, 384, trans_b=True), out_idx=-1)
    w = torch.randn(512, 384, device="cuda", dtype=torch.float16)
    for m in (1, 7, 16, 40):
        a = torch.randn(m, 384, device="cuda", dtype=torch.float16)
        torch.testing.assert_close(k(a, w), (a.float() @ w.float().t()).half(), rtol=2e-2, atol=5e-2)


def test_bias_act_refuses_unknown_or_empty_epilogues():
    from tilex.kernels.gemm import matmul_bias_act

    with pytest.raises(ValueError, match="act must be one of"):
        matmul_bias_act(128, 256, 64, True, "tanh")
    with pytest.raises(ValueError, match="neither a bias nor an activation"):
        matmul_bias_act(128, 256, 64, False, None)


@pytest.mark.gpu
@pytest.mark.parametrize("act", [None, "relu", "gelu", "gelu_tanh", "silu"])
@pytest.mark.parametrize("n,bn", [(768, 256), (1000, 128)])
def test_bias_act_matches_torch(act, n, bn):
    torch = pytest.importorskip("torch")
    import torch.nn.functional as F
    from tilex.kernels.gemm import matmul_bias_act

    kk = 512
    k = tilex.compile(matmul_bias_act(T.dynamic("m"), n, kk, True, act, 128, bn, 64, 4, 256 if bn == 256 else 128,
                                      trans_b=True, swizzle=16, c_block=128 if bn == 256 else 0), out_idx=-1)
    w = torch.randn(n, kk, device="cuda", dtype=torch.float16) / kk ** 0.5
    b = torch.randn(n, device="cuda", dtype=torch.float16)
    fn = {None: lambda t: t, "relu": F.relu, "gelu": F.gelu, "gelu_tanh": lambda t: F.gelu(t, approximate="tanh"),
          "silu": F.silu}[act]
    for m in (1, 129, 1000):
        a = torch.randn(m, kk, device="cuda", dtype=torch.float16)
        torch.testing.assert_close(k(a, w, b).float(), fn(F.linear(a.float(), w.float(), b.float())), rtol=2e-2,
                                   atol=2e-2)
