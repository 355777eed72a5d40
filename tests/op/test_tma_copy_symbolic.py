"""T.tma_copy from a global tensor whose leading sizes are symbolic (batch and sequence length given per call):
its strides are expressions of the call's shape, provably 16-byte aligned, and the host encodes the tensor map per
call. Automatic T.copy keeps needing static strides below the outermost dimension."""
import pytest

import tilex
import tilex.language as T


def gather_heads(heads=128, dim=576, h0=64):
    b, s = T.dynamic("b, s")

    @T.prim_func
    def main(Q: T.Tensor((b, s, heads, dim), "bfloat16"), O: T.Tensor((b, s, 64, dim), "bfloat16")):
        with T.Kernel(s, b, threads=128) as (bx, by):
            q = T.alloc_shared((64, dim), "bfloat16")
            bar = T.alloc_barrier(arrive_count=128)
            T.tma_copy(Q[by, bx, h0:h0 + 64, :], q, barrier=bar)
            T.barrier_arrive(bar)
            T.barrier_wait(bar, 0)
            T.copy(q, O[by, bx, :, :])

    return main


def test_symbolic_leading_sizes_take_a_tensor_map():
    k = tilex.compile(gather_heads(), target="sm_90a")
    src = k.get_kernel_source()
    assert "__grid_constant__" in src and "tma_load" in src


def test_unaligned_symbolic_strides_are_refused():
    b, s, d = T.dynamic("b, s, d")

    @T.prim_func
    def rows(Q: T.Tensor((b, s, 64, d), "bfloat16"), O: T.Tensor((b, s, 64, 64), "bfloat16")):
        with T.Kernel(s, b, threads=128) as (bx, by):
            q = T.alloc_shared((64, 64), "bfloat16")
            bar = T.alloc_barrier(arrive_count=128)
            T.tma_copy(Q[by, bx, :, 0:64], q, barrier=bar)  # a row of d elements: not provably 16-byte aligned
            T.barrier_arrive(bar)
            T.barrier_wait(bar, 0)
            T.copy(q, O[by, bx, :, :])

    with pytest.raises(Exception, match="not a TMA load"):
        tilex.compile(rows, target="sm_90a")


@pytest.mark.gpu
def test_symbolic_tma_copy_on_the_gpu():
    import torch

    k = tilex.compile(gather_heads())
    for b, s in [(2, 3), (1, 7)]:
        q = torch.randn(b, s, 128, 576, device="cuda").bfloat16()
        o = torch.zeros(b, s, 64, 576, device="cuda").bfloat16()
        k(q, o)
        assert torch.equal(o, q[:, :, 64:128])
