"""TMA loads from global tensors of rank 3..5 (attention-style tiles of [batch, heads, seq, dim] / [batch, seq,
heads, dim] tensors) in warp-specialized pipelines on sm_90a: eligibility, the device call and its coordinate
order, the host's rank-R tensor map, and what stays on the cp.async path. Compiled with nvcc, no GPU needed;
the last test runs on a GPU."""
import re

import pytest
import tvm
from tvm import tirx

import tilex
import tilex.language as T
from tilex.engine import lower_to_tir
from tilex.op.region import Region
from tilex.op.tma_load import tma_box_dims, tma_eligible

SM90 = tvm.target.Target({"kind": "cuda", "arch": "sm_90a"})


def batched_gemm(layout, Bt=2, H=4, M=256, N=256, K=128, bm=128, bn=128, bk=64, threads=256, dtype="float16"):
    """C[b, h] = A[b, h] @ B[b, h]^T with the operands stored as ``layout``: "bhsd" ([Bt, H, M, K] / [Bt, H, N, K]),
    "bshd" ([Bt, M, H, K] / [Bt, N, H, K]: a tile's rows are strided by H * K) or "3d" ([Bt * H, M, K] / ...).
    C is [Bt, H, M, N]. Grid: (tiles of one head, H, Bt)."""
    nt = N // bn
    a_shape = {"bhsd": (Bt, H, M, K), "bshd": (Bt, M, H, K), "3d": (Bt * H, M, K)}[layout]
    b_shape = {"bhsd": (Bt, H, N, K), "bshd": (Bt, N, H, K), "3d": (Bt * H, N, K)}[layout]

    @T.prim_func
    def main(A: T.Tensor(a_shape, dtype), B: T.Tensor(b_shape, dtype), C: T.Tensor((Bt, H, M, N), dtype)):
        with T.Kernel(nt * T.ceildiv(M, bm), H, Bt, threads=threads) as (bx, by, bz):
            A_s = T.alloc_shared((bm, bk), dtype)
            B_s = T.alloc_shared((bn, bk), dtype)
            C_l = T.alloc_fragment((bm, bn), "float32")
            T.clear(C_l)
            for k in T.Pipelined(T.ceildiv(K, bk), num_stages=3):
                if layout == "bhsd":
                    T.copy(A[bz, by, (bx // nt) * bm, k * bk], A_s)
                    T.copy(B[bz, by, (bx % nt) * bn:(bx % nt) * bn + bn, k * bk:(k + 1) * bk], B_s)
                elif layout == "bshd":
                    T.copy(A[bz, (bx // nt) * bm:(bx // nt) * bm + bm, by, k * bk:(k + 1) * bk], A_s)
                    T.copy(B[bz, (bx % nt) * bn:(bx % nt) * bn + bn, by, k * bk:(k + 1) * bk], B_s)
                else:
                    T.copy(A[bz * H + by, (bx // nt) * bm, k * bk], A_s)
                    T.copy(B[bz * H + by, (bx % nt) * bn, k * bk], B_s)
                T.gemm(A_s, B_s, C_l, transpose_B=True)
            T.copy(C_l, C[bz, by, (bx // nt) * bm, (bx % nt) * bn])

    return main


def _loads(src, rank):
    """The argument lists of the rank-`rank` TMA loads in CUDA source `src` (calls printed on one line)."""
    out = []
    for line in src.splitlines():
        if f"tilex::tma_load_{rank}d(" in line:
            out.append(line.strip())
    return out


def _coords(line):
    """The coordinates (innermost first) of a printed tma load call: the arguments after the barrier."""
    tail = re.search(r"tma_full_ptr\[[^\]]*\]\)\), (.*)\);$", line).group(1)
    return [c.strip() for c in tail.split(", ")]


BX_ROW = "((((int)blockIdx.x) >> 1) * 128)"  # (bx // 2) * 128: the A tile's first row (nt = 2)
BX_COL = "((((int)blockIdx.x) & 1) * 128)"  # (bx % 2) * 128: the B tile's first row
BY, BZ = "((int)blockIdx.y)", "((int)blockIdx.z)"


@pytest.mark.parametrize("layout", ["bhsd", "bshd"])
def test_4d_tiles_become_4d_tma_loads(layout):
    kernel = tilex.compile(batched_gemm(layout), target="sm_90a")
    src = kernel.get_kernel_source()
    assert "cp_async" not in src and "tma_load_2d" not in src
    loads = _loads(src, 4)
    assert len(loads) == 2 and "A_tmap" in loads[0] and "B_tmap" in loads[1]
    if layout == "bhsd":  # (col, seq, head, batch)
        assert _coords(loads[0]) == ["(k * 64)", BX_ROW, BY, BZ]
        assert _coords(loads[1]) == ["(k * 64)", BX_COL, BY, BZ]
    else:  # (col, head, seq, batch)
        assert _coords(loads[0]) == ["(k * 64)", BY, BX_ROW, BZ]
        assert _coords(loads[1]) == ["(k * 64)", BY, BX_COL, BZ]


def test_3d_tiles_become_3d_tma_loads():
    src = tilex.compile(batched_gemm("3d"), target="sm_90a").get_kernel_source()
    loads = _loads(src, 3)
    assert len(loads) == 2 and "tma_load_2d" not in src and "cp_async" not in src
    assert _coords(loads[0]) == ["(k * 64)", BX_ROW, "((((int)blockIdx.z) * 4) + ((int)blockIdx.y))"]


def _encodings(script):
    """(rank, operands after the two pointers) of every tensormap_encode_tiled call in a printed function."""
    out = []
    for m in re.finditer(r"T\.tensormap_encode_tiled\(\w+, \w+\.data, ([0-9, ]+), descriptor_dtype=\"\w+\", "
                         r"rank=(\d)", script):
        out.append((int(m.group(2)), [int(x) for x in m.group(1).split(", ")]))
    return out


def test_host_encodes_rank_r_maps():
    """dims innermost first, byte strides of dims 1..R-1, box (plane columns, rows) at the column / rows dims."""
    bhsd = _encodings(lower_to_tir(batched_gemm("bhsd"), SM90, {})["main"].script())
    # A [2, 4, 256, 128]: dims (128, 256, 4, 2), strides (256, 65536, 262144) bytes, box (64, 128, 1, 1)
    assert bhsd[0] == (4, [128, 256, 4, 2, 256, 65536, 262144, 64, 128, 1, 1, 1, 1, 1, 1])
    assert len(bhsd) == 3 and bhsd[1][0] == 4
    # C [2, 4, 256, 256], stored by TMA from the staged epilogue: box (64, 128, 1, 1), two planes per tile
    assert bhsd[2] == (4, [256, 256, 4, 2, 512, 131072, 524288, 64, 128, 1, 1, 1, 1, 1, 1])
    bshd = _encodings(lower_to_tir(batched_gemm("bshd"), SM90, {})["main"].script())
    # A [2, 256, 4, 128]: dims (128, 4, 256, 2), strides (256, 1024, 262144), the rows are dim 2 (innermost first)
    assert bshd[0] == (4, [128, 4, 256, 2, 256, 1024, 262144, 64, 1, 128, 1, 1, 1, 1, 1])
    three = _encodings(lower_to_tir(batched_gemm("3d"), SM90, {})["main"].script())
    assert three[0] == (3, [128, 256, 8, 256, 65536, 64, 128, 1, 1, 1, 1])


def test_two_swizzle_planes_offset_the_column_coordinate():
    """A 128-column fp16 tile is two 64-column planes: two boxes per tile, the second at column + 64."""
    src = tilex.compile(batched_gemm("bshd", K=256, bk=128, bm=64, bn=64, threads=128), target="sm_90a") \
        .get_kernel_source()
    loads = _loads(src, 4)
    assert len(loads) == 4
    cols = [_coords(line)[0] for line in loads]
    assert cols == ["(k * 128)", "((k * 128) + 64)"] * 2
    assert all(_coords(line)[3] == BZ and _coords(line)[1] == BY for line in loads)


def test_one_map_per_tensor_and_box():
    """Maps differing in the rows dim or the box are distinct; the same box of the same tensor is one map."""
    g = tirx.decl_buffer((2, 64, 64, 64), "float16", "G")
    s = tirx.decl_buffer((64, 64), "float16", "S", scope="shared")
    z = tirx.const(0, "int32")
    tile = Region(s, [z, z], [64, 64])
    rows_1 = Region(g, [z] * 4, [1, 64, 1, 64])
    rows_2 = Region(g, [z] * 4, [1, 1, 64, 64])
    assert tma_eligible(rows_1, tile) and tma_eligible(rows_2, tile)
    assert tma_box_dims(rows_1, tile) == (64, 1, 64, 1)
    assert tma_box_dims(rows_2, tile) == (64, 64, 1, 1)
    from tilex.op.base import LowerContext
    ctx = LowerContext.__new__(LowerContext)
    ctx.tensor_maps, ctx.host_init = {}, []
    a = ctx.tensor_map(g, (64, 1, 64, 1), 128)
    b = ctx.tensor_map(g, (64, 64, 1, 1), 128)
    c = ctx.tensor_map(g, (64, 1, 64, 1), 128)
    d = ctx.tensor_map(g, (64, 1, 32, 1), 128)
    assert a.same_as(c) and not a.same_as(b) and not a.same_as(d) and not b.same_as(d)
    assert len(ctx.host_init) == 6  # three maps, two statements each


def _region(shape, extents, dtype="float16"):
    g = tirx.decl_buffer(shape, dtype, "G")
    return Region(g, [tirx.const(0, "int32")] * len(shape), list(extents))


def _tile(rows, cols, dtype="float16"):
    s = tirx.decl_buffer((rows, cols), dtype, "S", scope="shared")
    return Region(s, [tirx.const(0, "int32")] * 2, [rows, cols])


@pytest.mark.parametrize("shape,extents,ok", [
    ((4, 256, 64), (1, 64, 64), True),
    ((2, 4, 256, 64), (1, 1, 64, 64), True),  # BHSD
    ((2, 256, 4, 64), (1, 64, 1, 64), True),  # BSHD
    ((2, 2, 2, 256, 64), (1, 1, 1, 64, 64), True),  # rank 5
    ((2, 2, 2, 2, 256, 64), (1, 1, 1, 1, 64, 64), False),  # rank 6: TMA has 5 dims at most
    ((2, 4, 256, 64), (1, 2, 32, 64), False),  # two non-unit leading extents
    ((2, 256, 4, 64), (1, 64, 64, 1), False),  # the columns are not the last dim
    ((2, 256, 4, 36), (1, 64, 1, 32), False),  # 72-byte head stride (the rows' 288-byte stride is fine)
    ((4, 256, 36), (1, 64, 32), False),  # rows stride 72 bytes
    ((2, 4, 256, 64), (1, 1, 64, 64), True),
])
def test_eligibility(shape, extents, ok):
    rows = [e for e in extents[:-1] if e != 1]
    cols = extents[-1]
    tile = _tile(rows[0] if len(rows) == 1 else 64, cols if cols != 1 else 64)
    assert tma_eligible(_region(shape, extents), tile) is ok


def test_eligibility_rejects_32_bit_floats_and_strided():
    assert not tma_eligible(_region((2, 256, 64), (1, 64, 64), "float32"), _tile(64, 64, "float32"))
    # 32-bit integer words (packed low-bit codes) are TMA tiles: 128-byte rows of 32 words
    assert tma_eligible(_region((2, 256, 32), (1, 64, 32), "int32"), _tile(64, 32, "int32"))
    g = tirx.decl_buffer((2, 64, 64), "float16", "G", strides=[8192, 64, 1])
    assert not tma_eligible(Region(g, [tirx.const(0, "int32")] * 3, [1, 64, 64]), _tile(64, 64))


def _unaligned_heads(M=256, N=256, H=2, D=36):
    """BSHD-like operands whose head dim of 36 elements (72 bytes) breaks TMA's 16-byte stride rule."""

    @T.prim_func
    def main(A: T.Tensor((2, M, H, D), "float16"), B: T.Tensor((2, N, H, D), "float16"),
             C: T.Tensor((2, H, M, N), "float16")):
        with T.Kernel(N // 128, M // 128, H * 2, threads=256) as (bx, by, bz):
            A_s = T.alloc_shared((128, 32), "float16")
            B_s = T.alloc_shared((128, 32), "float16")
            C_l = T.alloc_fragment((128, 128), "float32")
            T.clear(C_l)
            for k in T.Pipelined(1, num_stages=3):
                T.copy(A[bz // H, by * 128:by * 128 + 128, bz % H, k * 32:k * 32 + 32], A_s)
                T.copy(B[bz // H, bx * 128:bx * 128 + 128, bz % H, k * 32:k * 32 + 32], B_s)
                T.gemm(A_s, B_s, C_l, transpose_B=True)
            T.copy(C_l, C[bz // H, bz % H, by * 128, bx * 128])

    return main


def test_ineligible_tensor_stays_on_cp_async():
    script = lower_to_tir(_unaligned_heads(), SM90, {})["main"].script()
    assert "tilex::tma_load" not in script and "tensormap_encode_tiled" not in script
    assert "cp_async" in script or "cp.async" in script


def _grouped_gemm(rank, M=1024, N=1024, K=512, bm=128, bn=128, bk=128):
    """A plain GEMM whose operands carry a leading group dim of 1 (rank 3) or none (rank 2), on a 2-d grid."""
    a_shape, b_shape = ((1, M, K), (1, N, K)) if rank == 3 else ((M, K), (N, K))

    @T.prim_func
    def main(A: T.Tensor(a_shape, "float16"), B: T.Tensor(b_shape, "float16"), C: T.Tensor((M, N), "float16")):
        with T.Kernel(N // bn, M // bm, threads=256) as (bx, by):
            A_s = T.alloc_shared((bm, bk), "float16")
            B_s = T.alloc_shared((bn, bk), "float16")
            C_l = T.alloc_fragment((bm, bn), "float32")
            T.clear(C_l)
            for k in T.Pipelined(K // bk, num_stages=3):
                if rank == 3:
                    T.copy(A[0, by * bm, k * bk], A_s)
                    T.copy(B[0, bx * bn, k * bk], B_s)
                else:
                    T.copy(A[by * bm, k * bk], A_s)
                    T.copy(B[bx * bn, k * bk], B_s)
                T.gemm(A_s, B_s, C_l, transpose_B=True)
            T.copy(C_l, C[by * bm, bx * bn])

    return main


@pytest.mark.parametrize("cfg", [{"tilex.num_sms": 4}, {"tilex.num_sms": 132, "tilex.cluster_size": 2}],
                         ids=["persistent", "row_cluster"])
def test_nd_loads_are_never_multicast(cfg):
    """The same GEMM with 2-d operands runs in clusters that multicast the shared operand; with 3-d operands
    (one group) each block loads its own boxes and no cluster is formed."""
    two = lower_to_tir(_grouped_gemm(2), SM90, cfg)["main"].script()
    assert "tilex::tma_load_2d_multicast" in two and "tilex::cluster_dims" in two
    three = lower_to_tir(_grouped_gemm(3), SM90, cfg)["main"].script()
    assert "multicast" not in three and "tilex::cluster_dims" not in three
    assert three.count('"tilex::tma_load_3d"') == 4  # two 64-column planes per operand


def test_nd_global_output_is_a_tma_store():
    """A shared tile written into a 4-d tensor is one rank-4 TMA store per swizzle plane, at (column, row, head,
    batch) innermost first."""

    @T.prim_func
    def main(A: T.Tensor((2, 4, 256, 64), "float16"), C: T.Tensor((2, 4, 256, 64), "float16")):
        with T.Kernel(2, 4, 2, threads=128) as (bx, by, bz):
            S = T.alloc_shared((128, 64), "float16")
            T.copy(A[bz, by, bx * 128, 0], S)
            T.copy(S, C[bz, by, bx * 128, 0])

    src = tilex.compile(main, target="sm_90a").get_kernel_source()
    stores = [line for line in src.splitlines() if "tilex::tma_store_4d(" in line]
    assert len(stores) == 1 and "tma_store_2d" not in src
    coords = stores[0].strip()[:-len(");")].split("])), ", 1)[1].split(", ")  # the arguments after the tile
    assert coords == ["0", "(((int)blockIdx.x) * 128)", BY, BZ]


@pytest.mark.gpu
@pytest.mark.parametrize("layout", ["bhsd", "bshd", "3d"])
@pytest.mark.parametrize("cfg", [dict(bm=128, bn=128, bk=64, threads=256), dict(bm=64, bn=64, bk=128, threads=128)],
                         ids=["128x128x64", "64x64x128"])
def test_batched_gemm_with_nd_tma_matches_torch(layout, cfg):
    import torch

    Bt, H, M, N, K = 2, 3, 256, 384, 512
    kernel = tilex.compile(batched_gemm(layout, Bt, H, M, N, K, **cfg), out_idx=[2])
    assert "tma_load_2d" not in kernel.get_kernel_source()
    a = torch.randn(Bt, H, M, K, device="cuda", dtype=torch.float16)
    b = torch.randn(Bt, H, N, K, device="cuda", dtype=torch.float16)
    if layout == "bhsd":
        args = (a, b)
    elif layout == "bshd":
        args = (a.transpose(1, 2).contiguous(), b.transpose(1, 2).contiguous())
    else:
        args = (a.reshape(Bt * H, M, K), b.reshape(Bt * H, N, K))
    c = kernel(*args)
    ref = a.float() @ b.float().transpose(-1, -2)
    torch.testing.assert_close(c.float() / K ** 0.5, ref / K ** 0.5, atol=1e-2, rtol=1e-2)
