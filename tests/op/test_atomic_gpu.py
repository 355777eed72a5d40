"""T.atomic_add / T.atomic_max / T.atomic_min on the GPU against torch.

Inputs are integer-valued (or small multiples of 1/8) so that sums are exact in every order: atomics make the order
of additions nondeterministic, and exact data makes the comparison exact.
"""
import pytest

torch = pytest.importorskip("torch")

import tilex  # noqa: E402
import tilex.language as T  # noqa: E402

TORCH = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16, "int32": torch.int32}


def _ints(*shape, lo=-3, hi=4, dtype=torch.float32):
    return torch.randint(lo, hi, shape, device="cuda").to(dtype)


def _eighths(*shape, dtype):
    """Multiples of 1/8 in [-1, 1]: exact in fp16/bf16, and so are sums of a few of them."""
    return (torch.randint(-8, 9, shape, device="cuda").float() / 8).to(dtype)


def _padded(shape, dtype, fill=0.0, pad=4096):
    """A contiguous (shape) tensor followed by `pad` sentinel elements: writes past its end show up there."""
    n = 1
    for s in shape:
        n *= s
    big = torch.full((n + pad,), fill, device="cuda", dtype=dtype)
    return big[:n].view(*shape), big[n:]


# ---- kernels ------------------------------------------------------------------------------------------------------
def split_k_gemm(M, N, K, splits, bm=128, bn=128, bk=32):
    kslice = K // splits

    @T.prim_func
    def main(A: T.Tensor((M, K), "float16"), B: T.Tensor((K, N), "float16"), C: T.Tensor((M, N), "float32")):
        with T.Kernel(T.ceildiv(N, bn), T.ceildiv(M, bm), splits, threads=128) as (bx, by, bz):
            A_s = T.alloc_shared((bm, bk), "float16")
            B_s = T.alloc_shared((bk, bn), "float16")
            C_l = T.alloc_fragment((bm, bn), "float32")
            T.clear(C_l)
            for k in T.Pipelined(kslice // bk, num_stages=2):
                T.copy(A[by * bm, bz * kslice + k * bk], A_s)
                T.copy(B[bz * kslice + k * bk, bx * bn], B_s)
                T.gemm(A_s, B_s, C_l)
            T.atomic_add(C[by * bm, bx * bn], C_l)

    return main


def split_sum(S, M, N, bm=64, bn=64, src="float32", dst="float32", frag="float32", op="add", via_shared=False,
              use_tma=False, threads=128):
    """C[m, n] (op)= X[s, m, n] for every s: one block per (tile, s)."""
    atomic = {"add": T.atomic_add, "max": T.atomic_max, "min": T.atomic_min}[op]

    if via_shared:
        @T.prim_func
        def main(X: T.Tensor((S, M, N), src), C: T.Tensor((M, N), dst)):
            with T.Kernel(T.ceildiv(N, bn), T.ceildiv(M, bm), S, threads=128) as (bx, by, bz):
                x = T.alloc_shared((bm, bn), frag)
                T.copy(X[bz, by * bm, bx * bn], x)
                atomic(C[by * bm, bx * bn], x)
    else:
        @T.prim_func
        def main(X: T.Tensor((S, M, N), src), C: T.Tensor((M, N), dst)):
            with T.Kernel(T.ceildiv(N, bn), T.ceildiv(M, bm), S, threads=threads) as (bx, by, bz):
                x = T.alloc_fragment((bm, bn), frag)
                T.copy(X[bz, by * bm, bx * bn], x)
                if use_tma:
                    T.atomic_add(C[by * bm, bx * bn], x, use_tma=True)
                else:
                    atomic(C[by * bm, bx * bn], x)

    return main


def column_reduce_elementwise(M, N, bm=32, bn=64, op="add"):
    """S[j] (op)= A[i, j] element by element inside T.Parallel."""
    atomic = {"add": T.atomic_add, "max": T.atomic_max, "min": T.atomic_min}[op]

    @T.prim_func
    def main(A: T.Tensor((M, N), "float32"), S: T.Tensor((N,), "float32")):
        with T.Kernel(T.ceildiv(N, bn), T.ceildiv(M, bm), threads=128) as (bx, by):
            a = T.alloc_fragment((bm, bn), "float32")
            T.copy(A[by * bm, bx * bn], a)
            for i, j in T.Parallel(bm, bn):
                atomic(S[bx * bn + j], a[i, j])

    return main


def histogram(n, bins, blk=1024, shared=False):
    if shared:
        @T.prim_func
        def main(A: T.Tensor((n,), "int32"), H: T.Tensor((bins,), "int32")):
            with T.Kernel(n // blk, threads=128) as bx:
                s = T.alloc_shared((bins,), "int32")
                for i in T.Parallel(bins):
                    s[i] = 0
                T.tvm_storage_sync("shared")
                for i in T.Parallel(blk):
                    T.atomic_add(s[A[bx * blk + i]], 1)
                T.tvm_storage_sync("shared")
                for i in T.Parallel(bins):
                    T.atomic_add(H[i], s[i])
    else:
        @T.prim_func
        def main(A: T.Tensor((n,), "int32"), H: T.Tensor((bins,), "int32")):
            with T.Kernel(n // blk, threads=128) as bx:
                for i in T.Parallel(blk):
                    T.atomic_add(H[A[bx * blk + i]], 1)

    return main


def shared_accumulate(M, N, bm=32, bn=64):
    """B tile = A[tile] + A[next row tile], summed into a shared tile with atomics."""

    @T.prim_func
    def main(A: T.Tensor((M, N), "float32"), B: T.Tensor((M, N), "float32")):
        with T.Kernel(T.ceildiv(N, bn), T.ceildiv(M, bm), threads=128) as (bx, by):
            s = T.alloc_shared((bm, bn), "float32")
            T.clear(s)
            T.atomic_add(s, A[by * bm, bx * bn])
            T.atomic_add(s, A[((by + 1) % T.ceildiv(M, bm)) * bm, bx * bn])
            T.copy(s, B[by * bm, bx * bn])

    return main


# ---- (a) split-K ------------------------------------------------------------------------------------------------
@pytest.mark.gpu
@pytest.mark.parametrize("shape", [(256, 256, 1024), (200, 136, 512)], ids=lambda s: "x".join(map(str, s)))
def test_split_k_gemm_is_exact(shape):
    M, N, K = shape
    k = tilex.compile(split_k_gemm(M, N, K, splits=4))
    a = _ints(M, K, lo=-2, hi=3, dtype=torch.float16)
    b = _ints(K, N, lo=-2, hi=3, dtype=torch.float16)
    c, pad = _padded((M, N), torch.float32)
    k(a, b, c)
    ref = (a.double().cpu() @ b.double().cpu()).float()
    assert torch.equal(c.cpu(), ref)
    assert not pad.any(), "ragged tiles wrote past the end of C"


@pytest.mark.gpu
@pytest.mark.parametrize("shape", [(256, 256), (100, 70), (37, 45)], ids=lambda s: "x".join(map(str, s)))
def test_split_sum_fp32_tiles_are_exact(shape):
    M, N = shape
    S = 8
    k = tilex.compile(split_sum(S, M, N))
    x = _ints(S, M, N)
    c, pad = _padded((M, N), torch.float32)
    k(x, c)
    assert torch.equal(c, x.sum(0))
    assert not pad.any()


# ---- (b) element-wise atomics inside T.Parallel ------------------------------------------------------------------
@pytest.mark.gpu
def test_elementwise_column_sum():
    M, N = 200, 192
    k = tilex.compile(column_reduce_elementwise(M, N))
    a = _ints(M, N)
    s = torch.zeros(N, device="cuda")
    k(a, s)
    assert torch.equal(s, a.sum(0))


@pytest.mark.gpu
@pytest.mark.parametrize("shared", [False, True], ids=["global", "shared"])
def test_histogram(shared):
    n, bins = 8192, 64
    k = tilex.compile(histogram(n, bins, shared=shared))
    a = torch.randint(0, bins, (n,), device="cuda", dtype=torch.int32)
    a[: n // 4] = 7  # a hot bin: many colliding atomics
    h = torch.zeros(bins, device="cuda", dtype=torch.int32)
    k(a, h)
    assert torch.equal(h.long(), torch.bincount(a.long(), minlength=bins))


# ---- (c) max / min with negative values ------------------------------------------------------------------------
@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["float32", "int32", "float16", "bfloat16"])
@pytest.mark.parametrize("op", ["max", "min"])
def test_tile_max_min(op, dtype):
    S, M, N = 6, 100, 70
    k = tilex.compile(split_sum(S, M, N, src=dtype, dst=dtype, frag=dtype, op=op))
    tdt = TORCH[dtype]
    if dtype == "int32":
        x = torch.randint(-1000, 1000, (S, M, N), device="cuda", dtype=torch.int32)
        init = torch.iinfo(torch.int32).min if op == "max" else torch.iinfo(torch.int32).max
    else:
        x = (torch.randn(S, M, N, device="cuda") * 4 - 6).to(tdt)  # mostly negative
        x[:, :4] = -0.0
        init = float("-inf") if op == "max" else float("inf")
    c, pad = _padded((M, N), tdt, fill=init)
    pad_before = pad.clone()
    k(x, c)
    ref = x.amax(0) if op == "max" else x.amin(0)
    assert torch.equal(c, ref)
    assert torch.equal(pad, pad_before)


@pytest.mark.gpu
@pytest.mark.parametrize("op", ["max", "min"])
def test_elementwise_max_min_negative_and_signed_zero(op):
    M, N = 128, 128
    k = tilex.compile(column_reduce_elementwise(M, N, op=op))
    a = torch.randn(M, N, device="cuda") - 3
    s = torch.full((N,), float("-inf") if op == "max" else float("inf"), device="cuda")
    k(a, s)
    assert torch.equal(s, a.amax(0) if op == "max" else a.amin(0))
    # signed zeros: max(-1, -0.0) = -0.0; max(-0.0, +0.0) = +0.0; min(+0.0, -0.0) = -0.0; min(1, +0.0) = +0.0
    z = torch.full((M, N), -0.0 if op == "max" else 0.0, device="cuda")
    s = torch.full((N,), -1.0 if op == "max" else 1.0, device="cuda")
    k(z, s)
    assert torch.equal(s, torch.zeros(N, device="cuda")) and bool(torch.signbit(s).all() == (op == "max"))
    z = torch.full((M, N), 0.0 if op == "max" else -0.0, device="cuda")
    k(z, s)
    assert bool(torch.signbit(s).all() == (op == "min")), "+0.0 beats -0.0 for max, -0.0 beats +0.0 for min"


# ---- (d) fp16 / bf16 tiles ------------------------------------------------------------------------------------
@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("frag", ["same", "float32", "shared"])
@pytest.mark.parametrize("shape", [(256, 256), (100, 70)], ids=lambda s: "x".join(map(str, s)))
def test_half_tile_add(shape, frag, dtype):
    M, N = shape
    S = 4
    frag_dtype = "float32" if frag == "float32" else dtype
    k = tilex.compile(split_sum(S, M, N, src=dtype, dst=dtype, frag=frag_dtype, via_shared=frag == "shared"))
    tdt = TORCH[dtype]
    x = _eighths(S, M, N, dtype=tdt)
    c, pad = _padded((M, N), tdt)
    k(x, c)
    torch.testing.assert_close(c.float(), x.float().sum(0), atol=1e-2, rtol=1e-2)
    assert not pad.any()


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
@pytest.mark.parametrize("shape", [(256, 256), (200, 136)], ids=lambda s: "x".join(map(str, s)))
def test_fragment_tile_add_through_tma(shape, dtype):
    """use_tma=True: on sm90 the fragment goes through a staged shared tile and TMA reductions (the edge tiles of
    200 x 136 are clipped by the TMA unit); elsewhere it falls back to atomics. Exact data, exact sums."""
    M, N = shape
    S = 6
    k = tilex.compile(split_sum(S, M, N, bm=64, bn=128, src=dtype, dst=dtype, frag="float32", use_tma=True,
                                threads=256))
    if torch.cuda.get_device_capability()[0] == 9:
        assert "tma_reduce_add_2d" in k.get_kernel_source()
    tdt = TORCH[dtype]
    x = _eighths(S, M, N, dtype=tdt) if dtype != "float32" else _ints(S, M, N)
    c, pad = _padded((M, N), tdt)
    k(x, c)
    assert torch.equal(c.float(), x.float().sum(0))
    assert not pad.any()


# ---- shared-memory destination --------------------------------------------------------------------------------
@pytest.mark.gpu
def test_shared_destination_tile():
    M, N = 128, 128
    k = tilex.compile(shared_accumulate(M, N))
    a = _ints(M, N)
    b = torch.zeros(M, N, device="cuda")
    k(a, b)
    assert torch.equal(b, a + torch.roll(a, -32, dims=0))
