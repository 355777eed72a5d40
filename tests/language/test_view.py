"""T.view: the same bytes as another buffer with a new shape and dtype (CPU: parsing, errors, generated CUDA)."""
import pytest

import tilex
import tilex.language as T


def _bytes_as_words(n=1024):
    @T.prim_func
    def main(A: T.Tensor((n,), "uint8"), B: T.Tensor((n // 4,), "uint32")):
        with T.Kernel(1, threads=128) as bx:
            T.copy(T.view(A, dtype="uint32"), B)

    return main


def test_global_bytes_read_as_words():
    src = tilex.compile(_bytes_as_words(), target="sm_90a").get_kernel_source()
    assert "*(uint4*)(((uint*)A_ptr) + (((int)threadIdx.x) * 4))" in src


def _sign_flip(word="uint32"):
    """B = the bits of A (64 x 128 float16) as 32-bit words, with both halves' sign bits flipped."""
    flip = T.uint32(0x80008000) if word == "uint32" else T.int32(-2147450880)  # 0x80008000 in either type

    @T.prim_func
    def main(A: T.Tensor((64, 128), "float16"), B: T.Tensor((64, 64), word)):
        with T.Kernel(1, threads=128) as bx:
            words = T.view(A, (64, 64), word)
            for i, j in T.Parallel(64, 64):
                B[i, j] = words[i, j] ^ flip

    return main


def test_two_dim_view_with_explicit_shape_in_a_parallel_loop():
    src = tilex.compile(_sign_flip(), target="sm_90a").get_kernel_source()
    assert "((uint*)A_ptr)" in src


def test_local_buffer_view():
    @T.prim_func
    def main(A: T.Tensor((128, 8), "float16"), B: T.Tensor((128, 4), "uint32")):
        with T.Kernel(1, threads=128) as bx:
            r = T.alloc_local((8,), "float16")
            for v in T.serial(8):
                r[v] = A[bx * 0 + T.get_thread_binding(), v]
            w = T.view(r, dtype="uint32")
            for v in T.serial(4):
                B[T.get_thread_binding(), v] = w[v]

    assert "uint" in tilex.compile(main, target="sm_90a").get_kernel_source()


def test_view_must_cover_the_same_bytes():
    with pytest.raises(ValueError, match="would cover"):
        @T.prim_func
        def bad(A: T.Tensor((64,), "uint8"), B: T.Tensor((32,), "uint32")):
            with T.Kernel(1, threads=128) as bx:
                T.copy(T.view(A, (32,), "uint32"), B)


def test_last_dimension_must_divide():
    with pytest.raises(ValueError, match="not a whole number"):
        @T.prim_func
        def bad(A: T.Tensor((6,), "uint8"), B: T.Tensor((1,), "uint32")):
            with T.Kernel(1, threads=128) as bx:
                T.copy(T.view(A, dtype="uint32"), B)


def test_shared_tiles_and_fragments_are_refused():
    with pytest.raises(NotImplementedError, match="only global tensors"):
        @T.prim_func
        def bad(A: T.Tensor((64, 64), "float16"), B: T.Tensor((64, 32), "uint32")):
            with T.Kernel(1, threads=128) as bx:
                s = T.alloc_shared((64, 64), "float16")
                T.copy(A, s)
                T.copy(T.view(s, dtype="uint32"), B)
