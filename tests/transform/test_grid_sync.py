"""T.sync_grid: a barrier across the grid (tilex.transform.grid_sync, src/tilex/grid_sync.h).

The kernel calls cooperative groups' grid sync and is launched cooperatively (TVM's launch tag); a grid that cannot
be resident at once, or a grid barrier some threads or blocks skip, is a ValueError when it compiles."""
import pytest
import tvm

import tilex
import tilex.language as T
from tilex import config
from tilex.engine import pipeline
from tilex.ir.names import COOPERATIVE_LAUNCH, KERNEL_LAUNCH_PARAMS
from tilex.transform.grid_sync import GridSync, max_resident_blocks

G, N = 8, 64


def rotate(blocks=G, threads=N, shared=0):
    """Each block adds 1 to its row, then (after the grid barrier) reads its neighbour's row."""
    has_shared = shared > 0

    @T.prim_func
    def k(A: T.Tensor((blocks, threads), "float32"), B: T.Tensor((blocks, threads), "float32")):
        with T.Kernel(blocks, threads=threads) as bx:
            tx = T.get_thread_binding()
            if has_shared:
                s = T.alloc_shared((shared // 4,), "float32")
                s[tx] = A[bx, tx]
                A[bx, tx] = s[(tx + 1) % threads] + 1.0
            else:
                A[bx, tx] = A[bx, tx] + 1.0
            T.sync_grid()
            B[bx, tx] = A[(bx + 1) % blocks, tx]

    return k


def _device_kernels(func):
    """The module's device kernels right after GridSync."""
    target = tilex.env.resolve_target("sm_90a")
    host = target if target.host is not None else target.with_host(tvm.target.Target("llvm"))
    with config.scope({}), tvm.transform.PassContext(opt_level=3), target:
        mod = tvm.IRModule({"k": pipeline.run_tile_passes(func.with_attr("global_symbol", "k"), target)})
        mod = tvm.tirx.transform.BindTarget(host)(mod)
        passes = pipeline.tvm_passes({})
        upto = next(i for i, p in enumerate(passes) if p is GridSync)
        mod = tvm.transform.Sequential(passes[:upto + 1])(mod)
    return {gv.name_hint: f for gv, f in mod.functions.items() if KERNEL_LAUNCH_PARAMS in (f.attrs or {})}


def test_the_kernel_calls_the_grid_barrier_and_includes_its_header():
    src = tilex.compile(rotate(), target="sm_90a").get_kernel_source()
    assert '#include "tilex/grid_sync.h"' in src
    body = src[src.index("__global__"):]
    assert body.count("tilex::sync_grid();") == 1
    assert body.index("A_ptr[((((int)blockIdx.x) * 64)") < body.index("tilex::sync_grid();")


def test_the_kernel_is_launched_cooperatively():
    kernels = _device_kernels(rotate())
    assert [str(p) for p in kernels["k_kernel"].attrs[KERNEL_LAUNCH_PARAMS]] == [
        COOPERATIVE_LAUNCH, "blockIdx.x", "threadIdx.x"]


def test_a_kernel_without_a_grid_barrier_is_left_alone():
    @T.prim_func
    def k(A: T.Tensor((G, N), "float32")):
        with T.Kernel(G, threads=N) as bx:
            tx = T.get_thread_binding()
            A[bx, tx] = A[bx, tx] + 1.0

    kernels = _device_kernels(k)
    assert COOPERATIVE_LAUNCH not in [str(p) for p in kernels["k_kernel"].attrs[KERNEL_LAUNCH_PARAMS]]
    assert "grid_sync.h" not in tilex.compile(k, target="sm_90a").get_kernel_source()


def test_a_grid_that_cannot_be_resident_at_once_is_refused():
    # 2048 threads per multiprocessor: at most 8 blocks of 256 threads, 8 * 132 on an H100
    assert max_resident_blocks(256, 0, 132) == 8 * 132
    with pytest.raises(ValueError, match=r"grid of 20000 blocks cannot be resident at once.*at most 1056"):
        tilex.compile(rotate(blocks=20000, threads=256), target="sm_90a")


def test_shared_memory_limits_the_resident_blocks():
    # 100 KB of shared memory per block: two blocks per multiprocessor
    with pytest.raises(ValueError, match=r"fit at most 2 per multiprocessor"):
        tilex.compile(rotate(blocks=2 * 132 + 1, threads=128, shared=100 * 1024), target="sm_90a")


def test_a_grid_barrier_under_a_block_dependent_condition_is_refused():
    @T.prim_func
    def k(A: T.Tensor((G, N), "float32")):
        with T.Kernel(G, threads=N) as bx:
            tx = T.get_thread_binding()
            A[bx, tx] = A[bx, tx] + 1.0
            if bx < 4:
                T.sync_grid()

    with pytest.raises(ValueError, match=r"T.sync_grid .* under the condition `bx < 4`.*every thread of every block"):
        tilex.compile(k, target="sm_90a")


def test_a_grid_barrier_in_a_loop_of_per_thread_trip_count_is_refused():
    @T.prim_func
    def k(A: T.Tensor((G, N), "float32"), C: T.Tensor((N,), "int32")):
        with T.Kernel(G, threads=N) as bx:
            tx = T.get_thread_binding()
            for i in T.serial(C[tx]):
                A[bx, tx] = A[bx, tx] + 1.0
                T.sync_grid()

    with pytest.raises(ValueError, match=r"in the loop over 'i'"):
        tilex.compile(k, target="sm_90a")


def test_a_grid_barrier_in_a_loop_every_block_runs_alike_compiles():
    @T.prim_func
    def k(A: T.Tensor((G, N), "float32"), C: T.Tensor((1,), "int32")):
        with T.Kernel(G, threads=N) as bx:
            tx = T.get_thread_binding()
            for i in T.serial(C[0]):  # a read-only tensor at one index: the same trip count everywhere
                A[bx, tx] = A[(bx + 1) % G, tx] + 1.0
                T.sync_grid()

    src = tilex.compile(k, target="sm_90a").get_kernel_source()
    assert "tilex::sync_grid();" in src


def test_sync_grid_outside_a_kernel_is_a_value_error():
    with pytest.raises(ValueError, match=r"T.sync_grid is only valid inside `with T.Kernel"):
        T.sync_grid()


def _combine():
    """Each block writes its row's sum; after the grid barrier every block reads all of them."""
    @T.prim_func
    def k(A: T.Tensor((G, N), "float32"), Partial: T.Tensor((G,), "float32"), Out: T.Tensor((G,), "float32")):
        with T.Kernel(G, threads=N) as bx:
            tx = T.get_thread_binding()
            acc = T.alloc_var("float32")
            total = T.alloc_var("float32")
            if tx == 0:
                acc = 0.0
                for j in T.serial(N):
                    acc = acc + A[bx, j]
                Partial[bx] = acc
            T.sync_grid()
            if tx == 0:
                total = 0.0
                for b in T.serial(G):
                    total = total + Partial[b]
                Out[bx] = total

    return k


@pytest.mark.gpu
def test_every_block_sees_the_others_results_after_the_grid_barrier():
    import torch

    kernel = tilex.compile(_combine())
    for _ in range(3):
        a = torch.randn(G, N, device="cuda")
        partial = torch.zeros(G, device="cuda")
        out = torch.zeros(G, device="cuda")
        kernel(a, partial, out)
        torch.testing.assert_close(out, a.sum().expand(G), rtol=1e-4, atol=1e-4)


@pytest.mark.gpu
def test_the_neighbours_row_is_read_after_its_update():
    import torch

    kernel = tilex.compile(rotate())
    a = torch.randn(G, N, device="cuda")
    b = torch.empty_like(a)
    expected = (a + 1).roll(-1, dims=0)
    kernel(a, b)
    torch.testing.assert_close(b, expected)


@pytest.mark.gpu
def test_a_grid_too_large_for_the_gpu_fails_at_launch_instead_of_hanging():
    import torch

    g = T.dynamic("g")

    @T.prim_func
    def k(A: T.Tensor((g, 1024), "float32")):
        with T.Kernel(g, threads=1024) as bx:
            tx = T.get_thread_binding()
            A[bx, tx] = A[bx, tx] + 1.0
            T.sync_grid()

    kernel = tilex.compile(k)
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    with pytest.raises(Exception, match=r"COOPERATIVE_LAUNCH_TOO_LARGE|cooperative"):
        kernel(torch.zeros(4 * sms, 1024, device="cuda"))  # 2 blocks of 1024 threads fit a multiprocessor
        torch.cuda.synchronize()
