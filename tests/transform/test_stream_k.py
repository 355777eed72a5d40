"""Stream-K in PersistentTiles (`tilex.stream_k`): IR / generated CUDA on the CPU, results on the GPU."""
import shutil

import pytest
import tvm

from tilex.engine import lower_to_tir
from tilex.kernels.gemm import matmul
from tilex.transform.hopper.stream_k import stream_k_pays

SM90 = tvm.target.Target({"kind": "cuda", "arch": "sm_90a"})
# (the skinny GEMMs below would otherwise run as transposed tiles: transform/swap_skinny_gemm.py)
SK = {"tilex.num_sms": 132, "tilex.stream_k": 1, "tilex.disable_skinny_swap": True}


def _script(func, **cfg):
    return lower_to_tir(func, SM90, {**SK, **cfg})["main"].script()


AUTO = {"tilex.num_sms": 132, "tilex.stream_k": "auto", "tilex.disable_skinny_swap": True}


def test_the_cost_rule_is_the_default():
    """8192^3 in 128x256 tiles: 1024 tile pairs over 66 clusters leave half a round, which stream-K shares (the
    rule's choice with no pass config); ``tilex.stream_k`` = 0 turns it off."""
    program = matmul(8192, 8192, 8192, 128, 256, 64, 3, 256)
    assert "tilex::streamk_fixup" in lower_to_tir(program, SM90, {"tilex.num_sms": 132})["main"].script()
    script = lower_to_tir(program, SM90, {"tilex.num_sms": 132, "tilex.stream_k": 0})["main"].script()
    assert "streamk" not in script


def test_host_code_asks_for_the_launch_workspace():
    """The partial sums and flags live in a workspace the host code asks tilex.streamk_workspace for before the
    launch (one per stream), sized for every block's accumulator (132 blocks x 256 threads x 128 words) and flags;
    the kernel takes it as a parameter."""
    from tilex.ir.intrin import STREAMK_WORKSPACE_FUNC, streamk_workspace_bytes

    script = _script(matmul(4096, 4096, 4096, 128, 256, 64, 3, 256, swizzle=16, stage_c=True))
    nbytes = streamk_workspace_bytes(128, 256, 132)
    assert nbytes == 8192 * 4 + 132 * 256 * 128 * 4  # the flags every stream-K kernel keeps first, the partials
    assert f'T.call_packed("{STREAMK_WORKSPACE_FUNC}", T.int64({nbytes}))' in script
    assert script.index("call_packed") < script.index('T.launch_thread("blockIdx.x", 132)')
    assert '"tilex::streamk_fixup<128, 256, 132, 8192>", streamk_ws,' in script


def test_cost_rule_leaves_a_large_square_gemm_alone():
    """4096^3 in 128x256 tiles: 256 tile pairs over 66 clusters; sharing the last 58 pairs would save nothing
    (3 rounds + 57 of 64 iterations + the fixup against 4 rounds)."""
    script = lower_to_tir(matmul(4096, 4096, 4096, 128, 256, 64, 3, 256, stage_c=True), SM90, AUTO)["main"].script()
    assert "streamk" not in script


def test_cost_rule_shares_a_skinny_gemm_among_every_multiprocessor():
    """128 x 8192 x 8192: 32 tiles of 128x256 for 132 blocks; without stream-K 100 multiprocessors idle through
    all 128 K iterations. The grid becomes all 132 slots, each running a segment of about 32 iterations."""
    script = lower_to_tir(matmul(128, 8192, 8192, 128, 256, 64, 3, 256), SM90, AUTO)["main"].script()
    assert 'T.launch_thread("blockIdx.x", 132)' in script
    assert "tilex::streamk_fixup<128, 256, 132, 8192>" in script
    assert "for tile_c_sk in range(((blockIdx_x + 1) * 4096 // 132 - 1) // 128" in script
    # without stream-K: one block per tile, as written
    script = lower_to_tir(matmul(128, 8192, 8192, 128, 256, 64, 3, 256), SM90,
                          {**AUTO, "tilex.stream_k": 0})["main"].script()
    assert "streamk" not in script and 'T.launch_thread("blockIdx.x", 32)' in script


