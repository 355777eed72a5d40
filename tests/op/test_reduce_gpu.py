"""Every reduce kind along both dims, from fragments and from shared memory, with clear=False, on the GPU."""
import pytest

torch = pytest.importorskip("torch")

import tilex  # noqa: E402
import tilex.language as T  # noqa: E402

pytestmark = pytest.mark.gpu

REF = {
    "sum": lambda x, d: x.sum(d), "max": lambda x, d: x.amax(d), "min": lambda x, d: x.amin(d),
    "abssum": lambda x, d: x.abs().sum(d), "absmax": lambda x, d: x.abs().amax(d),
}


def reduce_kernel(M, N, kind, dim, source="fragment", bm=32, bn=64, threads=128, clear=True):
    out_len = bm if dim == 1 else bn
    red = getattr(T, f"reduce_{kind}")

    @T.prim_func
    def f(X: T.Tensor((M, N), "float32"), O: T.Tensor((T.ceildiv(M, bm) * T.ceildiv(N, bn) * out_len,), "float32")):
        with T.Kernel(T.ceildiv(N, bn), T.ceildiv(M, bm), threads=threads) as (bx, by):
            o = T.alloc_fragment((out_len,), "float32")
            if source == "fragment":
                x = T.alloc_fragment((bm, bn), "float32")
            else:
                x = T.alloc_shared((bm, bn), "float32")
            T.copy(X[by * bm, bx * bn], x)
            if clear:
                red(x, o, dim=dim)
            else:
                T.fill(o, 1.0)
                red(x, o, dim=dim, clear=False)
            T.copy(o, O[(by * T.ceildiv(N, bn) + bx) * out_len])

    return f


def reference(x, kind, dim, M, N, bm=32, bn=64, clear=True):
    gm, gn = -(-M // bm), -(-N // bn)
    pad = torch.zeros(gm * bm, gn * bn, device=x.device)
    pad[:M, :N] = x  # out-of-range elements read as 0, like the kernel's guarded copy
    tiles = pad.view(gm, bm, gn, bn).permute(0, 2, 1, 3)  # (gm, gn, bm, bn)
    r = REF[kind](tiles, 3 if dim == 1 else 2)
    if not clear:
        r = r + 1.0 if kind in ("sum", "abssum") else (torch.maximum(r, torch.ones_like(r)) if "max" in kind
                                                      else torch.minimum(r, torch.ones_like(r)))
    return r.reshape(-1)


@pytest.mark.parametrize("kind", list(REF))
@pytest.mark.parametrize("dim", [0, 1])
@pytest.mark.parametrize("source", ["fragment", "shared"])
def test_reduce(kind, dim, source):
    M, N = 100, 200
    k = tilex.compile(reduce_kernel(M, N, kind, dim, source), out_idx=[1])
    x = torch.randn(M, N, device="cuda")
    torch.testing.assert_close(k(x), reference(x, kind, dim, M, N), atol=1e-3, rtol=1e-3)


@pytest.mark.parametrize("kind", ["sum", "max", "min"])
def test_reduce_accumulates_without_clear(kind):
    M, N = 64, 128
    k = tilex.compile(reduce_kernel(M, N, kind, 1, clear=False), out_idx=[1])
    x = torch.randn(M, N, device="cuda")
    torch.testing.assert_close(k(x), reference(x, kind, 1, M, N, clear=False), atol=1e-3, rtol=1e-3)
