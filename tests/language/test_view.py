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


def test_shared_tiles_are_refused():
    with pytest.raises(NotImplementedError, match="only global tensors"):
        @T.prim_func
        def bad(A: T.Tensor((64, 64), "float16"), B: T.Tensor((64, 32), "uint32")):
            with T.Kernel(1, threads=128) as bx:
                s = T.alloc_shared((64, 64), "float16")
                T.copy(A, s)
                T.copy(T.view(s, dtype="uint32"), B)


def _fragment_sign_flip():
    """B = A's fragment read as words (pairs of halves), both sign bits flipped."""
    @T.prim_func
    def main(A: T.Tensor((64, 32), "float16"), B: T.Tensor((64, 16), "int32")):
        with T.Kernel(1, threads=128) as bx:
            F = T.alloc_fragment((64, 32), "float16")
            T.copy(A, F)
            W = T.view(F, dtype="int32")
            for i, j in T.Parallel(64, 16):
                B[i, j] = W[i, j] ^ T.int32(-2147450880)

    return main


def test_fragment_read_as_words():
    src = tilex.compile(_fragment_sign_flip(), target="sm_90a").get_kernel_source()
    assert "((int*)F_ptr)" in src  # the view is the fragment's own registers


def _words_into_mma_operand(M=16, N=64, K=256, bk=64):
    """Y = X @ B^T where B (N, K) float16 arrives as its bits (N, K // 2) int32, written into the gemm's register
    operand through a word view of it, in a pipelined loop."""
    @T.prim_func
    def main(X: T.Tensor((M, K), "float16"), Bw: T.Tensor((N, K // 2), "int32"), Y: T.Tensor((M, N), "float16")):
        with T.Kernel(1, threads=128) as bx:
            X_s = T.alloc_shared((M, bk), "float16")
            Bw_s = T.alloc_shared((N, bk // 2), "int32")
            W_f = T.alloc_fragment((N, bk), "float16")
            C = T.alloc_fragment((N, M), "float32")
            T.clear(C)
            for k in T.Pipelined(K // bk, num_stages=2):
                T.copy(X[0, k * bk], X_s)
                T.copy(Bw[0, k * bk // 2], Bw_s)
                words = T.view(W_f, dtype="int32")
                for i, j in T.Parallel(N, bk // 2):
                    words[i, j] = Bw_s[i, j]
                T.gemm(W_f, X_s, C, transpose_B=True)
            for i, j in T.Parallel(N, M):
                Y[j, i] = T.cast(C[i, j], "float16")

    return main


def test_words_written_into_the_mma_operand():
    src = tilex.compile(_words_into_mma_operand(), out_idx=-1, target="sm_90a").get_kernel_source()
    assert "((int*)W_f_ptr)" in src and "_rs_" in src  # the view writes the wgmma's A registers
    # the registers are rewritten each iteration: the MMA reading them is complete before that
    assert "wgmma_wait<1>" not in src


def test_fragment_view_keeps_leading_dimensions():
    with pytest.raises(ValueError, match="keeps every dimension but the last"):
        @T.prim_func
        def bad(A: T.Tensor((64, 32), "float16"), B: T.Tensor((32, 32), "int32")):
            with T.Kernel(1, threads=128) as bx:
                F = T.alloc_fragment((64, 32), "float16")
                T.copy(A, F)
                T.copy(T.view(F, (32, 32), "int32"), B)


def test_merged_elements_must_be_consecutive_registers():
    """A wgmma A fragment holds k, k+1 together but k + 2 elsewhere: four halves are not one 64-bit register."""
    @T.prim_func
    def main(X: T.Tensor((16, 64), "float16"), B: T.Tensor((64, 16), "uint64"), Y: T.Tensor((16, 64), "float16")):
        with T.Kernel(1, threads=128) as bx:
            X_s = T.alloc_shared((16, 64), "float16")
            W_f = T.alloc_fragment((64, 64), "float16")
            C = T.alloc_fragment((64, 16), "float32")
            T.copy(X, X_s)
            quads = T.view(W_f, dtype="uint64")
            for i, j in T.Parallel(64, 16):
                quads[i, j] = B[i, j]
            T.gemm(W_f, X_s, C, transpose_B=True, clear_accum=True)
            for i, j in T.Parallel(64, 16):
                Y[j, i] = T.cast(C[i, j], "float16")

    with pytest.raises(tilex.TileOpError, match="not 4 consecutive registers of one thread"):
        tilex.compile(main, out_idx=-1, target="sm_90a")
