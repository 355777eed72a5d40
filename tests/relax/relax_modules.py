"""Relax modules for the offload tests."""
from tvm.script import ir as I
from tvm.script import relax as R


def norm_linear_softmax_linear():
    """rms_norm -> linear (weight (N, K), transposed) -> softmax -> matmul (weight (K, N)) -> relu; the batch and
    sequence sizes symbolic."""

    @I.ir_module
    class Mod:
        @R.function
        def main(x: R.Tensor(("b", "s", 256), "float16"), w: R.Tensor((512, 256), "float16"),
                 g: R.Tensor((256,), "float16"), w2: R.Tensor((512, 256), "float16")):
            with R.dataflow():
                y = R.nn.rms_norm(x, g, axes=[-1], epsilon=1e-6)
                wt = R.permute_dims(w, axes=[1, 0])
                z = R.matmul(y, wt)
                p = R.nn.softmax(z, axis=-1)
                q = R.matmul(p, w2)
                r = R.nn.relu(q)
                R.output(r)
            return r

    return Mod


def decode_linear():
    """One row (decode): x (1, 256) @ w^T with w (768, 256)."""

    @I.ir_module
    class Mod:
        @R.function
        def main(x: R.Tensor((1, 256), "float16"), w: R.Tensor((768, 256), "float16")):
            with R.dataflow():
                y = R.matmul(x, R.permute_dims(w, axes=[1, 0]))
                R.output(y)
            return y

    return Mod


def left_alone():
    """Operators the offload must leave to TVM: an fp32 matmul, a softmax over the first axis, an rms_norm over
    two axes."""

    @I.ir_module
    class Mod:
        @R.function
        def main(a: R.Tensor((64, 64), "float32"), b: R.Tensor((64, 64), "float32"),
                 h: R.Tensor((64, 64), "float16"), g: R.Tensor((64, 64), "float16")):
            with R.dataflow():
                c = R.matmul(a, b)
                d = R.nn.softmax(h, axis=0)
                e = R.nn.rms_norm(h, g, axes=[0, 1], epsilon=1e-5)
                R.output(c, d, e)
            return (c, d, e)

    return Mod


def layer_norm_gelu():
    """layer_norm over the last axis (rows symbolic), then a GELU TVM keeps."""

    @I.ir_module
    class Mod:
        @R.function
        def main(x: R.Tensor(("n", 384), "float16"), g: R.Tensor((384,), "float16"), b: R.Tensor((384,), "float16")):
            with R.dataflow():
                y = R.nn.layer_norm(x, g, b, axes=[-1], epsilon=1e-5)
                z = R.nn.gelu(y)
                R.output(z)
            return z

    return Mod
