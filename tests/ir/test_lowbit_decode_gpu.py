"""lowbit.h on a GPU: every code of every low-bit type, at every position of a chunk, decodes through
tilex::decode_chunk_f16 / _bf16 to exactly the value of a torch-side formula, and so does the device oracle
tilex::decode_one_f32 (bit for bit, zeros with their sign; a NaN code to any NaN)."""
import pytest

import tilex
import tilex.language as T
from tilex.ir import intrin, lowbit_chunk

TYPES = ([("uint", b, 0, 0) for b in range(1, 9)] + [("int", b, 0, 0) for b in range(1, 9)]
         + [("float", b, e, b - 1 - e) for b in range(3, 9) for e in range(1, b)])
CASES = [(ty, out) for ty in TYPES for out in ("float16", "bfloat16")
         if not (ty[0] == "float" and out == "float16" and ty[2] > 5)]  # fp16 holds at most 5 exponent bits


def _id(case):
    (kind, bits, e, m), out = case
    ty = f"e{e}m{m}" if kind == "float" else f"{kind}{bits}"
    return f"{ty}-{out}"


def decode_program(kind, bits, e, m, out_dtype, n, raw=False):
    """n threads, one chunk each: W (n*bits words) decoded into O (n*16 registers); R[i] = oracle(C[i])."""
    decode = intrin.name_of(intrin.decode_chunk(out_dtype, kind, bits, e, m, 0, 0, raw=raw))
    oracle = intrin.name_of(intrin.decode_one(kind, bits, e, m, 0))

    @T.prim_func
    def main(W: T.Tensor((n * bits,), "int32"), C: T.Tensor((n * 32,), "int32"), O: T.Tensor((n * 16,), "int32"),
             R: T.Tensor((n * 32,), "float32")):
        T.func_attr({"global_symbol": "lowbit_decode", "tirx.is_scheduled": True})
        tx = T.launch_thread("threadIdx.x", n)
        w = T.alloc_local((bits,), "uint32")
        o = T.alloc_local((16,), "uint32")
        for i in T.unroll(bits):
            w[i] = T.reinterpret("uint32", W[tx * bits + i])
        T.evaluate(T.call_extern("void", decode, T.address_of(w[0]), T.address_of(o[0])))
        for j in T.unroll(16):
            O[tx * 16 + j] = T.reinterpret("int32", o[j])
        for p in T.serial(32):
            R[tx * 32 + p] = T.call_extern("float32", oracle, C[tx * 32 + p])

    return main


def chunks_of(bits):
    """2 * 2**bits chunks; each code sits at every position, next to varying neighbours."""
    n = 1 << bits
    return ([[(k + p) % n for p in range(32)] for k in range(n)]
            + [[(5 * k + 3 * p + 1) % n for p in range(32)] for k in range(n)])


def reference(torch, kind, bits, e, m, codes):
    """The value of each code (float64), from the definition of the type."""
    c = codes.to(torch.int64)
    if kind == "uint":
        return c.double()
    if kind == "int":
        return torch.where(c >= 1 << (bits - 1), c - (1 << bits), c).double()
    bias = (1 << (e - 1)) - 1
    sign, ef, mf = (c >> (bits - 1)) & 1, (c >> m) & ((1 << e) - 1), c & ((1 << m) - 1)
    mag = torch.where(ef == 0, mf.double() * 2.0 ** (1 - bias - m),
                      (mf + (1 << m)).double() * _pow2(torch, ef - bias - m))
    if e == 5:  # IEEE style: the all-ones exponent is inf (mantissa 0) or NaN
        mag = torch.where(ef == 31, torch.where(mf == 0, float("inf"), float("nan")), mag)
    if (e, m) == (4, 3):  # float8_e4m3fn: S.1111.111 is NaN, nothing is inf
        mag = torch.where((ef == 15) & (mf == 7), float("nan"), mag)
    return torch.where(sign == 1, -mag, mag)


def _pow2(torch, n):
    """2.0 ** n for an int64 tensor n, exactly (from the float64 bits: CUDA's pow is not exact for every n)."""
    return ((n + 1023) << 52).view(torch.float64)


def assert_same(torch, got, want, what):
    nan = torch.isnan(want)
    assert torch.equal(torch.isnan(got), nan), f"{what}: NaN where the value is not, or the other way round"
    bad = (got.view(torch.int16) != want.view(torch.int16)) & ~nan
    if bool(bad.any()):
        i = int(bad.nonzero()[0])
        raise AssertionError(f"{what}: {int(bad.sum())} codes differ, first at {i}: got {float(got[i])!r} "
                             f"(0x{int(got.view(torch.int16)[i]) & 0xFFFF:04X}), want {float(want[i])!r}")


def run_decoders(torch, case, raw=False):
    """Every code of the case's type at every chunk position, decoded on the GPU: (codes C, decoded registers O
    (int32, two 16-bit results each), oracle values R (float32))."""
    (kind, bits, e, m), out_dtype = case
    chunks = chunks_of(bits)
    n = len(chunks)
    words = [w for codes in chunks for w in lowbit_chunk.pack_chunk(codes, bits)]
    W = torch.tensor([w - (1 << 32) if w >> 31 else w for w in words], dtype=torch.int32, device="cuda")
    C = torch.tensor([c for codes in chunks for c in codes], dtype=torch.int32, device="cuda")
    O = torch.zeros(n * 16, dtype=torch.int32, device="cuda")
    R = torch.zeros(n * 32, dtype=torch.float32, device="cuda")
    tilex.compile(decode_program(kind, bits, e, m, out_dtype, n, raw=raw))(W, C, O, R)
    torch.cuda.synchronize()
    return C, O, R


@pytest.mark.gpu
@pytest.mark.parametrize("case", CASES, ids=_id)
def test_every_code_decodes_exactly(case):
    torch = pytest.importorskip("torch")
    (kind, bits, e, m), out_dtype = case
    tdt = getattr(torch, out_dtype)
    C, O, R = run_decoders(torch, case)
    want = reference(torch, kind, bits, e, m, C).to(tdt)
    # register j of a chunk holds code 2j in its low half: little-endian, so the 16-bit view is in code order
    assert_same(torch, O.view(torch.int16).view(tdt), want, f"{_id(case)} decode_chunk")
    assert_same(torch, R.to(tdt), want, f"{_id(case)} decode_one_f32")


RAW_CASES = [c for c in CASES if lowbit_chunk.raw_scale_exponent(c[0][0], c[0][2], c[0][3], c[1]) is not None]


@pytest.mark.gpu
@pytest.mark.parametrize("case", RAW_CASES, ids=_id)
def test_raw_decode_is_the_value_over_a_power_of_two(case):
    """decode_chunk(raw=True) gives value * 2^-k exactly (k = raw_scale_exponent), for every code and position."""
    torch = pytest.importorskip("torch")
    (kind, bits, e, m), out_dtype = case
    k = lowbit_chunk.raw_scale_exponent(kind, e, m, out_dtype)
    C, O, _ = run_decoders(torch, case, raw=True)
    got = O.view(torch.int16).view(getattr(torch, out_dtype)).double() * 2.0 ** k
    want = reference(torch, kind, bits, e, m, C)
    bad = (got != want) | (torch.signbit(got) != torch.signbit(want))
    if bool(bad.any()):
        i = int(bad.nonzero()[0])
        raise AssertionError(f"{_id(case)}: {int(bad.sum())} codes differ, first code {int(C[i])} at {i}: got "
                             f"{float(got[i])!r} (raw 0x{int(O.view(torch.int16)[i]) & 0xFFFF:04X}), want "
                             f"{float(want[i])!r}")
