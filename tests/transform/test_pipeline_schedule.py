"""Explicit T.Pipelined(order=, stage=) schedules on the CPU: the pipelined IR, the checks, nvcc builds."""
import re
import shutil
import warnings

import pytest
import tvm

import pipeline_schedule_kernels as K

import tilex.language as T
from tilex.ir.names import ASYNC_MMA_CP_ASYNC, ASYNC_MMA_CP_ASYNC_SYNC, ASYNC_MMA_WS, ASYNC_MMA_WS_DEFER
from tilex import config
from tilex.engine import build, lower_to_tir
from tilex.kernels.gemm import matmul
from tilex.op.base import TileOpError
from tilex.language.canonicalize import canonicalize
from tilex.transform.pipeline.inject import inject_pipeline

SM90 = tvm.target.Target({"kind": "cuda", "arch": "sm_90a"})
SM80 = tvm.target.Target({"kind": "cuda", "arch": "sm_80"})
NO_WS = {"disable_warp_specialized": True}


def _pipelined(func, target=SM90, options=None):
    """The tile-level script after InjectSoftwarePipeline."""
    with config.scope(options or {}), target:
        return inject_pipeline(canonicalize(func), target).script()


def _split(script):
    """(prologue, steady-state loop body) of the (single) pipelined loop: the lines between the accumulator fill
    and ``for k``, and the lines inside it."""
    lines = script.splitlines()
    start = next(i for i, s in enumerate(lines) if "tilex_fill" in s) + 1
    loop = next(i for i, s in enumerate(lines) if s.strip().startswith("for k in"))
    indent = len(lines[loop]) - len(lines[loop].lstrip())
    end = next((i for i in range(loop + 1, len(lines)) if len(lines[i]) - len(lines[i].lstrip()) <= indent),
               len(lines))
    return lines[start:loop], lines[loop + 1:end]


def _events(lines):
    """The statements of a pipeline section as short tokens, in order."""
    out, in_flight = [], False
    for s in lines:
        lhs = s.split(" = ")[0]
        if "tilex.async_mma" in s:
            in_flight = True
        elif "tilex_copy" in s:
            out.append("copy " + re.findall(r"tilex_region\((\w+)\[", s)[1])
        elif "tilex_gemm" in s:
            out.append("gemm async" if in_flight else "gemm")
            in_flight = False
        elif " = " in s and ("B2_s[" in lhs or "B_s[" in lhs):
            out.append("scale")
        elif "cp_async_wait" in s:
            out.append(re.search(r"cp_async_wait<\d+>", s).group(0))
        elif "cp_async_commit" in s:
            out.append("commit")
        elif "tvm_storage_sync" in s:
            out.append("sync")
    return out


def _stages_of(script, name):
    """How many stage buffers the 2-d tile `name` has (1: not multi-buffered)."""
    shape = re.search(rf"{name} = T.alloc_buffer\(\(([\d, ]+)\)", script).group(1).split(",")
    return int(shape[0]) if len(shape) == 3 else 1


# ---- the schedule tilex derives, written out -----------------------------------------------------------------------

@pytest.mark.parametrize("stages", [2, 3, 4])
@pytest.mark.parametrize("options", [{}, NO_WS], ids=["sm90", "no_ws"])
def test_explicit_derived_schedule_builds_what_the_default_builds(stages, options):
    explicit = K.gemm(1024, 1024, 1024, stage=(0, 0, stages - 1), num_stages=stages)
    derived = matmul(1024, 1024, 1024, num_stages=stages)
    assert _pipelined(explicit, SM90, options) == _pipelined(derived, SM90, options)
    assert _pipelined(explicit, SM80) == _pipelined(derived, SM80)
    # num_stages may be left out: the stages say it
    assert _pipelined(K.gemm(1024, 1024, 1024, stage=(0, 0, stages - 1)), SM90, options) == \
        _pipelined(derived, SM90, options)


def test_explicit_derived_schedule_keeps_warp_specialization():
    script = _pipelined(K.gemm(1024, 1024, 1024, stage=(0, 0, 2), bk=64))
    assert "tilex.ws_producer" in script and "tilex_tma_load" in script


