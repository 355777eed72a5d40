"""T.gemm with A in a register fragment ("rs"), on the CPU: the A layouts layout inference assigns (checked element by
element against the PTX ISA fragment formulas), the lowering (wgmma with A registers, mma.sync without an A
ldmatrix, ldmatrix copies into the fragment, simulated), error messages, and nvcc compiles of the generated CUDA."""
import shutil

import numpy as np
import pytest
import tvm
from tvm import tirx

import tilex.language as T
from gemm_rs_kernels import qk_pv, rs_cast_matmul, rs_matmul
from tilex.ir.visit import walk
from tilex.engine import build, lower_to_tir
from tilex.layout import LayoutError, make_mma_a_fragment, make_mma_accumulator_fragment
from tilex.layout.wgmma import make_wgmma_a_fragment, make_wgmma_accumulator_fragment
from tilex.op.base import TileOpError
from tilex.op.gemm import partition_warps
from tilex.transform.pipeline.inject import inject_pipeline
from tilex.layout.codec import decode
from tilex.transform.layout_inference import LAYOUT_MAP_ATTR, layout_inference

SM90 = tvm.target.Target({"kind": "cuda", "arch": "sm_90a"})
SM80 = tvm.target.Target({"kind": "cuda", "arch": "sm_80"})
needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")


def infer(func, target):
    out = layout_inference(inject_pipeline(func, target), target)
    return {b.name: decode(v) for b, v in out.attrs[LAYOUT_MAP_ATTR].items()}


