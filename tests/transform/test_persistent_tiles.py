"""PersistentTiles on warp-specialized GEMMs (IR and generated CUDA, no GPU needed)."""
import os
import sys

import pytest
import tvm

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "examples"))

from gemm_kernels import matmul  # noqa: E402
from tilex.engine import lower_to_tir  # noqa: E402
from tilex.transform.warp_specialize import register_budget  # noqa: E402

SM90 = tvm.target.Target({"kind": "cuda", "arch": "sm_90a"})
PIN = {"tilex.num_sms": 132}


def _script(func, **cfg):
    return lower_to_tir(func, SM90, {**PIN, **cfg})["main"].script()


def test_grid_becomes_one_block_per_multiprocessor():
    script = _script(matmul(4096, 4096, 4096, 128, 256, 64, 4, 256))
    assert 'T.launch_thread("blockIdx.x", 132)' in script
    assert "blockIdx.y" not in script
    # both roles walk the 512 tiles with stride 132
    assert script.count("(511 - blockIdx_x) // 132 + 1") == 2
    # the pipeline counter runs on across tiles: producer waits / consumer releases test i * 64 + k
    assert "if k + tile_p * 64 >= 4:" in script
    assert "if k + tile_c * 64 > 0 and v % 32 == 0:" in script


def test_rasterization_is_applied_per_tile():
    script = _script(matmul(4096, 4096, 4096, 128, 256, 64, 4, 256, swizzle=8))
    assert "use_swizzle" not in script
    assert "T.min(8" in script  # panel height of the tile's panel


@pytest.mark.parametrize("cfg", [{"tilex.disable_persistent": True}, {}])
def test_small_grids_and_disabled_config_keep_one_block_per_tile(cfg):
    # 4096^2 output in 128x256 tiles = 512 blocks; 1024^2 = 32 blocks, fewer than the multiprocessors
    shape = (4096, 4096, 4096) if cfg else (1024, 1024, 1024)
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
