"""PersistentTiles on warp-specialized GEMMs (IR and generated CUDA, no GPU needed)."""
import shutil

import pytest
import tvm

from tilex.engine import lower_to_tir
from tilex.kernels.gemm import matmul
from tilex.transform.hopper.warp_specialize import register_budget

SM90 = tvm.target.Target({"kind": "cuda", "arch": "sm_90a"})
PIN = {"tilex.num_sms": 132}


def _script(func, **cfg):
    return lower_to_tir(func, SM90, {**PIN, **cfg})["main"].script()


def test_grid_becomes_one_block_per_multiprocessor():
    script = _script(matmul(4096, 4096, 4096, 128, 256, 64, 4, 256), **{"tilex.disable_tma_multicast": True})
    assert 'T.launch_thread("blockIdx.x", 132)' in script
    assert "blockIdx.y" not in script
    # both roles walk the 512 tiles with stride 132
    assert script.count("(511 - blockIdx_x) // 132 + 1") == 2
    # the pipeline counter runs on across tiles: producer waits / consumer releases test i * 64 + k
    # (k - 0: k minus the loop's first iteration, folded later by TVM's simplifier)
    assert "if T.Sub(k, 0) + tile_p * 64 >= 4:" in script
    assert "if T.Sub(k, 0) > 0 and v % 32 == 0:" in script  # releases the previous stage of this tile ...
    # ... and the tile's last stage right after the final wgmma wait, before the epilogue
    assert "tilex::mbar_arrive\", T.address_of(tma_empty[T.Sub(tile_c * 64 + 64 + 3, 0) % 4]))" in script


def test_block_pairs_multicast_the_shared_operand():
    """Tile pairs (by = 2q, 2q + 1) share B: each block of a cluster loads two of B's four boxes for both."""
    script = _script(matmul(4096, 4096, 4096, 128, 256, 64, 4, 256))
    assert script.count("tilex::tma_load_2d_multicast") == 4 and script.count('"tilex::tma_load_2d"') == 1
    assert "(255 - blockIdx_x // 2) // 66 + 1" in script  # 256 tile pairs over 66 clusters
    assert "tilex::mbar_arrive_cluster" in script  # a stage is released to both producers
    assert "tilex::cluster_sync" in script and "tilex::cluster_dims<2>" in script
    assert "tma_empty[bar_i]), 16)" in script  # 8 local + 8 remote consumer warps


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
def test_multicast_kernel_compiles_with_cluster_dims():
    from tilex.engine import build
    from tilex.engine.nvcc import compile_cuda

    ex = build(matmul(4096, 4096, 4096, 128, 256, 64, 4, 256, swizzle=8), SM90, PIN)
    src = ex.mod.imports[0].inspect_source()
    assert "__cluster_dims__(2, 1, 1) __launch_bounds__(384, 1)" in src
    assert "tilex::tma_load_2d_multicast" in src and "tilex::mbar_arrive_cluster" in src
    compile_cuda(src, "sm_90a")


@pytest.mark.parametrize("cfg", [{"tilex.disable_tma_multicast": True}, {}])
def test_odd_block_rows_get_no_pairs(cfg):
    script = _script(matmul(3900, 4096, 1024, 128, 256, 64, 4, 256), **cfg)  # 31 block rows
    assert "tile_c" in script and "multicast" not in script and "cluster" not in script


def test_rasterization_is_applied_per_tile():
    script = _script(matmul(4096, 4096, 4096, 128, 256, 64, 4, 256, swizzle=8))
    assert "use_swizzle" not in script
    assert "T.min(4" in script  # panel of 8 block rows = 4 tile pairs


