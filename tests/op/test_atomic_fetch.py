"""Element atomics that return the value before and take a memory order (CPU: the CUDA they compile to)."""
import tilex
import tilex.language as T


def tickets(blocks=8, threads=128):
    """Out[t] = the counter's value before thread t added one: a permutation of 0 .. blocks * threads - 1."""
    @T.prim_func
    def main(Cnt: T.Tensor((1,), "int32"), Out: T.Tensor((blocks * threads,), "int32")):
        with T.Kernel(blocks, threads=threads) as bx:
            tx = T.get_thread_binding()
            Out[bx * threads + tx] = T.atomic_add(Cnt[0], 1, return_prev=True)

    return main


def last_block_sum(blocks=16, n=256):
    """Y = X summed over its rows: every block adds its row into the float32 workspace Ws, and the last block to
    arrive (acq_rel counter) writes Y and leaves Ws and Cnt at zero for the next launch."""
    @T.prim_func
    def main(X: T.Tensor((blocks, n), "float32"), Ws: T.Tensor((n,), "float32"), Cnt: T.Tensor((1,), "int32"),
             Y: T.Tensor((n,), "float32")):
        with T.Kernel(blocks, threads=128) as bx:
            tx = T.get_thread_binding()
            arrived = T.alloc_shared((1,), "int32")
            for i in T.Parallel(n):
                T.atomic_add(Ws[i], X[bx, i])
            T.sync_threads()  # every thread's adds before the release below
            if tx == 0:
                arrived[0] = T.atomic_add(Cnt[0], 1, memory_order="acq_rel", return_prev=True)
            T.sync_threads()
            if arrived[0] == blocks - 1:
                for i in T.Parallel(n):
                    Y[i] = Ws[i]
                    Ws[i] = T.float32(0)
                if tx == 0:
                    Cnt[0] = 0

    return main


def test_returned_value_is_an_expression():
    src = tilex.compile(tickets(), target="sm_90a").get_kernel_source()
    assert "Out_ptr[" in src and "= tilex::atomic_fetch<0, 0>((&(Cnt_ptr[0])), 1)" in src


def test_last_block_pattern_compiles_for_sm90_and_sm80():
    for target in ("sm_90a", "sm_80"):
        src = tilex.compile(last_block_sum(), target=target).get_kernel_source()
        assert "tilex::atomic_fetch<0, 3>" in src and src.count("__syncthreads()") >= 2
