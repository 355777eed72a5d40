"""Semantics TileLang programs rely on: a fragment read by element outside tile operators (every thread holds it
whole), and comparisons between int32 and int64 values (the narrower one is widened)."""
import tilex
import tilex.language as T


def _masked_accumulate():
    @T.prim_func
    def masked(A: T.Tensor((128, 64), "float32"), M: T.Tensor((8,), "int32"), B: T.Tensor((128, 64), "float32")):
        with T.Kernel(1, threads=128) as bx:
            mask = T.alloc_fragment((8,), "int32")
            acc = T.alloc_fragment((128, 64), "float32")
            T.copy(M, mask)
            T.clear(acc)
            for k in T.serial(8):
                if mask[k] != 0:
                    for i, j in T.Parallel(128, 64):
                        acc[i, j] += A[i, j]
            T.copy(acc, B)

    return masked


def test_a_fragment_read_in_a_serial_loop_is_held_whole_by_every_thread():
    src = tilex.compile(_masked_accumulate(), target="sm_90a").get_kernel_source()
    assert "int mask_ptr[8];" in src  # all 8 values in every thread
    assert "if (mask_ptr[k] != 0)" in src


def test_a_loose_fragment_keeps_an_annotated_layout():
    from tilex.layout import Fragment

    @T.prim_func
    def pinned(M: T.Tensor((8,), "int32"), B: T.Tensor((8,), "int32")):
        with T.Kernel(1, threads=128) as bx:
            mask = T.alloc_fragment((8,), "int32")
            T.annotate_layout({mask: Fragment.fully_replicated([8], 128)})
            T.copy(M, mask)
            if T.get_thread_binding() == 0:
                for k in T.serial(8):
                    B[k] = mask[k] * 2

    src = tilex.compile(pinned, target="sm_90a").get_kernel_source()
    assert "mask_ptr[8]" in src


def test_int32_and_int64_compare():
    @T.prim_func
    def guarded(A: T.Tensor((1024,), "float32"), n: T.int64, B: T.Tensor((1024,), "float32")):
        with T.Kernel(8, threads=128) as bx:
            for i in T.Parallel(128):
                if bx * 128 + i < n:
                    B[bx * 128 + i] = A[bx * 128 + i]
                if n >= T.int32(bx):
                    B[bx] = 0.0

    src = tilex.compile(guarded, target="sm_90a").get_kernel_source()
    assert "< n)" in src and "(int64_t)" in src


def test_a_mask_the_analyzer_cannot_bound_is_kept_per_element():
    """A T.Parallel select whose condition has no finite bound over the tile (it reads a kernel argument) is not
    split into whole-tile cases: the analyzer's symbolic infinities once reached the program as unbound variables
    (neg_inf, pos_inf)."""

    @T.prim_func
    def masked(S: T.Tensor((64, 64), "float32"), shift: T.int32, O: T.Tensor((64, 64), "float32")):
        with T.Kernel(1, threads=128) as bx:
            acc = T.alloc_fragment((64, 64), "float32")
            for i, j in T.Parallel(64, 64):
                allowed = T.if_then_else(i // 16 >= j // 16 + shift, 1, 0)
                acc[i, j] = T.if_then_else(allowed > 0, S[i, j], -1.0e6)
            T.copy(acc, O)

    src = tilex.compile(masked, target="sm_90a").get_kernel_source()
    assert "neg_inf" not in src and "pos_inf" not in src and "shift" in src
