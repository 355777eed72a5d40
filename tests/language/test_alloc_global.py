"""T.alloc_global: a global-memory workspace the host side of the compiled function allocates for each call, shared
by the program's kernels (several T.Kernel blocks in one T.prim_func: a split-KV pass and its combine).

CPU: the lowered IR (the allocation out of the launch scopes), the host code (TVM's workspace allocation before the
launches, its release after them, a TMA tensor map of a workspace encoded after its allocation), the generated CUDA
of each kernel (nvcc runs) and the refusals; the per-kernel lowering of a program with several kernels.
GPU (@pytest.mark.gpu): the values, against torch."""
import re

import pytest
import tvm
from tvm import tirx

import tilex
import tilex.language as T
from tilex.engine import lower_to_tir
from tilex.engine import pipeline
from tilex.ir.visit import walk
from tilex.transform.hoist_global_buffers import hoist_global_buffers
from tilex.transform.several_kernels import kernel_count, per_kernel, run_per_kernel, top_level_statements

from cuda_text import braced_block

SM90 = tvm.target.Target({"kind": "cuda", "arch": "sm_90a"})
F32 = "float32"


# ---- programs -------------------------------------------------------------------------------------------------------
def doubled_then_reversed(n=256, blk=128):
    """Kernel 1 writes 2 * A into the workspace W (through a shared tile); kernel 2, with another block size, reads W
    back reversed within each block and adds 1: C[b * blk + i] = 2 * A[b * blk + blk - 1 - i] + 1."""
    @T.prim_func
    def two(A: T.Tensor((n,), F32), C: T.Tensor((n,), F32)):
        W = T.alloc_global((n,), F32)
        with T.Kernel(n // blk, threads=128) as bx:
            S = T.alloc_shared((blk,), F32)
            T.copy(A[bx * blk], S)
            for i in T.Parallel(blk):
                S[i] = S[i] * 2.0
            T.copy(S, W[bx * blk])
        with T.Kernel(n // blk, threads=64) as bx:
            R = T.alloc_fragment((blk,), F32)
            S2 = T.alloc_shared((blk,), F32)
            T.copy(W[bx * blk], R)
            for i in T.Parallel(blk):
                S2[blk - 1 - i] = R[i]
            for i in T.Parallel(blk):
                C[bx * blk + i] = S2[i] + 1.0

    return two


def crossed_tiles(n=256, blk=128, second_kernel=True):
    """A first kernel reading one shared tile while writing another (their bytes must not overlap), followed, when
    `second_kernel`, by a kernel copying the workspace out."""
    @T.prim_func
    def crossed(A: T.Tensor((n,), F32), C: T.Tensor((n,), F32)):
        W = T.alloc_global((n,), F32)
        with T.Kernel(n // blk, threads=128) as bx:
            S = T.alloc_shared((blk,), F32)
            S1 = T.alloc_shared((blk,), F32)
            T.copy(A[bx * blk], S)
            for i in T.Parallel(blk):
                S1[i] = S[blk - 1 - i] * 2.0
            T.copy(S1, W[bx * blk])
        with T.Kernel(n // blk, threads=128) as bx:
            for i in T.Parallel(blk):
                C[bx * blk + i] = W[bx * blk + i]

    @T.prim_func
    def crossed_alone(A: T.Tensor((n,), F32), C: T.Tensor((n,), F32)):
        W = T.alloc_global((n,), F32)
        with T.Kernel(n // blk, threads=128) as bx:
            S = T.alloc_shared((blk,), F32)
            S1 = T.alloc_shared((blk,), F32)
            T.copy(A[bx * blk], S)
            for i in T.Parallel(blk):
                S1[i] = S[blk - 1 - i] * 2.0
            T.copy(S1, W[bx * blk])

    return crossed if second_kernel else crossed_alone


def split_sum(splits=4, blk=128):
    """A split reduction over a symbolic number of rows n: kernel 1 sums each split's share of the K = 256
    columns of a row block into partial[s, rows], kernel 2 adds the splits: out[i] = sum_k X[i, k]."""
    n = T.dynamic("n")
    K = 256
    chunk = K // splits

    @T.prim_func
    def split_sum_kernel(X: T.Tensor((n, K), F32), out: T.Tensor((n,), F32)):
        partial = T.alloc_global((splits, n), F32)
        with T.Kernel(T.ceildiv(n, blk), splits, threads=128) as (bx, s):
            acc = T.alloc_fragment((blk,), F32)
            T.clear(acc)
            for k in T.serial(chunk):
                for i in T.Parallel(blk):
                    acc[i] += X[bx * blk + i, s * chunk + k]
            T.copy(acc, partial[s, bx * blk])
        with T.Kernel(T.ceildiv(n, blk), threads=128) as bx:
            total = T.alloc_fragment((blk,), F32)
            T.clear(total)
            for s in T.serial(splits):
                for i in T.Parallel(blk):
                    total[i] += partial[s, bx * blk + i]
            T.copy(total, out[bx * blk])

    return split_sum_kernel


def staged_through_workspace(M=256, N=128, bm=64):
    """A tile copied into the workspace by a TMA store (kernel 1), then from it into C (kernel 2)."""
    @T.prim_func
    def staged(A: T.Tensor((M, N), "float16"), C: T.Tensor((M, N), "float16")):
        W = T.alloc_global((M, N), "float16")
        with T.Kernel(M // bm, threads=128) as bx:
            S = T.alloc_shared((bm, N), "float16")
            T.copy(A[bx * bm:(bx + 1) * bm, :], S)
            T.copy(S, W[bx * bm:(bx + 1) * bm, :])
        with T.Kernel(M // bm, threads=128) as bx:
            S = T.alloc_shared((bm, N), "float16")
            T.copy(W[bx * bm:(bx + 1) * bm, :], S)
            T.copy(S, C[bx * bm:(bx + 1) * bm, :])

    return staged


def plain_copy(n=256, blk=128):
    """One kernel, no workspace."""
    @T.prim_func
    def plain(A: T.Tensor((n,), F32), C: T.Tensor((n,), F32)):
        with T.Kernel(n // blk, threads=128) as bx:
            for i in T.Parallel(blk):
                C[bx * blk + i] = A[bx * blk + i]

    return plain


def workspace_in_kernel(n=256, blk=128):
    """T.alloc_global written inside the T.Kernel body."""
    @T.prim_func
    def inside(A: T.Tensor((n,), F32), C: T.Tensor((n,), F32)):
        with T.Kernel(n // blk, threads=128) as bx:
            W = T.alloc_global((n,), F32)
            for i in T.Parallel(blk):
                W[bx * blk + i] = A[bx * blk + i] + 1.0
            for i in T.Parallel(blk):
                C[bx * blk + i] = W[bx * blk + i] * 3.0

    return inside


# ---- helpers --------------------------------------------------------------------------------------------------------
def _host_script(func, pass_configs=None) -> str:
    """The host function of `func` after tilex's pipeline and TVM's LowerTVMBuiltin (workspace calls spelled out)."""
    mod = lower_to_tir(func, SM90, pass_configs)
    with tvm.transform.PassContext(opt_level=3), SM90:
        mod = tvm.tirx.transform.BindTarget(tvm.target.Target(SM90, host="llvm"))(mod)
        mod = tvm.transform.Sequential(pipeline.tvm_passes({}))(mod)
        mod = tvm.tirx.transform.LowerTVMBuiltin()(mod)
    hosts = [f for gv, f in mod.functions.items() if "kernel" not in gv.name_hint]
    assert len(hosts) == 1
    return hosts[0].script()


def _launch_scopes(stmt):
    found = []
    walk(stmt, (tirx.AttrStmt, lambda n: found.append(n) if n.attr_key == "thread_extent" else None))
    return found


def _global_allocations(stmt):
    found = []
    walk(stmt, (tirx.AllocBuffer, lambda n: found.append(n) if n.buffer.scope() == "global" else None))
    return found


def _kernel_names(src):
    return re.findall(r'extern "C" __global__ void __launch_bounds__\((\d+)\) (\w+)\(', src)


# ---- the frontend -----------------------------------------------------------------------------------------------------
def test_alloc_global_is_a_global_buffer_written_before_the_kernel():
    f = doubled_then_reversed()
    allocs = _global_allocations(f.body)
    assert len(allocs) == 1
    buf = allocs[0].buffer
    assert buf.name == "W" and str(buf.dtype) == F32 and [int(e) for e in buf.shape] == [256]
    items = top_level_statements(f.body)
    assert items[0].same_as(allocs[0]) and kernel_count(f) == 2


@pytest.mark.parametrize("make, error, match", [
    (lambda: T.alloc_global((16,), F32, scope="shared"), NotImplementedError, r"T.alloc_global\(scope='shared'\)"),
    (lambda: T.alloc_global((), F32), ValueError, "at least one dimension"),
    (lambda: T.alloc_global((0, 4), F32), ValueError, "must be positive"),
    (lambda: T.alloc_global((2.5,), F32), TypeError, "must be ints"),
])
def test_bad_arguments_are_named(make, error, match):
    with pytest.raises(error, match=match):
        @T.prim_func
        def bad(A: T.Tensor((16,), F32)):
            W = make()  # noqa: F841
            with T.Kernel(1, threads=32) as bx:  # noqa: F841
                A[0] = 0.0


def test_unknown_dtype_is_refused():
    with pytest.raises((TypeError, ValueError), match="floaty"):
        @T.prim_func
        def bad(A: T.Tensor((16,), F32)):
            W = T.alloc_global((16,), "floaty")  # noqa: F841
            with T.Kernel(1, threads=32) as bx:  # noqa: F841
                A[0] = 0.0


# ---- hoisting -------------------------------------------------------------------------------------------------------
def test_allocation_inside_a_kernel_is_hoisted_before_it():
    f = workspace_in_kernel()
    assert all(_global_allocations(launch.body) for launch in _launch_scopes(f.body)[:1])
    hoisted = hoist_global_buffers(f)
    items = top_level_statements(hoisted.body)
    assert len(items) == 2 and items[0].buffer.name == "W" and _launch_scopes(items[1])
    assert not _global_allocations(items[1])
    k = tilex.compile(f, target=SM90)
    body = braced_block(k.get_kernel_source(), "inside_kernel(float* __restrict__ A_ptr")
    assert "(W_ptr + " in body and "malloc" not in body
    assert "TVMBackendAllocWorkspace" in k.get_host_source()


def test_program_without_workspace_or_second_kernel_is_untouched():
    plain = plain_copy()
    seen = []

    def run(func):
        seen.append(func)
        return func

    assert hoist_global_buffers(plain).same_as(plain)
    assert run_per_kernel(plain, run).same_as(plain) and len(seen) == 1 and seen[0].same_as(plain)


def test_shape_from_a_block_index_is_refused():
    @T.prim_func
    def ragged(A: T.Tensor((256,), F32)):
        with T.Kernel(2, threads=128) as bx:
            W = T.alloc_global((bx + 1,), F32)
            W[0] = A[0]
            A[1] = W[0]

    with pytest.raises(ValueError, match=r"T.alloc_global: the shape .* of 'W' uses bx, which the host does not know"):
        lower_to_tir(ragged, SM90)


# ---- host code ------------------------------------------------------------------------------------------------------
def test_host_allocates_before_the_launches_and_frees_after():
    host = _host_script(doubled_then_reversed())
    alloc = host.index("W = T.decl_buffer((256,), data=T.TVMBackendAllocWorkspace(2, dev_id, T.uint64(1024), 2, 32)")
    first = host.index('call_packed_lowered("two_kernel"')
    second = host.index('call_packed_lowered("two_kernel_1"')
    free = host.index("TVMBackendFreeWorkspace(2, dev_id, W.data)")
    assert alloc < first < second < free
    assert host.count("TVMBackendAllocWorkspace") == 1 and host.count("TVMBackendFreeWorkspace") == 1


def test_symbolic_workspace_size_is_computed_by_the_host():
    host = _host_script(split_sum())
    line = next(ln for ln in host.splitlines() if "partial = T.decl_buffer" in ln)
    assert "TVMBackendAllocWorkspace(2, dev_id" in line and re.search(r"\bn\b", line)


def test_tensor_map_of_a_workspace_is_encoded_after_its_allocation():
    host = _host_script(staged_through_workspace())
    alloc = host.index("W = T.decl_buffer((32768,), \"float16\", data=T.TVMBackendAllocWorkspace")
    tmap = host.index("W_tmap0")
    encode = host.index("cuTensorMapEncodeTiled")
    launch = host.index('call_packed_lowered("staged_kernel"')
    assert alloc < tmap < encode < launch
    src = tilex.compile(staged_through_workspace(), out_idx=-1, target=SM90).get_kernel_source()
    assert "tma_store_2d(((unsigned long long)(&(W_tmap0)))" in braced_block(src, "staged_kernel(half*")


# ---- several kernels -------------------------------------------------------------------------------------------------
def test_two_kernels_compile_with_their_own_block_sizes():
    k = tilex.compile(doubled_then_reversed(), out_idx=-1, target=SM90)
    src = k.get_kernel_source()
    assert ("128", "two_kernel") in _kernel_names(src) and ("64", "two_kernel_1") in _kernel_names(src)
    assert "float* __restrict__ W_ptr" in src.split("two_kernel(")[1].split(")")[0]
    assert "float* __restrict__ W_ptr" in src.split("two_kernel_1(")[1].split(")")[0]
    if k.resources is not None:  # nvcc ran
        assert {"two_kernel", "two_kernel_1"} <= set(k.resources.functions)
    assert [p.name for p in k.params] == ["A", "C"]


def test_each_kernel_plans_its_shared_memory_as_if_alone():
    """Kernel 1 of a two-kernel program is the same CUDA as the program made of it alone: its two tiles kept
    apart (one reads while the other is written), its barriers, its dynamic shared memory."""
    both = tilex.compile(crossed_tiles(), target=SM90).get_kernel_source()
    alone = tilex.compile(crossed_tiles(second_kernel=False), target=SM90).get_kernel_source()
    first = braced_block(both, "crossed_kernel(float* __restrict__ A_ptr")
    assert first == braced_block(alone, "crossed_alone_kernel(float* __restrict__ A_ptr")
    assert "+ 128)]" in first  # S1 after S in the merged dynamic shared memory


def test_shared_memory_of_each_kernel_is_checked():
    @T.prim_func
    def big_second(A: T.Tensor((256,), F32), C: T.Tensor((256,), F32)):
        W = T.alloc_global((256,), F32)
        with T.Kernel(2, threads=128) as bx:
            for i in T.Parallel(128):
                W[bx * 128 + i] = A[bx * 128 + i]
        with T.Kernel(2, threads=128) as bx:
            S = T.alloc_shared((300 * 256,), F32)
            for i in T.Parallel(128):
                S[i * 7] = W[bx * 128 + i]
            for i in T.Parallel(128):
                C[bx * 128 + i] = S[(127 - i) * 7]

    with pytest.raises(ValueError, match="shared memory of one block is 307200 bytes"):
        tilex.compile(big_second, target=SM90)


def test_attributes_of_the_kernels_are_merged():
    f = doubled_then_reversed()
    calls = []

    def run(func):
        calls.append(func)
        n = len(calls)
        assert kernel_count(func) == 1
        return func.with_attr("test.note", f"kernel {n}").with_attr("test.map", {f"k{n}": n}) \
            .with_attr("test.list", [n])

    out = run_per_kernel(f, run)
    assert len(calls) == 2
    assert str(out.attrs["test.note"]) == "kernel 1; kernel 2"
    assert {str(k): int(v) for k, v in out.attrs["test.map"].items()} == {"k1": 1, "k2": 2}
    assert [int(v) for v in out.attrs["test.list"]] == [1, 2]
    # every kernel saw the workspace declared before it
    assert all(_global_allocations(c.body) for c in calls)
    assert kernel_count(out) == 2


def test_per_kernel_pass_keeps_the_name_and_runs_once_per_kernel():
    seen = []

    @tvm.tirx.transform.prim_func_pass(opt_level=0, name="test.CountKernels")
    def count(func, mod, ctx):
        seen.append(kernel_count(func))
        return func

    wrapped = per_kernel(count)
    assert str(wrapped.info.name) == "test.CountKernels"
    lowered = lower_to_tir(doubled_then_reversed(), SM90)
    wrapped(lowered)
    assert seen == [1, 1]
    seen.clear()
    wrapped(lower_to_tir(plain_copy(), SM90))
    assert seen == [1]


# ---- on the GPU -------------------------------------------------------------------------------------------------------
@pytest.mark.gpu
def test_two_kernels_share_the_workspace_on_gpu():
    torch = pytest.importorskip("torch")
    k = tilex.compile(doubled_then_reversed(), out_idx=-1)
    a = torch.randn(256, device="cuda")
    c = k(a)
    expected = (2 * a).view(2, 128).flip(1).reshape(256) + 1
    torch.testing.assert_close(c, expected)
    a2 = torch.randn(256, device="cuda")  # the next call gets a workspace again
    torch.testing.assert_close(k(a2), (2 * a2).view(2, 128).flip(1).reshape(256) + 1)


@pytest.mark.gpu
@pytest.mark.parametrize("n", [1, 100, 128, 1000])
def test_split_reduction_through_a_symbolic_workspace_on_gpu(n):
    torch = pytest.importorskip("torch")
    k = tilex.compile(split_sum(), out_idx=-1)
    x = torch.randn(n, 256, device="cuda")
    torch.testing.assert_close(k(x), x.sum(dim=1), atol=1e-4, rtol=1e-4)


@pytest.mark.gpu
def test_tma_store_into_the_workspace_on_gpu():
    torch = pytest.importorskip("torch")
    k = tilex.compile(staged_through_workspace(), out_idx=-1)
    a = torch.randn(256, 128, device="cuda", dtype=torch.float16)
    torch.testing.assert_close(k(a), a)


@pytest.mark.gpu
def test_workspace_written_inside_the_kernel_on_gpu():
    torch = pytest.importorskip("torch")
    k = tilex.compile(workspace_in_kernel(), out_idx=-1)
    a = torch.randn(256, device="cuda")
    torch.testing.assert_close(k(a), (a + 1) * 3)
