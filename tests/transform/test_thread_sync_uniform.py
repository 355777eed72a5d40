"""Barriers inside a condition every thread of the block evaluates alike (a block index read from a global index
tensor, kept in a T.alloc_var): TVM's ThreadSync refuses any barrier inside a condition; tilex tells it which
conditions are uniform. A condition that reads the thread index still gets no block barrier."""
import pytest

import tilex
import tilex.language as T

N, BS, D = 8, 32, 64


def gather_blocks():
    @T.prim_func
    def sparse(X: T.Tensor((N * BS, D), "float16"), Blocks: T.Tensor((N,), "int32"), O: T.Tensor((BS, D), "float32")):
        with T.Kernel(1, threads=128) as bx:
            s = T.alloc_shared((BS, D), "float16")
            acc = T.alloc_fragment((BS, D), "float32")
            blk = T.alloc_var("int32")
            T.clear(acc)
            for i in T.serial(N):
                blk = Blocks[i]
                if blk >= 0:
                    T.copy(X[blk * BS, 0], s)
                    for r, c in T.Parallel(BS, D):
                        acc[r, c] += s[BS - 1 - r, c]
            T.copy(acc, O)

    return sparse


def test_barriers_go_inside_a_uniform_data_dependent_condition():
    src = tilex.compile(gather_blocks(), target="sm_90a").get_kernel_source()
    body = src[src.index("if ((0 <= blk_ptr[0])"):] if "if ((0 <= blk_ptr[0])" in src else src
    assert "__syncthreads()" in body
    assert "tvm_thread_invariant" not in src


@pytest.mark.gpu
def test_a_uniform_condition_with_barriers_computes_the_sum():
    import torch

    k = tilex.compile(gather_blocks())
    x = torch.randn(N * BS, D, device="cuda", dtype=torch.float16)
    blocks = torch.tensor([0, -1, 3, 7, -1, 2, 2, 5], device="cuda", dtype=torch.int32)
    o = torch.empty(BS, D, device="cuda")
    k(x, blocks, o)
    ref = torch.zeros(BS, D, device="cuda")
    for b in blocks.tolist():
        if b >= 0:
            ref += x[b * BS:(b + 1) * BS].float().flip(0)
    torch.testing.assert_close(o, ref, rtol=1e-3, atol=1e-3)
