"""Shared tiles that take turns (transform/shared_reuse.py): a kernel whose tiles do not fit one sm_90 block side by
side gets tiles whose lifetimes do not overlap placed over the same bytes, with a barrier where one takes over from
another; a kernel that fits is left as it was; one that fits neither way is refused naming its largest tiles.

The CPU tests read the CUDA tilex generates for sm_90a and the shared memory it launches with; the GPU tests check
the values against torch."""
import re

import pytest
import tvm

import tilex
import tilex.language as T
from cuda_text import braced_block
from tilex.autotuner.smem import shared_memory_bytes
from tilex.ir import shared_memory
from tilex.ir.hardware import block_shared_memory_limit
from tilex.ir.names import SHARED_PLACEMENT_ATTR

LIMIT = block_shared_memory_limit(90)  # 227 KB


def _source(func, **kw):
    src = tilex.compile(func, target="sm_90a", **kw).get_kernel_source()
    return src[src.index('extern "C" __global__ void __launch_bounds__'):]


# ---- programs -------------------------------------------------------------------------------------------------------
def two_phases(m=128, n=256):
    """Phase 1 reads a_s, phase 2 reads c_s, each tile m x n fp32 (128 KB at the default size: 256 KB together)
    and read by other threads than the ones that wrote it (rows reversed)."""

    @T.prim_func
    def main(A: T.Tensor((m, n), "float32"), B: T.Tensor((m, n), "float32"),
             C: T.Tensor((m, n), "float32"), D: T.Tensor((m, n), "float32")):
        with T.Kernel(1, threads=128) as bx:
            a_s = T.alloc_shared((m, n), "float32")
            c_s = T.alloc_shared((m, n), "float32")
            T.copy(A, a_s)
            for i, j in T.Parallel(m, n):
                B[i, j] = a_s[m - 1 - i, j]
            T.copy(C, c_s)
            for i, j in T.Parallel(m, n):
                D[i, j] = c_s[m - 1 - i, j] * 2.0

    return main


