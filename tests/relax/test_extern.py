"""tilex.relax.extern by hand: a tile program with an output (call_kernel) and one that writes into its argument
(call_kernel_inplace) in a Relax function, built for sm_90a, run on the GPU."""
import pytest
import tvm
from tvm import relax, tirx

import tilex
import tilex.language as T
import tilex.relax as tr


def add_into(cols=64):
    """Y += X in place (no output), rows symbolic."""
    m = T.dynamic("m")

    @T.prim_func
    def add(X: T.Tensor((m, cols), "float32"), Y: T.Tensor((m, cols), "float32")):
        with T.Kernel(T.ceildiv(m, 32), threads=128) as bx:
            for i, j in T.Parallel(32, cols):
                if bx * 32 + i < m:
                    Y[bx * 32 + i, j] = Y[bx * 32 + i, j] + X[bx * 32 + i, j]

    return add


def double(cols=64):
    m = T.dynamic("m")

    @T.prim_func
    def dbl(X: T.Tensor((m, cols), "float32"), Y: T.Tensor((m, cols), "float32")):
        with T.Kernel(T.ceildiv(m, 32), threads=128) as bx:
            for i, j in T.Parallel(32, cols):
                if bx * 32 + i < m:
                    Y[bx * 32 + i, j] = X[bx * 32 + i, j] * 2.0

    return dbl


def _module(target):
    """main(x, y) = (2 x) added in place into a fresh copy of y... computed as y + 1 first."""
    add = tr.compile_extern(add_into(), "add_into", out_idx=None, target=target)
    dbl = tr.compile_extern(double(), "double", target=target)
    m = tirx.Var("m", "int64")
    ty = relax.TensorType([m, 64], "float32")
    x, y = relax.Var("x", ty), relax.Var("y", ty)
    bb = relax.BlockBuilder()
    with bb.function("main", [x, y]):
        with bb.dataflow():
            x2 = bb.emit(tr.call_kernel(dbl, [x], [ty]))
            acc = bb.emit(relax.op.add(y, relax.const(1.0, "float32")))  # a value of its own to write into
            out = bb.emit_output(bb.emit(tr.call_kernel_inplace(add, [x2, acc], [ty, ty], 1)))
        bb.emit_func_output(out)
    return tr.attach_kernels(bb.get(), [add, dbl]), add, dbl


def test_inplace_call_builds_and_bad_uses_are_refused():
    target = tilex.env.resolve_target("sm_90a")
    mod, add, dbl = _module(target)
    text = mod["main"].script()
    assert "R.call_inplace_packed" in text and "inplace_indices=[1]" in text
    tvm.compile(mod, target=target)
    ty = relax.TensorType([4, 64], "float32")
    v = relax.Var("v", ty)
    with pytest.raises(ValueError, match="has outputs"):
        tr.call_kernel_inplace(dbl, [v], [ty], 0)
    with pytest.raises(ValueError, match="must name tensor arguments"):
        tr.call_kernel_inplace(add, [v, v], [ty, ty], 2)
    with pytest.raises(ValueError, match="takes 2 arguments"):
        tr.call_kernel_inplace(add, [v], [ty], 0)


@pytest.mark.gpu
def test_inplace_call_runs():
    torch = pytest.importorskip("torch")
    mod, _, _ = _module(tilex.env.resolve_target("auto"))
    vm = relax.VirtualMachine(tvm.compile(mod, target=tilex.env.resolve_target("auto")), tvm.cuda(0))
    for rows in (1, 33, 200):
        x = torch.randn(rows, 64, device="cuda")
        y = torch.randn(rows, 64, device="cuda")
        y0 = y.clone()
        got = torch.from_dlpack(vm["main"](tvm.runtime.from_dlpack(x), tvm.runtime.from_dlpack(y)))
        torch.testing.assert_close(got, 2 * x + y0 + 1)
        torch.testing.assert_close(y, y0)  # the caller's y was not written
