"""StageEpilogue: the plain GEMM's fragment -> global copy goes through a shared tile and TMA stores, as wide as
occupancy allows; a pinned choice wins (IR on the CPU; results, ragged tiles too, on the GPU)."""
import pytest
import tvm

from programs import matmul
from tilex.engine import lower_to_tir
from tilex.ir.names import STAGED_EPILOGUES_ATTR
from tilex.ir.shared_memory import block_footprint
from tilex.transform.hopper.occupancy import CONSUMER_SPARE_REGS, blocks_per_sm, register_budget

SM90 = tvm.target.Target({"kind": "cuda", "arch": "sm_90a"})
SM80 = tvm.target.Target({"kind": "cuda", "arch": "sm_80"})
# the depths as written (DeepenPipeline has its own tests)
PIN = {"tilex.num_sms": 132, "tilex.disable_pipeline_deepening": True}


def _lowered(func, target=SM90, **cfg):
    return lower_to_tir(func, target, {**PIN, **cfg})["main"]


def _staged(f):
    return [str(n) for n in (f.attrs.get(STAGED_EPILOGUES_ATTR) or [])]


def test_a_whole_tile_is_staged_when_it_fits_beside_the_stages():
    # 128x256x64, 3 stages: 144 KB of stages + a 64 KB C tile, one block per multiprocessor either way
    f = _lowered(matmul(4096, 4096, 4096, bm=128, bn=256, bk=64, threads=256))
    assert _staged(f) == ["C_l -> C: through shared tile C_l_stage (128 x 256), stored by TMA in 1 block(s)"]
    script = f.script()
    assert script.count("tilex::tma_store_2d") == 4  # four 64-column swizzle planes
    assert 'C_l_stage = T.alloc_buffer((32768,), "float16", scope="shared.dyn")' in script


def test_column_blocks_keep_two_blocks_per_multiprocessor():
    # 128x128x64, 3 stages: 96 KB; a whole 32 KB C tile would leave one block per multiprocessor, 64 columns
    # (16 KB) keep two
    # (the block as written: CoarsenBlocks would make it 128x256)
    f = _lowered(matmul(4096, 4096, 4096, bm=128, bn=128, bk=64, threads=128),
                 **{"tilex.disable_block_coarsening": True})
    assert _staged(f) == ["C_l -> C: through shared tile C_l_stage (128 x 64), stored by TMA in 2 block(s)"]
    script = f.script()
    assert "for epi_j in T.unroll(2)" in script
    assert 'tilex::min_blocks_per_sm<2>' in script


def test_two_tiles_in_turn_when_half_width_is_staged():
    # 128x256x64 with 4 stages: 192 KB of stages leave 32 KB, held as two 64-column tiles: the threads write one
    # while the TMA store of the block before still reads the other
    program = matmul(4096, 4096, 4096, bm=128, bn=256, bk=64, stages=4, threads=256)
    f = _lowered(program)
    assert _staged(f) == ["C_l -> C: through shared tiles C_l_stage, C_l_stage1 (128 x 64) in turn, "
                          "stored by TMA in 4 block(s)"]
    script = f.script()
    loop = script[script.index("for epi_j in T.unroll(2"):]
    assert loop.startswith('for epi_j in T.unroll(2, annotations={"tilex.bulk_store_depth": 1}):')
    lines = [line.strip() for line in loop.splitlines()[1:]]
    for stage in ("C_l_stage[", "C_l_stage1["):
        k = next(n for n, line in enumerate(lines) if line.startswith(stage))
        # a barrier before each block's writes (ThreadSync alone would place one only before the store)
        assert lines[k - 3] == 'T.tvm_storage_sync("shared")', lines[k - 3:k]
    # in the kernel: thread 0 waits at those barriers until only its latest bulk group, the other tile's block, may
    # still be read; everything else waits for all
    import tilex
    src = tilex.compile(program, target="sm_90a", pass_configs=PIN).get_kernel_source()
    start = src.index("for (int epi_j = 0; epi_j < 2; ++epi_j) {")
    # right before the loop thread 0 waits for all its groups: inside, every group is the loop's own
    assert "bulk_wait_read<0>" in src[src.rindex("named_barrier_sync", 0, start):start]
    body = src[start:]
    body = body[:body.index("tilex::cluster_sync();")]
    steps = []
    for line in body.splitlines():
        for key, name in (("bulk_wait_read<", "wait"), ("named_barrier_sync", "bar"), ("tma_store_2d", "store"),
                          ("buf_dyn_shmem_ptr) + (", "write")):
            if key in line and (not steps or steps[-1] != name or name == "store"):
                steps.append(name + (line.split("bulk_wait_read")[1][:3] if name == "wait" else ""))
    assert steps[:9] == ["wait<1>", "bar", "write", "wait<1>", "bar", "store", "wait<1>", "bar", "write"], steps
    assert steps[9:12] == ["wait<1>", "bar", "store"] and steps[12:] == ["wait<0>"], steps


