"""The hand-written-kernel layer (tilex.language.expert): programs that synchronize themselves -- T.ws warp-group
regions, T.alloc_barrier mbarriers, T.tma_copy, T.async_copy, T.wgmma_gemm -- compiled as written for sm_90a
(CPU: lowered IR and generated CUDA, nvcc runs), and run against torch on a GPU (@pytest.mark.gpu)."""
import re

import pytest
import tvm

import tilex
import tilex.language as T
from tilex.engine import lower_to_tir
from tilex.ir import intrin
from tilex.ir.visit import walk
from tilex.ir.names import MANUAL_SYNC_ATTR
from tilex.op.base import TileOpError
from tilex.transform.hopper.ws_decision import manual_synchronization

from cuda_text import braced_block

SM90 = tvm.target.Target({"kind": "cuda", "arch": "sm_90a"})
SM80 = tvm.target.Target({"kind": "cuda", "arch": "sm_80"})
F16 = "float16"
WG0 = "if ((((int)threadIdx.x) >> 7) == 0) {"  # T.ws(0) of a 256-thread block in CUDA
WG1 = "if ((((int)threadIdx.x) >> 7) == 1) {"


# ---- programs -------------------------------------------------------------------------------------------------------
def role_gemm(M, N, K, bm=128, bn=128, bk=64, stages=3):
    """A producer / consumer GEMM written by hand: warp group 1 loads A and B tiles with TMA into a ring of
    `stages` buffers (waits for a free stage, its first thread arrives once the loads are issued), warp group 0
    waits for each stage, multiplies and frees it; registers moved from the producer to the consumer."""
    @T.prim_func
    def main(A: T.Tensor((M, K), F16), B: T.Tensor((K, N), F16), C: T.Tensor((M, N), F16)):
        with T.Kernel(T.ceildiv(N, bn), T.ceildiv(M, bm), threads=256) as (bx, by):
            A_s = T.alloc_shared((stages, bm, bk), F16)
            B_s = T.alloc_shared((stages, bk, bn), F16)
            C_l = T.alloc_fragment((bm, bn), "float32")
            full = T.alloc_barrier([1] * stages)
            empty = T.alloc_barrier([128] * stages)
            tx = T.get_thread_binding()
            with T.ws(1):
                T.set_max_nreg(40, 0)
                for k in T.serial(T.ceildiv(K, bk)):
                    T.mbarrier_wait_parity(mbarrier=empty[k % stages], parity=(k // stages) % 2 ^ 1)
                    T.tma_copy(A[by * bm:(by + 1) * bm, k * bk:(k + 1) * bk], A_s[k % stages, :, :],
                               barrier=full[k % stages])
                    T.tma_copy(B[k * bk:(k + 1) * bk, bx * bn:(bx + 1) * bn], B_s[k % stages, :, :],
                               barrier=full[k % stages])
                    if tx == 128:
                        T.mbarrier_arrive(mbarrier=full[k % stages])
            with T.ws(0):
                T.set_max_nreg(232, 1)
                T.clear(C_l)
                for k in T.serial(T.ceildiv(K, bk)):
                    T.mbarrier_wait_parity(mbarrier=full[k % stages], parity=(k // stages) % 2)
                    T.gemm(A_s[k % stages, :, :], B_s[k % stages, :, :], C_l)
                    T.mbarrier_arrive(mbarrier=empty[k % stages])
                T.copy(C_l, C[by * bm, bx * bn])

    return main


def loop_gemm(M, N, K, bm=128, bn=128, bk=64, stages=2):
    """The same split written the other way round: the K loop outside, one T.ws region per role inside it, all four
    barriers in one array (full = [0, stages), empty = [stages, 2 stages)), 128 arrivals each."""
    @T.prim_func
    def main(A: T.Tensor((M, K), F16), B: T.Tensor((K, N), F16), C: T.Tensor((M, N), F16)):
        with T.Kernel(T.ceildiv(N, bn), T.ceildiv(M, bm), threads=256) as (bx, by):
            A_s = T.alloc_shared((stages, bm, bk), F16)
            B_s = T.alloc_shared((stages, bk, bn), F16)
            C_l = T.alloc_fragment((bm, bn), "float32")
            bars = T.alloc_barrier([128, 128] * stages)
            with T.ws(0):
                T.clear(C_l)
            for ko in T.Pipelined(T.ceildiv(K, bk), num_stages=stages):
                with T.ws(1):
                    T.barrier_wait(bars[ko % stages + stages], (ko // stages) % 2 ^ 1)
                    T.tma_copy(A[by * bm, ko * bk], A_s[ko % stages, :, :], barrier=bars[ko % stages])
                    T.tma_copy(B[ko * bk, bx * bn], B_s[ko % stages, :, :], barrier=bars[ko % stages])
                    T.barrier_arrive(bars[ko % stages])
                with T.ws(0):
                    T.barrier_wait(bars[ko % stages], (ko // stages) % 2)
                    T.gemm(A_s[ko % stages, :, :], B_s[ko % stages, :, :], C_l)
                    T.barrier_arrive(bars[ko % stages + stages])
            with T.ws(0):
                T.copy(C_l, C[by * bm, bx * bn])

    return main


def split_columns_gemm(M, N, K, bm=128, bn=128, bk=64):
    """Every thread copies the A tile; each warp group copies its half of B's columns and multiplies it (a region's
    copy and gemm need a barrier among its own threads); warp group 0 stores its half through shared memory
    (a TMA store)."""
    half = bn // 2

    @T.prim_func
    def main(A: T.Tensor((M, K), F16), B: T.Tensor((K, N), F16), C: T.Tensor((M, N), F16)):
        with T.Kernel(T.ceildiv(N, bn), T.ceildiv(M, bm), threads=256) as (bx, by):
            A_s = T.alloc_shared((bm, bk), F16)
            B0 = T.alloc_shared((bk, half), F16)
            B1 = T.alloc_shared((bk, half), F16)
            C0 = T.alloc_fragment((bm, half), "float32")
            C1 = T.alloc_fragment((bm, half), "float32")
            C_s = T.alloc_shared((bm, half), F16)
            with T.ws(1):
                T.clear(C1)
            with T.ws(0):
                T.clear(C0)
            for k in T.Pipelined(T.ceildiv(K, bk), num_stages=0):
                T.copy(A[by * bm, k * bk], A_s)
                with T.ws(1):
                    T.copy(B[k * bk, bx * bn], B1)
                    T.gemm(A_s, B1, C1)
                with T.ws(0):
                    T.copy(B[k * bk, bx * bn + half], B0)
                    T.gemm(A_s, B0, C0)
            with T.ws(1):
                T.copy(C1, C[by * bm, bx * bn])
            with T.ws(0):
                T.copy(C0, C_s)
                T.copy(C_s, C[by * bm, bx * bn + half])

    return main


def branch_gemm(K=64):
    """Roles written as branches on the thread index (as the DeepSeek MLA kernels do): threads 0..127 multiply rows
    0..127, threads 128..255 rows 128..255 and double them; threads 256..383 do nothing."""
    @T.prim_func
    def main(A: T.Tensor((256, K), F16), B: T.Tensor((K, 128), F16), C: T.Tensor((256, 128), "float32")):
        with T.Kernel(1, threads=384) as _:
            tx = T.get_thread_binding()
            A_s = T.alloc_shared((256, K), F16)
            B_s = T.alloc_shared((K, 128), F16)
            C0 = T.alloc_fragment((128, 128), "float32")
            C1 = T.alloc_fragment((128, 128), "float32")
            T.copy(A, A_s)
            T.copy(B, B_s)
            if tx < 128:
                T.gemm(A_s[0:128, :], B_s, C0, clear_accum=True)
                T.copy(C0, C[0:128, :])
            elif tx < 256:
                T.gemm(A_s[128:256, :], B_s, C1, clear_accum=True)
                for i, j in T.Parallel(128, 128):
                    C1[i, j] = C1[i, j] * 2.0
                T.copy(C1, C[128:256, :])

    return main


def plain_gemm(M=1024, N=1024, K=1024):
    @T.prim_func
    def main(A: T.Tensor((M, K), F16), B: T.Tensor((K, N), F16), C: T.Tensor((M, N), F16)):
        with T.Kernel(N // 128, M // 128, threads=128) as (bx, by):
            A_s = T.alloc_shared((128, 64), F16)
            B_s = T.alloc_shared((64, 128), F16)
            C_l = T.alloc_fragment((128, 128), "float32")
            T.clear(C_l)
            for k in T.Pipelined(K // 64, num_stages=3):
                T.copy(A[by * 128, k * 64], A_s)
                T.copy(B[k * 64, bx * 128], B_s)
                T.gemm(A_s, B_s, C_l)
            T.copy(C_l, C[by * 128, bx * 128])

    return main


def tma_store_program():
    """Warp group 1 writes a tile of shared memory (generic stores) and stores it with T.tma_copy, then waits for the
    bulk group itself."""
    @T.prim_func
    def main(A: T.Tensor((128, 64), F16), B: T.Tensor((128, 64), F16)):
        with T.Kernel(1, threads=256) as _:
            S = T.alloc_shared((128, 64), F16)
            with T.ws(1):
                T.copy(A, S)
                T.tma_copy(S, B[0:128, 0:64])
                T.tma_store_wait()

    return main


def async_copy_program():
    """cp.async into shared memory, waited for by the program; the tile is then read by other threads than those
    that copied each element (rows reversed)."""
    @T.prim_func
    def main(A: T.Tensor((64, 64), F16), B: T.Tensor((64, 64), F16)):
        with T.Kernel(1, threads=128) as _:
            S = T.alloc_shared((64, 64), F16)
            T.async_copy(A, S)
            T.ptx_wait_group(0)
            for i, j in T.Parallel(64, 64):
                B[i, j] = S[63 - i, j]

    return main


def wgmma_program(K=128):
    """Two warpgroup-MMA issues waited for once (T.wgmma_gemm + T.wait_wgmma)."""
    @T.prim_func
    def main(A: T.Tensor((128, K), F16), B: T.Tensor((K, 128), F16), C: T.Tensor((128, 128), "float32")):
        with T.Kernel(1, threads=128) as _:
            A0 = T.alloc_shared((128, K // 2), F16)
            A1 = T.alloc_shared((128, K // 2), F16)
            B0 = T.alloc_shared((K // 2, 128), F16)
            B1 = T.alloc_shared((K // 2, 128), F16)
            C_l = T.alloc_fragment((128, 128), "float32")
            T.copy(A[0, 0], A0)
            T.copy(A[0, K // 2], A1)
            T.copy(B[0, 0], B0)
            T.copy(B[K // 2, 0], B1)
            T.wgmma_gemm(A0, B0, C_l, clear_accum=True)
            T.wgmma_gemm(A1, B1, C_l)
            T.wait_wgmma(0)
            T.copy(C_l, C)

    return main


def unrolled_wgmma_program():
    """T.wgmma_gemm with a run-time clear_accum (the first of an unrolled chain clears C)."""
    @T.prim_func
    def main(A: T.Tensor((128, 128), F16), B: T.Tensor((128, 128), F16), C: T.Tensor((128, 128), "float32")):
        with T.Kernel(1, threads=128) as _:
            A_s = T.alloc_shared((2, 128, 64), F16)
            B_s = T.alloc_shared((2, 64, 128), F16)
            C_l = T.alloc_fragment((128, 128), "float32")
            bar = T.alloc_barrier(1)
            tx = T.get_thread_binding()
            for j in T.unroll(2):
                T.tma_copy(A[0, j * 64], A_s[j, :, :], barrier=bar)
                T.tma_copy(B[j * 64, 0], B_s[j, :, :], barrier=bar)
            if tx == 0:
                T.barrier_arrive(bar)
            T.barrier_wait(bar, 0)
            for j in T.unroll(2):
                T.wgmma_gemm(A_s[j, :, :], B_s[j, :, :], C_l, clear_accum=(j == 0))
            T.wait_wgmma(0)
            T.copy(C_l, C)

    return main


def cp_async_program():
    """Each thread copies 16-byte chunks with T.ptx_cp_async through T.access_ptr pointers (rows from 32 on
    zero-filled by the predicate) and arrives on an mbarrier when they land (T.cp_async_barrier_noinc)."""
    @T.prim_func
    def main(A: T.Tensor((64, 64), F16), B: T.Tensor((64, 64), F16)):
        with T.Kernel(1, threads=128) as _:
            tx = T.get_thread_binding()
            S = T.alloc_shared((64, 64), F16)
            landed = T.alloc_barrier(128)
            for c in T.serial(4):
                T.ptx_cp_async(T.access_ptr(S[(tx * 4 + c) // 8, (tx * 4 + c) % 8 * 8], "w", 8),
                               T.access_ptr(A[(tx * 4 + c) // 8, (tx * 4 + c) % 8 * 8], "r", 8), 8,
                               predicate=(tx * 4 + c) // 8 < 32)
            T.cp_async_barrier_noinc(landed)
            T.mbarrier_wait_parity(landed, 0)
            T.copy(S, B)

    return main


def barrier_names_program():
    """Every barrier name once."""
    @T.prim_func
    def main(A: T.Tensor((128, 64), F16), B: T.Tensor((128, 64), F16)):
        with T.Kernel(1, threads=256) as _:
            tx = T.get_thread_binding()
            S = T.alloc_shared((128, 64), F16)
            one = T.alloc_barrier(256)
            pair = T.alloc_barrier([1, 128])
            T.tma_copy(A, S, barrier=one)
            T.barrier_arrive(one)
            T.barrier_wait(one, 0)
            if tx == 0:
                T.mbarrier_expect_tx(pair[0], 0)
                T.mbarrier_arrive(mbarrier=pair[0])
            T.mbarrier_wait_parity(mbarrier=pair[0], parity=0)
            with T.ws(0):
                T.mbarrier_arrive_expect_tx(pair[1], 0)
                T.named_barrier_arrive(3, 256)
            with T.ws(1):
                T.sync_threads(3, 256)
                T.fence_proxy_async()
                T.mbarrier_wait_parity(pair[1], 0)
                T.copy(S, B)

    return main


def _value(e):
    """A constant integer expression's value (TVM leaves ``BitwiseXor`` of constants unfolded)."""
    ops = {"Add": lambda a, b: a + b, "Sub": lambda a, b: a - b, "Mul": lambda a, b: a * b,
           "BitwiseXor": lambda a, b: a ^ b, "FloorDiv": lambda a, b: a // b, "FloorMod": lambda a, b: a % b}
    if hasattr(e, "value"):
        return int(e.value)
    return ops[type(e).__name__](_value(e.a), _value(e.b))


def cuda(func, target="sm_90a", **cfg):
    return tilex.compile(func, target=target, pass_configs=cfg or None).get_kernel_source()


def kernel_body(src):
    return src[src.index('extern "C" __global__'):]


def blocks(src, head):
    """The bodies of every ``head`` block of `src` (braces matched)."""
    out, at = [], 0
    while True:
        i = src.find(head, at)
        if i < 0:
            return out
        out.append(braced_block(src[i:], head))
        at = i + len(head)


# ---- the producer / consumer GEMM ----------------------------------------------------------------------------------------
def test_role_gemm_compiles_with_each_role_in_its_branch():
    src = kernel_body(cuda(role_gemm(1024, 1024, 1024)))
    assert "__launch_bounds__(256" in src  # the block as written: no extra producer warpgroup
    producer, = blocks(src, WG1)
    consumer, = blocks(src, WG0)
    assert "tilex::reg_dealloc<40>()" in producer and "tilex::reg_alloc<232>()" in consumer
    assert producer.count("tilex::tma_load_2d") == 3 and "tilex::mbar_expect_tx" in producer
    assert "tilex::mbar_wait((&(empty_ptr" in producer and "tilex::mbar_arrive((&(full_ptr" in producer
    assert "tilex::mbar_wait((&(full_ptr" in consumer and "tilex::mbar_arrive((&(empty_ptr" in consumer
    assert "tilex::wgmma_m64n128k16" in consumer and "tilex::tma_load" not in consumer
    assert "tilex::wgmma" not in producer
    # the TMA loads and their byte count come from the producer's first thread
    issue = braced_block(producer, "if (((int)threadIdx.x) == 128) {")
    assert "tilex::mbar_expect_tx" in issue and "tilex::tma_load_2d" in issue
    for role in (producer, consumer):
        assert "__syncthreads" not in role and "named_barrier" not in role
    # the barriers: initialized once by thread 0, then one block barrier, before the roles split
    assert src.count("tilex::mbar_init(") == 6 and src.count("tilex::mbar_init_fence") == 1
    assert src.count("__syncthreads") == 1 and src.index("__syncthreads") < src.index(WG1)


def test_loop_gemm_keeps_its_regions_in_the_loop():
    src = kernel_body(cuda(loop_gemm(1024, 1024, 1024)))
    loop = braced_block(src, "for (int ko = 0; ko < 16; ++ko) {")
    producer, = blocks(loop, WG1)
    consumer, = blocks(loop, WG0)
    assert "tilex::mbar_wait((&(bars_ptr[((ko & 1) + 2)]))" in producer and producer.count("tilex::tma_load_2d") == 3
    assert "tilex::mbar_wait((&(bars_ptr[(ko & 1)]))" in consumer and "tilex::wgmma_wait<0>" in consumer
    assert "__syncthreads" not in loop and "named_barrier" not in loop
    # the gemm reads stages only TMA writes: no fence or barrier of its own
    assert "fence_proxy_async" not in consumer


def test_program_that_synchronizes_itself_is_compiled_as_written():
    f = lower_to_tir(loop_gemm(1024, 1024, 1024), SM90)["main"]
    reason = str(f.attrs[MANUAL_SYNC_ATTR])
    assert "T.alloc_barrier" in reason and "T.ws" in reason and "T.tma_copy" in reason
    script = f.script()
    # no automatic warp specialization (no producer warpgroup, no stage barriers of its own), no multi-buffering
    assert "tma_full" not in script and "min_blocks_per_sm" not in script and "ws_consumer" not in script
    assert '"threadIdx.x", 256' in script
    assert MANUAL_SYNC_ATTR not in (lower_to_tir(plain_gemm(), SM90)["main"].attrs or {})


def test_ws_decision_names_the_reason():
    assert manual_synchronization(plain_gemm().body) is None
    assert "T.ws" in manual_synchronization(split_columns_gemm(1024, 1024, 1024).body)
    assert "T.alloc_barrier" in manual_synchronization(barrier_names_program().body)
    assert "T.async_copy" in manual_synchronization(async_copy_program().body)
    assert "T.alloc_barrier" in manual_synchronization(cp_async_program().body)
    assert "T.wgmma_gemm" in manual_synchronization(wgmma_program().body)


def test_region_barriers_are_named_barriers_over_its_warp_group():
    src = kernel_body(cuda(split_columns_gemm(1024, 1024, 1024)))
    loop = braced_block(src, "for (int k = 0; k < 16; ++k) {")
    g1, = blocks(loop, WG1)
    g0, = blocks(loop, WG0)
    # each region's copy of B is read by its own gemm: a barrier among its 128 threads, one id per warp group
    ids = [re.search(r"named_barrier_wait\((\d+), 128\)", g).group(1) for g in (g1, g0)]
    assert ids[0] != ids[1]
    assert "__syncthreads" not in g1 and "__syncthreads" not in g0
    # the A tile every thread copies: block barriers around it, outside the regions, after a proxy fence
    before_regions = loop[:loop.index(WG1)]
    assert before_regions.count("__syncthreads") == 2
    assert re.search(r"fence_proxy_async\(\);\s*(if[^\n]*\n[^\n]*\n\s*}\s*)?__syncthreads", before_regions)
    # warp group 0's TMA store: its own first thread stores, waits for the reads, and the group's barrier is named
    epilogue = blocks(src[src.rindex(WG0):], WG0)[0]
    assert "tilex::tma_store_2d" in epilogue and "__syncthreads" not in epilogue
    issue = braced_block(epilogue, "if (((int)threadIdx.x) == 0) {")
    assert "tilex::bulk_commit();" in issue and "tilex::bulk_wait_read<0>();" in issue


def test_gemm_in_a_region_runs_on_its_warp_group():
    """threads=256 and T.ws(0) running a 128 x 128 gemm: one warpgroup's MMAs (two m64 blocks each), not two
    warpgroups'; its accumulator's threads are counted from the region's first."""
    src = kernel_body(cuda(role_gemm(1024, 1024, 1024)))
    consumer, = blocks(src, WG0)
    assert "for (int wm = 0; wm < 2; ++wm)" in consumer
    script = lower_to_tir(branch_gemm(), SM90)["main"].script()
    assert 'T.attr(0, "tilex.thread_range", 128)' in script and 'T.attr(128, "tilex.thread_range", 128)' in script


def test_branches_on_the_thread_index_are_regions():
    src = kernel_body(cuda(branch_gemm()))
    first = braced_block(src, "if (((int)threadIdx.x) < 128) {")
    second = braced_block(src, "if (((int)threadIdx.x) < 256) {")
    # row slices of A_s run on wgmma (descriptors start at the slice's rows), as TileLang runs them
    assert "wgmma_m64n128k16_f16" in first and "wgmma_m64n128k16_f16" in second
    assert "__syncthreads" not in first and "__syncthreads" not in second


# ---- each name in a small program ---------------------------------------------------------------------------------------
def test_barrier_names():
    src = kernel_body(cuda(barrier_names_program()))
    assert src.count("tilex::mbar_init(") == 3 and src.count("tilex::mbar_init_fence") == 1
    assert "tilex::mbar_init((&(one_ptr[0])), 256)" in src and "tilex::mbar_init((&(pair_ptr[1])), 128)" in src
    for call in ("tilex::mbar_expect_tx((&(pair_ptr[0])), 0)", "tilex::mbar_arrive((&(pair_ptr[0])))",
                 "tilex::mbar_wait((&(pair_ptr[0])), 0)", "tilex::mbar_arrive_expect_tx((&(pair_ptr[1])), 0)",
                 "tilex::mbar_arrive((&(one_ptr[0])))", "tilex::mbar_wait((&(one_ptr[0])), 0)",
                 "tilex::named_barrier_arrive(3, 256)", "tilex::named_barrier_wait(3, 256)",
                 "tilex::fence_proxy_async()"):
        assert call in src, call
    # the block-wide T.tma_copy: thread 0 arms the barrier with the tile's bytes and issues it
    issue = braced_block(src, "if (((int)threadIdx.x) == 0) {\n    tilex::mbar_expect_tx((&(one_ptr")
    assert "16384" in issue and "tilex::tma_load_2d" in issue


def test_tma_copy_store_and_its_wait():
    src = kernel_body(cuda(tma_store_program()))
    region, = blocks(src, WG1)
    assert "tilex::fence_proxy_async();" in region and "named_barrier_wait" in region
    issue = braced_block(region, "if (((int)threadIdx.x) == 128) {")
    assert "tilex::tma_store_2d" in issue and "tilex::bulk_commit();" in issue
    assert "bulk_wait_read" not in issue  # T.tma_copy does not wait; the program's T.tma_store_wait does
    assert region.rstrip().endswith("tilex::bulk_wait_read<0>();")


def test_tma_store_wait_and_arrive_forms():
    assert "tilex::bulk_wait<2>" in str(T.tma_store_wait(2, read=False))
    assert "tilex::bulk_wait_read<0>" in str(T.tma_store_wait())
    assert "tilex::bulk_commit" in str(T.tma_store_arrive())


def test_async_copy_and_its_groups():
    src = kernel_body(cuda(async_copy_program()))
    assert "tilex::cp_async<16>" in src or "tilex::cp_async(" in src
    commit, wait = src.index("tilex::cp_async_commit()"), src.index("tilex::cp_async_wait<0>()")
    sync = src.index("__syncthreads", wait)  # other threads' chunks are read: a barrier after the wait
    assert commit < wait < sync < src.index("*(uint4*)(S_pre_ptr", sync)
    assert "tilex::cp_async_commit" in str(T.ptx_commit_group())
    assert "tilex::cp_async_wait<3>" in str(T.ptx_wait_group(3))


def test_wgmma_gemm_is_waited_for_where_the_program_says():
    src = kernel_body(cuda(wgmma_program()))
    assert src.count("tilex::wgmma_commit()") == 2 and src.count("tilex::wgmma_wait<0>()") == 1
    assert src.index("tilex::wgmma_wait<0>()") > src.rindex("tilex::wgmma_commit()")
    # its operands are written by generic copies: fenced and synchronized before the MMAs read them
    assert src.index("tilex::fence_proxy_async()") < src.index("tilex::wgmma_fence()")


def test_wgmma_gemm_run_time_clear():
    src = kernel_body(cuda(unrolled_wgmma_program()))
    assert re.search(r"if \(j(_\d+)? == 0\) \{\s*(#pragma unroll\s*)?for \(int z = 0; z < 128", src)
    # operands only T.tma_copy writes: no fence or barrier before the MMAs, one wait where the program waits
    assert "__syncthreads" not in src[src.index("tilex::wgmma_fence"):]
    assert src.count("tilex::wgmma_wait<0>()") == 1
    with pytest.raises(TypeError, match="clear_accum must be a bool"):
        T.wgmma_gemm(None, None, None, clear_accum=tvm.tirx.const(1.0, "float32") + 1.0)


def test_ptx_cp_async_and_its_barrier():
    src = kernel_body(cuda(cp_async_program()))
    assert "tilex::cp_async_zfill<16>" in src and "tilex::cp_async_mbar_arrive_noinc((&(landed_ptr[0])))" in src
    assert src.index("tilex::cp_async_mbar_arrive_noinc") < src.index("tilex::mbar_wait((&(landed_ptr[0])), 0)")
    with pytest.raises(ValueError, match="cp.async copies 4, 8 or 16 bytes"):
        @T.prim_func
        def main(A: T.Tensor((64, 64), F16)):
            with T.Kernel(1, threads=128) as _:
                S = T.alloc_shared((64, 64), F16)
                T.ptx_cp_async(T.access_ptr(S[0, 0], "w", 3), T.access_ptr(A[0, 0], "r", 3), 3)
    with pytest.raises(TypeError, match="pointer from T.access_ptr"):
        T.ptx_cp_async(0, 0, 8)


def test_registers_and_hints():
    assert "tilex::reg_alloc<240>" in str(T.set_max_nreg(240, 1))
    assert "tilex::reg_dealloc<24>" in str(T.dec_max_nreg(24))
    assert "tilex::reg_alloc<160>" in str(T.inc_max_nreg(160))
    for hint in (T.no_set_max_nreg(), T.disable_warp_group_reg_alloc(), T.annotate_producer_reg_dealloc(),
                 T.annotate_consumer_reg_alloc(200)):
        assert hint is None  # accepted, without effect
    with pytest.raises(ValueError, match="multiple of 8"):
        T.set_max_nreg(100, 1)
    with pytest.raises(ValueError, match="reg_count must be <= 256"):
        T.set_max_nreg(264, 1)
    with pytest.raises(ValueError, match="reg_count must be >= 24"):
        T.annotate_consumer_reg_alloc(8)


def test_access_ptr_goes_through_the_layout():
    @T.prim_func
    def main(A: T.Tensor((128, 64), F16), B: T.Tensor((128, 64), F16)):
        with T.Kernel(1, threads=128) as _:
            S = T.alloc_shared((128, 64), F16)
            T.tma_copy(A, S, barrier=T.alloc_barrier(128))
            T.evaluate(T.call_extern("void", "probe_s", T.access_ptr(S[3, 8], "r", 8)))
            T.evaluate(T.call_extern("void", "probe_g", T.access_ptr(B[2, 0], "w", extent=64)))

    f = lower_to_tir(main, SM90)["main"]
    probes = {}

    def on_call(c):
        if intrin.name_of(c) in ("probe_s", "probe_g"):
            probes[intrin.name_of(c)] = c.args[1]

    walk(f.body, (tvm.ir.Call, on_call))
    s_ptr, g_ptr = probes["probe_s"], probes["probe_g"]
    assert s_ptr.args[1].args[0].name == "S" and [int(a.value) for a in s_ptr.args[3:]] == [8, 1]
    # row 3, 16-byte chunk 1 under the 128-byte swizzle: chunk 1 ^ (3 % 8) = 2 -> element 3 * 64 + 2 * 8
    assert _value(s_ptr.args[2]) == 208
    assert "B.data, 128, 64, 2)" in str(g_ptr)


# T.alloc_global: tests/language/test_alloc_global.py; reducers: tests/op/test_reducer.py


# ---- misuse ---------------------------------------------------------------------------------------------------------------
def test_constant_barrier_index_out_of_range():
    with pytest.raises(ValueError, match=r"barrier index 2 is out of range for 'bars', which holds 2 barriers"):
        @T.prim_func
        def main(A: T.Tensor((16,), F16)):
            with T.Kernel(1, threads=128) as _:
                bars = T.alloc_barrier([128, 128])
                T.barrier_wait(bars[2], 0)


def test_barrier_must_be_an_mbarrier():
    with pytest.raises(TypeError, match="is not an mbarrier array"):
        @T.prim_func
        def main(A: T.Tensor((16,), F16)):
            with T.Kernel(1, threads=128) as _:
                S = T.alloc_shared((4,), "float32")
                T.barrier_arrive(S[0])
    with pytest.raises(ValueError, match=r"holds \[2\] barriers; name one"):
        @T.prim_func
        def other(A: T.Tensor((16,), F16)):
            with T.Kernel(1, threads=128) as _:
                bars = T.alloc_barrier([128, 128])
                T.barrier_arrive(bars)


def test_ws_names_a_warp_group_the_block_has():
    with pytest.raises(ValueError, match=r"the block has 2 warp groups \(256 threads\), so there is no warp group 2"):
        @T.prim_func
        def main(A: T.Tensor((16,), F16)):
            with T.Kernel(1, threads=256) as _:
                with T.ws(2):
                    T.evaluate(0)
    with pytest.raises(ValueError, match="not whole warp groups"):
        @T.prim_func
        def odd(A: T.Tensor((16,), F16)):
            with T.Kernel(1, threads=192) as _:
                with T.ws(0):
                    T.evaluate(0)
    with pytest.raises(NotImplementedError, match="not consecutive"):
        T.ws(0, 2)
    with pytest.raises(ValueError, match="do not nest"):
        @T.prim_func
        def nested(A: T.Tensor((16,), F16)):
            with T.Kernel(1, threads=256) as _:
                with T.ws(0, 1):
                    with T.ws(1):
                        T.evaluate(0)


def test_alloc_barrier_only_in_the_kernel_body():
    with pytest.raises(ValueError, match="directly in the T.Kernel body"):
        @T.prim_func
        def main(A: T.Tensor((16,), F16)):
            with T.Kernel(1, threads=128) as _:
                for i in T.serial(2):
                    T.alloc_barrier(128)
    with pytest.raises(ValueError, match="arrive_count must be >= 1"):
        T.alloc_barrier([128, 0])


def test_tma_copy_misuse():
    @T.prim_func
    def no_barrier(A: T.Tensor((128, 64), F16)):
        with T.Kernel(1, threads=128) as _:
            S = T.alloc_shared((128, 64), F16)
            T.tma_copy(A, S)

    with pytest.raises(TileOpError, match="a load needs barrier="):
        lower_to_tir(no_barrier, SM90)
    with pytest.raises(NotImplementedError, match=r"T.tma_copy\(cluster_mask=3\)"):
        T.tma_copy(None, None, cluster_mask=3)
    with pytest.raises(NotImplementedError, match="cta_id"):
        T.mbarrier_arrive(None, cta_id=1)


def test_wgmma_gemm_needs_warpgroup_mmas():
    with pytest.raises(TileOpError, match="cannot run on warpgroup MMAs"):
        lower_to_tir(wgmma_program(), SM80)


def test_fragment_belongs_to_one_region():
    @T.prim_func
    def main(C: T.Tensor((128, 128), "float32")):
        with T.Kernel(1, threads=256) as _:
            C_l = T.alloc_fragment((128, 128), "float32")
            with T.ws(0):
                T.clear(C_l)
            with T.ws(1):
                T.copy(C_l, C)

    with pytest.raises(TileOpError, match=r"fragment 'C_l' is used on threads \[0, 128\)"):
        lower_to_tir(main, SM90)


def test_tile_operators_need_an_interval_of_threads():
    @T.prim_func
    def main(C: T.Tensor((128,), "float32")):
        with T.Kernel(1, threads=128) as _:
            tx = T.get_thread_binding()
            S = T.alloc_shared((128,), "float32")
            if tx % 2 == 0:
                T.fill(S, 1.0)
            C[tx] = S[tx]

    with pytest.raises(TileOpError, match="must be one interval"):
        lower_to_tir(main, SM90)


def test_barriers_inside_a_plain_branch_on_the_thread_index():
    """SIMT code in ``if tx < 128`` that needs a barrier among those threads gets a named barrier over them (TVM's
    ThreadSync alone refuses to place one inside a condition)."""
    @T.prim_func
    def main(A: T.Tensor((256,), "float32"), B: T.Tensor((256,), "float32")):
        with T.Kernel(1, threads=256) as _:
            tx = T.get_thread_binding()
            S = T.alloc_shared((128,), "float32", scope="shared")
            if tx < 128:
                S[tx] = A[tx]
                B[tx] = S[127 - tx]
            else:
                B[tx] = A[tx]

    src = kernel_body(cuda(main))
    branch = braced_block(src, "if (((int)threadIdx.x) < 128) {")
    assert "named_barrier_wait(1, 128)" in branch and "__syncthreads" not in src


# ---- on the GPU -------------------------------------------------------------------------------------------------------
def _gemm_check(program, M=1024, N=1024, K=1024):
    torch = pytest.importorskip("torch")
    kernel = tilex.compile(program(M, N, K), out_idx=[2])
    a = torch.randn(M, K, device="cuda", dtype=torch.float16)
    b = torch.randn(K, N, device="cuda", dtype=torch.float16)
    c = kernel(a, b)
    torch.testing.assert_close(c.float(), (a.float() @ b.float()), rtol=2e-2, atol=2e-1)


@pytest.mark.gpu
@pytest.mark.parametrize("program", [role_gemm, loop_gemm, split_columns_gemm], ids=["roles", "loop", "columns"])
def test_hand_synchronized_gemms_match_torch(program):
    _gemm_check(program)


@pytest.mark.gpu
def test_role_gemm_with_a_ragged_k_matches_torch():
    _gemm_check(role_gemm, M=512, N=768, K=1000)  # the last K tile reads zeros beyond the tensor


@pytest.mark.gpu
def test_branch_gemm_matches_torch():
    torch = pytest.importorskip("torch")
    kernel = tilex.compile(branch_gemm(), out_idx=[2])
    a = torch.randn(256, 64, device="cuda", dtype=torch.float16)
    b = torch.randn(64, 128, device="cuda", dtype=torch.float16)
    ref = a.float() @ b.float()
    ref[128:] *= 2
    torch.testing.assert_close(kernel(a, b), ref, rtol=1e-2, atol=1e-2)


@pytest.mark.gpu
def test_tma_store_async_copy_and_wgmma_gemm_match_torch():
    torch = pytest.importorskip("torch")
    a = torch.randn(128, 64, device="cuda", dtype=torch.float16)
    torch.testing.assert_close(tilex.compile(tma_store_program(), out_idx=[1])(a), a)
    x = torch.randn(64, 64, device="cuda", dtype=torch.float16)
    torch.testing.assert_close(tilex.compile(async_copy_program(), out_idx=[1])(x), x.flip(0))
    p = torch.randn(128, 128, device="cuda", dtype=torch.float16)
    q = torch.randn(128, 128, device="cuda", dtype=torch.float16)
    for program in (wgmma_program, unrolled_wgmma_program):
        torch.testing.assert_close(tilex.compile(program(), out_idx=[2])(p, q), p.float() @ q.float(),
                                   rtol=1e-2, atol=1e-1)
    y = tilex.compile(cp_async_program(), out_idx=[1])(x)
    torch.testing.assert_close(y[:32], x[:32])
    assert not y[32:].any()


@pytest.mark.gpu
def test_barrier_names_program_runs():
    torch = pytest.importorskip("torch")
    a = torch.randn(128, 64, device="cuda", dtype=torch.float16)
    torch.testing.assert_close(tilex.compile(barrier_names_program(), out_idx=[1])(a), a)
