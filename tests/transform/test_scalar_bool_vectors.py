"""ScalarBoolVectors: a bool tile is written one byte per element (TVM writes a vector of 4 bools as an 8-byte
ushort4, which misplaced a sparse-attention mask and overwrote the neighbouring thread's bytes)."""
import pytest

import tilex
import tilex.language as T

N = 256


def mask_then_select():
    @T.prim_func
    def masked(Idx: T.Tensor((N,), "int32"), X: T.Tensor((N,), "float32"), O: T.Tensor((N,), "float32")):
        with T.Kernel(1, threads=128) as bx:
            mask = T.alloc_fragment((N,), "bool")
            for i in T.Parallel(N):
                mask[i] = Idx[i] >= 0
            for i in T.Parallel(N):
                O[i] = T.if_then_else(mask[N - 1 - i], X[i], -1.0)

    return masked


def test_bool_tiles_are_not_written_as_short_vectors():
    src = tilex.compile(mask_then_select(), target="sm_90a").get_kernel_source()
    assert "ushort4" not in src and "ushort2" not in src
    assert "bool" in src


@pytest.mark.gpu
def test_a_bool_mask_keeps_every_element_on_the_gpu():
    import torch

    k = tilex.compile(mask_then_select())
    idx = torch.randint(-3, 3, (N,), device="cuda", dtype=torch.int32)
    x = torch.randn(N, device="cuda")
    o = torch.empty_like(x)
    k(idx, x, o)
    ref = torch.where(idx.flip(0) >= 0, x, torch.full_like(x, -1.0))
    assert torch.equal(o, ref)
