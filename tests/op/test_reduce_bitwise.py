"""T.reduce_bitand / T.reduce_bitor / T.reduce_bitxor of integer tiles (CPU: generated CUDA and errors; GPU: values)."""
import functools
import operator

import pytest

import tilex
import tilex.language as T

KINDS = {"bitand": operator.and_, "bitor": operator.or_, "bitxor": operator.xor}


def bitwise_kernel(kind, dim, source="fragment", M=32, N=64, dtype="int32", clear=True, threads=128):
    red = getattr(T, f"reduce_{kind}")
    out_len = M if dim == 1 else N

    @T.prim_func
    def main(X: T.Tensor((M, N), dtype), O: T.Tensor((out_len,), dtype)):
        with T.Kernel(1, threads=threads) as bx:
            if source == "fragment":
                x = T.alloc_fragment((M, N), dtype)
            else:
                x = T.alloc_shared((M, N), dtype)
            o = T.alloc_fragment((out_len,), dtype)
            T.copy(X, x)
            if clear:
                red(x, o, dim=dim)
            else:
                T.fill(o, 6)
                red(x, o, dim=dim, clear=False)
            T.copy(o, O)

    return main


@pytest.mark.parametrize("kind, op", [("bitand", " & "), ("bitor", " | "), ("bitxor", " ^ ")])
def test_bitwise_reductions_generate_bit_operations(kind, op):
    src = tilex.compile(bitwise_kernel(kind, 1), target="sm_90a").get_kernel_source()
    assert op in src and "tilex::shfl_xor(" in src
    src = tilex.compile(bitwise_kernel(kind, 0, source="shared"), target="sm_90a").get_kernel_source()
    assert op in src


def test_bitand_starts_from_all_ones():
    src = tilex.compile(bitwise_kernel("bitand", 0, dtype="int16"), target="sm_90a").get_kernel_source()
    assert "(short)-1" in src


def test_bitwise_reduction_of_floats_is_a_type_error():
    with pytest.raises(TypeError, match="needs integer tiles"):
        bitwise_kernel("bitor", 1, dtype="float32")


@pytest.mark.gpu
@pytest.mark.parametrize("kind", list(KINDS))
@pytest.mark.parametrize("dim", [0, 1])
@pytest.mark.parametrize("source", ["fragment", "shared"])
@pytest.mark.parametrize("clear", [True, False])
def test_bitwise_reductions_gpu(kind, dim, source, clear):
    torch = pytest.importorskip("torch")
    M, N = 32, 64
    k = tilex.compile(bitwise_kernel(kind, dim, source, M, N, clear=clear), out_idx=[1])
    x = torch.randint(-2**31, 2**31 - 1, (M, N), device="cuda", dtype=torch.int32)
    got = k(x).cpu().tolist()
    rows = x.cpu().tolist() if dim == 1 else x.t().cpu().tolist()
    want = [functools.reduce(KINDS[kind], row) for row in rows]
    if not clear:
        want = [KINDS[kind](w, 6) for w in want]
    assert got == want
