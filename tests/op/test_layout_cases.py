"""Tile extents and fragment layouts that TileLang programs rely on (CPU: programs compiled for sm_90a; GPU: values):

* slices between scalars the body assigned (``H0 = by * 64; H1 = H0 + 64; Q[H0:H1, :]``) have constant extents;
* a 1-d fragment reduced to one element (``T.reduce_max(x, m)`` with m of shape (1,)) is held by every thread that
  held part of x, and read as ``m[0]`` in T.Parallel or by every thread outside;
* a T.Parallel reading a small fragment laid out elsewhere (a broadcast ``c[i]``, a row ``a[k, i]`` of an inner
  serial loop) gets it where its iterations run, settled by a conversion (or staging) when it was laid out otherwise;
* ``T.reshape`` of a fragment is the same registers seen with another shape.
"""
import warnings

import numpy as np
import pytest
import tvm

import tilex
import tilex.language as T
from tilex.layout import Fragment, LayoutError
from tilex.layout.convert import pulled_back, reads_own_elements
from tilex.layout.project import project
from tilex.layout.reinterpret import reshape_fragment
from tilex.op.base import TileOpError

SM90 = "sm_90a"


def compile_with_notes(prog, **kw):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", tilex.LayoutConversionWarning)
        k = tilex.compile(prog, target=SM90, cache=False, **kw)
    return k, [str(w.message) for w in caught if w.category is tilex.LayoutConversionWarning]


