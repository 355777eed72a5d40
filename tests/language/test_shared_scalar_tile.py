"""A one-element shared tile (a block-wide scalar, as TileLang's top-k programs keep a threshold) lives in static
shared memory beside the dynamic tiles (TVM 0.27's merge of dynamic tiles fails on a one-element one)."""
import pytest

import tilex
import tilex.language as T


def threshold_program():
    @T.prim_func
    def main(X: T.Tensor((256,), "float32"), O: T.Tensor((256,), "float32")):
        with T.Kernel(1, threads=256) as bx:
            s = T.alloc_shared((256,), "float32")
            thr = T.alloc_shared([1], "float32")
            tx = T.get_thread_binding()
            s[tx] = X[tx]
            if tx == 0:
                thr[0] = X[0]
            T.sync_threads()
            O[tx] = T.if_then_else(s[tx] > thr[0], s[tx], 0.0)

    return main


def test_one_element_tile_is_static_shared_memory():
    src = tilex.compile(threshold_program(), target="sm_90a").get_kernel_source()
    assert "__shared__ alignas(64) float thr_ptr[1];" in src and "extern __shared__" in src


@pytest.mark.gpu
def test_one_element_tile_on_the_gpu():
    import torch

    k = tilex.compile(threshold_program())
    x = torch.randn(256, device="cuda")
    o = torch.empty_like(x)
    k(x, o)
    torch.testing.assert_close(o, torch.where(x > x[0], x, torch.zeros_like(x)))
