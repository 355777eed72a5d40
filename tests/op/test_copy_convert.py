"""T.copy that converts: ragged tiles zero-fill in vectors the CUDA codegen can print (fp16 global -> fp32
fragment), whole tiles keep 16-byte loads, and float8 converts through CUDA's 4-lane fp8 vector types (8 lanes
print a cast nvcc rejects). On a GPU: every float8 code converts exactly."""
import shutil

import pytest

import tilex
import tilex.language as T

FP8 = ("float8_e4m3fn", "float8_e5m2")

needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")


def widen(M, N, bm=64, bn=128):
    @T.prim_func
    def main(X: T.Tensor((M, N), "float16"), Y: T.Tensor((M, N), "float32")):
        with T.Kernel(T.ceildiv(N, bn), T.ceildiv(M, bm), threads=128) as (bx, by):
            x = T.alloc_fragment((bm, bn), "float32")
            T.copy(X[by * bm, bx * bn], x)
            T.copy(x, Y[by * bm, bx * bn])

    return main


@needs_nvcc
def test_ragged_widening_copy_compiles_with_16_byte_zero_fill():
    src = tilex.compile(widen(200, 136), target="sm_90a").get_kernel_source()
    body = src[src.rfind('extern "C" __global__'):]
    assert "make_float4(0x0p+0f" in body  # the fill of rows / columns past the edge, 4 floats at a time
    assert "make_ulonglong4" not in body


@needs_nvcc
def test_whole_widening_copy_keeps_16_byte_loads():
    src = tilex.compile(widen(256, 256), target="sm_90a").get_kernel_source()
    body = src[src.rfind('extern "C" __global__'):]
    assert "*(uint4*)(X_ptr" in body  # 8 halves per load


def convert(M, N, src, dst, via, bm=64, bn=128):
    """Y = X converted to dst's dtype, through a fragment or a shared tile of dtype `via`'s choice:
    "fragments" (X's dtype -> Y's dtype fragment to fragment), "global" (the global load converts into a
    fragment), "shared" (the global load converts into a shared tile)."""
    @T.prim_func
    def main(X: T.Tensor((M, N), src), Y: T.Tensor((M, N), dst)):
        with T.Kernel(T.ceildiv(N, bn), T.ceildiv(M, bm), threads=128) as (bx, by):
            if via == "fragments":
                x = T.alloc_fragment((bm, bn), src)
                y = T.alloc_fragment((bm, bn), dst)
                T.copy(X[by * bm, bx * bn], x)
                T.copy(x, y)
                T.copy(y, Y[by * bm, bx * bn])
            elif via == "global":
                y = T.alloc_fragment((bm, bn), dst)
                T.copy(X[by * bm, bx * bn], y)
                T.copy(y, Y[by * bm, bx * bn])
            else:
                s = T.alloc_shared((bm, bn), dst)
                T.copy(X[by * bm, bx * bn], s)
                T.copy(s, Y[by * bm, bx * bn])

    return main


PAIRS = [(f, o) for f in FP8 for o in ("float32", "float16", "bfloat16")]
PAIRS += [(o, f) for f, o in PAIRS]


@needs_nvcc
@pytest.mark.parametrize("via", ["fragments", "global", "shared"])
@pytest.mark.parametrize("src,dst", PAIRS, ids=lambda p: str(p))
def test_float8_conversions_compile(src, dst, via):
    src_code = tilex.compile(convert(256, 256, src, dst, via), target="sm_90a").get_kernel_source()
    assert "__nv_fp8" in src_code


@pytest.mark.gpu
@pytest.mark.parametrize("fp8", FP8)
def test_every_float8_code_converts_exactly(fp8):
    torch = pytest.importorskip("torch")
    tdt = getattr(torch, fp8)
    codes = torch.arange(256, dtype=torch.int32).to(torch.uint8).repeat(64, 1).cuda()  # 64 x 256: every code
    x = codes.view(tdt)
    for dst, tdst in (("float32", torch.float32), ("float16", torch.float16)):
        y = tilex.compile(convert(64, 256, fp8, dst, "fragments"), out_idx=[1])(x)
        ref = x.to(tdst)
        same = (y == ref) | (torch.isnan(y) & torch.isnan(ref))
        assert bool(same.all()), f"{fp8} -> {dst}: {int((~same).sum())} codes differ"
    # back: the finite values of the type, from fp32, round-trip to the same codes
    finite = x.float()[0]
    finite = finite[torch.isfinite(finite)].repeat(64, 1)[:, :128].contiguous()
    back = tilex.compile(convert(64, 128, "float32", fp8, "fragments"), out_idx=[1])(finite)
    assert torch.equal(back.view(torch.uint8), finite.to(tdt).view(torch.uint8))