def test_blocks_of_less_than_128_bytes_stay_in_one_tile():
    # 128x128 tiles staged in 64-column blocks (two blocks per multiprocessor): a 32-column half would be a 64-byte
    # swizzle span, not measured, so one tile
    f = _lowered(matmul(4096, 4096, 4096, bm=128, bn=128, bk=64, threads=128),
                 **{"tilex.disable_block_coarsening": True})
    assert "bulk_wait_read<1>" not in f.script()


def test_pinned_per_thread_stores_stay():
    f = _lowered(matmul(4096, 4096, 4096, bm=128, bn=256, bk=64, threads=256, store_tma=False))
    assert not _staged(f) and "tma_store" not in f.script()
    f = _lowered(matmul(4096, 4096, 4096, bm=128, bn=256, bk=64, threads=256),
                 **{"tilex.disable_staged_epilogue": True})
    assert not _staged(f) and "tma_store" not in f.script()


def test_no_staging_without_tma_stores_or_for_untyped_tma_outputs():
    assert not _staged(_lowered(matmul(4096, 4096, 4096), target=SM80))
    # float32 outputs: TMA tiles of 8/16-bit data only
    assert not _staged(_lowered(matmul(4096, 4096, 4096, out_dtype="float32")))
    # no warp-specialized pipeline: the loop stays on cp.async
    assert not _staged(_lowered(matmul(4096, 4096, 4096), **{"tilex.disable_warp_specialized": True}))


def test_occupancy_rule():
    # the consumers' raised budget (216) holds a 128-register accumulator with the spare registers left
    assert register_budget(128, 96 * 1024, 128) == (2, 128, 216)
    assert 216 >= 128 + CONSUMER_SPARE_REGS
    assert register_budget(256, 192 * 1024, 128) == (1, 168, 232)
    # static shared memory pushes the dynamic part to a 1 KB boundary
    assert block_footprint(48, 1024) == 2048 and block_footprint(0, 1024) == 1024
    # two blocks of 1 KB barriers + 112 KB fill the 228 KB multiprocessor exactly (1 KB reserved each)
    assert blocks_per_sm(128, 48, 112 * 1024, 128) == 2
    assert blocks_per_sm(128, 48, 112 * 1024 + 16, 128) == 1


@pytest.mark.gpu
@pytest.mark.parametrize("M,N,bn,threads", [(1000, 1032, 128, 128), (4096, 4096, 256, 256), (4224, 520, 128, 128)])
def test_staged_epilogue_results(M, N, bn, threads):
    """Ragged tiles too: the TMA store clips the boxes that hang past C's rows and columns."""
    import torch

    import tilex

    prog = matmul(M, N, 1024, bm=128, bn=bn, bk=64, threads=threads)
    kernel = tilex.compile(prog)
    assert "tma_store_2d" in kernel.get_kernel_source()
    a = torch.randn(M, 1024, device="cuda", dtype=torch.float16)
    b = torch.randn(1024, N, device="cuda", dtype=torch.float16)
    c = torch.full((M, N), float("nan"), device="cuda", dtype=torch.float16)
    kernel(a, b, c)
    torch.testing.assert_close(c, (a.float() @ b.float()).half(), atol=5e-2, rtol=1e-2)


def _bmm_program(batch, M, N, K):
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_bmm.py"
    spec = importlib.util.spec_from_file_location("bench_bmm", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.bmm(batch, M, N, K)


def test_a_batched_output_is_staged_and_stored_at_its_batch():
    # C [4, 2048, 2048]: the tile's rows and columns in the last two dimensions, the batch index bz in the first
    f = _lowered(_bmm_program(4, 2048, 2048, 2048))
    assert _staged(f) == ["C_l -> C: through shared tile C_l_stage (128 x 256), stored by TMA in 1 block(s)"]
    script = f.script()
    assert script.count("tilex::tma_store_3d") == 4 and "tma_store_2d" not in script


def test_epilogue_copies_of_one_shape_share_a_stage_tile():
    # attention's backward writes dK and dV [batch, heads, seq, dim] from two 128 x 128 fragments: one stage tile
    from tilex.kernels.attention.backward import bwd_main, default_blocks

    bm, bn, stages, threads = default_blocks(128)
    f = _lowered(bwd_main(8, 2, 512, 128, True, bm=bm, bn=bn, num_stages=stages, threads=threads))
    assert _staged(f) == ["dk -> dK: through shared tile dk_stage (128 x 128), stored by TMA in 1 block(s)",
                          "dv -> dV: through shared tile dk_stage (128 x 128), stored by TMA in 1 block(s)"]
    assert f.script().count("dk_stage = T.alloc_buffer") == 1


@pytest.mark.gpu
@pytest.mark.parametrize("M", [2048, 1000])  # 1000: the last row block half past M (the TMA store clips it)
def test_staged_batched_results(M):
    import torch

    import tilex

    kernel = tilex.compile(_bmm_program(3, M, 512, 256))
    assert "tma_store_3d" in kernel.get_kernel_source()
    a = torch.randn(3, M, 256, device="cuda", dtype=torch.float16)
    b = torch.randn(3, 256, 512, device="cuda", dtype=torch.float16)
    c = torch.full((3, M, 512), float("nan"), device="cuda", dtype=torch.float16)
    kernel(a, b, c)
    torch.testing.assert_close(c, torch.bmm(a, b), atol=5e-2, rtol=1e-2)
