"""CoarsenBlocks: a one-warpgroup 128 x 128 GEMM block runs with its right-hand neighbour as one 128 x 256 block
of two warpgroups (IR on the CPU; results on the GPU)."""
import pytest

import tilex.language as T
from programs import matmul
from sm90_lowering import PIN, SM90, lowered as _lowered
from tilex.ir.names import COARSENED_BLOCKS_ATTR


def _note(f):
    notes = f.attrs.get(COARSENED_BLOCKS_ATTR)
    return None if notes is None else "; ".join(str(n) for n in notes)


def test_two_blocks_become_one_of_two_warpgroups():
    f = _lowered(matmul(4096, 4096, 4096, bm=128, bn=128, bk=64, threads=128))
    assert _note(f) == ("blocks (2 bx, by) and (2 bx + 1, by) run as one block of 256 threads: "
                        "C_l [128, 128] -> [128, 256], B_s [64, 128] -> [64, 256]")
    script = f.script()
    assert 'T.launch_thread("threadIdx.x", 384)' in script  # two consumer warpgroups and the producer
    assert "tilex::wgmma_m64n256k16" in script and "m64n128" not in script
    # the same kernel as the program written with 128x256 blocks of 256 threads
    wide = _lowered(matmul(4096, 4096, 4096, bm=128, bn=256, bk=64, threads=256))
    assert script.count("tilex::wgmma_m64n256k16") == wide.script().count("tilex::wgmma_m64n256k16")


def test_a_short_k_step_is_doubled_first():
    # 128x128x32: two iterations per stage make the K step a 128-byte row, then the blocks pair up
    f = _lowered(matmul(4096, 4096, 4096, bm=128, bn=128, bk=32))
    assert _note(f) == ("two iterations of the T.Pipelined loop per stage: A_s [128, 32] -> [128, 64], "
                        "B_s [32, 128] -> [64, 128]; blocks (2 bx, by) and (2 bx + 1, by) run as one block of 256 "
                        "threads: C_l [128, 128] -> [128, 256], B_s [64, 128] -> [64, 256]")
    script = f.script()
    assert "for k in range(T.Sub(64, 0)):" in script  # 64 iterations of K 64 (128 of 32 as written)
    assert "49152)" in script  # a stage: A 128x64 + B 64x256 halves
    # a loop too short to fill the doubled ring's stages keeps its step (and then its block)
    assert _note(_lowered(matmul(4096, 4096, 160, bm=128, bn=128, bk=32))) is None


def test_blocks_kept_as_written():
    # the coarsened grid (4 x 8 blocks) would leave multiprocessors idle
    assert _note(_lowered(matmul(1024, 1024, 1024, bm=128, bn=128, bk=64))) is None
    # already two warpgroups
    assert _note(_lowered(matmul(4096, 4096, 4096, bm=128, bn=256, bk=64, threads=256))) is None
    # pinned
    assert _note(_lowered(matmul(4096, 4096, 4096, bm=128, bn=128, bk=64),
                          **{"tilex.disable_block_coarsening": True})) is None


