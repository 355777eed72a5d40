"""Layout conflicts settled by the compiler: a fragment staged through shared memory before pipelining
(StageThroughShared) or converted around one operator (LayoutInference with layout_conversion), each said in a
LayoutConversionWarning; conflicts on shared tiles still raise."""
import warnings

import pytest

import tilex
import tilex.language as T
from programs import example
from tilex.ir.names import LAYOUT_CONVERSIONS_ATTR
from tilex.op.base import LayoutConflictError
from tilex.transform.layout_inference import layout_inference
from tilex.transform.pipeline.inject import inject_pipeline

SM90 = "sm_90a"
conflicts = example("layout_conflicts")


def compiled_with_notes(prog, **kw):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", tilex.LayoutConversionWarning)
        k = tilex.compile(prog, target=SM90, cache=False, **kw)  # a kernel from the cache is not compiled: no notes
    return k, [str(w.message) for w in caught if w.category is tilex.LayoutConversionWarning]


@pytest.mark.parametrize("name,args,fragment", [
    ("register_transpose", (256, 256), "A_f"),
    ("split_probabilities", (256, 256), "P"),
    ("int4_gemm", (256, 256, 256), "Wq_f"),
])
def test_staging_tiles_of_the_example_programs_go_through_shared_memory(name, args, fragment):
    k, notes = compiled_with_notes(conflicts[name](*args))
    assert len(notes) == 1 and f"fragment '{fragment}'" in notes[0] and "staged through shared memory" in notes[0]
    # the fragment is a shared tile now: the bank-conflict model sees its loads
    assert fragment in k.bank_conflicts()


def test_the_note_points_at_the_operator_in_conflict():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", tilex.LayoutConversionWarning)
        tilex.compile(conflicts["register_transpose"](256, 256), target=SM90, cache=False)
    (w,) = [w for w in caught if w.category is tilex.LayoutConversionWarning]
    assert w.filename.endswith("layout_conflicts.py")
    assert "T.Parallel" in open(w.filename).read().splitlines()[w.lineno - 1]


def two_policies(M=128, N=128, K=32):
    @T.prim_func
    def f(A: T.Tensor((M, K), "float16"), B: T.Tensor((K, N), "float16"), C: T.Tensor((M, N), "float32")):
        with T.Kernel(1, threads=128) as bx:
            A_s = T.alloc_shared((M, K), "float16")
            B_s = T.alloc_shared((K, N), "float16")
            C_l = T.alloc_fragment((M, N), "float32")
            T.copy(A[0, 0], A_s)
            T.copy(B[0, 0], B_s)
            T.gemm(A_s, B_s, C_l, clear_accum=True)
            T.gemm(A_s, B_s, C_l, policy=T.GemmWarpPolicy.FullRow)
            T.copy(C_l, C[0, 0])

    return f


def mislaid_reduction():
    @T.prim_func
    def f(X: T.Tensor((64, 128), "float32"), X2: T.Tensor((64, 1024), "float32"), Z: T.Tensor((64,), "float32")):
        with T.Kernel(1, threads=128) as bx:
            x = T.alloc_fragment((64, 128), "float32")
            x2 = T.alloc_fragment((64, 1024), "float32")
            y = T.alloc_fragment((64,), "float32")
            T.copy(X[0, 0], x)
            T.copy(X2[0, 0], x2)
            T.reduce_sum(x, y, dim=1)  # y: rows spread over groups of 32 threads
            T.reduce_max(x2, y, dim=1, clear=False)  # but x2's rows span all 128 threads
            T.copy(y, Z[0])

    return f


def test_an_accumulator_two_gemms_lay_out_differently_is_converted_around_the_second():
    """On mma.sync (sm_80) C_l is the first gemm's accumulator over 2 x 2 warps; the second (FullRow, 4 x 1)
    accumulates into it under another layout: it works on a copy, converted in before and out after, through
    shared memory (rows change threads)."""
    out = layout_inference(inject_pipeline(two_policies()), tilex.env.resolve_target("sm_80"))
    (note,) = list(out.attrs[LAYOUT_CONVERSIONS_ATTR])
    assert "fragment 'C_l'" in note and "before and after" in note and "'C_l_exchange'" in note
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", tilex.LayoutConversionWarning)
        tilex.compile(two_policies(), target="sm_80", cache=False)
    assert [str(w.message) for w in caught if w.category is tilex.LayoutConversionWarning] == [note]


def test_a_reduction_into_a_mislaid_result_is_converted():
    _, notes = compiled_with_notes(mislaid_reduction())
    assert len(notes) == 1 and "fragment 'y'" in notes[0] and "T.reduce" in notes[0]


def test_a_copy_between_fragments_of_one_thread_moves_registers():
    """Two layouts that keep every element in its thread (registers in another order): the copy moves registers,
    no conversion, no note."""
    @T.prim_func
    def f(A: T.Tensor((32, 8), "float32"), B: T.Tensor((32, 8), "float32")):
        with T.Kernel(1, threads=32) as bx:
            a = T.alloc_fragment((32, 8), "float32")
            b = T.alloc_fragment((32, 8), "float32")
            T.annotate_layout({a: T.Fragment((32, 8), forward_thread_fn=lambda i, j: i,
                                             forward_index_fn=lambda i, j: j),
                               b: T.Fragment((32, 8), forward_thread_fn=lambda i, j: i,
                                             forward_index_fn=lambda i, j: 7 - j)})
            T.copy(A[0, 0], a)
            T.copy(a, b)
            T.copy(b, B[0, 0])

    k, notes = compiled_with_notes(f)
    assert notes == [] and "__shared__" not in k.get_kernel_source()


def test_a_conflict_on_a_shared_tile_still_raises():
    @T.prim_func
    def f(A: T.Tensor((64, 64), "float16"), B: T.Tensor((64, 64), "float16"), C: T.Tensor((64, 64), "float32")):
        with T.Kernel(1, threads=128) as bx:
            A_s = T.alloc_shared((64, 64), "float16")
            B_s = T.alloc_shared((64, 64), "float16")
            C_l = T.alloc_fragment((64, 64), "float32")
            T.annotate_layout({A_s: T.Layout((64, 64), lambda i, j: [j, i])})
            T.copy(A[0, 0], A_s)
            T.copy(B[0, 0], B_s)
            T.gemm(A_s, B_s, C_l, clear_accum=True)
            T.copy(C_l, C[0, 0])

    with pytest.raises(LayoutConflictError, match="A_s.*T.annotate_layout.*T.gemm"):
        tilex.compile(f, target=SM90)
