"""On the GPU: swizzled gemms match torch, the swizzle covers every block once, T.print's output."""
import re

import pytest

torch = pytest.importorskip("torch")

import tilex  # noqa: E402
import tilex.language as T  # noqa: E402
from programs import matmul  # noqa: E402


@pytest.mark.gpu
@pytest.mark.parametrize("shape,panel,order", [((1000, 1300, 512), 3, "row"), ((1000, 1300, 512), 3, "column"),
                                               ((2048, 2048, 1024), 4, "row"), ((257, 2000, 256), 10, "column")],
                         ids=lambda x: "x".join(map(str, x)) if isinstance(x, tuple) else str(x))
def test_swizzled_gemm_matches_torch(shape, panel, order):
    M, N, K = shape
    kernel = tilex.compile(matmul(M, N, K, panel, order, bk=64), out_idx=[2])
    a = torch.randn((M, K), device="cuda", dtype=torch.float16)
    b = torch.randn((K, N), device="cuda", dtype=torch.float16)
    c = kernel(a, b)
    ref = a.float() @ b.float()
    torch.testing.assert_close(c.float() / K ** 0.5, ref / K ** 0.5, atol=1e-2, rtol=1e-2)


@pytest.mark.gpu
@pytest.mark.parametrize("grid,panel,order", [((13, 7), 3, "row"), ((13, 7), 3, "column"), ((5, 40), 8, "row"),
                                              ((64, 2), 5, "column")])
def test_every_block_is_visited_once(grid, panel, order):
    gx, gy = grid

    @T.prim_func
    def cover(O: T.Tensor((gy, gx), "int32")):
        with T.Kernel(gx, gy, threads=32) as (bx, by):
            T.use_swizzle(panel, order=order)
            O[by, bx] = O[by, bx] + 1  # one warp: every lane reads 0 and stores 1 for its block's cell

    kernel = tilex.compile(cover)
    out = torch.zeros((gy, gx), device="cuda", dtype=torch.int32)
    kernel(out)
    torch.cuda.synchronize()
    assert (out == 1).all(), out


@pytest.mark.gpu
def test_print_output(capfd):
    @T.prim_func
    def show(A: T.Tensor((16, 32), "float16"), O: T.Tensor((16, 16), "float32")):
        with T.Kernel(1, 1, threads=128) as (bx, by):
            A_s = T.alloc_shared((16, 32), "float16")
            F = T.alloc_fragment((16, 16), "float32")
            T.copy(A, A_s)
            T.print(A_s, msg="shared")
            for i, j in T.Parallel(16, 16):
                F[i, j] = T.Cast("float32", A_s[i, j]) + 1.0
            T.print(F, msg="frag")
            T.print(bx + 7, msg="scalar")
            T.copy(F, O)

    kernel = tilex.compile(show, out_idx=[1])
    a = torch.arange(16 * 32, device="cuda", dtype=torch.float32).reshape(16, 32).to(torch.float16)
    capfd.readouterr()
    o = kernel(a)
    torch.cuda.synchronize()
    out = capfd.readouterr().out
    torch.testing.assert_close(o, a[:, :16].float() + 1)
    shared = re.findall(r"msg='shared' block=\(0, 0, 0\) thread=\((\d+), 0, 0\) A_s\[(\d+), (\d+)\]=([\d.]+) "
                        r"\(float16\)", out)
    assert len(shared) == 16 * 32 and {t for t, *_ in shared} == {"0"}
    assert all(float(v) == int(i) * 32 + int(j) for _, i, j, v in shared)
    frag = re.findall(r"msg='frag' block=\(0, 0, 0\) thread=\((\d+), 0, 0\) F\[(\d+), (\d+)\]=([\d.]+) "
                      r"\(float32\)", out)
    assert sorted((int(i), int(j)) for _, i, j, _ in frag) == [(i, j) for i in range(16) for j in range(16)]
    assert all(float(v) == int(i) * 32 + int(j) + 1 for _, i, j, v in frag)
    assert len({t for t, *_ in frag}) > 1  # every thread prints the elements it holds
    scalar = re.findall(r"msg='scalar' block=\(0, 0, 0\) thread=\((\d+), 0, 0\) value=7 \(int32\)", out)
    assert sorted(int(t) for t in scalar) == list(range(128))