def test_valid_explicit_schedule_does_not_warn():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        T.Pipelined(8, num_stages=3, order=[0, 1, 2], stage=[0, 1, 2])
        _pipelined(K.gemm(256, 256, 256, stage=(0, 1, 2)))


# ---- other schedules: IR structure ---------------------------------------------------------------------------------

def test_b_loaded_one_stage_later():
    """A at stage 0, B at stage 1, gemm at stage 2: A gets 3 buffers, B 2; B is needed sooner, so it is committed
    first and the wait leaves the newer A group in flight."""
    script = _pipelined(K.gemm(1024, 1024, 1024, stage=(0, 1, 2)))
    assert _stages_of(script, "A_s") == 3 and _stages_of(script, "B_s") == 2
    assert "tilex.ws_producer" not in script  # not the derived schedule: cp.async in every thread
    prologue, body = _split(script)
    # slot 0: A of iteration 0 (B's group empty); slot 1: B of 0, A of 1
    assert _events(prologue) == ["commit", "copy A_s", "commit", "copy B_s", "commit", "copy A_s", "commit"]
    assert _events(body) == ["cp_async_wait<1>", "sync", "copy B_s", "commit", "copy A_s", "commit", "gemm"]
    assert "A_s[(k + 2) % 3" in script and "B_s[(k + 1) % 2" in script and "B_s[k % 2" in script
    assert "if k + 2 < 32:" in script and "if k + 1 < 32:" in script


def test_gemm_first_order_keeps_wgmma_in_flight():
    """With the gemm first in the slot, the refills after it only overwrite what the previous gemm read."""
    script = _pipelined(K.gemm(1024, 1024, 1024, stage=(0, 1, 2), order=(1, 2, 0)))
    _, body = _split(script)
    assert _events(body) == ["cp_async_wait<1>", "sync", "gemm async", "copy B_s", "commit", "copy A_s", "commit"]
    assert "tilex::wgmma_wait<0>" in script
    # copies first: the refill of A would race the previous, still running wgmma
    _, body = _split(_pipelined(K.gemm(1024, 1024, 1024, stage=(0, 1, 2))))
    assert "gemm async" not in _events(body)


def test_operand_with_the_gemm_stage_waits_inside_the_slot():
    """B at the gemm's stage: its copy and the gemm share a slot, so a wait + barrier sits between them."""
    script = _pipelined(K.gemm(1024, 1024, 1024, stage=(0, 1, 1)))
    assert _stages_of(script, "A_s") == 2 and _stages_of(script, "B_s") == 1
    _, body = _split(script)
    assert _events(body) == ["cp_async_wait<0>", "sync", "copy B_s", "commit", "copy A_s", "commit",
                             "cp_async_wait<1>", "sync", "gemm"]


def test_elementwise_stage_between_copy_and_gemm():
    script = _pipelined(K.gemm_scaled_b(1024, 1024, 1024, stage=(0, 0, 1, 2)))
    assert _stages_of(script, "A_s") == 3 and _stages_of(script, "B_s") == 2 and _stages_of(script, "B2_s") == 2
    prologue, body = _split(script)
    assert _events(prologue) == ["copy B_s", "commit", "copy A_s", "commit", "cp_async_wait<1>", "sync",
                                 "copy B_s", "commit", "copy A_s", "commit", "scale"]
    assert _events(body) == ["cp_async_wait<1>", "sync", "copy B_s", "commit", "copy A_s", "commit", "scale",
                             "gemm"]
    assert "B2_s[(k + 1) % 2, i, j] = B_s[(k + 1) % 2, i, j]" in script
    assert "B2_s[k % 2, 0, 0]" in script  # the gemm reads the scaled tile of iteration k
    # the scale step may run once past the end (it writes a spare version): no guard around it
    assert "if k + 1 < 32:\n            for i" not in script


def test_order_is_honoured_within_a_slot():
    script = _pipelined(K.gemm_scaled_b(1024, 1024, 1024, stage=(0, 0, 1, 2), order=(0, 1, 3, 2)))
    _, body = _split(script)
    assert _events(body) == ["cp_async_wait<1>", "sync", "copy B_s", "commit", "copy A_s", "commit", "gemm",
                             "scale"]


