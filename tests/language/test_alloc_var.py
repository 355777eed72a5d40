"""T.alloc_var: a per-thread scalar that reads and assigns like a Python variable."""
import pytest
import tvm

import tilex
import tilex.language as T
from tilex.engine import lower_to_tir


def prefix_kernel():
    @T.prim_func
    def f(A: T.Tensor((128,), "float32"), B: T.Tensor((128,), "float32")):
        with T.Kernel(1, threads=128) as bx:
            acc = T.alloc_var("float32", 1.0)
            for k in T.serial(4):
                acc = acc + A[k]
            for i in T.Parallel(128):
                B[i] = A[i] + acc

    return f


def test_alloc_var_lowers_to_a_scalar():
    script = lower_to_tir(prefix_kernel(), tvm.target.Target({"kind": "cuda", "arch": "sm_90a"}))["main"].script()
    assert "acc: T.float32 = T.float32(1.0)" in script and "acc = acc + A[k]" in script


@pytest.mark.gpu
def test_alloc_var_on_gpu():
    import torch

    k = tilex.compile(prefix_kernel(), out_idx=[1])
    a = torch.randn(128, device="cuda")
    torch.testing.assert_close(k(a), a + 1.0 + a[:4].sum())
