"""Tiles whose last extent is not a power of two (head dim 96 or 192): their vectorized copies and T.Parallel plans
compile (index vectors of more than 4 int32 lanes are invalid CUDA; a plan over a 192-wide row must be invertible),
and on the GPU they move every element to its place."""
import pytest

import tilex
import tilex.language as T


def shared_roundtrip(rows, cols, dtype="float16"):
    @T.prim_func
    def roundtrip(A: T.Tensor((rows, cols), dtype), B: T.Tensor((rows, cols), dtype)):
        with T.Kernel(1, threads=128) as bx:
            s = T.alloc_shared((rows, cols), dtype)
            f = T.alloc_fragment((rows, cols), "float32")
            T.copy(A, s)
            for i, j in T.Parallel(rows, cols):
                f[i, j] = s[i, j] * 2.0 + j
            T.copy(f, s)
            T.copy(s, B)

    return roundtrip


def fragment_roundtrip(rows, cols):
    @T.prim_func
    def roundtrip(A: T.Tensor((rows, cols), "float32"), B: T.Tensor((rows, cols), "float32")):
        with T.Kernel(1, threads=128) as bx:
            f = T.alloc_fragment((rows, cols), "float32")
            T.copy(A, f)
            T.copy(f, B)

    return roundtrip


CASES = [(shared_roundtrip, (64, 192)), (shared_roundtrip, (32, 96)), (shared_roundtrip, (16, 320)),
         (fragment_roundtrip, (64, 96)), (fragment_roundtrip, (64, 192))]
IDS = [f"{make.__name__}-{r}x{c}" for make, (r, c) in CASES]


@pytest.mark.parametrize("make, shape", CASES, ids=IDS)
def test_odd_width_tiles_compile_with_vector_accesses(make, shape):
    src = tilex.compile(make(*shape), target="sm_90a").get_kernel_source()
    assert "make_longlong4" not in src  # no 8-lane int32 index vectors
    assert "uint4" in src or "float4" in src  # 16-byte accesses kept


@pytest.mark.gpu
@pytest.mark.parametrize("make, shape", CASES, ids=IDS)
def test_odd_width_tiles_move_every_element(make, shape):
    import torch

    k = tilex.compile(make(*shape))
    dtype = torch.float16 if make is shared_roundtrip else torch.float32
    a = torch.randn(*shape, device="cuda").to(dtype)
    b = torch.zeros_like(a)
    k(a, b)
    if make is shared_roundtrip:
        ref = (a.float() * 2 + torch.arange(shape[1], device="cuda").float()).to(dtype)
    else:
        ref = a
    assert torch.equal(b, ref)