def test_order_alone_uses_the_derived_stages():
    """order= without stage=: copies at stage 0, the gemm at num_stages - 1, in the given order."""
    script = _pipelined(K.gemm(1024, 1024, 1024, stage=None, order=(1, 0, 2), num_stages=3))
    assert _stages_of(script, "A_s") == 3 and _stages_of(script, "B_s") == 3
    prologue, body = _split(script)
    assert _events(prologue) == ["copy B_s", "copy A_s", "commit"] * 2
    assert _events(body) == ["cp_async_wait<1>", "sync", "copy B_s", "copy A_s", "commit", "gemm"]


def test_in_place_elementwise_stage():
    script = _pipelined(K.gemm_scaled_b_inplace(1024, 1024, 1024, stage=(0, 0, 1, 2)))
    assert _stages_of(script, "B_s") == 3  # written at stage 0, rewritten at 1, read at 2
    assert "B_s[(k + 1) % 3, i, j] = B_s[(k + 1) % 3, i, j]" in script


def test_fewer_iterations_than_stages():
    """One k-tile, three stages: prologue statements for iterations that do not exist are dropped."""
    script = _pipelined(K.gemm(128, 128, 32, stage=(0, 1, 2)))
    prologue, _ = _split(script)
    assert _events(prologue) == ["commit", "copy A_s", "commit", "copy B_s", "commit", "commit"]
    assert "T.bool(False)" not in script


def test_symbolic_trip_count_guards_the_prologue():
    @T.prim_func
    def f(A: T.Tensor((128, 256), "float16"), B: T.Tensor((256, 128), "float16"), C: T.Tensor((128, 128), "float16"),
          kt: T.int32):
        with T.Kernel(1, 1, threads=128) as (bx, by):
            A_s = T.alloc_shared((128, 32), "float16")
            B_s = T.alloc_shared((32, 128), "float16")
            C_l = T.alloc_fragment((128, 128), "float32")
            T.clear(C_l)
            for k in T.Pipelined(kt, order=[0, 1, 2], stage=[0, 1, 2]):
                T.copy(A[0, k * 32], A_s)
                T.copy(B[k * 32, 0], B_s)
                T.gemm(A_s, B_s, C_l)
            T.copy(C_l, C[0, 0])

    prologue, body = _split(_pipelined(f))
    # slot 0: A of iteration 0; slot 1: B of iteration 0, A of iteration 1; each only if the iteration exists
    assert [s.strip() for s in prologue if s.strip().startswith("if ")] == ["if 0 < kt:", "if 0 < kt:", "if 1 < kt:"]
    assert "if k + 2 < kt:" in "\n".join(body)


def test_two_loops_share_a_buffer_with_the_larger_count():
    @T.prim_func
    def f(A: T.Tensor((128, 256), "float16"), B: T.Tensor((256, 128), "float16"), C: T.Tensor((128, 128), "float16")):
        with T.Kernel(1, 1, threads=128) as (bx, by):
            A_s = T.alloc_shared((128, 32), "float16")
            B_s = T.alloc_shared((32, 128), "float16")
            C_l = T.alloc_fragment((128, 128), "float32")
            T.clear(C_l)
            for k in T.Pipelined(4, num_stages=2):
                T.copy(A[0, k * 32], A_s)
                T.copy(B[k * 32, 0], B_s)
                T.gemm(A_s, B_s, C_l)
            for k in T.Pipelined(4, order=[0, 1, 2], stage=[0, 0, 3]):
                T.copy(A[0, k * 32 + 128], A_s)
                T.copy(B[k * 32 + 128, 0], B_s)
                T.gemm(A_s, B_s, C_l)
            T.copy(C_l, C[0, 0])

    script = _pipelined(f, SM90, NO_WS)
    assert _stages_of(script, "A_s") == 4 and _stages_of(script, "B_s") == 4
    assert "k % 2" in script and "k % 4" in script


