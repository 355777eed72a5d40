"""TMA loads of one-row tiles (vectors: every extent 1 but the last) of 2- or 4-byte data in warp-specialized
pipelines on sm_90a, such as attention backward's per-iteration ``lse[b, h, i * bm:(i + 1) * bm]``: eligibility,
the box and byte count, the rank-R unswizzled load next to the swizzled 2-d tile loads, and the row-major shared
buffer. Compiled with nvcc, no GPU needed; the last test runs on a GPU."""
import re

import pytest
import tvm
from tvm import tirx

import tilex
import tilex.language as T
from tilex.engine import lower_to_tir
from tilex.op.region import Region
from tilex.op.tma_load import tma_box, tma_box_dims, tma_bytes, tma_eligible, tma_tile_eligible, tma_vector

SM90 = tvm.target.Target({"kind": "cuda", "arch": "sm_90a"})


def _vec_copy(shape, n, dtype="float32", shared_shape=None, strides=None):
    """Region pair of a copy G[0, .., 0, 0:n] -> S (shared, `shared_shape`, default (n,))."""
    g = tirx.decl_buffer(shape, dtype, "G", strides=strides)
    s = tirx.decl_buffer(shared_shape or (n,), dtype, "S", scope="shared")
    z = tirx.const(0, "int32")
    src = Region(g, [z] * len(shape), [1] * (len(shape) - 1) + [n])
    dst = Region(s, [z] * len(s.shape), [1] * (len(s.shape) - 1) + [n])
    return src, dst


@pytest.mark.parametrize("shape,n,dtype,ok", [
    ((2, 4, 1024), 64, "float32", True),  # attention's lse / delta: [batch, heads, seq], bm = 64
    ((2, 4, 1024), 60, "float32", True),  # 240 bytes
    ((2, 4, 1024), 62, "float32", False),  # 248 bytes: not a multiple of 16
    ((4096,), 128, "float32", True),  # a 1-d tensor
    ((8, 64), 8, "float16", True),  # 16 bytes
    ((8, 64), 4, "float16", False),  # 8 bytes
    ((8, 64), 256, "bfloat16", True),  # TMA's largest box extent
    ((8, 1024), 512, "float16", False),  # more than 256 elements
    ((8, 64), 16, "int32", True),
    ((8, 64), 32, "int8", False),  # 1-byte data
    ((8, 64), 8, "float64", False),  # 8-byte data
    ((8, 1002), 64, "float32", False),  # row stride 4008 bytes: not a multiple of 16
    ((6, 1002, 4), 4, "float32", True),  # strides 16 and 16032 bytes
    ((6, 1001, 4), 4, "float32", True),  # strides 16 and 16016 bytes
    ((3, 5, 1001), 64, "float32", False),  # row stride 4004 bytes
    ((2, 2, 2, 2, 256), 64, "float32", True),  # rank 5
    ((2, 2, 2, 2, 2, 256), 64, "float32", False),  # rank 6
])
def test_vector_eligibility(shape, n, dtype, ok):
    src, dst = _vec_copy(shape, n, dtype)
    assert tma_vector(src, dst) is ok
    assert tma_eligible(src, dst) is ok
    assert not tma_tile_eligible(src, dst)


def test_vector_shapes_that_are_not_vectors():
    g = tirx.decl_buffer((8, 256), "float32", "G")
    s = tirx.decl_buffer((2, 64), "float32", "S", scope="shared")
    z = tirx.const(0, "int32")
    # two rows: a 2-d fp32 tile (no swizzled 32-bit tile path)
    assert not tma_eligible(Region(g, [z, z], [2, 64]), Region(s, [z, z], [2, 64]))
    # the shared side has extent 1 in all but its last dim: still a vector
    src, dst = _vec_copy((8, 256), 64, shared_shape=(1, 64))
    assert tma_vector(src, dst)
    # dtype mismatch, strided global, wrong direction
    src, dst = _vec_copy((8, 256), 64)
    assert not tma_vector(src, Region(tirx.decl_buffer((64,), "float16", "H", scope="shared"), [z], [64]))
    assert not tma_vector(*_vec_copy((8, 256), 64, strides=[512, 1]))
    assert not tma_vector(dst, src)
    # length mismatch between the sides
    assert not tma_vector(src, Region(tirx.decl_buffer((128,), "float32", "S2", scope="shared"), [z], [128]))


