"""One-value vectors of 8/16-bit elements (the zero fill of a bounds-guarded copy, T.fill) written in 32-bit words
(`tilex.transform.sub_word_fills`): CPU compile checks and IR rewrites, GPU values."""
import pytest
import tvm
from tvm import tirx

import tilex
import tilex.language as T
from tilex.transform.sub_word_fills import needs_words, sub_word_fills_body

EIGHT_BIT = ["float8_e4m3", "float8_e5m2", "int8", "uint8"]
SUB_WORD = EIGHT_BIT + ["int16", "uint16"]


def ragged_copy(dtype, dst="shared", M=100, N=128, bm=64):
    """O = X through a tile whose last block of rows runs past M (the guarded copy fills those rows with 0)."""

    @T.prim_func
    def main(X: T.Tensor((M, N), dtype), O: T.Tensor((M, N), dtype)):
        with T.Kernel(T.ceildiv(M, bm), threads=128) as bx:
            if dst == "shared":
                t = T.alloc_shared((bm, N), dtype)
            else:
                t = T.alloc_fragment((bm, N), dtype)
            T.copy(X[bx * bm, 0], t)
            T.copy(t, O[bx * bm, 0])

    return main


def padded_copy(dtype, M=100, N=128, bm=64):
    """P (ceil(M / bm) * bm rows) = X with the rows past M zero: the zero fill reaches global memory."""

    @T.prim_func
    def main(X: T.Tensor((M, N), dtype), P: T.Tensor((T.ceildiv(M, bm) * bm, N), dtype)):
        with T.Kernel(T.ceildiv(M, bm), threads=128) as bx:
            t = T.alloc_shared((bm, N), dtype)
            T.copy(X[bx * bm, 0], t)
            T.copy(t, P[bx * bm, 0])

    return main


def filled(dtype, value, M=64, N=128):
    """O = `value` everywhere, through a T.fill of a shared tile (`value` None: X[0])."""

    @T.prim_func
    def main(X: T.Tensor((4,), dtype), O: T.Tensor((M, N), dtype)):
        with T.Kernel(1, threads=128) as bx:
            t = T.alloc_shared((M, N), dtype)
            if value is None:
                T.fill(t, X[0])
            else:
                T.fill(t, value)
            T.copy(t, O)

    return main


def _source(prog):
    return tilex.compile(prog, target="sm_90a").get_kernel_source()


@pytest.mark.parametrize("dtype", SUB_WORD)
@pytest.mark.parametrize("dst", ["shared", "fragment"])
def test_guarded_copy_fills_words(dtype, dst):
    src = _source(ragged_copy(dtype, dst))
    assert "} else {" in src  # the bounds guard
    assert "make_uint4((uint)0, (uint)0, (uint)0, (uint)0)" in src or "make_uint2((uint)0, (uint)0)" in src


@pytest.mark.parametrize("dtype", ["float8_e4m3", "int16"])
def test_zero_filled_rows_reach_global_memory(dtype):
    assert "} else {" in _source(padded_copy(dtype))


@pytest.mark.parametrize("dtype", EIGHT_BIT)
def test_fill_with_zero_and_with_a_value(dtype):
    assert "make_uint4((uint)0, (uint)0, (uint)0, (uint)0)" in _source(filled(dtype, 0))
    src = _source(filled(dtype, None))
    assert "16843009" in src  # the byte repeated: * 0x01010101


def test_integer_constant_is_folded_into_the_word():
    assert "(uint)50529027" in _source(filled("int8", 3))  # 0x03030303
    assert "(uint)4294901758" in _source(filled("int16", -2))  # 0xfffefffe


def test_float8_constant_other_than_zero_is_computed():
    assert "__nv_fp8_e4m3(0x1.8p+0f" in _source(filled("float8_e4m3", 1.5))


def _store(dtype, value, lanes):
    buf = tirx.decl_buffer((64,), dtype, "t", scope="shared.dyn")
    vec = tirx.Broadcast(tirx.const(value, dtype), lanes)
    return tirx.BufferStore(buf, vec, [tirx.Ramp(tirx.const(0, "int32"), tirx.const(1, "int32"), lanes)])


def test_rewrite_of_a_float8_zero_vector():
    out = sub_word_fills_body(_store("float8_e4m3fn", 0.0, 16))
    assert isinstance(out.value, tvm.ir.Call) and out.value.op.name == "tirx.reinterpret"
    words = out.value.args[0]
    assert isinstance(words, tirx.Broadcast) and str(words.dtype) == "uint32x4" and int(words.value.value) == 0


def test_rewrite_keeps_what_cuda_prints():
    for dtype, lanes in (("float16", 8), ("bfloat16", 8), ("float8_e4m3fn", 4), ("int8", 4), ("float32", 4)):
        store = _store(dtype, 0, lanes)
        assert sub_word_fills_body(store).same_as(store), dtype


def test_which_vectors_need_words():
    assert needs_words("float8_e4m3fnx8") and needs_words("int8x16") and needs_words("uint16x8")
    assert not needs_words("float16x8") and not needs_words("int8x4") and not needs_words("float32x8")


# ---- values (GPU) --------------------------------------------------------------------------------------------------
def _torch_dtype(torch, dtype):
    return {"float8_e4m3": torch.float8_e4m3fn, "float8_e5m2": torch.float8_e5m2, "int8": torch.int8,
            "uint8": torch.uint8, "int16": torch.int16, "uint16": torch.uint16}[dtype]


def _random(torch, dtype, shape):
    if dtype.startswith("float8"):
        return torch.randn(shape, device="cuda").to(_torch_dtype(torch, dtype))
    return torch.randint(1, 100, shape, device="cuda").to(_torch_dtype(torch, dtype))


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", SUB_WORD)
@pytest.mark.parametrize("dst", ["shared", "fragment"])
def test_ragged_copy_gpu(dtype, dst):
    torch = pytest.importorskip("torch")
    x = _random(torch, dtype, (100, 128))
    k = tilex.compile(ragged_copy(dtype, dst), out_idx=[1])
    assert torch.equal(k(x).view(torch.uint8), x.view(torch.uint8))


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", SUB_WORD)
def test_guard_fills_zeros_gpu(dtype):
    torch = pytest.importorskip("torch")
    x = _random(torch, dtype, (100, 128))
    p = tilex.compile(padded_copy(dtype), out_idx=[1])(x)
    assert torch.equal(p[:100].view(torch.uint8), x.view(torch.uint8))
    assert not p[100:].view(torch.uint8).any()


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", EIGHT_BIT)
def test_fill_gpu(dtype):
    torch = pytest.importorskip("torch")
    x = _random(torch, dtype, (4,))
    o = tilex.compile(filled(dtype, None), out_idx=[1])(x)
    assert torch.equal(o.view(torch.uint8), x[:1].view(torch.uint8).expand(64, 128))
    o = tilex.compile(filled(dtype, 0), out_idx=[1])(x)
    assert not o.view(torch.uint8).any()