def test_all_stage_zero_reorders_only():
    script = _pipelined(K.gemm_scaled_b(1024, 1024, 1024, stage=(0, 0, 0, 0), order=(1, 0, 2, 3)))
    assert "cp_async" not in script and _stages_of(script, "A_s") == 1
    lines = [s for s in script.splitlines() if "tilex_copy" in s and "A[" in s or "tilex_copy" in s and "B[" in s]
    assert "B[" in lines[0] and "A[" in lines[1]


# ---- the checks ------------------------------------------------------------------------------------------------------

def test_reader_at_an_earlier_stage_than_its_writer_is_an_error():
    with pytest.raises(TileOpError, match=r"statement 2 \(T.gemm.*stage 0\) reads buffer 'B_s', which statement 1 "
                                          r"\(T.copy.*writes earlier in the loop body, but at the later stage 1"):
        _pipelined(K.gemm(1024, 1024, 1024, stage=(0, 1, 0)))


def test_reader_ordered_before_its_writer_in_one_stage_is_an_error():
    with pytest.raises(TileOpError, match=r"order puts statement 3 first in their common stage"):
        _pipelined(K.gemm_scaled_b(1024, 1024, 1024, stage=(0, 0, 1, 1), order=(0, 1, 3, 2)))


def test_statement_count_mismatch_is_an_error():
    with pytest.raises(TileOpError, match=r"stage=\[0, 1\]\) has 2 entries, but the loop body has 3 top-level "
                                          r"statements \(0: T.copy.*; 1: T.copy.*; 2: T.gemm"):
        _pipelined(K.gemm(256, 256, 256, stage=(0, 1), order=(0, 1)))


def test_fragment_across_stages_is_an_error():
    """A register fragment cannot be multi-buffered: written at stage 1 and read at stage 2 is refused."""
    with pytest.raises(TileOpError, match=r"buffer 'A_f' \(local.fragment\) is used by statement 2 .* and by "
                                          r"statement 3"):
        _pipelined(K.gemm_scaled_a_fragment(1024, 1024, 1024, stage=(0, 0, 1, 2)))


def test_frontend_checks_order_and_stage():
    with pytest.raises(ValueError, match="permutation"):
        T.Pipelined(8, order=[0, 0, 1], stage=[0, 0, 1])
    with pytest.raises(ValueError, match="order has 2 entries but stage has 3"):
        T.Pipelined(8, order=[0, 1], stage=[0, 0, 1])
    with pytest.raises(ValueError, match=">= 0"):
        T.Pipelined(8, order=[0, 1], stage=[-1, 0])


# ---- the default path: an in-flight wgmma only where nothing else touches its tiles ---------------------------------

def test_consumer_touching_the_accumulator_keeps_wgmma_synchronous():
    @T.prim_func
    def f(A: T.Tensor((128, 256), "float16"), B: T.Tensor((256, 128), "float16"), C: T.Tensor((128, 128), "float16")):
        with T.Kernel(1, 1, threads=128) as (bx, by):
            A_s = T.alloc_shared((128, 32), "float16")
            B_s = T.alloc_shared((32, 128), "float16")
            C_l = T.alloc_fragment((128, 128), "float32")
            T.clear(C_l)
            for k in T.Pipelined(8, num_stages=3):
                T.copy(A[0, k * 32], A_s)
                T.copy(B[k * 32, 0], B_s)
                T.gemm(A_s, B_s, C_l)
                for i, j in T.Parallel(128, 128):
                    C_l[i, j] = C_l[i, j] * 0.5
            T.copy(C_l, C[0, 0])

    # warp-specialized, the consumers issue their MMAs (ASYNC_MMA_WS_DEFER) and complete them before scaling C
    # (a wgmma wait right after); on cp.async the gemm completes before the next statement, without a barrier of its
    # own (ASYNC_MMA_CP_ASYNC_SYNC: its tiles are the landed stages)
    script = _pipelined(f, SM90, {})
    assert "tilex.ws_producer" in script
    assert f'"tilex.async_mma", {ASYNC_MMA_WS_DEFER}' in script and f'"tilex.async_mma", {ASYNC_MMA_WS})' not in script
    issued = script.index(f'"tilex.async_mma", {ASYNC_MMA_WS_DEFER}')
    assert issued < script.index("wgmma_wait", issued) < script.index("0.5", issued)
    script = _pipelined(f, SM90, NO_WS)
    assert "tilex.ws_producer" not in script
    assert f'"tilex.async_mma", {ASYNC_MMA_CP_ASYNC_SYNC})' in script
    assert f'"tilex.async_mma", {ASYNC_MMA_CP_ASYNC})' not in script
    assert "tilex.async_mma" in _pipelined(matmul(1024, 1024, 1024), SM90, NO_WS)