def _epilogue(M, N, K, kind):
    """The plain GEMM with an element-wise epilogue in a T.Parallel nest: `kind` "relu" (on the accumulator, then
    a tile copy out), "bias_store" (a bias read from global memory and a bounds-checked store to C), "reversed"
    (the accumulator's columns read back to front), "mirrored" (each block's columns written back to front: the
    coarsened nest must still send every column to its own block's place), "block_sum" (a nest that uses bx
    without touching a tile)."""
    @T.prim_func
    def main(A: T.Tensor((M, K), "float16"), B: T.Tensor((K, N), "float16"), Bias: T.Tensor((N,), "float16"),
             C: T.Tensor((M, N), "float16")):
        with T.Kernel(T.ceildiv(N, 128), T.ceildiv(M, 128), threads=128) as (bx, by):
            A_s = T.alloc_shared((128, 64), "float16")
            B_s = T.alloc_shared((64, 128), "float16")
            C_l = T.alloc_fragment((128, 128), "float32")
            T.clear(C_l)
            for k in T.Pipelined(T.ceildiv(K, 64), num_stages=3):
                T.copy(A[by * 128, k * 64], A_s)
                T.copy(B[k * 64, bx * 128], B_s)
                T.gemm(A_s, B_s, C_l)
            if kind == "relu":
                for i, j in T.Parallel(128, 128):
                    C_l[i, j] = T.max(C_l[i, j], 0.0)
                T.copy(C_l, C[by * 128, bx * 128])
            elif kind == "bias_store":
                for i, j in T.Parallel(128, 128):
                    if by * 128 + i < M and bx * 128 + j < N:
                        C[by * 128 + i, bx * 128 + j] = C_l[i, j] + Bias[bx * 128 + j]
            elif kind == "reversed":
                for i, j in T.Parallel(128, 128):
                    C[by * 128 + i, bx * 128 + j] = C_l[i, 127 - j]
            elif kind == "mirrored":
                for i, j in T.Parallel(128, 128):
                    C[by * 128 + i, bx * 128 + 127 - j] = C_l[i, j]
            else:
                for i in T.Parallel(128):
                    C_l[i, 0] = C_l[i, 0] + T.Cast("float32", bx)
                T.copy(C_l, C[by * 128, bx * 128])

    return main


def _coarsened(f):
    """The program after RegisterOperand and CoarsenBlocks only."""
    from tilex import config
    from tilex.transform.coarsen_blocks import coarsen_blocks
    from tilex.transform.register_operand import register_operand

    with config.scope(PIN):
        return coarsen_blocks(register_operand(f, SM90), SM90)


def _nest(f):
    """The T.Parallel nest of the program after CoarsenBlocks, as TVMScript."""
    script = _coarsened(f).script()
    at = script.index("T.parallel")
    return script[at:script.index("T.tilex_copy", at) if "T.tilex_copy" in script[at:] else len(script)]


def test_element_wise_epilogues_double_with_the_block():
    f = _lowered(_epilogue(4096, 4096, 4096, "relu"))
    assert _note(f) == ("blocks (2 bx, by) and (2 bx + 1, by) run as one block of 256 threads: "
                        "C_l [128, 128] -> [128, 256], B_s [64, 128] -> [64, 256]")
    assert "tilex::wgmma_m64n256k16" in f.script()
    # the nest runs over the doubled columns; a column j is column j % 128 of block 2 bx + j // 128, which the
    # global indices fold back into bx * 256 + j
    nest = _nest(_epilogue(4096, 4224, 4096, "bias_store"))
    assert "for j in T.parallel(256):" in nest
    assert "C[by * 128 + i, bx * 256 + j]" in nest and "Bias[bx * 256 + j]" in nest
    assert "bx * 2 + j // 128 < 33" in nest  # bx * 128 + j < 4224 of the original block


def _guarded(M, N, K, var):
    """The plain GEMM with a tile operator under a condition on the block index (`var` "bx") or on the K step
    ("k"): the rewrites substitute those only inside tile operators and nests, so they must leave it alone."""
    @T.prim_func
    def main(A: T.Tensor((M, K), "float16"), B: T.Tensor((K, N), "float16"), C: T.Tensor((M, N), "float16")):
        with T.Kernel(T.ceildiv(N, 128), T.ceildiv(M, 128), threads=128) as (bx, by):
            A_s = T.alloc_shared((128, 32), "float16")
            B_s = T.alloc_shared((32, 128), "float16")
            C_l = T.alloc_fragment((128, 128), "float32")
            T.clear(C_l)
            for k in T.Pipelined(T.ceildiv(K, 32), num_stages=3):
                T.copy(A[by * 128, k * 32], A_s)
                T.copy(B[k * 32, bx * 128], B_s)
                if var == "bx" or k < T.ceildiv(K, 32) - 1:
                    T.gemm(A_s, B_s, C_l)
            if var == "k" or bx % 2 == 0:
                T.copy(C_l, C[by * 128, bx * 128])

    return main