def test_stream_k_pays():
    """The rule against the plain 128x256 program measured on the H100 (benchmarks/README.md, issue 18 sixth
    session: stream-K's gain at each shape)."""
    acc, step = 128 * 256 * 4, 48 * 1024  # a 128x256 fp32 accumulator, 64 K of A and B per iteration
    assert not stream_k_pays(256, 66, 64, acc, step)  # 4096^3: 3 rounds + 58 pairs, -3 %
    assert not stream_k_pays(256, 66, 128, acc, step)  # 4096x4096x8192: -6 %
    assert not stream_k_pays(512, 66, 64, acc, step)  # 8192x4096x4096: +0.7 %, below the rule's margin
    assert stream_k_pays(1024, 66, 128, acc, step)  # 8192^3: +2.0 %
    assert stream_k_pays(1024, 66, 64, acc, step)  # 8192x8192x4096: +1.6 %
    assert stream_k_pays(1792, 66, 128, acc, step)  # 4096x28672x8192: +1.9 %
    assert stream_k_pays(576, 66, 96, acc, step)  # 6144^3: +0.9 %
    assert stream_k_pays(32, 132, 128, acc, step)  # 128 x 8192 x 8192
    assert not stream_k_pays(128, 132, 128, acc, step)  # 128 tiles on 132 slots: nothing to gain
    assert not stream_k_pays(264, 132, 128, acc, step)  # whole rounds
    assert not stream_k_pays(32, 132, 16, acc, step)  # 1024^3: 4 of 16 iterations, but 4 partial sums per tile
    assert stream_k_pays(32, 66, 128, acc, step)  # 256 x 8192 x 8192 (tile pairs over clusters)
    # the transposed 128x16 tiles of a skinny GEMM (SwapSkinnyGemm): memory-bound, measured -14 % and -0.5 %
    assert not stream_k_pays(64, 132, 32, 128 * 16 * 4, 20480)  # 16 x 4096 x 4096
    assert not stream_k_pays(448, 132, 64, 128 * 16 * 4, 20480)  # 16 x 28672 x 8192


def test_whole_waves_then_shared_tail():
    """4096^3 in 128x256 tiles: 256 tile pairs over 66 clusters = 3 whole rounds, then the 58 remaining pairs'
    64 K iterations each (3712) split evenly between the 66 clusters."""
    script = _script(matmul(4096, 4096, 4096, 128, 256, 64, 3, 256, swizzle=16, stage_c=True))
    assert "for tile_p, k in T.grid(3, " in script and "for tile_c in range(3):" in script
    assert "for tile_p_sk in range(((blockIdx_x // 2 + 1) * 3712 // 66 - 1) // 64" in script
    assert "for tile_c_sk in range(((blockIdx_x // 2 + 1) * 3712 // 66 - 1) // 64" in script
    assert "tilex::streamk_fixup<128, 256, 132, 8192>" in script
    # only the block holding the summed tile stores it
    assert "if sk_last != 0:" in script


def test_no_tail_no_stream_k():
    """8192x8192 in 128x256 tiles over 128 blocks: whole rounds only, nothing to share."""
    script = _script(matmul(8192, 8192, 1024, 128, 256, 64, 3, 256, stage_c=True), **{"tilex.num_sms": 128})
    assert "streamk" not in script


def test_unstaged_epilogue_is_guarded():
    """Without a shared C tile the epilogue's global stores themselves sit under the guard."""
    script = _script(matmul(4096, 4096, 4096, 128, 256, 64, 3, 256))
    assert "tilex::streamk_fixup" in script and "if sk_last != 0:" in script


def test_epilogue_in_column_blocks_guards_only_its_stores():
    """An epilogue staged through shared memory in column blocks is a loop of (shared writes, TMA store): the guard
    goes around each store inside the loop, the shared steps and their barriers stay unconditional (guarding the
    whole loop made TVM's ThreadSync fail: "Cannot insert syncs inside condition")."""
    script = _script(matmul(4096, 4096, 4096, 128, 256, 64, 3, 256, swizzle=16, stage_c=True, c_block=128))
    assert "tilex::streamk_fixup" in script
    loop = script[script.index("for j in T.unroll(2)"):]
    assert "if sk_last != 0:" in loop and loop.index("if sk_last != 0:") > loop.index("C_s")


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
def test_generated_cuda_compiles_for_sm90a():
    import tilex
    from tilex.engine.nvcc import add_common_include, compile_cuda

    k = tilex.compile(matmul(4096, 4096, 4096, 128, 256, 64, 3, 256, swizzle=16, stage_c=True), target="sm_90a",
                      pass_configs=SK)
    src = k.get_kernel_source()
    assert "tilex::streamk_fixup<128, 256, 132, 8192>" in src
    assert len(compile_cuda(add_common_include(src), "sm_90a")) > 1000


def _torch():
    return pytest.importorskip("torch")


CASES = [  # (M, N, K, tile config, pass configs): every case leaves a tail of units that stream-K shares
    ((4096, 4096, 4096), (128, 256, 64, 3, 256), dict(swizzle=16, stage_c=True), {}),
    ((4096, 4096, 4096), (128, 256, 64, 3, 256), dict(), {}),  # unstaged epilogue
    ((2048, 4096, 1000), (128, 256, 64, 3, 256), dict(stage_c=True), {"tilex.persistent_cluster": 1}),  # ragged K
    ((3000, 2504, 776), (128, 128, 64, 4, 256), dict(), {}),  # ragged M, N and K
    ((8192, 8192, 1024), (128, 256, 64, 3, 256), dict(swizzle=8, stage_c=True), {}),
    ((4096, 4096, 4096), (128, 256, 64, 3, 256), dict(swizzle=16, stage_c=True, c_block=128), {}),  # blocked epilogue
]


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("case", range(len(CASES)))
def test_stream_k_matches_torch(case, dtype):
    torch = _torch()
    import tilex

    (M, N, K), cfg, kw, pc = CASES[case]
    kernel = tilex.compile(matmul(M, N, K, *cfg, dtype=dtype, **kw), out_idx=[2], pass_configs={**SK, **pc})
    assert "streamk_fixup" in kernel.get_kernel_source()
    tdt = getattr(torch, dtype)
    a = torch.randn(M, K, device="cuda", dtype=tdt)
    b = torch.randn(K, N, device="cuda", dtype=tdt)
    ref = (a.float() @ b.float()) / K ** 0.5
    for _ in range(3):  # the arrival counters must be back at zero for the next launch
        c = kernel(a, b)
        torch.cuda.synchronize()
        torch.testing.assert_close(c.float() / K ** 0.5, ref, atol=1e-2, rtol=1e-2)