def test_reading_the_accumulator_through_a_view_keeps_wgmma_synchronous():
    """A T.view of the accumulator is the accumulator: a consumer reading it waits for the MMA."""
    @T.prim_func
    def f(A: T.Tensor((128, 256), "float16"), B: T.Tensor((256, 128), "float16"), C: T.Tensor((128, 128), "int32")):
        with T.Kernel(1, 1, threads=128) as (bx, by):
            A_s = T.alloc_shared((128, 32), "float16")
            B_s = T.alloc_shared((32, 128), "float16")
            C_l = T.alloc_fragment((128, 128), "float32")
            D_l = T.alloc_fragment((128, 128), "int32")
            T.clear(C_l)
            for k in T.Pipelined(8, num_stages=3):
                T.copy(A[0, k * 32], A_s)
                T.copy(B[k * 32, 0], B_s)
                T.gemm(A_s, B_s, C_l)
                bits = T.view(C_l, dtype="int32")
                for i, j in T.Parallel(128, 128):
                    D_l[i, j] = bits[i, j]
            T.copy(D_l, C[0, 0])

    script = _pipelined(f, SM90, NO_WS)
    assert f'"tilex.async_mma", {ASYNC_MMA_CP_ASYNC})' not in script


# ---- nvcc ------------------------------------------------------------------------------------------------------------

NVCC_CASES = {
    "b_one_later": lambda: K.gemm(1000, 1000, 1000, stage=(0, 1, 2)),
    "gemm_first": lambda: K.gemm(1000, 1000, 1000, stage=(0, 1, 2), order=(1, 2, 0)),
    "b_with_gemm": lambda: K.gemm(1000, 1000, 1000, stage=(0, 1, 1)),
    "scale_stage": lambda: K.gemm_scaled_b(1000, 1000, 1000, stage=(0, 0, 1, 2)),
    "scale_in_place": lambda: K.gemm_scaled_b_inplace(1000, 1000, 1000, stage=(0, 0, 1, 2)),
    "scale_a_fragment": lambda: K.gemm_scaled_a_fragment(1000, 1000, 1000, stage=(0, 0, 1, 1)),
    "one_tile": lambda: K.gemm(128, 128, 32, stage=(0, 1, 2)),
}


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
@pytest.mark.parametrize("arch,configs", [("sm_90a", None), ("sm_90a", {"tilex.disable_wgmma": True}),
                                          ("sm_80", None)], ids=["sm90", "sm90_mma", "sm80"])
@pytest.mark.parametrize("case", list(NVCC_CASES))
def test_explicit_schedule_compiles_with_nvcc(case, arch, configs):
    from tilex.engine.nvcc import compile_cuda

    src = build(NVCC_CASES[case](), tvm.target.Target({"kind": "cuda", "arch": arch}),
                configs).mod.imports[0].inspect_source()
    # scale_a_fragment's schedule is the derived one (copies at 0, the rest at 1): warp-specialized on sm90 wgmma
    derived_on_sm90 = case == "scale_a_fragment" and arch == "sm_90a" and configs is None
    assert ("tilex::tma_load" if derived_on_sm90 else "tilex::cp_async") in src
    assert len(compile_cuda(src, arch)) > 1000


def test_explicit_schedule_lowers_for_two_warpgroups():
    func = lower_to_tir(K.gemm(1024, 1024, 1024, stage=(0, 1, 2), order=(1, 2, 0), bn=256, bk=64, threads=256),
                        SM90)["main"]
    script = func.script()
    assert 'T.launch_thread("threadIdx.x", 256)' in script and "tilex::wgmma_wait<1>" in script