def _ptx_m16k16_a():
    """(lane, e, row, col) of the PTX ISA's m16k16 A figure (mma.sync m16n8k16 and, per warp, wgmma m64nNk16;
    f16/bf16): register element a_e of lane l is row groupID + 8*((e>>1)&1), column 2*(l%4) + (e&1) + 8*(e>>2),
    with groupID = l >> 2."""
    return [(lane, e, lane // 4 + 8 * ((e >> 1) & 1), 2 * (lane % 4) + (e & 1) + 8 * (e >> 2))
            for lane in range(32) for e in range(8)]


@pytest.mark.parametrize("m,k,wg_m,wg_n", [(64, 16, 1, 1), (128, 64, 1, 1), (128, 32, 2, 1), (64, 64, 1, 2),
                                          (256, 32, 2, 2)])
def test_wgmma_a_fragment_matches_ptx_figure(m, k, wg_m, wg_n):
    """Warpgroup g = gi * wg_n + gj, warp w of it, lane l, register element a_e of (64-row block mb, k step ki):
    row gi*wm + 64*mb + 16*w + groupID + 8*((e>>1)&1), column 16*ki + 2*(l%4) + (e&1) + 8*(e>>2)."""
    f = make_wgmma_a_fragment(m, k, wg_m, wg_n)
    wm = m // wg_m
    assert f.replicate == wg_n and f.thread_extent == 128 * wg_m * wg_n and f.local_size == wm * k // 128
    threads, locals_, rows, cols, reps = [], [], [], [], []
    for gi in range(wg_m):
        for gj in range(wg_n):
            for w in range(4):
                for mb in range(wm // 64):
                    for ki in range(k // 16):
                        for lane in range(32):
                            for e in range(8):
                                threads.append((gi * wg_n + gj) * 128 + w * 32 + lane)
                                locals_.append((mb * (k // 16) + ki) * 8 + e)
                                rows.append(gi * wm + 64 * mb + 16 * w + lane // 4 + 8 * ((e >> 1) & 1))
                                cols.append(16 * ki + 2 * (lane % 4) + (e & 1) + 8 * (e >> 2))
                                reps.append(gj)
    rows, cols, reps = np.array(rows), np.array(cols), np.array(reps)
    thread = np.array([f.map_numpy(np.array([r]), np.array([c]), rep=g)[0][0]
                       for r, c, g in zip(rows, cols, reps)])
    _, (local,) = f.map_numpy(rows, cols)
    assert (thread == np.array(threads)).all() and (local == np.array(locals_)).all()
    assert len(set(zip(threads, locals_))) == len(threads) == m * k * wg_n  # a bijection onto (thread, register)


def test_wgmma_a_fragment_is_the_accumulator_pattern():
    """Inside a warpgroup the A layout of (m, k) is the accumulator layout of an (m, k) tile (wg_n = 1)."""
    assert make_wgmma_a_fragment(128, 64, 2, 1).is_equal(make_wgmma_accumulator_fragment(128, 64, 2, 1))
    with pytest.raises(LayoutError):
        make_wgmma_a_fragment(96, 16, 1, 1)
    with pytest.raises(LayoutError):
        make_wgmma_a_fragment(64, 24, 1, 1)


def test_sm90_layout_inference_gives_a_the_wgmma_register_layout():
    layouts = infer(rs_matmul(1024, 1024, 1024, bm=128, bn=128, bk=64), SM90)
    a = layouts["A_f"]
    assert a.is_equal(make_wgmma_a_fragment(128, 64, 1, 1))
    assert layouts["C_l"].is_equal(make_wgmma_accumulator_fragment(128, 128, 1, 1))

    def where(i, j):
        return int(a.map_thread([i, j]).value), int(a.local_offset([i, j]).value)

    # PTX figure: thread 0 holds a0,a1 = (0, 0..1), a2,a3 = (8, 0..1), a4,a5 = (0, 8..9), a6,a7 = (8, 8..9)
    assert [where(*x) for x in [(0, 0), (0, 1), (8, 0), (8, 1), (0, 8), (0, 9), (8, 8), (8, 9)]] == \
        [(0, e) for e in range(8)]
    assert where(17, 3) == (32 + 4 + 1, 1)  # warp 1 (rows 16..31), groupID 1, thread-in-group 1; a1
    assert where(5, 30) == (4 * 5 + 3, 8 + 4)  # k step 1 (locals 8..15), column 14 = 8 + 2*3: a4
    assert where(64, 0) == (0, 32)  # second 64-row block: after the 4 k steps of the first
    # the shared tile it is copied from gets the wgmma swizzle (bank-conflict-free rows, TMA-compatible)
    from tilex.layout.wgmma import make_wgmma_operand_layout

    assert layouts["A_s"].is_equal(make_wgmma_operand_layout(128, 64, 16))


def test_sm90_warpgroups_splitting_n_share_a_by_replication():
    """64 rows and two warpgroups: the warpgroups split N, so both hold every A element (threads t and t+128)."""
    a = infer(rs_matmul(1024, 1024, 1024, bm=64, bn=128, bk=32, threads=256), SM90)["A_f"]
    assert a.replicate == 2 and a.is_equal(make_wgmma_a_fragment(64, 32, 1, 2))
    for i, j in [(0, 0), (37, 21), (63, 31)]:
        t0, t1 = (int(a.map_thread([i, j], rep=r).value) for r in (0, 1))
        assert t1 == t0 + 128 and t0 < 128


@pytest.mark.parametrize("target,configs", [(SM80, None), (SM90, {"tilex.disable_wgmma": True})])
def test_mma_sync_layout_inference_gives_a_the_mma_a_layout(target, configs):
    from tilex import config

    bm, bk, threads = 128, 32, 128
    with config.scope(config.split(configs)[0]):
        layouts = infer(rs_matmul(1024, 1024, 1024, bm=bm, bn=128, bk=bk, threads=threads), target)
    wm, wn = partition_warps(bm, 128, threads // 32)
    a = layouts["A_f"]
    assert a.is_equal(make_mma_a_fragment(bm, bk, wm, wn)) and a.replicate == wn
    # PTX m16n8k16 A: lane l holds rows l//4 (+8) and columns 2*(l%4) (+1, +8) of each 16x16 tile
    warp_rows = bm // wm
    for lane, e, r, c in _ptx_m16k16_a():
        for ki in range(bk // 16):
            for wi in range(wm):
                i, j = wi * warp_rows + r, ki * 16 + c
                for rep in range(wn):
                    assert int(a.map_thread([i, j], rep=rep).value) == (wi * wn + rep) * 32 + lane
                assert int(a.local_offset([i, j]).value) == ki * 8 + e


def test_cast_loops_follow_the_a_layout():
    """S (fp32, computed in T.Parallel) and its 16-bit cast P get P's A-operand layout, on both paths."""
    for target, want in [(SM90, make_wgmma_a_fragment(64, 64, 1, 1)), (SM80, None)]:
        layouts = infer(rs_cast_matmul(512, 512, 512, bm=64, bn=128, bk=64, num_stages=3), target)
        want = want or make_mma_a_fragment(64, 64, *partition_warps(64, 128, 4))
        assert layouts["P"].is_equal(want) and layouts["S"].is_equal(want)


@pytest.mark.parametrize("target,policy", [(SM90, T.GemmWarpPolicy.Square), (SM80, T.GemmWarpPolicy.FullRow)])
def test_attention_chain_accumulator_is_the_next_a_layout(target, policy):
    """S = Q @ K^T accumulates in exactly the registers P = cast(S) needs as the A operand of P @ V."""
    layouts = infer(qk_pv(256, 512, 64, policy=policy), target)
    assert layouts["S"].is_equal(layouts["P"])
    if target is SM90:
        assert layouts["P"].is_equal(make_wgmma_a_fragment(64, 64, 1, 1))
    else:
        assert layouts["S"].is_equal(make_mma_accumulator_fragment(64, 64, 4, 1))


def test_sm90_lowering_issues_register_a_wgmma():
    script = lower_to_tir(rs_matmul(1024, 1024, 1024), SM90)["main"].script()
    assert "tilex::wgmma_m64n128k16_rs_f16<1>" in script  # B (K x N) MN-major: transposed in the instruction
    assert script.count("tilex::wgmma_desc") == 1  # only B has a shared-memory descriptor
    assert "tilex::ldmatrix_x4\"" in script  # T.copy(A_s, A_f) on ldmatrix
    # the registers this thread wrote are fenced before the wgmma reads them
    body = script.split("tilex::ldmatrix_x4\"", 1)[1]
    assert body.index("tilex::wgmma_fence") < body.index("_rs_f16")


@pytest.mark.parametrize("configs", [None, {"tilex.disable_warp_specialized": True}])
def test_pipelined_rs_mmas_finish_before_the_fragment_is_rewritten(configs):
    """Inside T.Pipelined every rs wgmma is waited for (wait<0>) before the next iteration rewrites A_f."""
    script = lower_to_tir(rs_matmul(1024, 1024, 1024, num_stages=3), SM90, configs)["main"].script()
    parts = script.split("_rs_f16<1>")
    assert len(parts) == 2
    after = parts[1]
    assert after.index("tilex::wgmma_wait<0>") < min(i for i in (after.find("wgmma_wait<1>"), len(after)) if i >= 0)


@pytest.mark.parametrize("target,configs", [(SM80, None), (SM90, {"tilex.disable_wgmma": True})])
def test_mma_sync_lowering_reads_a_registers_in_place(target, configs):
    script = lower_to_tir(rs_matmul(1024, 1024, 1024, num_stages=2), target, configs)["main"].script()
    assert "tilex::mma_m16n8k16_f16" in script and "wgmma" not in script
    assert "A_frag" not in script  # no per-k-step A staging buffer: A_f is the operand
    assert "tilex::ldmatrix_x4_trans" in script  # B still from shared memory
    assert script.count("tilex::ldmatrix_x4\"") == 1  # the copy into A_f


def _ldmatrix_call(func):
    found = []

    def on_for(loop):
        if loop.loop_var.name == "ldm_q":
            walk(loop.body, (tvm.ir.Call, lambda c: found.append((loop, c)) if c.op.name == "tirx.call_extern"
                             and str(c.args[0].value) == "tilex::ldmatrix_x4" else None))

    walk(func.body, (tirx.For, on_for))
    assert len(found) == 1
    return found[0]


@pytest.mark.parametrize("target,threads,bm", [(SM90, 128, 128), (SM90, 256, 64), (SM80, 128, 64)])
def test_ldmatrix_copy_fills_the_fragment_it_claims(target, threads, bm):
    """Simulate the emitted ldmatrix.x4 (lane l addresses row l % 8 of matrix l // 8; thread l gets, per matrix m,
    register m = row l // 4, columns 2*(l%4), +1) and check that every register receives the A element the
    fragment layout assigns to it, through the shared tile's swizzle."""
    from tilex.layout._expr import compile_numpy

    func = rs_matmul(1024, 1024, 1024, bm=bm, bn=128, bk=64, threads=threads)
    layouts = infer(func, target)
    frag, smem = layouts["A_f"], layouts["A_s"]
    low = lower_to_tir(func, target)["main"]
    loop, call = _ldmatrix_call(low)
    dst, src = call.args[1], call.args[2]  # tvm_access_ptr(type, data, offset, extent, mask)
    vars_ = []
    walk(src.args[2], (tvm.ir.Var, lambda v: vars_.append(v) if v not in vars_ else None))
    t_var = [v for v in vars_ if not v.same_as(loop.loop_var)]
    assert len(t_var) == 1  # the thread index
    src_off = compile_numpy([src.args[2]], [t_var[0], loop.loop_var])
    dst_off = compile_numpy([dst.args[2]], [loop.loop_var])
    # the shared layout's inverse, by enumeration: physical offset -> (row, col) of the tile (stage 0)
    shape = smem.input_shape
    grid = np.meshgrid(*[np.arange(n) for n in shape], indexing="ij")
    phys = smem.map_numpy(*grid)
    flat = sum(np.asarray(o) * int(np.prod(smem.output_shape[d + 1:])) for d, o in enumerate(phys))
    logical = {int(p): (int(r), int(c)) for p, r, c in zip(flat.ravel(), grid[-2].ravel(), grid[-1].ravel())}
    expect = frag.inverse()
    for q in range(frag.local_size // 8):
        d0 = int(dst_off(np.array([q]))[0][0])
        for warp in range(threads // 32):
            addr = src_off(warp * 32 + np.arange(32), np.full(32, q))[0]  # one row address per lane
            for lane in range(32):
                for m in range(4):
                    for h in range(2):
                        got = logical[int(addr[8 * m + lane // 4]) + 2 * (lane % 4) + h]
                        want = expect.map_numpy(np.array([warp * 32 + lane]), np.array([d0 + 2 * m + h]))
                        assert got == (int(want[0][0]), int(want[1][0])), (q, warp, lane, m, h)


def test_transpose_a_in_registers_takes_the_transposed_operand_layout():
    @T.prim_func
    def f(A: T.Tensor((64, 64), "float16"), B: T.Tensor((64, 64), "float16")):
        with T.Kernel(1, threads=128) as bx:
            A_f = T.alloc_fragment((64, 64), "float16")
            B_s = T.alloc_shared((64, 64), "float16")
            C_l = T.alloc_fragment((64, 64), "float32")
            T.copy(A, A_f)
            T.copy(B, B_s)
            T.gemm(A_f, B_s, C_l, transpose_A=True)

    for target in (SM90, SM80):  # a (K, M) fragment laid out as the transpose of the A operand's layout
        assert "A_f" in infer(f, target)


def test_operands_outside_shared_memory_and_fragments_are_rejected():
    @T.prim_func
    def b_local(A: T.Tensor((64, 64), "float16"), B: T.Tensor((64, 64), "float16")):
        with T.Kernel(1, threads=128) as bx:
            A_f = T.alloc_fragment((64, 64), "float16")
            B_l = T.alloc_local((64, 64), "float16")
            C_l = T.alloc_fragment((64, 64), "float32")
            T.copy(A, A_f)
            T.copy(B, B_l)
            T.gemm(A_f, B_l, C_l)

    # (a B fragment is supported: tests/op/test_gemm_coverage.py)
    with pytest.raises(TileOpError, match=r"B \('B_l'\) in scope 'local' is not supported.*T.alloc_fragment"):
        infer(b_local, SM90)

    @T.prim_func
    def a_local(A: T.Tensor((64, 64), "float16"), B: T.Tensor((64, 64), "float16")):
        with T.Kernel(1, threads=128) as bx:
            A_l = T.alloc_local((64, 64), "float16")
            B_s = T.alloc_shared((64, 64), "float16")
            C_l = T.alloc_fragment((64, 64), "float32")
            T.copy(B, B_s)
            T.gemm(A_l, B_s, C_l)

    with pytest.raises(TileOpError, match=r"A \('A_l'\) in scope 'local' is not supported.*T.alloc_fragment"):
        infer(a_local, SM90)


P = T.GemmWarpPolicy.FullRow
COMPILE_CASES = {
    "plain-sm90": (lambda: rs_matmul(1000, 1000, 1000), "sm_90a", None, "_rs_f16"),
    "plain-sm80": (lambda: rs_matmul(1000, 1000, 1000, dtype="bfloat16"), "sm_80", None, "mma_m16n8k16_bf16"),
    "pipelined-sm90": (lambda: rs_matmul(1024, 1024, 1024, num_stages=3), "sm_90a", None, "_rs_f16"),
    "pipelined-2wg-bf16-sm90": (lambda: rs_matmul(1024, 1024, 1024, bm=64, threads=256, num_stages=2,
                                                  dtype="bfloat16"), "sm_90a", None, "_rs_bf16"),
    "cast-sm90": (lambda: rs_cast_matmul(512, 512, 512, num_stages=2), "sm_90a", None, "_rs_f16"),
    "attention-chain-sm90": (lambda: qk_pv(256, 512, 64), "sm_90a", None, "_rs_f16"),
    "attention-chain-mma": (lambda: qk_pv(256, 512, 64, policy=P), "sm_90a", {"tilex.disable_wgmma": True},
                            "mma_m16n8k16_f16"),
}


@needs_nvcc
@pytest.mark.parametrize("case", list(COMPILE_CASES))
def test_rs_gemm_cuda_compiles_with_nvcc(case):
    from tilex.engine.nvcc import compile_cuda

    make, arch, configs, marker = COMPILE_CASES[case]
    src = build(make(), tvm.target.Target({"kind": "cuda", "arch": arch}), configs).mod.imports[0].inspect_source()
    assert marker in src
    assert len(compile_cuda(src, arch)) > 1000
