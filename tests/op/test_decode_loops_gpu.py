"""Decode-style T.Parallel loops on the GPU: small-range integer casts (tilex.op.int_cast) exact over every value,
per-element scalars inlined into vectorized loops, loads prefetched ahead of the loop."""
import pytest

torch = pytest.importorskip("torch")

import tilex  # noqa: E402
import tilex.language as T  # noqa: E402

pytestmark = pytest.mark.gpu


def cast_kernel(n, dtype, mask, offset, shift):
    """Y[i, j] = (float(((X[i, j] >> shift) & mask)) - offset) * S[i]: a decode whose cast takes the magic-number
    path, with a per-row scale (a prefetched broadcast load) and a per-element scalar."""

    @T.prim_func
    def cast(X: T.Tensor((n, 256), "int32"), S: T.Tensor((n,), dtype), Y: T.Tensor((n, 256), dtype)):
        with T.Kernel(1, threads=128) as bx:
            xs = T.alloc_shared((n, 256), "int32")
            ys = T.alloc_shared((n, 256), dtype)
            T.copy(X, xs)
            for i, j in T.Parallel(n, 256):
                code = (xs[i, j] >> shift) & mask
                ys[i, j] = (T.cast(code, dtype) - T.cast(offset, dtype)) * S[i]
            T.copy(ys, Y)

    return cast


@pytest.mark.parametrize("dtype, bits, offset", [("float16", 4, 8), ("float16", 10, 0), ("float16", 10, 512),
                                                 ("bfloat16", 7, 64), ("bfloat16", 4, 0)])
def test_small_integer_casts_are_exact(dtype, bits, offset):
    n, mask, shift = 8, (1 << bits) - 1, 3
    tdt = getattr(torch, dtype)
    k = tilex.compile(cast_kernel(n, dtype, mask, offset, shift), out_idx=[2])
    assert ("(ushort)25600" if dtype == "float16" else "(ushort)17152") in k.get_kernel_source()
    x = torch.randint(-2**31, 2**31 - 1, (n, 256), device="cuda", dtype=torch.int32)
    x[0, : min(256, mask + 1)] = (torch.arange(min(256, mask + 1), device="cuda", dtype=torch.int32) << shift)
    s = torch.rand(n, device="cuda").to(tdt) + 0.5
    codes = ((x >> shift) & mask).float()
    ref = ((codes.to(tdt) - torch.tensor(offset, dtype=tdt)) * s[:, None]).float()
    torch.testing.assert_close(k(x, s).float(), ref, atol=0, rtol=0)


def test_every_nibble_and_byte_value():
    """All 2^10 codes of a 10-bit field through the float16 path (the widest the trick covers), exactly."""
    k = tilex.compile(cast_kernel(4, "float16", 1023, 0, 0), out_idx=[2])
    x = torch.arange(1024, device="cuda", dtype=torch.int32).reshape(4, 256)
    s = torch.ones(4, device="cuda", dtype=torch.float16)
    assert torch.equal(k(x, s).float(), x.float())


def scalar_hazard_kernel(n=64):
    """A per-element scalar read from a tile the same element then overwrites: it must keep the old value (the
    loop stays scalar rather than substituting the load after the store)."""

    @T.prim_func
    def hazard(A: T.Tensor((n, 128), "float16"), B: T.Tensor((n, 128), "float16"), C: T.Tensor((n, 128), "float16")):
        with T.Kernel(1, threads=128) as bx:
            a = T.alloc_shared((n, 128), "float16")
            T.copy(A, a)
            for i, j in T.Parallel(n, 128):
                old = a[i, j]
                a[i, j] = T.float16(0)
                B[i, j] = old + a[i, j]
            T.copy(a, C)

    return hazard


def test_scalar_before_store_keeps_old_value():
    k = tilex.compile(scalar_hazard_kernel(), out_idx=[1, 2])
    a = torch.randn(64, 128, device="cuda", dtype=torch.float16)
    b, c = k(a)
    assert torch.equal(b, a) and torch.equal(c, torch.zeros_like(a))