def test_vector_box_and_bytes():
    src, dst = _vec_copy((2, 4, 1024), 64)
    assert tma_box(dst) == (1, 64, 0, 64)
    assert tma_bytes(dst) == 256
    assert tma_box_dims(src, dst) == (64, 1, 1)
    src, dst = _vec_copy((4096,), 128, "float16")
    assert tma_box_dims(src, dst) == (128,) and tma_bytes(dst) == 256
    # a staged buffer, as the warp-specialized loops index it: [stages, n] at [s, 0:n]
    staged = tirx.decl_buffer((3, 64), "float32", "St", scope="shared")
    z = tirx.const(0, "int32")
    assert tma_bytes(Region(staged, [z, z], [1, 64])) == 256


def test_tile_bytes_unchanged():
    g = tirx.decl_buffer((256, 256), "float16", "G")
    s = tirx.decl_buffer((128, 64), "float16", "S", scope="shared")
    z = tirx.const(0, "int32")
    src, dst = Region(g, [z, z], [128, 64]), Region(s, [z, z], [128, 64])
    assert tma_box(dst) == (128, 64, 128, 64) and tma_bytes(dst) == 16384
    assert tma_box_dims(src, dst) == (64, 128)


def gemm_row_bias(M=256, N=256, K=512, bm=128, bn=128, bk=64, threads=256, bias_rank=2, stages=2):
    """C = A @ B^T + (sum over k-tiles of a per-row fp32 bias vector): iteration k loads A, B (2-d fp16 tiles)
    and Bias's k-th vector of the block's rows into a shared [bm] buffer, which a T.Parallel adds to C after the
    gemm. Bias holds K // bk vectors of M: [K // bk, M] (rank 2), [1, K // bk, M] (rank 3) or flat (rank 1)."""
    kt = K // bk
    bshape = {1: (kt * M,), 2: (kt, M), 3: (1, kt, M)}[bias_rank]

    @T.prim_func
    def main(A: T.Tensor((M, K), "float16"), B: T.Tensor((N, K), "float16"), Bias: T.Tensor(bshape, "float32"),
             C: T.Tensor((M, N), "float32")):
        with T.Kernel(T.ceildiv(N, bn), T.ceildiv(M, bm), threads=threads) as (bx, by):
            A_s = T.alloc_shared((bm, bk), "float16")
            B_s = T.alloc_shared((bn, bk), "float16")
            bias_s = T.alloc_shared((bm,), "float32")
            C_l = T.alloc_fragment((bm, bn), "float32")
            T.clear(C_l)
            for k in T.Pipelined(kt, num_stages=stages):
                T.copy(A[by * bm, k * bk], A_s)
                T.copy(B[bx * bn, k * bk], B_s)
                if bias_rank == 1:
                    T.copy(Bias[k * M + by * bm:k * M + by * bm + bm], bias_s)
                elif bias_rank == 2:
                    T.copy(Bias[k, by * bm:by * bm + bm], bias_s)
                else:
                    T.copy(Bias[0, k, by * bm:by * bm + bm], bias_s)
                T.gemm(A_s, B_s, C_l, transpose_B=True)
                for i, j in T.Parallel(bm, bn):
                    C_l[i, j] += bias_s[i]
            T.copy(C_l, C[by * bm, bx * bn])

    return main


def _calls(src, name):
    return [line.strip() for line in src.splitlines() if f"tilex::{name}(" in line]


@pytest.mark.parametrize("rank", [1, 2, 3])
def test_gemm_with_bias_vector_loads_both_with_tma(rank):
    src = tilex.compile(gemm_row_bias(bias_rank=rank), target="sm_90a").get_kernel_source()
    assert "cp_async" not in src and "cp.async.cg" not in src
    assert "reg_alloc" in src  # warp-specialized
    tiles = _calls(src, "tma_load_2d")
    vec = [line for line in _calls(src, f"tma_load_{rank}d") if "Bias_tmap" in line]
    assert len(vec) == 1
    assert sum("A_tmap" in line for line in tiles) == 1 and sum("B_tmap" in line for line in tiles) == 1
    coords = re.search(r"tma_full_ptr\w*\[[^\]]*\]\)\), (.*)\);$", vec[0]).group(1).split(", ")
    assert len(coords) == rank
    expect_tx = [int(m) for m in re.findall(r"mbar_arrive_expect_tx\(\(&\(\w+\[[^\]]*\]\)\), (\d+)\)", src)]
    # the vector's own stage group (it is first read after the gemm): 128 fp32 = 512 bytes
    assert 512 in expect_tx and sum(expect_tx) == 512 + 2 * 128 * 64 * 2


def _encodings(script):
    """(rank, dims/strides/box operands, swizzle) of every tensormap_encode_tiled call of a printed function."""
    out = []
    for m in re.finditer(r"T\.tensormap_encode_tiled\(\w+, \w+\.data, ([0-9, ]+), descriptor_dtype=\"(\w+)\", "
                         r"rank=(\d), interleave=0, swizzle=(\d), l2_promotion=\d, oob_fill=0", script):
        out.append((m.group(2), int(m.group(3)), [int(x) for x in m.group(1).split(", ")], int(m.group(4))))
    return out


