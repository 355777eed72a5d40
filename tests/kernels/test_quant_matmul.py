"""tilex.ops.pack_weight / quant_matmul without a GPU: shapes of the packed tensors and clear errors."""
import pytest

torch = pytest.importorskip("torch")

from tilex import ops, quant  # noqa: E402


def test_pack_weight_shapes():
    qw = quant.quantize(torch.randn(256, 512), "uint4", group_size=64, zero_point=True)
    pw = ops.pack_weight(qw, act="bfloat16")  # the default tile: 64 rows x 256 k
    assert pw.words.shape == (4, 2, 64 * 256 * 4 // 1024, 32) and pw.words.dtype == torch.int32
    assert pw.scales.shape == (8, 256) and pw.scales.dtype == torch.bfloat16
    assert pw.zeros.shape == (8, 256)


def test_pack_weight_rejects_groups_across_tiles():
    qw = quant.quantize(torch.randn(256, 768), "int4", group_size=48)
    with pytest.raises(ValueError, match="group size 48"):
        ops.pack_weight(qw)


def test_pack_weight_pads_ragged_weights():
    pw = ops.pack_weight(quant.quantize(torch.randn(200, 300), "int4", group_size=None))
    assert pw.words.shape == (4, 2, 64 * 256 * 4 // 1024, 32) and pw.scales.shape == (1, 200)


def test_quant_matmul_rejects_bad_x():
    pw = ops.pack_weight(quant.quantize(torch.randn(128, 128), "int4", group_size=128))
    with pytest.raises(ValueError, match="2-d"):
        ops.quant_matmul(torch.randn(128), pw)
    with pytest.raises(ValueError, match="K = 64"):
        ops.quant_matmul(torch.randn(2, 64, dtype=torch.float16), pw)
    with pytest.raises(ValueError, match="packed for float16"):
        ops.quant_matmul(torch.randn(2, 128, dtype=torch.bfloat16), pw)


def test_small_zero_points_are_packed_as_offsets():
    """Float16 codes of at most 4 bits with zero-points store -(zero * scale), rounded once from float32, which
    the kernel adds with the scaling fma; wider codes, bfloat16 and per-channel scales keep the zeros."""
    w = torch.randn(256, 512)
    qw = quant.quantize(w, "uint4", group_size=128, zero_point=True)
    pw = ops.pack_weight(qw)
    want = (-(qw.scales.T.half().float() * qw.zeros.T.half().float())).half()
    assert pw.offsets and torch.equal(pw.zeros, want)
    for q, act in ((quant.quantize(w, "uint8", group_size=128, zero_point=True), "float16"),
                   (qw, "bfloat16"), (quant.quantize(w, "uint4", group_size=512, zero_point=True), "float16")):
        p = ops.pack_weight(q, act=act)
        assert not p.offsets and torch.equal(p.zeros, q.zeros.T.to(getattr(torch, act)))


def test_symmetric_unsigned_weights_are_packed_as_signed():
    """uint codes around the implicit zero 2^(b-1) decode exactly as the signed type of the flipped top bit, which
    saves the zero-point subtraction; real zero-points stay."""
    for bits in (2, 4, 8):
        qw = quant.quantize(torch.randn(128, 256), f"uint{bits}", group_size=128)
        pw = ops.pack_weight(qw)
        assert str(pw.dtype) == f"int{bits}" and pw.zeros is None
        flipped = qw.codes ^ (1 << (bits - 1))
        assert torch.equal(quant.decode(flipped, pw.dtype), quant.decode(qw.codes, qw.dtype) - 2 ** (bits - 1))
    qw = quant.quantize(torch.randn(128, 256), "uint4", group_size=128, zero_point=True)
    assert str(ops.pack_weight(qw).dtype) == "uint4"


@pytest.mark.parametrize("zp", [False, True])
def test_per_channel_scales_are_applied_to_the_sums(zp):
    from tilex.jit import compile as compile_kernel
    from tilex.kernels.quant_matmul import QuantTiles, quant_matmul

    k = compile_kernel(quant_matmul(16, 256, 512, "uint4", 512, QuantTiles(num_stages=3), zero_point=zp),
                       out_idx=-1, target="sm_90a")
    src = k.get_kernel_source()
    assert "scale_pair" not in src and ("zero_pair_f16" in src) == zp


def test_pack_weight_rejects_a_type_float16_cannot_hold():
    qw = quant.quantize(torch.randn(128, 128), "float8_e6m1", group_size=128)
    with pytest.raises(ValueError, match="use bfloat16"):
        ops.pack_weight(qw)
    assert str(ops.pack_weight(qw, act="bfloat16").dtype) == "float8_e6m1"


def test_chunk_bit_table_is_the_chunk_format():
    from tilex.ir.lowbit_chunk import pack_chunk
    from tilex.kernels.quant_matmul import chunk_bit_table

    gen = torch.Generator().manual_seed(0)
    for bits in range(1, 9):
        table = chunk_bit_table(bits)
        codes = torch.randint(0, 2 ** bits, (32,), generator=gen).tolist()
        words = [sum(((codes[e // 8] >> (e % 8)) & 1) << b for b, e in enumerate(table[w].tolist()) if e >= 0)
                 for w in range(bits)]
        assert words == pack_chunk(codes, bits)


def test_prepack_program_compiles():
    from tilex.jit import compile as compile_kernel
    from tilex.kernels.quant_matmul import QuantTiles, prepack_program

    k = compile_kernel(prepack_program(200, 300, "int3", QuantTiles(), "sm_90a"), out_idx=-1, target="sm_90a")
    assert k.resources.spill_stores == 0


@pytest.mark.parametrize("g", [128, 512])
def test_split_k_program_compiles_warp_specialized(g):
    from tilex.jit import compile as compile_kernel
    from tilex.kernels.quant_matmul import QuantTiles, quant_matmul

    k = compile_kernel(quant_matmul(16, 256, 512, "int4", g, QuantTiles(num_stages=3), split_k=2), target="sm_90a")
    src = k.get_kernel_source()
    assert "tma_load_4d" in src and "atomic" in src


def test_decode_loop_has_one_barrier_per_k_tile():
    """The MMA reads the pipeline's landed stages, which the iteration's barrier already ordered: no second one."""
    from cuda_text import braced_block
    from tilex.jit import compile as compile_kernel
    from tilex.kernels.quant_matmul import QuantTiles, quant_matmul

    src = compile_kernel(quant_matmul(16, 512, 2048, "int4", 128, QuantTiles(64, 16, 256, 128, 4)), out_idx=-1,
                         target="sm_90a").get_kernel_source()
    loop = braced_block(src, "for (int kk = 0;")
    assert "wgmma_m64n16k16_rs" in loop and loop.count("__syncthreads()") == 1


def test_last_block_split_k_compiles():
    """Split-K whose last block of each tile writes Y: one acq_rel counter per tile, the workspace re-zeroed."""
    from tilex.jit import compile as compile_kernel
    from tilex.kernels.quant_matmul import QuantTiles, quant_matmul

    for tiles in (QuantTiles(num_stages=3), QuantTiles(64, 16, 256, 128, 4)):  # warp-specialized, cp.async
        k = compile_kernel(quant_matmul(16, 256, 512, "int4", 128, tiles, split_k=2, split_reduce="last_block"),
                           target="sm_90a")
        src = k.get_kernel_source()
        assert "tilex::atomic_fetch<0, 3>((&(Cnt_ptr[" in src and "Cnt_ptr[((int)blockIdx.x)] = 0" in src
        assert k.resources.spill_stores == 0
    with pytest.raises(ValueError, match="split_reduce is 'atomic' or 'last_block'"):
        quant_matmul(16, 256, 512, "int4", 128, split_k=2, split_reduce="tree")


def test_split_k_must_be_positive():
    pw = ops.pack_weight(quant.quantize(torch.randn(128, 128), "int4", group_size=128))
    with pytest.raises(ValueError, match="split_k"):
        ops.quant_matmul(torch.randn(2, 128, dtype=torch.float16), pw, split_k=0)


def test_prefill_takes_256_row_blocks():
    """Prefill-sized M: 256 activation rows per block, so each decoded weight tile feeds an m64n256 wgmma."""
    import tilex
    from tilex.kernels.quant_matmul import QuantTiles, quant_matmul
    from tilex.ops.quant import m_tile

    assert [m_tile(m) for m in (1, 16, 17, 64, 65, 511, 512, 4096)] == [16, 16, 32, 64, 128, 128, 256, 256]
    src = tilex.compile(quant_matmul(600, 256, 512, "int4", 128, QuantTiles(128, 256, 64, 256, 3)), out_idx=-1,
                        target="sm_90a").get_kernel_source()
    assert "wgmma_m64n256k16_rs" in src


@pytest.mark.parametrize("tiles, want", [((128, 256, 128, 4), (64, 3)), ((64, 256, 128, 4), (128, 3)),
                                         ((128, 64, 256, 3), (256, 3))])
def test_prefill_block_fits_the_packing(tiles, want):
    """A weight packed for decode (a 256-long k step) leaves less shared memory for rows of x: prefill calls
    still compile, with fewer rows or stages (a (128, 256) packing used to overflow shared memory at M > 64), and
    no more rows than the registers hold (the accumulator next to a 128 x 256 decoded tile)."""
    from tilex.kernels.quant_matmul import QuantTiles
    from tilex.ops.quant import block_tiles, _kernel

    bn, bk, threads, stages = tiles
    qw = quant.quantize(torch.randn(256, 512), "int4", group_size=128)
    pw = ops.pack_weight(qw, tiles=QuantTiles(bn=bn, bk=bk, threads=threads, num_stages=stages))
    got = block_tiles(4096, pw, 1)
    assert (got.bm, got.num_stages) == want
    kernel, _ = _kernel(4096, pw)
    assert not any(f.wgmma_serialized or f.spill_stores for f in kernel.resources.functions.values())


def test_float_scales_are_prescaled_where_they_can_carry_the_power_of_two():
    """pack_weight multiplies float types' scales by 2^k (exact) so the kernel decodes raw; not for integers,
    per-channel scales, zeros that stay zeros, or scales that would overflow."""
    w = torch.randn(256, 512)
    pw = ops.pack_weight(quant.quantize(w, "float4_e2m1", group_size=64))
    qw = quant.quantize(w, "float4_e2m1", group_size=64)
    assert pw.prescaled and torch.equal(pw.scales.float(), qw.scales.T.half().float() * 2.0 ** 14)
    assert ops.pack_weight(quant.quantize(w, "float4_e2m1", group_size=64, zero_point=True)).prescaled  # offsets
    assert not ops.pack_weight(quant.quantize(w, "float6_e3m2", group_size=64, zero_point=True)).prescaled
    assert not ops.pack_weight(quant.quantize(w, "float4_e2m1", group_size=None)).prescaled
    assert not ops.pack_weight(quant.quantize(w, "int4", group_size=64)).prescaled
    assert not ops.pack_weight(quant.quantize(w, "float8_e4m3", group_size=64)).prescaled
    assert not ops.pack_weight(quant.quantize(w * 1000, "float4_e2m1", group_size=64)).prescaled
    assert ops.pack_weight(quant.quantize(w * 1000, "float4_e2m1", group_size=64), act="bfloat16").prescaled is False
    assert ops.pack_weight(quant.quantize(w, "float4_e2m1", group_size=64), act="bfloat16").prescaled


def test_auto_split_k_fills_the_multiprocessors(monkeypatch):
    """Split K only when the output tiles leave multiprocessors idle: enough splits to fill them, at most 4,
    at least two k tiles each."""
    from tilex.ops import quant as q

    monkeypatch.setitem(q._SMS, "dev", 132)
    pw = ops.pack_weight(quant.quantize(torch.randn(8192, 256), "int4", group_size=128))  # 128 tiles, 1 k tile
    assert ops.auto_split_k(1, pw, "dev") == 1
    pw.shape = (8192, 8192)  # 32 k tiles
    assert ops.auto_split_k(1, pw, "dev") == 2 and ops.auto_split_k(16, pw, "dev") == 2
    pw.shape = (4096, 8192)
    assert ops.auto_split_k(16, pw, "dev") == 3
    pw.shape = (1024, 8192)
    assert ops.auto_split_k(16, pw, "dev") == 4
    pw.shape = (57344, 8192)
    assert ops.auto_split_k(16, pw, "dev") == 1
    assert ops.auto_split_k(4096, pw, "dev") == 1