# ---- extents through scalars --------------------------------------------------------------------------------------
def head_slices(H=64, D=128, heads=256):
    @T.prim_func
    def main(Q: T.Tensor((4, heads, D), "float16"), O: T.Tensor((4, heads, D), "float16")):
        with T.Kernel(4, heads // H, threads=128) as (bx, by):
            Qs = T.alloc_shared([H, D], "float16")
            H0 = by * H
            H1 = H0 + H
            T.copy(Q[bx, H0:H1, :], Qs)
            T.copy(Qs, O[bx, H0:H1, :])

    return main


def blocks_in_loop(n=512, BI=64):
    @T.prim_func
    def main(A: T.Tensor((n,), "float32"), O: T.Tensor((n,), "float32")):
        with T.Kernel(1, threads=128) as bx:
            s = T.alloc_shared([BI], "float32")
            for b in T.serial(n // BI):
                i_st = b * BI
                i_ed = (b + 1) * BI
                T.copy(A[i_st:i_ed], s)
                for i in T.Parallel(i_ed - i_st):
                    O[i_st + i] = s[i] * 2.0

    return main


def region_extents(func):
    """The extents of every tile-operator region in `func`."""
    from tilex.ir.names import REGION_OP
    from tilex.ir.visit import is_op_call, walk

    out = []
    walk(func.body, (tvm.ir.Call, lambda n: out.append([str(e) for e in n.args[2:]])
                     if is_op_call(n, REGION_OP) else None))
    return out


def test_a_slice_between_two_scalars_has_a_constant_extent():
    f = head_slices()
    assert ["1", "64", "128"] in region_extents(f)
    src = tilex.compile(f, target=SM90).get_kernel_source()
    assert "blockIdx.y" in src


def test_extents_inside_a_loop_and_a_parallel_extent_fold():
    f = blocks_in_loop()
    assert ["64"] in region_extents(f)
    tilex.compile(f, target=SM90)


def test_a_truly_dynamic_extent_is_still_refused():
    @T.prim_func
    def clipped(A: T.Tensor((500,), "float32"), O: T.Tensor((64,), "float32")):
        with T.Kernel(8, threads=64) as bx:
            s = T.alloc_shared([64], "float32")
            st = bx * 64
            ed = T.min(st + 64, 500)
            T.copy(A[st:ed], s)
            T.copy(s, O)

    with pytest.raises(TileOpError, match="compile-time constants"):
        tilex.compile(clipped, target=SM90)


def test_two_reads_of_memory_are_not_assumed_equal():
    # a and b read Cnt[0] at different times: b - a is not known to be 64
    @T.prim_func
    def reread(A: T.Tensor((1024,), "float32"), Cnt: T.Tensor((1,), "int32"), O: T.Tensor((64,), "float32")):
        with T.Kernel(1, threads=64) as bx:
            s = T.alloc_shared([64], "float32")
            a = Cnt[0]
            Cnt[0] = 0
            b = Cnt[0] + 64
            T.copy(A[a:b], s)
            T.copy(s, O)

    with pytest.raises(TileOpError, match="compile-time constants"):
        tilex.compile(reread, target=SM90)


# ---- a reduction to one element -----------------------------------------------------------------------------------
def test_projecting_away_every_dimension_replicates_over_the_holders():
    f = Fragment([256], lambda i: i % 128, lambda i: i // 128)
    p, terms = project(f, [0])
    assert list(p.input_shape) == [1] and int(p.replicate) == 128 and p.local_size == 1
    held = sorted(int(p.map_numpy(np.array([0]), rep=r)[0][0]) for r in range(128))
    assert held == list(range(128))
    assert sorted((sc, e) for sc, e, _ in terms) == [(1, 32), (32, 4)]
    # a tile of one thread: its one holder
    q, terms = project(Fragment([4], lambda i: 0 * i, lambda i: i), [0])
    assert int(q.replicate) == 1 and terms == [] and int(q.map_numpy(np.array([0]))[0][0]) == 0


def scalar_reduction(N=256, threads=128, read_outside=False, kind="absmax"):
    red = getattr(T, f"reduce_{kind}")

    @T.prim_func
    def main(X: T.Tensor((N,), "float32"), O: T.Tensor((N,), "float32"), S: T.Tensor((1,), "float32")):
        with T.Kernel(1, threads=threads) as bx:
            x = T.alloc_fragment((N,), "float32")
            m = T.alloc_fragment((1,), "float32")
            T.copy(X, x)
            red(x, m, dim=0)
            for i in T.Parallel(N):
                O[i] = x[i] / m[0]
            if read_outside:
                S[0] = m[0] * 2.0
            else:
                for i in T.Parallel(1):
                    S[i] = m[0]

    return main


@pytest.mark.parametrize("read_outside", [False, True])
def test_a_fragment_reduced_to_one_element_compiles(read_outside):
    k, notes = compile_with_notes(scalar_reduction(read_outside=read_outside))
    src = k.get_kernel_source()
    assert "tilex::shfl_xor" in src
    if read_outside:  # every thread reads it: the holders' value goes to the others through shared memory
        assert any("fragment 'm'" in n for n in notes) and "m_exchange" in src


# ---- T.Parallel reading fragments laid out elsewhere --------------------------------------------------------------
def broadcast_laid_out_elsewhere(M=128, N=64, twice=False):
    """x is laid out by the first loop (its own coalesced plan) and read as a row broadcast x[i] by the second."""
    @T.prim_func
    def main(X: T.Tensor((M,), "float32"), A: T.Tensor((M, N), "float32"), O: T.Tensor((M, N), "float32")):
        with T.Kernel(1, threads=128) as bx:
            x = T.alloc_fragment((M,), "float32")
            acc = T.alloc_fragment((M, N), "float32")
            for i in T.Parallel(M):
                x[i] = X[i] * 2.0
            if twice:  # a second writer: x cannot become a shared tile, it is converted before the reader
                for i in T.Parallel(M):
                    x[i] = x[i] + 1.0
            T.copy(A, acc)
            for i, j in T.Parallel(M, N):
                acc[i, j] = acc[i, j] * x[i]
            T.copy(acc, O)

    return main


@pytest.mark.parametrize("twice", [False, True])
def test_a_broadcast_operand_laid_out_elsewhere_is_settled(twice):
    k, notes = compile_with_notes(broadcast_laid_out_elsewhere(twice=twice))
    (note,) = [n for n in notes if "fragment 'x'" in n]
    assert "T.Parallel(128, 64)" in note and " needs " in note
    assert ("converted before it" in note) if twice else ("staged through shared memory" in note)


def mix(hc=4, hb=512, threads=128):
    """TileLang's mHC post-mixing: small fragments copied from global memory, read as c[i] and a[k, i] with k an inner
    serial loop."""
    @T.prim_func
    def main(A: T.Tensor((hc, hc), "float32"), B: T.Tensor((hc, hb), "float32"), C: T.Tensor((hc,), "float32"),
             D: T.Tensor((hb,), "float32"), X: T.Tensor((hc, hb), "float32")):
        with T.Kernel(1, threads=threads) as bx:
            a = T.alloc_fragment((hc, hc), "float32")
            c = T.alloc_fragment(hc, "float32")
            b = T.alloc_fragment((hc, hb), "float32")
            d = T.alloc_fragment(hb, "float32")
            x = T.alloc_fragment((hc, hb), "float32")
            T.copy(A, a)
            T.copy(C, c)
            T.copy(B, b)
            T.copy(D, d)
            for i, j in T.Parallel(hc, hb):
                x[i, j] = c[i] * d[j]
                for k in T.serial(hc):
                    x[i, j] += a[k, i] * b[k, j]
            T.copy(x, X)

    return main


def test_reads_through_an_inner_serial_loop_compile():
    k, notes = compile_with_notes(mix())
    assert "for (int k = 0; k < 4; ++k)" in k.get_kernel_source()


def test_pulled_back_with_an_inner_loop_and_a_broadcast():
    loop = Fragment([4, 512], lambda i, j: (i * 512 + j) // 4 % 128, lambda i, j: [i * 4 + j % 4])
    i, j, k = (tvm.tirx.Var(n, "int32") for n in "ijk")
    # b[k, j]: row k whole in each iteration's thread, j where the loop runs it
    frag = pulled_back(loop, [k, j], [i, j], [4, 512], [4, 512], inner=[(k, 0, 4)])
    assert frag is not None and frag.local_size == 16 and int(frag.replicate) == 1
    assert reads_own_elements(loop, frag, [k, j], [i, j], [4, 512], inner=[(k, 0, 4)])
    # a[k, i]: i used, j not: replicated over the threads of the j's
    frag = pulled_back(loop, [k, i], [i, j], [4, 512], [4, 4], inner=[(k, 0, 4)])
    assert frag is not None and int(frag.replicate) == 128
    # an inner loop that does not cover the dimension: no such fragment
    assert pulled_back(loop, [k, j], [i, j], [4, 512], [4, 512], inner=[(k, 0, 2)]) is None


# ---- T.reshape of a fragment --------------------------------------------------------------------------------------
def test_reshape_fragment_keeps_threads_and_registers():
    f = Fragment([256, 128], lambda i, j: (i % 64) * 2 + j // 64, lambda i, j: [i // 64 * 64 + j % 64])
    g = reshape_fragment(f, [256, 4, 32])
    a, b, c = np.meshgrid(np.arange(256), np.arange(4), np.arange(32), indexing="ij")
    t_g, (l_g,) = g.map_numpy(a, b, c)
    t_f, (l_f,) = f.map_numpy(a, b * 32 + c)
    assert (t_g == t_f).all() and (l_g == l_f).all()
    assert reshape_fragment(g, [256, 128]).is_equal(f)
    assert reshape_fragment(reshape_fragment(f, [256 * 128]), [256, 128]).is_equal(f)
    with pytest.raises(LayoutError, match="elements"):
        reshape_fragment(f, [256, 4, 31])


def test_a_three_dimensional_coalesced_plan_inverts():
    # (i0 * 32 + i1 * 8 + i2 // 4) % 128: TVM does not fuse the three inputs itself; the inverse goes through their
    # row-major offset
    from tilex.layout._expr import domain_grid
    from tilex.op.partition import coalesced_plan

    f = coalesced_plan([64, 4, 32], 128, 4)
    grid = domain_grid([64, 4, 32])
    thread, (local,) = f.map_numpy(*grid)
    back = f.inverse().map_numpy(thread, local)
    assert all(np.array_equal(np.broadcast_to(b, g.shape), g) for b, g in zip(back, grid))


def heads_reduce(N=64, Q=4, H=32, D=64, threads=128):
    """TileLang's lightning indexer: a gemm's (N, Q*H) accumulator read per head through a (N, Q, H) reshape."""
    @T.prim_func
    def main(K: T.Tensor((N, D), "float16"), Qm: T.Tensor((Q * H, D), "float16"), W: T.Tensor((Q, H), "float32"),
             O: T.Tensor((Q, N), "float32")):
        with T.Kernel(1, threads=threads) as bx:
            ks = T.alloc_shared((N, D), "float16")
            qs = T.alloc_shared((Q * H, D), "float16")
            s = T.alloc_fragment((N, Q * H), "float32")
            s3 = T.reshape(s, (N, Q, H))
            w = T.alloc_fragment((Q, H), "float32")
            lg = T.alloc_fragment((N, Q), "float32")
            T.copy(K, ks)
            T.copy(Qm, qs)
            T.copy(W, w)
            T.gemm(ks, qs, s, transpose_B=True, clear_accum=True)
            for n, q, h in T.Parallel(N, Q, H):
                s3[n, q, h] = T.max(s3[n, q, h], 0) * w[q, h]
            T.reduce_sum(s3, lg, dim=-1)
            for q, n in T.Parallel(Q, N):
                O[q, n] = lg[n, q]

    return main


def reshape_first(M=64, N=128, threads=128):
    """The reshaped view is laid out first (a loop writing it); the base takes its layout from the view."""
    @T.prim_func
    def main(A: T.Tensor((M, 4, N // 4), "float32"), O: T.Tensor((M,), "float32")):
        with T.Kernel(1, threads=threads) as bx:
            f = T.alloc_fragment((M, N), "float32")
            f3 = T.reshape(f, (M, 4, N // 4))
            r = T.alloc_fragment((M,), "float32")
            for i, j, k in T.Parallel(M, 4, N // 4):
                f3[i, j, k] = A[i, j, k] * 2.0
            T.reduce_sum(f, r, dim=1)
            T.copy(r, O)

    return main


def test_reshape_of_a_gemm_accumulator_compiles():
    src = tilex.compile(heads_reduce(), target=SM90).get_kernel_source()
    assert "wgmma" in src and "tilex::shfl_xor" in src


def test_reshape_laid_out_through_the_view_compiles():
    tilex.compile(reshape_first(), target=SM90)


def test_reshape_of_a_fragment_needs_the_same_element_count():
    with pytest.raises(ValueError, match="has 128 elements but the shape"):
        @T.prim_func
        def bad(A: T.Tensor((128,), "float32")):
            with T.Kernel(1, threads=128) as bx:
                f = T.alloc_fragment((128,), "float32")
                f2 = T.reshape(f, (8, 8))


# ---- GPU: values --------------------------------------------------------------------------------------------------
def _torch():
    return pytest.importorskip("torch")


@pytest.mark.gpu
def test_head_slices_gpu():
    torch = _torch()
    q = torch.randn(4, 256, 128, device="cuda", dtype=torch.float16)
    o = torch.zeros_like(q)
    tilex.compile(head_slices())(q, o)
    torch.testing.assert_close(o, q)


@pytest.mark.gpu
def test_blocks_in_loop_gpu():
    torch = _torch()
    a = torch.randn(512, device="cuda")
    o = torch.zeros_like(a)
    tilex.compile(blocks_in_loop())(a, o)
    torch.testing.assert_close(o, a * 2)


@pytest.mark.gpu
@pytest.mark.parametrize("read_outside", [False, True])
@pytest.mark.parametrize("kind", ["absmax", "sum"])
def test_scalar_reduction_gpu(read_outside, kind):
    torch = _torch()
    x = torch.randn(256, device="cuda")
    o, s = torch.zeros_like(x), torch.zeros(1, device="cuda")
    tilex.compile(scalar_reduction(read_outside=read_outside, kind=kind))(x, o, s)
    m = x.abs().max() if kind == "absmax" else x.sum()
    torch.testing.assert_close(o, x / m, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(s, (m * 2 if read_outside else m).reshape(1), rtol=1e-4, atol=1e-5)


@pytest.mark.gpu
@pytest.mark.parametrize("twice", [False, True])
def test_broadcast_laid_out_elsewhere_gpu(twice):
    torch = _torch()
    x, a = torch.randn(128, device="cuda"), torch.randn(128, 64, device="cuda")
    o = torch.zeros_like(a)
    tilex.compile(broadcast_laid_out_elsewhere(twice=twice))(x, a, o)
    torch.testing.assert_close(o, a * (x * 2 + (1 if twice else 0))[:, None])


@pytest.mark.gpu
def test_mix_gpu():
    torch = _torch()
    a, b = torch.randn(4, 4, device="cuda"), torch.randn(4, 512, device="cuda")
    c, d = torch.randn(4, device="cuda"), torch.randn(512, device="cuda")
    x = torch.zeros(4, 512, device="cuda")
    tilex.compile(mix())(a, b, c, d, x)
    torch.testing.assert_close(x, c[:, None] * d[None, :] + a.t() @ b, rtol=1e-4, atol=1e-4)


@pytest.mark.gpu
def test_heads_reduce_gpu():
    torch = _torch()
    k, q = torch.randn(64, 64, device="cuda", dtype=torch.float16), torch.randn(128, 64, device="cuda",
                                                                               dtype=torch.float16)
    w = torch.randn(4, 32, device="cuda")
    o = torch.zeros(4, 64, device="cuda")
    tilex.compile(heads_reduce())(k, q, w, o)
    s = (k.float() @ q.float().t()).reshape(64, 4, 32)
    want = (s.clamp_min(0) * w[None]).sum(-1).t()
    torch.testing.assert_close(o, want, rtol=1e-2, atol=1e-2)


@pytest.mark.gpu
def test_reshape_first_gpu():
    torch = _torch()
    a = torch.randn(64, 4, 32, device="cuda")
    o = torch.zeros(64, device="cuda")
    tilex.compile(reshape_first())(a, o)
    torch.testing.assert_close(o, a.reshape(64, 128).sum(-1) * 2, rtol=1e-4, atol=1e-4)