@pytest.mark.parametrize("cfg", [{"tilex.disable_persistent": True}, {}])
def test_small_grids_and_disabled_config_keep_one_block_per_tile(cfg):
    # 4096^2 output in 128x256 tiles = 512 blocks; 1024^2 = 32 blocks, fewer than the multiprocessors
    shape = (4096, 4096, 4096) if "tilex.disable_persistent" in cfg else (1024, 1024, 1024)
    script = _script(matmul(*shape, 128, 256, 64, 4, 256), **cfg)
    assert "blockIdx.y" in script and "tile_c" not in script and "ws_base" not in script


def test_cp_async_kernels_are_not_made_persistent():
    script = _script(matmul(4096, 4096, 4096, 128, 256, 64, 3, 256), **{"tilex.disable_warp_specialized": True})
    assert "blockIdx.y" in script and "tile_c" not in script


def test_register_budget():
    assert register_budget(256, 192 * 1024, 128) == (1, 168, 232)  # 128x256 tile, 4 stages: one block
    # two blocks fit in shared memory, but the entry cap (80) cannot hold a 64-register accumulator
    assert register_budget(256, 96 * 1024, 64)[0] == 1
    assert register_budget(128, 96 * 1024, 64) == (2, 128, 216)


def test_staged_epilogue_does_not_alias_stages():
    """In a persistent kernel the producer refills stages while the consumers stage C: the C tile (64 KB) must get
    bytes of its own. A: 3 x 8192 halves from 0, then C, then B: 3 x 16384 halves."""
    from tilex.engine import build

    ex = build(matmul(4096, 4096, 4096, 128, 256, 64, 3, 256, stage_c=True), SM90, PIN)
    src = ex.mod.imports[0].inspect_source()
    assert "for (int tile_c" in src and "tilex::tma_store_2d" in src
    store_planes = [24576, 32768, 40960, 49152]
    for off in store_planes:
        assert f"(((0 ^ 0) * 8) + {off})])" in src
    assert "+ 57344)])), ((unsigned long long)(&(B_tmap" in src  # B's stages start after C


@pytest.mark.parametrize("size", [2, 4])
def test_one_wave_grids_cluster_along_x_and_multicast_a(size):
    """128 column blocks over N fit in one wave: no persistence, but clusters of `size` blocks along x share the
    A tile (it does not depend on bx) when tilex.cluster_size asks for it; member j % size issues A's boxes."""
    script = _script(matmul(128, 8192, 8192, 128, 64, 128, 4, 256), **{"tilex.cluster_size": size})
    assert 'T.launch_thread("blockIdx.x", 128)' in script and "tile_c" not in script
    assert f"tilex::cluster_dims<{size}>" in script
    assert script.count("tilex::tma_load_2d_multicast") == 2 and script.count('"tilex::tma_load_2d"') == 1
    assert script.count("tilex::mbar_arrive_cluster") == 2 * (size - 1)  # in-loop and final releases
    assert f"tma_empty[bar_i]), {8 * size})" in script  # 8 consumer warps per member


@pytest.mark.parametrize("cfg", [{"tilex.disable_tma_multicast": True, "tilex.cluster_size": 2},
                                 {"tilex.cluster_size": 2}, {}])
def test_row_clusters_need_an_even_grid_and_no_rasterization(cfg):
    odd = _script(matmul(128, 8192 - 64, 8192, 128, 64, 128, 4, 256), **cfg)  # 127 column blocks
    assert "cluster" not in odd
    swz = _script(matmul(128, 8192, 8192, 128, 64, 128, 4, 256, swizzle=4), **cfg)
    assert "cluster" not in swz
    if "tilex.cluster_size" not in cfg or cfg.get("tilex.disable_tma_multicast"):  # opt-in, and off with multicast
        assert "cluster" not in _script(matmul(128, 8192, 8192, 128, 64, 128, 4, 256), **cfg)


def test_cluster_size_is_checked():
    with pytest.raises(Exception, match="cluster_size must be 2 or 4"):
        _script(matmul(128, 8192, 8192, 128, 64, 128, 4, 256), **{"tilex.cluster_size": 3})
