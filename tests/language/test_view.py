"""T.view: the same bytes as another buffer with a new shape and dtype (CPU: parsing, errors, generated CUDA)."""
import numpy as np
import pytest

import tilex
import tilex.language as T
from tilex.layout import Layout, LayoutError, make_swizzled_layout
from tilex.op.view import reinterpret_layout


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


# ---- shared tiles ---------------------------------------------------------------------------------------------------
def _bytes_of(layout, shape, bits):
    """The shared memory of a tile of `shape` x `bits`-bit elements laid out by `layout` (None: row-major) whose
    element with row-major number f holds f: one byte array, and the tile's logical (row-major) bytes."""
    n = int(np.prod(shape))
    width = bits // 8
    logical = np.arange(n, dtype=np.int64)
    logical_bytes = ((logical[:, None] >> (8 * np.arange(width))) & 0xFF).astype(np.uint8)  # little endian
    if layout is None:
        return logical_bytes.reshape(-1), logical_bytes.reshape(-1)
    offs = [np.asarray(o) for o in layout.map_numpy(*[g.reshape(-1) for g in np.indices(shape)])]
    phys = np.zeros(n, dtype=np.int64)
    for o, e in zip(offs, layout.output_shape):
        phys = phys * int(e) + o
    mem = np.zeros(int(np.prod(layout.output_shape)) * width, dtype=np.uint8)
    for k in range(width):
        mem[phys * width + k] = logical_bytes[:, k]
    return mem, logical_bytes.reshape(-1)


@pytest.mark.parametrize("to_shape, to_bits", [((32, 32), 32), ((16, 64), 32), ((32, 128), 8), ((64, 32), 16),
                                               ((8, 64), 64)])
def test_shared_view_layout_reads_the_same_bytes(to_shape, to_bits):
    """Each view element's bytes, where the derived layout puts it, are the bytes at its row-major position."""
    base_shape, base_bits = (32, 64), 16
    base = make_swizzled_layout(32, 64, 16)
    view = reinterpret_layout(base, base_shape, base_bits, to_shape, to_bits)
    mem, logical = _bytes_of(base, base_shape, base_bits)
    offs = np.asarray(view.map_numpy(*[g.reshape(-1) for g in np.indices(to_shape)])[0])
    width = to_bits // 8
    got = mem[(offs[:, None] * width + np.arange(width)).reshape(-1)]
    assert np.array_equal(got, logical)


def test_row_major_tile_has_row_major_views():
    assert reinterpret_layout(None, (32, 64), 16, (32, 32), 32) is None


def test_merged_elements_must_lie_side_by_side():
    transposed = Layout((8, 8), lambda i, j: [j, i])
    with pytest.raises(LayoutError, match="together"):
        reinterpret_layout(transposed, (8, 8), 16, (8, 4), 32)
    reinterpret_layout(transposed, (8, 8), 16, (8, 16), 8)  # split elements always have a place


def _gemm_operand_as_words(M=32, N=64):
    """A (M, N) bfloat16 loaded into a gemm's (swizzled) operand tile, read back as float32 words through a
    T.view; C = the gemm's result."""
    @T.prim_func
    def main(A: T.Tensor((M, N), "bfloat16"), B: T.Tensor((N, N), "bfloat16"), W: T.Tensor((M, N // 2), "float32"),
             C: T.Tensor((M, N), "float32")):
        with T.Kernel(1, threads=128) as bx:
            a_s = T.alloc_shared((M, N), "bfloat16")
            b_s = T.alloc_shared((N, N), "bfloat16")
            acc = T.alloc_fragment((M, N), "float32")
            words = T.view(a_s, dtype="float32")
            T.copy(A, a_s)
            T.copy(B, b_s)
            T.gemm(a_s, b_s, acc, clear_accum=True)
            for i, j in T.Parallel(M, N // 2):
                W[i, j] = words[i, j]
            T.copy(acc, C)

    return main


def _words_through_a_view(M=32, N=64):
    """O (M, N) bfloat16 = the bytes of X (M // 2, N) float32 written into a swizzled gemm operand through a
    reshaping T.view of it (C = that operand @ B, so the tile is swizzled)."""
    @T.prim_func
    def main(X: T.Tensor((M // 2, N), "float32"), B: T.Tensor((N, N), "bfloat16"), O: T.Tensor((M, N), "bfloat16"),
             C: T.Tensor((M, N), "float32")):
        with T.Kernel(1, threads=128) as bx:
            a_s = T.alloc_shared((M, N), "bfloat16")
            b_s = T.alloc_shared((N, N), "bfloat16")
            acc = T.alloc_fragment((M, N), "float32")
            words = T.view(a_s, (M // 2, N), "float32")
            for i, j in T.Parallel(M // 2, N):
                words[i, j] = X[i, j]
            T.copy(B, b_s)
            T.gemm(a_s, b_s, acc, clear_accum=True)
            T.copy(a_s, O)
            T.copy(acc, C)

    return main


def test_shared_view_of_a_swizzled_operand_compiles():
    for prog in (_gemm_operand_as_words(), _words_through_a_view()):
        src = tilex.compile(prog, target="sm_90a").get_kernel_source()
        assert "((float*)" in src  # the view addresses the tile's own shared memory as float32


def test_shared_reshape():
    @T.prim_func
    def main(A: T.Tensor((64, 64), "float16"), B: T.Tensor((16, 256), "float16")):
        with T.Kernel(1, threads=128) as bx:
            s = T.alloc_shared((64, 64), "float16")
            T.copy(A, s)
            T.copy(T.reshape(s, (16, 256)), B)

    tilex.compile(main, target="sm_90a")


def test_pipelined_tile_with_a_view_runs_serially():
    """A view reads its tile's single-buffered form: the loop is not multi-buffered (it stays correct)."""
    @T.prim_func
    def main(A: T.Tensor((128, 64), "float16"), O: T.Tensor((32, 32), "float32")):
        with T.Kernel(1, threads=128) as bx:
            s = T.alloc_shared((32, 64), "float16")
            w = T.view(s, dtype="float32")
            acc = T.alloc_fragment((32, 32), "float32")
            T.clear(acc)
            for k in T.Pipelined(4, num_stages=2):
                T.copy(A[k * 32, 0], s)
                for i, j in T.Parallel(32, 32):
                    acc[i, j] += w[i, j]
            T.copy(acc, O)

    src = tilex.compile(main, target="sm_90a").get_kernel_source()
    assert "cp_async" not in src


@pytest.mark.gpu
def test_shared_views_gpu():
    torch = pytest.importorskip("torch")
    a = torch.randn(32, 64, device="cuda").to(torch.bfloat16)
    b = torch.randn(64, 64, device="cuda").to(torch.bfloat16)
    w, c = tilex.compile(_gemm_operand_as_words(), out_idx=[2, 3])(a, b)
    assert torch.equal(w, a.view(torch.float32))
    torch.testing.assert_close(c, a.float() @ b.float(), atol=1e-2, rtol=1e-2)
    want = torch.randn(32, 64, device="cuda").to(torch.bfloat16)  # words whose halves are ordinary bfloat16 values
    x = want.view(torch.float32).reshape(16, 64)
    o, c = tilex.compile(_words_through_a_view(), out_idx=[2, 3])(x, b)
    assert torch.equal(o, want)
    torch.testing.assert_close(c, o.float() @ b.float(), atol=1e-2, rtol=1e-2)


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
