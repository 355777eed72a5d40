"""SubByteAccesses (transform/sub_byte_access.py): float4_e2m1fn / int4 / ... elements stored and widened through
whole bytes and 32-bit words, as TileLang's block-wise FP4 activation quantization writes them.

CPU tests read the CUDA tilex generates for sm_90a, and run sub_byte.h's encoder as host code (nvcc); the GPU test
checks values against tilex.quant's torch codes."""
import re
import subprocess

import pytest
import torch
import tvm

import tilex
import tilex.language as T
from tilex import env
from tilex.engine import nvcc
from tilex.quant import codes as quant_codes
from tilex.transform.sub_byte_access import constant_code, is_sub_byte


def fp4_quantize(M=256, N=1024, bm=32, g=32, out_dtype="float4_e2m1fn"):
    """x / amax of each row's group of `g`, clamped to +-6, as `out_dtype` codes through registers and shared
    memory (the shape of TileLang's deepseek_v4 act_quant)."""

    @T.prim_func
    def main(x: T.Tensor((M, N), "bfloat16"), quant: T.Tensor((M, N), out_dtype),
             scale: T.Tensor((M, N // g), "float32")):
        with T.Kernel(M // bm, N // g, threads=128) as (bx, by):
            x_s = T.alloc_shared((bm, g), "bfloat16")
            x_l = T.alloc_fragment((bm, g), "bfloat16")
            amax = T.alloc_fragment((bm,), "float32")
            y_l = T.alloc_fragment((bm, g), out_dtype)
            y_s = T.alloc_shared((bm, g), out_dtype)
            T.copy(x[bx * bm, by * g], x_s, disable_tma=True)
            T.copy(x_s, x_l)
            T.reduce_absmax(x_l, amax, dim=1)
            for i, j in T.Parallel(bm, g):
                y_l[i, j] = T.clamp(x_l[i, j] / amax[i], -6.0, 6.0)
            for i in T.Parallel(bm):
                scale[bx * bm + i, by] = amax[i]
            T.copy(y_l, y_s)
            T.copy(y_s, quant[bx * bm, by * g], disable_tma=True)

    return main


def fp4_round_trip(M=128, N=256, bm=32, g=128):
    """Codes written to shared memory beside another tile, stored, and read back widened to float32."""

    @T.prim_func
    def main(x: T.Tensor((M, N), "float32"), quant: T.Tensor((M, N), "float4_e2m1fn"),
             back: T.Tensor((M, N), "float32")):
        with T.Kernel(M // bm, N // g, threads=128) as (bx, by):
            w_s = T.alloc_shared((64,), "float32")
            y_l = T.alloc_fragment((bm, g), "float4_e2m1fn")
            y_s = T.alloc_shared((bm, g), "float4_e2m1fn")
            T.copy(x[0, 0:64], w_s)
            for i, j in T.Parallel(bm, g):
                y_l[i, j] = x[bx * bm + i, by * g + j] * w_s[j % 64]
            T.copy(y_l, y_s)
            T.copy(y_s, quant[bx * bm, by * g])
            for i, j in T.Parallel(bm, g):
                back[bx * bm + i, by * g + j] = T.cast(y_s[i, j], "float32")

    return main


def element_stores(n=64, dtype="int4"):
    """One element at a time: a register array and a shared tile written by a serial loop per thread."""

    @T.prim_func
    def main(x: T.Tensor((128, n), "int32"), out: T.Tensor((128, n), dtype), back: T.Tensor((128, n), "int32")):
        with T.Kernel(1, threads=128) as bx:
            regs = T.alloc_local((n,), dtype)
            tile = T.alloc_shared((128, n), dtype)
            tx = T.get_thread_binding()
            for j in T.serial(n):
                regs[j] = T.cast(x[tx, j], dtype)
            for j in T.serial(n):
                tile[tx, n - 1 - j] = regs[j]
            for j in T.serial(n):
                back[tx, j] = T.cast(tile[tx, j], "int32")
            T.copy(tile, out)

    return main


def _source(func, **kw):
    src = tilex.compile(func, target="sm_90a", **kw).get_kernel_source()
    return src[src.index('extern "C" __global__'):]


# ---- CPU: the CUDA --------------------------------------------------------------------------------------------------
def test_fp4_codes_are_stored_in_words():
    src = _source(fp4_quantize())
    # 4 codes a thread and step into one 16-bit word of the fragment, each encoded from float32
    assert re.search(r"\(\(ushort\*\)y_l_ptr\)\[par_l\] = \(\(ushort\)", src), src
    assert src.count("tilex::encode_float_code<2, 1>") == 4
    # registers -> shared: one 32-bit word; shared -> global: one 16-byte vector of 32 codes
    assert re.search(r"\(\(uint\*\)buf_dyn_shmem_ptr\)\[[^]]*\] = \(\(uint\*\)y_l_ptr\)\[0\];", src), src
    assert re.search(r"\*\(uint4\*\)\(quant_u32_ptr \+ [^;]*\) = \*\(uint4\*\)\(\(\(uint\*\)buf_dyn_shmem_ptr\)", src)
    assert "__nv_fp4_e2m1)" not in src  # no store through TVM's byte-wide fp4 element


def test_fp4_codes_read_back_are_decoded_beside_another_tile():
    src = _source(fp4_round_trip())
    assert "tilex::decode_one_f32<2, 4, 2, 1>" in src
    # the fp4 tile sits after the 256-byte float tile: its 16-bit and 32-bit views agree on where
    writes = re.findall(r"\(\(ushort\*\)buf_dyn_shmem_ptr\)\[\([^;]*\+ (\d+)\)\] = ", src)
    reads = re.findall(r"\(\(uint\*\)buf_dyn_shmem_ptr\) \+ \([^;]*\+ (\d+)\)\)", src)
    assert writes and reads and {int(w) * 2 for w in writes} == {int(r) * 4 for r in reads} == {256}, (writes, reads)


def test_element_stores_replace_only_their_bits():
    src = _source(element_stores())
    # registers: read-modify-write of the element's byte
    assert re.search(r"\(\(uchar\*\)regs_ptr\)\[\(j >> 1\)\] = \(\(uchar\)\(\(\(\(uint\)\(\(uchar\*\)regs_ptr\)",
                     src), src
    # shared memory: the atomic update of the element's bits in its 32-bit word
    assert "tilex::store_code(" in src
    # widened back: the sign extension of the 4-bit code
    assert "<< (uint)28" in src and ">> 28" in src


def test_other_stored_values_are_refused():
    @T.prim_func
    def main(a: T.Tensor((128, 8), "int4"), b: T.Tensor((128, 8), "int4")):
        with T.Kernel(1, threads=128) as bx:
            regs = T.alloc_local((8,), "int4")
            tx = T.get_thread_binding()
            for j in T.serial(8):
                regs[j] = a[tx, j] + b[tx, j]
            for j in T.serial(8):
                a[tx, j] = regs[j]

    with pytest.raises(NotImplementedError, match="int4 buffer 'regs'"):
        tilex.compile(main, target="sm_90a")


def test_sub_byte_types():
    assert is_sub_byte("int4") and is_sub_byte("uint2") and is_sub_byte("float4_e2m1fn") and is_sub_byte("uint1")
    assert not is_sub_byte("bool") and not is_sub_byte("int8") and not is_sub_byte("float8_e4m3fn")


@pytest.mark.parametrize("dtype, value, code", [
    ("float4_e2m1fn", 0.75, 2), ("float4_e2m1fn", 2.5, 4), ("float4_e2m1fn", 5.0, 6), ("float4_e2m1fn", 5.5, 7),
    ("float4_e2m1fn", -6.0, 15), ("float4_e2m1fn", -0.0, 8), ("float4_e2m1fn", 0.25, 0),
    ("int4", -1, 15), ("int4", 7, 7), ("uint2", 3, 3), ("int2", -2, 2),
])
def testconstant_codes(dtype, value, code):
    const = tvm.tirx.FloatImm(dtype, value) if "float" in dtype else tvm.tirx.IntImm(dtype, value)
    assert constant_code(const) == code


@pytest.mark.skipif(not nvcc.nvcc_available(), reason="needs nvcc")
def test_encoder_matches_the_torch_codes(tmp_path):
    """sub_byte.h's encode_float_code<2, 1>, compiled as host code, against tilex.quant.codes.encode (nearest, ties
    to even, saturated) on every multiple of 1/16 in [-8, 8] and a few specials."""
    values = [k / 16 for k in range(-128, 129)] + [-0.0, 1e-30, -1e-30, 6.0001, -1e9, float("inf"), float("-inf")]
    src = tmp_path / "enc.cu"
    lines = ",".join(repr(float(v)).replace("inf", "INFINITY") for v in values)
    src.write_text('#include "tilex/sub_byte.h"\n#include <cstdio>\n'
                   f"static const float xs[] = {{{lines}}};\n"
                   "int main() { for (float x : xs) printf(\"%u\\n\", tilex::encode_float_code<2, 1>(x)); }\n")
    exe = tmp_path / "enc"
    subprocess.run([env.find_nvcc(), "-std=c++17", f"-I{env.include_dir()}", "-o", str(exe), str(src)], check=True,
                   capture_output=True)
    got = [int(line) for line in subprocess.run([str(exe)], check=True, capture_output=True,
                                                text=True).stdout.split()]
    want = quant_codes.encode(torch.tensor(values, dtype=torch.float64), "float4_e2m1fn").tolist()
    assert got == want


# ---- GPU: values ----------------------------------------------------------------------------------------------------
@pytest.mark.gpu
def test_fp4_round_trip_values():
    kernel = tilex.compile(fp4_round_trip(), out_idx=[1, 2])
    x = torch.randn(128, 256, device="cuda") * 3
    quant, back = kernel(x)
    w = x[0, :64].repeat(4)
    expect = quant_codes.encode((x * w).cpu(), "float4_e2m1fn")
    packed = (expect[:, 0::2] | (expect[:, 1::2] << 4)).to(torch.uint8)
    assert torch.equal(quant.view(torch.uint8).cpu(), packed)
    torch.testing.assert_close(back.cpu(), quant_codes.decode(expect, "float4_e2m1fn").float())


@pytest.mark.gpu
def test_int4_element_stores_values():
    kernel = tilex.compile(element_stores(), out_idx=[1, 2])
    x = torch.randint(-8, 8, (128, 64), device="cuda", dtype=torch.int32)
    out, back = kernel(x)
    torch.testing.assert_close(back, x.flip(1))
    nib = (x.flip(1) & 15).to(torch.uint8)
    assert torch.equal(out.view(torch.uint8), nib[:, 0::2] | (nib[:, 1::2] << 4))
