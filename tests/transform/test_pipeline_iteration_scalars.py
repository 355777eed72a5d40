"""A per-iteration scalar at the top of a T.Pipelined body (``j = k + off``, TileLang's spelling) is read as its
value, so the copies that index through it are loaded ahead (cp.async); a value carried from the previous
iteration keeps the loop serial. CPU: generated CUDA; gpu: values."""
import numpy as np
import pytest

import tilex
import tilex.language as T

ROWS, COLS, STEPS = 40, 64, 8


def shifted_rows(carried=False, read_after=False):
    """O[i] = sum over k of X[k + 3, i]. carried=True: j advances from its previous value instead (a T.alloc_var
    set before the loop); read_after=True: the last j is written to L after the loop."""

    @T.prim_func
    def main(X: T.Tensor((ROWS, COLS), "float32"), O: T.Tensor((COLS,), "float32"), L: T.Tensor((1,), "int32")):
        with T.Kernel(1, threads=64) as bx:
            off = bx + 3
            s = T.alloc_shared((1, COLS), "float32")
            acc = T.alloc_fragment((COLS,), "float32")
            T.clear(acc)
            if carried:
                j = T.alloc_var("int32")
                j = off - 1
                for k in T.Pipelined(STEPS, num_stages=2):
                    j = j + 1
                    T.copy(X[j, 0], s)
                    for i in T.Parallel(COLS):
                        acc[i] += s[0, i]
                L[0] = j
            else:
                for k in T.Pipelined(STEPS, num_stages=2):
                    j = k + off
                    T.copy(X[j, 0], s)
                    for i in T.Parallel(COLS):
                        acc[i] += s[0, i]
                    if read_after:
                        L[0] = j
            T.copy(acc, O)

    return main


def cuda(func):
    return tilex.compile(func, target="sm_90a").get_kernel_source()


@pytest.mark.parametrize("read_after", [False, True])
def test_copies_indexed_by_an_iteration_scalar_are_loaded_ahead(read_after):
    src = cuda(shifted_rows(read_after=read_after))
    assert "cp_async" in src and "(k + 1)" in src
    assert "j_ptr[0] = " not in src  # every read of j is its value


def test_a_value_carried_across_iterations_keeps_the_loop_serial():
    src = cuda(shifted_rows(carried=True))
    assert "cp_async" not in src


@pytest.mark.gpu
@pytest.mark.parametrize("carried", [False, True])
def test_values(carried):
    import torch

    x = torch.randn(ROWS, COLS, device="cuda")
    o = torch.empty(COLS, device="cuda")
    last = torch.zeros(1, device="cuda", dtype=torch.int32)
    tilex.compile(shifted_rows(carried=carried, read_after=True))(x, o, last)
    np.testing.assert_allclose(o.cpu().numpy(), x[3:3 + STEPS].sum(0).cpu().numpy(), rtol=1e-5, atol=1e-5)
    assert int(last) == 3 + STEPS - 1


def big_tile_rows():
    """The shifted-rows sum over a 176 KB tile: one stage fits a block, two do not."""
    rows, cols = 176, 256

    @T.prim_func
    def main(X: T.Tensor((rows * 12, cols), "float32"), O: T.Tensor((cols,), "float32")):
        with T.Kernel(1, threads=256) as bx:
            off = bx * rows
            s = T.alloc_shared((rows, cols), "float32")
            acc = T.alloc_fragment((cols,), "float32")
            T.clear(acc)
            for k in T.Pipelined(8, num_stages=2):
                j = k * rows + off
                T.copy(X[j, 0], s)
                for i in T.Parallel(cols):
                    acc[i] += s[3, i]
            T.copy(acc, O)

    return main


def test_a_pipeline_that_would_not_fit_leaves_the_loop_as_written():
    # two stages of the tile are 352 KB: the iteration scalar is left alone and the loop runs as before (it fits)
    src = cuda(big_tile_rows())
    assert "cp_async" not in src