def phases_through_a_view(m=128, n=256):
    """two_phases with phase 1 reading its tile through a T.view (rows paired up): the view moves with its tile."""

    @T.prim_func
    def main(A: T.Tensor((m, n), "float32"), B: T.Tensor((m, n), "float32"),
             C: T.Tensor((m, n), "float32"), D: T.Tensor((m, n), "float32")):
        with T.Kernel(1, threads=128) as bx:
            a_s = T.alloc_shared((m, n), "float32")
            pairs = T.view(a_s, shape=(m // 2, 2 * n))
            c_s = T.alloc_shared((m, n), "float32")
            T.copy(A, a_s)
            for i, j in T.Parallel(m, n):
                B[i, j] = pairs[(m - 1 - i) // 2, (m - 1 - i) % 2 * n + j]
            T.copy(C, c_s)
            for i, j in T.Parallel(m, n):
                D[i, j] = c_s[m - 1 - i, j] * 2.0

    return main


def both_at_once(m=128, n=256):
    """Two 128 KB tiles read by the same statement: they cannot take turns."""

    @T.prim_func
    def main(A: T.Tensor((m, n), "float32"), B: T.Tensor((m, n), "float32")):
        with T.Kernel(1, threads=128) as bx:
            a_s = T.alloc_shared((m, n), "float32")
            c_s = T.alloc_shared((m, n), "float32")
            T.copy(A, a_s)
            T.copy(A, c_s)
            for i, j in T.Parallel(m, n):
                B[i, j] = a_s[m - 1 - i, j] + c_s[i, n - 1 - j]

    return main


def regions_side_by_side(m=128, n=256):
    """Warp group 0 uses a_s, warp group 1 c_s (128 KB each): the two regions run at the same time."""

    @T.prim_func
    def main(A: T.Tensor((m, n), "float32"), B: T.Tensor((m, n), "float32"),
             C: T.Tensor((m, n), "float32"), D: T.Tensor((m, n), "float32")):
        with T.Kernel(1, threads=256) as bx:
            a_s = T.alloc_shared((m, n), "float32")
            c_s = T.alloc_shared((m, n), "float32")
            with T.ws(0):
                T.copy(A, a_s)
                for i, j in T.Parallel(m, n):
                    B[i, j] = a_s[m - 1 - i, j]
            with T.ws(1):
                T.copy(C, c_s)
                for i, j in T.Parallel(m, n):
                    D[i, j] = c_s[m - 1 - i, j]

    return main


BIG = 226 * 1024 // 4  # fp32 elements of a tile that leaves 1 KB of the block


def reductions_in_a_loop(rows=4, n=1024):
    """A 226 KB tile beside two cross-warp reductions per iteration (a 1 KB workspace each: 256 threads x one
    row): the workspaces take turns inside the loop body."""

    @T.prim_func
    def main(A: T.Tensor((rows, n), "float32"), B: T.Tensor((rows,), "float32")):
        with T.Kernel(1, threads=256) as bx:
            big = T.alloc_shared((BIG,), "float32")
            x = T.alloc_fragment((1, n), "float32")
            mx = T.alloc_fragment((1,), "float32")
            sm = T.alloc_fragment((1,), "float32")
            for k in T.serial(rows):
                T.copy(A[k:k + 1, 0:n], x)
                T.reduce_max(x, mx, dim=1)
                T.reduce_sum(x, sm, dim=1)
                for i in T.Parallel(1):
                    big[k + i] = mx[i] + sm[i]
            T.copy(big[0:rows], B[0:rows])

    return main


def gemm_through_fp32_tile(M=512, N=512, K=1024, bm=128, bn=256, bk=64, stages=3):
    """C = A @ B written through a 128 KB fp32 shared tile after a 3-stage TMA pipeline of 144 KB
    (warp-specialized): the epilogue tile takes over the stages' bytes."""

    @T.prim_func
    def main(A: T.Tensor((M, K), "float16"), B: T.Tensor((K, N), "float16"), C: T.Tensor((M, N), "float32")):
        with T.Kernel(N // bn, M // bm, threads=256) as (bx, by):
            A_s = T.alloc_shared((bm, bk), "float16")
            B_s = T.alloc_shared((bk, bn), "float16")
            C_s = T.alloc_shared((bm, bn), "float32")
            C_l = T.alloc_fragment((bm, bn), "float32")
            T.clear(C_l)
            for k in T.Pipelined(K // bk, num_stages=stages):
                T.copy(A[by * bm, k * bk], A_s)
                T.copy(B[k * bk, bx * bn], B_s)
                T.gemm(A_s, B_s, C_l)
            T.copy(C_l, C_s)
            T.copy(C_s, C[by * bm, bx * bn])

    return main


# ---- CPU: placement and barriers ------------------------------------------------------------------------------------
def test_tiles_that_fit_side_by_side_are_kept_apart():
    """Two 32 KB tiles fit: no placement, each tile at its own offset (KeepTilesApart as before)."""
    assert shared_memory_bytes(two_phases(m=64, n=128), target="sm_90a") == 2 * 64 * 128 * 4


def test_phases_take_turns_with_a_barrier_between():
    prog = two_phases()
    assert shared_memory_bytes(prog, target="sm_90a") == 128 * 256 * 4  # one tile's bytes, not two
    src = _source(prog)
    assert "uchar buf_dyn_shmem_ptr[]" in src
    # c_s is written where a_s was read: a block barrier between phase 1's last read and phase 2's first write
    read_a = src.index("*(float4*)(B_ptr")
    write_c = src.index("*(float4*)(C_ptr")
    between = src[read_a:write_c]
    assert between.count("__syncthreads()") == 1, between
    # both tiles start at the arena's first byte
    first_stores = re.findall(r"\*\(float4\*\)\(\(\(float\*\)buf_dyn_shmem_ptr\) \+ \(\((\w+) \* 512\) \+", src)
    assert first_stores == ["cp_it", "cp_it_1"], first_stores


def test_views_take_turns_with_their_tile():
    prog = phases_through_a_view()
    assert shared_memory_bytes(prog, target="sm_90a") == 128 * 256 * 4
    src = _source(prog)
    assert "uchar buf_dyn_shmem_ptr[]" in src
    read_a = src.index("*(float4*)(B_ptr")
    write_c = src.index("*(float4*)(C_ptr")
    assert src[read_a:write_c].count("__syncthreads()") == 1, src[read_a:write_c]


def test_workspaces_in_a_loop_take_turns_without_more_barriers():
    """The two reductions' workspaces share bytes (each brings its own barriers); the 226 KB tile stays apart."""
    prog = reductions_in_a_loop()
    assert shared_memory_bytes(prog, target="sm_90a") == 227 * 1024
    src = _source(prog)
    ws = re.findall(r"\(\(float\*\)buf_dyn_shmem_ptr\)\[\(\(\(int\)threadIdx\.x\) \+ (\d+)\)\] = ", src)
    assert ws == [str(BIG)] * 2, ws  # both workspaces written right after the big tile
    loop = braced_block(src, "for (int k = 0;")
    assert loop.count("__syncthreads()") == 6  # the two reductions' own: before writing, between, after reading


def test_epilogue_tile_takes_over_the_pipeline_stages():
    prog = gemm_through_fp32_tile()
    smem = shared_memory_bytes(prog, target="sm_90a")
    assert smem < LIMIT and smem >= 3 * (128 * 64 + 64 * 256) * 2  # the stages, the epilogue tile over them
    src = _source(prog)
    assert "reg_alloc" in src  # warp-specialized
    # the swizzled stages stay on 1 KB boundaries (fp16 elements: multiples of 512) at every stage
    loads = re.findall(r"tma_load_2d\(\(&\(\(\(half\*\)buf_dyn_shmem_ptr\)\[(.*?)\]\)\)", src)
    assert len(loads) == 5, loads
    for index in loads:
        for stage in range(3):
            offset = eval(index.replace("k % 3", str(stage)).replace("/", "//"))
            assert offset % 512 == 0, (index, stage)
    consumer = src[src.index("tilex::reg_alloc"):]
    first_c_write = consumer.index("*(float2*)(((float*)buf_dyn_shmem_ptr)")
    loop_end = consumer.rindex("tilex::mbar_wait", 0, first_c_write)
    before = consumer[loop_end:first_c_write]
    # the wgmma reads of the stages are complete, TMA / wgmma and generic accesses are fenced, the consumers meet
    assert re.search(r"tilex::wgmma_wait<0>\(\);\s*tilex::fence_proxy_async\(\);\s*tilex::named_barrier_sync\(256\);",
                     before), before


def test_placement_attribute_does_not_reach_the_executable():
    from tilex.engine import lower_to_tir
    from tilex.engine.pipeline import tvm_passes

    target = tvm.target.Target({"kind": "cuda", "arch": "sm_90a"})
    mod = lower_to_tir(two_phases(), target)
    with tvm.transform.PassContext(opt_level=3), target:
        passes = tvm_passes(tvm.transform.PassContext.current().config)
        names = [str(p.info.name) for p in passes]
        keep = names.index("tilex.KeepTilesApart")
        planned = tvm.transform.Sequential(passes[: keep + 1])(mod)["main"]
        assert SHARED_PLACEMENT_ATTR in planned.attrs
        done = tvm.transform.Sequential(passes[: names.index("tilex.CheckSharedMemory") + 1])(mod)["main"]
        assert SHARED_PLACEMENT_ATTR not in done.attrs


# ---- CPU: the report when it does not fit ---------------------------------------------------------------------------
def test_tiles_used_together_are_reported():
    with pytest.raises(ValueError) as e:
        tilex.compile(both_at_once(), target="sm_90a")
    msg = str(e.value)
    assert msg.startswith(f"{shared_memory.SHARED_ERROR} of one block is 262144 bytes"), msg
    assert "largest tiles: a_s 128.0 KB, c_s 128.0 KB" in msg
    assert "sharing memory: still 262144 bytes" in msg
    assert "added by tilex" not in msg  # the program's own tiles, as declared


def test_tiles_of_thread_regions_never_take_turns():
    with pytest.raises(ValueError) as e:
        tilex.compile(regions_side_by_side(), target="sm_90a")
    msg = str(e.value)
    assert "largest tiles: a_s 128.0 KB, c_s 128.0 KB" in msg, msg
    assert "thread regions (T.ws) of this kernel run side by side" in msg


def test_report_names_pipeline_stages_tilex_added():
    with pytest.raises(ValueError) as e:
        tilex.compile(gemm_through_fp32_tile(bk=128, stages=4), target="sm_90a")
    msg = str(e.value)
    assert "largest tiles: B_s 256.0 KB, A_s 128.0 KB, C_s 128.0 KB" in msg, msg
    assert "B_s 256.0 KB (4 pipeline stages of 64.0 KB)" in msg and "A_s 128.0 KB (4 pipeline stages of 32.0 KB)" in msg
    assert re.search(r"sharing memory: still \d+ bytes \(385\.\d KB\)", msg), msg
    assert "C_s 128.0 KB (" not in msg  # declared as it is


def test_report_names_workspaces_tilex_added():
    with shared_memory.declared_tiles(reductions_in_a_loop()):
        msg = shared_memory.shortfall_message(300000, LIMIT, 90, [("big", 231424), ("red_ws", 1024),
                                                                  ("red_ws", 1024), ("tma_full", 16)])
    assert "largest tiles: big 226.0 KB, red_ws 1.0 KB, red_ws 1.0 KB" in msg
    assert "added by tilex: red_ws 1.0 KB x2 (cross-warp reduction workspace)" in msg
    assert "tma_full" not in msg


# ---- GPU: values ----------------------------------------------------------------------------------------------------
@pytest.mark.gpu
@pytest.mark.parametrize("program", [two_phases, phases_through_a_view])
def test_phases_values(program):
    import torch

    kernel = tilex.compile(program(), out_idx=[1, 3])
    a = torch.randn(128, 256, device="cuda")
    c = torch.randn(128, 256, device="cuda")
    b, d = kernel(a, c)
    torch.testing.assert_close(b, a.flip(0))
    torch.testing.assert_close(d, 2 * c.flip(0))


@pytest.mark.gpu
def test_workspaces_values():
    import torch

    kernel = tilex.compile(reductions_in_a_loop(), out_idx=[1])
    a = torch.randn(4, 1024, device="cuda")
    torch.testing.assert_close(kernel(a), a.amax(1) + a.sum(1), rtol=1e-4, atol=1e-3)


@pytest.mark.gpu
def test_gemm_through_fp32_tile_values():
    import torch

    kernel = tilex.compile(gemm_through_fp32_tile(), out_idx=[2])
    a = torch.randn(512, 1024, device="cuda", dtype=torch.float16)
    b = torch.randn(1024, 512, device="cuda", dtype=torch.float16)
    torch.testing.assert_close(kernel(a, b), a.float() @ b.float(), rtol=1e-2, atol=1e-2)
