"""WarpSpecialize of attention's loop (hopper/ws_groups.py): one mbarrier pair per load group, the first
iteration peeled, P V of the previous iteration overlapping the softmax (``wgmma_wait<1>``), its opt-out and the
opt-in warpgroup turns (generated CUDA and ptxas's report; nvcc only, no GPU needed)."""
import functools
import re

import pytest

import tilex
from cuda_text import braced_block
from tilex.kernels.attention.forward import mha_forward

SS = "tilex::wgmma_m64n128k16_f16<"  # S = Q K^T: both operands in shared memory
RS = "tilex::wgmma_m64n128k16_rs_f16<"  # O += P V: P in registers


@functools.lru_cache(maxsize=None)
def _kernel(cfg=(), seq=512, causal=False, block=None):
    prog = mha_forward(1, 2, seq, 128, causal=causal, block_M=block, block_N=block)
    return tilex.compile(prog, out_idx=[3, 4], target="sm_90a", pass_configs=dict(cfg))


def _src(kernel):
    src = kernel.get_kernel_source()
    return src[src.index('extern "C" __global__'):]


def _block(src, start):
    """The text inside the braces of the statement that starts at `start`."""
    open_ = src.index("{", start)
    depth = 0
    for n in range(open_, len(src)):
        depth += {"{": 1, "}": -1}.get(src[n], 0)
        if depth == 0:
            return src[open_ + 1:n]
    raise AssertionError("unbalanced braces")


def _regions(src):
    """(peeled first iteration, loop body, after the loop) of the consumers' pipelined loop."""
    guard = re.search(r"if \(0 < (\w+)\[0\]\) \{", src)
    assert guard, "the peeled iteration is guarded by the trip count"
    consumer = _block(src, guard.start())
    loop = re.search(r"for \(int (\w+) = 1; \1 < " + guard.group(1) + r"\[0\]; \+\+\1\) \{", consumer)
    assert loop, consumer[:2000]
    body = _block(consumer, loop.start())
    after = consumer[loop.start() + consumer[loop.start():].index(body) + len(body):]
    return consumer[:loop.start()], body, after, loop.group(1)


def _no_serialization(kernel):
    assert kernel.resources is not None
    assert not any(f.wgmma_serialized for f in kernel.resources), kernel.resources


def test_default_overlaps_p_v_with_next_softmax():
    kernel = _kernel()
    src = _src(kernel)
    assert src.count("tilex::mbar_init(") == 4  # two load groups (K, V): a full / empty pair each
    assert len(re.findall(r"mbar_init\(\(&\(tma_full_ptr\w*\[bar_i\]\)\), 1\)", src)) == 2
    assert len(re.findall(r"mbar_init\(\(&\(tma_empty_ptr\w*\[bar_i\]\)\), 8\)", src)) == 2  # one arrival per warp
    peeled, body, after, k = _regions(src)
    # the peeled iteration: S(0) only, waited for at once
    assert peeled.count(SS) == 1 and RS not in peeled
    assert "tilex::wgmma_wait<0>();" in peeled and "wgmma_wait<1>" not in peeled
    # the loop: S(k) issued, then P(k-1) V(k-1) on the previous stage, then a wait for S(k) alone
    assert body.count(SS) == 1 and body.count(RS) == 1
    ss, rs, w1 = body.index(SS), body.index(RS), body.index("tilex::wgmma_wait<1>();")
    assert ss < rs < w1
    rs_line = body[rs:body.index("\n", rs)]
    assert f"(({k} + 1) & 1)" in rs_line  # stage (k - 1) mod 2 of V
    # P V is waited for (wait_group 0) and V's stage freed before the next statement that touches P / O
    w0 = body.index("tilex::wgmma_wait<0>();", w1)
    assert f"tma_empty_ptr_1[(({k} + 1) & 1)]" in body[w0:]
    # after the loop: the last P V, then wait_group 0
    assert after.count(RS) == 1 and SS not in after
    assert after.index(RS) < after.index("tilex::wgmma_wait<0>();")
    _no_serialization(kernel)


def test_disable_mma_overlap():
    kernel = _kernel((("tilex.disable_mma_overlap", True),))
    src = _src(kernel)
    assert "wgmma_wait<1>" not in src
    assert src.count(SS) == 1 and src.count(RS) == 1  # no peeled iteration, no drain
    assert "tilex::wgmma_wait<0>();" in src
    assert "named_barrier_wait" not in src
    _no_serialization(kernel)


def _turn_events(code, tid_shift="(((int)threadIdx.x) >> 7)"):
    """[(kind, barrier id for warpgroup 0, for warpgroup 1)] of the named-barrier turns in `code`, in order,
    with None for a warpgroup that a `if (wg == c)` guard skips."""
    events = []
    lines = code.splitlines()
    for n, line in enumerate(lines):
        m = re.search(r"tilex::named_barrier_(wait|arrive)\((.*), 256\);", line)
        if not m:
            continue
        guard = re.search(r"if \(" + re.escape(tid_shift) + r" == (\d)\) \{", lines[n - 1])
        ids = []
        for wg in (0, 1):
            if guard and int(guard.group(1)) != wg:
                ids.append(None)
            else:
                ids.append(eval(m.group(2).replace(tid_shift, str(wg))))
        events.append((m.group(1), *ids))
    return events


