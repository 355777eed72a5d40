"""GuardGlobalAccess: global reads and writes the analyzer cannot prove inside their tensor are guarded (reads give
0, writes are skipped), as TileLang guards them; provably in-bounds accesses compile as before."""
import re

import pytest

import tilex
import tilex.language as T
from tilex.transform.guard_global_access import guard_global_access

BI, D = 32, 64


def gather(rows=1024):
    @T.prim_func
    def gather_rows(KV: T.Tensor((rows, D), "float16"), Idx: T.Tensor((BI,), "int32"),
                    O: T.Tensor((BI, D), "float16")):
        with T.Kernel(1, threads=128) as bx:
            s = T.alloc_shared((BI, D), "float16")
            for b, d in T.Parallel(BI, D):
                s[b, d] = KV[Idx[b], d]
            T.copy(s, O)

    return gather_rows


def ragged_scale(n=1000, block=256):
    @T.prim_func
    def scale(A: T.Tensor((n,), "float32"), B: T.Tensor((n,), "float32")):
        with T.Kernel(T.ceildiv(n, block), threads=128) as bx:
            for i in T.Parallel(block):
                B[bx * block + i] = A[bx * block + i] * 2.0

    return scale


def in_bounds_scale(n=1024, block=256):
    return ragged_scale(n, block)


def _body(src):
    i = src.index("__global__ void __launch_bounds__")
    return src[src.index("__global__", i + 20):]


def test_a_gather_through_an_index_tensor_reads_zero_outside_the_tensor():
    src = _body(tilex.compile(gather(), target="sm_90a").get_kernel_source())
    assert "(0 <= Idx_pre_ptr[par_it]) && (Idx_pre_ptr[par_it] < 1024)" in src
    assert src.count("if (") >= 1


def test_a_ragged_grid_guards_its_reads_and_writes():
    src = _body(tilex.compile(ragged_scale(), target="sm_90a").get_kernel_source())
    assert re.search(r"\) < (250|1000)\)", src)  # 1000 elements: 250 vectors of 4


def test_provably_in_bounds_accesses_are_left_alone():
    src = _body(tilex.compile(in_bounds_scale(), target="sm_90a").get_kernel_source())
    assert src.count("if (") == 1 and "condval" not in src  # only the plan's own thread guard


def test_guards_from_tile_operators_count_as_proofs():
    """A T.copy of a ragged tile guards itself: the pass adds nothing to it."""
    n = 1000

    @T.prim_func
    def copy_ragged(A: T.Tensor((n, 64), "float32"), B: T.Tensor((n, 64), "float32")):
        with T.Kernel(T.ceildiv(n, 128), threads=128) as bx:
            f = T.alloc_fragment((128, 64), "float32")
            T.copy(A[bx * 128, 0], f)
            T.copy(f, B[bx * 128, 0])

    from tilex.engine import pipeline

    func = copy_ragged
    lowered = pipeline.run_tile_passes(func, tilex.env.resolve_target("sm_90a"))
    assert guard_global_access(lowered).same_as(lowered)


@pytest.mark.gpu
def test_padding_indices_read_zeros_on_the_gpu():
    import torch

    k = tilex.compile(gather(256))
    kv = torch.randn(256, D, device="cuda", dtype=torch.float16)
    idx = torch.randint(0, 256, (BI,), device="cuda", dtype=torch.int32)
    idx[::4] = -1
    idx[1::4] = 256
    out = torch.empty(BI, D, device="cuda", dtype=torch.float16)
    k(kv, idx, out)
    valid = (idx >= 0) & (idx < 256)
    ref = torch.where(valid[:, None], kv[idx.clamp(0, 255).long()], torch.zeros((), device="cuda",
                                                                              dtype=torch.float16))
    assert torch.equal(out, ref)


@pytest.mark.gpu
def test_a_ragged_grid_writes_nothing_past_the_end_on_the_gpu():
    import torch

    n = 1000
    k = tilex.compile(ragged_scale(n))
    buf = torch.full((1024,), 7.0, device="cuda")
    a = torch.randn(n, device="cuda")
    k(a, buf[:n])
    assert torch.equal(buf[:n], a * 2)
    assert torch.equal(buf[n:], torch.full((24,), 7.0, device="cuda"))
