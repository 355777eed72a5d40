"""T.get_thread_binding: the thread index of the enclosing T.Kernel, as in TileLang."""
import pytest

import tilex
import tilex.language as T


def test_thread_binding_indexes_a_simt_loop():
    @T.prim_func
    def scale(A: T.Tensor((256,), "float32")):
        with T.Kernel(2, threads=128) as bx:
            tx = T.get_thread_binding()
            A[bx * 128 + tx] = A[bx * 128 + tx] * T.float32(2)

    src = tilex.compile(scale, target="sm_90a").get_kernel_source()
    assert "threadIdx.x" in src


def test_thread_binding_outside_a_kernel_is_an_error():
    with pytest.raises(ValueError, match="inside `with T.Kernel"):
        T.get_thread_binding()