def test_warpgroup_turns():
    kernel = _kernel((("tilex.warpgroup_turns", True),))
    src = _src(kernel)
    assert "tilex::named_barrier_wait(" in src and "tilex::named_barrier_arrive(" in src
    assert "wgmma_wait<1>" in src
    peeled, body, after, _ = _regions(src)
    # each block of MMAs sits inside its warpgroup's turn: wait, issue, pass the turn, then wait for S
    w, a = body.index("tilex::named_barrier_wait("), body.index("tilex::named_barrier_arrive(")
    assert w < body.index(SS) < body.index(RS) < a < body.index("tilex::wgmma_wait<1>();")
    # barrier ids 2 / 3 only, and every barrier reaches its 256 threads: as many 128-thread waits of one
    # warpgroup as 128-thread arrivals of the other, for any trip count (peeled once, loop trips - 1, drain once)
    for trips in (1, 2, 4, 7):
        count = {}
        for code, times in ((peeled, 1), (body, trips - 1), (after, 1)):
            for kind, *ids in _turn_events(code):
                for wg, bar in enumerate(ids):
                    if bar is not None:
                        assert bar in (2, 3)
                        count[(kind, bar, wg)] = count.get((kind, bar, wg), 0) + times
        for bar in (2, 3):
            waits = {wg: count.get(("wait", bar, wg), 0) for wg in (0, 1)}
            arrives = {wg: count.get(("arrive", bar, wg), 0) for wg in (0, 1)}
            # one warpgroup waits on the barrier, the other arrives on it, equally often
            waiter = 0 if bar == 2 else 1
            assert waits[1 - waiter] == 0 and arrives[waiter] == 0, (bar, count)
            assert waits[waiter] == arrives[1 - waiter] == trips + 1, (trips, bar, count)
    _no_serialization(kernel)


def test_causal_single_block_compiles():
    """seq 128 with 128-row / 128-key blocks: one key block, the loop after the peeled iteration runs 0 times."""
    kernel = _kernel(seq=128, causal=True, block=128)
    src = _src(kernel)
    peeled, body, after, _ = _regions(src)
    assert peeled.count(SS) == 1 and after.count(RS) == 1
    # the diagonal block is masked per element, off-diagonal ones (none here at run time) in one go
    assert "-CUDART_INF_F" in src
    _no_serialization(kernel)


def _backward_loop(cfg=()):
    from tilex.kernels.attention.backward import bwd_main

    k = tilex.compile(bwd_main(1, 2, 512, 128, False, bm=64, bn=128, num_stages=2, threads=256), out_idx=[7, 8],
                      target="sm_90a", pass_configs=dict(cfg))
    src = _src(k)
    loop = re.search(r"for \(int i_1 = [^;]+; i_1 < \d+; \+\+i_1\) \{", src)
    return _block(src, loop.start())


def test_backward_mmas_complete_where_needed():
    body = _backward_loop()
    commits = [m.start() for m in re.finditer(r"wgmma_commit\(\)", body)]
    waits = [(m.start(), int(m.group(1))) for m in re.finditer(r"wgmma_wait<(\d)>\(\)", body)]
    assert len(commits) == 5  # S, dP, dV, dQ, dK: each issued once
    # S and dP are issued together; the softmax waits for S only
    assert commits[1] < waits[0][0] and waits[0][1] == 1
    # dQ's and dK's MMAs are issued back to back; dQ is staged while dK runs; everything completes by the end
    staged = body.index("tma_reduce_add")
    assert commits[3] < commits[4] < waits[-2][0] < staged < waits[-1][0] and waits[-2][1] == 1
    assert waits[-1][1] == 0
    # the opt-out completes every MMA right after issuing it
    plain = _backward_loop((("tilex.disable_mma_overlap", True),))
    assert re.findall(r"wgmma_wait<(\d)>", plain) == ["0"] * 5


def test_a_stage_read_by_plain_loads_is_freed_after_the_iterations_gemm():
    """The int4 GEMM of examples/layout_conflicts.py: a T.Parallel decodes the TMA-loaded packed tile (ld.shared)
    into the gemm's register operand. Its stage is freed only after the gemm's wait: an arrive right after the loads
    let the next TMA load overwrite bytes whose loads were still in flight (wrong weights on the H100)."""
    from programs import example

    prog = example("layout_conflicts")["int4_gemm_by_hand"](1024, 1024, 1024)
    src = _src(tilex.compile(prog, target="sm_90a"))
    body = braced_block(src, "for (int k_1 = 0;")
    loads = body.rindex("buf_dyn_shmem_ptr[")  # the decode's last load of the packed tile
    waits = [m.start() for m in re.finditer(r"wgmma_wait<0>", body)]
    frees = [m.start() for m in re.finditer(r"mbar_arrive\(\(&\(tma_empty_ptr\[", body)]
    assert waits and frees and loads < waits[-1] < frees[0], body
