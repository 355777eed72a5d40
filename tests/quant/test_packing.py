"""tilex.quant.pack / unpack: little-endian bit streams, checked by hand and against Python integers."""
import pytest
import torch

from tilex import dtypes, quant


def reference_pack_row(codes, bits):
    """Bytes of one row: element i at bits [i*bits, (i+1)*bits) of a little-endian integer."""
    stream = sum(int(c) << (i * bits) for i, c in enumerate(codes))
    return list(stream.to_bytes(len(codes) * bits // 8, "little"))


def random_codes(t, shape, seed):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, t.num_codes, shape, generator=g, dtype=torch.int64).to(torch.uint8)


def test_by_hand():
    assert quant.pack(torch.tensor([1, 2, 3, 4], dtype=torch.uint8), "uint4").tolist() == [0x21, 0x43]
    # 3 bits: byte 0 = 1 | 2 << 3 | 3 << 6 = 0xD1 (3's top bit, 0, opens byte 1); byte 1 = 4 << 1 | 5 << 4
    # = 0x58 (6 = 0b110 straddles: its low 0 closes byte 1, 0b11 opens byte 2); byte 2 = 0b11 | 7 << 2 = 0x1F
    codes = torch.tensor([1, 2, 3, 4, 5, 6, 7, 0], dtype=torch.uint8)
    assert quant.pack(codes, "int3").tolist() == [0xD1, 0x58, 0x1F]
    assert quant.pack(torch.tensor([1, 0, 1, 1, 0, 0, 0, 1], dtype=torch.uint8), "uint1").tolist() == [0x8D]
    # 6 bits: 0x3F | 0x01 << 6 | 0x20 << 12 | 0x15 << 18 = 0x7F | 0x020000 | 0x540000 = 0x56007F
    codes = torch.tensor([0x3F, 0x01, 0x20, 0x15], dtype=torch.uint8)
    assert quant.pack(codes, "float6_e3m2").tolist() == [0x7F, 0x00, 0x56]
    assert quant.unpack(torch.tensor([0x7F, 0x00, 0x56], dtype=torch.uint8), "uint6", 4).tolist() == \
        codes.tolist()


@pytest.mark.parametrize("t", dtypes.ALL_TYPES, ids=str)
def test_round_trip_and_reference(t):
    for length in (1, 2, 4, 8, 24, 40):
        if length * t.bits % 8:
            continue
        codes = random_codes(t, (3, length), seed=length * 16 + t.bits)
        packed = quant.pack(codes, t)
        assert packed.dtype == torch.uint8 and packed.shape == (3, length * t.bits // 8)
        assert [reference_pack_row(row, t.bits) for row in codes.tolist()] == packed.tolist()
        assert torch.equal(quant.unpack(packed, t, length), codes)


def test_dims():
    t = dtypes.uint5
    codes = random_codes(t, (2, 16, 3), seed=1)
    packed = quant.pack(codes, t, dim=1)
    assert packed.shape == (2, 10, 3)
    assert torch.equal(packed, quant.pack(codes.transpose(1, 2), t).transpose(1, 2))
    assert torch.equal(quant.unpack(packed, t, 16, dim=1), codes)
    assert torch.equal(quant.pack(codes, t, dim=-2), packed)
    col = random_codes(dtypes.uint4, (8, 5), seed=2)
    assert torch.equal(quant.unpack(quant.pack(col, "uint4", dim=0), "uint4", 8, dim=0), col)


def test_errors():
    with pytest.raises(ValueError, match="3 elements of 4 bits"):
        quant.pack(torch.tensor([1, 2, 3], dtype=torch.uint8), "uint4")
    with pytest.raises(ValueError, match="12 elements of 3 bits"):
        quant.pack(torch.zeros(2, 12, dtype=torch.uint8), "int3")
    with pytest.raises(ValueError, match="0 .. 15 for uint4"):
        quant.pack(torch.tensor([1, 16], dtype=torch.uint8), "uint4")
    with pytest.raises(ValueError, match="0 .. 15 for float4_e2m1"):
        quant.pack(torch.tensor([1, 16], dtype=torch.uint8), "float4_e2m1")
    with pytest.raises(ValueError, match="take 2 bytes, but dim -1 of packed has 3"):
        quant.unpack(torch.zeros(3, dtype=torch.uint8), "uint4", 4)
    with pytest.raises(ValueError, match="5 elements of 4 bits"):
        quant.unpack(torch.zeros(3, dtype=torch.uint8), "uint4", 5)
    with pytest.raises(ValueError, match="uint8"):
        quant.unpack(torch.zeros(2, dtype=torch.int32), "uint4", 4)
