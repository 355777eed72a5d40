"""Barriers the block cannot reach alike (tilex.transform.thread_sync, tilex.transform.block_uniform).

A shared-memory dependency inside a branch or loop that the threads of a block run differently needs a barrier no
correct place holds: tilex names the statement (ValueError), unless the program places its own barriers
(TL_DISABLE_THREAD_STORAGE_SYNC), where that statement keeps the program's barriers only. A branch on an interval of
threads gets named barriers over its threads, also in a kernel that already has thread regions. Conditions on
values every thread shares -- shared memory read after a barrier, a scalar updated from itself -- hold barriers."""
import re

import pytest

import tilex
import tilex.language as T

N = 128
OWN_BARRIERS = {tilex.PassConfigKey.TL_DISABLE_THREAD_STORAGE_SYNC: True}


def _kernel_body(src: str) -> str:
    return src[src.index("__global__"):]


def bitonic():
    """One compare-and-swap step per pass, as TileLang's top-k examples write it: the thread owning the lower
    element of a pair swaps both under a condition on the values; the program's barrier ends each pass."""
    @T.prim_func
    def sort(X: T.Tensor((N,), "float32"), Y: T.Tensor((N,), "float32")):
        with T.Kernel(1, threads=N) as bx:
            tx = T.get_thread_binding()
            v = T.alloc_shared((N,), "float32")
            v[tx] = X[tx]
            T.sync_threads()
            for i1 in T.serial(7):
                for i2 in T.serial(i1 + 1):
                    j = tx ^ (1 << (i1 - i2))
                    up = (tx & (1 << (i1 + 1))) == 0
                    if tx < j and ((up and v[tx] > v[j]) or (not up and v[tx] < v[j])):
                        t = T.alloc_var("float32")
                        t = v[tx]
                        v[tx] = v[j]
                        v[j] = t
                    T.sync_threads()
            Y[tx] = v[tx]

    return sort


def test_a_barrier_inside_a_per_thread_branch_is_a_value_error_naming_it():
    with pytest.raises(ValueError, match=r"inside the branch `if .*tx.*` needs a block barrier inside it, but its "
                                         r"condition may differ between threads.*TL_DISABLE_THREAD_STORAGE_SYNC"):
        tilex.compile(bitonic(), target="sm_90a")


def test_a_program_that_places_its_own_barriers_keeps_them_inside_the_branch():
    src = _kernel_body(tilex.compile(bitonic(), target="sm_90a", pass_configs=OWN_BARRIERS).get_kernel_source())
    loop = src[src.index("for (int i2"):]
    branch = loop[loop.index("if ("):]
    branch = branch[:branch.index("}")]  # the swap: no barrier in it
    assert "__syncthreads" not in branch
    # the program's barrier ends each pass and nothing else is added in the loop: one per i2 iteration
    assert loop[:loop.index("Y_ptr")].count("__syncthreads()") == 1


def producer_consumer():
    """A kernel with a thread region (a tile operator under ``tx < 128``) whose other branch, without tile
    operators, has a dependency between its own threads inside a loop."""
    @T.prim_func
    def k(A: T.Tensor((N,), "float32"), B: T.Tensor((N,), "float32")):
        with T.Kernel(1, threads=2 * N) as bx:
            tx = T.get_thread_binding()
            a = T.alloc_shared((N,), "float32")
            b = T.alloc_shared((N,), "float32")
            if tx < N:
                T.copy(A, a)
            else:
                b[tx - N] = A[tx - N]
                for i in T.serial(4):
                    b[tx - N] = b[tx - N] + b[(tx - N + 1) % N]
            T.sync_threads()
            if tx < N:
                B[tx] = a[tx] + b[tx]

    return k


def test_a_branch_on_a_thread_interval_gets_named_barriers_in_a_kernel_with_regions():
    src = _kernel_body(tilex.compile(producer_consumer(), target="sm_90a").get_kernel_source())
    loop = src[src.index("for (int i = 0; i < 4"):]
    loop = loop[:loop.index("__syncthreads")]
    # the branch of threads 128..255: barriers over its 128 threads, inside the loop
    assert re.search(r"named_barrier_wait\(\d+, 128\)", loop)


def divergent_loop():
    @T.prim_func
    def k(A: T.Tensor((N,), "int32"), B: T.Tensor((N,), "float32")):
        with T.Kernel(1, threads=N) as bx:
            tx = T.get_thread_binding()
            s = T.alloc_shared((N,), "float32")
            s[tx] = T.float32(0)
            T.sync_threads()
            for i in T.serial(A[tx]):  # each thread its own trip count
                s[tx] = s[tx] + s[(tx + 1) % N]
            T.sync_threads()
            B[tx] = s[tx]

    return k


def test_a_barrier_inside_a_loop_whose_trip_count_differs_between_threads_is_refused():
    # TVM's planning alone puts __syncthreads() inside this loop: threads with fewer iterations never reach it
    with pytest.raises(ValueError, match=r"the loop `for i in range\(0, A\[tx\]\)`.*different iterations"):
        tilex.compile(divergent_loop(), target="sm_90a")