@pytest.mark.gpu
def test_launches_on_two_streams_at_once_keep_their_sums_apart():
    """Two launches of one stream-K kernel running at the same time on two streams: each stream has its own
    workspace, so neither adds the other's partial sums (with one shared workspace they would mix)."""
    torch = _torch()
    import tilex
    from tilex.ir.intrin import STREAMK_WORKSPACE_FUNC

    M, N, K = 4096, 4096, 4096
    kernel = tilex.compile(matmul(M, N, K, 128, 256, 64, 3, 256, swizzle=16, stage_c=True), pass_configs=SK)
    assert "streamk_fixup" in kernel.get_kernel_source()
    streams = [torch.cuda.Stream(), torch.cuda.Stream()]
    ins = [(torch.randn(M, K, device="cuda", dtype=torch.float16), torch.randn(K, N, device="cuda",
                                                                                 dtype=torch.float16))
           for _ in streams]
    outs = [torch.empty(M, N, device="cuda", dtype=torch.float16) for _ in streams]
    torch.cuda.synchronize()
    for _ in range(20):
        for s, (a, b), c in zip(streams, ins, outs):
            with torch.cuda.stream(s):
                kernel(a, b, c)
    torch.cuda.synchronize()
    for (a, b), c in zip(ins, outs):
        ref = (a.float() @ b.float()) / K ** 0.5
        torch.testing.assert_close(c.float() / K ** 0.5, ref, atol=1e-2, rtol=1e-2)
    # the workspace of each stream: its own, and the same one call after call
    import tvm_ffi

    ask = tvm_ffi.get_global_func(STREAMK_WORKSPACE_FUNC)
    pointers = []
    for s in streams + streams:
        with torch.cuda.stream(s), tvm_ffi.use_torch_stream():
            pointers.append(int(getattr(ask(1 << 20), "value", None) or 0))
    assert pointers[0] != pointers[1] and pointers[:2] == pointers[2:] and 0 not in pointers


@pytest.mark.gpu
def test_stream_k_kernel_in_a_cuda_graph():
    """A stream-K kernel captured in a CUDA graph and replayed: the capture stream gets its own workspace, and the
    replays (each leaving the flags at zero) stay right."""
    torch = _torch()
    import tilex

    M, N, K = 4096, 4096, 4096
    kernel = tilex.compile(matmul(M, N, K, 128, 256, 64, 3, 256, swizzle=16, stage_c=True), pass_configs=SK)
    a = torch.randn(M, K, device="cuda", dtype=torch.float16)
    b = torch.randn(K, N, device="cuda", dtype=torch.float16)
    c = torch.empty(M, N, device="cuda", dtype=torch.float16)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm up on the side stream, as torch asks before capturing
        kernel(a, b, c)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        kernel(a, b, c)
    for _ in range(3):
        a.copy_(torch.randn_like(a))
        c.zero_()
        graph.replay()
        torch.cuda.synchronize()
        ref = (a.float() @ b.float()) / K ** 0.5
        torch.testing.assert_close(c.float() / K ** 0.5, ref, atol=1e-2, rtol=1e-2)


@pytest.mark.gpu
def test_kernels_of_different_shapes_take_turns_on_one_workspace():
    """Stream-K kernels whose blocks hold different accumulators (128x256 tiles of 256 threads; the transposed
    16-column tiles of a skinny GEMM, 128 threads, all of whose tiles are shared) run in turn on one stream and
    so on one workspace: each finds the flags where every kernel keeps them, zero, whatever partial sums the
    other left."""
    torch = _torch()
    import tilex

    shapes = [((4096, 4096, 4096), dict(swizzle=16, stage_c=True), SK), ((5, 4096, 2048), {}, {"tilex.stream_k": 1})]
    runs = []
    for (M, N, K), kw, pc in shapes:
        kernel = tilex.compile(matmul(M, N, K, 128, 256, 64, 3, 256, **kw), pass_configs=pc)
        assert "streamk_fixup" in kernel.get_kernel_source()
        a = torch.randn(M, K, device="cuda", dtype=torch.float16)
        b = torch.randn(K, N, device="cuda", dtype=torch.float16)
        runs.append((kernel, a, b, torch.empty(M, N, device="cuda", dtype=torch.float16), K))
    for _ in range(3):
        for kernel, a, b, c, K in runs:
            c.fill_(float("nan"))
            kernel(a, b, c)
            torch.cuda.synchronize()
            ref = (a.float() @ b.float()) / K ** 0.5
            torch.testing.assert_close(c.float() / K ** 0.5, ref, atol=1e-2, rtol=1e-2)
