"""Atomics on shared memory get the block barriers their neighbours need: one after the tile is written (the
atomics read and write it), one before other threads read what they added up -- and none between one atomic and the
next (atomics need no order among themselves). TVM's planner does not see an address taken for an atomic, so
before transform/thread_sync.py exposed them the first barrier was missing: atomics could land on the tile before
its zeros (a race).

CPU: the barriers in the CUDA tilex generates for sm_90a; GPU: a shared-memory histogram against torch."""
import pytest

import tilex
import tilex.language as T
from cuda_text import braced_block


def histogram(n=4096, bins=16, threads=128):
    """Per block: zero a shared histogram, count the block's n values into it with T.atomic_add, write it out
    shifted by one bin (so that threads read bins other threads counted)."""

    @T.prim_func
    def main(X: T.Tensor((n,), "int32"), H: T.Tensor((bins,), "int32"), Old: T.Tensor((n,), "int32")):
        with T.Kernel(1, threads=threads) as bx:
            hist = T.alloc_shared((bins,), "int32")
            tx = T.get_thread_binding()
            if tx < bins:
                hist[tx] = 0
            for i in T.Parallel(n):
                Old[i] = T.atomic_add(hist[X[i] % bins], 1, return_prev=True)
            for b in T.Parallel(bins):
                H[b] = hist[(b + 1) % bins]

    return main


def _kernel_text():
    src = tilex.compile(histogram(), target="sm_90a").get_kernel_source()
    return src[src.index('extern "C" __global__'):]


def test_barriers_around_shared_atomics_and_none_between_them():
    src = _kernel_text()
    zero = src.index("] = 0;")
    first_atomic = src.index("tilex::atomic_fetch")
    read_back = src.index("H_ptr[")
    assert src[zero:first_atomic].count("__syncthreads()") == 1, src  # the zeros before any atomic
    assert src[first_atomic:read_back].count("__syncthreads()") == 1, src  # the counts before they are read
    loop = braced_block(src[src.rindex("for (", 0, first_atomic):], "for (")  # the loop of atomics
    assert "sync" not in loop and "barrier" not in loop, loop  # nothing between one atomic and the next


@pytest.mark.gpu
def test_shared_histogram_values():
    import torch

    kernel = tilex.compile(histogram(), out_idx=[1, 2])
    x = torch.randint(0, 1 << 20, (4096,), device="cuda", dtype=torch.int32)
    for _ in range(5):  # a race shows up as a count off now and then
        h, old = kernel(x)
        want = torch.bincount((x % 16).long(), minlength=16).int()
        torch.testing.assert_close(h, want.roll(-1))
        # the values each atomic saw: per bin, every count from 0 to the bin's total, once
        for b in range(16):
            seen = old[(x % 16) == b].sort().values
            torch.testing.assert_close(seen, torch.arange(int(want[b]), device="cuda", dtype=torch.int32))