def test_host_encodes_unswizzled_vector_map():
    script = lower_to_tir(gemm_row_bias(bias_rank=2), SM90, {})["main"].script()
    enc = {e[0]: e for e in _encodings(script)}
    # Bias [8, 256] fp32: dims (256, 8), row stride 1024 bytes, box (128, 1), element strides 1, no swizzle;
    # oob_fill 0 (CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE): a vector past the tensor's end reads zeros
    assert enc["float32"] == ("float32", 2, [256, 8, 1024, 128, 1, 1, 1], 0)
    assert enc["float16"][3] != 0  # the tiles keep their 128-byte swizzle


def test_vector_buffer_is_row_major():
    """The staged [stages, bm] fp32 buffer is read row-major (stage * bm + row): no xor in the T.Parallel's reads."""
    src = tilex.compile(gemm_row_bias(bias_rank=2), target="sm_90a").get_kernel_source()
    # the bias add runs on float2 lanes of the accumulator, each lane reading its row's bias
    reads = [line for line in src.splitlines() if "make_float2(((float*)buf_dyn_shmem" in line]
    assert reads and all("^" not in line for line in reads)


def test_vector_store_is_not_a_tma_store():
    """Only whole swizzled 2-d tiles are TMA-stored: a shared [1, 64] fp32 row written to global is not."""

    @T.prim_func
    def main(A: T.Tensor((8, 64), "float32"), C: T.Tensor((8, 64), "float32")):
        with T.Kernel(8, threads=128) as bx:
            S = T.alloc_shared((1, 64), "float32")
            T.copy(A[bx, 0:64], S)
            T.copy(S, C[bx, 0:64])

    src = tilex.compile(main, target="sm_90a").get_kernel_source()
    assert "tma_store" not in src


def test_unaligned_bias_stays_on_cp_async():
    """A bias whose rows are 4 * 257 bytes apart is no TMA vector: the whole loop keeps the cp.async pipeline."""
    M, N, K, bm, bn, bk = 256, 256, 128, 128, 128, 64

    @T.prim_func
    def main(A: T.Tensor((M, K), "float16"), B: T.Tensor((N, K), "float16"), Bias: T.Tensor((2, 257), "float32"),
             C: T.Tensor((M, N), "float32")):
        with T.Kernel(N // bn, M // bm, threads=256) as (bx, by):
            A_s = T.alloc_shared((bm, bk), "float16")
            B_s = T.alloc_shared((bn, bk), "float16")
            bias_s = T.alloc_shared((bm,), "float32")
            C_l = T.alloc_fragment((bm, bn), "float32")
            T.clear(C_l)
            for k in T.Pipelined(K // bk, num_stages=2):
                T.copy(A[by * bm, k * bk], A_s)
                T.copy(B[bx * bn, k * bk], B_s)
                T.copy(Bias[k, by * bm:by * bm + bm], bias_s)
                T.gemm(A_s, B_s, C_l, transpose_B=True)
                for i, j in T.Parallel(bm, bn):
                    C_l[i, j] += bias_s[i]
            T.copy(C_l, C[by * bm, bx * bn])

    script = lower_to_tir(main, SM90, {})["main"].script()
    assert "tilex::tma_load" not in script and "tensormap_encode_tiled" not in script


@pytest.mark.gpu
@pytest.mark.parametrize("rank", [1, 2, 3])
@pytest.mark.parametrize("M,stages", [(256, 2), (200, 2), (256, 4)], ids=["even", "ragged_rows", "4_stages"])
def test_gemm_with_bias_vector_matches_torch(rank, M, stages):
    import torch

    N, K, bm, bk = 384, 512, 128, 64
    kt = K // bk
    kernel = tilex.compile(gemm_row_bias(M, N, K, bm=bm, bk=bk, bias_rank=rank, stages=stages), out_idx=[3])
    src = kernel.get_kernel_source()
    assert "cp_async" not in src and any("Bias_tmap" in line for line in _calls(src, f"tma_load_{rank}d"))
    a = torch.randn(M, K, device="cuda", dtype=torch.float16)
    b = torch.randn(N, K, device="cuda", dtype=torch.float16)
    bias = torch.randn(kt, M, device="cuda", dtype=torch.float32)
    arg = {1: bias.reshape(-1), 2: bias, 3: bias.reshape(1, kt, M)}[rank]
    c = kernel(a, b, arg)
    ref = a.float() @ b.float().T + bias.sum(0)[:, None]
    torch.testing.assert_close(c, ref, atol=2e-2, rtol=1e-2)
