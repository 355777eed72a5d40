"""T.atomic_addx2 / T.atomic_addx4: consecutive elements added atomically, given by their first elements."""
import pytest

import tilex
import tilex.language as T


def scatter_rows(width, dtype="float32", rows=64, cols=128):
    @T.prim_func
    def scatter(Idx: T.Tensor((rows,), "int32"), X: T.Tensor((rows, cols), dtype), Out: T.Tensor((8, cols), dtype)):
        with T.Kernel(1, threads=128) as bx:
            s = T.alloc_shared((rows, cols), dtype)
            T.copy(X, s)
            for i, j in T.Parallel(rows, cols // width):
                if width == 4:
                    T.atomic_addx4(Out[Idx[i], j * 4], s[i, j * 4])
                else:
                    T.atomic_addx2(Out[Idx[i], j * 2], s[i, j * 2])

    return scatter


def test_vector_atomics_are_one_call_of_four_or_two_values():
    src = tilex.compile(scatter_rows(4), target="sm_90a").get_kernel_source()
    assert "tilex::atomic_add_vec<true>" in src
    src2 = tilex.compile(scatter_rows(2, "float16"), target="sm_90a").get_kernel_source()
    assert "tilex::atomic_add_vec<true>" in src2


def test_return_prev_is_refused_by_name():
    def build():
        @T.prim_func
        def bad(X: T.Tensor((4,), "float32"), Out: T.Tensor((4,), "float32")):
            with T.Kernel(1, threads=32) as bx:
                T.atomic_addx4(Out[0], X[0], return_prev=True)
        return tilex.compile(bad, target="sm_90a")

    with pytest.raises(NotImplementedError, match="atomic_addx4"):
        build()


def test_a_scalar_value_is_refused():
    def build():
        @T.prim_func
        def bad(X: T.Tensor((4,), "float32"), Out: T.Tensor((4,), "float32")):
            with T.Kernel(1, threads=32) as bx:
                T.atomic_addx4(Out[0], 1.0)
        return tilex.compile(bad, target="sm_90a")

    with pytest.raises(Exception, match="first of the elements"):
        build()


@pytest.mark.gpu
@pytest.mark.parametrize("width,dtype", [(4, "float32"), (2, "float16"), (2, "float32")])
def test_vector_atomics_accumulate_on_the_gpu(width, dtype):
    import torch

    tdt = getattr(torch, dtype)
    k = tilex.compile(scatter_rows(width, dtype))
    idx = torch.randint(0, 8, (64,), device="cuda", dtype=torch.int32)
    x = torch.randn(64, 128, device="cuda").to(tdt)
    out = torch.zeros(8, 128, device="cuda", dtype=tdt)
    k(idx, x, out)
    ref = torch.zeros(8, 128, device="cuda").index_add_(0, idx.long(), x.float())
    torch.testing.assert_close(out.float(), ref, atol=2e-2 if dtype == "float16" else 1e-4, rtol=1e-2)


def test_atomics_through_an_index_tensor_are_guarded():
    """Idx may hold the padding value 8 (one past the last row): the atomic then does not happen."""
    src = tilex.compile(scatter_rows(4), target="sm_90a").get_kernel_source()
    line = next(i for i, text in enumerate(src.splitlines()) if "atomic_add_vec" in text)
    assert "if (" in "\n".join(src.splitlines()[max(0, line - 3):line])


@pytest.mark.gpu
def test_padding_indices_add_nothing_on_the_gpu():
    import torch

    k = tilex.compile(scatter_rows(4))
    idx = torch.randint(0, 9, (64,), device="cuda", dtype=torch.int32)  # 8: padding, past the last row
    x = torch.randn(64, 128, device="cuda")
    out = torch.zeros(8, 128, device="cuda")
    k(idx, x, out)
    keep = idx < 8
    ref = torch.zeros(8, 128, device="cuda").index_add_(0, idx[keep].long(), x[keep])
    torch.testing.assert_close(out, ref, atol=1e-4, rtol=1e-4)