def test_block_or_step_used_outside_tile_operators_keeps_the_program():
    assert _note(_coarsened(_guarded(4096, 4096, 4096, "bx"))) == (
        "two iterations of the T.Pipelined loop per stage: A_s [128, 32] -> [128, 64], B_s [32, 128] -> [64, 128]")
    assert _note(_coarsened(_guarded(4096, 4096, 4096, "k"))) is None


def test_a_bias_tile_copied_per_block_doubles_too():
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))
    from gemm_epilogue import gemm_bias_act_kernel

    f = _lowered(gemm_bias_act_kernel(4096, 4096, 4096, "gelu"))
    assert _note(f).endswith("C_l [128, 128] -> [128, 256], B_s [64, 128] -> [64, 256], bias [128] -> [256]")


def test_epilogues_that_cannot_double_keep_the_block():
    # (the pass alone: the first program is one the layout passes refuse anyway, the accumulator read across threads)
    # the columns read back to front: column j of the wide tile is not column j of either block
    assert _note(_coarsened(_epilogue(4096, 4096, 4096, "reversed"))) is None
    # a nest that uses bx but no tile of the block's columns would lose which block it runs for
    assert _note(_coarsened(_epilogue(4096, 4096, 4096, "block_sum"))) is None
    assert _note(_coarsened(_epilogue(4096, 4096, 4096, "relu"))) is not None  # (the check above can fail)


@pytest.mark.gpu
@pytest.mark.parametrize("N,bk", [(4096, 64), (4224, 64), (4224, 32)])  # 4224: 33 block columns, the last
# coarsened block half past N; bk 32: two iterations per stage as well
def test_coarsened_results(N, bk):
    import torch

    import tilex

    kernel = tilex.compile(matmul(4096, N, 1056, bm=128, bn=128, bk=bk, threads=128))
    assert "wgmma_m64n256k16" in kernel.get_kernel_source()
    a = torch.randn(4096, 1056, device="cuda", dtype=torch.float16)
    b = torch.randn(1056, N, device="cuda", dtype=torch.float16)
    c = torch.full((4096, N), float("nan"), device="cuda", dtype=torch.float16)
    kernel(a, b, c)
    torch.testing.assert_close(c, (a.float() @ b.float()).half(), atol=5e-2, rtol=1e-2)


@pytest.mark.gpu
@pytest.mark.parametrize("kind", ["relu", "bias_store", "gelu_example", "mirrored"])
def test_coarsened_epilogue_results(kind):
    import sys
    from pathlib import Path

    import torch

    import tilex

    M, N, K = 2048, 4224, 1024  # 33 block columns: the last coarsened block is half past N
    a = torch.randn(M, K, device="cuda", dtype=torch.float16)
    b = torch.randn(K, N, device="cuda", dtype=torch.float16)
    bias = torch.randn(N, device="cuda", dtype=torch.float16)
    c = torch.full((M, N), float("nan"), device="cuda", dtype=torch.float16)
    ref = a.float() @ b.float()
    if kind == "gelu_example":
        sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))
        from gemm_epilogue import gemm_bias_act_kernel, reference

        kernel = tilex.compile(gemm_bias_act_kernel(M, N, K, "gelu"))
        kernel(a, b, bias, c)
        ref = reference(a, b, bias, "gelu")
    elif kind == "mirrored":
        kernel = tilex.compile(_epilogue(M, N - 128, K, kind))  # (whole blocks: the mirror of a ragged one is not)
        c = c[:, :N - 128].contiguous()
        kernel(a, b[:, :N - 128].contiguous(), bias[:N - 128].contiguous(), c)
        ref = ref[:, :N - 128].reshape(M, -1, 128).flip(-1).reshape(M, -1)
    else:
        kernel = tilex.compile(_epilogue(M, N, K, kind))
        kernel(a, b, bias, c)
        ref = ref.clamp_min(0) if kind == "relu" else ref + bias.float()
    assert "wgmma_m64n256k16" in kernel.get_kernel_source()
    torch.testing.assert_close(c.float(), ref, atol=5e-2, rtol=1e-2)
