"""Relax modules for the offload tests."""
from tvm.script import ir as I
from tvm.script import relax as R
from tvm.script import tirx as T


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


def rope_tables():
    """RoPE (rotate-half) on a (b, s, 4, 64) input with one table row per row ((b, s, 1, 64); b and s symbolic),
    and on the same input with a per-head table ((s, 4, 64)), which the offload leaves to TVM."""

    @I.ir_module
    class Mod:
        @R.function
        def main(u: R.Tensor(("b", "s", 4, 64), "float16"), cos: R.Tensor(("b", "s", 1, 64), "float16"),
                 sin: R.Tensor(("b", "s", 1, 64), "float16")):
            with R.dataflow():
                h = R.split(u, 2, axis=-1)
                r = R.concat((R.negative(h[1]), h[0]), axis=-1)
                y = R.add(R.multiply(u, cos), R.multiply(r, sin))
                R.output(y)
            return y

        @R.function
        def per_head(u: R.Tensor((2, 8, 4, 64), "float16"), cos: R.Tensor((8, 4, 64), "float16"),
                     sin: R.Tensor((8, 4, 64), "float16")):
            with R.dataflow():
                h = R.split(u, 2, axis=-1)
                r = R.concat((R.negative(h[1]), h[0]), axis=-1)
                y = R.add(R.multiply(u, cos), R.multiply(r, sin))
                R.output(y)
            return y

    return Mod


def split_parts():
    """A (n, 2, 3, 64) tensor split unevenly along axis 1 of its (n, 6, 64) reshape, each part through a ReLU."""

    @I.ir_module
    class Mod:
        @R.function
        def main(x: R.Tensor(("n", 384), "float16")):
            n = T.int64()
            with R.dataflow():
                v = R.reshape(x, R.shape([n, 6, 64]))
                p = R.split(v, [1, 4], axis=1)
                a = R.nn.relu(p[0])
                b = R.nn.relu(p[1])
                c = R.nn.relu(p[2])
                R.output(a, b, c)
            return (a, b, c)

    return Mod


def kv_append():
    """A (b, 300, 4, 64) cache and one new token's (b, 1, 4, 64) concatenated along the sequence axis."""

    @I.ir_module
    class Mod:
        @R.function
        def main(cache: R.Tensor(("b", 300, 4, 64), "float16"), new: R.Tensor(("b", 1, 4, 64), "float16")):
            with R.dataflow():
                y = R.concat((cache, new), axis=1)
                R.output(y)
            return y

    return Mod


def mlp_bias_act():
    """A GPT-style MLP: linear with bias -> GELU -> linear with bias -> + residual, then a linear with bias ->
    ReLU, and a linear -> SiLU without bias; rows symbolic."""

    @I.ir_module
    class Mod:
        @R.function
        def main(x: R.Tensor(("n", 256), "float16"), w1: R.Tensor((1024, 256), "float16"),
                 b1: R.Tensor((1024,), "float16"), w2: R.Tensor((256, 1024), "float16"),
                 b2: R.Tensor((256,), "float16"), w3: R.Tensor((256, 512), "float16"),
                 b3: R.Tensor((1, 512), "float16")):
            with R.dataflow():
                h = R.nn.gelu(R.add(R.matmul(x, R.permute_dims(w1, axes=[1, 0])), b1))
                y = R.add(R.matmul(h, R.permute_dims(w2, axes=[1, 0])), b2)
                r = R.add(x, y)
                z = R.nn.relu(R.add(b3, R.matmul(r, w3)))
                u = R.nn.silu(R.matmul(r, w3))
                R.output(z, u)
            return (z, u)

    return Mod


def dequant_linear():
    """Linear layers with weights dequantized in the graph: int8 codes per channel (rows symbolic), uint8 codes in
    groups of 128 along K."""

    @I.ir_module
    class Mod:
        @R.function
        def main(x: R.Tensor(("n", 512), "float16"), q: R.Tensor((1024, 512), "int8"),
                 s: R.Tensor((1024, 1), "float16"), q2: R.Tensor((256, 1024), "uint8"),
                 s2: R.Tensor((256, 8, 1), "float16")):
            with R.dataflow():
                w = R.multiply(R.astype(q, "float16"), s)
                y = R.matmul(x, R.permute_dims(w, axes=[1, 0]))
                w2 = R.reshape(R.multiply(R.astype(R.reshape(q2, R.shape([256, 8, 128])), "float16"), s2),
                               R.shape([256, 1024]))
                z = R.matmul(y, R.permute_dims(w2, axes=[1, 0]))
                R.output(z)
            return z

    return Mod
