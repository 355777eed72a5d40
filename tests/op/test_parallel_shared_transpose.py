"""T.Parallel: a transpose through shared memory (a scalar per-thread read of a shared tile, S[j, i], with no vector
loop) lowers and compiles; it used to fail inside the load prefetching with a TypeError. On the GPU it matches
torch."""
import pytest

import tilex

from programs import shared_transpose as transpose


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_shared_transpose_compiles(dtype):
    k = tilex.compile(transpose(256, 128, dtype), out_idx=-1, target="sm_90a")
    src = k.get_kernel_source()
    assert "__shared__" in src or "extern __shared__" in src or "buf_dyn_shmem" in src
    assert "__syncthreads" in src  # the tile is written by all threads before any reads it transposed


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_shared_transpose_matches_torch(dtype):
    torch = pytest.importorskip("torch")
    k = tilex.compile(transpose(256, 128, dtype), out_idx=-1)
    a = torch.randn(256, 128, device="cuda", dtype=getattr(torch, dtype))
    torch.testing.assert_close(k(a), a.t().contiguous())