def shared_flag(shape):
    """A condition on a value read from shared memory after a barrier: every thread reads the same element."""
    @T.prim_func
    def k(A: T.Tensor((N,), "float32"), F: T.Tensor((2,), "int32"), B: T.Tensor((N,), "float32")):
        with T.Kernel(1, threads=N) as bx:
            tx = T.get_thread_binding()
            flag = T.alloc_shared(shape, "int32")
            s = T.alloc_shared((N,), "float32")
            if tx == 0:
                flag[0] = F[0]
            s[tx] = A[tx]
            T.sync_threads()
            if flag[0] > 0:
                for i in T.serial(3):
                    s[tx] = s[tx] + s[(tx + 1) % N]
            B[tx] = s[tx]

    return k


def test_a_condition_on_shared_memory_every_thread_reads_alike_holds_barriers():
    src = _kernel_body(tilex.compile(shared_flag((2,)), target="sm_90a").get_kernel_source())
    branch = src[src.index("if (0 < "):]
    assert branch[:branch.index("B_ptr")].count("__syncthreads()") >= 1


def written_global():
    """A condition on a global tensor the kernel also writes: another thread may change it under the others."""
    @T.prim_func
    def k(A: T.Tensor((N,), "float32"), F: T.Tensor((N,), "int32")):
        with T.Kernel(1, threads=N) as bx:
            tx = T.get_thread_binding()
            s = T.alloc_shared((N,), "float32")
            s[tx] = A[tx]
            T.sync_threads()
            F[tx] = 0
            if F[0] > 0:
                for i in T.serial(3):
                    s[tx] = s[tx] + s[(tx + 1) % N]
            A[tx] = s[tx]

    return k


def test_a_condition_on_a_global_tensor_the_kernel_writes_is_not_uniform():
    with pytest.raises(ValueError, match=r"inside the branch `if 0 < F"):
        tilex.compile(written_global(), target="sm_90a")


def first_arrival():
    """A condition on the value an atomic returned: each thread gets its own."""
    @T.prim_func
    def k(A: T.Tensor((N,), "float32"), C: T.Tensor((1,), "int32"), B: T.Tensor((N,), "float32")):
        with T.Kernel(1, threads=N) as bx:
            tx = T.get_thread_binding()
            s = T.alloc_shared((N,), "float32")
            p = T.alloc_var("int32")
            s[tx] = A[tx]
            p = T.atomic_add(C[0], 1, return_prev=True)
            if p < 64:
                for i in T.serial(3):
                    s[tx] = s[tx] + s[(tx + 1) % N]
            B[tx] = s[tx]

    return k


def test_a_condition_on_what_an_atomic_returned_is_not_uniform():
    with pytest.raises(ValueError, match=r"inside the branch `if p\[0\] < 64`"):
        tilex.compile(first_arrival(), target="sm_90a")


def countdown():
    """A scalar updated from itself (``n = n - k``) with k uniform stays uniform: the loop that leaves when it
    reaches 0 runs the same iterations in every thread and may hold barriers."""
    @T.prim_func
    def k(A: T.Tensor((N,), "float32"), K: T.Tensor((1,), "int32"), B: T.Tensor((N,), "float32")):
        with T.Kernel(1, threads=N) as bx:
            tx = T.get_thread_binding()
            n = T.alloc_var("int32")
            s = T.alloc_shared((N,), "float32")
            s[tx] = A[tx]
            n = 6
            for r in T.serial(8):
                if n <= 0:
                    break
                s[tx] = s[tx] + s[(tx + r + 1) % N]
                n = n - K[0]
            B[tx] = s[tx]

    return k


def test_a_loop_left_on_a_uniform_countdown_holds_barriers():
    src = _kernel_body(tilex.compile(countdown(), target="sm_90a").get_kernel_source())
    loop = src[src.index("for (int r"):]
    assert loop[:loop.index("B_ptr")].count("__syncthreads()") >= 1


def while_loop(per_thread):
    """A ``while`` loop over a uniform countdown, or over a per-thread one, with a dependency between iterations."""
    @T.prim_func
    def k(A: T.Tensor((N,), "float32"), K: T.Tensor((N,), "int32"), B: T.Tensor((N,), "float32")):
        with T.Kernel(1, threads=N) as bx:
            tx = T.get_thread_binding()
            n = T.alloc_var("int32")
            s = T.alloc_shared((N,), "float32")
            s[tx] = A[tx]
            n = K[tx] if per_thread else K[0]
            while n > 0:
                s[tx] = s[tx] + s[(tx + 1) % N]
                n = n - 1
            B[tx] = s[tx]

    return k


def test_a_while_loop_every_thread_runs_alike_holds_the_barrier_between_iterations():
    # TVM alone plans no barrier in a while loop (and misses the dependency between iterations)
    src = _kernel_body(tilex.compile(while_loop(False), target="sm_90a").get_kernel_source())
    loop = src[src.index("while (1)"):]
    assert loop[:loop.index("B_ptr")].count("__syncthreads()") == 1


def test_a_while_loop_threads_leave_at_different_iterations_is_refused():
    with pytest.raises(ValueError, match=r"inside the loop `while 0 < n\[0\]`.*leave it at different iterations"):
        tilex.compile(while_loop(True), target="sm_90a")


@pytest.mark.gpu
def test_a_sort_with_its_own_barriers_in_per_thread_branches_sorts():
    import torch

    kernel = tilex.compile(bitonic(), pass_configs=OWN_BARRIERS)
    x = torch.randn(N, device="cuda")
    y = torch.empty_like(x)
    kernel(x, y)
    torch.testing.assert_close(y, torch.sort(x).values)
